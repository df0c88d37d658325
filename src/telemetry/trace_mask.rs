//! ZooKeeper's text trace mask (`ZooTrace`): which kinds of events are
//! logged at TRACE level, read by `gtmk` and set by `stmk` at run time, so an
//! operator can turn request tracing on for a member without a restart. An
//! event is logged when its bit is in the mask and the log filter lets
//! TRACE through (as ZooKeeper's needs log4j at TRACE too).

use std::sync::atomic::{AtomicI64, Ordering};

/// Client requests other than pings (ZooKeeper's `CLIENT_REQUEST_TRACE_MASK`).
pub const CLIENT_REQUEST: i64 = 1 << 1;
/// Client pings (`CLIENT_PING_TRACE_MASK`).
pub const CLIENT_PING: i64 = 1 << 3;
/// Server packets (`SERVER_PACKET_TRACE_MASK`; no event of ours carries it).
pub const SERVER_PACKET: i64 = 1 << 4;
/// Sessions opened and closed (`SESSION_TRACE_MASK`).
pub const SESSION: i64 = 1 << 5;
/// Warnings (`WARNING_TRACE_MASK`; ours are logged at WARN whatever the mask).
pub const WARNING: i64 = 1 << 8;

/// ZooKeeper's mask at start: requests, server packets, sessions and warnings (306).
pub const DEFAULT: i64 = CLIENT_REQUEST | SERVER_PACKET | SESSION | WARNING;

/// The member's trace mask, shared by every connection.
#[derive(Debug)]
pub struct TraceMask(AtomicI64);

impl Default for TraceMask {
    fn default() -> Self {
        TraceMask(AtomicI64::new(DEFAULT))
    }
}

impl TraceMask {
    /// The mask in force.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Puts `mask` in force (every bit is kept, known or not, as ZooKeeper does).
    pub fn set(&self, mask: i64) {
        self.0.store(mask, Ordering::Relaxed);
        tracing::info!(mask = format!("0x{mask:x}"), "text trace mask set");
    }

    /// Whether events of kind `bit` are traced.
    pub fn traces(&self, bit: i64) -> bool {
        self.get() & bit != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_starts_as_zookeepers_and_is_changed_whole() {
        let mask = TraceMask::default();
        assert_eq!(mask.get(), 306);
        assert!(mask.traces(CLIENT_REQUEST) && !mask.traces(CLIENT_PING));
        mask.set(CLIENT_PING | 1 << 40);
        assert_eq!(mask.get(), 8 | 1 << 40);
        assert!(mask.traces(CLIENT_PING) && !mask.traces(CLIENT_REQUEST));
    }
}
