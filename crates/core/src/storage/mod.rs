//! Durable state of one replica: the transaction log, the two Zab epochs and
//! snapshots of the tree.
//!
//! Writes are buffered by [`Storage::apply`] and become durable only when
//! [`Storage::flush`] returns: the runtime batches every operation of one
//! turn of its loop into one flush (group commit) and only then tells the
//! consensus core they are durable, which is what releases acknowledgements.
//! Two implementations pass one conformance suite (`conformance`, with
//! the `testing` feature): the server's sled store on disk and
//! [`mem_store::MemStorage`] in memory, whose `crash` drops everything not
//! flushed (used by the simulation).

pub mod mem_store;
pub mod recovery;

#[cfg(any(test, feature = "testing"))]
pub mod conformance;

use crate::ids::Zxid;
pub use crate::replica::Recovered;
use crate::tree::snapshot::SnapshotError;
use crate::txn::codec::CodecError;
use crate::txn::Entry;
use crate::zab::message::EpochRange;
use crate::zab::StorageOp;
use bytes::Bytes;

/// What a runtime sends for [`crate::zab::Io::SendStored`]: the stored
/// entries of `ranges` as PROPOSAL messages, or, when storage no longer
/// holds them all, the zxid the consensus core must compact to (at least the
/// stretch's end, so the next sync is a SNAP).
pub fn stored_proposals(
    storage: &dyn Storage,
    epoch: crate::ids::Epoch,
    after: Zxid,
    ranges: &[EpochRange],
    batch: usize,
) -> Result<Vec<crate::zab::Message>, (StorageError, Zxid)> {
    let up_to = ranges.last().map_or(after, |r| r.last);
    match storage.read_span(ranges) {
        Ok(entries) => Ok(crate::zab::proposals(epoch, after, &entries, batch)),
        Err(e) => Err((e, storage.log_floor().unwrap_or(up_to).max(up_to))),
    }
}

/// A stored snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The zxid it reflects.
    pub zxid: Zxid,
    /// Its size.
    pub bytes: u64,
    /// Number of chunks.
    pub chunks: u32,
    /// Nodes in it (from its footer; 0 for snapshots written before the
    /// count was kept, or whose footer cannot be read).
    pub nodes: u64,
    /// When it was written, ms since the Unix epoch (0 when unknown).
    pub created_ms: i64,
}

impl SnapshotMeta {
    /// The meta of a snapshot at `zxid` written as `chunks` at `created_ms`.
    pub fn of(zxid: Zxid, chunks: &[Bytes], created_ms: i64) -> SnapshotMeta {
        SnapshotMeta {
            zxid,
            bytes: chunks.iter().map(|c| c.len() as u64).sum(),
            chunks: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            nodes: chunks.last().and_then(|c| crate::tree::snapshot::footer_counts(c)).map_or(0, |(nodes, _)| nodes),
            created_ms,
        }
    }
}

/// Which way a log scan goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Entries with zxid ≥ this, oldest first.
    From(Zxid),
    /// Entries with zxid ≤ this, newest first.
    Back(Zxid),
}

/// What a purge removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Snapshots removed.
    pub snapshots_removed: usize,
    /// Log entries removed.
    pub entries_removed: usize,
}

