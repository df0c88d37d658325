//! A loaded tree whose history ran ahead of ours: once its entry commits,
//! the ensemble moves to an epoch above the loaded one before it writes
//! again, whoever leads and whatever crashes in between.

use super::*;

fn load(epoch: Epoch) -> Txn {
    Txn { session: SessionId::NONE, cxid: 0, time_ms: 0, body: TxnBody::Load { chunks: Vec::new(), epoch } }
}

fn propose_load(c: &mut Cluster, epoch: Epoch) -> (ServerId, Zxid) {
    let leader = c.leader().expect("a serving leader");
    let zxid = c.nodes.get_mut(&leader).unwrap().peer.propose(load(epoch)).expect("the leader proposes a load");
    (leader, zxid)
}

#[test]
fn a_committed_load_moves_the_ensemble_above_its_epoch_and_writes_wait_until_then() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let before = c.propose(1);
    let (leader, at) = propose_load(&mut c, 7);
    let refused = c.nodes.get_mut(&leader).unwrap().peer.propose(txn(2));
    assert_eq!(refused, Err(ProposeError::Transferring), "nothing is written after a load in the old epoch");
    c.drain(leader);
    c.deliver_all();

    let now = c.leader().expect("a leader again, by messages alone");
    assert_eq!(c.serving(), 3);
    for node in c.nodes.values() {
        assert!(node.peer.current_epoch() > 7, "every member is in an epoch above the loaded one");
        assert!(node.applied.contains(&before) && node.applied.contains(&at), "nothing committed was lost");
    }
    let after = c.propose(3);
    assert!(after > Zxid::new(7, u32::MAX - 1), "the next write is newer than any loaded zxid: {after}");
    c.deliver_all();
    assert!(c.nodes.values().all(|n| n.applied.contains(&after)), "and commits (leader {now})");
}

#[test]
fn a_load_below_the_epoch_in_force_changes_no_epoch() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let (leader, at) = propose_load(&mut c, 0);
    c.drain(leader);
    c.deliver_all();
    assert_eq!(c.leader(), Some(leader), "no election");
    let epoch = c.nodes[&leader].peer.current_epoch();
    let next = c.propose(1);
    assert_eq!(next, Zxid::new(epoch, at.counter() + 1), "writes go on in the same epoch");
}

#[test]
fn a_leader_that_crashes_after_the_commit_leaves_the_move_to_its_successor() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let (leader, at) = propose_load(&mut c, 9);
    c.drain(leader);
    // Deliver until the followers applied the load, then the leader dies
    // before anyone hears it step down.
    while c.nodes.values().filter(|n| n.applied.contains(&at)).count() < 3 {
        if c.queue.is_empty() {
            break;
        }
        let (from, to, msg) = c.queue.pop_front().expect("checked");
        if matches!(msg, Message::StepDown { .. }) {
            continue;
        }
        c.nodes.get_mut(&to).unwrap().peer.handle(Input::Message { from, msg });
        c.drain(to);
    }
    c.queue.clear();
    c.crash(leader);
    c.settle(30);
    let next = c.leader().expect("the others elect one");
    assert_ne!(next, leader);
    assert!(c.nodes[&next].peer.current_epoch() > 9, "its epoch passes the loaded one");
    let after = c.propose(1);
    assert!(after.epoch() > 9);
}

/// Delivers until every member applied `at`, holding back every STEPDOWN
/// (the leader dies before anyone hears it step down).
fn commit_everywhere_but_step_down(c: &mut Cluster, at: Zxid) {
    while c.nodes.values().filter(|n| n.applied.contains(&at)).count() < 3 {
        let Some((from, to, msg)) = c.queue.pop_front() else { panic!("the load did not commit everywhere") };
        if !matches!(msg, Message::StepDown { .. }) {
            c.nodes.get_mut(&to).unwrap().peer.handle(Input::Message { from, msg });
            c.drain(to);
        }
    }
    c.queue.clear();
}

#[test]
fn every_member_restarted_before_the_move_still_moves_past_the_load() {
    for covered_by_snapshot in [false, true] {
        let mut c = Cluster::new(3);
        c.settle(3);
        let (leader, at) = propose_load(&mut c, 5);
        c.drain(leader);
        commit_everywhere_but_step_down(&mut c, at);
        for id in 1..=3 {
            c.crash(id);
            let durable = &mut c.nodes.get_mut(&id).unwrap().durable;
            assert_eq!(durable.accepted_epoch, 5, "the commit promised the loaded epoch durably");
            if covered_by_snapshot {
                // A snapshot took the load in: the log after it holds nothing of it.
                durable.snapshot_zxid = at;
                durable.entries.retain(|e| e.zxid > at);
            }
        }
        for id in 1..=3 {
            c.restart(id);
        }
        c.settle(30);
        let now = c.leader().expect("a leader after the restart");
        assert!(c.nodes[&now].peer.current_epoch() > 5, "snapshot {covered_by_snapshot}");
        assert!(c.propose(1).epoch() > 5);
    }
}

#[test]
fn a_loaded_tree_travels_in_a_proposal_of_its_own() {
    let entry = |n: u32, txn: Txn| Entry::new(Zxid::new(2, n), txn);
    let entries = vec![entry(1, txn(1)), entry(2, txn(2)), entry(3, load(4)), entry(4, txn(4))];
    let sizes: Vec<usize> = proposals(2, Zxid::new(2, 0), &entries, 1000)
        .into_iter()
        .map(|m| match m {
            Message::Proposal { entries, .. } => entries.len(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sizes, vec![2, 1, 1]);
}
