//! A tree loaded into the ensemble's empty one (`zkctl import --load`), as
//! soon as a leader serves: its history reached an epoch above the one in
//! force, so the ensemble must move to an epoch past it before it writes
//! again, under every fault the schedule throws (the oracle checks that no
//! transaction after the load is older than it, see `invariants`).

use super::Simulation;
use crate::invariants::Violation;
use bytes::Bytes;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::tree::{snapshot, DataTree};
use zabkeeper_core::txn::{Txn, TxnBody};

/// Nodes in the loaded tree (under `/loaded`, apart from the workload's paths).
const LOADED_NODES: u32 = 20;

/// How far ahead of the leader's epoch the loaded history runs.
const EPOCHS_AHEAD: u32 = 3;

impl Simulation {
    /// Once, when asked for and a leader serves: proposes loading a tree.
    pub(super) fn maybe_load(&mut self) -> Result<(), Violation> {
        if !self.options.load || self.load_tried {
            return Ok(());
        }
        let Some((leader, epoch)) = self.awake_serving_leader() else { return Ok(()) };
        self.load_tried = true;
        let loaded_epoch = epoch + EPOCHS_AHEAD;
        let chunks = tree_of_epoch(loaded_epoch);
        let Some(replica) = self.nodes.get_mut(&leader).and_then(|n| n.replica.as_mut()) else { return Ok(()) };
        match replica.load_tree(chunks, 0) {
            Ok((_, floor)) if floor == loaded_epoch => self.report.loads += 1,
            Ok((zxid, floor)) => {
                return Err(Violation::NoProgress(format!(
                    "the load at {zxid:?} names epoch {floor}, its tree's history reached {loaded_epoch}"
                )))
            }
            // The workload wrote first: nothing to check but that it was refused.
            Err(_) => self.report.loads_refused += 1,
        }
        self.drain(leader)
    }
}

/// A tree whose history ran in `epoch`, as snapshot chunks.
fn tree_of_epoch(epoch: u32) -> Vec<Bytes> {
    let mut tree = DataTree::new();
    let mut counter = 0;
    let mut apply = |tree: &mut DataTree, body: TxnBody| {
        counter += 1;
        tree.apply(Zxid::new(epoch, counter), &Txn { session: SessionId::NONE, cxid: 0, time_ms: 1, body });
    };
    for i in 0..=LOADED_NODES {
        let path = if i == 0 { "/loaded".to_string() } else { format!("/loaded/{i}") };
        let body = TxnBody::Create {
            path,
            data: zabkeeper_core::data::Data::from(b"from elsewhere"),
            acl: zabkeeper_core::acl::Acl::open_unsafe(),
            ephemeral_owner: 0,
            parent_cversion: i as i32,
        };
        apply(&mut tree, body);
    }
    snapshot::to_chunks(tree.state(), 4096).0
}
