//! Session liveness on the leader (ZooKeeper's `SessionTrackerImpl`).
//!
//! Only the leader expires sessions: every replica reports the activity of
//! the clients connected to it, the leader pushes each session's deadline
//! forward, and a session whose deadline passes is closed by a closeSession
//! transaction that also deletes its ephemerals everywhere. Time is counted
//! in ticks; deadlines sit in buckets so a tick looks only at what is due.

use crate::ids::SessionId;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug)]
struct Tracked {
    timeout_ticks: u64,
    deadline: u64,
    closing: bool,
}

/// Live sessions and their deadlines, in ticks.
#[derive(Debug, Default)]
pub struct SessionTracker {
    sessions: FxHashMap<SessionId, Tracked>,
    by_deadline: BTreeMap<u64, BTreeSet<SessionId>>,
}

/// Converts a session timeout to ticks, rounding up, at least one tick.
pub fn timeout_ticks(timeout_ms: i32, tick_ms: u64) -> u64 {
    let ms = u64::try_from(timeout_ms.max(1)).unwrap_or(1);
    ms.div_ceil(tick_ms.max(1)).max(1)
}

impl SessionTracker {
    /// No sessions.
    pub fn new() -> SessionTracker {
        SessionTracker::default()
    }

    /// Starts tracking a session (created, or inherited by a new leader) with a full timeout from `now`.
    pub fn add(&mut self, session: SessionId, timeout_ticks: u64, now: u64) {
        self.remove(session);
        let deadline = now + timeout_ticks;
        self.sessions.insert(session, Tracked { timeout_ticks, deadline, closing: false });
        self.by_deadline.entry(deadline).or_default().insert(session);
    }

    /// Every live session's deadline tick, soonest first (`dump` on a leader).
    pub fn deadlines(&self) -> Vec<(SessionId, u64)> {
        self.by_deadline.iter().flat_map(|(at, sessions)| sessions.iter().map(|s| (*s, *at))).collect()
    }

    /// Stops tracking a session (its close committed).
    pub fn remove(&mut self, session: SessionId) {
        if let Some(t) = self.sessions.remove(&session) {
            self.unbucket(session, t.deadline);
        }
    }

    fn unbucket(&mut self, session: SessionId, deadline: u64) {
        if let Some(bucket) = self.by_deadline.get_mut(&deadline) {
            bucket.remove(&session);
            if bucket.is_empty() {
                self.by_deadline.remove(&deadline);
            }
        }
    }

    /// Records activity: the session lives a full timeout from `now`.
    /// Returns false for unknown or closing sessions.
    pub fn touch(&mut self, session: SessionId, now: u64) -> bool {
        let Some(t) = self.sessions.get(&session).copied() else { return false };
        if t.closing {
            return false;
        }
        let deadline = now + t.timeout_ticks;
        if deadline != t.deadline {
            self.unbucket(session, t.deadline);
            self.by_deadline.entry(deadline).or_default().insert(session);
            if let Some(t) = self.sessions.get_mut(&session) {
                t.deadline = deadline;
            }
        }
        true
    }

    /// Whether the session may still make requests (known and not closing).
    pub fn is_live(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|t| !t.closing)
    }

    /// Marks a session as closing (its closeSession is being proposed).
    pub fn set_closing(&mut self, session: SessionId) {
        if let Some(t) = self.sessions.get_mut(&session) {
            t.closing = true;
        }
    }

    /// Sessions whose deadline passed by `now`, marked closing, in id order.
    pub fn expire(&mut self, now: u64) -> Vec<SessionId> {
        let due: Vec<u64> = self.by_deadline.range(..now).map(|(d, _)| *d).collect();
        let mut expired = Vec::new();
        for deadline in due {
            if let Some(bucket) = self.by_deadline.remove(&deadline) {
                for session in bucket {
                    if let Some(t) = self.sessions.get_mut(&session) {
                        if !t.closing {
                            t.closing = true;
                            expired.push(session);
                        }
                    }
                }
            }
        }
        expired.sort();
        expired
    }

    /// Number of tracked sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Forgets everything (leadership lost).
    pub fn clear(&mut self) {
        self.sessions.clear();
        self.by_deadline.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_rounds_up_to_ticks() {
        assert_eq!(timeout_ticks(4000, 100), 40);
        assert_eq!(timeout_ticks(4001, 100), 41);
        assert_eq!(timeout_ticks(0, 100), 1);
    }

    #[test]
    fn silent_session_expires_once() {
        let mut t = SessionTracker::new();
        t.add(SessionId(1), 10, 0);
        t.add(SessionId(2), 10, 0);
        assert!(t.expire(10).is_empty(), "deadline not passed yet");
        assert!(t.touch(SessionId(2), 5));
        assert_eq!(t.expire(11), vec![SessionId(1)]);
        assert!(t.expire(12).is_empty(), "already closing");
        assert!(!t.is_live(SessionId(1)));
        assert!(!t.touch(SessionId(1), 12), "a closing session is not revived");
        assert_eq!(t.expire(16), vec![SessionId(2)]);
    }

    #[test]
    fn removed_session_never_expires() {
        let mut t = SessionTracker::new();
        t.add(SessionId(1), 1, 0);
        t.remove(SessionId(1));
        assert!(t.expire(100).is_empty());
        assert!(t.is_empty());
    }
}
