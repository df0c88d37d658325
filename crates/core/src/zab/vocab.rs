//! The words Zab and its host share: what goes in ([`Input`]), what comes
//! out ([`Action`], [`Io`]), the settings ([`Config`]), what a member reports
//! of itself ([`Status`], [`FollowerProgress`]), and what storage makes
//! durable and gives back ([`StorageOp`], [`Durable`]). They live apart from
//! the state machine so a host (the runtime, the simulation, a test harness)
//! reads the protocol's surface without wading through its rules, and so the
//! machine's files can change without touching what hosts depend on.

use super::message::{EpochRange, Message};
use crate::ids::{Epoch, ServerId, Zxid};
use crate::members::{Configuration, Membership};
use crate::txn::Entry;
use bytes::Bytes;

/// Static settings of one peer.
#[derive(Clone, Debug)]
pub struct Config {
    /// This replica.
    pub id: ServerId,
    /// Every voting member (this one included, unless it observes), as the
    /// configuration file gives them: in force until the replicated
    /// configuration (see [`crate::members`]) says otherwise.
    pub voters: Vec<ServerId>,
    /// Members that take every commit and serve clients but never vote nor
    /// count toward a quorum (ZooKeeper's observers, etcd's learners).
    pub observers: Vec<ServerId>,
    /// Ticks without hearing from the other side before a synced follower or
    /// leader gives up on it (ZooKeeper's syncLimit).
    pub sync_limit_ticks: u64,
    /// Ticks discovery plus synchronization may take (ZooKeeper's initLimit).
    pub init_limit_ticks: u64,
    /// Ticks an election waits for a better vote once one has a quorum.
    pub finalize_wait_ticks: u64,
    /// Longest gap between two notifications while looking.
    pub max_notification_interval_ticks: u64,
    /// Most entries in one PROPOSAL message (a sync DIFF is split into such messages).
    pub max_batch_entries: usize,
    /// Most proposals a leader keeps outstanding before it stops taking writes.
    pub max_inflight: u64,
    /// Committed, durable entries held in memory beyond which older ones are
    /// only stored: a DIFF reaching further back reads them from storage
    /// ([`Io::SendStored`]). ZooKeeper holds 500.
    pub resident_log_entries: usize,
}

/// Default of [`Config::resident_log_entries`]: a follower that reconnects
/// within a few tens of milliseconds of a busy leader is synced from memory.
pub const RESIDENT_LOG_ENTRIES: usize = 1000;

/// How far one follower is, as its leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower.
    pub id: ServerId,
    /// Whether it is synced (counts toward the quorum).
    pub synced: bool,
    /// The highest zxid it acknowledged as durable.
    pub acked: Zxid,
    /// Entries in the leader's log above `acked`.
    pub lag: u64,
}

impl Config {
    /// Sensible defaults for an ensemble of `voters`.
    pub fn new(id: ServerId, voters: Vec<ServerId>) -> Config {
        Config {
            id,
            voters,
            observers: Vec::new(),
            sync_limit_ticks: 5,
            init_limit_ticks: 10,
            finalize_wait_ticks: 1,
            max_notification_interval_ticks: 8,
            max_batch_entries: 1000,
            max_inflight: 10_000,
            resident_log_entries: RESIDENT_LOG_ENTRIES,
        }
    }

    /// The configuration of `voters` and `observers`, in force until the
    /// log holds a reconfiguration.
    pub fn initial_configuration(&self) -> Configuration {
        Configuration::initial(Membership::of_ids(&self.voters, &self.observers))
    }
}

/// Something that happened to the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// One unit of time passed.
    Tick,
    /// A message arrived.
    Message {
        /// The sender.
        from: ServerId,
        /// The message.
        msg: Message,
    },
    /// Every storage operation with a sequence number up to `seq` is durable.
    Persisted {
        /// The highest durable sequence number.
        seq: u64,
    },
    /// A stream to or from `peer` broke (a follower learns its leader is gone at once).
    Disconnected {
        /// The other side.
        peer: ServerId,
        /// Which of the two streams between us.
        link: Link,
    },
}

/// Which stream between two members broke. Both can exist at once, the old
/// and the new one, across a change of leader: when the old leader follows
/// its successor, the end of the successor's stream as its follower must not
/// read as the loss of its new leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// This member's stream to the leader it follows.
    ToLeader,
    /// The stream of a member that followed this one.
    FromFollower,
}

/// What a peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// In leader election.
    Looking,
    /// Following a leader.
    Following,
    /// Leading.
    Leading,
}

impl Role {
    /// The name ZooKeeper's `srvr` prints for this role (a lone leader is "standalone").
    pub fn name(self, standalone: bool) -> &'static str {
        match (self, standalone) {
            (Role::Leading, true) => "standalone",
            (Role::Leading, false) => "leader",
            (Role::Following, _) => "follower",
            (Role::Looking, _) => "looking",
        }
    }
}

/// A peer's role as the rest of the replica needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// The role.
    pub role: Role,
    /// The epoch being followed or led (0 while looking or undecided).
    pub epoch: Epoch,
    /// The leader, once known.
    pub leader: Option<ServerId>,
    /// Whether clients may be served: the leader is established, or this
    /// follower got UPTODATE.
    pub serving: bool,
}

