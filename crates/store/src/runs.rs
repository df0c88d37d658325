//! The log in sled as runs: each append (all the entries one group commit
//! gathers) is one value, keyed by its first zxid.
//!
//! sled's cost is per key: a node rewrite, page-cache bookkeeping and
//! in-memory node space for each. One key per transaction made the log most
//! of a write's CPU and of a replica's memory; one key per run divides both
//! by the run's length. A run's value is a header (a tag, its last zxid and
//! its entry count, so the tail and bounds need no decoding) and the
//! entries as one sealed record (`txn::codec`: a checksum covers them all).
//! Values of the store's first format, one sealed transaction per key, are
//! still read as runs of one.

use super::{durable, hex, io, log_key, ordered, zxid_of, SledStorage, LARGE_RUN_TREE, LOG_TREE};
use sled::Batch;
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::storage::{Scan, StorageError};
use zabkeeper_core::txn::{codec, Entry, Txn};

/// First byte of a run's value; a first-format value starts with the codec's
/// version byte (1) instead.
const RUN_TAG: u8 = 0xB7;
/// Tag, last zxid, entry count.
const HEADER_LEN: usize = 1 + 8 + 4;
/// The most transaction bytes one run gathers, for a log database of
/// `segment_size`. sled 0.34 keeps up to 17 values in a leaf page and writes
/// a page over a quarter of a segment as a blob file, and some of those
/// files it never deletes once the page is rewritten (measured: a log of
/// 1 KiB writes in runs of 50 leaked a ~200 KiB blob file every ~1 000
/// writes, for ever). Runs of at most a twentieth of that quarter keep a
/// leaf of them inline; a transaction larger than the cap is a run alone.
pub(super) fn run_bytes(segment_size: usize) -> usize {
    segment_size / 4 / 20
}

/// A run's value for `entries` (ascending, at least one).
pub(super) fn encode(entries: &[&Entry]) -> Vec<u8> {
    let last = entries.last().map_or(Zxid::ZERO, |e| e.zxid);
    // A run is one group commit: far fewer than 2^32 entries.
    let count = u32::try_from(entries.len()).expect("a run holds fewer than 2^32 entries");
    let body: Vec<(Zxid, &Txn)> = entries.iter().map(|e| (e.zxid, &*e.txn)).collect();
    let mut out = Vec::with_capacity(HEADER_LEN + 160 * entries.len());
    out.push(RUN_TAG);
    out.extend_from_slice(&last.0.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    codec::encode_value_into(&body, &mut out);
    out
}

/// The last zxid and the entry count of the run at `key`, from its header.
pub(super) fn bounds(key: &[u8], value: &[u8]) -> Result<(Zxid, u32), StorageError> {
    let first = zxid_of(LOG_TREE, key)?;
    if value.first() != Some(&RUN_TAG) {
        return Ok((first, 1));
    }
    let header: &[u8; HEADER_LEN] = value
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| corrupt_run(key, format!("{} bytes, shorter than a run header", value.len())))?;
    let last = Zxid(u64::from_be_bytes([
        header[1], header[2], header[3], header[4], header[5], header[6], header[7], header[8],
    ]));
    let count = u32::from_be_bytes([header[9], header[10], header[11], header[12]]);
    if last < first || count == 0 {
        return Err(corrupt_run(key, format!("header says last {last:?} and {count} entries")));
    }
    Ok((last, count))
}

/// The entries of the run at `key`, checked against its key and header.
pub(super) fn decode(key: &[u8], value: &[u8]) -> Result<Vec<Entry>, StorageError> {
    let first = zxid_of(LOG_TREE, key)?;
    if value.first() != Some(&RUN_TAG) {
        let txn = codec::decode(value).map_err(|source| StorageError::CorruptEntry { key: hex(key), source })?;
        return Ok(vec![Entry::new(first, txn)]);
    }
    let (last, count) = bounds(key, value)?;
    let body: Vec<(Zxid, Txn)> = codec::decode_value(&value[HEADER_LEN..])
        .map_err(|source| StorageError::CorruptEntry { key: hex(key), source })?;
    let fits = body.first().map(|e| e.0) == Some(first)
        && body.last().map(|e| e.0) == Some(last)
        && usize::try_from(count).is_ok_and(|n| n == body.len())
        && body.windows(2).all(|w| w[0].0 < w[1].0);
    if !fits {
        return Err(corrupt_run(key, format!("its entries do not match its key and header ({} entries)", body.len())));
    }
    Ok(body.into_iter().map(|(zxid, txn)| Entry::new(zxid, txn)).collect())
}

