//! An in-memory store with the same semantics as the sled one, for tests and
//! the simulation. It keeps two copies of the state: what has been applied
//! and what has been flushed. [`MemStorage::crash`] throws the first away,
//! which models a power loss that keeps exactly the durable state (the
//! harshest loss sled's contract allows).

use super::recovery::{self, Source};
use super::{PurgeReport, Recovered, Scan, SnapshotMeta, Storage, StorageError};
use crate::ids::{Epoch, Zxid};
use crate::tree::snapshot;
use crate::tree::TreeState;
use crate::txn::{Entry, Txn};
use crate::zab::StorageOp;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One copy of the durable state. Clones are cheap: the log is a persistent
/// map, so flushing copies no entries.
#[derive(Clone, Debug, Default)]
struct State {
    accepted_epoch: Epoch,
    current_epoch: Epoch,
    log: imbl::OrdMap<Zxid, Arc<Txn>>,
    snapshots: BTreeMap<Zxid, Arc<[Bytes]>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Everything applied, flushed or not: what reads see.
    live: State,
    /// What survives [`MemStorage::crash`].
    durable: State,
}

/// Durable state in memory. Clones share it, so a "restarted" replica can
/// reopen the store its previous incarnation used.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    inner: Arc<Mutex<Inner>>,
}

/// The simulation has no wall clock here: a snapshot's time is unknown.
fn meta_of(zxid: Zxid, chunks: &[Bytes]) -> SnapshotMeta {
    SnapshotMeta::of(zxid, chunks, 0)
}

impl State {
    fn newest_snapshot(&self) -> Zxid {
        self.snapshots.keys().next_back().copied().unwrap_or(Zxid::ZERO)
    }

    fn last_log(&self) -> Zxid {
        self.log.get_max().map_or(Zxid::ZERO, |(zxid, _)| *zxid)
    }

    fn apply(&mut self, op: &StorageOp) -> Result<(), StorageError> {
        match op {
            StorageOp::Append(entries) => {
                recovery::check_append(self.last_log().max(self.newest_snapshot()), entries)?;
                for entry in entries {
                    self.log.insert(entry.zxid, entry.txn.clone());
                }
            }
            StorageOp::TruncateAfter(zxid) => {
                let snapshot = self.newest_snapshot();
                if *zxid < snapshot {
                    return Err(StorageError::Invalid(format!(
                        "truncating after {zxid:?} would cut below the snapshot at {snapshot:?}, \
                         which holds committed state"
                    )));
                }
                let (keep, _) = self.log.split(zxid);
                let own = self.log.get(zxid).cloned();
                self.log = keep;
                if let Some(txn) = own {
                    self.log.insert(*zxid, txn);
                }
            }
            StorageOp::SetAcceptedEpoch(epoch) => self.accepted_epoch = *epoch,
            StorageOp::SetCurrentEpoch(epoch) => self.current_epoch = *epoch,
            StorageOp::InstallSnapshot { zxid, chunks } => {
                if chunks.is_empty() {
                    return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
                }
                self.snapshots.retain(|z, _| z < zxid);
                self.snapshots.insert(*zxid, chunks.clone().into());
                self.log = imbl::OrdMap::new();
            }
        }
        Ok(())
    }
}

impl Source for State {
    fn epochs(&self) -> Result<(Epoch, Epoch), StorageError> {
        Ok((self.accepted_epoch, self.current_epoch))
    }

    fn snapshot_zxids(&self) -> Result<Vec<Zxid>, StorageError> {
        Ok(self.snapshots.keys().copied().collect())
    }

    fn load_snapshot(&self, zxid: Zxid) -> Result<TreeState, StorageError> {
        let chunks = self
            .snapshots
            .get(&zxid)
            .ok_or_else(|| StorageError::IncompleteSnapshot { zxid, reason: "it vanished during recovery".into() })?;
        snapshot::from_chunks(chunks.iter().map(|c| c.as_ref()))
            .map_err(|source| StorageError::CorruptSnapshot { zxid, source })
    }

    fn log_after(&self, zxid: Zxid) -> Result<Vec<Entry>, StorageError> {
        let (_, after) = self.log.split(&zxid);
        Ok(after.iter().map(|(zxid, txn)| Entry { zxid: *zxid, txn: txn.clone() }).collect())
    }
}

impl MemStorage {
    /// An empty store.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the state whole before anything that
        // could panic, so a poisoned lock still guards consistent data.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Simulates a power loss: every operation applied since the last flush
    /// is forgotten (snapshots saved with `save_snapshot` were durable at once).
    pub fn crash(&self) {
        let mut inner = self.lock();
        inner.live = inner.durable.clone();
    }

