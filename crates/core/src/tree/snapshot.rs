//! Snapshots of the tree as a stream of records, written in chunks.
//!
//! The stream is: a header (format, zxid), the sessions, then every node,
//! each parent before its children, with ACL lists defined once
//! before first use, and a footer with counts. Each record is length-prefixed
//! and sealed with a checksum (`txn::codec`), so a reader reports a torn,
//! truncated or corrupted snapshot precisely instead of loading part of it.
//! Chunks have a bounded size, so neither writing to disk nor sending to a
//! follower needs the whole image in memory at once.
//!
//! This file is the format itself, the records in their order and the
//! errors a reader reports, so writer and reader cannot drift apart;
//! `chunk_writer` writes it and `stream_reader` reads it.

mod chunk_writer;
mod stream_reader;

use super::stat::StatPersisted;
use crate::acl::Acl;
use crate::ids::{SessionId, Zxid};
use crate::members::Configuration;
use crate::txn::codec;
use bytes::Bytes;
pub use chunk_writer::{to_chunks, Chunks};
use serde::{Deserialize, Serialize};
pub use stream_reader::{footer_counts, from_chunks, Reader, Visit, Walker};

/// The format this build writes and reads.
const FORMAT: u32 = 1;

/// One record of the stream, as read. The variant order is the format:
/// append, never reorder. A node with null data has its own variant, added
/// after the others, so snapshots written before null data read unchanged.
#[derive(Serialize, Deserialize)]
enum Record {
    Header { format: u32, zxid: Zxid },
    Session { id: SessionId, timeout_ms: i32, password: Bytes },
    Acl { id: u32, acl: Vec<Acl> },
    Node { path: String, data: Bytes, acl: u32, stat: StatPersisted },
    Footer { nodes: u64, sessions: u64 },
    NullNode { path: String, acl: u32, stat: StatPersisted },
    Configuration(Configuration),
}

/// A record as written: the same variants in the same order (so the same
/// bytes), borrowing from the tree instead of copying every node out.
#[derive(Serialize)]
enum RecordRef<'a> {
    Header {
        format: u32,
        zxid: Zxid,
    },
    Session {
        id: SessionId,
        timeout_ms: i32,
        #[serde(serialize_with = "as_bytes")]
        password: &'a [u8],
    },
    Acl {
        id: u32,
        acl: &'a [Acl],
    },
    Node {
        path: &'a str,
        #[serde(serialize_with = "as_bytes")]
        data: &'a [u8],
        acl: u32,
        stat: &'a StatPersisted,
    },
    Footer {
        nodes: u64,
        sessions: u64,
    },
    NullNode {
        path: &'a str,
        acl: u32,
        stat: &'a StatPersisted,
    },
    Configuration(&'a Configuration),
}

/// Bytes as `Bytes` serializes them, so a reader decodes them as `Bytes`.
fn as_bytes<S: serde::Serializer>(bytes: &&[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

/// What went wrong reading a snapshot.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A record failed its checksum or could not be decoded.
    #[error("record {index} is corrupt: {source}")]
    Corrupt {
        /// The record's position in the stream.
        index: u64,
        /// The codec's finding.
        source: codec::CodecError,
    },
    /// The stream ended before the footer.
    #[error("snapshot is truncated after {records} records (no footer)")]
    Truncated {
        /// Records read.
        records: u64,
    },
    /// The records do not form a valid tree.
    #[error("snapshot is inconsistent at record {index}: {reason}")]
    Inconsistent {
        /// The record's position.
        index: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Counts of a written snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The zxid the snapshot reflects.
    pub zxid: Zxid,
    /// Nodes written.
    pub nodes: u64,
    /// Sessions written.
    pub sessions: u64,
    /// Bytes written.
    pub bytes: u64,
}

#[cfg(test)]
mod tests;
