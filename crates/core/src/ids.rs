//! Identifier newtypes shared by every layer: zxids, epochs, server and session ids.
//!
//! A zxid is ZooKeeper's transaction id: the epoch of the leader that proposed
//! the transaction in the high 32 bits and a counter in the low 32 bits, so
//! comparing zxids as integers orders transactions exactly as Zab does.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A Zab epoch: one per established leader.
pub type Epoch = u32;

/// A transaction id: `epoch << 32 | counter`.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Zxid(pub u64);

impl Zxid {
    /// The zxid before any transaction.
    pub const ZERO: Zxid = Zxid(0);

    /// Builds a zxid from its epoch and counter.
    pub fn new(epoch: Epoch, counter: u32) -> Zxid {
        Zxid((u64::from(epoch) << 32) | u64::from(counter))
    }

    /// The epoch of the leader that proposed this transaction.
    pub fn epoch(self) -> Epoch {
        (self.0 >> 32) as Epoch
    }

    /// The position of this transaction within its epoch.
    pub fn counter(self) -> u32 {
        // The low 32 bits, by definition of a zxid.
        (self.0 & u64::from(u32::MAX)) as u32
    }

    /// The zxid as ZooKeeper's signed 64-bit wire value.
    pub fn as_i64(self) -> i64 {
        // ZooKeeper's zxid is a Java long: the same 64 bits, read as signed.
        self.0 as i64
    }

    /// A zxid from ZooKeeper's signed 64-bit wire value.
    pub fn from_i64(value: i64) -> Zxid {
        // The same 64 bits, read back as unsigned.
        Zxid(value as u64)
    }
}

impl fmt::Debug for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:x}:{}", self.epoch(), self.counter())
    }
}

impl fmt::Display for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:x}", self.0)
    }
}

/// The id of one replica in the ensemble (ZooKeeper's `myid`).
pub type ServerId = u64;

/// A client session id, as ZooKeeper's signed 64-bit value.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub i64);

impl SessionId {
    /// "No session": internal transactions (container reaping, TTL expiry) carry it.
    pub const NONE: SessionId = SessionId(0);
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:x}", self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zxid_orders_by_epoch_then_counter() {
        let a = Zxid::new(1, u32::MAX);
        let b = Zxid::new(2, 0);
        assert!(a < b);
        assert_eq!(b.epoch(), 2);
        assert_eq!(a.counter(), u32::MAX);
        assert_eq!(Zxid::from_i64(b.as_i64()), b);
    }
}
