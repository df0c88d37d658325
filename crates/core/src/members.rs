//! The ensemble's membership as replicated state: who votes, who observes,
//! and how a change from one membership to the next is made safe.
//!
//! A reconfiguration is two transactions, as Raft's joint consensus: the
//! first (`TxnBody::Reconfig`) enters the joint configuration,
//! in which every decision (a commit, an election, a leader's establishment)
//! needs a majority of the old voters *and* one of the new; the second
//! (`TxnBody::ReconfigComplete`), which the leader proposes
//! once the first is committed, leaves it for the new voters alone. A
//! member acts on a configuration as soon as its log holds the entry, not
//! when it is committed, so any two quorums that decide something overlap
//! whichever of the configurations each member had reached. ZooKeeper
//! activates a configuration only when committed and has had bugs there
//! (ZOOKEEPER-2172, -2202); a log-held configuration is what Raft proves safe.

use crate::ids::{ServerId, Zxid};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a member takes part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Participation {
    /// Votes, may lead, counts toward quorums.
    Participant,
    /// Takes every commit and serves clients; never votes nor counts.
    Observer,
}

impl Participation {
    /// ZooKeeper's word for it in a dynamic configuration line.
    pub fn name(self) -> &'static str {
        match self {
            Participation::Participant => "participant",
            Participation::Observer => "observer",
        }
    }
}

/// One member: its id, how it takes part, and where it is reached.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The server id (ZooKeeper's `server.N`).
    pub id: ServerId,
    /// Voter or observer.
    pub participation: Participation,
    /// Where members reach it, carried verbatim: the runtime's business
    /// (`host:peer:election` in ZooKeeper's form).
    pub peer_address: String,
    /// Where clients reach it, carried verbatim (`[host:]port`).
    pub client_address: String,
}

impl Member {
    /// Whether it votes.
    pub fn votes(&self) -> bool {
        self.participation == Participation::Participant
    }
}

impl fmt::Display for Member {
    /// ZooKeeper's dynamic configuration line: `server.N=peer:role;client`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server.{}={}:{};{}", self.id, self.peer_address, self.participation.name(), self.client_address)
    }
}

/// A set of members, sorted by id, each id once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Membership {
    members: Vec<Member>,
}

/// Why a list of members is not a membership.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// No member votes: nothing could ever be decided.
    #[error("a configuration needs at least one voting member")]
    NoVoter,
    /// An id appears twice.
    #[error("member {0} appears more than once")]
    Duplicate(ServerId),
}

impl Membership {
    /// The members, checked: at least one voter, no id twice.
    pub fn new(mut members: Vec<Member>) -> Result<Membership, MembershipError> {
        members.sort_by_key(|m| m.id);
        if let Some(w) = members.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(MembershipError::Duplicate(w[0].id));
        }
        if !members.iter().any(Member::votes) {
            return Err(MembershipError::NoVoter);
        }
        Ok(Membership { members })
    }

    /// Voters and observers by id alone (addresses left blank): for the
    /// consensus core's tests and a configuration file's first membership.
    pub fn of_ids(voters: &[ServerId], observers: &[ServerId]) -> Membership {
        let member = |id: ServerId, participation| Member {
            id,
            participation,
            peer_address: String::new(),
            client_address: String::new(),
        };
        let mut members: Vec<Member> = voters.iter().map(|&id| member(id, Participation::Participant)).collect();
        members
            .extend(observers.iter().filter(|id| !voters.contains(id)).map(|&id| member(id, Participation::Observer)));
        members.sort_by_key(|m| m.id);
        members.dedup_by_key(|m| m.id);
        Membership { members }
    }

    /// Every member, by id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member with this id.
    pub fn get(&self, id: ServerId) -> Option<&Member> {
        self.members.binary_search_by_key(&id, |m| m.id).ok().map(|i| &self.members[i])
    }

    /// The voters' ids, ascending.
    pub fn voters(&self) -> impl Iterator<Item = ServerId> + '_ {
        self.members.iter().filter(|m| m.votes()).map(|m| m.id)
    }

    /// The observers' ids, ascending.
    pub fn observers(&self) -> impl Iterator<Item = ServerId> + '_ {
        self.members.iter().filter(|m| !m.votes()).map(|m| m.id)
    }

    /// Whether `id` votes.
    pub fn is_voter(&self, id: ServerId) -> bool {
        self.get(id).is_some_and(Member::votes)
    }

    /// The size of a majority of the voters.
    pub fn majority(&self) -> usize {
        self.voters().count() / 2 + 1
    }

    /// Whether the ids `has` holds include a majority of the voters.
    pub fn is_majority(&self, has: impl Fn(ServerId) -> bool) -> bool {
        self.voters().filter(|&id| has(id)).count() >= self.majority()
    }

    /// The highest value a majority of voters has reached, each voter's
    /// value given by `value` (None: not counted, as a voter that is not
    /// synced); None when no majority has any.
    pub fn majority_point<T: Ord + Copy>(&self, value: impl Fn(ServerId) -> Option<T>) -> Option<T> {
        let mut values: Vec<T> = self.voters().filter_map(&value).collect();
        values.sort_unstable_by(|a, b| b.cmp(a));
        values.get(self.majority() - 1).copied()
    }
}

impl fmt::Display for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

/// The configuration in force at a point of the history: a membership, or
/// two while a reconfiguration moves from one to the other.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Configuration {
    /// The zxid of the reconfiguration that made it (zero: the configuration
    /// file's, never reconfigured). ZooKeeper's `version=`.
    pub version: Zxid,
    /// The members deciding until the reconfiguration completes.
    pub active: Membership,
    /// The members a reconfiguration moves to; while set, every decision
    /// needs a majority of both.
    pub next: Option<Membership>,
}

