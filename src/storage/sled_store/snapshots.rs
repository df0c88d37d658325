//! Snapshots in the sled store: chunks written before the completion marker
//! that makes them count, and unfinished ones removed at open.

use super::*;
use crate::server::clock::now_ms;
use crate::tree::snapshot;

/// The completion marker of a stored snapshot.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(super) struct Marker {
    pub(super) chunks: u32,
    pub(super) bytes: u64,
    /// Nodes in it, from its footer (0 in markers of the first format).
    pub(super) nodes: u64,
    /// When it was written, ms since the Unix epoch (0 in the first format).
    pub(super) created_ms: i64,
}

/// The marker as the store's first format wrote it.
#[derive(Deserialize)]
struct MarkerV1 {
    chunks: u32,
    bytes: u64,
}

impl Marker {
    fn new(meta: &SnapshotMeta) -> Marker {
        Marker { chunks: meta.chunks, bytes: meta.bytes, nodes: meta.nodes, created_ms: meta.created_ms }
    }

    /// Reads a marker of either format.
    fn decode(zxid: Zxid, value: &[u8]) -> Result<Marker, StorageError> {
        // A first-format value is too short for the new fields, so it never
        // decodes as the new format.
        codec::decode_value::<Marker>(value)
            .or_else(|_| {
                codec::decode_value::<MarkerV1>(value).map(|m| Marker {
                    chunks: m.chunks,
                    bytes: m.bytes,
                    nodes: 0,
                    created_ms: 0,
                })
            })
            .map_err(|e| StorageError::IncompleteSnapshot { zxid, reason: format!("its marker is corrupt: {e}") })
    }
}

