//! Reconfiguration: joint consensus from one membership to the next, entered
//! by a replicated transaction and completed by the leader.

use super::*;
use crate::members::{Configuration, Membership};

impl Cluster {
    /// `voters` voting members and `spares` running peers outside the
    /// configuration (started with the voters' configuration, as a member
    /// that joins is), which a reconfiguration may add.
    fn with_spares(voters: u64, spares: u64) -> Cluster {
        let mut c = Cluster::new(voters);
        for id in voters + 1..=voters + spares {
            let peer = Zab::new(config(id, voters), Durable::default());
            c.nodes.insert(id, Node { peer, up: true, applied: vec![], durable: Durable::default(), confirmed: 0 });
            c.drain(id);
        }
        c
    }

    /// Proposes a reconfiguration to these voters at the leader.
    fn reconfigure(&mut self, voters: &[ServerId]) -> Result<Zxid, ProposeError> {
        let leader = self.leader().expect("a serving leader");
        let next = Membership::of_ids(voters, &[]);
        let change = self.nodes[&leader].peer.configuration().enter(next);
        let txn = Txn { session: SessionId(1), cxid: 0, time_ms: 0, body: TxnBody::Reconfig(change) };
        let zxid = self.nodes.get_mut(&leader).unwrap().peer.propose(txn);
        self.drain(leader);
        zxid
    }

    fn configuration(&self, id: ServerId) -> &Configuration {
        self.nodes[&id].peer.configuration()
    }

    fn voters_of(&self, id: ServerId) -> Vec<ServerId> {
        self.configuration(id).voters()
    }
}

#[test]
fn an_ensemble_grows_from_three_to_five_and_then_survives_two_old_members_down() {
    let mut c = Cluster::with_spares(3, 2);
    c.settle(10);
    let leader = c.leader().expect("a leader");
    assert!(leader <= 3);
    // The spares follow the leader as non-voting learners before they are added.
    assert_eq!(c.serving(), 5, "spares follow and serve before they vote");
    let enter = c.reconfigure(&[1, 2, 3, 4, 5]).expect("4 and 5 are synced");
    c.settle(3);
    for id in 1..=5 {
        assert!(c.nodes[&id].applied.contains(&enter), "member {id} applied the reconfiguration");
        assert!(!c.configuration(id).is_joint(), "member {id} completed the joint configuration");
        assert_eq!(c.voters_of(id), vec![1, 2, 3, 4, 5]);
        assert_eq!(c.configuration(id).version, enter);
    }
    // Two of the old three down: the new five still have a majority.
    let down: Vec<ServerId> = (1..=3).filter(|id| *id != leader).collect();
    for id in &down {
        c.crash(*id);
    }
    let zxid = c.propose(1);
    c.settle(3);
    assert!(c.nodes[&4].applied.contains(&zxid), "committed by a majority of the five");
}

#[test]
fn one_reconfiguration_at_a_time_and_only_toward_a_connected_majority() {
    let mut c = Cluster::with_spares(3, 1);
    c.settle(10);
    assert_eq!(c.reconfigure(&[1, 6, 7]), Err(ProposeError::NewConfigNoQuorum), "6 and 7 do not exist");
    c.reconfigure(&[1, 2, 3, 4]).expect("4 is synced");
    assert_eq!(c.reconfigure(&[1, 2, 3]), Err(ProposeError::ReconfigInProgress));
    c.settle(3);
    c.reconfigure(&[1, 2, 3]).expect("the first one is complete");
}

#[test]
fn while_joint_a_commit_needs_a_majority_of_the_new_voters_too() {
    let mut c = Cluster::with_spares(3, 2);
    c.settle(10);
    let leader = c.leader().expect("a leader");
    let enter = c.reconfigure(&[leader, 4, 5]).expect("4 and 5 are synced");
    // The proposal is in the leader's log (joint from now on) but the new
    // members go down before they hold it.
    c.crash(4);
    c.crash(5);
    c.deliver_all();
    let write = c.propose(1);
    c.deliver_all();
    assert!(c.configuration(leader).is_joint());
    for id in 1..=3 {
        let applied = &c.nodes[&id].applied;
        assert!(
            !applied.contains(&enter) && !applied.contains(&write),
            "a majority of {{1, 2, 3}} alone commits nothing"
        );
    }
    // One new member back makes a majority of both (after the leader, short
    // of one, gave up and the restarted member's first try timed out).
    c.restart(4);
    c.settle(30);
    let leader = c.leader().expect("a leader of the joint configuration");
    let applied = &c.nodes[&leader].applied;
    assert!(applied.contains(&enter) && applied.contains(&write), "both commit once {{leader, 4}} holds them");
}

#[test]
fn a_leader_removed_hands_over_and_keeps_following_without_a_vote() {
    let mut c = Cluster::new(5);
    c.settle(5);
    let old = c.leader().expect("a leader");
    let stay: Vec<ServerId> = (1..=5).filter(|id| *id != old).take(3).collect();
    let enter = c.reconfigure(&stay).expect("the others are synced");
    c.settle(20);
    let new = c.leader().expect("a new leader");
    assert!(stay.contains(&new), "one of the new voters leads, not {new}");
    assert_eq!(c.nodes[&old].peer.status().role, Role::Following, "the old leader follows");
    assert!(!c.configuration(old).is_voter(old));
    let zxid = c.propose(1);
    c.settle(2);
    for id in 1..=5 {
        assert!(c.nodes[&id].applied.contains(&enter), "member {id} applied the reconfiguration");
        assert!(c.nodes[&id].applied.contains(&zxid), "member {id}, removed or not, follows the new leader");
    }
}

