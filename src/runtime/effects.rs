//! The owner's effects of a replica's outputs: the server's side of the
//! core's host contract ([`zabkeeper_core::replica::host`]). Sends go to the
//! links, storage operations into the turn's batch for the storage worker,
//! client messages into each connection's bounded outbox, snapshots to a
//! blocking task.

use super::handle::Event;
use super::{crash, storage_worker, Links};
use crate::telemetry::metrics::Metrics;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::replica::audit::AuditRecord;
use zabkeeper_core::replica::host::{Back, Host, StoredDiff};
use zabkeeper_core::replica::{ClientMessage, ConnId, Input, Replica};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::tree::{snapshot, TreeState};
use zabkeeper_core::zab::{Message, Role, Status, StorageOp};

/// Each connection's outbox and the bytes queued in it.
pub(super) type Conns = HashMap<ConnId, (mpsc::Sender<ClientMessage>, Arc<AtomicUsize>)>;

/// What the owner lends the host loop for one turn.
pub(super) struct Effects<'a> {
    pub config: &'a ServerConfig,
    pub storage: &'a Arc<dyn Storage>,
    pub links: &'a mut dyn Links,
    pub conns: &'a mut Conns,
    /// The turn's storage operations, handed to the worker after the turn.
    pub batch: &'a mut storage_worker::Batch,
    /// On the leader: proposals not yet committed, with when they were proposed.
    pub proposed: &'a mut VecDeque<(Zxid, Instant)>,
    /// Since when this member has been without a serving leader.
    pub looking_since: &'a mut Option<Instant>,
    pub metrics: &'a Arc<Metrics>,
    pub events_tx: &'a mpsc::Sender<Event>,
}

