//! The ensemble's membership as replicated state: who votes, who observes,
//! and how a change from one membership to the next is made safe.
//!
//! A reconfiguration is two transactions, as Raft's joint consensus: the
//! first (`TxnBody::Reconfig` of [`Change::Enter`]) enters the joint configuration,
//! in which every decision (a commit, an election, a leader's establishment)
//! needs a majority of the old voters *and* one of the new; the second
//! ([`Change::Complete`]), which the leader proposes
//! once the first is committed, leaves it for the new voters alone. A
//! member acts on a configuration as soon as its log holds the entry, not
//! when it is committed, so any two quorums that decide something overlap
//! whichever of the configurations each member had reached. ZooKeeper
//! activates a configuration only when committed and has had bugs there
//! (ZOOKEEPER-2172, -2202); a log-held configuration is what Raft proves safe.

use crate::ids::{ServerId, Zxid};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
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

/// Where else a member serves, beyond what ZooKeeper's line holds: each
/// `host:port`, empty when not served or not known. `/zookeeper/config`
/// shows them as `zabkeeper.N=grpc=...;admin=...`, a key ZooKeeper's
/// clients pass over; operators' tools and config files use them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoints {
    /// The gRPC session API.
    pub grpc: String,
    /// The admin API.
    pub admin: String,
    /// Prometheus metrics over HTTP.
    pub metrics: String,
    /// The ZooKeeper protocol over TLS.
    pub secure_client: String,
}

impl Endpoints {
    /// The names of the fields, in the order the text gives them.
    const NAMES: [&'static str; 4] = ["grpc", "admin", "metrics", "secure_client"];

    fn fields(&self) -> [&String; 4] {
        [&self.grpc, &self.admin, &self.metrics, &self.secure_client]
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|f| f.is_empty())
    }

    /// The value of a `zabkeeper.N=` line: `grpc=host:port;admin=host:port`,
    /// the known ones only.
    pub fn text(&self) -> String {
        let known = Self::NAMES.iter().zip(self.fields()).filter(|(_, v)| !v.is_empty());
        known.map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }

    /// A member's endpoints from a `zabkeeper.N=...` line; None when the
    /// line is of another kind.
    pub fn parse_line(line: &str) -> Option<Result<(ServerId, Endpoints), MembershipError>> {
        let (key, value) = line.trim().split_once('=')?;
        let id = key.trim().strip_prefix("zabkeeper.")?;
        let bad = |why: String| MembershipError::BadLine { line: line.to_string(), why };
        let id = id.parse::<ServerId>().ok().filter(|id| is_server_id(*id));
        let id = id.ok_or_else(|| bad("the id is not a number within 1..=254".into()));
        Some(id.and_then(|id| Ok((id, Endpoints::parse(value).map_err(bad)?))))
    }

    /// Endpoints from their [`Endpoints::text`].
    pub fn parse(text: &str) -> Result<Endpoints, String> {
        let mut endpoints = Endpoints::default();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, addr) = part.split_once('=').ok_or_else(|| format!("`{part}` is not name=host:port"))?;
            let field = match name.trim() {
                "grpc" => &mut endpoints.grpc,
                "admin" => &mut endpoints.admin,
                "metrics" => &mut endpoints.metrics,
                "secure_client" => &mut endpoints.secure_client,
                other => return Err(format!("`{other}` is none of {}", Self::NAMES.join(", "))),
            };
            let addr = addr.trim();
            if !is_host_port(addr) {
                return Err(format!("`{addr}` is not host:port"));
            }
            *field = addr.to_string();
        }
        Ok(endpoints)
    }
}

/// Whether `text` is `host:port`: a port number, and a host of the
/// characters a name or an address has (no space, no line break, nothing a
/// configuration line or text could be split on).
fn is_host_port(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else { return false };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']');
    !host.is_empty() && host.len() <= 253 && host.chars().all(allowed) && port.parse::<u16>().is_ok()
}

/// Whether `id` is one a member can have: 1..=254 (ZooKeeper's range when
/// TTL nodes are on; a config file's).
pub fn is_server_id(id: ServerId) -> bool {
    (1..=254).contains(&id)
}

/// What members said of their own endpoints, each with the peer address
/// it said it from: it counts for a member of a configuration only at that
/// address (not a member's old incarnation on another host).
#[derive(Clone, Debug, Default)]
pub struct Told(std::collections::BTreeMap<ServerId, (String, Endpoints)>);

