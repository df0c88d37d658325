//! The storage worker: a dedicated thread that performs the replica's storage
//! operations and makes them durable with group commit.
//!
//! The owner task sends every operation of one turn as one batch; the worker
//! takes all batches that are waiting, applies them in order, and flushes
//! once (one fsync for many transactions), then reports the highest sequence
//! number it made durable. sled is synchronous, so this never runs on the
//! async threads, and a slow disk never delays heartbeats.

use super::crash;
use crate::runtime::handle::Event;
use crate::telemetry::metrics::Metrics;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use zabkeeper_core::replica::Input;
use zabkeeper_core::storage::Storage;
use zabkeeper_core::zab::StorageOp;

/// A batch of operations with their sequence numbers.
pub type Batch = Vec<(u64, StorageOp)>;

/// How long the worker waits for work before it tells the store it is idle
/// ([`Storage::idle`]), once per quiet spell.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Starts the worker; it stops when the sender is dropped, after flushing,
/// or at the first failed write or flush, without another attempt. A panic
/// on its thread is a storage failure too: the owner hears of it and the
/// member stops, rather than waiting for acknowledgements that never come.
pub fn spawn(
    storage: Arc<dyn Storage>,
    events: tokio::sync::mpsc::Sender<Event>,
    metrics: Arc<Metrics>,
) -> std::io::Result<(mpsc::Sender<Batch>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel::<Batch>();
    let handle = std::thread::Builder::new().name("storage".into()).spawn(move || {
        let told = events.clone();
        let worked = std::panic::catch_unwind(AssertUnwindSafe(move || work(storage.as_ref(), &rx, &events, &metrics)));
        if let Err(payload) = worked {
            let message = zabkeeper_core::panics::message(payload.as_ref());
            let _ = told.blocking_send(Event::StorageFailed(format!("the storage thread panicked: {message}")));
        }
    })?;
    Ok((tx, handle))
}

/// The worker's loop: batches in, durable notices out.
fn work(
    storage: &dyn Storage,
    rx: &mpsc::Receiver<Batch>,
    events: &tokio::sync::mpsc::Sender<Event>,
    metrics: &Metrics,
) {
    let mut told_idle = true;
    loop {
        let first = if told_idle {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(IDLE_AFTER) {
                Ok(batch) => Some(batch),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    storage.idle();
                    told_idle = true;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            }
        };
        let Some(mut ops) = first else { break };
        told_idle = false;
        // Group commit: everything already waiting shares this flush.
        while let Ok(more) = rx.try_recv() {
            ops.extend(more);
        }
        let Some(last_seq) = ops.iter().map(|(seq, _)| *seq).max() else { continue };
        let only_ops: Vec<StorageOp> = ops.into_iter().map(|(_, op)| op).collect();
        let started = std::time::Instant::now();
        crash::failpoint("storage-flush");
        let outcome = storage.apply(&only_ops).and_then(|()| storage.flush());
        metrics.flushed(only_ops.len(), started.elapsed());
        let event = match outcome {
            Ok(()) => Event::Input(Input::Persisted { seq: last_seq }),
            Err(e) => {
                // Crash-stop: never retry a failed write or fsync (the
                // kernel may have dropped the pages it could not write,
                // and a retry that succeeds would vouch for lost data).
                let _ = events.blocking_send(Event::StorageFailed(e.to_string()));
                return;
            }
        };
        if events.blocking_send(event).is_err() {
            return;
        }
    }
    if let Err(e) = storage.flush() {
        tracing::error!(error = %e, "final flush failed");
    }
}
