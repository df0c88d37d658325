//! The faults a schedule injects between steps: crashes, partitions and
//! their healing, stalled clocks, slow members, disks short of space and
//! flushes that fail. Draws added after seeds were pinned come from the
//! `later_faults` stream, so pinned seeds replay unchanged.

use super::{Simulation, CALM, LIVENESS_STEPS, STEPS_PER_TICK};
use rand::Rng;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::replica::Input;
use zabkeeper_core::storage::Storage;
use zabkeeper_core::zab::Link;

impl Simulation {
    /// A flush failed: the replica stops without another attempt, as the
    /// server does. The batch may have reached the disk or not.
    pub(super) fn disk_failed(&mut self, id: ServerId) {
        self.report.disk_faults += 1;
        if self.later_faults.random_bool(0.5) {
            if let Some(node) = self.nodes.get_mut(&id) {
                // Written after all, though the fsync reported an error.
                let _ = node.storage.flush();
            }
        }
        let after = self.later_faults.random_range(20..400);
        self.crash(id, after);
    }

    /// Disks whose low-space spell is over (or all, when healing) get room back.
    pub(super) fn disks_recover(&mut self, healing: bool) {
        let step = self.step;
        for node in self.nodes.values_mut() {
            if node.disk_low_until > 0 && (healing || node.disk_low_until <= step) {
                node.disk_low_until = 0;
                if let Some(r) = node.replica.as_mut() {
                    r.handle(Input::DiskSpace { low: false });
                }
            }
        }
    }

    pub(super) fn inject_faults(&mut self) {
        // Liveness holds only while the ensemble is healthy: calm spells give
        // the fault phase stretches of it (a network that delivers, nothing
        // crashing, stalling or filling up; slow members go on), after which
        // the faults resume on whatever state the spell left.
        if self.options.liveness && self.step >= self.calm_until && self.later_faults.random_bool(CALM) {
            self.calm_until = self.step + self.later_faults.random_range(LIVENESS_STEPS + 200..LIVENESS_STEPS + 600);
        }
        if self.step < self.calm_until {
            if self.options.slow > 0.0 && self.later_faults.random_bool(self.options.slow) {
                self.slow_down();
            }
            if self.partition_heals_now() {
                self.net.heal();
            }
            return;
        }
        // Only voters count toward the minority that may be down (observers
        // and spares are victims too, but never hold up a quorum).
        if self.may_lose_a_voter() && self.rng.random_bool(self.options.crash) {
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
                let pause = self.later_faults.random_bool(0.5);
                let step = self.step;
                if let Some(node) = self.nodes.get_mut(&victim) {
                    // A pause under way stays one (its requests wait for it).
                    node.paused = pause || (node.paused && node.stalled_until > step);
                    node.stalled_until = until;
                    self.report.stalls += 1;
                    self.report.pauses += usize::from(pause);
                }
            }
        }
        if self.options.slow > 0.0 && self.later_faults.random_bool(self.options.slow) {
            self.slow_down();
        }
        if self.options.disk_low > 0.0 && self.later_faults.random_bool(self.options.disk_low) {
            if let Some(victim) = self.pick_up_node() {
                let until = self.step + self.later_faults.random_range(100..800);
                if let Some(node) = self.nodes.get_mut(&victim) {
                    node.disk_low_until = until;
                    if let Some(r) = node.replica.as_mut() {
                        r.handle(Input::DiskSpace { low: true });
                    }
                    self.report.disk_low += 1;
                }
                let _ = self.drain(victim);
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

    /// An up replica becomes slow for a while.
    fn slow_down(&mut self) {
        if let Some(victim) = self.pick_up_node() {
            let until = self.step + self.later_faults.random_range(100..1000);
            if let Some(node) = self.nodes.get_mut(&victim) {
                node.slow_until = until;
                self.report.slow += 1;
            }
        }
    }

    /// An up replica chosen by the later faults' stream.
    fn pick_up_node(&mut self) -> Option<ServerId> {
        let up: Vec<ServerId> = self.nodes.values().filter(|n| n.replica.is_some()).map(|n| n.id).collect();
        (!up.is_empty()).then(|| up[self.later_faults.random_range(0..up.len())])
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

    /// Both streams between `at` and `peer` broke (whichever follows the other).
    fn disconnect(&mut self, at: ServerId, peer: ServerId) {
        if let Some(replica) = self.nodes.get_mut(&at).and_then(|n| n.replica.as_mut()) {
            replica.handle(Input::PeerDisconnected { peer, link: Link::ToLeader });
            replica.handle(Input::PeerDisconnected { peer, link: Link::FromFollower });
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
            node.paused = false;
            node.held_requests.clear();
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
}
