//! Durability on the peer: no promise (ACKEPOCH, an ACK, a leader's own
//! LEADERINFO) leaves before the storage operation it vouches for is durable,
//! which is what lets a member crash and come back without unsaying one. The
//! words storage speaks ([`StorageOp`], [`super::Durable`]) are in `vocab`;
//! `storage` implements them on sled and in memory.

use super::{Action, Io, Message, State, StorageOp, Zab};
use crate::ids::{Epoch, ServerId};

/// Durability on the peer: every promise waits for the storage operation it depends on.
impl Zab {
    pub(super) fn persist(&mut self, op: StorageOp) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let StorageOp::Append(entries) = &op {
            if let Some(last) = entries.last() {
                self.appends_in_flight.push_back((seq, last.zxid));
            }
        }
        self.outbox.push(Action::Io(Io::Persist { seq, op }));
        seq
    }

    /// Promises never to accept an older epoch (Zab's acceptedEpoch), durably.
    pub(super) fn set_accepted_epoch(&mut self, epoch: Epoch) -> u64 {
        assert!(epoch >= self.accepted_epoch, "acceptedEpoch would go back from {} to {epoch}", self.accepted_epoch);
        self.accepted_epoch = epoch;
        self.persist(StorageOp::SetAcceptedEpoch(epoch))
    }

    /// Records the epoch whose history this replica now holds (currentEpoch), durably.
    pub(super) fn set_current_epoch(&mut self, epoch: Epoch) -> u64 {
        assert!(
            self.current_epoch <= epoch && epoch <= self.accepted_epoch,
            "currentEpoch {epoch} out of order (current {}, accepted {})",
            self.current_epoch,
            self.accepted_epoch
        );
        self.current_epoch = epoch;
        self.persist(StorageOp::SetCurrentEpoch(epoch))
    }

    /// Sends `msg` once storage operation `seq` is durable (it promises what that made durable).
    pub(super) fn after_durable(&mut self, seq: u64, to: ServerId, msg: Message) {
        if seq <= self.durable_seq {
            self.send(to, msg);
        } else {
            self.deferred.push_back((seq, to, msg));
        }
    }

    /// Whether `msg`, an ACK to `to` being released up to `seq`, is followed
    /// by another released ACK to the same peer in the same epoch.
    fn superseded_by_next(&self, seq: u64, to: ServerId, msg: &Message) -> bool {
        let Message::Ack { epoch, .. } = msg else { return false };
        self.deferred.front().is_some_and(|(s, next_to, next)| {
            *s <= seq && *next_to == to && matches!(next, Message::Ack { epoch: e, .. } if e == epoch)
        })
    }

    /// Storage operation `seq` is durable: releases what waited for it.
    pub(super) fn on_persisted(&mut self, seq: u64) {
        if seq <= self.durable_seq {
            return;
        }
        self.durable_seq = seq;
        while let Some((s, zxid)) = self.appends_in_flight.front().copied() {
            if s > seq {
                break;
            }
            self.appends_in_flight.pop_front();
            self.durable_zxid = self.durable_zxid.max(zxid);
        }
        // An ACK is cumulative (it vouches for the whole log up to its zxid),
        // so of adjacent ACKs released together only the last is sent. A
        // follower whose disk stalled for a while (a snapshot being written)
        // otherwise sent one ACK per PROPOSAL received meanwhile, all at
        // once: thousands, more than its stream to the leader queues, which
        // then dropped the stream and the follower's clients with it.
        while self.deferred.front().is_some_and(|(s, _, _)| *s <= seq) {
            let Some((_, to, msg)) = self.deferred.pop_front() else { break };
            if !self.superseded_by_next(seq, to, &msg) {
                self.send(to, msg);
            }
        }
        match &self.state {
            State::Leading(_) => self.leader_on_persisted(),
            State::Following(_) | State::Looking(_) => {}
        }
    }
}
