//! Snapshots of the tree as a stream of records, written in chunks.
//!
//! The stream is: a header (format, zxid), the sessions, then every node,
//! each parent before its children, with ACL lists defined once
//! before first use, and a footer with counts. Each record is length-prefixed
//! and sealed with a checksum (`txn::codec`), so a reader reports a torn,
//! truncated or corrupted snapshot precisely instead of loading part of it.
//! Chunks have a bounded size, so neither writing to disk nor sending to a
//! follower needs the whole image in memory at once.

use super::node::SharedAcl;
use super::stat::StatPersisted;
use super::{path, table, SessionRecord, TreeState, Znode};
use crate::acl::Acl;
use crate::data::Data;
use crate::ids::{SessionId, Zxid};
use crate::members::Configuration;
use crate::txn::codec;
use bytes::Bytes;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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

/// A snapshot of a tree, serialized lazily: each `next` encodes records
/// until a chunk of about `chunk_bytes` is full, so writing a snapshot to
/// disk holds one chunk in memory, not the whole image.
pub struct Chunks<'a> {
    state: &'a TreeState,
    /// None until the header and sessions are out.
    nodes: Option<Box<dyn Iterator<Item = (&'a str, &'a Znode)> + 'a>>,
    done: bool,
    buffer: Vec<u8>,
    chunk_bytes: usize,
    /// ACL lists are interned, so the pointer identifies a list.
    acl_ids: FxHashMap<*const Acl, u32>,
    info: SnapshotInfo,
}

impl<'a> Chunks<'a> {
    /// The chunks of `state`, each about `chunk_bytes` long (the last may be shorter).
    pub fn new(state: &'a TreeState, chunk_bytes: usize) -> Chunks<'a> {
        let chunk_bytes = chunk_bytes.max(1);
        Chunks {
            state,
            nodes: None,
            done: false,
            buffer: Vec::new(),
            chunk_bytes,
            acl_ids: FxHashMap::default(),
            info: SnapshotInfo { zxid: state.last_zxid(), nodes: 0, sessions: 0, bytes: 0 },
        }
    }

    /// The counts of what has been produced so far (all of it once `next`
    /// has returned `None`).
    pub fn info(&self) -> SnapshotInfo {
        self.info
    }

    fn push(&mut self, record: &RecordRef<'_>) {
        let start = self.buffer.len();
        self.buffer.extend_from_slice(&[0; 4]);
        codec::encode_value_into(record, &mut self.buffer);
        // One record holds one node, whose data is bounded far below 4 GiB.
        let len = u32::try_from(self.buffer.len() - start - 4).expect("a snapshot record is under 4 GiB");
        self.buffer[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn push_node(&mut self, path: &str, node: &Znode) {
        let list = node.acl();
        let acl = match self.acl_ids.get(&list.as_ptr()) {
            Some(id) => *id,
            None => {
                let id = u32::try_from(self.acl_ids.len()).unwrap_or(u32::MAX);
                self.acl_ids.insert(list.as_ptr(), id);
                self.push(&RecordRef::Acl { id, acl: list });
                id
            }
        };
        self.info.nodes += 1;
        let stat = &node.persisted();
        if node.data_is_null() {
            self.push(&RecordRef::NullNode { path, acl, stat });
        } else {
            self.push(&RecordRef::Node { path, data: node.data(), acl, stat });
        }
    }
}

impl Iterator for Chunks<'_> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.buffer.capacity() == 0 && !self.done {
            // Room for the record that crosses the limit, without a regrowth
            // in the common case; small chunks (the simulation's) get small slack.
            self.buffer.reserve(self.chunk_bytes + self.chunk_bytes.min(4096));
        }
        if self.nodes.is_none() {
            let state = self.state;
            self.push(&RecordRef::Header { format: FORMAT, zxid: state.last_zxid() });
            for (id, record) in state.sessions() {
                self.info.sessions += 1;
                self.push(&RecordRef::Session { id: *id, timeout_ms: record.timeout_ms, password: &record.password });
            }
            // Only once reconfigured: a snapshot without it reads in any build.
            if let Some(configuration) = state.configuration() {
                self.push(&RecordRef::Configuration(configuration));
            }
            self.nodes = Some(Box::new(state.nodes()));
        }
        while !self.done && self.buffer.len() < self.chunk_bytes {
            match self.nodes.as_mut().and_then(|nodes| nodes.next()) {
                Some((path, node)) => self.push_node(path, node),
                None => {
                    let (nodes, sessions) = (self.info.nodes, self.info.sessions);
                    self.push(&RecordRef::Footer { nodes, sessions });
                    self.done = true;
                }
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buffer));
        self.info.bytes += chunk.len() as u64;
        Some(chunk)
    }
}