impl Told {
    /// Member `id`, reached at `peer` (`host:port`), says it has `endpoints`.
    pub fn insert(&mut self, id: ServerId, peer: String, endpoints: Endpoints) {
        self.0.insert(id, (peer, endpoints));
    }

    /// What `m` told, if it told it from its peer address, and told any.
    pub fn of(&self, m: &Member) -> Option<&Endpoints> {
        let (peer, endpoints) = self.0.get(&m.id)?;
        (Some(peer.as_str()) == m.peer_host_port().as_deref() && !endpoints.is_empty()).then_some(endpoints)
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
    /// Its other addresses, as far as known.
    pub endpoints: Endpoints,
}

impl Member {
    /// Whether it votes.
    pub fn votes(&self) -> bool {
        self.participation == Participation::Participant
    }

    /// A member from ZooKeeper's dynamic configuration line,
    /// `server.N=host:peerPort:electionPort[:participant|observer][;[host:]clientPort]`
    /// (as `/zookeeper/config` shows it and `reconfig` takes it).
    pub fn parse(line: &str) -> Result<Member, MembershipError> {
        let bad = |why: &str| MembershipError::BadLine { line: line.to_string(), why: why.to_string() };
        let (key, value) = line.trim().split_once('=').ok_or_else(|| bad("no `=`"))?;
        let id = key.trim().strip_prefix("server.").ok_or_else(|| bad("the key is not server.N"))?;
        let id: ServerId = id.parse().map_err(|_| bad("the id is not a number"))?;
        if !is_server_id(id) {
            return Err(bad("the id must be within 1..=254"));
        }
        let (peer, client) = value.trim().split_once(';').unwrap_or((value.trim(), ""));
        let (peer, participation) = match peer.rsplit_once(':') {
            Some((rest, "participant")) => (rest, Participation::Participant),
            Some((rest, "observer")) => (rest, Participation::Observer),
            _ => (peer, Participation::Participant),
        };
        // host:peerPort:electionPort, the host perhaps a bracketed IPv6 address.
        let ports: Vec<&str> = peer.rsplitn(3, ':').collect();
        let [election, quorum, host] = ports[..] else { return Err(bad("expected host:peerPort:electionPort")) };
        if host.is_empty() || quorum.parse::<u16>().is_err() || election.parse::<u16>().is_err() {
            return Err(bad("expected host:peerPort:electionPort"));
        }
        let client_port = client.rsplit(':').next().unwrap_or_default();
        if !client.is_empty() && client_port.parse::<u16>().is_err() {
            return Err(bad("the client address is not [host:]port"));
        }
        let (peer_address, client_address) = (peer.to_string(), client.to_string());
        Ok(Member { id, participation, peer_address, client_address, endpoints: Endpoints::default() })
    }

    /// Where members reach it as `host:port`: the peer port of ZooKeeper's
    /// `host:peerPort:electionPort` (ours serve both on one port).
    pub fn peer_host_port(&self) -> Option<String> {
        let (rest, _election) = self.peer_address.rsplit_once(':')?;
        Some(rest.to_string())
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
    /// A dynamic configuration line that does not parse.
    #[error("`{line}` is not a server line: {why}")]
    BadLine {
        /// The line.
        line: String,
        /// What is wrong.
        why: String,
    },
    /// A member to remove or promote is not one.
    #[error("server {0} is not a member")]
    NotMember(ServerId),
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
            endpoints: Endpoints::default(),
        };
        let mut members: Vec<Member> = voters.iter().map(|&id| member(id, Participation::Participant)).collect();
        members
            .extend(observers.iter().filter(|id| !voters.contains(id)).map(|&id| member(id, Participation::Observer)));
        members.sort_by_key(|m| m.id);
        members.dedup_by_key(|m| m.id);
        Membership { members }
    }