/// The error a store's engine or filesystem reported, as it reported it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A storage failure. Any of these on the write path is fatal for the replica:
/// it stops and a supervisor restarts it from disk.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The underlying database failed.
    #[error("storage I/O failed during {during}: {source}")]
    Io {
        /// What was being done.
        during: &'static str,
        /// The database's or the filesystem's error.
        source: BoxError,
    },
    /// A log entry failed its checks.
    #[error("log entry at key {key} is corrupt: {source}")]
    CorruptEntry {
        /// The zxid key (hex).
        key: String,
        /// The codec's finding.
        source: CodecError,
    },
    /// The log has a hole or goes backwards.
    #[error("log is not contiguous: entry {found} follows {previous}")]
    Discontiguous {
        /// The entry before.
        previous: Zxid,
        /// The entry found.
        found: Zxid,
    },
    /// A stored snapshot is unreadable and no older valid one exists to fall back on.
    #[error("snapshot at {zxid} is unusable: {source}")]
    CorruptSnapshot {
        /// Its zxid.
        zxid: Zxid,
        /// What is wrong.
        source: SnapshotError,
    },
    /// A metadata value is malformed.
    #[error("metadata key {key:?} is corrupt: {reason}")]
    CorruptMeta {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The log does not connect to any snapshot (entries are missing in between).
    #[error("log starts at {first_log} but the newest snapshot is at {snapshot}: entries in between are missing")]
    Gap {
        /// The snapshot's zxid.
        snapshot: Zxid,
        /// The first log entry after it.
        first_log: Zxid,
    },
    /// A snapshot's stored chunks do not match its completion marker (a chunk
    /// is missing, or the sizes or the marker itself are damaged).
    #[error("snapshot at {zxid} is incomplete: {reason}")]
    IncompleteSnapshot {
        /// Its zxid.
        zxid: Zxid,
        /// What does not match.
        reason: String,
    },
    /// A key in one of the store's trees has the wrong shape.
    #[error("key {key} in tree {tree:?} is malformed: {reason}")]
    CorruptKey {
        /// The tree.
        tree: &'static str,
        /// The key (hex).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The database engine failed on damaged files (sled 0.34 can panic or
    /// loop on some corruptions instead of reporting them).
    #[error("the database is damaged ({during}): {reason}")]
    Damaged {
        /// What was being done.
        during: &'static str,
        /// What the engine reported.
        reason: String,
    },
    /// The directory holds something that is not this kind of store.
    #[error("{path} is not a zabkeeper store: {reason}")]
    NotAStore {
        /// The directory.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// The log no longer holds every entry of a stretch asked for (purged).
    #[error("the log does not hold every entry from {first} to {last}: {detail}")]
    NotHeld {
        /// The stretch's first zxid.
        first: Zxid,
        /// Its last zxid.
        last: Zxid,
        /// What was found instead.
        detail: String,
    },
    /// A file of the store is torn or missing: what the store recorded
    /// writing is not all there, so opening it would lose part of it.
    #[error("{path} is torn: {reason}")]
    TornFile {
        /// The file (or the directory that should hold it).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A caller broke the contract (e.g. appended a zxid not above the last).
    #[error("invalid storage request: {0}")]
    Invalid(String),
}

impl StorageError {
    /// Whether this error says one stored snapshot is unusable (so recovery
    /// may fall back on an older one), as opposed to a failure of the store.
    pub fn is_snapshot_fault(&self) -> bool {
        matches!(self, StorageError::CorruptSnapshot { .. } | StorageError::IncompleteSnapshot { .. })
    }
}

/// Durable state of one replica. Methods take `&self` so a background task
/// can write a snapshot while the log keeps growing.
pub trait Storage: Send + Sync {
    /// Reads everything back after a start or crash, checking it: a corrupt or
    /// truncated store is an error naming what is wrong, never an empty tree.
    fn recover(&self) -> Result<Recovered, StorageError>;

    /// Buffers operations in order; not durable until [`Storage::flush`].
    fn apply(&self, ops: &[StorageOp]) -> Result<(), StorageError>;

    /// Makes every applied operation durable (fsync).
    fn flush(&self) -> Result<(), StorageError>;

    /// Stores a snapshot of committed state at `zxid`, durably on return,
    /// taking its chunks as they are produced.
    fn save_snapshot_from(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError>;

    /// Stores a snapshot held whole in memory (see [`Storage::save_snapshot_from`]).
    fn save_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
        self.save_snapshot_from(zxid, &mut chunks.iter().cloned())
    }

    /// Keeps the newest `keep` snapshots and drops older ones, and every log
    /// entry not needed to replay from the oldest snapshot kept.
    fn purge(&self, keep: usize) -> Result<PurgeReport, StorageError>;

    /// Shows log entries to `visit` one at a time in the direction `scan`
    /// gives, until it returns false or the log ends (for inspection: memory
    /// stays one entry, or one stored run of them, however long the log).
    fn scan_log(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError>;

    /// Log entries with zxid ≥ `from`, at most `limit` (for inspection).
    fn read_log(&self, from: Zxid, limit: usize) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        if limit > 0 {
            self.scan_log(Scan::From(from), &mut |entry| {
                out.push(entry);
                out.len() < limit
            })?;
        }
        Ok(out)
    }

    /// Exactly the log entries of `ranges` (each epoch's from its first to
    /// its last zxid), as a DIFF from storage sends them. A gap is an error:
    /// the epoch rule alone would let a log missing a whole epoch pass.
    fn read_span(&self, ranges: &[EpochRange]) -> Result<Vec<Entry>, StorageError> {
        let mut wanted = ranges
            .iter()
            .flat_map(|r| (r.first.counter()..=r.last.counter()).map(move |c| Zxid::new(r.epoch, c)))
            .peekable();
        let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else { return Ok(Vec::new()) };
        let not_held = |detail: String| StorageError::NotHeld { first: first.first, last: last.last, detail };
        let mut out = Vec::new();
        let mut broken = None;
        self.scan_log(Scan::From(first.first), &mut |entry| match wanted.next() {
            Some(zxid) if zxid == entry.zxid => {
                out.push(entry);
                wanted.peek().is_some()
            }
            Some(zxid) => {
                broken = Some(format!("found {} where {zxid} belongs", entry.zxid));
                false
            }
            None => false,
        })?;
        match (broken, wanted.next()) {
            (Some(detail), _) => Err(not_held(detail)),
            (None, Some(zxid)) => Err(not_held(format!("the log ends before {zxid}"))),
            (None, None) => Ok(out),
        }
    }

    /// The zxid the log is complete after: the oldest snapshot kept, which
    /// a purge keeps the log from (zero without a snapshot).
    fn log_floor(&self) -> Result<Zxid, StorageError> {
        Ok(self.snapshots()?.first().map_or(Zxid::ZERO, |meta| meta.zxid))
    }

    /// Chunk `index` of the stored snapshot at `zxid`; None past its last
    /// chunk or when there is no such snapshot.
    fn snapshot_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError>;

    /// The first and last zxid in the log, if it is not empty.
    fn log_bounds(&self) -> Result<Option<(Zxid, Zxid)>, StorageError>;

    /// Stored snapshots, oldest first.
    fn snapshots(&self) -> Result<Vec<SnapshotMeta>, StorageError>;

    /// Nothing was asked of the store for a while: a moment to give back
    /// memory it holds for no use (the storage worker calls this when idle).
    fn idle(&self) {}
}
