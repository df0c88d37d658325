//! The owner task: the one place the replica is touched. A turn takes the
//! events waiting in the inbox, hands them to the replica, then carries out
//! its outputs (sends, one storage batch, client replies, snapshots).

use super::effects::{Conns, Effects};
use super::handle::{Details, Event, Handle, Query, StatusReport};
use super::rounds::RoundTimer;
use super::{disk, storage_worker, Links, ServerError, Started};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;
use zabkeeper_config::ServerConfig;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::replica::host;
use zabkeeper_core::replica::{ClientMessage, ConnId, Input, Output, Replica};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::zab::Io;
use zabkeeper_store::clock;

/// Passes of the replica's outputs a turn carries out at most.
const MAX_PASSES: usize = 64;
/// Capacity of the owner's inbox; senders wait when it is full (backpressure).
const INBOX: usize = 65_536;
/// Most events taken in one turn before outputs are carried out.
const EVENTS_PER_TURN: usize = 1024;
/// At most this many times a turn, the owner yields to let more reads join
/// the read-index round it is about to ask, within the turn's
/// [`EVENTS_PER_TURN`]: 4 took as many reads per round as 16 did in the
/// measurements, and bounds what the turn's other outputs wait.
const GATHER_YIELDS: usize = 4;

/// Recovers from storage and starts the owner task, with the links to
/// other members that `links` makes from the new handle.
pub fn start(
    config: ServerConfig,
    storage: Arc<dyn Storage>,
    shutdown: watch::Receiver<bool>,
    links: impl FnOnce(&Handle) -> Box<dyn Links>,
) -> Result<Started, ServerError> {
    let recovered = storage.recover().map_err(|e| ServerError::Storage(e.to_string()))?;
    tracing::info!(
        id = config.id,
        snapshot = %recovered.snapshot_zxid(),
        last_zxid = %recovered.last_zxid(),
        entries = recovered.log.len(),
        accepted_epoch = recovered.accepted_epoch,
        current_epoch = recovered.current_epoch,
        "recovered from disk"
    );
    let mut replica = Replica::new(config.replica_config(), recovered, clock::now_ms());
    let mut disk = disk::DiskWatch::new(config.me().data_dir.clone(), config.disk_reserve_bytes);
    if let Some(low) = disk.check() {
        replica.handle(Input::DiskSpace { low });
    }
    let (events_tx, events_rx) = mpsc::channel(INBOX);

    let id = config.id;
    let config = Arc::new(config);
    let (applied_tx, applied_rx) = watch::channel(replica.tree().last_zxid());
    let handle = Handle::new(events_tx.clone(), config.clone(), storage.clone(), applied_rx);
    let (storage_tx, storage_thread) =
        storage_worker::spawn(storage.clone(), events_tx.clone(), handle.metrics.clone())
            .map_err(ServerError::Thread)?;
    let transport = links(&handle);
    let (replica_epoch, replica_committed) = (replica.zab().current_epoch(), replica.zab().last_committed());
    // Instrumented, not entered: the task moves between threads. Every line
    // it logs names the member (and, inside a turn, its epoch and zxid).
    let span = tracing::info_span!("replica", id);
    let owner = Owner {
        replica,
        config,
        storage,
        storage_tx: Some(storage_tx),
        transport,
        conns: HashMap::new(),
        leaving: Vec::new(),
        events_tx,
        snapshot_waiters: Vec::new(),
        last_snapshot_error: None,
        applied_tx,
        metrics: handle.metrics.clone(),
        proposed: std::collections::VecDeque::new(),
        round: RoundTimer::default(),
        looking_since: None,
        position: Position::new(span.clone(), replica_epoch, replica_committed),
        disk,
        addresses_from: None,
        file_written_for: None,
        rewriter: None,
    };
    let task = tokio::spawn(async move {
        let result = owner.run(events_rx, shutdown).instrument(span).await;
        // Dropping the batch sender stopped the worker after a final flush.
        let joined = tokio::task::spawn_blocking(move || storage_thread.join()).await;
        match (result, joined) {
            // A worker that panicked has already said so (StorageFailed); if it
            // died quietly, the member still must not stop as if clean.
            (Ok(()), Ok(Err(payload))) => Err(ServerError::Panicked {
                task: "storage thread",
                message: zabkeeper_core::panics::message(payload.as_ref()),
            }),
            (result, _) => result,
        }
    });
    Ok(Started { handle, owner: task })
}