impl Configuration {
    /// A configuration of one membership, as a configuration file gives it.
    pub fn initial(active: Membership) -> Configuration {
        Configuration { version: Zxid::ZERO, active, next: None }
    }

    /// The membership clients see: the one moved to, once decided.
    pub fn current(&self) -> &Membership {
        self.next.as_ref().unwrap_or(&self.active)
    }

    /// Whether a reconfiguration is under way (joint consensus).
    pub fn is_joint(&self) -> bool {
        self.next.is_some()
    }

    fn both(&self) -> impl Iterator<Item = &Membership> {
        std::iter::once(&self.active).chain(self.next.as_ref())
    }

    /// Whether `id` votes in either membership.
    pub fn is_voter(&self, id: ServerId) -> bool {
        self.both().any(|m| m.is_voter(id))
    }

    /// Whether `id` is a member of either, voting or not.
    pub fn is_member(&self, id: ServerId) -> bool {
        self.both().any(|m| m.get(id).is_some())
    }

    /// Every voter of either membership, ascending, once each.
    pub fn voters(&self) -> Vec<ServerId> {
        let mut ids: Vec<ServerId> = self.both().flat_map(|m| m.voters()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether the ids `has` holds are a quorum: a majority of every
    /// membership in force.
    pub fn is_quorum(&self, has: impl Fn(ServerId) -> bool) -> bool {
        self.both().all(|m| m.is_majority(&has))
    }

    /// The highest value a quorum has reached (the lowest of each
    /// membership's majority point).
    pub fn quorum_point<T: Ord + Copy>(&self, value: impl Fn(ServerId) -> Option<T>) -> Option<T> {
        self.both().map(|m| m.majority_point(&value)).min().flatten()
    }

    /// The configuration after a reconfiguration step logged at `zxid`.
    pub fn after(&self, zxid: Zxid, change: &Change) -> Configuration {
        match change {
            Change::Enter(next) => {
                Configuration { version: zxid, active: self.active.clone(), next: Some(next.clone()) }
            }
            Change::Complete => Configuration { version: self.version, active: self.current().clone(), next: None },
        }
    }

    /// ZooKeeper's dynamic configuration text, as `/zookeeper/config` holds
    /// it: one `server.N=` line per member of the current membership, then
    /// `version=` in hex.
    pub fn zookeeper_text(&self) -> String {
        format!("{}\nversion={:x}", self.current(), self.version.0)
    }
}

/// A step of a reconfiguration, as a transaction carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Enter the joint configuration toward this membership.
    Enter(Membership),
    /// Leave it: the membership moved to decides alone.
    Complete,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[ServerId], o: &[ServerId]) -> Membership {
        Membership::of_ids(v, o)
    }

    #[test]
    fn a_joint_quorum_needs_a_majority_of_both() {
        let old = Configuration::initial(ids(&[1, 2, 3], &[]));
        let joint = old.after(Zxid::new(1, 5), &Change::Enter(ids(&[3, 4, 5], &[])));
        assert!(joint.is_joint());
        assert_eq!(joint.version, Zxid::new(1, 5));
        // {1, 2} is a majority of the old voters only; {3, 4} of the new only.
        assert!(!joint.is_quorum(|id| id == 1 || id == 2));
        assert!(!joint.is_quorum(|id| id == 3 || id == 4));
        assert!(joint.is_quorum(|id| id == 2 || id == 3 || id == 4));
        let done = joint.after(Zxid::new(1, 6), &Change::Complete);
        assert!(!done.is_joint());
        assert_eq!(done.version, Zxid::new(1, 5), "completing keeps the reconfiguration's version");
        assert!(done.is_quorum(|id| id == 3 || id == 4));
        assert_eq!(done.voters(), vec![3, 4, 5]);
    }

    #[test]
    fn the_quorum_point_is_the_lowest_of_each_majority() {
        let joint =
            Configuration::initial(ids(&[1, 2, 3], &[9])).after(Zxid::new(1, 1), &Change::Enter(ids(&[3, 4, 5], &[])));
        let acked = |id: ServerId| match id {
            1 => Some(10),
            2 => Some(8),
            3 => Some(7),
            4 => Some(3),
            9 => Some(100),
            _ => None,
        };
        // Old: {10, 8, 7} -> 8; new: {7, 3, -} -> 3; an observer never counts.
        assert_eq!(joint.quorum_point(acked), Some(3));
        assert_eq!(Configuration::initial(ids(&[1, 2, 3], &[9])).quorum_point(acked), Some(8));
        assert_eq!(Configuration::initial(ids(&[4, 5, 6], &[])).quorum_point(acked), None);
    }

    #[test]
    fn a_membership_refuses_duplicates_and_no_voter() {
        let m =
            |id, participation| Member { id, participation, peer_address: "h:1:2".into(), client_address: "3".into() };
        assert_eq!(
            Membership::new(vec![m(1, Participation::Participant), m(1, Participation::Observer)]),
            Err(MembershipError::Duplicate(1))
        );
        assert_eq!(Membership::new(vec![m(2, Participation::Observer)]), Err(MembershipError::NoVoter));
        let ok = Membership::new(vec![m(2, Participation::Observer), m(1, Participation::Participant)]).unwrap();
        assert_eq!(ok.to_string(), "server.1=h:1:2:participant;3\nserver.2=h:1:2:observer;3");
        let conf = Configuration { version: Zxid::new(1, 0x1f), active: ok, next: None };
        assert!(conf.zookeeper_text().ends_with("\nversion=10000001f"));
    }
}