fn corrupt_run(key: &[u8], reason: String) -> StorageError {
    StorageError::CorruptKey { tree: LOG_TREE, key: hex(key), reason }
}

impl SledStorage {
    /// The last logged zxid (zero when the log is empty).
    pub(super) fn last_log(&self) -> Result<Zxid, StorageError> {
        match self.log.last().map_err(io("reading the log tail"))? {
            Some((key, value)) => Ok(bounds(&key, &value)?.0),
            None => Ok(Zxid::ZERO),
        }
    }

    /// Refuses a log that lost a large run it listed: sled keeps such a run
    /// in a blob file and skips its record without a word when the file is
    /// gone, which would leave a hole the log's own checks miss at the end
    /// of the log or of an epoch. Runs the newest snapshot covers need not
    /// be in the log any more.
    pub(super) fn check_large_runs(&self) -> Result<(), StorageError> {
        let covered = self.newest_snapshot();
        for item in
            ordered(LARGE_RUN_TREE, "open: reading the large runs", self.large_runs.range(super::after(covered)))
        {
            let (key, _) = item?;
            let zxid = zxid_of(LARGE_RUN_TREE, &key)?;
            if !self.log.contains_key(&key).map_err(io("open: reading the log"))? {
                return Err(StorageError::TornFile {
                    path: self.path.join(durable::BLOB_DIR).display().to_string(),
                    reason: format!(
                        "the log held transaction {zxid} in a run sled keeps as a blob file, and the run is gone (its blob file is missing)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The first and last logged zxids.
    pub(super) fn log_span(&self) -> Result<Option<(Zxid, Zxid)>, StorageError> {
        let first = self.log.first().map_err(io("reading the log head"))?;
        match first {
            Some((key, _)) => Ok(Some((zxid_of(LOG_TREE, &key)?, self.last_log()?))),
            None => Ok(None),
        }
    }

    /// Shows entries to `visit` in the direction of `scan` until it says stop.
    pub(super) fn scan_runs(&self, scan: Scan, visit: &mut dyn FnMut(Entry) -> bool) -> Result<(), StorageError> {
        match scan {
            Scan::From(from) => {
                // The run holding `from` starts at or before it.
                let start = match self.log.range(..=log_key(from)).next_back() {
                    Some(item) => item.map_err(io("reading the log"))?.0,
                    None => log_key(from).as_ref().into(),
                };
                for item in ordered(LOG_TREE, "reading the log", self.log.range(start..)) {
                    let (key, value) = item?;
                    for entry in decode(&key, &value)?.into_iter().filter(|e| e.zxid >= from) {
                        if !visit(entry) {
                            return Ok(());
                        }
                    }
                }
            }
            Scan::Back(to) => {
                for item in self.log.range(..=log_key(to)).rev() {
                    let (key, value) = item.map_err(io("reading the log"))?;
                    for entry in decode(&key, &value)?.into_iter().rev().filter(|e| e.zxid <= to) {
                        if !visit(entry) {
                            return Ok(());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Appends `entries` as runs of at most [`run_bytes`] of transactions
    /// each (an entry larger than that is a run of its own).
    ///
    /// Each run is one value, so a crash keeps a run whole or not at all,
    /// and sled recovers a prefix of its writes: what survives of an append
    /// is a prefix of its entries, as a follower's log may be (nothing of it
    /// is acknowledged before the flush).
    pub(super) fn append_run(&self, entries: &[&Entry]) -> Result<(), StorageError> {
        let mut start = 0;
        while start < entries.len() {
            let mut end = start + 1;
            let mut bytes = entries[start].txn.approximate_size();
            while end < entries.len() && bytes + entries[end].txn.approximate_size() <= self.run_bytes {
                bytes += entries[end].txn.approximate_size();
                end += 1;
            }
            let run = &entries[start..end];
            self.log.insert(log_key(run[0].zxid), encode(run)).map_err(io("appending to the log"))?;
            if bytes > self.run_bytes {
                // Only a run of one transaction outgrows the cap. Listed at
                // the flush, once its blob is synced (see `flush_durably`).
                self.large_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(run[0].zxid);
            }
            start = end;
        }
        Ok(())
    }

    /// Removes every entry above `zxid`, shortening the run that holds it.
    pub(super) fn truncate_runs_after(&self, zxid: Zxid) -> Result<(), StorageError> {
        // Unlisted before the runs go: a crash between the two leaves a run
        // unchecked, never a listed run missing.
        self.large_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|z| *z <= zxid);
        let mut unlisted = Batch::default();
        for item in ordered(LARGE_RUN_TREE, "truncating the log", self.large_runs.range(super::after(zxid))) {
            unlisted.remove(item?.0);
        }
        self.large_runs.apply_batch(unlisted).map_err(io("truncating the log"))?;
        let mut batch = Batch::default();
        if let Some(item) = self.log.range(..=log_key(zxid)).next_back() {
            let (key, value) = item.map_err(io("truncating the log"))?;
            if bounds(&key, &value)?.0 > zxid {
                let kept: Vec<Entry> = decode(&key, &value)?.into_iter().filter(|e| e.zxid <= zxid).collect();
                batch.insert(key, encode(&kept.iter().collect::<Vec<_>>()));
            }
        }
        for item in ordered(LOG_TREE, "truncating the log", self.log.range(super::after(zxid))) {
            batch.remove(item?.0);
        }
        // One batch: removing only the lower keys would leave a hole.
        self.log.apply_batch(batch).map_err(io("truncating the log"))
    }

    /// Removes every entry at or below `zxid`; returns how many. A run that
    /// straddles `zxid` is rewritten with what follows it, under the key of
    /// its first kept entry.
    ///
    /// Whole runs go one plain remove at a time, oldest first, not in one
    /// batch: a sled batch takes a write lock that every sled call of the
    /// process waits behind (the appends of group commit too), and a purge
    /// after a snapshot removes ~100 000 entries. sled recovers a prefix of
    /// its writes, so a crash part way leaves the log's newer part whole,
    /// still starting at or below `zxid`.
    pub(super) fn purge_runs_through(&self, zxid: Zxid) -> Result<usize, StorageError> {
        let mut removed = 0usize;
        let mut straddling = None;
        for item in ordered(LOG_TREE, "purging the log", self.log.range(..=log_key(zxid))) {
            let (key, value) = item?;
            let (last, count) = bounds(&key, &value)?;
            if last <= zxid {
                self.log.remove(&key).map_err(io("purging the log"))?;
                removed += usize::try_from(count).unwrap_or(usize::MAX);
            } else {
                // Only the newest run at or below `zxid` can reach past it.
                straddling = Some((key, value));
            }
        }
        if let Some((key, value)) = straddling {
            let (gone, kept): (Vec<Entry>, Vec<Entry>) =
                decode(&key, &value)?.into_iter().partition(|e| e.zxid <= zxid);
            removed += gone.len();
            let mut batch = Batch::default();
            batch.remove(key);
            if let Some(first) = kept.first() {
                batch.insert(&log_key(first.zxid), encode(&kept.iter().collect::<Vec<_>>()));
            }
            // One batch: a crash keeps the run whole or its tail, never a hole.
            self.log.apply_batch(batch).map_err(io("purging the log"))?;
        }
        // After the runs: the newest snapshot covers them, so the check
        // skips them meanwhile.
        for item in ordered(LARGE_RUN_TREE, "purging the log", self.large_runs.range(..=log_key(zxid))) {
            self.large_runs.remove(item?.0).map_err(io("purging the log"))?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::storage::recovery::Source;
    use zabkeeper_core::storage::Storage;
    use zabkeeper_core::txn::TxnBody;
    use zabkeeper_core::zab::StorageOp;

    fn entry(counter: u32) -> Entry {
        let txn =
            Txn { session: SessionId(1), cxid: 1, time_ms: 0, body: TxnBody::Delete { path: format!("/n{counter}") } };
        Entry { zxid: Zxid::new(1, counter), txn: Arc::new(txn) }
    }

    #[test]
    fn a_run_round_trips_and_its_header_gives_the_tail() {
        let entries: Vec<Entry> = (3..=7).map(entry).collect();
        let value = encode(&entries.iter().collect::<Vec<_>>());
        let key = log_key(Zxid::new(1, 3));
        assert_eq!(bounds(&key, &value).unwrap(), (Zxid::new(1, 7), 5));
        assert_eq!(decode(&key, &value).unwrap(), entries);
    }

    #[test]
    fn a_first_format_value_reads_as_a_run_of_one() {
        let e = entry(4);
        let value = codec::encode(&e.txn);
        let key = log_key(e.zxid);
        assert_eq!(bounds(&key, &value).unwrap(), (e.zxid, 1));
        assert_eq!(decode(&key, &value).unwrap(), vec![e]);
    }

    fn zxids(entries: &[Entry]) -> Vec<u32> {
        entries.iter().map(|e| e.zxid.counter()).collect()
    }

    fn store_with_runs(dir: &std::path::Path) -> SledStorage {
        let store = SledStorage::open(dir).expect("open");
        // Three appends: runs 1..=3, 4..=6, 7..=9.
        for run in [1..=3u32, 4..=6, 7..=9] {
            store.apply(&[StorageOp::Append(run.map(entry).collect())]).expect("append");
        }
        store.flush().expect("flush");
        store
    }

    #[test]
    fn a_store_keeps_one_key_per_append_and_reads_entries_across_runs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = store_with_runs(dir.path());
        assert_eq!(store.log.len(), 3);
        assert_eq!(store.log_bounds().unwrap(), Some((Zxid::new(1, 1), Zxid::new(1, 9))));
        assert_eq!(zxids(&store.read_log(Zxid::new(1, 5), 3).unwrap()), [5, 6, 7]);
        assert_eq!(zxids(&store.read_log(Zxid::ZERO, 100).unwrap()), (1..=9).collect::<Vec<_>>());
        assert_eq!(zxids(&store.recover().unwrap().log), (1..=9).collect::<Vec<_>>());
    }

    #[test]
    fn truncating_inside_a_run_keeps_its_head() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = store_with_runs(dir.path());
        store.apply(&[StorageOp::TruncateAfter(Zxid::new(1, 5))]).expect("truncate");
        store.flush().expect("flush");
        assert_eq!(zxids(&store.recover().unwrap().log), [1, 2, 3, 4, 5]);
        assert_eq!(store.log_bounds().unwrap(), Some((Zxid::new(1, 1), Zxid::new(1, 5))));
        // The log continues after the cut.
        store.apply(&[StorageOp::Append(vec![entry(6)])]).expect("append after the cut");
        assert_eq!(zxids(&store.recover().unwrap().log), [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn purging_inside_a_run_keeps_its_tail_under_a_new_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = store_with_runs(dir.path());
        assert_eq!(store.purge_runs_through(Zxid::new(1, 5)).unwrap(), 5);
        assert_eq!(zxids(&store.read_log(Zxid::ZERO, 100).unwrap()), (6..=9).collect::<Vec<_>>());
        assert_eq!(store.log_bounds().unwrap(), Some((Zxid::new(1, 6), Zxid::new(1, 9))));
        assert_eq!(store.log.len(), 2, "runs 6..=6 and 7..=9");
        assert_eq!(zxids(&store.log_after(Zxid::ZERO).unwrap()), [6, 7, 8, 9]);
    }

    #[test]
    fn a_first_format_store_opens_reads_and_is_upgraded() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let db = super::super::open_retrying(&sled::Config::new().path(dir.path())).expect("raw open");
            let log = db.open_tree(LOG_TREE).expect("log tree");
            for e in (1..=4).map(entry) {
                log.insert(log_key(e.zxid), codec::encode(&e.txn)).expect("write");
            }
            db.open_tree(super::super::META_TREE)
                .expect("meta")
                .insert("format", super::super::FORMAT_V1)
                .expect("format");
            db.flush().expect("flush");
            std::fs::write(dir.path().join(super::super::SIDECAR), super::super::FORMAT_V1).expect("sidecar");
        }
        {
            let store = SledStorage::open(dir.path()).expect("a first-format store opens");
            assert_eq!(zxids(&store.recover().unwrap().log), [1, 2, 3, 4]);
            store.apply(&[StorageOp::Append((5..=6).map(entry).collect())]).expect("append a run");
            store.flush().expect("flush");
        }
        let store = SledStorage::open(dir.path()).expect("reopens");
        assert_eq!(zxids(&store.recover().unwrap().log), [1, 2, 3, 4, 5, 6]);
        let marker = std::fs::read(dir.path().join(super::super::SIDECAR)).expect("sidecar");
        assert_eq!(marker, super::super::FORMAT, "upgraded to the second format");
    }

    #[test]
    fn a_run_that_does_not_match_its_key_or_header_is_refused() {
        let entries: Vec<Entry> = (3..=4).map(entry).collect();
        let value = encode(&entries.iter().collect::<Vec<_>>());
        let wrong_key = log_key(Zxid::new(1, 2));
        assert!(matches!(decode(&wrong_key, &value), Err(StorageError::CorruptKey { .. })));
        let mut flipped = value.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert!(matches!(decode(&log_key(Zxid::new(1, 3)), &flipped), Err(StorageError::CorruptEntry { .. })));
        assert!(matches!(bounds(&log_key(Zxid::new(1, 3)), &value[..5]), Err(StorageError::CorruptKey { .. })));
    }
}
