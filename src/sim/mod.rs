//! Deterministic simulation of whole ensembles in one process.
//!
//! Real [`Replica`]s (Zab, tree, sessions, request queues: everything but
//! sockets and disks) run over a seeded network that delays, reorders, loses
//! and duplicates messages and partitions replicas, on in-memory storage that
//! keeps only what was flushed when a replica crashes. Simulated clients run a
//! random workload. After every step the [`invariants`] are checked; after the
//! faults stop, the ensemble must heal: every replica serving the same tree,
//! every acknowledged write present. One seed is one schedule, replayed
//! exactly: a failure names its seed (`SIM_SEED=<seed> cargo test sim::`).

pub mod invariants;
pub mod network;
mod workload;

#[cfg(test)]
mod tests;

use crate::ids::ServerId;
use crate::replica::{self, AppliedRecord, Input, Output, Replica};
use crate::storage::mem_store::MemStorage;
use crate::storage::Storage;
use crate::tree::{snapshot, TreeState};
use crate::zab::{Io, Role};
use invariants::{Oracle, Violation};
use network::{Faults, Network};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use workload::Client;

/// Milliseconds of simulated time per step.
const STEP_MS: i64 = 10;
/// Steps per tick (ticks of 50 ms).
const STEPS_PER_TICK: u64 = 5;

/// The shape of one run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Replicas (3 or 5).
    pub nodes: u64,
    /// Steps with faults.
    pub fault_steps: u64,
    /// Steps after healing, to converge.
    pub heal_steps: u64,
    /// Simulated clients.
    pub clients: usize,
    /// Network faults during the fault phase.
    pub faults: Faults,
    /// Chance per step that an up replica crashes (at most a minority down at once).
    pub crash: f64,
    /// Chance per step that a partition starts.
    pub partition: f64,
    /// Chance per step that an up replica flushes its storage.
    pub flush: f64,
    /// Chance per step that an up replica's clock stalls (it gets no ticks
    /// for a while, as a paused or starved process), messages still flowing.
    pub stall: f64,
    /// Chance that a partition is a long one (up to a fifth of the fault phase).
    pub long_partition: f64,
    /// Transactions between snapshots (small, to exercise SNAP and purge).
    pub snapshot_every: u64,
}

impl Options {
    /// The faults of the schedules the pinned regression seeds come from:
    /// no stalled clocks, no long partitions.
    pub fn classic(nodes: u64) -> Options {
        Options { stall: 0.0, long_partition: 0.0, ..Options::faulty(nodes) }
    }

    /// A run with moderate faults.
    pub fn faulty(nodes: u64) -> Options {
        Options {
            nodes,
            fault_steps: 2500,
            heal_steps: 2500,
            clients: 4,
            faults: Faults { loss: 0.02, duplicate: 0.02, max_delay: 4 },
            crash: 0.002,
            partition: 0.002,
            flush: 0.6,
            stall: 0.001,
            long_partition: 0.2,
            snapshot_every: 40,
        }
    }
}

/// What a finished run saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Committed transactions.
    pub committed: usize,
    /// Epochs with a leader.
    pub epochs: usize,
    /// Crashes injected.
    pub crashes: usize,
    /// Partitions injected.
    pub partitions: usize,
    /// Clock stalls injected.
    pub stalls: usize,
    /// Writes acknowledged to clients.
    pub acked_writes: usize,
    /// Messages delivered.
    pub delivered: u64,
}

/// A failed run: the seed to replay and what broke.
#[derive(Debug, thiserror::Error)]
#[error("simulation seed {seed} failed at step {step}: {violation}")]
pub struct Failure {
    /// Replays the run.
    pub seed: u64,
    /// When.
    pub step: u64,
    /// What.
    pub violation: Violation,
}

struct Node {
    id: ServerId,
    replica: Option<Replica>,
    storage: MemStorage,
    /// Highest storage sequence applied but not yet flushed.
    unflushed: Option<u64>,
    restart_at: Option<u64>,
    /// The tree state whose digest was last checked.
    checked: Option<TreeState>,
    /// Its clock gives no ticks until this step.
    stalled_until: u64,
}

