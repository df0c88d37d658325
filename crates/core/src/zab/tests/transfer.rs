//! Leadership transfer: the leader stops proposing, waits for its target to
//! hold its whole log, steps down and nominates it.

use super::*;

fn applied_everywhere(c: &Cluster) -> Vec<Vec<Zxid>> {
    c.nodes.values().map(|n| n.applied.clone()).collect()
}

#[test]
fn leadership_moves_to_the_nominee_without_waiting_for_a_tick() {
    // Ids decide ties in a plain election: 5 would win again. The nominee,
    // the lowest id, wins instead, by messages alone (no timeout runs out).
    let mut c = Cluster::new(5);
    c.settle(3);
    assert_eq!(c.leader(), Some(5));
    let before: Vec<Zxid> = (0..4).map(|n| c.propose(n)).collect();
    c.deliver_all();
    let epoch = c.nodes[&5].peer.current_epoch();

    let target = c.nodes.get_mut(&5).unwrap().peer.transfer_leadership(Some(1)).expect("1 is synced");
    assert_eq!(target, 1);
    c.drain(5);
    c.deliver_all();

    assert_eq!(c.leader(), Some(1), "the nominee leads");
    assert_eq!(c.serving(), 5, "every member serves again");
    assert!(c.nodes[&1].peer.current_epoch() > epoch, "under a new epoch");
    let after = c.propose(9);
    c.deliver_all();
    for node in c.nodes.values() {
        assert!(before.iter().all(|z| node.applied.contains(z)), "nothing committed was lost");
        assert!(node.applied.contains(&after), "the new leader commits");
    }
}

#[test]
fn proposals_in_flight_commit_before_the_hand_over_and_new_ones_wait() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().expect("a leader");
    // Proposed but not yet acknowledged by anyone when the transfer starts.
    let in_flight = c.propose(1);
    let target = c.nodes.get_mut(&leader).unwrap().peer.transfer_leadership(None).expect("a synced follower");
    assert_ne!(target, leader);
    let refused = c.nodes.get_mut(&leader).unwrap().peer.propose(txn(2));
    assert_eq!(refused, Err(ProposeError::Transferring), "new writes wait for the next leader");
    c.drain(leader);
    c.deliver_all();

    assert_eq!(c.leader(), Some(target));
    let next = c.propose(3);
    c.deliver_all();
    let applied = applied_everywhere(&c);
    for log in &applied {
        let at = log.iter().position(|z| *z == in_flight).expect("the write in flight committed everywhere");
        assert!(log[at..].contains(&next), "and before the new leader's first write");
    }
    assert!(applied.windows(2).all(|w| w[0] == w[1]), "one order everywhere: {applied:?}");
}

#[test]
fn a_transfer_is_refused_with_its_reason() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().expect("a leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    fn peer(c: &mut Cluster, id: ServerId) -> &mut Zab {
        &mut c.nodes.get_mut(&id).expect("a member").peer
    }
    assert_eq!(peer(&mut c, leader).transfer_leadership(Some(leader)), Err(TransferError::AlreadyLeads(leader)));
    assert_eq!(peer(&mut c, leader).transfer_leadership(Some(9)), Err(TransferError::NotSynced(9)));
    assert_eq!(peer(&mut c, follower).transfer_leadership(None), Err(TransferError::NotLeader));
    assert_eq!(c.leader(), Some(leader), "a refused transfer changes nothing");
    c.propose(1);
}

#[test]
fn a_transfer_to_a_member_that_cannot_catch_up_is_abandoned_and_writes_resume() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().expect("a leader");
    let target = (1..=3).find(|id| *id != leader).expect("a follower");
    // The target hears nothing more: it never acknowledges the write below.
    c.cut.push((leader, target));
    c.propose(1);
    c.nodes.get_mut(&leader).unwrap().peer.transfer_leadership(Some(target)).expect("synced until now");
    c.drain(leader);
    c.deliver_all();
    assert_eq!(c.nodes[&leader].peer.transferring_to(), Some(target));
    let init_limit = c.nodes[&leader].peer.config().init_limit_ticks as usize;
    for _ in 0..=init_limit {
        c.tick();
        if c.nodes[&leader].peer.transferring_to().is_none() {
            break;
        }
    }
    assert_eq!(c.nodes[&leader].peer.transferring_to(), None, "abandoned within initLimit");
    assert_eq!(c.leader(), Some(leader), "the leader kept its role");
    c.propose(2);
}

#[test]
fn the_old_leader_keeps_its_new_leader_when_its_successors_follower_stream_ends() {
    // Found by the SIGTERM process test: the successor's stream as a
    // follower of the old leader ends just after the old leader starts to
    // follow it. That end must not read as the loss of the new leader.
    let mut c = Cluster::new(3);
    c.settle(3);
    let old = c.leader().expect("a leader");
    let target = c.nodes.get_mut(&old).unwrap().peer.transfer_leadership(None).expect("a synced follower");
    c.drain(old);
    c.deliver_all();
    assert_eq!(c.leader(), Some(target));
    let peer = &mut c.nodes.get_mut(&old).unwrap().peer;
    peer.handle(Input::Disconnected { peer: target, link: Link::FromFollower });
    assert_eq!(peer.status().role, Role::Following, "still following");
    assert_eq!(peer.status().leader, Some(target));
    peer.handle(Input::Disconnected { peer: target, link: Link::ToLeader });
    assert_eq!(peer.status().role, Role::Looking, "its own stream to the leader ending does count");
}

/// Found by CI (the multi-host run): a follower that had been through an
/// election of its own (its round ahead of the others') looked again at the
/// hand-over, voting for itself; the old leader and the nominee, hearing
/// its later round, started that round over with their own votes, dropping
/// the nomination, and the highest id won instead of the nominee.
#[test]
fn a_nomination_survives_a_later_round_heard_during_the_hand_over() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().expect("a leader");
    let mut followers = (1..=3).filter(|id| *id != leader);
    let (nominee, ahead) = (followers.next().expect("a follower"), followers.next().expect("another"));
    // `ahead` loses its leader for a moment: it looks (a round more) and rejoins.
    c.nodes.get_mut(&ahead).unwrap().peer.handle(Input::Disconnected { peer: leader, link: Link::ToLeader });
    c.drain(ahead);
    c.settle(30);
    assert_eq!((c.leader(), c.serving()), (Some(leader), 3), "it rejoined the same leader");
    let target = c.nodes.get_mut(&leader).unwrap().peer.transfer_leadership(Some(nominee)).expect("synced");
    assert_eq!(target, nominee);
    c.drain(leader);
    c.deliver_all();
    assert_eq!(c.leader(), Some(nominee), "the nominee leads, not the highest id");
}