/// Serializes `state` into chunks in memory.
pub fn to_chunks(state: &TreeState, chunk_bytes: usize) -> (Vec<Bytes>, SnapshotInfo) {
    let mut chunks = Chunks::new(state, chunk_bytes);
    let all: Vec<Bytes> = chunks.by_ref().collect();
    (all, chunks.info())
}

/// Splits a stream of chunks into its length-prefixed records, which may
/// straddle chunks.
#[derive(Default)]
struct Frames {
    pending: Vec<u8>,
}

impl Frames {
    /// Appends `chunk` and hands every record now complete to `each`.
    fn feed(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(&[u8]) -> Result<(), SnapshotError>,
    ) -> Result<(), SnapshotError> {
        self.pending.extend_from_slice(chunk);
        let mut at = 0;
        let result = loop {
            if self.pending.len() - at < 4 {
                break Ok(());
            }
            let len = u32::from_be_bytes(self.pending[at..at + 4].try_into().expect("4 bytes")) as usize;
            if self.pending.len() - at - 4 < len {
                break Ok(());
            }
            let record = &self.pending[at + 4..at + 4 + len];
            if let Err(e) = each(record) {
                break Err(e);
            }
            at += 4 + len;
        };
        self.pending.drain(..at);
        result
    }
}

/// The node and session counts in a snapshot's footer, read from the end of
/// its last chunk alone (so a listing need not read whole snapshots). None
/// when the chunk does not end with a footer.
pub fn footer_counts(last_chunk: &[u8]) -> Option<(u64, u64)> {
    // The footer is a few dozen bytes; its checksum makes a false match
    // among the candidate offsets practically impossible.
    let n = last_chunk.len();
    (n.saturating_sub(64)..n.saturating_sub(4)).find_map(|at| {
        let len = u32::from_be_bytes(last_chunk[at..at + 4].try_into().ok()?) as usize;
        if at + 4 + len != n {
            return None;
        }
        match codec::decode_value::<Record>(&last_chunk[at + 4..]) {
            Ok(Record::Footer { nodes, sessions }) => Some((nodes, sessions)),
            _ => None,
        }
    })
}

/// One record of a snapshot as [`Walker`] shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Visit {
    /// The first record: the zxid the snapshot reflects.
    Header {
        /// Its zxid.
        zxid: Zxid,
    },
    /// A live session.
    Session {
        /// The session.
        id: SessionId,
        /// Its negotiated timeout.
        timeout_ms: i32,
    },
    /// The replicated configuration (only in a snapshot of a tree that has one).
    Configuration(Configuration),
    /// A node.
    Node {
        /// Its path.
        path: String,
        /// Its data.
        data: Data,
        /// Its ACL.
        acl: Arc<[Acl]>,
        /// Its Stat as stored (child counts are derived on load).
        stat: StatPersisted,
    },
    /// The last record: the counts.
    Footer {
        /// Nodes in the snapshot.
        nodes: u64,
        /// Sessions in the snapshot.
        sessions: u64,
    },
}

