//! Linearizable reads (`read_index`) through whole replicas: a read asked
//! for as linearizable sees every write acknowledged before it was sent, on
//! a lagging follower and on a leader that was paused and deposed, where a
//! plain read of the same member is stale; and the reads waiting together
//! share one round to the leader, which needs no probe where the leader
//! and the asking follower are a quorum.

use super::harness::*;
use super::*;
use crate::op::Reply;
use std::collections::{BTreeMap, BTreeSet};

/// The reply to `xid` among `msgs`.
fn reply_to(msgs: &[ClientMessage], xid: i32) -> Option<Reply> {
    msgs.iter().find_map(|m| match m {
        ClientMessage::Reply { xid: x, reply, .. } if *x == xid => Some(reply.clone()),
        _ => None,
    })
}

/// Read-index rounds a follower has asked of the leader and are held on `link`.
fn rounds_held(e: &Ensemble, from: ServerId, to: ServerId) -> usize {
    e.held_msgs
        .iter()
        .filter(|(f, t, m)| {
            (*f, *t) == (from, to)
                && matches!(m, Message::Forward { payload, .. }
                    if matches!(forward::decode(payload), Ok(forward::ToLeader::ReadIndex { .. })))
        })
        .count()
}

#[test]
fn a_linearizable_read_on_a_lagging_follower_sees_every_acknowledged_write() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (lagging, other) = followers_of(leader);
    let (reader, _, _) = e.connect(lagging);
    let (writer, _, _) = e.connect(other);
    // The leader's messages to the lagging follower are slow.
    e.hold_link(leader, lagging);
    e.call(writer, create("/after", CreateMode::Persistent)).expect("acknowledged by the leader and the other");
    let plain = e.call(reader, get("/after", false));
    assert_eq!(plain.map_err(|e| e.code), Err(ErrorCode::NoNode), "a plain read there is stale");

    let read = e.send_with(reader, get("/after", false), true);
    e.deliver();
    assert!(reply_to(&e.take(reader), read).is_none(), "not answered before the leader's answer arrives");
    assert_eq!(e.nodes[&lagging].replica.pending_linearizable_reads(), 1);
    let (in_flight, answered) = e.nodes[&lagging].replica.read_index_round();
    assert!(in_flight.is_some(), "its round is out, held with the leader's messages");
    e.release_link(leader, lagging);
    let msgs = e.take(reader);
    let reply = reply_to(&msgs, read).expect("answered once the leader's answer and commits arrived");
    assert!(reply.is_ok(), "the linearizable read sees /after: {reply:?}");
    assert_eq!(e.nodes[&lagging].replica.pending_linearizable_reads(), 0);
    assert_eq!(
        e.nodes[&lagging].replica.read_index_round(),
        (None, answered + 1),
        "the round was answered, and none is out"
    );
}

/// The story of `a_resumed_leader_answers_a_sync_only_once_a_quorum_confirms_it_still_leads`,
/// for reads: the paused leader's plain read is stale; its linearizable read
/// is answered with the newer write or not at all (the connection closes).
#[test]
fn a_deposed_leader_never_answers_a_linearizable_read_with_stale_data() {
    let mut e = Ensemble::new(3);
    let (old, on_old) = e.depose_paused_leader("/after");

    let plain = e.send(on_old, get("/after", false));
    let linearizable = e.send_with(on_old, get("/after", false), true);
    let stale = reply_to(&e.take(on_old), plain).expect("a plain read is answered at once");
    assert_eq!(stale.map_err(|e| e.code), Err(ErrorCode::NoNode), "from the deposed leader's old tree");
    e.release(old);
    for _ in 0..30 {
        e.tick();
    }
    let msgs = e.take(on_old);
    match reply_to(&msgs, linearizable) {
        Some(r) => assert!(r.is_ok(), "a linearizable read missed /after: {r:?}"),
        None => assert!(
            msgs.iter().any(|m| matches!(m, ClientMessage::Close { error: ErrorCode::ConnectionLoss, .. })),
            "neither answered nor closed: {msgs:?}"
        ),
    }
    assert_ne!(e.nodes[&old].replica.status().role, Role::Leading, "the old leader stepped down");
}

