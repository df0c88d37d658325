//! Observers: they follow every commit but never vote, never lead and never
//! count toward a quorum.

use super::*;

#[test]
fn observers_apply_every_commit_but_never_lead() {
    let mut c = Cluster::with_observers(3, 2);
    c.settle(5);
    let leader = c.leader().expect("a leader");
    assert!(leader <= 3, "a voter leads, not observer {leader}");
    assert_eq!(c.serving(), 5, "observers serve too");
    let written: Vec<Zxid> = (0..5).map(|n| c.propose(n)).collect();
    c.deliver_all();
    for id in 4..=5 {
        assert!(written.iter().all(|z| c.nodes[&id].applied.contains(z)), "observer {id} applied every commit");
        assert_eq!(c.nodes[&id].peer.status().role, Role::Following);
    }
}

#[test]
fn a_quorum_of_voters_commits_with_every_observer_down() {
    let mut c = Cluster::with_observers(3, 2);
    c.settle(5);
    c.crash(4);
    c.crash(5);
    let zxid = c.propose(1);
    c.deliver_all();
    let leader = c.leader().expect("still a leader");
    assert!(c.nodes[&leader].applied.contains(&zxid), "observers are never waited for");
}

#[test]
fn observers_do_not_make_a_quorum() {
    // 3 voters + 2 observers: with two voters down, the one left and the two
    // observers are three of five members, yet no quorum of voters.
    let mut c = Cluster::with_observers(3, 2);
    c.settle(5);
    let leader = c.leader().expect("a leader");
    let down: Vec<ServerId> = (1..=3).filter(|id| *id != leader).collect();
    for id in &down {
        c.crash(*id);
    }
    c.settle(30);
    assert_eq!(c.leader(), None, "no leader without a quorum of voters");
    for id in 4..=5 {
        assert!(!c.nodes[&id].peer.status().serving, "observer {id} stops serving with the quorum gone");
    }
    // One voter back: a quorum again, and the observers follow its leader.
    c.restart(down[0]);
    c.settle(30);
    let leader = c.leader().expect("a quorum of voters again");
    assert!(leader <= 3);
    assert_eq!(c.serving(), 4, "the two voters and both observers serve");
}

#[test]
fn an_observer_is_never_a_transfer_target() {
    let mut c = Cluster::with_observers(3, 1);
    c.settle(5);
    let leader = c.leader().expect("a leader");
    let refused = c.nodes.get_mut(&leader).unwrap().peer.transfer_leadership(Some(4));
    assert_eq!(refused, Err(TransferError::NotSynced(4)));
    let target = c.nodes.get_mut(&leader).unwrap().peer.transfer_leadership(None).expect("a voter");
    assert!(target <= 3, "the leader picks a voter, not observer {target}");
}