/// Decodes a snapshot record by record without building a tree, for
/// looking inside one (`zkctl admin snapshot inspect`): memory stays one
/// chunk and the ACL lists, whatever the snapshot's size.
#[derive(Default)]
pub struct Walker {
    frames: Frames,
    acls: FxHashMap<u32, Arc<[Acl]>>,
    records: u64,
    done: bool,
}

impl Walker {
    /// A walker expecting a header first.
    pub fn new() -> Walker {
        Walker::default()
    }

    /// Consumes the next chunk, showing each complete record to `visit`.
    pub fn feed(&mut self, chunk: &[u8], visit: &mut dyn FnMut(Visit)) -> Result<(), SnapshotError> {
        let Walker { frames, acls, records, done } = self;
        frames.feed(chunk, |bytes| {
            let index = *records;
            let record: Record =
                codec::decode_value(bytes).map_err(|source| SnapshotError::Corrupt { index, source })?;
            let inconsistent = |reason: String| SnapshotError::Inconsistent { index, reason };
            if *done {
                return Err(inconsistent("data after the footer".into()));
            }
            if index == 0 && !matches!(record, Record::Header { .. }) {
                return Err(inconsistent("the first record is not a header".into()));
            }
            match record {
                Record::Header { format, zxid } => {
                    if index != 0 {
                        return Err(inconsistent("second header".into()));
                    }
                    if format != FORMAT {
                        return Err(inconsistent(format!(
                            "unknown snapshot format {format}, this build reads format {FORMAT}"
                        )));
                    }
                    visit(Visit::Header { zxid });
                }
                Record::Session { id, timeout_ms, .. } => visit(Visit::Session { id, timeout_ms }),
                Record::Acl { id, acl } => {
                    acls.insert(id, Arc::from(acl));
                }
                Record::Node { path, data, acl, stat } => {
                    let Some(acl) = acls.get(&acl).cloned() else {
                        return Err(inconsistent(format!("node {path} uses undefined ACL list {acl}")));
                    };
                    visit(Visit::Node { path, data: data.into(), acl, stat });
                }
                Record::NullNode { path, acl, stat } => {
                    let Some(acl) = acls.get(&acl).cloned() else {
                        return Err(inconsistent(format!("node {path} uses undefined ACL list {acl}")));
                    };
                    visit(Visit::Node { path, data: Data::NULL, acl, stat });
                }
                Record::Footer { nodes, sessions } => {
                    *done = true;
                    visit(Visit::Footer { nodes, sessions });
                }
                Record::Configuration(configuration) => visit(Visit::Configuration(configuration)),
            }
            *records += 1;
            Ok(())
        })
    }

    /// Checks that the stream ended with its footer.
    pub fn finish(&self) -> Result<(), SnapshotError> {
        if !self.done || !self.frames.pending.is_empty() {
            return Err(SnapshotError::Truncated { records: self.records });
        }
        Ok(())
    }
}