/// The key of one snapshot chunk.
pub(crate) fn chunk_key(zxid: Zxid, index: u32) -> [u8; 12] {
    let mut key = [0; 12];
    key[..8].copy_from_slice(&zxid.0.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

pub(super) fn chunk_zxid(key: &[u8]) -> Result<Zxid, StorageError> {
    if key.len() != 12 {
        return Err(StorageError::CorruptKey {
            tree: CHUNK_TREE,
            key: hex(key),
            reason: format!("{} bytes, expected 12", key.len()),
        });
    }
    zxid_of(CHUNK_TREE, &key[..8])
}

/// A chunk's index in its key. Chunks are megabytes each, so a snapshot
/// would need petabytes to run out of 32 bits.
pub(super) fn chunk_index(i: usize) -> u32 {
    u32::try_from(i).expect("a snapshot has fewer than 2^32 chunks")
}

impl SledStorage {
    /// Drops chunks that no marker covers: a snapshot write a crash cut short.
    /// Visits one chunk per stored zxid, not every chunk: snapshots are large.
    pub(super) fn remove_unfinished_snapshots(&self) -> Result<(), StorageError> {
        let mut from = [0u8; 12];
        let mut removed = 0usize;
        loop {
            let first = self.chunks.range(from..).next().transpose().map_err(io("open: scanning snapshot chunks"))?;
            let Some((key, _)) = first else { break };
            let zxid = chunk_zxid(&key)?;
            if !self.index.contains_key(log_key(zxid)).map_err(io("open: reading the snapshot index"))? {
                let mut batch = Batch::default();
                for key in self.chunk_keys(zxid)? {
                    batch.remove(key);
                    removed += 1;
                }
                self.chunks.apply_batch(batch).map_err(io("open: removing unfinished snapshots"))?;
            }
            let Some(next) = zxid.0.checked_add(1) else { break };
            from = chunk_key(Zxid(next), 0);
        }
        if removed > 0 {
            tracing::info!(chunks = removed, "removed chunks of unfinished snapshot writes");
            self.db.flush().map_err(io("open: flushing"))?;
        }
        Ok(())
    }

    pub(super) fn lock_snapshots(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing inconsistent.
        self.snapshot_lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The zxid of the newest snapshot with a marker, zero when none.
    pub(super) fn newest_snapshot(&self) -> Result<Zxid, StorageError> {
        match self.index.last().map_err(io("reading the snapshot index"))? {
            Some((key, _)) => zxid_of(INDEX_TREE, &key),
            None => Ok(Zxid::ZERO),
        }
    }

    pub(super) fn marker(&self, zxid: Zxid) -> Result<Option<Marker>, StorageError> {
        let Some(value) = self.index.get(log_key(zxid)).map_err(io("reading the snapshot index"))? else {
            return Ok(None);
        };
        Marker::decode(zxid, &value).map(Some)
    }

    pub(super) fn markers(&self) -> Result<Vec<(Zxid, Marker)>, StorageError> {
        let mut out = Vec::new();
        for item in ordered(INDEX_TREE, "reading the snapshot index", self.index.iter()) {
            let (key, value) = item?;
            let zxid = zxid_of(INDEX_TREE, &key)?;
            let marker = Marker::decode(zxid, &value)?;
            out.push((zxid, marker));
        }
        Ok(out)
    }

    pub(super) fn chunk_keys(&self, zxid: Zxid) -> Result<Vec<IVec>, StorageError> {
        ordered(CHUNK_TREE, "listing snapshot chunks", self.chunks.scan_prefix(log_key(zxid)))
            .map(|item| item.map(|(key, _)| key))
            .collect()
    }

    /// Installs a leader's snapshot (SNAP): it replaces the whole log and
    /// any snapshot above `zxid`.
    pub(super) fn install_snapshot(&self, zxid: Zxid, chunks: &[Bytes]) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        self.replace_snapshot(zxid, chunks, true)
    }

    /// Stores a snapshot of this replica's own state and its marker.
    pub(super) fn store_snapshot(
        &self,
        zxid: Zxid,
        chunks: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<SnapshotMeta, StorageError> {
        let _serialized = self.lock_snapshots();
        let replacing = self.index.contains_key(log_key(zxid)).map_err(io("reading the snapshot index"))?;
        if replacing {
            let chunks: Vec<Bytes> = chunks.collect();
            return self.replace_snapshot(zxid, &chunks, false);
        }
        // Common case, the background snapshot: chunks without a marker are
        // ignored, so they need no atomicity and can be written as they are
        // serialized, one in memory at a time; and plain inserts do not take
        // sled's global write lock that log appends wait on. Chunks already
        // at this zxid are the leftovers of a write a crash cut short.
        for key in self.chunk_keys(zxid)? {
            self.chunks.remove(key).map_err(io("writing a snapshot"))?;
        }
        let (mut count, mut bytes, mut last) = (0u32, 0u64, None);
        for chunk in chunks {
            self.chunks.insert(chunk_key(zxid, count), chunk.as_ref()).map_err(io("writing a snapshot"))?;
            count = count
                .checked_add(1)
                .ok_or_else(|| StorageError::Invalid(format!("snapshot at {zxid:?} has too many chunks")))?;
            bytes += chunk.len() as u64;
            last = Some(chunk);
        }
        let Some(last) = last else {
            return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
        };
        let nodes = snapshot::footer_counts(&last).map_or(0, |(nodes, _)| nodes);
        let meta = SnapshotMeta { zxid, bytes, chunks: count, nodes, created_ms: now_ms() };
        // Written last: sled recovers a prefix, so a durable marker implies
        // durable chunks.
        let sealed = codec::encode_value(&Marker::new(&meta));
        self.index.insert(log_key(zxid), sealed).map_err(io("writing a snapshot marker"))?;
        Ok(meta)
    }

    /// Replaces the snapshot at `zxid` (and with `install`, the log and any
    /// later snapshot) in one transaction.
    fn replace_snapshot(&self, zxid: Zxid, chunks: &[Bytes], install: bool) -> Result<SnapshotMeta, StorageError> {
        let count = u32::try_from(chunks.len())
            .map_err(|_| StorageError::Invalid(format!("snapshot at {zxid:?} has too many chunks")))?;
        if count == 0 {
            return Err(StorageError::Invalid(format!("snapshot at {zxid:?} has no chunks")));
        }
        let meta = SnapshotMeta::of(zxid, chunks, now_ms());
        let sealed = codec::encode_value(&Marker::new(&meta));
        // Leftovers at this zxid beyond the new count must not survive.
        let stale: Vec<IVec> = self
            .chunk_keys(zxid)?
            .into_iter()
            .filter(|key| key.len() == 12 && u32::from_be_bytes([key[8], key[9], key[10], key[11]]) >= count)
            .collect();
        let mut chunk_batch = Batch::default();
        for key in stale {
            chunk_batch.remove(key);
        }
        for (i, chunk) in chunks.iter().enumerate() {
            chunk_batch.insert(&chunk_key(zxid, chunk_index(i)), chunk.as_ref());
        }
        let mut index_batch = Batch::default();
        index_batch.insert(&log_key(zxid), sealed);
        let mut log_batch = Batch::default();
        if install {
            for item in ordered(INDEX_TREE, "reading the snapshot index", self.index.range(after(zxid))) {
                let (key, _) = item?;
                for chunk in self.chunk_keys(zxid_of(INDEX_TREE, &key)?)? {
                    chunk_batch.remove(chunk);
                }
                index_batch.remove(key);
            }
            for item in ordered(LOG_TREE, "clearing the log", self.log.iter()) {
                log_batch.remove(item?.0);
            }
        }
        // Replacing a marked snapshot, or replacing the log, must be atomic:
        // either intermediate state would lose or mix up committed history.
        (&self.chunks, &self.index, &self.log)
            .transaction(|(chunks, index, log)| {
                chunks.apply_batch(&chunk_batch)?;
                index.apply_batch(&index_batch)?;
                log.apply_batch(&log_batch)?;
                Ok(())
            })
            .map_err(tx_err("installing a snapshot"))?;
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct FirstFormat {
        chunks: u32,
        bytes: u64,
    }

    #[test]
    fn markers_of_both_formats_decode() {
        let old = codec::encode_value(&FirstFormat { chunks: 3, bytes: 700 });
        let read = Marker::decode(Zxid(9), &old).expect("first format");
        assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 0, 0));
        let meta = SnapshotMeta { zxid: Zxid(9), bytes: 700, chunks: 3, nodes: 42, created_ms: 1_700_000_000_000 };
        let read = Marker::decode(Zxid(9), &codec::encode_value(&Marker::new(&meta))).expect("new format");
        assert_eq!((read.chunks, read.bytes, read.nodes, read.created_ms), (3, 700, 42, 1_700_000_000_000));
        assert!(Marker::decode(Zxid(9), b"garbage").is_err());
    }
}
