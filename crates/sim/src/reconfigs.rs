//! Membership changes inside the schedules: the leader is asked now and
//! then to move to a membership drawn from every peer, as an operator's
//! `zkctl admin member` would. Faults and the liveness check count quorums
//! of every configuration in force, not of the configuration files'. The
//! draws come from a stream of their own, so with reconfigurations off a
//! pinned seed replays the schedule it was found with.

use super::Simulation;
use crate::invariants::Violation;
use rand::Rng;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::members::{Configuration, Member, Membership, Participation};

impl Simulation {
    /// The membership every peer's configuration file gives.
    pub(super) fn initial_configuration(&self) -> Configuration {
        let voters: Vec<ServerId> = (1..=self.options.nodes).collect();
        let observers: Vec<ServerId> = (self.options.nodes + 1..=self.options.members()).collect();
        Configuration::initial(Membership::of_ids(&voters, &observers))
    }

    /// The newest committed configuration and every one an up replica acts on.
    fn configurations_in_force(&self) -> impl Iterator<Item = &Configuration> {
        let acted_on = self.nodes.values().filter_map(|n| n.replica.as_ref()).map(|r| r.zab().configuration());
        std::iter::once(self.oracle.configuration()).chain(acted_on)
    }

    /// Whether the ids `has` holds are a quorum of every configuration in force.
    pub(super) fn quorum_everywhere(&self, has: impl Fn(ServerId) -> bool) -> bool {
        self.configurations_in_force().all(|c| c.is_quorum(&has))
    }

    /// Whether one more voter may go down: in every membership in force,
    /// fewer than a minority of the voters are down now.
    pub(super) fn may_lose_a_voter(&self) -> bool {
        let up = |id: ServerId| self.nodes.get(&id).is_some_and(|n| n.replica.is_some());
        self.configurations_in_force().all(|c| {
            c.memberships().all(|m| {
                let voters: Vec<ServerId> = m.voters().collect();
                let down = voters.iter().filter(|id| !up(**id)).count();
                down < voters.len().saturating_sub(1) / 2
            })
        })
    }

    /// Now and then asks the serving leader to move to a new membership: 3
    /// or 5 voters (1 when there are too few peers) drawn from every peer,
    /// and perhaps an observer.
    pub(super) fn maybe_reconfigure(&mut self) -> Result<(), Violation> {
        if self.options.reconfig <= 0.0 || !self.reconfig_rng.random_bool(self.options.reconfig) {
            return Ok(());
        }
        let Some((leader, _)) = self.awake_serving_leader() else { return Ok(()) };
        let mut pool: Vec<ServerId> = (1..=self.options.peers()).collect();
        let voters = if pool.len() >= 5 && self.reconfig_rng.random_bool(0.3) { 5 } else { 3.min(pool.len()) };
        let mut members = Vec::new();
        for i in 0..voters + 1 {
            if pool.is_empty() {
                break;
            }
            let id = pool.swap_remove(self.reconfig_rng.random_range(0..pool.len()));
            // The draw after the voters is an observer, half the time.
            if i == voters && self.reconfig_rng.random_bool(0.5) {
                break;
            }
            let participation = if i < voters { Participation::Participant } else { Participation::Observer };
            members.push(Member {
                id,
                participation,
                peer_address: String::new(),
                client_address: String::new(),
                endpoints: Default::default(),
            });
        }
        let Ok(next) = Membership::new(members) else { return Ok(()) };
        let Some(replica) = self.nodes.get_mut(&leader).and_then(|n| n.replica.as_mut()) else { return Ok(()) };
        match replica.propose_membership(next) {
            Ok(_) => self.report.reconfigs += 1,
            Err(_) => self.report.reconfigs_refused += 1,
        }
        self.drain(leader)
    }
}