/// Rebuilds a tree from snapshot chunks fed in order.
#[derive(Default)]
pub struct Reader {
    frames: Frames,
    state: Option<TreeState>,
    acls: FxHashMap<u32, SharedAcl>,
    records: u64,
    nodes: u64,
    sessions: u64,
    done: bool,
    /// The last node's path: a node after it in table order cannot be a
    /// duplicate, so the reader looks one up only when a snapshot is not in
    /// table order (those of earlier versions were written in pre-order).
    last_path: Option<String>,
    /// The parent of the last nodes read and how many of them it has not
    /// counted yet: siblings come in runs, and counting a run at once spares
    /// a lookup of the parent per node.
    siblings: Option<(String, i32)>,
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
        let mut frames = std::mem::take(&mut self.frames);
        let result = frames.feed(chunk, |record| self.record(record));
        self.frames = frames;
        result
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
                    return Err(self
                        .inconsistent(format!("unknown snapshot format {format}, this build reads format {FORMAT}")));
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
                self.acls.insert(id, SharedAcl::new(Arc::from(acl)));
            }
            Record::Node { path, data, acl, stat } => self.node(path, data.into(), acl, stat)?,
            Record::NullNode { path, acl, stat } => self.node(path, Data::NULL, acl, stat)?,
            Record::Footer { nodes, sessions } => {
                if nodes != self.nodes || sessions != self.sessions {
                    return Err(self.inconsistent(format!(
                        "footer counts {nodes} nodes and {sessions} sessions, found {} and {}",
                        self.nodes, self.sessions
                    )));
                }
                self.done = true;
            }
            Record::Configuration(configuration) => {
                let Some(state) = self.state.as_mut() else {
                    return Err(self.inconsistent("configuration before header"));
                };
                state.configuration = Some(configuration);
            }
        }
        self.records += 1;
        Ok(())
    }

    fn node(&mut self, path: String, data: Data, acl: u32, stat: StatPersisted) -> Result<(), SnapshotError> {
        let Some(acl) = self.acls.get(&acl).cloned() else {
            return Err(self.inconsistent(format!("node {path} uses undefined ACL list {acl}")));
        };
        let index = self.records;
        let Some(state) = self.state.as_mut() else { return Err(self.inconsistent("node before header")) };
        let ascending = self.last_path.as_deref().is_none_or(|last| table::sorts_before(last, &path));
        if !ascending && state.node(&path).is_some() {
            return Err(SnapshotError::Inconsistent { index, reason: format!("node {path} appears twice") });
        }
        if path != "/" {
            let parent = path::parent(&path);
            match &mut self.siblings {
                Some((run, count)) if run.as_str() == parent => *count += 1,
                siblings => {
                    // A new run: the last one is counted in its parent (there
                    // when the run began), and this one's parent must be in.
                    if let Some((run, count)) = siblings.take() {
                        state.add_children(&run, count);
                    }
                    if state.node(parent).is_none() {
                        return Err(SnapshotError::Inconsistent {
                            index,
                            reason: format!("node {path} has no parent"),
                        });
                    }
                    *siblings = Some((parent.to_string(), 1));
                }
            }
        }
        state.insert_unlinked(&path, &data, acl, stat);
        self.last_path = Some(path);
        self.nodes += 1;
        Ok(())
    }

    /// The tree, once the footer has been read.
    pub fn finish(self) -> Result<TreeState, SnapshotError> {
        if !self.done || !self.frames.pending.is_empty() {
            return Err(SnapshotError::Truncated { records: self.records });
        }
        let mut state = self.state.ok_or(SnapshotError::Truncated { records: 0 })?;
        if let Some((run, count)) = self.siblings {
            state.add_children(&run, count);
        }
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
                    // Every seventh node from /n3 on holds null data; /n0 holds 0 bytes.
                    data: if i % 7 == 3 { Data::NULL } else { Bytes::from(vec![i as u8; i]).into() },
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
        let null = |path| loaded.node(path).map(|n| n.data_is_null());
        assert_eq!(
            (null("/n3"), null("/n10"), null("/n0"), null("/n4")),
            (Some(true), Some(true), Some(false), Some(false))
        );
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

    /// A snapshot stream of these nodes in this order, framed as `Chunks` frames it.
    fn stream_of(paths: &[&str]) -> Vec<u8> {
        let state = TreeState::empty();
        let mut chunks = Chunks::new(&state, 1 << 20);
        chunks.push(&RecordRef::Header { format: FORMAT, zxid: Zxid::new(1, 9) });
        chunks.push(&RecordRef::Acl { id: 0, acl: &Acl::open_unsafe() });
        let stat = StatPersisted::created(1, 5, 0);
        for path in paths {
            chunks.push(&RecordRef::Node { path, data: b"d", acl: 0, stat: &stat });
        }
        chunks.push(&RecordRef::Footer { nodes: paths.len() as u64, sessions: 0 });
        chunks.buffer
    }

    #[test]
    fn a_snapshot_of_an_unknown_format_is_refused_naming_both_formats() {
        let state = TreeState::empty();
        let mut chunks = Chunks::new(&state, 1 << 20);
        chunks.push(&RecordRef::Header { format: FORMAT + 1, zxid: Zxid::new(1, 9) });
        let err = from_chunks([chunks.buffer.as_slice()]).unwrap_err();
        let expected = format!("unknown snapshot format {}, this build reads format {FORMAT}", FORMAT + 1);
        assert!(err.to_string().contains(&expected), "{err}");
    }

    #[test]
    fn a_pre_order_snapshot_of_earlier_versions_loads() {
        // Pre-order puts /a/b before /b; the table order puts it after.
        let loaded = from_chunks([stream_of(&["/", "/a", "/a/b", "/b"]).as_slice()]).expect("loads");
        assert_eq!(loaded.node_count(), 4);
        assert_eq!(loaded.node("/").map(|n| n.num_children()), Some(2));
        assert_eq!(loaded.node("/a").map(|n| n.num_children()), Some(1));
        assert_eq!(loaded.children("/a").collect::<Vec<_>>(), ["/a/b"]);
    }

    #[test]
    fn a_duplicate_or_an_orphan_is_inconsistent_in_any_order() {
        for paths in [&["/", "/a", "/b", "/a"][..], &["/", "/a", "/a/b", "/a"], &["/", "/a", "/a"]] {
            let err = from_chunks([stream_of(paths).as_slice()]).unwrap_err();
            assert!(
                matches!(&err, SnapshotError::Inconsistent { reason, .. } if reason.contains("appears twice")),
                "{paths:?}: {err}"
            );
        }
        let err = from_chunks([stream_of(&["/", "/a/b"]).as_slice()]).unwrap_err();
        assert!(matches!(&err, SnapshotError::Inconsistent { reason, .. } if reason.contains("no parent")), "{err}");
    }

    #[test]
    fn the_footer_is_read_from_the_last_chunk_alone() {
        let tree = sample_tree();
        for size in [64, 1 << 20] {
            let (chunks, info) = to_chunks(tree.state(), size);
            let last = chunks.last().expect("chunks");
            assert_eq!(footer_counts(last), Some((info.nodes, info.sessions)), "chunks of {size}");
            assert_eq!(footer_counts(&last[..last.len() - 1]), None);
        }
        assert_eq!(footer_counts(b""), None);
    }

    #[test]
    fn a_walker_shows_every_record_and_checks_the_end() {
        let tree = sample_tree();
        let (chunks, _) = to_chunks(tree.state(), 100);
        let mut walker = Walker::new();
        let mut seen = Vec::new();
        for chunk in &chunks {
            walker.feed(chunk, &mut |v| seen.push(v)).expect("walks");
        }
        walker.finish().expect("complete");
        assert_eq!(seen.first(), Some(&Visit::Header { zxid: tree.last_zxid() }));
        let nodes = tree.state().node_count() as u64;
        assert_eq!(seen.last(), Some(&Visit::Footer { nodes, sessions: 1 }));
        let paths: Vec<&str> = seen
            .iter()
            .filter_map(|v| match v {
                Visit::Node { path, .. } => Some(path.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(paths.len(), tree.state().node_count());
        let n7 = seen.iter().find_map(|v| match v {
            Visit::Node { path, data, stat, .. } if path == "/n7" => Some((data.len(), stat.czxid)),
            _ => None,
        });
        assert_eq!(n7, Some((7, Zxid::new(1, 9).0 as i64)));
        let mut cut = Walker::new();
        cut.feed(&chunks[0], &mut |_| {}).expect("first chunk");
        assert!(matches!(cut.finish(), Err(SnapshotError::Truncated { .. })));
    }

    #[test]
    fn empty_input_is_truncated() {
        assert_eq!(from_chunks(std::iter::empty()).unwrap_err(), SnapshotError::Truncated { records: 0 });
    }
}
