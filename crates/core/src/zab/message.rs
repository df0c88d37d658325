//! Zab's messages (ZooKeeper's quorum packet types in brackets), as plain data.
//!
//! Every message between a leader and a follower carries the epoch it belongs
//! to, so a message from an earlier leadership that arrives late is dropped
//! instead of being mistaken for current traffic.

use crate::ids::{Epoch, ServerId, Zxid};
use crate::members::Configuration;
use crate::txn::Entry;
use bytes::Bytes;

/// A vote in leader election: compared by (epoch, zxid, nominated, leader) in
/// that order, which is ZooKeeper's `totalOrderPredicate` with one tie-break
/// added (the field order *is* the rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vote {
    /// The candidate's currentEpoch.
    pub epoch: Epoch,
    /// The candidate's last logged zxid.
    pub zxid: Zxid,
    /// The leader that stepped down named this candidate (leadership
    /// transfer). It ranks below epoch and zxid, so it only picks among
    /// candidates whose histories are equally recent: safety never rests on it.
    pub nominated: bool,
    /// The candidate.
    pub leader: ServerId,
}

impl Vote {
    /// A vote without a nomination.
    pub fn new(epoch: Epoch, zxid: Zxid, leader: ServerId) -> Vote {
        Vote { epoch, zxid, nominated: false, leader }
    }
}

/// What a replica is doing, as told in its notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// In leader election.
    Looking,
    /// Following a leader.
    Following,
    /// Leading.
    Leading,
}

/// The epochs present in a log above its snapshot: for each, the first and
/// last zxid. Within one epoch a log is contiguous, so this shape is enough
/// for a leader to find where a follower's history parts from its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// Everything up to this zxid is in the snapshot (committed state).
    pub base: Zxid,
    /// One range per epoch, ascending.
    pub epochs: Vec<EpochRange>,
}

/// The entries of one epoch in a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochRange {
    /// The epoch.
    pub epoch: Epoch,
    /// Its first entry in the log.
    pub first: Zxid,
    /// Its last entry in the log.
    pub last: Zxid,
}