    /// Whether transaction `zxid` would survive a crash now: it is in the
    /// durable log or covered by a durable snapshot (the simulation's
    /// durability check, without decoding anything).
    pub fn durably_holds(&self, zxid: Zxid) -> bool {
        let inner = self.lock();
        inner.durable.newest_snapshot() >= zxid || inner.durable.log.contains_key(&zxid)
    }

    /// Flips a byte in one chunk of a stored snapshot, applied and durable
    /// copies alike, to test recovery from damaged storage.
    #[cfg(any(test, feature = "testing"))]
    pub fn corrupt_snapshot_chunk(&self, zxid: Zxid, chunk: usize) -> bool {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let mut changed = false;
        for state in [&mut inner.live, &mut inner.durable] {
            if let Some(chunks) = state.snapshots.get_mut(&zxid) {
                if let Some(bytes) = chunks.get(chunk) {
                    let mut damaged = bytes.to_vec();
                    let mid = damaged.len() / 2;
                    if let Some(b) = damaged.get_mut(mid) {
                        *b ^= 0x5a;
                    }
                    let mut all = chunks.to_vec();
                    all[chunk] = Bytes::from(damaged);
                    *chunks = all.into();
                    changed = true;
                }
            }
        }
        changed
    }
}

impl Storage for MemStorage {
    fn recover(&self) -> Result<Recovered, StorageError> {
        let state = self.lock().live.clone();
        recovery::recover(&state)
    }

    fn apply(&self, ops: &[StorageOp]) -> Result<(), StorageError> {
        let mut inner = self.lock();
        for op in ops {
            inner.live.apply(op)?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        let mut inner = self.lock();
        inner.durable = inner.live.clone();
        Ok(())
    }

    fn save_snapshot_from(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        let chunks: Vec<Bytes> = chunks.collect();
        let chunks = chunks.as_slice();
        if chunks.is_empty() {
            return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
        }
        let stored: Arc<[Bytes]> = chunks.to_vec().into();
        let mut inner = self.lock();
        // Durable on return, without making the unflushed log durable: a
        // crash may keep a snapshot ahead of the log, which recovery accepts.
        inner.live.snapshots.insert(zxid, stored.clone());
        inner.durable.snapshots.insert(zxid, stored);
        Ok(meta_of(zxid, chunks))
    }

    fn purge(&self, keep: usize) -> Result<PurgeReport, StorageError> {
        if keep == 0 {
            return Err(StorageError::Invalid("purge must keep at least one snapshot".into()));
        }
        let mut inner = self.lock();
        let state = &mut inner.live;
        let Some(split) = state.snapshots.len().checked_sub(keep) else {
            return Ok(PurgeReport::default());
        };
        let Some(&oldest_kept) = state.snapshots.keys().nth(split) else {
            return Ok(PurgeReport::default());
        };
        let kept = state.snapshots.split_off(&oldest_kept);
        let snapshots_removed = std::mem::replace(&mut state.snapshots, kept).len();
        // Through the oldest kept snapshot (it holds that entry), as the sled
        // store purges; entry by entry from the front: a purge removes about one snapshot
        // interval, where `split` rebuilt the kept part node by node.
        let mut entries_removed = 0;
        while let Some(zxid) = state.log.get_min().map(|(zxid, _)| *zxid).filter(|zxid| *zxid <= oldest_kept) {
            state.log.remove(&zxid);
            entries_removed += 1;
        }
        Ok(PurgeReport { snapshots_removed, entries_removed })
    }

    fn scan_log(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError> {
        let inner = self.lock();
        let log = &inner.live.log;
        let entries: Box<dyn Iterator<Item = (&Zxid, &Arc<Txn>)>> = match scan {
            Scan::From(from) => Box::new(log.range(from..)),
            Scan::Back(to) => Box::new(log.range(..=to).rev()),
        };
        for (zxid, txn) in entries {
            if !visit(Entry { zxid: *zxid, txn: txn.clone() }) {
                break;
            }
        }
        Ok(())
    }

    fn snapshot_chunk(&self, zxid: Zxid, index: u32) -> Result<Option<Bytes>, StorageError> {
        let inner = self.lock();
        Ok(inner.live.snapshots.get(&zxid).and_then(|chunks| chunks.get(index as usize).cloned()))
    }

    fn log_bounds(&self) -> Result<Option<(Zxid, Zxid)>, StorageError> {
        let inner = self.lock();
        let log = &inner.live.log;
        Ok(log.get_min().zip(log.get_max()).map(|((first, _), (last, _))| (*first, *last)))
    }

    fn snapshots(&self) -> Result<Vec<SnapshotMeta>, StorageError> {
        let inner = self.lock();
        Ok(inner.live.snapshots.iter().map(|(zxid, chunks)| meta_of(*zxid, chunks)).collect())
    }
}