#[test]
fn a_member_restarting_keeps_the_configuration_its_log_holds() {
    let mut c = Cluster::with_spares(3, 2);
    c.settle(10);
    c.reconfigure(&[1, 2, 3, 4, 5]).expect("4 and 5 are synced");
    c.settle(3);
    // Started again with the old file (three voters), member 5 reads the
    // replicated configuration back from its log: the log wins.
    c.restart(5);
    assert_eq!(c.voters_of(5), vec![1, 2, 3, 4, 5]);
    c.settle(10);
    assert!(c.nodes[&5].peer.status().serving);
}

#[test]
fn a_follower_synced_by_snap_takes_the_configuration_with_it() {
    let mut c = Cluster::with_spares(3, 1);
    c.settle(10);
    c.reconfigure(&[1, 2, 3, 4]).expect("4 is synced");
    c.settle(3);
    c.crash(4);
    let leader = c.leader().expect("a leader");
    for n in 0..10 {
        c.propose(n);
    }
    c.deliver_all();
    // Compacting past the reconfiguration forces a SNAP for member 4.
    let committed = c.nodes[&leader].peer.last_committed();
    c.nodes.get_mut(&leader).unwrap().peer.compact(committed);
    c.nodes.get_mut(&4).unwrap().durable = Durable::default();
    c.restart(4);
    c.settle(10);
    assert_eq!(c.voters_of(4), vec![1, 2, 3, 4], "the snapshot carried the configuration");
    assert!(c.nodes[&4].peer.status().serving);
}

#[test]
fn a_member_started_with_another_configuration_file_takes_the_leaders() {
    // Member 4's file lists it among four voters; the ensemble's has three.
    let mut c = Cluster::new(3);
    c.settle(5);
    let peer = Zab::new(config(4, 4), Durable::default());
    c.nodes.insert(4, Node { peer, up: true, applied: vec![], durable: Durable::default(), confirmed: 0 });
    c.drain(4);
    c.settle(10);
    assert!(c.nodes[&4].peer.status().serving, "it follows the ensemble's leader");
    assert_eq!(c.voters_of(4), vec![1, 2, 3], "and holds the leader's configuration, not its file's");
    assert_eq!(c.voters_of(c.leader().unwrap()), vec![1, 2, 3]);
}

/// Peer 2 holding an uncommitted change from {1, 2, 3} to {1, 2, 3, 4}, as
/// peer 4 does and 1 and 3 do not.
fn holding_a_change_to_four() -> Zab {
    let change =
        Configuration::initial(Membership::of_ids(&[1, 2, 3], &[])).enter(Membership::of_ids(&[1, 2, 3, 4], &[]));
    let body = TxnBody::Reconfig(change);
    let entry = Entry::new(Zxid::new(1, 1), Txn { session: SessionId(1), cxid: 0, time_ms: 0, body });
    let durable = Durable {
        accepted_epoch: 1,
        current_epoch: 1,
        snapshot_zxid: Zxid::ZERO,
        entries: vec![entry],
        configuration: None,
        epoch_floor: 0,
    };
    let mut peer = Zab::new(config(2, 3), durable);
    peer.take_actions();
    assert!(peer.configuration().is_joint());
    peer
}

/// Found by a soak seed (1 599 900 102 of `membership_changes_...`): 4,
/// as recent as 2 and a higher id, won 2's vote; 1 and 3 do not count 4 (it
/// is no voter of theirs), heard 2's first vote and followed 2; 2 waited for
/// 4 to lead and 4 never had a majority of {1, 2, 3}. Round after round,
/// until the liveness window ran out. A member a quorum of its own
/// configuration follows leads.
#[test]
fn a_member_a_quorum_follows_leads_though_its_vote_moved_on() {
    let mut peer = holding_a_change_to_four();
    let (for_4, for_2) = (Vote::new(1, Zxid::new(1, 1), 4), Vote::new(1, Zxid::new(1, 1), 2));
    hear(&mut peer, 4, 1, for_4, PeerState::Looking);
    hear(&mut peer, 1, 1, for_2, PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking, "{{1, 2}} is no majority of {{1, 2, 3, 4}}");
    hear(&mut peer, 3, 1, for_2, PeerState::Following);
    assert_eq!(peer.status().role, Role::Leading, "{{1, 2, 3}} is a majority of both");

    // Also when 4 has promised a later epoch over the same history (seed
    // 1 599 896 033): a promise is not a history.
    let mut peer = holding_a_change_to_four();
    hear(&mut peer, 4, 1, Vote::new(2, Zxid::new(1, 1), 4), PeerState::Looking);
    hear(&mut peer, 1, 1, for_2, PeerState::Following);
    hear(&mut peer, 3, 1, for_2, PeerState::Following);
    assert_eq!(peer.status().role, Role::Leading);

    // Not while 4 says it leads (seed 1 599 901 472): a second leadership
    // would split the followers.
    let mut peer = holding_a_change_to_four();
    hear(&mut peer, 4, 1, for_4, PeerState::Looking);
    hear(&mut peer, 4, 1, for_4, PeerState::Leading);
    hear(&mut peer, 1, 1, for_2, PeerState::Following);
    hear(&mut peer, 3, 1, for_2, PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking);

    // Not while its vote names a longer history: that leader would find
    // a follower ahead of it.
    let mut peer = holding_a_change_to_four();
    hear(&mut peer, 4, 1, Vote::new(1, Zxid::new(1, 2), 4), PeerState::Looking);
    hear(&mut peer, 1, 1, for_2, PeerState::Following);
    hear(&mut peer, 3, 1, for_2, PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking);
}