struct Owner {
    replica: Replica,
    config: Arc<ServerConfig>,
    storage: Arc<dyn Storage>,
    storage_tx: Option<std::sync::mpsc::Sender<storage_worker::Batch>>,
    transport: Box<dyn Links>,
    /// Each connection's outbox and the bytes queued in it.
    conns: Conns,
    /// Connections that went away this turn.
    leaving: Vec<ConnId>,
    events_tx: mpsc::Sender<Event>,
    snapshot_waiters: Vec<oneshot::Sender<Result<Zxid, String>>>,
    /// Why the last snapshot failed, until one succeeds.
    last_snapshot_error: Option<String>,
    /// Publishes the applied zxid (see [`Handle::applied`]).
    applied_tx: watch::Sender<Zxid>,
    metrics: Arc<crate::telemetry::metrics::Metrics>,
    /// On the leader: proposals not yet committed, with when they were proposed.
    proposed: std::collections::VecDeque<(Zxid, std::time::Instant)>,
    /// As a follower or observer: times its read-index rounds.
    round: RoundTimer,
    /// Since when this member has been without a serving leader.
    looking_since: Option<std::time::Instant>,
    /// The span of the member's position (epoch, zxid) its turns run in.
    position: Position,
    /// Free space on the data directory, checked every tick.
    disk: disk::DiskWatch,
    /// The configuration the transport last learned addresses from
    /// (version, joint).
    addresses_from: Option<(Zxid, bool)>,
    /// The configuration version the config file was last brought to.
    file_written_for: Option<Zxid>,
    /// Writes the config file, once a reconfiguration first asks it to.
    rewriter: Option<zabkeeper_config::rewrite::Rewriter>,
}

/// A span naming the epoch and the committed zxid, replaced (not recorded
/// into: a text subscriber would append every recorded value) when the
/// epoch changes, and at most ten times a second as the zxid moves.
struct Position {
    /// The member's span, the parent of every position span.
    member: tracing::Span,
    span: tracing::Span,
    epoch: zabkeeper_core::ids::Epoch,
    zxid: Zxid,
    since: std::time::Instant,
}

impl Position {
    fn new(member: tracing::Span, epoch: zabkeeper_core::ids::Epoch, zxid: Zxid) -> Position {
        let span = tracing::info_span!(parent: &member, "zab", epoch, zxid = %zxid);
        Position { member, span, epoch, zxid, since: std::time::Instant::now() }
    }

    fn refresh(&mut self, epoch: zabkeeper_core::ids::Epoch, zxid: Zxid) {
        let stale = zxid != self.zxid && self.since.elapsed() >= Duration::from_millis(100);
        if epoch != self.epoch || stale {
            *self = Position::new(self.member.clone(), epoch, zxid);
        }
    }
}

/// What starts a turn of the owner, or joins one: the tick, or an event.
#[expect(
    clippy::large_enum_variant,
    reason = "passed by value within a turn and never stored; boxing would allocate per event"
)]
enum Woke {
    Tick,
    Event(Event),
}

