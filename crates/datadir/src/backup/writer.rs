//! Keeping a backup directory: a snapshot, then every committed transaction
//! appended as it arrives, and from time to time a new snapshot of the tree
//! the backup rebuilds for itself (it applies each transaction, as a member
//! does), so a restore replays little. Resuming reads back what is on disk:
//! the next transaction wanted is the one after the last whole record, so
//! nothing is skipped or held twice.

use super::format::{self, FormatError, Header, Kind};
use super::{io_err, read_snapshot, snapshot_name, txns_name, BackupError, Catalog, SnapshotFile, TxnFile};
use bytes::Bytes;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::tree::snapshot::{Chunks, Reader};
use zabkeeper_core::tree::DataTree;
use zabkeeper_core::txn::codec;

/// Bytes buffered before they are written out.
const BUFFER_BYTES: usize = 1 << 20;

/// How a backup rolls and what it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Take a snapshot of its own after this many transactions (0: never).
    pub snapshot_every: u64,
    /// Start a new transaction file past this size.
    pub file_bytes: u64,
    /// Keep the newest this many snapshots and the transactions after the
    /// oldest of them; 0 keeps everything.
    pub keep_snapshots: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { snapshot_every: 100_000, file_bytes: 64 << 20, keep_snapshots: 0 }
    }
}

/// What reopening an existing backup found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reopened {
    /// The snapshot it started from.
    pub snapshot: Zxid,
    /// Transactions replayed on top of it.
    pub replayed: u64,
    /// A torn last record cut off (what a backup stopped mid-write leaves): the file and the offset.
    pub truncated: Option<(PathBuf, u64)>,
}

/// The transaction file being appended to.
struct Open {
    path: PathBuf,
    file: File,
    len: u64,
    buffer: Vec<u8>,
}

/// A backup being kept.
pub struct Writer {
    catalog: Catalog,
    options: Options,
    tree: DataTree,
    last: Zxid,
    last_time_ms: i64,
    since_snapshot: u64,
    open: Option<Open>,
}

impl Writer {
    /// Opens the backup in `dir` (making it when absent or empty). None when
    /// it holds no snapshot yet: [`Writer::start`] begins it. Otherwise its
    /// tree is rebuilt (the newest snapshot, the transactions after it) and
    /// a torn last record, if any, cut off.
    pub fn open(dir: &Path, options: Options) -> Result<Option<(Writer, Reopened)>, BackupError> {
        let catalog = Catalog::create_or_open(dir)?;
        remove_partials(dir)?;
        let Some(newest) = catalog.snapshots.last().cloned() else { return Ok(None) };
        let mut tree = DataTree::from_state(read_snapshot(&newest)?);
        let mut reopened = Reopened { snapshot: newest.zxid, ..Reopened::default() };
        let mut last_time_ms = newest.time_ms;
        let replayed = catalog.replay(newest.zxid, &mut |_, _, entry| {
            tree.apply(entry.zxid, &entry.txn);
            last_time_ms = entry.txn.time_ms;
            reopened.replayed += 1;
            Ok(true)
        });
        let last = match replayed {
            Ok(last) => last,
            // Only the newest file may end torn: it was being written.
            Err(BackupError::Format(FormatError::Torn { path, offset, .. }))
                if catalog.txn_files.last().is_some_and(|f| f.path == path) =>
            {
                let file = std::fs::OpenOptions::new().write(true).open(&path).map_err(io_err(&path))?;
                file.set_len(offset).and_then(|()| file.sync_all()).map_err(io_err(&path))?;
                reopened.truncated = Some((path, offset));
                tree.last_zxid()
            }
            Err(e) => return Err(e),
        };
        let mut writer = Writer {
            since_snapshot: reopened.replayed,
            catalog,
            options,
            tree,
            last: last.max(newest.zxid),
            last_time_ms,
            open: None,
        };
        // Append to the newest file when it continues the chain.
        if let Some(file) = writer.catalog.txn_files.last().filter(|f| f.follows >= newest.zxid).cloned() {
            writer.open = Some(open_append(&file.path)?);
        }
        Ok(Some((writer, reopened)))
    }

