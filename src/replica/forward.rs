//! Application traffic that rides Zab's leader↔follower stream: what a
//! follower asks of the leader, and what the leader answers one follower.

use crate::ids::{SessionId, Zxid};
use crate::op::Op;
use crate::tree::acl::Id;
use crate::txn::codec::{self, CodecError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// From a follower to the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToLeader {
    /// A client write to prepare and propose.
    Write {
        /// The session.
        session: SessionId,
        /// The follower's tag for matching the commit.
        cxid: i32,
        /// The request.
        op: Op,
        /// The session's identities on that follower (ACL checks happen on the leader).
        identities: Vec<Id>,
    },
    /// A new session.
    CreateSession {
        /// The id the follower chose.
        session: SessionId,
        /// Tag for matching the commit.
        cxid: i32,
        /// Negotiated timeout.
        timeout_ms: i32,
        /// The password.
        password: Bytes,
    },
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
}

/// Encodes a message.
pub fn encode<T: Serialize>(msg: &T) -> Bytes {
    Bytes::from(codec::encode_value(msg))
}

/// Decodes a message.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    codec::decode_value(bytes)
}
