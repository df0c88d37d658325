//! The storage worker: a dedicated thread that performs the replica's storage
//! operations and makes them durable with group commit.
//!
//! The owner task sends every operation of one turn as one batch; the worker
//! takes all batches that are waiting, applies them in order, and flushes
//! once (one fsync for many transactions), then reports the highest sequence
//! number it made durable. sled is synchronous, so this never runs on the
//! async threads, and a slow disk never delays heartbeats.

use super::Event;
use crate::storage::{Storage, StorageOp};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A batch of operations with their sequence numbers.
pub type Batch = Vec<(u64, StorageOp)>;

/// Starts the worker; it stops when the sender is dropped, after flushing.
pub fn spawn(
    storage: Arc<dyn Storage>,
    events: mpsc::Sender<Event>,
) -> std::io::Result<(mpsc::UnboundedSender<Batch>, std::thread::JoinHandle<()>)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Batch>();
    let handle = std::thread::Builder::new().name("storage".into()).spawn(move || {
        while let Some(first) = rx.blocking_recv() {
            let mut ops = first;
            // Group commit: everything already waiting shares this flush.
            while let Ok(more) = rx.try_recv() {
                ops.extend(more);
            }
            let Some(last_seq) = ops.iter().map(|(seq, _)| *seq).max() else { continue };
            let only_ops = coalesce(ops.into_iter().map(|(_, op)| op));
            let outcome = storage.apply(&only_ops).and_then(|()| storage.flush());
            let event = match outcome {
                Ok(()) => Event::Persisted { seq: last_seq },
                Err(e) => Event::StorageFailed(e.to_string()),
            };
            if events.blocking_send(event).is_err() {
                return;
            }
        }
        if let Err(e) = storage.flush() {
            tracing::error!(error = %e, "final flush failed");
        }
    })?;
    Ok((tx, handle))
}

/// Merges adjacent appends into one, so the store writes them as one batch.
/// Each sled batch costs far more than the entries in it: with one append
/// per client write, a storage round of ~40 appends took ~3 ms and capped a
/// single replica near 12 k writes/s; merged, the same load runs ~6x faster.
fn coalesce(ops: impl Iterator<Item = StorageOp>) -> Vec<StorageOp> {
    let mut out: Vec<StorageOp> = Vec::new();
    for op in ops {
        match (out.last_mut(), op) {
            (Some(StorageOp::Append(into)), StorageOp::Append(more)) => into.extend(more),
            (_, op) => out.push(op),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{SessionId, Zxid};
    use crate::txn::{Entry, Txn, TxnBody};
    use std::sync::Arc;

    fn entry(counter: u32) -> Entry {
        let txn = Txn {
            session: SessionId(1),
            cxid: counter as i32,
            time_ms: 0,
            body: TxnBody::Error(crate::error::ErrorCode::Ok),
        };
        Entry { zxid: Zxid::new(1, counter), txn: Arc::new(txn) }
    }

    fn zxids(op: &StorageOp) -> Vec<Zxid> {
        match op {
            StorageOp::Append(entries) => entries.iter().map(|e| e.zxid).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn adjacent_appends_merge_and_other_operations_keep_their_place() {
        let ops = vec![
            StorageOp::Append(vec![entry(1)]),
            StorageOp::Append(vec![entry(2), entry(3)]),
            StorageOp::SetCurrentEpoch(1),
            StorageOp::Append(vec![entry(4)]),
            StorageOp::Append(vec![entry(5)]),
        ];
        let merged = coalesce(ops.into_iter());
        assert_eq!(merged.len(), 3);
        assert_eq!(zxids(&merged[0]), (1..=3).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
        assert!(matches!(merged[1], StorageOp::SetCurrentEpoch(1)));
        assert_eq!(zxids(&merged[2]), (4..=5).map(|c| Zxid::new(1, c)).collect::<Vec<_>>());
    }
}