impl Owner {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<Event>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), ServerError> {
        let mut ticker = tokio::time::interval(Duration::from_millis(self.config.tick_ms));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut result = Ok(());
        loop {
            let first = tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                _ = ticker.tick() => Woke::Tick,
                event = events.recv() => match event {
                    Some(event) => Woke::Event(event),
                    None => break,
                },
            };
            if let Err(e) = self.take_inputs(first, &mut events).await {
                result = Err(e);
                break;
            }
            // The rest of the turn runs without awaiting, in the position
            // span too (a role change is logged as outputs are carried out).
            let position = self.position.span.clone();
            let _in_position = position.enter();
            if let Err(e) = self.carry_out() {
                tracing::error!(error = %e, "stopping this replica");
                result = Err(e);
                break;
            }
            if let Some(took) = self.round.after_turn(self.replica.read_index_round()) {
                self.metrics.read_index_round(took);
            }
            let committed = self.replica.zab().last_committed();
            while let Some(&(zxid, at)) = self.proposed.front() {
                if zxid > committed {
                    break;
                }
                self.metrics.committed(at.elapsed());
                self.proposed.pop_front();
            }
            let applied = self.replica.tree().last_zxid();
            self.applied_tx.send_if_modified(|z| std::mem::replace(z, applied) != applied);
            self.position.refresh(self.replica.zab().current_epoch(), committed);
        }
        // After a storage failure nothing more is written: the page cache
        // may have dropped what the failed fsync held, so the member stops
        // and recovers from what the disk really has (crash-stop).
        self.shut_down(result.is_ok());
        result
    }

    /// Takes a turn's inputs: `first` (what woke the owner), then what the
    /// queue holds, at most [`EVENTS_PER_TURN`] in all.
    async fn take_inputs(&mut self, first: Woke, events: &mut mpsc::Receiver<Event>) -> Result<(), ServerError> {
        let mut budget = EVENTS_PER_TURN + 1;
        budget -= self.take_queued(Some(first), budget, events)?;
        // Reads wait to ask a read-index round or probe: first let the
        // connections' tasks hand over the requests their sockets already
        // hold, so those reads ride the same round instead of waiting a
        // whole round for the next (benchmarks.md, "Fresh reads").
        for _ in 0..GATHER_YIELDS {
            if budget == 0 || !self.replica.read_index_due() {
                break;
            }
            tokio::task::yield_now().await;
            match self.take_queued(None, budget, events)? {
                0 => break,
                taken => budget -= taken,
            }
        }
        Ok(())
    }

    /// Takes `woke`, if any, then what the queue holds, at most `budget` in
    /// all; returns how many. Runs without awaiting, in the position span:
    /// its log lines carry the epoch and zxid.
    fn take_queued(
        &mut self,
        woke: Option<Woke>,
        budget: usize,
        events: &mut mpsc::Receiver<Event>,
    ) -> Result<usize, ServerError> {
        let position = self.position.span.clone();
        let _in_position = position.enter();
        let turn = woke.into_iter().chain(std::iter::from_fn(|| events.try_recv().ok().map(Woke::Event)));
        let mut taken = 0;
        for item in turn.take(budget) {
            taken += 1;
            match item {
                Woke::Tick => {
                    if let Some(low) = self.disk.check() {
                        self.replica.handle(Input::DiskSpace { low });
                    }
                    self.replica.handle(Input::Tick { now_ms: clock::now_ms() });
                }
                Woke::Event(event) => self.on_event(event)?,
            }
        }
        Ok(taken)
    }

    fn on_event(&mut self, event: Event) -> Result<(), ServerError> {
        match event {
            Event::Input(input) => {
                match &input {
                    Input::SnapshotSaved { zxid, .. } => {
                        tracing::info!(zxid = %zxid, "snapshot saved");
                        self.last_snapshot_error = None;
                        for w in self.snapshot_waiters.drain(..) {
                            let _ = w.send(Ok(*zxid));
                        }
                    }
                    // Messages produced earlier in this turn still go out; the
                    // sender is dropped once the turn's outputs are carried out.
                    Input::Disconnect { conn } => self.leaving.push(*conn),
                    _ => {}
                }
                self.replica.handle(input);
            }
            Event::Open { conn, tx, queued_bytes } => {
                self.conns.insert(conn, (tx, queued_bytes));
            }
            Event::Query(q) => self.on_query(q),
            Event::StorageFailed(e) => {
                tracing::error!(error = %e, "storage failed; stopping this replica");
                return Err(ServerError::Storage(e));
            }
            Event::SnapshotFailed(e) => {
                tracing::error!(error = %e, "snapshot failed; the log keeps everything and the next one is taken when due");
                for w in self.snapshot_waiters.drain(..) {
                    let _ = w.send(Err(e.clone()));
                }
                self.replica.handle(Input::SnapshotFailed);
                self.last_snapshot_error = Some(e);
            }
        }
        Ok(())
    }

    fn on_query(&mut self, query: Query) {
        match query {
            Query::Status(reply) => {
                let _ = reply.send(self.report());
            }
            Query::TakeSnapshot(reply) => {
                // If one is already being written, its completion answers.
                self.snapshot_waiters.push(reply);
                self.replica.snapshot_now();
            }
            Query::Role(reply) => {
                let _ = reply.send((self.replica.status(), self.replica.zab().transferring_to()));
            }
            Query::TransferLeadership { to, reply } => {
                let _ = reply.send(self.replica.transfer_leadership(to));
            }
            Query::Reconfigure { change, reply } => {
                let _ = reply.send(self.replica.reconfigure(&change));
            }
            Query::LoadTree { chunks, epoch, reply } => {
                let _ = reply.send(self.replica.load_tree(chunks, epoch));
            }
            Query::LoadOutcome(zxid, reply) => {
                let _ = reply.send(self.replica.load_outcome(zxid));
            }
            Query::Configuration(reply) => {
                let committed = self.replica.tree().state().configuration().cloned();
                let _ = reply.send(committed.unwrap_or_else(|| self.replica.zab().configuration().clone()));
            }
            Query::Details(reply) => {
                let tree = self.replica.tree();
                let (now, tick) =
                    (zabkeeper_store::clock::now_ms(), i64::try_from(self.config.tick_ms).unwrap_or(i64::MAX));
                let expiries = self.replica.session_expiries().into_iter().map(|(s, ticks)| {
                    (s, now.saturating_add(i64::try_from(ticks).unwrap_or(i64::MAX).saturating_mul(tick)))
                });
                let _ = reply.send(Details {
                    expiries: expiries.collect(),
                    connections: self.replica.connections(),
                    sessions: tree.state().sessions().map(|(id, record)| (*id, record.timeout_ms)).collect(),
                    watches: tree.watches().by_session(),
                    ephemerals: tree.state().all_ephemerals(),
                });
            }
        }
    }

    fn report(&self) -> StatusReport {
        let r = &self.replica;
        let tree = r.tree();
        StatusReport {
            id: self.config.id,
            status: r.status(),
            accepted_epoch: r.zab().accepted_epoch(),
            current_epoch: r.zab().current_epoch(),
            last_logged: r.zab().last_logged(),
            last_committed: r.zab().last_committed(),
            last_applied: tree.last_zxid(),
            nodes: tree.state().node_count(),
            data_bytes: tree.state().data_bytes(),
            sessions: tree.state().session_count(),
            connections: r.connection_count(),
            watches: tree.watches().count(),
            synced_followers: r.zab().synced_followers(),
            ensemble_size: self.config.members.len(),
            counters: r.counters(),
            ephemerals: tree.state().all_ephemerals().iter().map(|(_, p)| p.len()).sum(),
            followers: r.zab().follower_progress(),
            last_snapshot_error: self.last_snapshot_error.clone(),
            pending_syncs: r.pending_syncs(),
            disk_free_bytes: self.disk.free(),
            disk_low: self.disk.is_low(),
        }
    }

    /// Carries out the replica's outputs, in order, through the core's one
    /// host loop; then hands the turn's storage batch to the worker.
    fn carry_out(&mut self) -> Result<(), ServerError> {
        let mut batch: storage_worker::Batch = Vec::new();
        let mut effects = Effects {
            config: &self.config,
            storage: &self.storage,
            links: self.transport.as_mut(),
            conns: &mut self.conns,
            batch: &mut batch,
            proposed: &mut self.proposed,
            looking_since: &mut self.looking_since,
            metrics: &self.metrics,
            events_tx: &self.events_tx,
        };
        // What is left after these passes waits for the next turn. Dropping
        // a stuck client feeds the replica again: bounded by the connections.
        let Ok(_drained) = host::carry_out(&mut self.replica, &mut effects, MAX_PASSES);
        if !batch.is_empty() {
            if let Some(tx) = &self.storage_tx {
                // The worker only lets go of its receiver when it stops: a
                // batch it cannot take would never be acknowledged.
                if tx.send(batch).is_err() {
                    return Err(ServerError::Storage("the storage thread is gone; nothing more is durable".into()));
                }
            }
        }
        for conn in self.leaving.drain(..) {
            self.conns.remove(&conn);
        }
        self.learn_addresses();
        self.rewrite_config_file();
        Ok(())
    }

    /// Brings the config file to a reconfiguration once it is complete and
    /// applied here (at start too: a member restarted with an older file),
    /// on the rewriter's thread, in order.
    fn rewrite_config_file(&mut self) {
        let Some(conf) = self.replica.tree().state().configuration() else { return };
        if conf.is_joint() || self.file_written_for == Some(conf.version) {
            return;
        }
        self.file_written_for = Some(conf.version);
        let Some(path) = &self.config.file else { return };
        if self.rewriter.is_none() {
            match zabkeeper_config::rewrite::Rewriter::start(path.clone(), self.config.id) {
                Ok(rewriter) => self.rewriter = Some(rewriter),
                Err(e) => return tracing::warn!(error = %e, "no thread to rewrite the config file with"),
            }
        }
        if let Some(rewriter) = &self.rewriter {
            rewriter.ask(conf.version, conf.current().clone());
        }
    }

    /// Teaches the transport where the members of the configuration in
    /// force are reached, whenever it changes (a member added by a
    /// reconfiguration is in no configuration file here).
    fn learn_addresses(&mut self) {
        let conf = self.replica.zab().configuration();
        let key = (conf.version, conf.is_joint());
        if self.addresses_from == Some(key) {
            return;
        }
        self.addresses_from = Some(key);
        let id = self.config.id;
        if !conf.is_member(id) {
            tracing::warn!(
                version = %conf.version,
                "this member is in no configuration of the ensemble (removed, or not yet added): \
                 it follows without a vote and serves its clients until it is stopped or added"
            );
        } else if !conf.is_voter(id) && self.config.me().role == zabkeeper_config::MemberRole::Participant {
            tracing::info!(version = %conf.version, "this member observes in the ensemble's configuration");
        }
        let addrs: Vec<(ServerId, zabkeeper_config::HostPort)> =
            conf.members().filter_map(|m| Some((m.id, zabkeeper_config::HostPort::peer_of(m)?))).collect();
        self.transport.learn(addrs);
    }

    /// Stop: every client is told; on a clean stop pending storage is flushed.
    fn shut_down(&mut self, clean: bool) {
        tracing::info!(clean, "shutting down: closing client connections");
        // Ends followers' streams so the peer server's graceful stop need not wait for them.
        self.transport.shut_down();
        for (_, (tx, _)) in self.conns.drain() {
            let _ = tx.try_send(ClientMessage::Close {
                error: ErrorCode::ConnectionLoss,
                reason: "the server is shutting down".into(),
            });
        }
        let mut batch = Vec::new();
        for output in self.replica.take_outputs() {
            if let Output::Zab(Io::Persist { seq, op }) = output {
                batch.push((seq, op));
            }
        }
        if let Some(tx) = self.storage_tx.take() {
            if clean && !batch.is_empty() {
                let _ = tx.send(batch);
            }
        }
    }
}