/// One Zab message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// [FLE notification] The sender's vote, round and state.
    Notification {
        /// The sender's election round (FLE's logical clock).
        round: u64,
        /// Who the sender votes for (or follows).
        vote: Vote,
        /// What the sender is doing.
        state: PeerState,
        /// The configuration at the sender's commit point: a member whose own
        /// is older (behind a reconfiguration, or a new one with only its
        /// configuration file) decides whom to follow by the newest it
        /// hears (see `election`). None from a build before reconfiguration.
        configuration: Option<Configuration>,
    },
    /// \[FOLLOWERINFO\] A follower presents itself to its elected leader.
    FollowerInfo {
        /// The follower's acceptedEpoch.
        accepted_epoch: Epoch,
    },
    /// \[LEADERINFO\] The epoch the leader proposes.
    LeaderInfo {
        /// The new epoch.
        epoch: Epoch,
    },
    /// \[ACKEPOCH\] The follower's promise (if `acked`) and its history position.
    AckEpoch {
        /// The new epoch acknowledged.
        epoch: Epoch,
        /// False when the follower had already accepted this epoch: it can be
        /// synced, but does not count toward the epoch quorum.
        acked: bool,
        /// The follower's currentEpoch.
        current_epoch: Epoch,
        /// The follower's last logged zxid.
        last_zxid: Zxid,
        /// The shape of the follower's log.
        summary: LogSummary,
    },
    /// \[DIFF / TRUNC\] Start of synchronization: drop entries after
    /// `truncate_to` if set, then append the entries that follow.
    Diff {
        /// The epoch.
        epoch: Epoch,
        /// Where to cut the follower's log, if it has entries the leader lacks.
        truncate_to: Option<Zxid>,
        /// Where the follower's log must end (after any cut): the entries that
        /// follow continue from exactly here. A follower whose log ends
        /// elsewhere missed something and must not append.
        from: Zxid,
        /// The leader's commit point.
        committed: Zxid,
    },
    /// \[SNAP\] The leader's whole tree at `zxid`, in chunks. Starts a
    /// synchronization on its own: the entries after `zxid` follow.
    Snap {
        /// The epoch.
        epoch: Epoch,
        /// The zxid the snapshot reflects (committed).
        zxid: Zxid,
        /// `tree::snapshot` chunks.
        chunks: Vec<Bytes>,
        /// The configuration in force at `zxid` (None from a leader of a
        /// build before reconfiguration: the follower keeps its own).
        configuration: Option<Configuration>,
    },
    /// \[NEWLEADER\] The follower now has the leader's history up to `zxid`.
    NewLeader {
        /// The epoch.
        epoch: Epoch,
        /// The leader's last zxid when it sent this.
        zxid: Zxid,
        /// The configuration the leader's log holds at `zxid` (as
        /// ZooKeeper's NEWLEADER carries its quorum verifier); None from a
        /// build before reconfiguration.
        configuration: Option<Configuration>,
    },
    /// [ACK of NEWLEADER] Everything synced and the new epoch are durable.
    AckNewLeader {
        /// The epoch.
        epoch: Epoch,
        /// The NEWLEADER zxid acknowledged.
        zxid: Zxid,
    },
    /// \[UPTODATE\] Commit up to `committed` and serve clients.
    UpToDate {
        /// The epoch.
        epoch: Epoch,
        /// The leader's commit point.
        committed: Zxid,
    },
    /// \[PROPOSAL\] Entries in zxid order (batched).
    Proposal {
        /// The epoch.
        epoch: Epoch,
        /// The zxid before the first entry in the leader's log (zero from a
        /// member that predates it: unchecked). A new epoch's first entry
        /// follows any zxid of an older one, so without it a follower that
        /// lost the end of an epoch would take the next epoch's entries as
        /// the continuation of its log.
        prev: Zxid,
        /// The entries.
        entries: Vec<Entry>,
    },
    /// \[ACK\] Cumulative: every entry up to `zxid` is durable at the sender.
    Ack {
        /// The epoch.
        epoch: Epoch,
        /// Highest durable zxid.
        zxid: Zxid,
    },
    /// \[COMMIT\] Cumulative: every entry up to `zxid` is committed.
    Commit {
        /// The epoch.
        epoch: Epoch,
        /// The commit point.
        zxid: Zxid,
    },
    /// \[PING\] Leader heartbeat, carrying the commit point.
    Ping {
        /// The epoch.
        epoch: Epoch,
        /// The leader's commit point.
        committed: Zxid,
        /// The leader's newest leadership probe (0: none yet); a follower
        /// echoes a new one at once.
        probe: u64,
    },
    /// \[PING\] Follower heartbeat.
    FollowerPing {
        /// The epoch.
        epoch: Epoch,
        /// The highest leadership probe received from this leader.
        probe: u64,
    },
    /// \[REQUEST\] Application traffic to the leader (forwarded writes, session activity).
    Forward {
        /// The epoch.
        epoch: Epoch,
        /// The sender's count of forwards: the leader takes only one above the
        /// last it took from that follower, so application traffic is never
        /// applied out of order or twice.
        seq: u64,
        /// Opaque to Zab.
        payload: Bytes,
        /// The highest leadership probe received from this leader: an echo,
        /// as a PING(follower)'s (0 from a member that predates it).
        probe: u64,
    },
    /// Application traffic from the leader to one follower, FIFO with its proposals.
    Reply {
        /// The epoch.
        epoch: Epoch,
        /// Opaque to Zab.
        payload: Bytes,
        /// A leadership probe for the follower to echo, as a PING's (0: none).
        probe: u64,
    },
    /// The leader of `epoch` steps down to hand leadership to `to` (it holds
    /// everything the leader logged): look for a leader now, without waiting
    /// out syncLimit. ZooKeeper's followers learn the same from the leader's
    /// closed socket.
    StepDown {
        /// The epoch that ends.
        epoch: Epoch,
        /// The member the leader nominates.
        to: ServerId,
    },
}

