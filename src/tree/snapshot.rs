//! Snapshots of the tree as a stream of records, written in chunks.
//!
//! The stream is: a header (format, zxid), the sessions, then every node in
//! pre-order (a parent before its children) with ACL lists defined once
//! before first use, and a footer with counts. Each record is length-prefixed
//! and sealed with a checksum (`txn::codec`), so a reader reports a torn,
//! truncated or corrupted snapshot precisely instead of loading part of it.
//! Chunks have a bounded size, so neither writing to disk nor sending to a
//! follower needs the whole image in memory at once.

use super::stat::StatPersisted;
use super::{SessionRecord, TreeState};
use crate::acl::{Acl, AclList};
use crate::ids::{SessionId, Zxid};
use crate::txn::codec;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
enum Record {
    Header { format: u32, zxid: Zxid },
    Session { id: SessionId, timeout_ms: i32, password: Bytes },
    Acl { id: u32, acl: Vec<Acl> },
    Node { path: String, data: Bytes, acl: u32, stat: StatPersisted },
    Footer { nodes: u64, sessions: u64 },
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

struct Writer<'a, E> {
    buffer: Vec<u8>,
    chunk_bytes: usize,
    total: u64,
    sink: &'a mut dyn FnMut(Bytes) -> Result<(), E>,
}

impl<E> Writer<'_, E> {
    fn push(&mut self, record: &Record) -> Result<(), E> {
        let sealed = codec::encode_value(record);
        // One record holds one node, whose data is bounded far below 4 GiB.
        let len = u32::try_from(sealed.len()).expect("a snapshot record is under 4 GiB");
        self.buffer.extend_from_slice(&len.to_be_bytes());
        self.buffer.extend_from_slice(&sealed);
        if self.buffer.len() >= self.chunk_bytes {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), E> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buffer));
        self.total += chunk.len() as u64;
        (self.sink)(chunk)
    }
}

