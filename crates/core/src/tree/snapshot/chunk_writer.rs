//! Writing a snapshot: the tree's records encoded chunk by chunk, so
//! neither a snapshot to disk nor one sent to a follower holds the whole
//! image in memory at once.

use super::{RecordRef, SnapshotInfo, FORMAT};
use crate::acl::Acl;
use crate::tree::{TreeState, Znode};
use crate::txn::codec;
use bytes::Bytes;
use rustc_hash::FxHashMap;

/// A snapshot of a tree, serialized lazily: each `next` encodes records
/// until a chunk of about `chunk_bytes` is full, so writing a snapshot to
/// disk holds one chunk in memory, not the whole image.
pub struct Chunks<'a> {
    state: &'a TreeState,
    /// None until the header and sessions are out.
    nodes: Option<Box<dyn Iterator<Item = (&'a str, &'a Znode)> + 'a>>,
    done: bool,
    /// (Seen by the format's tests, which frame streams of their own.)
    pub(super) buffer: Vec<u8>,
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

    pub(super) fn push(&mut self, record: &RecordRef<'_>) {
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