    /// Starts (or starts over) the backup in `dir` from a member's snapshot
    /// (its chunks, checked whole; `source` names where they came from in
    /// errors), whose last transaction was at `time_ms`.
    pub fn start(
        dir: &Path,
        options: Options,
        chunks: Vec<Vec<u8>>,
        time_ms: i64,
        source: &str,
    ) -> Result<Writer, BackupError> {
        let chunks: Vec<Bytes> = chunks.into_iter().map(Bytes::from).collect();
        let catalog = Catalog::create_or_open(dir)?;
        remove_partials(dir)?;
        let mut reader = Reader::new();
        let path = PathBuf::from(source);
        let damaged = |offset, source| BackupError::Snapshot { path: path.clone(), offset, source };
        let mut offset = 0u64;
        for chunk in &chunks {
            reader.feed(chunk).map_err(|e| damaged(offset, e))?;
            offset += chunk.len() as u64;
        }
        let state = reader.finish().map_err(|e| damaged(offset, e))?;
        let zxid = state.last_zxid();
        let mut writer = Writer {
            catalog,
            options,
            tree: DataTree::from_state(state),
            last: zxid,
            last_time_ms: time_ms,
            since_snapshot: 0,
            open: None,
        };
        writer.write_snapshot(chunks.into_iter())?;
        Ok(writer)
    }

    /// The last transaction held: the stream resumes after it.
    pub fn last(&self) -> Zxid {
        self.last
    }

    /// The backup's files.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Appends the committed transaction `zxid` (its bytes as the log
    /// stores them). False when it is already held (a member resent it);
    /// an error when one is missing before it, or it does not decode.
    pub fn append(&mut self, zxid: Zxid, raw: &[u8]) -> Result<bool, BackupError> {
        if zxid <= self.last {
            return Ok(false);
        }
        // Within an epoch committed zxids are consecutive, and every epoch's
        // first transaction is its counter 1 (a leader numbers its epoch's
        // proposals from 1): anything else means some were not sent.
        let follows = if zxid.epoch() == self.last.epoch() { zxid.0 == self.last.0 + 1 } else { zxid.counter() == 1 };
        if !follows {
            return Err(BackupError::OutOfOrder { zxid, last: self.last });
        }
        let txn = codec::decode(raw).map_err(|source| BackupError::Txn {
            path: self.catalog.dir.clone(),
            offset: 0,
            zxid,
            source,
        })?;
        if self.open.as_ref().is_none_or(|o| o.len >= self.options.file_bytes) {
            self.start_file()?;
        }
        let Some(open) = self.open.as_mut() else { unreachable!("a file was just opened") };
        let before = open.buffer.len();
        format::frame(&format::record_body(zxid, self.last, raw), &mut open.buffer);
        open.len += (open.buffer.len() - before) as u64;
        if open.buffer.len() >= BUFFER_BYTES {
            self.flush(false)?;
        }
        self.tree.apply(zxid, &txn);
        self.last = zxid;
        self.last_time_ms = txn.time_ms;
        self.since_snapshot += 1;
        Ok(true)
    }

    /// Whether enough transactions arrived since the last snapshot for a new one.
    pub fn snapshot_due(&self) -> bool {
        self.options.snapshot_every > 0 && self.since_snapshot >= self.options.snapshot_every
    }

    /// Writes what is buffered and makes it durable.
    pub fn sync(&mut self) -> Result<(), BackupError> {
        self.flush(true)
    }

    fn flush(&mut self, durable: bool) -> Result<(), BackupError> {
        let Some(open) = self.open.as_mut() else { return Ok(()) };
        if !open.buffer.is_empty() {
            open.file.write_all(&open.buffer).map_err(io_err(&open.path))?;
            open.buffer.clear();
        }
        if durable {
            open.file.sync_data().map_err(io_err(&open.path))?;
        }
        Ok(())
    }

    /// Writes a snapshot of the tree at the last transaction held, starts
    /// the next transactions in a new file, and drops what is no longer
    /// kept. Returns the snapshot.
    pub fn roll(&mut self) -> Result<SnapshotFile, BackupError> {
        self.sync()?;
        self.open = None;
        let state = self.tree.snapshot();
        let chunks = Chunks::new(&state, zabkeeper_store::SNAPSHOT_CHUNK_BYTES);
        let file = self.write_snapshot(chunks)?;
        self.prune()?;
        Ok(file)
    }