#[test]
fn reads_waiting_together_share_one_round_to_the_leader() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, _) = followers_of(leader);
    let clients: Vec<ConnId> = (0..3).map(|_| e.connect(follower).0).collect();
    e.call(clients[0], create("/x", CreateMode::Persistent)).unwrap();
    e.hold_link(follower, leader);
    let first = e.send_with(clients[0], get("/x", false), true);
    let later: Vec<(ConnId, i32)> =
        clients.iter().map(|&c| (c, e.send_with(c, Op::Exists { path: "/x".into(), watch: false }, true))).collect();
    e.deliver();
    assert_eq!(rounds_held(&e, follower, leader), 1, "one round in flight; the later reads wait for the next");
    e.release_link(follower, leader);
    for _ in 0..3 {
        e.tick();
    }
    let inboxes: BTreeMap<ConnId, Vec<ClientMessage>> = clients.iter().map(|&c| (c, e.take(c))).collect();
    assert!(reply_to(&inboxes[&clients[0]], first).is_some_and(|r| r.is_ok()));
    for (c, xid) in later {
        assert!(reply_to(&inboxes[&c], xid).is_some_and(|r| r.is_ok()), "every read is answered");
    }
    assert_eq!(e.nodes[&follower].replica.pending_linearizable_reads(), 0);
}

#[test]
fn reads_arriving_in_one_turn_ride_one_round_together() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, _) = followers_of(leader);
    let clients: Vec<ConnId> = (0..3).map(|_| e.connect(follower).0).collect();
    e.call(clients[0], create("/t", CreateMode::Persistent)).unwrap();
    e.hold_link(follower, leader);
    e.hold_link(leader, follower);
    let xids = e.send_together(clients.iter().map(|&c| (c, get("/t", false))).collect());
    e.deliver();
    assert_eq!(rounds_held(&e, follower, leader), 1, "one round for the turn");
    // The round reaches the leader; its answer waits on the way back, and
    // any further round the follower asks is held where it can be counted.
    e.release_link(follower, leader);
    e.hold_link(follower, leader);
    e.release_link(leader, follower);
    assert_eq!(rounds_held(&e, follower, leader), 0, "no second round: the turn's reads were all in the first");
    for (&c, xid) in clients.iter().zip(xids) {
        assert!(reply_to(&e.take(c), xid).is_some_and(|r| r.is_ok()), "answered by the one round");
    }
    assert_eq!(e.nodes[&follower].replica.pending_linearizable_reads(), 0);
    let counters = e.nodes[&follower].replica.counters();
    assert_eq!((counters.linearizable_reads, counters.read_index_rounds), (3, 1), "three reads, one round");
}

#[test]
fn the_leader_keeps_one_probe_in_flight_for_reads() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (f1, f2) = followers_of(leader);
    let clients: Vec<ConnId> = (0..3).map(|_| e.connect(leader).0).collect();
    e.call(clients[0], create("/p", CreateMode::Persistent)).unwrap();
    e.hold_link(leader, f1);
    e.hold_link(leader, f2);
    let reads: Vec<(ConnId, i32)> = clients.iter().map(|&c| (c, e.send_with(c, get("/p", false), true))).collect();
    e.deliver();
    let probes = probes_held(&e, leader);
    assert_eq!(probes.len(), 1, "reads arriving while a probe is out wait for the next: {probes:?}");
    e.release_link(leader, f1);
    e.release_link(leader, f2);
    for _ in 0..3 {
        e.tick();
    }
    for (c, xid) in reads {
        assert!(reply_to(&e.take(c), xid).is_some_and(|r| r.is_ok()), "every read is answered");
    }
    assert_eq!(e.nodes[&leader].replica.pending_linearizable_reads(), 0);
}

#[test]
fn reads_arriving_at_the_leader_in_one_turn_share_one_probe() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (f1, f2) = followers_of(leader);
    let clients: Vec<ConnId> = (0..3).map(|_| e.connect(leader).0).collect();
    e.call(clients[0], create("/s", CreateMode::Persistent)).unwrap();
    for (from, to) in [(leader, f1), (leader, f2), (f1, leader), (f2, leader)] {
        e.hold_link(from, to);
    }
    let xids = e.send_together(clients.iter().map(|&c| (c, get("/s", false))).collect());
    e.deliver();
    assert_eq!(probes_held(&e, leader).len(), 1, "one probe for the turn");
    // The probe reaches the followers; their echoes come back while any
    // further probe the leader sends is held where it can be counted.
    e.release_link(leader, f1);
    e.release_link(leader, f2);
    e.hold_link(leader, f1);
    e.hold_link(leader, f2);
    e.release_link(f1, leader);
    assert!(probes_held(&e, leader).is_empty(), "no second probe: the turn's reads were all in the first");
    for (&c, xid) in clients.iter().zip(xids) {
        assert!(reply_to(&e.take(c), xid).is_some_and(|r| r.is_ok()), "answered by the one probe");
    }
    assert_eq!(e.nodes[&leader].replica.pending_linearizable_reads(), 0);
    let counters = e.nodes[&leader].replica.counters();
    assert_eq!((counters.linearizable_reads, counters.read_index_rounds), (3, 1), "three reads, one probe");
}

