//! A znode's metadata (ZooKeeper's `Stat` and `StatPersisted`) and the create
//! modes with their `ephemeralOwner` encodings.

use serde::{Deserialize, Serialize};

/// ZooKeeper's `Stat`, every field, in wire order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// The zxid of the transaction that created the node.
    pub czxid: i64,
    /// The zxid of the last transaction that changed the node's data.
    pub mzxid: i64,
    /// Creation time, ms since the epoch (the leader's clock at proposal).
    pub ctime: i64,
    /// Last data change time, ms since the epoch.
    pub mtime: i64,
    /// Number of data changes.
    pub version: i32,
    /// Number of child changes.
    pub cversion: i32,
    /// Number of ACL changes.
    pub aversion: i32,
    /// The owning session for ephemerals; encodes container and TTL nodes.
    pub ephemeral_owner: i64,
    /// Length of the data in bytes.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// The zxid of the last change to the children.
    pub pzxid: i64,
}

/// The persisted part of a Stat (dataLength and numChildren are derived).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatPersisted {
    /// See [`Stat::czxid`].
    pub czxid: i64,
    /// See [`Stat::mzxid`].
    pub mzxid: i64,
    /// See [`Stat::ctime`].
    pub ctime: i64,
    /// See [`Stat::mtime`].
    pub mtime: i64,
    /// See [`Stat::version`].
    pub version: i32,
    /// See [`Stat::cversion`].
    pub cversion: i32,
    /// See [`Stat::aversion`].
    pub aversion: i32,
    /// See [`Stat::ephemeral_owner`].
    pub ephemeral_owner: i64,
    /// See [`Stat::pzxid`].
    pub pzxid: i64,
}

impl StatPersisted {
    /// The Stat of a node created by transaction `zxid` at `time_ms`.
    pub fn created(zxid: i64, time_ms: i64, ephemeral_owner: i64) -> StatPersisted {
        StatPersisted {
            czxid: zxid,
            mzxid: zxid,
            ctime: time_ms,
            mtime: time_ms,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner,
            pzxid: zxid,
        }
    }

    /// The Stat a client sees, given the derived fields, as ZooKeeper's
    /// `DataNode.copyStat` reports it:
    /// - the stored `cversion` counts child creates (it is the sequential
    ///   counter); clients see the number of child changes, creates plus
    ///   deletes, i.e. `2 * creates - children` (every create but those of the
    ///   children still present was followed by a delete);
    /// - `ephemeralOwner` shows the owning session of an ephemeral only: the
    ///   container and TTL encodings are internal and read as 0.
    pub fn to_stat(&self, data_length: usize, num_children: usize) -> Stat {
        // Java ints: ZooKeeper's Stat cannot show more; saturate rather than wrap.
        let num_children = i32::try_from(num_children).unwrap_or(i32::MAX);
        let ephemeral_owner = match EphemeralType::of(self.ephemeral_owner) {
            EphemeralType::Normal => self.ephemeral_owner,
            EphemeralType::Void | EphemeralType::Container | EphemeralType::Ttl(_) => 0,
        };
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            // Java int arithmetic: wraps as ZooKeeper's does.
            cversion: self.cversion.wrapping_mul(2).wrapping_sub(num_children),
            aversion: self.aversion,
            ephemeral_owner,
            data_length: i32::try_from(data_length).unwrap_or(i32::MAX),
            num_children,
            pzxid: self.pzxid,
        }
    }
}

/// `ephemeralOwner` of a container node (ZooKeeper's `Long.MIN_VALUE`).
pub const CONTAINER_EPHEMERAL_OWNER: i64 = i64::MIN;
/// The top byte that marks a TTL node's `ephemeralOwner`.
const TTL_MASK: u64 = 0xFF00_0000_0000_0000;
/// The largest TTL ZooKeeper can encode, in ms (2^40 - 1, about 12725 days).
pub const MAX_TTL_MS: i64 = 0x0000_00FF_FFFF_FFFF;

/// What kind of node an `ephemeralOwner` value denotes (ZooKeeper's `EphemeralType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EphemeralType {
    /// A persistent node (owner 0).
    Void,
    /// An ephemeral node owned by a session.
    Normal,
    /// A container node.
    Container,
    /// A persistent node with a TTL, in ms.
    Ttl(i64),
}

