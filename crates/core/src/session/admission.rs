//! Whether a connect may attach now: the decision, apart from carrying it out.
//!
//! A connect waits while this replica has no leader (an election usually ends
//! within a few ticks, and a client held here gets its session the moment
//! this replica serves again) and while it is behind the client's last seen
//! zxid. A follower's tree may lag the leader's: a session's creation or
//! close may be committed but not yet applied here. So, as ZooKeeper's
//! learners revalidate a reattaching session with the leader, a follower asks
//! the leader where its log ends and decides once its tree has applied that
//! far. The caller refuses a connect still waiting at its deadline.

use crate::error::ErrorCode;
use crate::ids::Zxid;
use crate::tree::SessionRecord;
use bytes::Bytes;

/// Why a connect is refused when this replica has no established leader.
pub const NOT_SERVING: &str = "this replica is not serving (no quorum or election in progress)";

/// A client's connect request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// 0 for a new session.
    pub session_id: i64,
    /// The password of the session to resume.
    pub password: Bytes,
    /// Requested timeout.
    pub timeout_ms: i32,
    /// The highest zxid the client has seen.
    pub last_zxid_seen: i64,
}

/// Where a follower is in revalidating a reattaching session with the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revalidation {
    /// Not asked yet.
    NotAsked,
    /// A sync tagged with this cxid is on its way to the leader.
    Asked(i32),
    /// The leader's log ended at this zxid when it answered: once the tree
    /// has applied it, the session's fate is known here.
    Until(Zxid),
}

/// What the replica knows when it decides a connect.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// Whether this replica serves clients (it has an established leader).
    pub serving: bool,
    /// Ticks since this replica last stopped serving.
    pub not_serving_for: u64,
    /// How long a connect may wait, in ticks.
    pub catch_up_ticks: u64,
    /// The last zxid the tree has applied.
    pub applied: Zxid,
    /// Whether this replica leads.
    pub leading: bool,
    /// The session as this replica's tree knows it.
    pub record: Option<&'a SessionRecord>,
    /// On the leader: the session is still live (not expiring or closing).
    pub live: bool,
}

/// What to do with a connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Not decidable yet; decide again when something changes (a tick, serving again, a commit).
    Wait,
    /// Decide again once the tree has applied more (the leader's answer is in).
    WaitApplied,
    /// Refuse the connect.
    Refuse(ErrorCode, &'static str),
    /// Create a new session.
    CreateSession,
    /// Ask the leader where its log ends (a follower resuming a session).
    Revalidate,
    /// Attach the connection to its session.
    Attach {
        /// The session's password, sent back to the client.
        password: Bytes,
        /// Its negotiated timeout.
        timeout_ms: i32,
    },
}

/// Decides a connect.
pub fn decide(request: &ConnectRequest, revalidation: Revalidation, facts: &Facts<'_>) -> Admission {
    if !facts.serving {
        if facts.not_serving_for >= facts.catch_up_ticks {
            // Without a leader for that long, a quorum is likely out of
            // reach (a partition): send the client elsewhere at once.
            return Admission::Refuse(ErrorCode::ConnectionLoss, NOT_SERVING);
        }
        return Admission::Wait;
    }
    if Zxid::from_i64(request.last_zxid_seen) > facts.applied {
        return Admission::Wait;
    }
    if request.session_id == 0 {
        return Admission::CreateSession;
    }
    if !facts.leading {
        match revalidation {
            Revalidation::NotAsked => return Admission::Revalidate,
            Revalidation::Asked(_) => return Admission::Wait,
            Revalidation::Until(zxid) if facts.applied < zxid => return Admission::WaitApplied,
            Revalidation::Until(_) => {}
        }
    } else if facts.record.is_some() && !facts.live {
        // The leader is expiring or closing it: its close is proposed, not yet applied.
        return Admission::Refuse(ErrorCode::SessionExpired, "session is being closed");
    }
    let Some(record) = facts.record else {
        return Admission::Refuse(ErrorCode::SessionExpired, "session expired or unknown");
    };
    if record.password != request.password {
        return Admission::Refuse(ErrorCode::SessionExpired, "wrong session password");
    }
    Admission::Attach { password: record.password.clone(), timeout_ms: record.timeout_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(password: &'static [u8]) -> SessionRecord {
        SessionRecord { timeout_ms: 4000, password: Bytes::from_static(password) }
    }

    fn resume(password: &'static [u8], last_zxid_seen: i64) -> ConnectRequest {
        ConnectRequest { session_id: 7, password: Bytes::from_static(password), timeout_ms: 4000, last_zxid_seen }
    }

    fn serving<'a>(leading: bool, record: Option<&'a SessionRecord>) -> Facts<'a> {
        Facts { serving: true, not_serving_for: 0, catch_up_ticks: 20, applied: Zxid(10), leading, record, live: true }
    }

    #[test]
    fn waits_for_a_leader_then_gives_up() {
        let mut facts = serving(true, None);
        facts.serving = false;
        facts.not_serving_for = 3;
        assert_eq!(decide(&resume(b"p", 0), Revalidation::NotAsked, &facts), Admission::Wait);
        facts.not_serving_for = 20;
        assert_eq!(
            decide(&resume(b"p", 0), Revalidation::NotAsked, &facts),
            Admission::Refuse(ErrorCode::ConnectionLoss, NOT_SERVING)
        );
    }

    #[test]
    fn waits_while_behind_the_client() {
        let r = record(b"p");
        assert_eq!(decide(&resume(b"p", 11), Revalidation::NotAsked, &serving(true, Some(&r))), Admission::Wait);
    }

    #[test]
    fn a_follower_asks_the_leader_before_attaching() {
        let r = record(b"p");
        let facts = serving(false, Some(&r));
        assert_eq!(decide(&resume(b"p", 0), Revalidation::NotAsked, &facts), Admission::Revalidate);
        assert_eq!(decide(&resume(b"p", 0), Revalidation::Asked(3), &facts), Admission::Wait);
        assert_eq!(decide(&resume(b"p", 0), Revalidation::Until(Zxid(12)), &facts), Admission::WaitApplied);
        assert_eq!(
            decide(&resume(b"p", 0), Revalidation::Until(Zxid(10)), &facts),
            Admission::Attach { password: Bytes::from_static(b"p"), timeout_ms: 4000 }
        );
    }

    #[test]
    fn unknown_closing_or_wrong_password_is_expired() {
        let r = record(b"p");
        let expired = |reason| Admission::Refuse(ErrorCode::SessionExpired, reason);
        assert_eq!(
            decide(&resume(b"p", 0), Revalidation::NotAsked, &serving(true, None)),
            expired("session expired or unknown")
        );
        let mut closing = serving(true, Some(&r));
        closing.live = false;
        assert_eq!(decide(&resume(b"p", 0), Revalidation::NotAsked, &closing), expired("session is being closed"));
        assert_eq!(
            decide(&resume(b"x", 0), Revalidation::NotAsked, &serving(true, Some(&r))),
            expired("wrong session password")
        );
    }

    #[test]
    fn a_new_session_is_created_once_serving_and_caught_up() {
        let new = ConnectRequest { session_id: 0, password: Bytes::new(), timeout_ms: 4000, last_zxid_seen: 0 };
        assert_eq!(decide(&new, Revalidation::NotAsked, &serving(false, None)), Admission::CreateSession);
    }
}