/// What the runtime carries out for Zab, untouched by the rest of the
/// replica: messages to other members and operations to make durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Io {
    /// Send a message (lossy: the protocol tolerates drops).
    Send {
        /// The receiver.
        to: ServerId,
        /// The message.
        msg: Message,
    },
    /// Read the stored entries of `ranges` back from storage and send them
    /// to `to` as PROPOSAL messages of at most `batch` entries (see
    /// [`super::proposals`]), before any later action's message. Every one of them
    /// is durable. Should storage no longer hold them all (an operator
    /// purged them), send nothing: the follower refuses what follows for its
    /// gap and syncs again.
    SendStored {
        /// The follower.
        to: ServerId,
        /// The leader's epoch.
        epoch: Epoch,
        /// The zxid the follower's log ends at.
        after: Zxid,
        /// The entries to send: every zxid of these ranges, in order.
        ranges: Vec<EpochRange>,
        /// Most entries per message.
        batch: usize,
    },
    /// Perform a storage operation; report `Input::Persisted` once durable.
    Persist {
        /// Its sequence number.
        seq: u64,
        /// The operation.
        op: StorageOp,
    },
}

/// Something the replica must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// For the runtime: send or persist.
    Io(Io),
    /// These entries are committed: apply them to the tree, in order.
    Commit {
        /// The entries.
        entries: Vec<Entry>,
    },
    /// Replace the tree with this snapshot (SNAP sync, follower side).
    InstallSnapshot {
        /// The zxid it reflects.
        zxid: Zxid,
        /// `tree::snapshot` chunks.
        chunks: Vec<Bytes>,
    },
    /// Serialize the tree (which now reflects exactly `zxid`) and send it to
    /// `to` as [`Message::Snap`] (SNAP sync, leader side).
    SendSnapshot {
        /// The follower.
        to: ServerId,
        /// The epoch.
        epoch: Epoch,
        /// The commit point the tree must be at.
        zxid: Zxid,
        /// The configuration in force at that point, sent with it.
        configuration: Configuration,
    },
    /// The peer's role, leader or serving state changed.
    RoleChanged(Status),
    /// Application traffic from a follower (leader side).
    Forwarded {
        /// The follower.
        from: ServerId,
        /// The payload.
        payload: Bytes,
    },
    /// Application traffic from the leader (follower side).
    Replied {
        /// The payload.
        payload: Bytes,
    },
    /// This follower took the leader's configuration over the one its
    /// configuration file gave (no reconfiguration entry named one): the
    /// tree shows it, as the leader's does.
    ConfigurationAdopted(Configuration),
    /// A quorum confirmed this peer still leads: every probe up to `probe`
    /// (from [`super::Zab::confirm_leadership`]) is answered.
    LeadershipConfirmed {
        /// The newest probe confirmed.
        probe: u64,
    },
}

/// Why a proposal was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This peer is not an established leader.
    #[error("not the established leader")]
    NotLeader,
    /// This leader is handing leadership over: the next one takes the proposal.
    #[error("leadership is being handed over")]
    Transferring,
    /// Too many proposals are outstanding.
    #[error("too many outstanding proposals")]
    Busy,
    /// Another reconfiguration is under way (ZooKeeper's ReconfigInProgress).
    #[error("another reconfiguration is in progress")]
    ReconfigInProgress,
    /// A majority of the new configuration's voters is not connected and
    /// caught up (ZooKeeper's NewConfigNoQuorum).
    #[error("a majority of the new configuration's voters is not connected and caught up")]
    NewConfigNoQuorum,
}

/// One change to durable state, in the order the consensus core asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageOp {
    /// Append entries after the current last one (zxids strictly increase).
    Append(Vec<Entry>),
    /// Drop every log entry with a zxid greater than this.
    TruncateAfter(Zxid),
    /// Record the epoch this replica last promised (Zab's acceptedEpoch).
    SetAcceptedEpoch(Epoch),
    /// Record the epoch whose NEWLEADER this replica acknowledged (currentEpoch).
    SetCurrentEpoch(Epoch),
    /// Replace all state with a leader's snapshot at `zxid` (SNAP sync): the
    /// snapshot is stored and every log entry is dropped.
    InstallSnapshot {
        /// The zxid the snapshot reflects.
        zxid: Zxid,
        /// The serialized tree (`tree::snapshot` chunks).
        chunks: Vec<Bytes>,
    },
}

/// What a peer recovered from storage.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    /// acceptedEpoch.
    pub accepted_epoch: Epoch,
    /// currentEpoch.
    pub current_epoch: Epoch,
    /// The snapshot's zxid: the tree already reflects everything up to it.
    pub snapshot_zxid: Zxid,
    /// Log entries after the snapshot.
    pub entries: Vec<Entry>,
    /// The configuration the snapshot holds; None when it was never
    /// reconfigured (the configuration file's is in force).
    pub configuration: Option<Configuration>,
    /// The highest epoch the snapshot's nodes name: a loaded tree's
    /// history may be ahead of ours, and the next epoch must pass it.
    pub epoch_floor: Epoch,
}