/// The leader's probe for its own read rides on its answer to a follower's
/// round in the same turn, and the follower's echo on its next round: the
/// read is confirmed with no PING to or from that follower.
#[test]
fn a_leaders_read_is_confirmed_on_a_followers_rounds_with_no_ping_between_them() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (f1, f2) = followers_of(leader);
    let on_leader = e.connect(leader).0;
    let (first, second) = (e.connect(f1).0, e.connect(f1).0);
    e.call(on_leader, create("/r", CreateMode::Persistent)).unwrap();
    for link in [(leader, f1), (f1, leader), (leader, f2), (f2, leader)] {
        e.hold_link(link.0, link.1);
    }
    let read_on_f1 = e.send_with(first, get("/r", false), true);
    e.deliver();
    assert_eq!(rounds_held(&e, f1, leader), 1);
    // One turn of the leader: the follower's round, then a read of its own.
    let at = e.held_msgs.iter().position(|(f, t, _)| (*f, *t) == (f1, leader)).unwrap();
    let (_, _, round) = e.held_msgs.remove(at).unwrap();
    e.xid += 1;
    let read_on_leader = e.xid;
    let node = &mut e.nodes.get_mut(&leader).unwrap().replica;
    node.handle(Input::Peer { from: f1, msg: round });
    let op = get("/r", false);
    node.handle(Input::Request { conn: on_leader, xid: read_on_leader, echo: Echo::default(), op, linearizable: true });
    e.drain(leader);
    e.deliver();
    let to_f1: Vec<&Message> = e.held_msgs.iter().filter(|(f, t, _)| (*f, *t) == (leader, f1)).map(|m| &m.2).collect();
    let [Message::Reply { probe, .. }] = to_f1[..] else { panic!("one REPLY to {f1} and nothing else: {to_f1:?}") };
    let probe = *probe;
    assert!(probe > 0, "the turn's probe rides on the answer to the round");
    // A second read on the follower waits for the next round, which carries the echo.
    let read_after = e.send_with(second, get("/r", false), true);
    e.release_link(leader, f1);
    e.hold_link(leader, f1);
    assert!(reply_to(&e.take(first), read_on_f1).is_some_and(|r| r.is_ok()));
    let from_f1: Vec<&Message> =
        e.held_msgs.iter().filter(|(f, t, _)| (*f, *t) == (f1, leader)).map(|m| &m.2).collect();
    let [Message::Forward { probe: echo, .. }] = from_f1[..] else { panic!("one REQUEST to the leader: {from_f1:?}") };
    assert_eq!(*echo, probe, "the next round echoes the probe");
    assert!(reply_to(&e.take(on_leader), read_on_leader).is_none(), "not confirmed before the echo arrives");
    e.release_link(f1, leader);
    e.release_link(leader, f1);
    assert!(reply_to(&e.take(on_leader), read_on_leader).is_some_and(|r| r.is_ok()), "confirmed by the echo");
    assert!(reply_to(&e.take(second), read_after).is_some_and(|r| r.is_ok()));
    e.release_link(leader, f2);
    e.release_link(f2, leader);
}

/// The probes the leader sent that are held on its links.
fn probes_held(e: &Ensemble, leader: ServerId) -> BTreeSet<u64> {
    e.held_msgs
        .iter()
        .filter_map(|(f, _, m)| match m {
            Message::Ping { probe, .. } if *f == leader => Some(*probe),
            _ => None,
        })
        .collect()
}

#[test]
fn with_three_voters_a_follower_round_needs_no_probe() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, other) = followers_of(leader);
    let (reader, _, _) = e.connect(follower);
    e.call(reader, create("/q", CreateMode::Persistent)).unwrap();
    // The other follower hears nothing from the leader: the leader and the
    // asking follower must be enough.
    e.hold_link(leader, other);
    let read = e.send_with(reader, get("/q", false), true);
    e.deliver();
    let reply = reply_to(&e.take(reader), read).expect("answered without the other follower");
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(probes_held(&e, leader).into_iter().filter(|p| *p > 0).count(), 0, "no probe was sent");
    e.release_link(leader, other);
}