    /// This membership changed: `joining` added (or replacing the member
    /// of the same id: a new address or role, as ZooKeeper's reconfig does),
    /// `leaving` removed, `promoted` made voters.
    pub fn changed(
        &self,
        joining: &[Member],
        leaving: &[ServerId],
        promoted: &[ServerId],
    ) -> Result<Membership, MembershipError> {
        let mut members = self.members.clone();
        for id in leaving.iter().chain(promoted) {
            if self.get(*id).is_none() && !joining.iter().any(|m| m.id == *id) {
                return Err(MembershipError::NotMember(*id));
            }
        }
        members.retain(|m| !leaving.contains(&m.id) && !joining.iter().any(|j| j.id == m.id));
        members.extend(joining.iter().filter(|m| !leaving.contains(&m.id)).cloned());
        for m in members.iter_mut().filter(|m| promoted.contains(&m.id)) {
            m.participation = Participation::Participant;
        }
        Membership::new(members)
    }

    /// Every member, by id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Fills in the endpoints of members that came without them (a
    /// ZooKeeper server line has no place for them): from `before`, the
    /// membership in force, when the member is there at the same peer
    /// address, else from what the member `told` of itself from there.
    pub fn with_endpoints(mut self, before: &Membership, told: &Told) -> Membership {
        for m in self.members.iter_mut().filter(|m| m.endpoints.is_empty()) {
            let kept = before.get(m.id).filter(|b| b.peer_address == m.peer_address).map(|b| b.endpoints.clone());
            if let Some(endpoints) = kept.filter(|e| !e.is_empty()).or_else(|| told.of(m).cloned()) {
                m.endpoints = endpoints;
            }
        }
        self
    }

    /// This membership with the endpoints members have told since, where
    /// they differ from those recorded; None when none does.
    pub fn told(&self, told: &Told) -> Option<Membership> {
        // Asked on every tick of a leader: look before copying.
        let new = |m: &Member| told.of(m).filter(|e| **e != m.endpoints).cloned();
        if !self.members.iter().any(|m| new(m).is_some()) {
            return None;
        }
        let mut next = self.clone();
        for m in &mut next.members {
            if let Some(endpoints) = new(m) {
                m.endpoints = endpoints;
            }
        }
        Some(next)
    }

    /// The `zabkeeper.N=` lines of the members whose endpoints are known.
    pub fn endpoints_text(&self) -> String {
        let known = self.members.iter().filter(|m| !m.endpoints.is_empty());
        known.map(|m| format!("zabkeeper.{}={}\n", m.id, m.endpoints.text())).collect()
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
        // The leader asks at every acknowledgement: up to 16 voters sort on
        // the stack, and only a larger ensemble takes a vector.
        let mut values: SmallVec<[T; 16]> = self.voters().filter_map(&value).collect();
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

    /// The memberships in force: the active one, and the next while joint.
    pub fn memberships(&self) -> impl Iterator<Item = &Membership> {
        std::iter::once(&self.active).chain(self.next.as_ref())
    }

    /// Every member of either membership (one in both comes twice).
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.memberships().flat_map(Membership::members)
    }

    /// Whether `id` votes in either membership.
    pub fn is_voter(&self, id: ServerId) -> bool {
        self.memberships().any(|m| m.is_voter(id))
    }

    /// Whether `id` is a member of either, voting or not.
    pub fn is_member(&self, id: ServerId) -> bool {
        self.memberships().any(|m| m.get(id).is_some())
    }

