//! The shape of one run: how many members, how long, which faults how often.

use crate::network::Faults;

/// The shape of one run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Voting replicas (3 or 5), ids 1..=nodes.
    pub nodes: u64,
    /// Observers besides them (they never vote), the ids after the voters'.
    pub observers: u64,
    /// Peers started outside the configuration (as a member that joins
    /// is), the ids after the observers': reconfigurations add them.
    pub spares: u64,
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
    /// for a while, as a starved process, messages still flowing) or, half
    /// the time, that it is paused (SIGSTOP: nothing is taken until it resumes).
    pub stall: f64,
    /// Chance that a partition is a long one (up to a fifth of the fault phase).
    pub long_partition: f64,
    /// Chance that a flush fails: the replica stops (crash-stop, as the
    /// server does) and restarts later from what its disk holds; the failed
    /// batch may or may not have reached the disk.
    pub disk_fault: f64,
    /// Chance that a snapshot fails to save (the replica carries on).
    pub snapshot_fault: f64,
    /// Chance per step that an up replica becomes slow for a while: its
    /// disk flushes rarely and its messages take several times longer.
    pub slow: f64,
    /// Chance per step that an up replica's disk drops below its reserve
    /// for a while (a leader then refuses writes that grow the state).
    pub disk_low: f64,
    /// Check liveness: once a quorum has been up, connected and healthy for
    /// [`LIVENESS_STEPS`](crate::LIVENESS_STEPS), a probe client's write must have committed.
    pub liveness: bool,
    /// Transactions between snapshots (small, to exercise SNAP and purge).
    pub snapshot_every: u64,
    /// Members take turns to snapshot, as served members do.
    pub snapshot_turns: bool,
    /// Steps between checks of every replica's tree digest against the
    /// history (the replicas keep their digests up to date change by change,
    /// so every step costs little).
    pub digest_every: u64,
    /// Chance per step that the leader is asked to hand leadership over (to
    /// a member drawn at random, or to the one it finds most caught up), as
    /// an operator or a SIGTERM does.
    pub transfer: f64,
    /// Chance per step that the leader is asked to reconfigure to a
    /// membership drawn from every peer (voters, observers, spares).
    pub reconfig: f64,
    /// Every other read a client makes is linearizable (off: all plain, and
    /// the schedules are those the pinned seeds were found with).
    pub linearizable_reads: bool,
    /// A tree whose history ran ahead of the ensemble's epoch is loaded
    /// into the empty tree as soon as a leader serves (see `loads`).
    pub load: bool,
}

impl Options {
    /// The faults of the schedules the pinned regression seeds come from:
    /// no stalled clocks, no long partitions.
    pub fn classic(nodes: u64) -> Options {
        Options {
            stall: 0.0,
            long_partition: 0.0,
            disk_fault: 0.0,
            snapshot_fault: 0.0,
            slow: 0.0,
            disk_low: 0.0,
            liveness: false,
            snapshot_every: 40,
            snapshot_turns: false,
            digest_every: 1,
            transfer: 0.0,
            linearizable_reads: false,
            ..Options::faulty(nodes)
        }
    }

    /// A run with moderate faults.
    pub fn faulty(nodes: u64) -> Options {
        Options {
            nodes,
            observers: 0,
            spares: 0,
            fault_steps: 2500,
            heal_steps: 2500,
            clients: 4,
            faults: Faults { loss: 0.02, duplicate: 0.02, max_delay: 4 },
            crash: 0.002,
            partition: 0.002,
            flush: 0.6,
            stall: 0.001,
            long_partition: 0.2,
            disk_fault: 0.001,
            snapshot_fault: 0.05,
            slow: 0.0006,
            disk_low: 0.0003,
            liveness: true,
            snapshot_every: 100,
            snapshot_turns: true,
            digest_every: 1,
            transfer: 0.0004,
            reconfig: 0.0,
            linearizable_reads: true,
            load: false,
        }
    }
}

impl Options {
    /// Every member, voters and observers.
    pub fn members(&self) -> u64 {
        self.nodes + self.observers
    }

    /// Every peer: the members and the spares.
    pub fn peers(&self) -> u64 {
        self.members() + self.spares
    }
}
