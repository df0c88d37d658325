//! Leadership probes: a leader confirms it still leads by a quorum of
//! echoes of a probe sent after the question (a sync) arrived.

use super::*;

impl Cluster {
    /// Asks `id` to confirm it still leads; the probe to wait for.
    fn probe(&mut self, id: ServerId) -> Option<u64> {
        let probe = self.nodes.get_mut(&id).unwrap().peer.confirm_leadership();
        self.drain(id);
        probe
    }
}

#[test]
fn a_lone_member_confirms_its_leadership_at_once() {
    let mut c = Cluster::new(1);
    let probe = c.probe(1).expect("the leader probes");
    assert_eq!(c.nodes[&1].confirmed, probe);
}

#[test]
fn a_leader_is_confirmed_by_a_quorum_of_echoes_and_not_by_itself() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().unwrap();
    let others: Vec<ServerId> = (1..=3).filter(|id| *id != leader).collect();
    // Every follower answers: confirmed once delivered, not before.
    let first = c.probe(leader).unwrap();
    assert!(c.nodes[&leader].confirmed < first, "confirmed before any follower echoed");
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, first);
    // One follower cut off: the other still makes a quorum with the leader.
    c.cut = vec![(leader, others[0]), (others[0], leader)];
    let second = c.probe(leader).unwrap();
    assert!(second > first);
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, second);
    // Both cut off: no confirmation, however long it waits, and it steps down.
    c.cut.extend([(leader, others[1]), (others[1], leader)]);
    let third = c.probe(leader).unwrap();
    c.settle(3);
    assert!(c.nodes[&leader].confirmed < third);
    c.settle(20);
    assert!(c.nodes[&leader].confirmed < third);
    assert_ne!(c.nodes[&leader].peer.status().role, Role::Leading);
}

#[test]
fn probes_asked_for_in_one_turn_share_one_ping() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().unwrap();
    let a = c.nodes.get_mut(&leader).unwrap().peer.confirm_leadership().unwrap();
    let b = c.nodes.get_mut(&leader).unwrap().peer.confirm_leadership().unwrap();
    assert_eq!(a, b);
    c.drain(leader);
    let pings = c.queue.iter().filter(|(from, _, m)| *from == leader && m.kind() == "PING").count();
    assert_eq!(pings, 2, "one PING per follower");
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, a);
}

/// A leader cut off long enough for the others to elect a new one (as a
/// paused process would be) gets no confirmation once it hears them again:
/// they follow a later epoch and ignore its probes.
#[test]
fn a_deposed_leader_is_never_confirmed() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let old = c.leader().unwrap();
    let others: Vec<ServerId> = (1..=3).filter(|id| *id != old).collect();
    let epoch = c.nodes[&old].peer.current_epoch();
    // Paused: no ticks and no messages for the old leader.
    c.nodes.get_mut(&old).unwrap().up = false;
    c.settle(30);
    let new = c.leader().expect("the others elect a leader");
    assert!(others.contains(&new) && c.nodes[&new].peer.current_epoch() > epoch);
    // Resumed: it still believes it leads, and probes at once.
    c.nodes.get_mut(&old).unwrap().up = true;
    assert_eq!(c.nodes[&old].peer.status().role, Role::Leading);
    let probe = c.probe(old).unwrap();
    c.deliver_all();
    assert!(c.nodes[&old].confirmed < probe, "confirmed by members of a later epoch");
    c.settle(20);
    assert!(c.nodes[&old].confirmed < probe);
}

fn echo_an_unsent_probe(_from: ServerId, _to: ServerId, msg: &mut Message) {
    if let Message::FollowerPing { probe, .. } = msg {
        *probe += 1000;
    }
}

#[test]
fn an_echo_of_a_probe_never_sent_confirms_only_what_was_sent() {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().unwrap();
    c.tamper = Some(echo_an_unsent_probe);
    let probe = c.probe(leader).unwrap();
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, probe, "an inflated echo counts for the probe sent, no more");
}
