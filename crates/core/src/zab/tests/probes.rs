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

/// Three members that have elected a leader, and which one leads.
fn settled_three() -> (Cluster, ServerId) {
    let mut c = Cluster::new(3);
    c.settle(3);
    let leader = c.leader().expect("three members elect a leader");
    (c, leader)
}

#[test]
fn a_lone_member_confirms_its_leadership_at_once() {
    let mut c = Cluster::new(1);
    let probe = c.probe(1).expect("the leader probes");
    assert_eq!(c.nodes[&1].confirmed, probe);
    // And every probe after it, in later turns or the same one: each is
    // confirmed once, so a question asked after a confirmation gets its own.
    let next = c.probe(1).expect("the leader probes again");
    assert!(next > probe, "a probe already confirmed is not handed out again");
    assert_eq!(c.nodes[&1].confirmed, next);
    let node = c.nodes.get_mut(&1).unwrap();
    let (a, b) = (node.peer.confirm_leadership().unwrap(), node.peer.confirm_leadership().unwrap());
    c.drain(1);
    assert!(a > next && b > a);
    assert_eq!(c.nodes[&1].confirmed, b);
}

#[test]
fn a_leader_is_confirmed_by_a_quorum_of_echoes_and_not_by_itself() {
    let (mut c, leader) = settled_three();
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
    let (mut c, leader) = settled_three();
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
    let (mut c, leader) = settled_three();
    c.tamper = Some(echo_an_unsent_probe);
    let probe = c.probe(leader).unwrap();
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, probe, "an inflated echo counts for the probe sent, no more");
}

/// The messages `from` has queued to `to`, by kind.
fn queued(c: &Cluster, from: ServerId, to: ServerId) -> Vec<&'static str> {
    c.queue.iter().filter(|(f, t, _)| *f == from && *t == to).map(|(_, _, m)| m.kind()).collect()
}

/// A probe asked for in a turn in which the leader also replies to a
/// follower rides on that REPLY, and the follower's echo on the REQUEST it
/// sends in the turn it takes the reply: the probe costs no message of its own.
#[test]
fn a_probe_rides_on_a_reply_and_its_echo_on_the_next_request() {
    let (mut c, leader) = settled_three();
    let (a, b) = {
        let others: Vec<ServerId> = (1..=3).filter(|id| *id != leader).collect();
        (others[0], others[1])
    };
    // Only `a` can confirm: `b` hears nothing.
    c.cut = vec![(leader, b), (b, leader)];
    let node = c.nodes.get_mut(&leader).unwrap();
    assert!(node.peer.reply(a, Bytes::from_static(b"done")));
    let probe = node.peer.confirm_leadership().unwrap();
    c.drain(leader);
    assert_eq!(queued(&c, leader, a), ["REPLY"], "the probe rides on the reply, with no PING");
    let Some((_, _, Message::Reply { probe: carried, .. })) = c.queue.iter().find(|(_, t, _)| *t == a) else {
        panic!("no reply to {a}")
    };
    assert_eq!(*carried, probe);
    // The follower takes the reply and, in the same turn, forwards a request.
    c.queue.retain(|(_, t, _)| *t != b);
    let (from, to, msg) = c.queue.pop_front().unwrap();
    assert_eq!((from, to), (leader, a));
    let node = c.nodes.get_mut(&a).unwrap();
    node.peer.handle(Input::Message { from, msg });
    assert!(node.peer.forward(Bytes::from_static(b"next round")));
    c.drain(a);
    assert_eq!(queued(&c, a, leader), ["REQUEST"], "the echo rides on the request, with no PING");
    assert!(c.nodes[&leader].confirmed < probe);
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, probe, "confirmed by the echo on the request");
}

/// A follower that has not echoed one probe gets no PING for a newer one:
/// the echo comes first, and the newer probe goes at the end of the turn
/// that takes it. So a leader has at most one probe unechoed per follower.
#[test]
fn a_newer_probe_waits_for_the_echo_of_the_one_unechoed() {
    let (mut c, leader) = settled_three();
    let first = c.probe(leader).unwrap();
    let pings = |c: &Cluster| c.queue.iter().filter(|(f, _, m)| *f == leader && m.kind() == "PING").count();
    assert_eq!(pings(&c), 2);
    let second = c.probe(leader).unwrap();
    assert!(second > first);
    assert_eq!(pings(&c), 2, "no PING while the first is unechoed");
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, second, "the second went once the first was echoed");
}

/// A probe lost on the way (or an echo lost) is not waited for forever:
/// the leader's next heartbeat carries the newest probe asked for.
#[test]
fn a_lost_probe_goes_again_with_the_next_heartbeat() {
    let (mut c, leader) = settled_three();
    let first = c.probe(leader).unwrap();
    c.queue.clear();
    let second = c.probe(leader).unwrap();
    assert!(c.queue.is_empty(), "the first is still unechoed: nothing sent");
    c.settle(1);
    assert!(c.nodes[&leader].confirmed >= second && second > first);
}

fn echo_an_unsent_probe_on_a_request(_from: ServerId, _to: ServerId, msg: &mut Message) {
    if let Message::Forward { probe, .. } = msg {
        *probe += 1000;
    }
}

#[test]
fn an_echo_on_a_request_of_a_probe_never_sent_confirms_only_what_was_sent() {
    let (mut c, leader) = settled_three();
    let others: Vec<ServerId> = (1..=3).filter(|id| *id != leader).collect();
    c.cut = vec![(leader, others[1]), (others[1], leader)];
    c.tamper = Some(echo_an_unsent_probe_on_a_request);
    let probe = c.probe(leader).unwrap();
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, probe);
    // A request claiming an echo of probes never sent confirms none of them,
    // then or once they are sent.
    let node = c.nodes.get_mut(&others[0]).unwrap();
    assert!(node.peer.forward(Bytes::from_static(b"request")));
    c.drain(others[0]);
    c.deliver_all();
    assert_eq!(c.nodes[&leader].confirmed, probe, "an inflated echo counts for the probe sent, no more");
    c.cut.push((others[0], leader));
    let next = c.probe(leader).unwrap();
    c.deliver_all();
    // Asking again makes the leader count its echoes again.
    c.probe(leader);
    assert!(c.nodes[&leader].confirmed < next, "confirmed by an echo claimed before the probe was sent");
}