    /// Every voter of either membership, ascending, once each.
    pub fn voters(&self) -> Vec<ServerId> {
        let mut ids: Vec<ServerId> = self.memberships().flat_map(|m| m.voters()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether the ids `has` holds are a quorum: a majority of every
    /// membership in force.
    pub fn is_quorum(&self, has: impl Fn(ServerId) -> bool) -> bool {
        self.memberships().all(|m| m.is_majority(&has))
    }

    /// Whether the ids `has` holds are a majority of either membership in
    /// force: enough to follow a leader on, never to lead (following cannot
    /// commit anything; the leader counts its own quorums).
    pub fn is_quorum_of_either(&self, has: impl Fn(ServerId) -> bool) -> bool {
        self.memberships().any(|m| m.is_majority(&has))
    }

    /// The highest value a quorum has reached (the lowest of each
    /// membership's majority point).
    pub fn quorum_point<T: Ord + Copy>(&self, value: impl Fn(ServerId) -> Option<T>) -> Option<T> {
        self.memberships().map(|m| m.majority_point(&value)).min().flatten()
    }

    /// The first step of a reconfiguration from this configuration (not
    /// joint) to `next`.
    pub fn enter(&self, next: Membership) -> Change {
        Change::Enter { active: self.active.clone(), next }
    }

    /// The step that completes this joint configuration.
    pub fn complete(&self) -> Change {
        Change::Complete { version: self.version, members: self.current().clone() }
    }

    /// ZooKeeper's dynamic configuration text, as `/zookeeper/config` holds
    /// it: one `server.N=` line per member of the current membership, a
    /// `zabkeeper.N=` line for each whose other addresses are known, then
    /// `version=` in hex.
    pub fn zookeeper_text(&self) -> String {
        format!("{}\n{}version={:x}", self.current(), self.current().endpoints_text(), self.version.0)
    }
}

/// A step of a reconfiguration, as a transaction carries it. Each names
/// the whole configuration it leads to, so an entry means the same whatever
/// configuration a member held before it (a member that joined with another
/// configuration file, or restarted with an old one, reads it right).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Enter the joint configuration of `active` and `next`.
    Enter {
        /// The members deciding so far.
        active: Membership,
        /// The members moved to.
        next: Membership,
    },
    /// Leave it: `members` decide alone, under the reconfiguration's version.
    Complete {
        /// The zxid of the step that entered the joint configuration.
        version: Zxid,
        /// The members moved to.
        members: Membership,
    },
}

impl Change {
    /// The configuration this step, logged at `zxid`, leads to.
    pub fn configuration(&self, zxid: Zxid) -> Configuration {
        match self {
            Change::Enter { active, next } => {
                Configuration { version: zxid, active: active.clone(), next: Some(next.clone()) }
            }
            Change::Complete { version, members } => {
                Configuration { version: *version, active: members.clone(), next: None }
            }
        }
    }

    /// The membership moved to.
    pub fn next(&self) -> &Membership {
        match self {
            Change::Enter { next, .. } => next,
            Change::Complete { members, .. } => members,
        }
    }
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
        let joint = old.enter(ids(&[3, 4, 5], &[])).configuration(Zxid::new(1, 5));
        assert!(joint.is_joint());
        assert_eq!(joint.version, Zxid::new(1, 5));
        // {1, 2} is a majority of the old voters only; {3, 4} of the new only.
        assert!(!joint.is_quorum(|id| id == 1 || id == 2));
        assert!(!joint.is_quorum(|id| id == 3 || id == 4));
        assert!(joint.is_quorum(|id| id == 2 || id == 3 || id == 4));
        let done = joint.complete().configuration(Zxid::new(1, 6));
        assert!(!done.is_joint());
        assert_eq!(done.version, Zxid::new(1, 5), "completing keeps the reconfiguration's version");
        assert!(done.is_quorum(|id| id == 3 || id == 4));
        assert_eq!(done.voters(), vec![3, 4, 5]);
    }

