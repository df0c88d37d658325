//! Deterministic simulation of whole ensembles in one process.
//!
//! Real [`Replica`]s (Zab, tree, sessions, request queues: everything but
//! sockets and disks) run over a seeded network that delays, reorders, loses
//! and duplicates messages and partitions replicas, on in-memory storage that
//! keeps only what was flushed when a replica crashes. Simulated clients run a
//! random workload. After every step the [`invariants`] are checked; after the
//! faults stop, the ensemble must heal: every replica serving the same tree,
//! every acknowledged write present. One seed is one schedule, replayed
//! exactly: a failure names its seed (`SIM_SEED=<seed> cargo test -p
//! zabkeeper-sim`).
//!
//! A crate of its own beside the core: it depends on `zabkeeper-core` and
//! `rand` (seeded, never ambient), and nothing depends on it.

mod faults;
mod host;
pub mod invariants;
mod liveness;
mod loads;
pub mod network;
mod options;
mod reconfigs;
mod transfers;
mod workload;

pub use options::Options;
pub use workload::ReadCounts;

#[cfg(test)]
mod tests;

use invariants::{Oracle, Violation};
use network::{Faults, Network};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use workload::Client;
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::replica::{Input, Replica};
use zabkeeper_core::storage::mem_store::MemStorage;
use zabkeeper_core::storage::Storage;
use zabkeeper_core::zab::Role;