/// One seeded run.
pub struct Simulation {
    seed: u64,
    options: Options,
    rng: StdRng,
    /// Draws for the faults added after seeds were pinned (stalls, long
    /// partitions): a stream of its own, so that with those faults off a
    /// pinned seed replays the very schedule that once failed.
    later_faults: StdRng,
    step: u64,
    nodes: BTreeMap<ServerId, Node>,
    net: Network,
    clients: Vec<Client>,
    oracle: Oracle,
    heal_at: Option<u64>,
    /// When the current partition heals.
    heal_at_partition: Option<u64>,
    report: Report,
    next_conn: u64,
}

impl Simulation {
    /// A run of `options` driven by `seed`.
    pub fn new(seed: u64, options: Options) -> Simulation {
        let mut sim = Simulation {
            seed,
            rng: StdRng::seed_from_u64(seed),
            later_faults: StdRng::seed_from_u64(seed ^ 0x57a1_1ed0),
            step: 0,
            nodes: BTreeMap::new(),
            net: Network::default(),
            clients: Vec::new(),
            oracle: Oracle::default(),
            heal_at: None,
            heal_at_partition: None,
            report: Report::default(),
            next_conn: 1,
            options,
        };
        for id in 1..=sim.options.nodes {
            sim.nodes.insert(
                id,
                Node {
                    id,
                    replica: None,
                    storage: MemStorage::new(),
                    unflushed: None,
                    restart_at: None,
                    checked: None,
                    stalled_until: 0,
                },
            );
        }
        for i in 0..sim.options.clients {
            sim.clients.push(Client::new(i));
        }
        sim
    }

    fn now_ms(&self) -> i64 {
        1_700_000_000_000 + self.step as i64 * STEP_MS
    }

    fn replica_config(&self, id: ServerId) -> replica::Config {
        let mut c = replica::Config::new(id, (1..=self.options.nodes).collect(), 50);
        c.snapshot_every = self.options.snapshot_every;
        c.min_session_timeout_ms = 1000;
        c.max_session_timeout_ms = 4000;
        c.snapshot_chunk_bytes = 512;
        c
    }

    fn fail(&self, violation: Violation) -> Failure {
        Failure { seed: self.seed, step: self.step, violation }
    }

    /// Runs the fault phase, heals, and checks convergence.
    pub fn run(mut self) -> Result<Report, Failure> {
        for id in 1..=self.options.nodes {
            self.boot(id).map_err(|v| self.fail(v))?;
        }
        let total = self.options.fault_steps + self.options.heal_steps;
        while self.step < total {
            self.step += 1;
            let healing = self.step > self.options.fault_steps;
            if healing && self.heal_at.is_none() {
                self.heal();
            }
            self.one_step(healing).map_err(|v| self.fail(v))?;
        }
        self.check_converged().map_err(|v| self.fail(v))?;
        self.report.committed = self.oracle.committed();
        self.report.epochs = self.oracle.epochs();
        self.report.delivered = self.net.delivered;
        self.report.acked_writes = self.clients.iter().map(Client::acked_count).sum();
        Ok(self.report)
    }

    fn boot(&mut self, id: ServerId) -> Result<(), Violation> {
        let config = self.replica_config(id);
        let now = self.now_ms();
        let node = self.nodes.get_mut(&id).expect("node exists");
        let recovered =
            node.storage.recover().map_err(|e| Violation::NoProgress(format!("recovery of {id} failed: {e}")))?;
        let snapshot_zxid = recovered.snapshot_zxid();
        node.replica = Some(Replica::new(config, recovered, now));
        node.unflushed = None;
        node.restart_at = None;
        self.oracle.resume(id, snapshot_zxid)?;
        self.drain(id)
    }

