//! What recovery reads from the store ([`Source`]): the epochs, the
//! snapshots, one snapshot decoded on a thread beside its reading (most of
//! a restart at a million znodes), and the log after a zxid.

use super::*;

/// Snapshot chunks read ahead of their decoding at recovery (64 KiB each).
pub(crate) const DECODE_AHEAD: usize = 16;

impl Source for SledStorage {
    fn epochs(&self) -> Result<(Epoch, Epoch), StorageError> {
        Ok((self.read_epoch(ACCEPTED_EPOCH)?, self.read_epoch(CURRENT_EPOCH)?))
    }

    fn snapshot_zxids(&self) -> Result<Vec<Zxid>, StorageError> {
        Ok(self.snapshot_zxid_list())
    }

    /// Reads chunks out of sled on this thread while another decodes them:
    /// at 1 M znodes each takes ~0.3-0.45 s, most of a restart, and
    /// overlapped a restart waits for the longer one only.
    fn load_snapshot(&self, zxid: Zxid) -> Result<TreeState, StorageError> {
        let corrupt = |source| StorageError::CorruptSnapshot { zxid, source };
        std::thread::scope(|scope| {
            let (chunks, decoded) = std::sync::mpsc::sync_channel::<IVec>(DECODE_AHEAD);
            let spawned =
                std::thread::Builder::new().name("snapshot-decode".into()).spawn_scoped(scope, move || decode(decoded));
            let Ok(decoder) = spawned else {
                // No thread to spare: decode here, one chunk after the other.
                let mut reader = Reader::new();
                self.read_snapshot(zxid, &mut |chunk| reader.feed(&chunk).map_err(corrupt))?;
                return reader.finish().map_err(corrupt);
            };
            let read = self.read_snapshot(zxid, &mut |chunk| {
                chunks.send(chunk).map_err(|_| StorageError::Invalid("the snapshot's decoder stopped".into()))
            });
            drop(chunks);
            let decoded = decoder.join().map_err(|payload| StorageError::Damaged {
                during: "decoding a snapshot",
                reason: zabkeeper_core::panics::message(payload.as_ref()),
            })?;
            match (read, decoded) {
                // A chunk the decoder refused is the finding, whatever the
                // reading met after it: recovery may then fall back on an
                // older snapshot, as it may for any snapshot fault.
                (_, Err(Decoded::BadChunk(e))) => Err(corrupt(e)),
                (Err(e), _) => Err(e),
                (Ok(()), Ok(state)) => Ok(state),
                (Ok(()), Err(Decoded::BadEnd(e))) => Err(corrupt(e)),
            }
        })
    }

    fn log_after(&self, zxid: Zxid) -> Result<Vec<Entry>, StorageError> {
        match zxid.0.checked_add(1) {
            Some(next) => {
                let mut out = Vec::new();
                self.scan_runs(Scan::From(Zxid(next)), &mut |entry| {
                    out.push(entry);
                    true
                })?;
                Ok(out)
            }
            None => Ok(Vec::new()),
        }
    }
}

/// Where decoding a snapshot failed.
enum Decoded {
    /// At a chunk: the decoder stopped there, and so did the reading.
    BadChunk(SnapshotError),
    /// At the end: the chunks were read whole but do not finish a snapshot.
    BadEnd(SnapshotError),
}

/// Decodes snapshot chunks as they arrive, until the sender hangs up.
fn decode(chunks: std::sync::mpsc::Receiver<IVec>) -> Result<TreeState, Decoded> {
    let mut reader = Reader::new();
    for chunk in chunks {
        // Returning drops the receiver, which stops the reading.
        reader.feed(&chunk).map_err(Decoded::BadChunk)?;
    }
    reader.finish().map_err(Decoded::BadEnd)
}