/// Milliseconds of simulated time per step.
const STEP_MS: i64 = 10;
/// Steps per tick (ticks of 50 ms).
const STEPS_PER_TICK: u64 = 5;
/// Chance per step that a slow replica's disk completes a flush.
const SLOW_FLUSH: f64 = 0.03;
/// How many times longer a slow replica's messages may take.
const SLOW_LINK: u64 = 6;
/// Chance per step that a calm spell (a network that delivers) begins.
const CALM: f64 = 0.0003;
/// How long a quorum must stay up, connected and healthy before a write
/// must have committed (10 s of simulated time: elections, a SNAP sync and
/// session expiry all fit well inside it).
pub const LIVENESS_STEPS: u64 = 1000;

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
    /// Of those, pauses (SIGSTOP): no messages or requests taken either.
    pub pauses: usize,
    /// Flushes failed (each stopped its replica).
    pub disk_faults: usize,
    /// Snapshots that failed to save.
    pub snapshot_faults: usize,
    /// Times a replica became slow.
    pub slow: usize,
    /// Times a replica's disk fell below its reserve.
    pub disk_low: usize,
    /// Liveness windows checked (a quorum healthy for [`LIVENESS_STEPS`]).
    pub liveness_checks: usize,
    /// Writes acknowledged to clients.
    pub acked_writes: usize,
    /// Reads answered, by kind, and the plain ones that were stale.
    pub reads: ReadCounts,
    /// Messages delivered.
    pub delivered: u64,
    /// DIFFs that sent entries read back from storage.
    pub stored_diffs: usize,
    /// DIFFs from storage that found their entries purged.
    pub stored_reads_lost: usize,
    /// Leadership transfers a leader started.
    pub transfers: usize,
    /// Transfers a leader refused (the target was itself or not synced).
    pub transfers_refused: usize,
    /// Transfers after which the nominee was the next leader.
    pub handovers: usize,
    /// Transfers after which another member led next (the nominee crashed,
    /// was cut off, or the transfer was abandoned and a fault followed).
    pub handovers_missed: usize,
    /// Reconfigurations a leader proposed.
    pub reconfigs: usize,
    /// Reconfigurations a leader refused (one under way, or the new
    /// voters' majority not caught up).
    pub reconfigs_refused: usize,
    /// Trees a leader proposed to load.
    pub loads: usize,
    /// Loads refused (the workload wrote first).
    pub loads_refused: usize,
    /// Loads committed (what the oracle then checks every later commit against).
    pub loads_committed: usize,
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
    /// Its clock gives no ticks until this step.
    stalled_until: u64,
    /// The stall is a pause (SIGSTOP): until `stalled_until` it also takes
    /// no messages, flushes and client requests; they wait for it.
    paused: bool,
    /// Client requests that arrived while it was paused, in order.
    held_requests: Vec<Input>,
    /// Slow disk and slow links until this step.
    slow_until: u64,
    /// Its disk is below the reserve until this step.
    disk_low_until: u64,
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
    /// The liveness probe's draws (a stream of its own, like `later_faults`).
    probe_rng: StdRng,
    /// Leadership transfers' draws (a stream of its own, like `later_faults`).
    transfer_rng: StdRng,
    /// Reconfigurations' draws (a stream of its own, like `later_faults`).
    reconfig_rng: StdRng,
    /// A transfer under way: its nominee, and the epoch it ends.
    transfer_pending: Option<(ServerId, u32)>,
    /// Whether the load (`Options::load`) was tried.
    load_tried: bool,
    /// Since when the current quorum has been healthy, and who is in it.
    healthy: Option<(u64, Vec<ServerId>)>,
    /// When the probe last had a write acknowledged.
    probe_acked_at: u64,
    /// The network loses, duplicates and reorders nothing until this step
    /// (a calm spell in the fault phase, when liveness is checked).
    calm_until: u64,
    /// The highest zxid any replica has shown any client (in a reply or a
    /// connect): a sync sent after that must be answered at or above it.
    shown: Zxid,
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
            probe_rng: StdRng::seed_from_u64(seed ^ 0x9e0b_e000),
            transfer_rng: StdRng::seed_from_u64(seed ^ 0x7a4f_e400),
            reconfig_rng: StdRng::seed_from_u64(seed ^ 0x3c0f_1600),
            transfer_pending: None,
            load_tried: false,
            shown: Zxid::ZERO,
            healthy: None,
            probe_acked_at: 0,
            calm_until: 0,
            options,
        };
        sim.oracle.set_initial(sim.initial_configuration());
        for id in 1..=sim.options.peers() {
            sim.nodes.insert(
                id,
                Node {
                    id,
                    replica: None,
                    storage: MemStorage::new(),
                    unflushed: None,
                    restart_at: None,
                    stalled_until: 0,
                    paused: false,
                    held_requests: Vec::new(),
                    slow_until: 0,
                    disk_low_until: 0,
                },
            );
        }
        // The liveness probe is the last client; it only ever talks to the
        // healthy quorum.
        let probe = usize::from(sim.options.liveness);
        for i in 0..sim.options.clients + probe {
            sim.clients.push(Client::new(i, sim.options.linearizable_reads));
        }
        sim
    }

    fn now_ms(&self) -> i64 {
        1_700_000_000_000 + self.step as i64 * STEP_MS
    }

    fn replica_config(&self, id: ServerId) -> zabkeeper_core::replica::Config {
        let mut c = zabkeeper_core::replica::Config::new(id, (1..=self.options.nodes).collect(), 50);
        c.zab.observers = (self.options.nodes + 1..=self.options.members()).collect();
        c.snapshot_every = self.options.snapshot_every;
        c.snapshot_turns = self.options.snapshot_turns;
        // Far fewer than a snapshot interval, so every DIFF of more than a
        // few entries reads most of them back from storage.
        c.zab.resident_log_entries = 3;
        c.min_session_timeout_ms = 1000;
        c.max_session_timeout_ms = 4000;
        c.snapshot_chunk_bytes = 512;
        c.record_applied = true;
        c
    }

    fn fail(&self, violation: Violation) -> Failure {
        Failure { seed: self.seed, step: self.step, violation }
    }

    /// Runs the fault phase, heals, and checks convergence. A panic inside
    /// (a replica's debug-build invariant check, say) is a failure of this
    /// seed too, so it is reported with the seed that replays it.
    pub fn run(self) -> Result<Report, Failure> {
        let seed = self.seed;
        let step = std::sync::atomic::AtomicU64::new(0);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_steps(&step))).unwrap_or_else(|payload| {
            let message = zabkeeper_core::panics::message(payload.as_ref());
            Err(Failure { seed, step: step.into_inner(), violation: Violation::Panicked(message) })
        })
    }

    fn run_steps(mut self, seen: &std::sync::atomic::AtomicU64) -> Result<Report, Failure> {
        for id in 1..=self.options.peers() {
            self.boot(id).map_err(|v| self.fail(v))?;
        }
        let total = self.options.fault_steps + self.options.heal_steps;
        while self.step < total {
            self.step += 1;
            seen.store(self.step, std::sync::atomic::Ordering::Relaxed);
            let healing = self.step > self.options.fault_steps;
            if healing && self.heal_at.is_none() {
                self.heal();
            }
            self.one_step(healing).map_err(|v| self.fail(v))?;
        }
        self.check_converged().map_err(|v| self.fail(v))?;
        self.report.committed = self.oracle.committed();
        self.report.loads_committed = usize::from(self.oracle.loaded());
        self.report.epochs = self.oracle.epochs();
        self.report.delivered = self.net.delivered;
        self.report.acked_writes = self.clients.iter().map(Client::acked_count).sum();
        for reads in self.clients.iter().map(Client::reads) {
            self.report.reads.linearizable += reads.linearizable;
            self.report.reads.plain += reads.plain;
            self.report.reads.stale_plain += reads.stale_plain;
        }
        Ok(self.report)
    }

    fn boot(&mut self, id: ServerId) -> Result<(), Violation> {
        let config = self.replica_config(id);
        let now = self.now_ms();
        let node = self.nodes.get_mut(&id).expect("node exists");
        let recovered =
            node.storage.recover().map_err(|e| Violation::NoProgress(format!("recovery of {id} failed: {e}")))?;
        let snapshot_zxid = recovered.snapshot_zxid();
        let mut replica = Replica::new(config, recovered, now);
        if node.disk_low_until > self.step {
            replica.handle(Input::DiskSpace { low: true });
        }
        node.replica = Some(replica);
        node.unflushed = None;
        node.restart_at = None;
        self.oracle.resume(id, snapshot_zxid)?;
        self.drain(id)
    }

    /// Whether `id` is paused now (see [`Node::paused`]).
    fn is_paused(&self, id: ServerId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.paused && n.stalled_until > self.step && n.replica.is_some())
    }

    /// Resumes the paused replicas whose pause is over: first the client
    /// requests that waited for them, as a resumed process reads its
    /// sockets, before anything else happens to them.
    fn resume_paused(&mut self) -> Result<(), Violation> {
        let over: Vec<ServerId> = self
            .nodes
            .values()
            .filter(|n| (n.paused || !n.held_requests.is_empty()) && !self.is_paused(n.id))
            .map(|n| n.id)
            .collect();
        for id in over {
            let Some(node) = self.nodes.get_mut(&id) else { continue };
            node.paused = false;
            let held = std::mem::take(&mut node.held_requests);
            let Some(replica) = node.replica.as_mut() else { continue };
            for input in held {
                replica.handle(input);
            }
            self.drain(id)?;
        }
        Ok(())
    }

    fn heal(&mut self) {
        self.heal_at = Some(self.step);
        self.net.heal();
        for node in self.nodes.values_mut() {
            node.stalled_until = 0;
            node.slow_until = 0;
        }
        let down: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_none()).map(|n| n.id).collect();
        for id in down {
            if let Some(node) = self.nodes.get_mut(&id) {
                node.restart_at = Some(self.step);
            }
        }
    }

    fn faults(&self, healing: bool) -> Faults {
        if healing || self.step < self.calm_until {
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
        self.resume_paused()?;
        // Messages.
        for m in self.net.due(self.step) {
            if self.is_paused(m.to) {
                self.net.delay(m, self.step + 1);
                continue;
            }
            let Some(replica) = self.nodes.get_mut(&m.to).and_then(|n| n.replica.as_mut()) else { continue };
            replica.handle(Input::Peer { from: m.from, msg: m.msg });
            self.drain(m.to)?;
        }
        // Storage flushes.
        let ids: Vec<ServerId> = self.nodes.keys().copied().collect();
        for &id in &ids {
            let slow = self.nodes[&id].slow_until > self.step;
            let chance = if healing {
                1.0
            } else if slow {
                SLOW_FLUSH
            } else {
                self.options.flush
            };
            let flush = self.rng.random_bool(chance) && !self.is_paused(id);
            let node = self.nodes.get_mut(&id).expect("node exists");
            if let (true, Some(seq), Some(_)) = (flush, node.unflushed, node.replica.as_ref()) {
                let calm = self.step < self.calm_until;
                if !healing
                    && !calm
                    && self.options.disk_fault > 0.0
                    && self.later_faults.random_bool(self.options.disk_fault)
                {
                    self.disk_failed(id);
                    continue;
                }
                node.storage.flush().map_err(|e| Violation::NoProgress(format!("flush failed: {e}")))?;
                node.unflushed = None;
                if let Some(replica) = node.replica.as_mut() {
                    replica.handle(Input::Persisted { seq });
                }
                self.drain(id)?;
            }
        }
        self.disks_recover(healing);
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
            self.maybe_transfer()?;
            self.maybe_reconfigure()?;
            self.maybe_load()?;
        }
        self.check_liveness()?;
        self.check_step()
    }

    fn client_step(&mut self, healing: bool) -> Result<(), Violation> {
        // The last steps are quiet so that the final comparison sees a settled ensemble.
        let total = self.options.fault_steps + self.options.heal_steps;
        if self.step + 300 > total {
            return Ok(());
        }
        let up: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_some()).map(|n| n.id).collect();
        let probe = self.options.liveness.then(|| self.clients.len() - 1);
        let healthy = self.healthy.as_ref().map(|(_, members)| members.clone()).unwrap_or_default();
        for i in 0..self.clients.len() {
            let action = if Some(i) == probe {
                // The probe leaves a member outside the healthy quorum, as a
                // client whose server stopped answering would.
                if let Some(node) = self.clients[i].node().filter(|n| !healthy.contains(n)) {
                    self.clients[i].node_crashed(node);
                }
                self.clients[i].next_action(&mut self.probe_rng, &healthy, self.next_conn, healing, self.shown)
            } else {
                self.clients[i].next_action(&mut self.rng, &up, self.next_conn, healing, self.shown)
            };
            let Some(action) = action else { continue };
            if let workload::Action::Connect { .. } = action {
                self.next_conn += 1;
            }
            let (node, input) = action.into_input();
            if self.is_paused(node) {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.held_requests.push(input);
                }
                continue;
            }
            if let Some(replica) = self.nodes.get_mut(&node).and_then(|n| n.replica.as_mut()) {
                replica.handle(input);
                self.drain(node)?;
            }
        }
        // Durability of what was just acknowledged.
        if let Some(p) = probe {
            if self.clients[p].has_new_acks() {
                self.probe_acked_at = self.step;
            }
        }
        let acked: Vec<String> = self.clients.iter_mut().flat_map(Client::take_new_acks).collect();
        for path in acked {
            let Some(zxid) = self.oracle.created_at(&path) else { return Err(Violation::AckedNotCommitted(path)) };
            // A majority of the members decided on at `zxid` holds it durably:
            // the leader counted them (alone, or with the old ones while
            // joint), or, before a change, the old ones with it (a change is
            // committed only after every earlier write).
            let members = self.oracle.configuration_at(zxid).current();
            let holds = |id: ServerId| self.nodes.get(&id).is_some_and(|n| n.storage.durably_holds(zxid));
            if !members.is_majority(holds) {
                let durable = members.voters().filter(|id| holds(*id)).count();
                let quorum = members.majority();
                return Err(Violation::NotDurable { what: path, zxid, durable, quorum });
            }
        }
        Ok(())
    }

    fn check_step(&mut self) -> Result<(), Violation> {
        if !self.step.is_multiple_of(self.options.digest_every) {
            return Ok(());
        }
        for node in self.nodes.values() {
            if let Some(r) = &node.replica {
                // Kept up to date change by change (`record_applied`), so
                // this is cheap; holding no old state also keeps the trees'
                // leaves unshared, so applying never copies them.
                let state = r.tree().state();
                self.oracle.digest(node.id, state.last_zxid(), state.digest())?;
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for node in self.nodes.values() {
            match &node.replica {
                Some(r) => out.push_str(&format!(
                    "\n  replica {}: {:?} accepted={} current={} logged={:?} committed={:?} applied={:?} voters={:?}{}",
                    node.id,
                    r.status(),
                    r.zab().accepted_epoch(),
                    r.zab().current_epoch(),
                    r.zab().last_logged(),
                    r.zab().last_committed(),
                    r.tree().last_zxid(),
                    r.zab().configuration().voters(),
                    if r.zab().configuration().is_joint() { " (joint)" } else { "" },
                )),
                None => out.push_str(&format!("\n  replica {}: down", node.id)),
            }
            if node.slow_until > self.step {
                out.push_str(&format!(" slow until step {}", node.slow_until));
            }
            if node.stalled_until > self.step {
                let what = if node.paused { "paused" } else { "clock stalled" };
                out.push_str(&format!(" {what} until step {}", node.stalled_until));
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
                let (id, status, all) = (node.id, r.status(), self.describe());
                return Err(Violation::NoProgress(format!("replica {id} is not serving: {status:?}{all}")));
            }
            let state = r.tree().state();
            // The digest kept change by change must be the one every node gives.
            let (kept, full) = (state.digest(), state.digest_in_full());
            if kept != full {
                return Err(Violation::Diverged {
                    node: node.id,
                    zxid: state.last_zxid(),
                    found: kept,
                    expected: full,
                });
            }
            self.oracle.digest(node.id, state.last_zxid(), full)?;
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
            for path in client.refused_paths() {
                if let Some(node) = self
                    .nodes
                    .values()
                    .find(|n| n.replica.as_ref().is_some_and(|r| r.tree().state().node(path).is_some()))
                {
                    return Err(Violation::NoProgress(format!(
                        "{path} was refused for want of disk space, yet replica {} holds it",
                        node.id
                    )));
                }
            }
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