    fn heal(&mut self) {
        self.heal_at = Some(self.step);
        self.net.heal();
        for node in self.nodes.values_mut() {
            node.stalled_until = 0;
        }
        let down: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_none()).map(|n| n.id).collect();
        for id in down {
            if let Some(node) = self.nodes.get_mut(&id) {
                node.restart_at = Some(self.step);
            }
        }
    }

    fn faults(&self, healing: bool) -> Faults {
        if healing {
            Faults::none()
        } else {
            self.options.faults
        }
    }

    fn one_step(&mut self, healing: bool) -> Result<(), Violation> {
        // Restarts that are due.
        let due: Vec<ServerId> =
            self.nodes.values().filter(|n| n.restart_at.is_some_and(|at| at <= self.step)).map(|n| n.id).collect();
        for id in due {
            self.boot(id)?;
        }
        // Messages.
        for m in self.net.due(self.step) {
            let Some(replica) = self.nodes.get_mut(&m.to).and_then(|n| n.replica.as_mut()) else { continue };
            replica.handle(Input::Peer { from: m.from, msg: m.msg });
            self.drain(m.to)?;
        }
        // Storage flushes.
        let ids: Vec<ServerId> = self.nodes.keys().copied().collect();
        for &id in &ids {
            let flush = self.rng.random_bool(if healing { 1.0 } else { self.options.flush });
            let node = self.nodes.get_mut(&id).expect("node exists");
            if let (true, Some(seq), Some(replica)) = (flush, node.unflushed, node.replica.as_mut()) {
                node.storage.flush().map_err(|e| Violation::NoProgress(format!("flush failed: {e}")))?;
                node.unflushed = None;
                replica.handle(Input::Persisted { seq });
                self.drain(id)?;
            }
        }
        // Ticks.
        if self.step.is_multiple_of(STEPS_PER_TICK) {
            let now_ms = self.now_ms();
            let step = self.step;
            for &id in &ids {
                let node = self.nodes.get_mut(&id).filter(|n| n.stalled_until <= step);
                if let Some(replica) = node.and_then(|n| n.replica.as_mut()) {
                    replica.handle(Input::Tick { now_ms });
                    self.drain(id)?;
                }
            }
        }
        self.client_step(healing)?;
        if !healing {
            self.inject_faults();
        }
        self.check_step()
    }

    fn inject_faults(&mut self) {
        let n = self.options.nodes as usize;
        let minority = (n - 1) / 2;
        let down = self.nodes.values().filter(|n| n.replica.is_none()).count();
        if down < minority && self.rng.random_bool(self.options.crash) {
            let up: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_some()).map(|n| n.id).collect();
            let victim = up[self.rng.random_range(0..up.len())];
            let after = self.rng.random_range(20..400);
            self.crash(victim, after);
        }
        if self.options.stall > 0.0 && self.later_faults.random_bool(self.options.stall) {
            let up: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_some()).map(|n| n.id).collect();
            if !up.is_empty() {
                let victim = up[self.later_faults.random_range(0..up.len())];
                // Up to ~40 ticks: past the sync limit, so a stalled leader is
                // dropped and a stalled follower times its leader out late.
                let until = self.step + self.later_faults.random_range(STEPS_PER_TICK..STEPS_PER_TICK * 40);
                if let Some(node) = self.nodes.get_mut(&victim) {
                    node.stalled_until = until;
                    self.report.stalls += 1;
                }
            }
        }
        if !self.net.is_partitioned() && self.rng.random_bool(self.options.partition) {
            let mut ids: Vec<ServerId> = self.nodes.keys().copied().collect();
            let cut = self.rng.random_range(1..=ids.len() / 2);
            let mut side = Vec::new();
            for _ in 0..cut {
                let i = self.rng.random_range(0..ids.len());
                side.push(ids.remove(i));
            }
            self.net.partition(&side, &ids);
            self.report.partitions += 1;
            // Sometimes the cut resets connections, sometimes it is silent.
            if self.rng.random_bool(0.5) {
                for &a in &side {
                    for &b in &ids {
                        self.disconnect(a, b);
                        self.disconnect(b, a);
                    }
                }
            }
            let long = self.rng.random_bool(self.options.long_partition);
            let lasts = if long {
                self.rng.random_range(500..self.options.fault_steps / 5 + 501)
            } else {
                self.rng.random_range(50..500)
            };
            self.heal_partition_at(self.step + lasts);
        }
        if self.partition_heals_now() {
            self.net.heal();
        }
    }

    fn heal_partition_at(&mut self, step: u64) {
        self.heal_at_partition = Some(step);
    }

    fn partition_heals_now(&mut self) -> bool {
        if self.heal_at_partition.is_some_and(|at| at <= self.step) {
            self.heal_at_partition = None;
            return true;
        }
        false
    }

    fn disconnect(&mut self, at: ServerId, peer: ServerId) {
        if let Some(replica) = self.nodes.get_mut(&at).and_then(|n| n.replica.as_mut()) {
            replica.handle(Input::PeerDisconnected { peer });
            let _ = self.drain(at);
        }
    }

    fn crash(&mut self, id: ServerId, restart_after: u64) {
        self.report.crashes += 1;
        let step = self.step;
        if let Some(node) = self.nodes.get_mut(&id) {
            node.storage.crash();
            node.replica = None;
            node.unflushed = None;
            node.restart_at = Some(step + restart_after);
        }
        self.net.forget(id);
        for client in &mut self.clients {
            client.node_crashed(id);
        }
        let others: Vec<ServerId> = self.nodes.keys().copied().filter(|p| *p != id).collect();
        for peer in others {
            self.disconnect(peer, id);
        }
    }

    /// Carries out a replica's outputs until it has none.
    fn drain(&mut self, id: ServerId) -> Result<(), Violation> {
        for _ in 0..10_000 {
            let now = self.step;
            let Some(node) = self.nodes.get_mut(&id) else { return Ok(()) };
            let Some(replica) = node.replica.as_mut() else { return Ok(()) };
            let outputs = replica.take_outputs();
            let applied = replica.drain_applied();
            for record in applied {
                match record {
                    AppliedRecord::Entry(zxid, txn) => self.oracle.applied(id, zxid, &txn)?,
                    AppliedRecord::Snapshot(zxid) => self.oracle.resume(id, zxid)?,
                }
            }
            if outputs.is_empty() {
                return Ok(());
            }
            let faults = self.faults(self.heal_at.is_some());
            for output in outputs {
                match output {
                    Output::Zab(Io::Send { to, msg }) => self.net.send(&mut self.rng, faults, now, id, to, msg),
                    Output::Zab(Io::Persist { seq, op }) => {
                        let node = self.nodes.get_mut(&id).expect("node exists");
                        node.storage
                            .apply(&[op])
                            .map_err(|e| Violation::NoProgress(format!("storage refused: {e}")))?;
                        node.unflushed = Some(seq);
                    }
                    Output::Client { conn, msg } => {
                        if let Some(client) = self.clients.iter_mut().find(|c| c.conn() == Some(conn)) {
                            client.receive(msg)?;
                        }
                    }
                    Output::TakeSnapshot { state } => {
                        let zxid = state.last_zxid();
                        let (chunks, _) = snapshot::to_chunks(&state, 512);
                        let node = self.nodes.get_mut(&id).expect("node exists");
                        node.storage.save_snapshot(zxid, &chunks).map_err(|e| Violation::NoProgress(e.to_string()))?;
                        node.storage.purge(2).map_err(|e| Violation::NoProgress(e.to_string()))?;
                        if let Some(r) = node.replica.as_mut() {
                            r.handle(Input::SnapshotSaved { zxid });
                        }
                    }
                    Output::Status(status) => {
                        if status.role == Role::Leading && status.serving {
                            self.oracle.leader(status.epoch, id)?;
                        }
                    }
                }
            }
        }
        Err(Violation::NoProgress(format!("replica {id} kept producing outputs")))
    }

    fn client_step(&mut self, healing: bool) -> Result<(), Violation> {
        // The last steps are quiet so that the final comparison sees a settled ensemble.
        let total = self.options.fault_steps + self.options.heal_steps;
        if self.step + 300 > total {
            return Ok(());
        }
        let up: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_some()).map(|n| n.id).collect();
        for i in 0..self.clients.len() {
            let Some(action) = self.clients[i].next_action(&mut self.rng, &up, self.next_conn, healing) else {
                continue;
            };
            if let workload::Action::Connect { .. } = action {
                self.next_conn += 1;
            }
            let (node, input) = action.into_input();
            if let Some(replica) = self.nodes.get_mut(&node).and_then(|n| n.replica.as_mut()) {
                replica.handle(input);
                self.drain(node)?;
            }
        }
        // Durability of what was just acknowledged.
        let quorum = self.options.nodes as usize / 2 + 1;
        let acked: Vec<String> = self.clients.iter_mut().flat_map(Client::take_new_acks).collect();
        for path in acked {
            let Some(zxid) = self.oracle.created_at(&path) else { return Err(Violation::AckedNotCommitted(path)) };
            let durable = self.nodes.values().filter(|n| n.storage.durably_holds(zxid)).count();
            if durable < quorum {
                return Err(Violation::NotDurable { what: path, zxid, durable, quorum });
            }
        }
        Ok(())
    }

    fn check_step(&mut self) -> Result<(), Violation> {
        if !self.step.is_multiple_of(10) {
            return Ok(());
        }
        for node in self.nodes.values_mut() {
            if let Some(r) = &node.replica {
                let state = r.tree().state();
                // Hashing every node is most of a schedule's time; a tree
                // that is still the very one checked last needs no new look.
                if node.checked.as_ref().is_some_and(|last| last.same_as(state)) {
                    continue;
                }
                self.oracle.digest(node.id, state.last_zxid(), state.digest())?;
                node.checked = Some(state.clone());
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for node in self.nodes.values() {
            match &node.replica {
                Some(r) => out.push_str(&format!(
                    "\n  replica {}: {:?} accepted={} current={} logged={:?} committed={:?} applied={:?}",
                    node.id,
                    r.status(),
                    r.zab().accepted_epoch(),
                    r.zab().current_epoch(),
                    r.zab().last_logged(),
                    r.zab().last_committed(),
                    r.tree().last_zxid()
                )),
                None => out.push_str(&format!("\n  replica {}: down", node.id)),
            }
        }
        out
    }

    fn check_converged(&mut self) -> Result<(), Violation> {
        self.converged().map_err(|v| match v {
            Violation::NoProgress(m) => Violation::NoProgress(format!("{m}{}", self.describe())),
            other => other,
        })
    }

    fn converged(&mut self) -> Result<(), Violation> {
        let mut points = Vec::new();
        for node in self.nodes.values() {
            let Some(r) = &node.replica else {
                return Err(Violation::NoProgress(format!("replica {} is still down", node.id)));
            };
            if !r.status().serving {
                return Err(Violation::NoProgress(format!("replica {} is not serving: {:?}", node.id, r.status())));
            }
            let state = r.tree().state();
            self.oracle.digest(node.id, state.last_zxid(), state.digest())?;
            points.push((node.id, state.last_zxid()));
        }
        let first = points[0].1;
        if let Some((id, zxid)) = points.iter().find(|(_, z)| *z != first) {
            return Err(Violation::NoProgress(format!(
                "replica {id} stopped at {zxid:?}, replica {} at {first:?}",
                points[0].0
            )));
        }
        let leaders = self
            .nodes
            .values()
            .filter(|n| n.replica.as_ref().is_some_and(|r| r.status().role == Role::Leading))
            .count();
        if leaders != 1 {
            return Err(Violation::NoProgress(format!("{leaders} leaders after healing")));
        }
        for client in &self.clients {
            for path in client.acked_paths() {
                for node in self.nodes.values() {
                    let present = node.replica.as_ref().is_some_and(|r| r.tree().state().node(path).is_some());
                    if !present {
                        return Err(Violation::AckedNotCommitted(format!("{path} (missing on replica {})", node.id)));
                    }
                }
            }
        }
        Ok(())
    }
}