impl EphemeralType {
    /// Decodes an `ephemeralOwner` value.
    pub fn of(owner: i64) -> EphemeralType {
        if owner == 0 {
            EphemeralType::Void
        } else if owner == CONTAINER_EPHEMERAL_OWNER {
            EphemeralType::Container
        } else if (owner as u64) & TTL_MASK == TTL_MASK {
            EphemeralType::Ttl(owner & MAX_TTL_MS)
        } else {
            EphemeralType::Normal
        }
    }

    /// The `ephemeralOwner` of a TTL node.
    pub fn ttl_owner(ttl_ms: i64) -> i64 {
        (TTL_MASK | (ttl_ms as u64 & MAX_TTL_MS as u64)) as i64
    }
}

/// ZooKeeper's create modes; the discriminant is the wire flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i32)]
pub enum CreateMode {
    /// Stays until deleted.
    Persistent = 0,
    /// Deleted when the creating session ends; cannot have children.
    Ephemeral = 1,
    /// Persistent, with the parent's cversion appended as `%010d`.
    PersistentSequential = 2,
    /// Ephemeral and sequential.
    EphemeralSequential = 3,
    /// Removed by the server once its last child is gone.
    Container = 4,
    /// Removed once its TTL passes without a change and it has no children.
    PersistentWithTtl = 5,
    /// Sequential with a TTL.
    PersistentSequentialWithTtl = 6,
}

impl CreateMode {
    /// The mode for a wire flag; `None` for unknown flags (BadArguments).
    pub fn from_flag(flag: i32) -> Option<CreateMode> {
        Some(match flag {
            0 => CreateMode::Persistent,
            1 => CreateMode::Ephemeral,
            2 => CreateMode::PersistentSequential,
            3 => CreateMode::EphemeralSequential,
            4 => CreateMode::Container,
            5 => CreateMode::PersistentWithTtl,
            6 => CreateMode::PersistentSequentialWithTtl,
            _ => return None,
        })
    }

    /// The wire flag.
    pub fn flag(self) -> i32 {
        self as i32
    }

    /// Whether the node belongs to its session.
    pub fn is_ephemeral(self) -> bool {
        matches!(self, CreateMode::Ephemeral | CreateMode::EphemeralSequential)
    }

    /// Whether a counter is appended to the name.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    /// Whether this is a container.
    pub fn is_container(self) -> bool {
        self == CreateMode::Container
    }

    /// Whether the node has a TTL.
    pub fn is_ttl(self) -> bool {
        matches!(self, CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_owner_encodings_match_zookeeper() {
        assert_eq!(EphemeralType::of(0), EphemeralType::Void);
        assert_eq!(EphemeralType::of(0x0100_0000_0000_0001), EphemeralType::Normal);
        assert_eq!(EphemeralType::of(i64::MIN), EphemeralType::Container);
        let owner = EphemeralType::ttl_owner(5000);
        assert_eq!(owner as u64, 0xFF00_0000_0000_1388);
        assert_eq!(EphemeralType::of(owner), EphemeralType::Ttl(5000));
    }

    #[test]
    fn client_stat_counts_child_changes_and_hides_internal_owners() {
        // Three children created, one of them deleted since: the stored
        // counter is 3 (the next sequential suffix), clients see 4 changes.
        let stored = StatPersisted { cversion: 3, ..StatPersisted::created(7, 1000, 0) };
        assert_eq!(stored.to_stat(0, 2).cversion, 4);
        assert_eq!(stored.to_stat(0, 3).cversion, 3);
        // Containers and TTL nodes read as persistent; ephemerals show their session.
        let container = StatPersisted::created(7, 1000, CONTAINER_EPHEMERAL_OWNER);
        assert_eq!(container.to_stat(0, 0).ephemeral_owner, 0);
        let ttl = StatPersisted::created(7, 1000, EphemeralType::ttl_owner(60_000));
        assert_eq!(ttl.to_stat(0, 0).ephemeral_owner, 0);
        let ephemeral = StatPersisted::created(7, 1000, 0x0100_0000_0000_0001);
        assert_eq!(ephemeral.to_stat(0, 0).ephemeral_owner, 0x0100_0000_0000_0001);
    }

    #[test]
    fn create_mode_flags_round_trip() {
        for flag in 0..=6 {
            assert_eq!(CreateMode::from_flag(flag).map(CreateMode::flag), Some(flag));
        }
        assert_eq!(CreateMode::from_flag(7), None);
        assert_eq!(CreateMode::from_flag(-1), None);
        assert!(CreateMode::EphemeralSequential.is_ephemeral());
        assert!(CreateMode::PersistentSequentialWithTtl.is_sequential());
        assert!(CreateMode::PersistentSequentialWithTtl.is_ttl());
    }
}