#[test]
fn with_three_voters_a_follower_sync_needs_no_probe() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, other) = followers_of(leader);
    let (c, _, _) = e.connect(follower);
    e.call(c, create("/s", CreateMode::Persistent)).unwrap();
    e.hold_link(leader, other);
    let sync = e.send(c, Op::Sync { path: "/".into() });
    e.deliver();
    let reply = reply_to(&e.take(c), sync).expect("answered without the other follower");
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(probes_held(&e, leader).into_iter().filter(|p| *p > 0).count(), 0, "no probe was sent");
    e.release_link(leader, other);
}

#[test]
fn with_five_voters_a_follower_round_still_waits_for_a_probe() {
    let mut e = Ensemble::new(5);
    let leader = e.leader();
    let follower = (1..=5).find(|&id| id != leader).expect("five members");
    let (reader, _, _) = e.connect(follower);
    e.call(reader, create("/q", CreateMode::Persistent)).unwrap();
    let others: Vec<ServerId> = (1..=5).filter(|&id| id != leader && id != follower).collect();
    for &o in &others {
        e.hold_link(leader, o);
    }
    let read = e.send_with(reader, get("/q", false), true);
    e.deliver();
    assert!(reply_to(&e.take(reader), read).is_none(), "the leader and one follower are not a quorum of five");
    assert!(probes_held(&e, leader).into_iter().any(|p| p > 0), "a probe went out to the others");
    for &o in &others {
        e.release_link(leader, o);
    }
    for _ in 0..3 {
        e.tick();
    }
    assert!(reply_to(&e.take(reader), read).is_some_and(|r| r.is_ok()), "answered once a quorum echoed");
}

#[test]
fn linearizable_reads_on_the_leader_and_everywhere_by_configuration() {
    let mut e = Ensemble::new_with(3, |c| c.linearizable_reads = true);
    let leader = e.leader();
    let (follower, _) = followers_of(leader);
    let (on_leader, _, _) = e.connect(leader);
    let (on_follower, _, _) = e.connect(follower);
    e.call(on_follower, create("/y", CreateMode::Persistent)).unwrap();
    // Plain requests: the member's setting makes them linearizable.
    assert!(e.call(on_leader, get("/y", false)).is_ok());
    assert!(e.call(on_follower, get("/y", false)).is_ok());
    // A lone member confirms itself: no round trip to wait for.
    let mut single = Ensemble::new_with(1, |c| c.linearizable_reads = true);
    let (c, _, _) = single.connect(1);
    single.call(c, create("/z", CreateMode::Persistent)).unwrap();
    assert!(single.call(c, get("/z", false)).is_ok());
}

/// `read_index_due` tells the host when reads wait for a round or probe that
/// the end of its turn would ask (it then lets more reads join first), and
/// is false while the one in flight is out: reads arriving then wait for it.
#[test]
fn read_index_due_names_a_round_or_probe_the_turn_would_ask() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, _) = followers_of(leader);
    let on_follower = e.connect(follower).0;
    let on_leader = e.connect(leader).0;
    e.call(on_follower, create("/d", CreateMode::Persistent)).unwrap();
    e.hold_link(follower, leader);
    let request =
        |conn, xid| Input::Request { conn, xid, echo: Echo::default(), op: get("/d", false), linearizable: true };

    assert!(!e.nodes[&follower].replica.read_index_due(), "no read waits");
    e.nodes.get_mut(&follower).unwrap().replica.handle(request(on_follower, 9001));
    assert!(e.nodes[&follower].replica.read_index_due(), "a read waits for the round the turn asks");
    e.drain(follower);
    e.deliver();
    assert_eq!(rounds_held(&e, follower, leader), 1);
    assert!(!e.nodes[&follower].replica.read_index_due(), "the round is out");
    e.nodes.get_mut(&follower).unwrap().replica.handle(request(on_follower, 9002));
    assert!(!e.nodes[&follower].replica.read_index_due(), "a later read waits for the round out to return");

    assert!(!e.nodes[&leader].replica.read_index_due());
    e.nodes.get_mut(&leader).unwrap().replica.handle(request(on_leader, 9003));
    assert!(e.nodes[&leader].replica.read_index_due(), "a leader's read waits for the probe the turn asks");
    e.drain(leader);
    assert!(!e.nodes[&leader].replica.read_index_due(), "the probe is asked");

    e.release_link(follower, leader);
    for _ in 0..3 {
        e.tick();
    }
    let answered = e.take(on_follower);
    for xid in [9001, 9002] {
        assert!(reply_to(&answered, xid).is_some_and(|r| r.is_ok()), "read {xid} answered");
    }
    assert!(reply_to(&e.take(on_leader), 9003).is_some_and(|r| r.is_ok()));
    assert!(!e.nodes[&follower].replica.read_index_due() && !e.nodes[&leader].replica.read_index_due());
}
