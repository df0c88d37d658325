//! The simulation as a host of its replicas: the effects of their outputs
//! (the seeded network, the in-memory store, the simulated clients, the
//! oracle), driven by the core's one host loop
//! ([`zabkeeper_core::replica::host::carry_out`]), as the server's are.

use super::{Node, Simulation, SLOW_LINK};
use crate::invariants::Violation;
use rand::Rng;
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::replica::host::{self, Back, Host, StoredDiff};
use zabkeeper_core::replica::{AppliedRecord, ClientMessage, ConnId, Input, Replica};
use zabkeeper_core::storage::Storage;
use zabkeeper_core::tree::{snapshot, TreeState};
use zabkeeper_core::zab::{Message, Role, Status, StorageOp};

/// Passes of one replica's outputs before the simulation calls it stuck.
const MAX_PASSES: usize = 10_000;

impl Simulation {
    /// Carries out replica `id`'s outputs until it has none.
    pub(crate) fn drain(&mut self, id: ServerId) -> Result<(), Violation> {
        // The replica leaves its node while its outputs are carried out, so
        // the effects may touch the rest of the simulation; it sees itself
        // through the replica each effect is handed.
        let Some(mut replica) = self.nodes.get_mut(&id).and_then(|n| n.replica.take()) else { return Ok(()) };
        let drained = host::carry_out(&mut replica, &mut Effects { sim: self, id }, MAX_PASSES);
        // Checked in every build, not only where `handle` checks it.
        let valid = replica.validate();
        if let Some(node) = self.nodes.get_mut(&id) {
            node.replica = Some(replica);
        }
        valid.map_err(|broken| Violation::Broken { node: id, broken })?;
        match drained? {
            true => Ok(()),
            false => Err(Violation::NoProgress(format!("replica {id} kept producing outputs"))),
        }
    }
}

/// One replica's effects in the simulation.
struct Effects<'a> {
    sim: &'a mut Simulation,
    id: ServerId,
}

impl Effects<'_> {
    /// The link's delay when either end is slow now.
    fn slowed(&self, to: ServerId) -> Option<u64> {
        let now = self.sim.step;
        let slow = |n: ServerId| self.sim.nodes.get(&n).is_some_and(|n| n.slow_until > now);
        (slow(self.id) || slow(to)).then_some(SLOW_LINK)
    }

    fn node(&mut self) -> Result<&mut Node, Violation> {
        let id = self.id;
        self.sim.nodes.get_mut(&id).ok_or_else(|| Violation::NoProgress(format!("replica {id} has no node")))
    }
}

impl Host for Effects<'_> {
    type Error = Violation;

    fn observe(&mut self, replica: &mut Replica) -> Result<(), Violation> {
        for record in replica.drain_applied() {
            match record {
                AppliedRecord::Entry(zxid, txn) => self.sim.oracle.applied(self.id, zxid, &txn)?,
                AppliedRecord::Snapshot(zxid) => self.sim.oracle.resume(self.id, zxid)?,
            }
        }
        Ok(())
    }

    fn send(&mut self, _: &Replica, to: ServerId, msg: Message) -> Back<Violation> {
        let (now, slow) = (self.sim.step, self.slowed(to));
        let faults = self.sim.faults(self.sim.heal_at.is_some());
        let sim = &mut *self.sim;
        sim.net.send_slowed(&mut sim.rng, faults, slow, now, self.id, to, msg);
        Ok(None)
    }

    fn send_stored(&mut self, _: &Replica, to: ServerId, d: StoredDiff) -> Back<Violation> {
        let (now, slow) = (self.sim.step, self.slowed(to));
        let faults = self.sim.faults(self.sim.heal_at.is_some());
        let stored =
            zabkeeper_core::storage::stored_proposals(&self.node()?.storage, d.epoch, d.after, &d.ranges, d.batch);
        match stored {
            Ok(msgs) => {
                let sim = &mut *self.sim;
                sim.report.stored_diffs += 1;
                for msg in msgs {
                    sim.net.send_slowed(&mut sim.rng, faults, slow, now, self.id, to, msg);
                }
                Ok(None)
            }
            Err((_, log_floor)) => {
                self.sim.report.stored_reads_lost += 1;
                Ok(Some(Input::LogPurged { log_floor }))
            }
        }
    }

    fn persist(&mut self, _: &Replica, seq: u64, op: StorageOp) -> Back<Violation> {
        let node = self.node()?;
        node.storage.apply(&[op]).map_err(|e| Violation::NoProgress(format!("storage refused: {e}")))?;
        // Durable at the node's next flush, which answers Persisted.
        node.unflushed = Some(seq);
        Ok(None)
    }

    fn deliver(&mut self, _: &Replica, conn: ConnId, msg: ClientMessage) -> Back<Violation> {
        let sim = &mut *self.sim;
        if let Some(client) = sim.clients.iter_mut().find(|c| c.conn() == Some(conn)) {
            if let ClientMessage::Reply { zxid, .. } | ClientMessage::Connected { zxid, .. } = &msg {
                sim.shown = sim.shown.max(*zxid);
            }
            client.receive(msg)?;
        }
        Ok(None)
    }

    fn take_snapshot(&mut self, _: &Replica, state: TreeState) -> Back<Violation> {
        let zxid: Zxid = state.last_zxid();
        let sim = &mut *self.sim;
        let fails = sim.options.snapshot_fault > 0.0
            && sim.heal_at.is_none()
            && sim.later_faults.random_bool(sim.options.snapshot_fault);
        if fails {
            sim.report.snapshot_faults += 1;
            return Ok(Some(Input::SnapshotFailed));
        }
        let (chunks, _) = snapshot::to_chunks(&state, 512);
        let no_progress = |e: zabkeeper_core::storage::StorageError| Violation::NoProgress(e.to_string());
        let node = self.node()?;
        node.storage.save_snapshot(zxid, &chunks).map_err(no_progress)?;
        node.storage.purge(2).map_err(no_progress)?;
        let log_floor = node.storage.log_floor().map_err(no_progress)?;
        // Now and then an operator purges down to the newest snapshot
        // unannounced, so a DIFF from storage finds its entries gone.
        let sim = &mut *self.sim;
        if sim.heal_at.is_none() && sim.later_faults.random_bool(0.1) {
            self.node()?.storage.purge(1).map_err(no_progress)?;
        }
        Ok(Some(Input::SnapshotSaved { zxid, log_floor }))
    }

    fn status(&mut self, replica: &Replica, status: Status) -> Back<Violation> {
        let id = self.id;
        // When it decides to lead (not yet serving, nothing committed
        // since): a voter in the configuration its log holds or in the one
        // at its commit point. (Once established, the change that removes it
        // may commit at once, and then it leaves.)
        let zab = replica.zab();
        let votes = zab.configuration().is_voter(id) || zab.log().configuration_at(zab.last_committed()).is_voter(id);
        if status.role == Role::Leading && !status.serving && !votes {
            return Err(Violation::ObserverLeads { node: id, epoch: status.epoch });
        }
        if status.role == Role::Leading && status.serving {
            self.sim.oracle.leader(status.epoch, id)?;
            self.sim.transfer_landed(id, status.epoch);
        }
        Ok(None)
    }
}
