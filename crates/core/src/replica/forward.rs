//! Application traffic that rides Zab's leader↔follower stream: what a
//! follower asks of the leader, and what the leader answers one follower.
//! The leader queues a member's own requests as the same records.

use crate::acl::Id;
use crate::ids::{SessionId, Zxid};
use crate::op::Op;
use crate::txn::codec::{self, CodecError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A client write for the leader to prepare and propose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The session.
    pub session: SessionId,
    /// The member's tag for matching the commit.
    pub cxid: i32,
    /// The request.
    pub op: Op,
    /// The session's identities on that member (ACL checks happen on the leader).
    pub identities: Vec<Id>,
}

/// A new session for the leader to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSession {
    /// The id the member chose.
    pub session: SessionId,
    /// Tag for matching the commit.
    pub cxid: i32,
    /// Negotiated timeout.
    pub timeout_ms: i32,
    /// The password.
    pub password: Bytes,
}

/// From a follower to the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToLeader {
    /// A client write.
    Write(Write),
    /// A new session.
    CreateSession(NewSession),
    /// A sync: answer with the last proposed zxid, after every earlier request.
    Sync {
        /// The session.
        session: SessionId,
        /// Tag.
        cxid: i32,
    },
    /// A session reattaching at the follower: answered like a sync, and the
    /// follower becomes the session's owner, so writes still in flight from
    /// the member it left are refused (SessionMoved) instead of being applied
    /// after the session's newer ones.
    Revalidate {
        /// The session.
        session: SessionId,
        /// Tag.
        cxid: i32,
    },
    /// Sessions active on the follower since its last report.
    Touch {
        /// The sessions.
        sessions: Vec<SessionId>,
    },
    /// Linearizable reads of the follower's round `round` wait for the
    /// leader's commit point, once a quorum confirms it leads (`read_index`).
    ReadIndex {
        /// The follower's round number.
        round: u64,
    },
}

/// From the leader to one follower.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToFollower {
    /// A sync is done once the follower has applied `zxid`.
    SyncDone {
        /// The session.
        session: SessionId,
        /// Tag.
        cxid: i32,
        /// The leader's last proposal when the sync reached it.
        zxid: Zxid,
    },
    /// The follower's read-index round `round` is confirmed: its reads go
    /// once the follower has applied `zxid`.
    ReadIndexDone {
        /// The round.
        round: u64,
        /// The leader's commit point when the round reached it.
        zxid: Zxid,
    },
}

/// Encodes a message.
pub fn encode<T: Serialize>(msg: &T) -> Bytes {
    Bytes::from(codec::encode_value(msg))
}

/// Decodes a message.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    codec::decode_value(bytes)
}
