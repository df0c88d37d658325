//! Linearizable reads by read index, as etcd's ReadIndex: a read is answered
//! from the local tree once (1) the leader has confirmed it still leads, by a
//! leadership probe that a quorum of the configuration in force echoed and
//! that was sent after the read arrived, and (2) this replica has applied the
//! leader's commit point as of the read's arrival at the leader.
//!
//! Why that is enough: a probe echoed by a quorum proves no later epoch had
//! committed anything when the echoes were sent (a member that accepted a
//! later epoch never answers this one), so the leader's commit point holds
//! every write acknowledged to any client before the read began. No clock is
//! trusted: a lease would be unsafe under the pauses and clock jumps the
//! simulation injects, and a probe costs one round trip the reads share.
//!
//! A follower's round is itself that follower's echo: it was sent, in the
//! leader's epoch, after the reads it carries arrived. Where the leader and
//! the asking follower alone are a quorum (three voters), the leader answers
//! the round at once, with no probe: one round trip per follower read.
//! (Tried: two rounds in flight per follower. One read in flight per session
//! went 5 % faster for 5 % more CPU per read; not kept.)
//!
//! Cost is per round, not per read, and a probe costs no message under load.
//! The leader asks one probe per turn in which reads arrived; Zab puts it on
//! the turn's REPLYs to followers (the answers to their rounds), and sends a
//! PING only to a follower that gets none and owes no echo of an earlier
//! probe (`zab::leader`, "Leadership probes"). A follower echoes it on its
//! next round's REQUEST. So while followers ask rounds, the leader's own
//! reads are confirmed by them. A follower keeps at most one round in
//! flight to the leader: the reads that arrive meanwhile wait together for
//! the next. Probes and rounds are asked in [`ReadIndex::flush`], once per
//! turn of the host (as its outputs are taken), not as the first read
//! arrives: every read that arrived in the turn rides the same one, where
//! asking at the first read left the others of its turn a round behind.
//! Nothing is sent earlier either way: messages leave at the end of a turn.
//! A host that knows more reads are on their way may gather them before it
//! ends the turn: [`ReadIndex::due`] says a probe or round waits to be asked
//! (the server then yields to its connections' tasks, up to four times).
//!
//! A barrier that cannot be confirmed (no quorum) is never answered: the
//! client's request times out, and when the member stops serving its
//! connections close (ConnectionLoss), as a sync's do. Never stale data.

use super::forward::{self, ToFollower, ToLeader};
use crate::ids::{ServerId, SessionId, Zxid};
use crate::zab::Zab;
use std::collections::VecDeque;

/// A read waiting for its barrier: the session and the queue's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Barrier {
    /// The session.
    pub session: SessionId,
    /// The tag of the read's barrier in its connection's queue.
    pub cxid: i32,
}

/// A barrier answered: the read may go once the tree has applied `zxid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cleared {
    /// Whose read.
    pub barrier: Barrier,
    /// The leader's commit point when the read reached it.
    pub zxid: Zxid,
}