    fn write_snapshot(&mut self, chunks: impl Iterator<Item = Bytes>) -> Result<SnapshotFile, BackupError> {
        let path = self.catalog.dir.join(snapshot_name(self.last));
        let header = Header { kind: Kind::Snapshot, zxid: self.last, time_ms: self.last_time_ms };
        format::write_whole(&path, |w| {
            w.write_all(&header.encode())?;
            let mut frame = Vec::new();
            for chunk in chunks {
                frame.clear();
                format::frame(&chunk, &mut frame);
                w.write_all(&frame)?;
            }
            Ok(())
        })?;
        let file = SnapshotFile { path, zxid: self.last, time_ms: self.last_time_ms };
        self.catalog.snapshots.retain(|s| s.zxid != file.zxid);
        self.catalog.snapshots.push(file.clone());
        self.since_snapshot = 0;
        Ok(file)
    }

    /// Starts the transaction file that follows the last transaction held.
    fn start_file(&mut self) -> Result<(), BackupError> {
        self.sync()?;
        let path = self.catalog.dir.join(txns_name(self.last));
        let header = Header { kind: Kind::Txns, zxid: self.last, time_ms: zabkeeper_store::clock::now_ms() };
        // Whole or absent: a file without its header would be torn at 0.
        format::write_whole(&path, |w| w.write_all(&header.encode()))?;
        self.catalog.txn_files.retain(|f| f.path != path);
        self.catalog.txn_files.push(TxnFile { path: path.clone(), follows: self.last, started_ms: header.time_ms });
        self.open = Some(open_append(&path)?);
        Ok(())
    }

    /// Keeps the newest `keep_snapshots` snapshots and the transaction
    /// files a restore from the oldest of them may need; while a reader holds
    /// the directory, keeps everything until a later roll.
    fn prune(&mut self) -> Result<(), BackupError> {
        let keep = self.options.keep_snapshots;
        if keep == 0 || self.catalog.snapshots.len() <= keep {
            return Ok(());
        }
        // A reader (a restore, a listing) holds the directory: what it
        // listed stays, and what is due goes at a later roll.
        let Some(_alone) = super::hold_for_pruning(&self.catalog.dir)? else { return Ok(()) };
        let dropped: Vec<SnapshotFile> = self.catalog.snapshots.drain(..self.catalog.snapshots.len() - keep).collect();
        let oldest = self.catalog.snapshots.first().map_or(Zxid::ZERO, |s| s.zxid);
        // Snapshots first: a transaction file left by a crash in between
        // only holds older history, which harms nothing.
        for s in &dropped {
            std::fs::remove_file(&s.path).map_err(io_err(&s.path))?;
        }
        // A file is needed unless the next one starts at or before the oldest snapshot kept.
        let files = &self.catalog.txn_files;
        let unneeded = files.windows(2).take_while(|pair| pair[1].follows <= oldest).count();
        let removed: Vec<TxnFile> = self.catalog.txn_files.drain(..unneeded).collect();
        for f in &removed {
            std::fs::remove_file(&f.path).map_err(io_err(&f.path))?;
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // What was appended reaches the file even when the caller forgot to
        // sync (durability is `sync`'s; a failure here shows on reopening).
        let _ = self.flush(false);
    }
}

fn open_append(path: &Path) -> Result<Open, BackupError> {
    let file = std::fs::OpenOptions::new().append(true).open(path).map_err(io_err(path))?;
    let len = file.metadata().map_err(io_err(path))?.len();
    Ok(Open { path: path.to_path_buf(), file, len, buffer: Vec::with_capacity(BUFFER_BYTES) })
}

/// Removes what a write cut short left (never a file of the backup).
fn remove_partials(dir: &Path) -> Result<(), BackupError> {
    for item in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let path = item.map_err(io_err(dir))?.path();
        if path.extension().is_some_and(|e| e == "partial") {
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
    }
    Ok(())
}