    #[test]
    fn the_majority_point_is_the_value_a_majority_reached_at_every_size() {
        // Against the rule as stated (the majority-th highest value), past
        // the ensembles that sort on the stack as well as within them.
        let mut seed = 7u64;
        for voters in 1..=20u64 {
            let ids_: Vec<ServerId> = (1..=voters).collect();
            let m = ids(&ids_, &[100]);
            for _ in 0..50 {
                let values: Vec<Option<u64>> = ids_
                    .iter()
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (seed >> 60 != 0).then_some(seed >> 58)
                    })
                    .collect();
                let value = |id: ServerId| if id == 100 { Some(u64::MAX) } else { values[id as usize - 1] };
                let mut reached: Vec<u64> = values.iter().flatten().copied().collect();
                reached.sort_unstable_by(|a, b| b.cmp(a));
                let expected = reached.get(voters as usize / 2).copied();
                assert_eq!(m.majority_point(value), expected, "{voters} voters: {values:?}");
            }
        }
    }

    #[test]
    fn the_quorum_point_is_the_lowest_of_each_majority() {
        let joint =
            Configuration::initial(ids(&[1, 2, 3], &[9])).enter(ids(&[3, 4, 5], &[])).configuration(Zxid::new(1, 1));
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
    fn zookeeper_lines_parse_and_print_back_unchanged() {
        for line in [
            "server.4=127.0.0.1:7004:7004:participant;127.0.0.1:2184",
            "server.5=[::1]:2888:3888:observer;2185",
            "server.6=zk-6.zk:2888:3888:participant;",
        ] {
            let member = Member::parse(line).unwrap();
            assert_eq!(member.to_string(), line);
        }
        let plain = Member::parse("server.7=h:1:2").unwrap();
        assert_eq!((plain.participation, plain.peer_host_port().as_deref()), (Participation::Participant, Some("h:1")));
        for bad in ["server.x=h:1:2", "srv.1=h:1:2", "server.1=h:1", "server.1=h:1:2;c:x", "server.0=h:1:2"] {
            assert!(Member::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_membership_changes_by_joining_leaving_and_promoting() {
        let now = Membership::of_ids(&[1, 2, 3], &[4]);
        let five = Member::parse("server.5=h:1:2:observer;3").unwrap();
        let next = now.changed(&[five], &[1], &[4]).unwrap();
        assert_eq!(next.voters().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(next.observers().collect::<Vec<_>>(), vec![5]);
        assert_eq!(now.changed(&[], &[9], &[]), Err(MembershipError::NotMember(9)));
        assert_eq!(now.changed(&[], &[1, 2, 3], &[]), Err(MembershipError::NoVoter));
    }

    #[test]
    fn a_membership_refuses_duplicates_and_no_voter() {
        let m = |id, participation| Member {
            id,
            participation,
            peer_address: "h:1:2".into(),
            client_address: "3".into(),
            endpoints: Endpoints::default(),
        };
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

    #[test]
    fn endpoints_read_back_as_written_and_are_kept_across_a_change_that_omits_them() {
        let endpoints = Endpoints { grpc: "h:3181".into(), admin: "h:4181".into(), ..Endpoints::default() };
        assert_eq!(endpoints.text(), "grpc=h:3181;admin=h:4181");
        assert_eq!(Endpoints::parse_line("zabkeeper.4=grpc=h:3181;admin=h:4181").unwrap(), Ok((4, endpoints.clone())));
        assert!(Endpoints::parse_line("server.4=h:1:1").is_none(), "a server line is not an endpoints line");
        let bad = Endpoints::parse_line("zabkeeper.4=gprc=h:1").unwrap().unwrap_err().to_string();
        assert!(bad.contains("gprc") && bad.contains("grpc, admin"), "{bad}");
        // Nothing that could split a line of /zookeeper/config, nor an id out of range.
        assert!(Endpoints::parse("admin=h:1\nserver.9=x:1:1").is_err());
        assert!(Endpoints::parse("admin=h x:1").is_err() && Endpoints::parse("admin=h").is_err());
        assert!(Endpoints::parse("admin=[::1]:4181;grpc=zk-1.zk-hs:3181").is_ok());
        assert!(Endpoints::parse_line("zabkeeper.300=admin=h:1").unwrap().is_err());
        assert!(Member::parse("server.255=h:1:1").is_err() && Member::parse("server.254=h:1:1").is_ok());
        let line = |text: &str| Member::parse(text).unwrap();
        let mut one = line("server.1=h:1:1:participant;2");
        one.endpoints = endpoints.clone();
        let before = Membership::new(vec![one.clone(), line("server.2=g:1:1;2")]).unwrap();
        let conf = Configuration { version: Zxid::new(1, 2), active: before.clone(), next: None };
        assert_eq!(conf.zookeeper_text(), "server.1=h:1:1:participant;2\nserver.2=g:1:1:participant;2\nzabkeeper.1=grpc=h:3181;admin=h:4181\nversion=100000002");
        // The same line handed back keeps them; a member moved or new takes
        // what it told of itself from its new address, never from its old.
        let reported = Endpoints { admin: "k:4181".into(), ..Endpoints::default() };
        let mut told = Told::default();
        told.insert(2, "k:1".into(), reported.clone());
        told.insert(3, "old:1".into(), reported.clone());
        let next = Membership::new(vec![line("server.1=h:1:1;2"), line("server.2=k:1:1;2"), line("server.3=k:1:1;2")])
            .unwrap()
            .with_endpoints(&before, &told);
        assert_eq!(next.get(1).unwrap().endpoints, endpoints);
        assert_eq!(next.get(2).unwrap().endpoints, reported, "moved: what it told from there");
        assert!(next.get(3).unwrap().endpoints.is_empty(), "told from another address: not counted");
        assert!(next.told(&told).is_none(), "nothing new to record");
        told.insert(3, "k:1".into(), reported.clone());
        assert_eq!(next.told(&told).unwrap().get(3).unwrap().endpoints, reported, "3 told from its address");
    }
}
