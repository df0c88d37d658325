//! Leadership transfer, the leader's half: handing the lead to a chosen
//! member (an operator's request, or a leader the new configuration leaves
//! out) without the election timeout a crash would cost, and without any
//! write being lost, for the target first holds all this leader logged.

use super::{Leader, Stage, Tracked};
use crate::ids::ServerId;
use crate::zab::{Message, State, Zab};

/// Leadership being handed to `to`, abandoned at `deadline` (in ticks).
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    to: ServerId,
    deadline: u64,
}

/// Why a leadership transfer cannot start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// Only an established leader can hand leadership over.
    #[error("this member is not the established leader")]
    NotLeader,
    /// The member named is this leader itself.
    #[error("member {0} already leads")]
    AlreadyLeads(ServerId),
    /// The member named is not a voting follower this leader has synced.
    #[error("member {0} is not a synced voting follower of this leader")]
    NotSynced(ServerId),
    /// No follower is synced, so none could take over.
    #[error("no follower is synced to take over")]
    NoFollower,
}

impl Leader {
    /// The member leadership is being handed to, if any.
    pub(in crate::zab) fn transferring_to(&self) -> Option<ServerId> {
        self.transfer.map(|t| t.to)
    }
}

impl Zab {
    /// Leader: starts handing leadership to `to`, or to the most caught-up
    /// synced follower. New proposals wait (see [`Zab::next_zxid`]); once the
    /// target holds everything this leader logged and all of it is committed,
    /// the leader tells its followers to look for a leader and nominates the
    /// target, which the election then picks without waiting for a timeout.
    /// Abandoned (proposals resume) if that does not happen within initLimit.
    /// A second call retargets the transfer.
    pub fn transfer_leadership(&mut self, to: Option<ServerId>) -> Result<ServerId, TransferError> {
        let (id, now, init_limit) = (self.config.id, self.now, self.config.init_limit_ticks);
        // The target must vote once any reconfiguration under way is done.
        let current = self.log.configuration().current();
        let State::Leading(l) = &mut self.state else { return Err(TransferError::NotLeader) };
        if !l.is_established() {
            return Err(TransferError::NotLeader);
        }
        let synced = |f: ServerId, t: &Tracked| current.is_voter(f) && t.stage == Stage::Synced;
        let target = match to {
            Some(to) if to == id => return Err(TransferError::AlreadyLeads(id)),
            Some(to) if l.followers.get(&to).is_some_and(|t| synced(to, t)) => to,
            Some(to) => return Err(TransferError::NotSynced(to)),
            None => l
                .followers
                .iter()
                .filter(|(f, t)| synced(**f, t))
                .max_by_key(|(id, t)| (t.acked, **id))
                .map(|(id, _)| *id)
                .ok_or(TransferError::NoFollower)?,
        };
        l.transfer = Some(Transfer { to: target, deadline: now + init_limit });
        tracing::info!(id, epoch = l.epoch, to = target, "handing leadership over");
        self.check_transfer();
        Ok(target)
    }

    /// Completes or abandons a transfer under way.
    pub(super) fn check_transfer(&mut self) {
        let State::Leading(Leader { transfer: Some(_), .. }) = &self.state else { return };
        let (last, committed, now) = (self.log.last_zxid(), self.committed, self.now);
        let Some(l) = self.leader() else { return };
        let Some(transfer) = l.transfer else { return };
        let target = l.followers.get(&transfer.to).filter(|t| t.stage == Stage::Synced);
        let caught_up = target.is_some_and(|t| t.acked >= last) && committed >= last;
        if caught_up {
            let epoch = l.epoch;
            for to in l.broadcast_targets() {
                self.send(to, Message::StepDown { epoch, to: transfer.to });
            }
            self.become_looking_nominating(transfer.to, "handed leadership over");
        } else if target.is_none() || now > transfer.deadline {
            l.transfer = None;
            tracing::warn!(
                epoch = l.epoch,
                to = transfer.to,
                "leadership transfer abandoned: the target did not catch up"
            );
        }
    }
}