impl Host for Effects<'_> {
    type Error = Infallible;

    fn send(&mut self, _: &Replica, to: ServerId, msg: Message) -> Back<Infallible> {
        self.links.send(to, msg);
        Ok(None)
    }

    /// The stored entries are read back here and sent between the messages
    /// before and after them. Storage that lost some (an operator's purge)
    /// sends nothing: the follower refuses what follows for its gap and
    /// syncs again, and the core learns where the log now starts.
    fn send_stored(&mut self, _: &Replica, to: ServerId, d: StoredDiff) -> Back<Infallible> {
        let up_to = d.ranges.last().map_or(d.after, |r| r.last);
        match zabkeeper_core::storage::stored_proposals(self.storage.as_ref(), d.epoch, d.after, &d.ranges, d.batch) {
            Ok(msgs) => {
                tracing::info!(follower = to, after = %d.after, %up_to, messages = msgs.len(), "DIFF from storage");
                for msg in msgs {
                    self.links.send(to, msg);
                }
                Ok(None)
            }
            Err((e, log_floor)) => {
                tracing::warn!(follower = to, error = %e, %log_floor, "DIFF from storage failed");
                Ok(Some(Input::LogPurged { log_floor }))
            }
        }
    }

    fn persist(&mut self, replica: &Replica, seq: u64, op: StorageOp) -> Back<Infallible> {
        if let StorageOp::Append(_) = &op {
            crash::failpoint("owner-persist");
        }
        if let (StorageOp::Append(entries), Role::Leading) = (&op, replica.status().role) {
            let now = Instant::now();
            self.proposed.extend(entries.iter().map(|e| (e.zxid, now)));
        }
        self.batch.push((seq, op));
        Ok(None)
    }

    /// A client that does not read its replies (its outbox over the byte cap,
    /// or full) loses its connection; its session lives on.
    fn deliver(&mut self, _: &Replica, conn: ConnId, msg: ClientMessage) -> Back<Infallible> {
        let last = msg.is_last();
        let Some((tx, queued)) = self.conns.get(&conn) else { return Ok(None) };
        let size = msg.approximate_size();
        let cap = self.config.limits.max_queued_reply_bytes;
        let before = queued.fetch_add(size, Ordering::Relaxed);
        let ok = if before + size > cap && !last {
            queued.fetch_sub(size, Ordering::Relaxed);
            tracing::warn!(
                conn,
                queued = before,
                cap,
                "client is not reading its replies; closing its connection (its session lives on)"
            );
            false
        } else {
            match tx.try_send(msg) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    queued.fetch_sub(size, Ordering::Relaxed);
                    tracing::warn!(
                        conn,
                        "client is not reading its replies; closing its connection (its session lives on)"
                    );
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        };
        if last {
            self.conns.remove(&conn);
            return Ok(None);
        }
        if ok {
            return Ok(None);
        }
        self.conns.remove(&conn);
        Ok(Some(Input::Disconnect { conn }))
    }

    /// Written on a blocking task; the result comes back as an event.
    fn take_snapshot(&mut self, _: &Replica, state: TreeState) -> Back<Infallible> {
        let storage = self.storage.clone();
        let metrics = self.metrics.clone();
        let events = self.events_tx.clone();
        let retained = self.config.snapshots_retained;
        tokio::task::spawn_blocking(move || {
            // A writer that panics may leave the store half-written, and the
            // replica would wait for its answer for ever: crash-stop.
            let written = std::panic::catch_unwind(AssertUnwindSafe(|| {
                write_snapshot(storage.as_ref(), &metrics, retained, &state)
            }));
            let event = written.unwrap_or_else(|payload| {
                let message = zabkeeper_core::panics::message(payload.as_ref());
                Event::StorageFailed(format!("the snapshot writer panicked: {message}"))
            });
            let _ = events.blocking_send(event);
        });
        Ok(None)
    }

    fn status(&mut self, _: &Replica, status: Status) -> Back<Infallible> {
        if status.role != Role::Leading {
            // A new leader re-proposes nothing of ours: forget the timings.
            self.proposed.clear();
        }
        match (status.serving, *self.looking_since) {
            (false, None) => {
                *self.looking_since = Some(Instant::now());
                self.metrics.election_started();
            }
            (true, Some(since)) => {
                self.metrics.election_ended(since.elapsed());
                *self.looking_since = None;
            }
            _ => {}
        }
        self.metrics.leading(status.role == Role::Leading && status.serving);
        let role = status.role.name(false);
        tracing::info!(role, epoch = status.epoch, leader = ?status.leader, serving = status.serving, "role changed");
        self.links.on_status(status);
        Ok(None)
    }

    fn audit(&mut self, _: &Replica, r: AuditRecord) -> Back<Infallible> {
        // ZooKeeper's audit fields, one event a change, under a target of its
        // own so a log filter or collector can route the trail apart.
        tracing::info!(
            target: "zabkeeper::audit",
            session = format!("0x{:x}", r.session.0),
            user = r.user,
            ip = r.ip,
            operation = r.operation,
            znode = r.znode,
            znode_type = r.znode_type,
            acl = r.acl,
            result = r.result,
            zxid = %r.zxid,
            "audit"
        );
        Ok(None)
    }
}

/// Writes `state` as a snapshot and purges what it makes unneeded; the event
/// that tells the owner how it went.
fn write_snapshot(storage: &dyn Storage, metrics: &Metrics, retained: usize, state: &TreeState) -> Event {
    crash::failpoint("snapshot-write");
    let zxid = state.last_zxid();
    let started = Instant::now();
    let mut chunks = snapshot::Chunks::new(state, zabkeeper_store::SNAPSHOT_CHUNK_BYTES);
    let saved = storage
        .save_snapshot_from(zxid, &mut chunks)
        .and_then(|_| storage.purge(retained))
        .and_then(|purged| Ok((purged, storage.log_floor()?)));
    match saved {
        Ok((purged, log_floor)) => {
            let info = chunks.info();
            metrics.snapshot_written(info.bytes, started.elapsed());
            tracing::info!(zxid = %zxid, nodes = info.nodes, bytes = info.bytes, purged_snapshots = purged.snapshots_removed, purged_entries = purged.entries_removed, "snapshot written");
            Event::Input(Input::SnapshotSaved { zxid, log_floor })
        }
        Err(e) => {
            metrics.snapshot_failed();
            Event::SnapshotFailed(e.to_string())
        }
    }
}