impl Message {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Notification { .. } => "NOTIFICATION",
            Message::FollowerInfo { .. } => "FOLLOWERINFO",
            Message::LeaderInfo { .. } => "LEADERINFO",
            Message::AckEpoch { .. } => "ACKEPOCH",
            Message::Diff { .. } => "DIFF",
            Message::Snap { .. } => "SNAP",
            Message::NewLeader { .. } => "NEWLEADER",
            Message::AckNewLeader { .. } => "ACK(NEWLEADER)",
            Message::UpToDate { .. } => "UPTODATE",
            Message::Proposal { .. } => "PROPOSAL",
            Message::Ack { .. } => "ACK",
            Message::Commit { .. } => "COMMIT",
            Message::Ping { .. } => "PING",
            Message::FollowerPing { .. } => "PING(follower)",
            Message::Forward { .. } => "REQUEST",
            Message::Reply { .. } => "REPLY",
            Message::StepDown { .. } => "STEPDOWN",
        }
    }

    /// The epoch a leader↔follower message belongs to (`None` for election
    /// notifications and FOLLOWERINFO, which precede the epoch).
    pub fn epoch(&self) -> Option<Epoch> {
        match self {
            Message::Notification { .. } | Message::FollowerInfo { .. } => None,
            Message::LeaderInfo { epoch }
            | Message::AckEpoch { epoch, .. }
            | Message::Diff { epoch, .. }
            | Message::Snap { epoch, .. }
            | Message::NewLeader { epoch, .. }
            | Message::AckNewLeader { epoch, .. }
            | Message::UpToDate { epoch, .. }
            | Message::Proposal { epoch, .. }
            | Message::Ack { epoch, .. }
            | Message::Commit { epoch, .. }
            | Message::Ping { epoch, .. }
            | Message::FollowerPing { epoch, .. }
            | Message::Forward { epoch, .. }
            | Message::Reply { epoch, .. }
            | Message::StepDown { epoch, .. } => Some(*epoch),
        }
    }

    /// The leadership probe this message can carry (a leader's REPLY) or
    /// echo (a follower's REQUEST), for [`super::Zab::end_turn`] to set.
    pub(super) fn probe_mut(&mut self) -> Option<&mut u64> {
        match self {
            Message::Reply { probe, .. } | Message::Forward { probe, .. } => Some(probe),
            _ => None,
        }
    }

    /// Whether a leader sends this message (as opposed to a follower or an elector).
    pub fn is_from_leader(&self) -> bool {
        matches!(
            self,
            Message::LeaderInfo { .. }
                | Message::Diff { .. }
                | Message::Snap { .. }
                | Message::NewLeader { .. }
                | Message::UpToDate { .. }
                | Message::Proposal { .. }
                | Message::Commit { .. }
                | Message::Ping { .. }
                | Message::Reply { .. }
                | Message::StepDown { .. }
        )
    }
}

/// `entries` as PROPOSAL messages of at most `batch` entries each, each
/// naming the zxid before its first entry (`prev` for the first). A loaded
/// tree travels alone: it alone may take most of a peer message.
pub fn proposals(epoch: Epoch, mut prev: Zxid, entries: &[Entry], batch: usize) -> Vec<Message> {
    let alone = |e: &Entry| e.txn.body.loaded_epoch().is_some();
    let mut out = Vec::new();
    let mut start = 0;
    while start < entries.len() {
        let end = if alone(&entries[start]) {
            start + 1
        } else {
            let limit = (start + batch.max(1)).min(entries.len());
            entries[start..limit].iter().position(alone).map_or(limit, |at| start + at)
        };
        let chunk = &entries[start..end];
        out.push(Message::Proposal { epoch, prev, entries: chunk.to_vec() });
        prev = chunk.last().map_or(prev, |e| e.zxid);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_order_by_epoch_then_zxid_then_id() {
        let v = |epoch, zxid, leader| Vote::new(epoch, Zxid(zxid), leader);
        assert!(v(2, 0, 1) > v(1, 100, 9), "a higher epoch wins over a higher zxid");
        assert!(v(1, 5, 1) > v(1, 4, 9), "then the higher zxid");
        assert!(v(1, 5, 2) > v(1, 5, 1), "then the higher id");
    }

    #[test]
    fn a_nomination_breaks_ties_only_between_equally_recent_histories() {
        let v = |epoch, zxid, leader| Vote::new(epoch, Zxid(zxid), leader);
        let nominated = |epoch, zxid, leader| Vote { nominated: true, ..v(epoch, zxid, leader) };
        assert!(nominated(1, 5, 1) > v(1, 5, 9), "among equal histories the nominee wins");
        assert!(v(1, 6, 1) > nominated(1, 5, 9), "a longer history beats a nomination");
        assert!(v(2, 0, 1) > nominated(1, 5, 9), "so does a later epoch");
    }
}
