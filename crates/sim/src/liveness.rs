//! Liveness: once a quorum has been up, connected over a network that
//! delivers, and healthy for [`LIVENESS_STEPS`], a write of the probe client
//! (which only ever talks to that quorum) must have committed.

use super::invariants::Violation;
use super::{Node, Simulation, LIVENESS_STEPS};
use zabkeeper_core::ids::ServerId;

impl Simulation {
    /// The largest group of up replicas that reach each other, if it is a
    /// quorum and the ensemble is healthy: the network delivers (calm or
    /// healed), no up replica's clock stalls and no disk is short of space
    /// (slow members count as healthy: they must not stop progress).
    fn healthy_quorum(&self) -> Option<Vec<ServerId>> {
        let step = self.step;
        let lossless = self.options.faults.loss == 0.0 && self.options.faults.duplicate == 0.0;
        if self.heal_at.is_none() && step >= self.calm_until && !lossless {
            return None;
        }
        let up: Vec<&Node> = self.nodes.values().filter(|n| n.replica.is_some()).collect();
        if up.iter().any(|n| n.stalled_until > step || n.disk_low_until > step) {
            return None;
        }
        let ids: Vec<ServerId> = up.iter().map(|n| n.id).collect();
        let group = ids
            .iter()
            .map(|&a| ids.iter().copied().filter(|&b| a == b || !self.net.is_cut(a, b)).collect::<Vec<_>>())
            .max_by_key(Vec::len)?;
        self.quorum_everywhere(|id| group.contains(&id)).then_some(group)
    }

    /// Liveness: a quorum that stays up, connected and healthy for
    /// [`LIVENESS_STEPS`] commits the probe's writes within that time.
    pub(super) fn check_liveness(&mut self) -> Result<(), Violation> {
        if !self.options.liveness {
            return Ok(());
        }
        let total = self.options.fault_steps + self.options.heal_steps;
        let group = self.healthy_quorum();
        let step = self.step;
        match (&self.healthy, group) {
            (Some((_, members)), Some(group)) if *members == group => {}
            (_, group) => {
                self.healthy = group.map(|g| (step, g));
                return Ok(());
            }
        }
        let Some((since, members)) = self.healthy.clone() else { return Ok(()) };
        // Clients fall quiet before the end; only whole windows while they write count.
        if step < since + LIVENESS_STEPS || step + 300 > total {
            return Ok(());
        }
        self.report.liveness_checks += 1;
        if self.probe_acked_at <= since {
            return Err(Violation::NoProgress(format!(
                "replicas {members:?} were up, connected and healthy from step {since} to {step}, \
                 and no write of the probe committed{}",
                self.describe()
            )));
        }
        self.healthy = Some((step, members));
        Ok(())
    }
}