/// Serializes `state` and hands it to `sink` in chunks of about `chunk_bytes`.
pub fn write<E>(
    state: &TreeState,
    chunk_bytes: usize,
    sink: &mut dyn FnMut(Bytes) -> Result<(), E>,
) -> Result<SnapshotInfo, E> {
    let mut w = Writer { buffer: Vec::with_capacity(chunk_bytes + 4096), chunk_bytes, total: 0, sink };
    w.push(&Record::Header { format: FORMAT, zxid: state.last_zxid() })?;
    let mut sessions = 0;
    for (id, record) in state.sessions() {
        sessions += 1;
        w.push(&Record::Session { id: *id, timeout_ms: record.timeout_ms, password: record.password.clone() })?;
    }
    // ACL lists are interned, so the pointer identifies a list.
    let mut acl_ids: HashMap<*const Acl, u32> = HashMap::new();
    let mut nodes = 0u64;
    let mut failure: Option<E> = None;
    state.walk(|path, node| {
        if failure.is_some() {
            return;
        }
        let key = node.acl.as_ptr();
        let next = u32::try_from(acl_ids.len()).unwrap_or(u32::MAX);
        let acl = match acl_ids.get(&key) {
            Some(id) => *id,
            None => {
                acl_ids.insert(key, next);
                if let Err(e) = w.push(&Record::Acl { id: next, acl: node.acl.to_vec() }) {
                    failure = Some(e);
                    return;
                }
                next
            }
        };
        nodes += 1;
        let record = Record::Node { path: path.to_string(), data: node.data.clone(), acl, stat: node.stat };
        if let Err(e) = w.push(&record) {
            failure = Some(e);
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    w.push(&Record::Footer { nodes, sessions })?;
    w.flush()?;
    Ok(SnapshotInfo { zxid: state.last_zxid(), nodes, sessions, bytes: w.total })
}

/// Serializes `state` into chunks in memory.
pub fn to_chunks(state: &TreeState, chunk_bytes: usize) -> (Vec<Bytes>, SnapshotInfo) {
    let mut chunks = Vec::new();
    let info = write::<std::convert::Infallible>(state, chunk_bytes, &mut |chunk| {
        chunks.push(chunk);
        Ok(())
    });
    let Ok(info) = info;
    (chunks, info)
}

/// Rebuilds a tree from snapshot chunks fed in order.
#[derive(Default)]
pub struct Reader {
    pending: Vec<u8>,
    state: Option<TreeState>,
    acls: HashMap<u32, AclList>,
    records: u64,
    nodes: u64,
    sessions: u64,
    done: bool,
}

impl Reader {
    /// A reader expecting a header first.
    pub fn new() -> Reader {
        Reader::default()
    }

    fn inconsistent(&self, reason: impl Into<String>) -> SnapshotError {
        SnapshotError::Inconsistent { index: self.records, reason: reason.into() }
    }

    /// Consumes the next chunk.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), SnapshotError> {
        self.pending.extend_from_slice(chunk);
        let mut at = 0;
        while self.pending.len() - at >= 4 {
            let len = u32::from_be_bytes(self.pending[at..at + 4].try_into().expect("4 bytes")) as usize;
            if self.pending.len() - at - 4 < len {
                break;
            }
            let record = self.pending[at + 4..at + 4 + len].to_vec();
            at += 4 + len;
            self.record(&record)?;
        }
        self.pending.drain(..at);
        Ok(())
    }

    fn record(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        let record: Record =
            codec::decode_value(bytes).map_err(|source| SnapshotError::Corrupt { index: self.records, source })?;
        if self.done {
            return Err(self.inconsistent("data after the footer"));
        }
        match record {
            Record::Header { format, zxid } => {
                if self.state.is_some() {
                    return Err(self.inconsistent("second header"));
                }
                if format != FORMAT {
                    return Err(self.inconsistent(format!("unknown snapshot format {format}")));
                }
                let mut state = TreeState::empty();
                state.set_last_zxid(zxid);
                self.state = Some(state);
            }
            Record::Session { id, timeout_ms, password } => {
                let Some(state) = self.state.as_mut() else { return Err(self.inconsistent("session before header")) };
                state.insert_session(id, SessionRecord { timeout_ms, password });
                self.sessions += 1;
            }
            Record::Acl { id, acl } => {
                self.acls.insert(id, Arc::from(acl));
            }
            Record::Node { path, data, acl, stat } => {
                let Some(acl) = self.acls.get(&acl).cloned() else {
                    return Err(self.inconsistent(format!("node {path} uses undefined ACL list {acl}")));
                };
                let index = self.records;
                let Some(state) = self.state.as_mut() else { return Err(self.inconsistent("node before header")) };
                if state.node(&path).is_some() {
                    return Err(SnapshotError::Inconsistent { index, reason: format!("node {path} appears twice") });
                }
                if path != "/" && state.node(super::path::parent(&path)).is_none() {
                    return Err(SnapshotError::Inconsistent { index, reason: format!("node {path} has no parent") });
                }
                state.insert_raw(&path, data, acl, stat);
                self.nodes += 1;
            }
            Record::Footer { nodes, sessions } => {
                if nodes != self.nodes || sessions != self.sessions {
                    return Err(self.inconsistent(format!(
                        "footer counts {nodes} nodes and {sessions} sessions, found {} and {}",
                        self.nodes, self.sessions
                    )));
                }
                self.done = true;
            }
        }
        self.records += 1;
        Ok(())
    }

    /// The tree, once the footer has been read.
    pub fn finish(self) -> Result<TreeState, SnapshotError> {
        if !self.done || !self.pending.is_empty() {
            return Err(SnapshotError::Truncated { records: self.records });
        }
        let state = self.state.ok_or(SnapshotError::Truncated { records: 0 })?;
        if state.node("/").is_none() {
            return Err(SnapshotError::Inconsistent { index: self.records, reason: "no root node".into() });
        }
        Ok(state)
    }
}

/// Rebuilds a tree from complete snapshot chunks.
pub fn from_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<TreeState, SnapshotError> {
    let mut reader = Reader::new();
    for chunk in chunks {
        reader.feed(chunk)?;
    }
    reader.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::stat::CreateMode;
    use crate::tree::DataTree;
    use crate::txn::{Txn, TxnBody};

    fn sample_tree() -> DataTree {
        let mut tree = DataTree::new();
        let s = SessionId(0x0100_0000_0000_0007);
        let mut z = 0;
        let mut apply = |tree: &mut DataTree, body: TxnBody| {
            z += 1;
            tree.apply(Zxid::new(1, z), &Txn { session: s, cxid: z as i32, time_ms: 5, body });
        };
        apply(&mut tree, TxnBody::CreateSession { timeout_ms: 4000, password: Bytes::from_static(&[7; 16]) });
        for i in 0..50 {
            let owner = if i % 5 == 0 { s.0 } else { 0 };
            apply(
                &mut tree,
                TxnBody::Create {
                    path: format!("/n{i}"),
                    data: Bytes::from(vec![i as u8; i]),
                    acl: if i % 2 == 0 { Acl::open_unsafe() } else { Acl::read_unsafe() },
                    ephemeral_owner: owner,
                    parent_cversion: i as i32 + 1,
                },
            );
        }
        let _ = CreateMode::Persistent;
        tree
    }

    #[test]
    fn round_trips_through_small_chunks() {
        let tree = sample_tree();
        let (chunks, info) = to_chunks(tree.state(), 64);
        assert!(chunks.len() > 10);
        assert_eq!(info.nodes as usize, tree.state().node_count());
        let loaded = from_chunks(chunks.iter().map(|c| c.as_ref())).unwrap();
        assert_eq!(loaded.digest(), tree.state().digest());
        assert_eq!(loaded.last_zxid(), tree.state().last_zxid());
        assert_eq!(loaded.ephemerals_of(SessionId(0x0100_0000_0000_0007)).len(), 10);
    }

    #[test]
    fn truncation_is_reported() {
        let (chunks, _) = to_chunks(sample_tree().state(), 1 << 20);
        let bytes = &chunks[0];
        let err = from_chunks([&bytes[..bytes.len() - 10]]).unwrap_err();
        assert!(matches!(err, SnapshotError::Truncated { .. }), "{err}");
    }

    #[test]
    fn corruption_is_reported() {
        let (chunks, _) = to_chunks(sample_tree().state(), 1 << 20);
        let mut bytes = chunks[0].to_vec();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        let err = from_chunks([bytes.as_slice()]).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::Corrupt { .. } | SnapshotError::Inconsistent { .. } | SnapshotError::Truncated { .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn empty_input_is_truncated() {
        assert_eq!(from_chunks(std::iter::empty()).unwrap_err(), SnapshotError::Truncated { records: 0 });
    }
}
