//! Leadership transfers asked of the leader now and then, as an operator's
//! `zkctl admin leader transfer` or a SIGTERM would. Their draws come from a
//! stream of their own, so with transfers off a pinned seed replays the
//! schedule it was found with.

use super::Simulation;
use crate::invariants::Violation;
use rand::Rng;
use zabkeeper_core::ids::{Epoch, ServerId};
use zabkeeper_core::zab::Role;

impl Simulation {
    /// The serving leader and its epoch, unless it is paused.
    pub(super) fn awake_serving_leader(&self) -> Option<(ServerId, Epoch)> {
        self.nodes.values().find_map(|n| {
            let status = n.replica.as_ref()?.status();
            let awake = !(n.paused && n.stalled_until > self.step);
            (status.role == Role::Leading && status.serving && awake).then_some((n.id, status.epoch))
        })
    }

    /// Now and then asks the serving leader to hand leadership over.
    pub(super) fn maybe_transfer(&mut self) -> Result<(), Violation> {
        if self.options.transfer <= 0.0 || !self.transfer_rng.random_bool(self.options.transfer) {
            return Ok(());
        }
        let Some((leader, epoch)) = self.awake_serving_leader() else { return Ok(()) };
        // Half the time the operator names a member (perhaps the leader
        // itself, or one that is down); otherwise the leader picks.
        let to = self.transfer_rng.random_bool(0.5).then(|| self.transfer_rng.random_range(1..=self.options.peers()));
        let Some(replica) = self.nodes.get_mut(&leader).and_then(|n| n.replica.as_mut()) else { return Ok(()) };
        match replica.transfer_leadership(to) {
            Ok(nominee) => {
                self.report.transfers += 1;
                self.transfer_pending = Some((nominee, epoch));
            }
            Err(_) => self.report.transfers_refused += 1,
        }
        self.drain(leader)
    }

    /// A leader was established: if a transfer was under way before its
    /// epoch, counts whether the nominee got it.
    pub(super) fn transfer_landed(&mut self, leader: ServerId, epoch: Epoch) {
        let Some((nominee, from_epoch)) = self.transfer_pending else { return };
        if epoch <= from_epoch {
            return;
        }
        self.transfer_pending = None;
        if leader == nominee {
            self.report.handovers += 1;
        } else {
            self.report.handovers_missed += 1;
        }
    }
}