/// Who waits for a probe on the leader.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    /// A read of a session attached to the leader.
    Local(Barrier),
    /// A follower's round.
    Follower { id: ServerId, round: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Confirming {
    probe: u64,
    /// The commit point when the barrier arrived.
    index: Zxid,
    waiter: Waiter,
}

/// A follower's round asked of the leader and not yet answered.
#[derive(Debug)]
struct Round {
    number: u64,
    barriers: Vec<Barrier>,
}

/// Read-index barriers on this replica, as leader and as follower.
#[derive(Debug, Default)]
pub struct ReadIndex {
    /// Leader: barriers waiting for their probe, in probe order.
    confirming: VecDeque<Confirming>,
    /// Leader: barriers waiting for a probe to be asked (at the flush);
    /// their probe number is not yet known.
    held: Vec<Confirming>,
    /// Follower: the round in flight.
    in_flight: Option<Round>,
    /// Follower: barriers for the next round.
    next: Vec<Barrier>,
    /// Follower: the last round number asked.
    rounds: u64,
    /// Follower: rounds the leader answered, ever.
    answered_total: u64,
    /// Local reads cleared, ever.
    cleared: u64,
    /// Probes (leader) and rounds (follower) asked for reads, ever.
    asked_total: u64,
}

impl ReadIndex {
    /// Forgets every barrier (this member stopped serving: its connections close).
    pub fn clear(&mut self) {
        self.confirming.clear();
        self.held.clear();
        self.in_flight = None;
        self.next.clear();
    }

    /// Reads cleared and rounds asked, since start: reads per round is what
    /// batching achieves.
    pub fn counts(&self) -> (u64, u64) {
        (self.cleared, self.asked_total)
    }

    /// Follower: the round in flight, if any, and how many rounds the leader
    /// has answered since start. A host that notes when each round first
    /// shows here times rounds without a clock in the replica.
    pub fn round_progress(&self) -> (Option<u64>, u64) {
        (self.in_flight.as_ref().map(|r| r.number), self.answered_total)
    }

    /// Whether the next flush would ask a probe (for this leader's reads, or
    /// followers' rounds it cannot answer alone) or a round: false when it
    /// could not, so a host that gathers reads for it does not wait for one
    /// that never goes.
    pub fn due(&self, zab: &Zab) -> bool {
        (!self.held.is_empty() && zab.is_established_leader())
            || (self.in_flight.is_none() && !self.next.is_empty() && zab.can_forward())
    }

    /// Barriers not yet answered.
    pub fn pending(&self) -> usize {
        let local = self.confirming.iter().chain(&self.held).filter(|c| matches!(c.waiter, Waiter::Local(_))).count();
        local + self.in_flight.as_ref().map_or(0, |r| r.barriers.len()) + self.next.len()
    }

    /// Leader: a read of a session attached here. False unless this member
    /// is an established leader (the caller fails the read).
    pub fn lead(&mut self, zab: &Zab, barrier: Barrier) -> bool {
        self.confirm(zab, Waiter::Local(barrier))
    }

    /// Leader: a follower asked for round `round`.
    pub fn forwarded(&mut self, zab: &mut Zab, from: ServerId, round: u64) {
        // The round itself is the follower's echo, sent after its reads
        // arrived: with three voters it and this leader are a quorum, and the
        // round needs no probe. (Its epoch was checked as it arrived.)
        if zab.is_quorum_with(from) {
            let zxid = zab.last_committed();
            zab.reply(from, forward::encode(&ToFollower::ReadIndexDone { round, zxid }));
            return;
        }
        // Unconfirmable here (not established): the follower's round waits
        // until it stops following this member.
        self.confirm(zab, Waiter::Follower { id: from, round });
    }

    fn confirm(&mut self, zab: &Zab, waiter: Waiter) -> bool {
        if !zab.is_established_leader() {
            return false;
        }
        // The commit point now, when the barrier arrives; the probe that
        // confirms it is sent later still (at the flush, or after the one in
        // flight).
        self.held.push(Confirming { probe: 0, index: zab.last_committed(), waiter });
        true
    }

    /// Leader: a quorum confirmed every probe up to `probe`. Followers'
    /// rounds are answered; the local reads cleared are returned. The
    /// barriers held meanwhile get their probe at the next flush.
    pub fn confirmed(&mut self, zab: &mut Zab, probe: u64) -> Vec<Cleared> {
        let mut cleared = Vec::new();
        while let Some(c) = self.confirming.front().filter(|c| c.probe <= probe).copied() {
            self.confirming.pop_front();
            match c.waiter {
                Waiter::Local(barrier) => cleared.push(Cleared { barrier, zxid: c.index }),
                Waiter::Follower { id, round } => {
                    zab.reply(id, forward::encode(&ToFollower::ReadIndexDone { round, zxid: c.index }));
                }
            }
        }
        self.cleared += cleared.len() as u64;
        cleared
    }

    /// Asks what this turn's barriers wait for, if nothing is in flight:
    /// the leader's probe, or the follower's round. Called as the host takes
    /// the outputs: at least once per turn, after all of its inputs.
    pub fn flush(&mut self, zab: &mut Zab) {
        if !self.held.is_empty() {
            // Sent after every held barrier arrived: it may confirm them.
            match zab.confirm_leadership() {
                Some(next) => {
                    debug_assert!(self.confirming.back().is_none_or(|c| c.probe <= next), "probes are asked in order");
                    // Turns whose reads share a probe not yet sent count once.
                    if self.confirming.back().is_none_or(|c| c.probe < next) {
                        self.asked_total += 1;
                    }
                    self.confirming.extend(self.held.drain(..).map(|c| Confirming { probe: next, ..c }));
                }
                // Not reached while `confirm` checks the same: were it, they
                // would wait until this member stops serving and its
                // connections close.
                None => tracing::debug!(held = self.held.len(), "reads held for a probe no leader can send"),
            }
        }
        if self.in_flight.is_none() && !self.next.is_empty() && !self.ask(zab) {
            // The leader cannot be asked: these wait until this member stops
            // following it and its connections close.
            tracing::debug!(waiting = self.next.len(), "a read-index round could not be asked");
        }
    }

    /// Follower (or observer): a read of a session attached here. It joins
    /// the next round, asked at the flush unless one is in flight. False if
    /// the leader cannot be asked (the caller fails the read).
    pub fn follow(&mut self, zab: &Zab, barrier: Barrier) -> bool {
        if !zab.can_forward() {
            return false;
        }
        self.next.push(barrier);
        true
    }

    /// Asks the next round for the barriers waiting. False if the leader
    /// cannot be asked.
    fn ask(&mut self, zab: &mut Zab) -> bool {
        let number = self.rounds + 1;
        if !zab.forward(forward::encode(&ToLeader::ReadIndex { round: number })) {
            return false;
        }
        self.rounds = number;
        self.asked_total += 1;
        self.in_flight = Some(Round { number, barriers: std::mem::take(&mut self.next) });
        true
    }

    /// Follower: the leader answered round `round` with its commit point.
    /// Returns the reads it clears; the next round is asked at the flush.
    pub fn answered(&mut self, round: u64, zxid: Zxid) -> Vec<Cleared> {
        let Some(r) = self.in_flight.take_if(|r| r.number == round) else {
            tracing::debug!(round, "a read-index answer for no round in flight");
            return Vec::new();
        };
        self.cleared += r.barriers.len() as u64;
        self.answered_total += 1;
        r.barriers.into_iter().map(|barrier| Cleared { barrier, zxid }).collect()
    }
}
