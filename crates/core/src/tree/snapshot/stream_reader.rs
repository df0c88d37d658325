//! Reading a snapshot: records framed out of chunks that may split them,
//! each checked as it comes, so a torn, truncated or corrupt snapshot is
//! refused with the record at fault instead of half loaded. [`Walker`] shows
//! the records without building a tree (for looking inside one); [`Reader`]
//! rebuilds the tree.

use super::{Record, SnapshotError, FORMAT};
use crate::acl::Acl;
use crate::data::Data;
use crate::ids::{SessionId, Zxid};
use crate::members::Configuration;
use crate::tree::node::SharedAcl;
use crate::tree::stat::StatPersisted;
use crate::tree::{path, table, SessionRecord, TreeState};
use crate::txn::codec;
use rustc_hash::FxHashMap;
use std::sync::Arc;

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
