//! Client-visible stories through whole replicas, on the harness in
//! `harness` (a FIFO network, storage that is durable at once, scripted
//! clients). The randomized search with faults lives in `sim`.

mod harness;
mod linearizable;

use super::*;
use crate::acl::Acl;
use crate::error::ErrorCode;
use crate::ids::Zxid;
use crate::op::{Op, OpResult};
use crate::tree::stat::CreateMode;
use crate::tree::watch::EventType;
use bytes::Bytes;
use harness::*;

#[test]
fn single_replica_serves_reads_and_writes() {
    let mut e = Ensemble::new(1);
    let (c, _, _) = e.connect(1);
    let created = e.call(c, create("/a", CreateMode::Persistent)).unwrap();
    assert!(matches!(created, OpResult::Created { ref path, .. } if path == "/a"));
    let Ok(OpResult::Data { data, stat }) = e.call(c, get("/a", false)) else { panic!() };
    assert_eq!(&data[..], b"v");
    assert_eq!(stat.version, 0);
    assert_eq!(e.call(c, create("/a", CreateMode::Persistent)).unwrap_err().code, ErrorCode::NodeExists);
    assert_eq!(e.call(c, get("/missing", false)).unwrap_err().code, ErrorCode::NoNode);
}

#[test]
fn outputs_handed_back_full_come_back_without_what_they_held() {
    let mut e = Ensemble::new(1);
    let replica = &mut e.nodes.get_mut(&1).expect("member 1").replica;
    let stale = Output::Status(replica.status());
    replica.recycle_outputs(vec![stale]);
    let outputs = replica.take_outputs();
    assert!(outputs.is_empty(), "a settled member has nothing to do: {outputs:?}");
}

#[test]
fn writes_through_a_follower_reach_every_replica() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    let (c, _, _) = e.connect(follower);
    e.call(c, create("/x", CreateMode::Persistent)).unwrap();
    e.settle(2);
    for node in e.nodes.values() {
        assert!(node.replica.tree().state().node("/x").is_some());
    }
}

#[test]
fn watch_event_precedes_the_reply_of_a_later_read() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    let (watcher, _, _) = e.connect(follower);
    let (writer, _, _) = e.connect(leader);
    e.call(writer, create("/w", CreateMode::Persistent)).unwrap();
    e.settle(1);
    e.call(watcher, get("/w", true)).unwrap();
    e.call(writer, Op::SetData { path: "/w".into(), data: Bytes::from_static(b"2").into(), version: -1 }).unwrap();
    e.settle(1);
    let xid = e.send(watcher, get("/w", false));
    e.settle(1);
    let msgs = e.take(watcher);
    let event =
        msgs.iter().position(|m| matches!(m, ClientMessage::Event(ev) if ev.event_type == EventType::NodeDataChanged));
    let reply = msgs.iter().position(|m| matches!(m, ClientMessage::Reply { xid: x, .. } if *x == xid));
    assert!(event.unwrap() < reply.unwrap(), "{msgs:?}");
    // One-shot: a second change does not fire again.
    e.call(writer, Op::SetData { path: "/w".into(), data: Bytes::new().into(), version: -1 }).unwrap();
    e.settle(1);
    assert!(!e.take(watcher).iter().any(|m| matches!(m, ClientMessage::Event(_))));
}

#[test]
fn session_reads_never_run_ahead_of_its_own_writes() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    let (c, _, _) = e.connect(follower);
    // Pipeline a write and a read without waiting: the read must see the write.
    let w = e.send(c, create("/fifo", CreateMode::Persistent));
    let r = e.send(c, get("/fifo", false));
    e.settle(2);
    let msgs = e.take(c);
    let replies: Vec<(i32, bool)> = msgs
        .iter()
        .filter_map(|m| match m {
            ClientMessage::Reply { xid, reply, .. } => Some((*xid, reply.is_ok())),
            _ => None,
        })
        .collect();
    assert_eq!(replies, vec![(w, true), (r, true)]);
}

#[test]
fn ephemerals_go_with_a_closed_session_and_an_expired_one() {
    let mut e = Ensemble::new(3);
    let (a, _, _) = e.connect(1);
    let (b, _, _) = e.connect(2);
    let (observer, _, _) = e.connect(3);
    e.call(a, create("/ea", CreateMode::Ephemeral)).unwrap();
    e.call(b, create("/eb", CreateMode::Ephemeral)).unwrap();
    e.call(a, Op::CloseSession).unwrap();
    e.settle(1);
    assert_eq!(e.call(observer, Op::Exists { path: "/ea".into(), watch: false }).unwrap_err().code, ErrorCode::NoNode);
    // b's client vanishes without closing: its session expires (timeout 1000 ms = 10 ticks).
    let node_b = e.conn_node[&b];
    e.nodes.get_mut(&node_b).unwrap().replica.handle(Input::Disconnect { conn: b });
    e.drain(node_b);
    assert!(e.call(observer, Op::Exists { path: "/eb".into(), watch: false }).is_ok());
    for _ in 0..15 {
        e.call(observer, Op::Ping).unwrap();
        e.tick();
    }
    assert_eq!(e.call(observer, Op::Exists { path: "/eb".into(), watch: false }).unwrap_err().code, ErrorCode::NoNode);
}

#[test]
fn session_resumes_on_another_replica_with_its_password() {
    let mut e = Ensemble::new(3);
    let (c, session, password) = e.connect(1);
    e.call(c, create("/r", CreateMode::Ephemeral)).unwrap();
    let zxid = e.nodes[&1].replica.tree().last_zxid();
    let bad = ConnectRequest {
        session_id: session.0,
        password: Bytes::from_static(b"wrong"),
        timeout_ms: 1000,
        last_zxid_seen: 0,
    };
    let c2 = e.connect_with(2, bad);
    assert!(matches!(e.take(c2).first(), Some(ClientMessage::ConnectFailed { error: ErrorCode::SessionExpired, .. })));
    let good = ConnectRequest { session_id: session.0, password, timeout_ms: 1000, last_zxid_seen: zxid.as_i64() };
    let c3 = e.connect_with(3, good);
    assert!(matches!(e.take(c3).first(), Some(ClientMessage::Connected { session: s, .. }) if *s == session));
    // The ephemeral still belongs to the session, which now lives on replica 3.
    assert_eq!(e.call(c3, Op::GetEphemerals { prefix: "/".into() }).unwrap(), OpResult::Paths(vec!["/r".into()]));
}

#[test]
fn sync_makes_a_follower_catch_up() {
    let mut e = Ensemble::new(3);
    let (c, _, _) = e.connect(1);
    assert!(matches!(e.call(c, Op::Sync { path: "/".into() }), Ok(OpResult::Synced(p)) if p == "/"));
}

/// A lone member is a quorum by itself: every sync and linearizable read is
/// answered, not only the first (a probe confirmed once was handed out again
/// and never confirmed a second time).
#[test]
fn a_lone_member_answers_every_sync_and_linearizable_read() {
    let mut e = Ensemble::new(1);
    let (c, _, _) = e.connect(1);
    for round in 0..3 {
        let sync = e.call(c, Op::Sync { path: "/".into() });
        assert!(matches!(sync, Ok(OpResult::Synced(ref p)) if p == "/"), "sync {round}: {sync:?}");
        let xid = e.send_with(c, get("/", false), true);
        let answered =
            e.take(c).iter().any(|m| matches!(m, ClientMessage::Reply { xid: x, reply: Ok(_), .. } if *x == xid));
        assert!(answered, "linearizable read {round} answered");
    }
}

/// A leader paused (SIGSTOP) past syncLimit still believes it leads when it
/// resumes, while the others have elected a leader and committed writes.
/// A sync it answers from its own log alone would let a read miss them: it
/// must first hear from a quorum that it still leads.
#[test]
fn a_resumed_leader_answers_a_sync_only_once_a_quorum_confirms_it_still_leads() {
    let mut e = Ensemble::new(3);
    let (old, on_old) = e.depose_paused_leader("/after");

    let sync = e.send(on_old, Op::Sync { path: "/".into() });
    let read = e.send(on_old, get("/after", false));
    e.release(old);
    for _ in 0..30 {
        e.tick();
    }
    let msgs = e.take(on_old);
    let reply = |xid: i32| {
        msgs.iter().find_map(|m| match m {
            ClientMessage::Reply { xid: x, reply, .. } if *x == xid => Some(reply.clone()),
            _ => None,
        })
    };
    match (reply(sync), reply(read)) {
        // Answered after all: then the read must see the newer write.
        (Some(Ok(_)), Some(r)) => {
            assert!(r.is_ok(), "a sync answered by a deposed leader let a read miss /after: {r:?}")
        }
        // Not answered: the old leader stepped down and closed the connection.
        (None, None) => assert!(
            msgs.iter().any(|m| matches!(m, ClientMessage::Close { error: ErrorCode::ConnectionLoss, .. })),
            "neither answered nor closed: {msgs:?}"
        ),
        other => panic!("unexpected replies {other:?} in {msgs:?}"),
    }
    assert_ne!(e.nodes[&old].replica.status().role, Role::Leading, "the old leader stepped down");
}

#[test]
fn leader_failover_keeps_acknowledged_writes() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let (c, _, _) = e.connect(survivor);
    e.call(c, create("/durable", CreateMode::Persistent)).unwrap();
    e.crash(leader);
    e.settle(20);
    let new_leader = e.leader();
    assert_ne!(new_leader, leader);
    let (c2, _, _) = e.connect(survivor);
    assert!(e.call(c2, get("/durable", false)).is_ok());
}

#[test]
fn invalid_requests_get_precise_errors_in_order() {
    let mut e = Ensemble::new(1);
    let (c, _, _) = e.connect(1);
    let bad_path = e.call(c, create("no-slash", CreateMode::Persistent)).unwrap_err();
    assert_eq!(bad_path.code, ErrorCode::BadArguments);
    assert!(bad_path.reason.contains("must start with /"), "{bad_path}");
    let big = Op::SetData { path: "/".into(), data: Bytes::from(vec![0; 2 << 20]).into(), version: -1 };
    let too_big = e.call(c, big).unwrap_err();
    assert!(too_big.reason.contains("over the limit"), "{too_big}");
    assert_eq!(
        e.call(c, Op::Auth { scheme: "nosuch".into(), auth: Bytes::new() }).unwrap_err().code,
        ErrorCode::AuthFailed
    );
    assert_eq!(
        e.call(c, Op::RemoveWatches { path: "/".into(), kind: crate::tree::watch::WatcherType::Any }).unwrap_err().code,
        ErrorCode::NoWatcher
    );
}

#[test]
fn containers_are_reaped_once_their_last_child_goes() {
    let mut e = Ensemble::new(3);
    let (c, _, _) = e.connect(1);
    e.call(c, create("/box", CreateMode::Container)).unwrap();
    e.call(c, create("/box/item", CreateMode::Persistent)).unwrap();
    // Never-used containers stay (ZooKeeper's default); with a child, too.
    e.idle(c, 25);
    assert!(e.call(c, Op::Exists { path: "/box".into(), watch: false }).is_ok());
    e.call(c, Op::Delete { path: "/box/item".into(), version: -1 }).unwrap();
    e.idle(c, 25);
    assert_eq!(e.call(c, Op::Exists { path: "/box".into(), watch: false }).unwrap_err().code, ErrorCode::NoNode);
    let empty_container = create("/never-used", CreateMode::Container);
    e.call(c, empty_container).unwrap();
    e.idle(c, 25);
    assert!(e.call(c, Op::Exists { path: "/never-used".into(), watch: false }).is_ok());
}

#[test]
fn ttl_nodes_expire_after_their_ttl_without_children() {
    let mut e = Ensemble::new(3);
    let (c, _, _) = e.connect(2);
    let ttl = |path: &str, ttl_ms| Op::Create {
        path: path.into(),
        data: Bytes::new().into(),
        acl: Acl::open_unsafe(),
        mode: CreateMode::PersistentWithTtl,
        ttl_ms,
    };
    e.call(c, ttl("/short", 500)).unwrap();
    e.call(c, ttl("/parent", 500)).unwrap();
    e.call(c, create("/parent/child", CreateMode::Persistent)).unwrap();
    e.call(c, ttl("/long", 60_000)).unwrap();
    e.idle(c, 30); // 3 s of ticks
    let exists = |e: &mut Ensemble, p: &str| e.call(c, Op::Exists { path: p.into(), watch: false }).is_ok();
    assert!(!exists(&mut e, "/short"), "expired");
    assert!(exists(&mut e, "/parent"), "kept while it has a child");
    assert!(exists(&mut e, "/long"));
}

#[test]
fn malformed_read_paths_answer_as_zookeeper() {
    use crate::tree::watch::{AddWatchMode, WatcherType};
    let mut e = Ensemble::new(1);
    let (c, _, _) = e.connect(1);
    e.call(c, create("/a", CreateMode::Persistent)).unwrap();
    // ZooKeeper does not validate read paths: a malformed one names no node.
    for path in ["/a/", "relative", "/a//b", "/a/."] {
        assert_eq!(e.call(c, get(path, false)).unwrap_err().code, ErrorCode::NoNode, "getData {path}");
        let exists = Op::Exists { path: path.into(), watch: false };
        assert_eq!(e.call(c, exists).unwrap_err().code, ErrorCode::NoNode, "exists {path}");
        let children = Op::GetChildren { path: path.into(), watch: false, with_stat: true };
        assert_eq!(e.call(c, children).unwrap_err().code, ErrorCode::NoNode, "getChildren {path}");
        let check = Op::CheckWatches { path: path.into(), kind: WatcherType::Any };
        assert_eq!(e.call(c, check).unwrap_err().code, ErrorCode::NoWatcher, "checkWatches {path}");
    }
    // The empty path reads the root, as ZooKeeper's tree keys it under "" too.
    let Ok(OpResult::Data { stat, .. }) = e.call(c, get("", false)) else { panic!("getData of \"\"") };
    let Ok(OpResult::Data { stat: root, .. }) = e.call(c, get("/", false)) else { panic!("getData /") };
    assert_eq!(stat, root);
    let children = e.call(c, Op::GetChildren { path: "".into(), watch: false, with_stat: false });
    assert!(
        matches!(children, Ok(OpResult::Children { ref children, .. }) if children.contains(&"a".to_string())),
        "{children:?}"
    );
    assert!(matches!(e.call(c, Op::Exists { path: "".into(), watch: false }), Ok(OpResult::Stat(_))));
    // exists alone refuses a NUL character.
    let nul = Op::Exists { path: "/a\0".into(), watch: false };
    assert_eq!(e.call(c, nul).unwrap_err().code, ErrorCode::BadArguments);
    assert_eq!(e.call(c, get("/a\0", false)).unwrap_err().code, ErrorCode::NoNode);
    // addWatch registers whatever path it is given, and removeWatches finds it.
    assert!(e.call(c, Op::AddWatch { path: "/a/".into(), mode: AddWatchMode::Persistent }).is_ok());
    assert!(e.call(c, Op::RemoveWatches { path: "/a/".into(), kind: WatcherType::Persistent }).is_ok());
}

#[test]
fn a_lagging_follower_revalidates_a_reattaching_session_with_the_leader() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (a, b) = followers_of(leader);
    // `b` lags: it has not applied the session's creation when the client,
    // which saw no zxid yet, reattaches there. ZooKeeper's learner asks the
    // leader; refusing it as expired would kill a live session.
    e.hold(b);
    let (_, session, password) = e.connect(a);
    let resume =
        |password: Bytes| ConnectRequest { session_id: session.0, password, timeout_ms: 1000, last_zxid_seen: 0 };
    let c = e.connect_with(b, resume(password.clone()));
    assert!(e.take(c).is_empty(), "decided before the leader answered");
    e.release(b);
    assert!(
        matches!(e.take(c).first(), Some(ClientMessage::Connected { session: s, .. }) if *s == session),
        "the live session is refused on a lagging follower"
    );
    // And the other way: closed on the leader, not yet applied by `b`.
    let c2 = e.connect_with(a, resume(password.clone()));
    assert!(matches!(e.take(c2).first(), Some(ClientMessage::Connected { .. })));
    e.hold(b);
    assert_eq!(e.call(c2, Op::CloseSession), Ok(OpResult::Empty));
    let c3 = e.connect_with(b, resume(password));
    assert!(e.take(c3).is_empty(), "decided before the leader answered");
    e.release(b);
    assert!(
        matches!(e.take(c3).first(), Some(ClientMessage::ConnectFailed { error: ErrorCode::SessionExpired, .. })),
        "a closed session is accepted on a lagging follower"
    );
}

#[test]
fn a_write_left_in_flight_on_the_old_member_is_fenced_once_the_session_moves() {
    // The client writes through `a`; the write is slow to reach the leader;
    // the client moves to `b` and writes again. Applying the old write after
    // the new one would break FIFO order for the session (the newer value
    // overwritten by the older). ZooKeeper's leader refuses requests from a
    // member that no longer owns the session with SESSIONMOVED.
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (a, b) = followers_of(leader);
    let (old, session, password) = e.connect(a);
    e.call(old, create("/n", CreateMode::Persistent)).unwrap();
    e.hold_link(a, leader);
    let set =
        |data: &'static [u8]| Op::SetData { path: "/n".into(), data: Bytes::from_static(data).into(), version: -1 };
    let stale = e.send(old, set(b"old"));
    let resume = ConnectRequest { session_id: session.0, password, timeout_ms: 1000, last_zxid_seen: 0 };
    let moved = e.connect_with(b, resume);
    assert!(matches!(e.take(moved).first(), Some(ClientMessage::Connected { .. })), "the session moves to b");
    e.call(moved, set(b"new")).unwrap();
    e.release_link(a, leader);
    e.settle(2);
    for (id, node) in &e.nodes {
        let data = &node.replica.tree().state().node("/n").expect("/n").data();
        assert_eq!(&data[..], b"new", "member {id}: the session's older write was applied after its newer one");
    }
    let answer = e.take(old);
    assert!(
        answer.iter().any(|m| matches!(m, ClientMessage::Reply { xid, reply: Err(err), .. }
            if *xid == stale && err.code == ErrorCode::SessionMoved)),
        "the old connection's write is answered SessionMoved: {answer:?}"
    );
    assert!(
        matches!(answer.last(), Some(ClientMessage::Close { error: ErrorCode::SessionMoved, .. })),
        "and the old connection is closed, as ZooKeeper closes it: {answer:?}"
    );
}

/// Found by a soak seed of the simulation: a client gave up on a connect to
/// `b` that was slow to revalidate and resumed its session on `a`; the
/// revalidation reached the leader afterwards and moved the session to `b`.
/// Every write on `a` was then refused SessionMoved on a connection that
/// stayed open, for ever. Closed instead, the client reconnects and its
/// writes go through.
#[test]
fn a_connection_fenced_by_a_connect_given_up_on_closes_and_its_session_resumes() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (a, b) = followers_of(leader);
    let (first, session, password) = e.connect(a);
    e.call(first, create("/n", CreateMode::Persistent)).unwrap();
    let resume =
        || ConnectRequest { session_id: session.0, password: password.clone(), timeout_ms: 1000, last_zxid_seen: 0 };
    e.hold_link(b, leader);
    let given_up = e.connect_with(b, resume());
    assert!(e.take(given_up).is_empty(), "b waits for the leader to revalidate the session");
    let used = e.connect_with(a, resume());
    assert!(matches!(e.take(used).first(), Some(ClientMessage::Connected { .. })));
    e.release_link(b, leader);
    e.settle(2);
    let set = Op::SetData { path: "/n".into(), data: Bytes::from_static(b"x").into(), version: -1 };
    let xid = e.send(used, set.clone());
    e.settle(2);
    let answer = e.take(used);
    assert!(
        matches!(answer.as_slice(), [.., ClientMessage::Reply { xid: x, reply: Err(err), .. }, ClientMessage::Close { error: ErrorCode::SessionMoved, .. }]
            if *x == xid && err.code == ErrorCode::SessionMoved),
        "refused, then closed: {answer:?}"
    );
    let again = e.connect_with(a, resume());
    assert!(matches!(e.take(again).first(), Some(ClientMessage::Connected { .. })));
    assert!(e.call(again, set).is_ok(), "the reconnected session writes again");
}

fn new_session_request() -> ConnectRequest {
    ConnectRequest { session_id: 0, password: Bytes::new(), timeout_ms: 1000, last_zxid_seen: 0 }
}

#[test]
fn a_connect_during_an_election_waits_and_is_attached_once_the_replica_serves() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    e.crash(leader);
    assert!(!e.nodes[&survivor].replica.status().serving);
    let conn = e.connect_with(survivor, new_session_request());
    assert_eq!(e.take(conn), vec![], "neither refused nor attached while the election runs");
    let mut answer = Vec::new();
    for _ in 0..10 {
        e.tick();
        answer = e.take(conn);
        if !answer.is_empty() {
            break;
        }
    }
    assert!(matches!(answer.first(), Some(ClientMessage::Connected { .. })), "{answer:?}");
    assert!(e.nodes[&survivor].replica.status().serving);
    e.call(conn, create("/after-election", CreateMode::Persistent)).unwrap();
}

#[test]
fn without_a_quorum_a_waiting_connect_is_refused_after_the_catch_up_time() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != survivor).unwrap();
    e.crash(other);
    e.crash(leader);
    let conn = e.connect_with(survivor, new_session_request());
    let wait = e.nodes[&survivor].replica.config().catch_up_ticks;
    for _ in 0..wait - 1 {
        e.tick();
        assert_eq!(e.take(conn), vec![], "refused before the catch-up time");
    }
    e.tick();
    e.tick();
    match e.take(conn).as_slice() {
        [ClientMessage::ConnectFailed { error: ErrorCode::ConnectionLoss, reason }] => assert_eq!(reason, NOT_SERVING),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Without a leader for that long, a new connect is refused at once.
    let late = e.connect_with(survivor, new_session_request());
    match e.take(late).as_slice() {
        [ClientMessage::ConnectFailed { error: ErrorCode::ConnectionLoss, reason }] => assert_eq!(reason, NOT_SERVING),
        other => panic!("expected an immediate refusal, got {other:?}"),
    }
}

/// The leader's log after two snapshots are saved, with storage keeping
/// snapshots from the `oldest_kept`-th of them: (entries held in memory,
/// entries in the log, its base, the snapshots' zxids).
fn log_after_two_snapshots(oldest_kept: usize) -> (usize, usize, Zxid, Vec<Zxid>) {
    let mut e = Ensemble::new_with(3, |c| {
        c.snapshot_every = 10;
        c.zab.resident_log_entries = 4;
    });
    let leader = e.leader();
    let (c, _, _) = e.connect(leader);
    let mut saved = Vec::new();
    for round in 0..2 {
        for i in 0..12 {
            e.call(c, create(&format!("/r{round}-{i}"), CreateMode::Persistent)).unwrap();
        }
        e.settle(1);
        let node = e.nodes.get_mut(&leader).unwrap();
        let (zxid, _) = *node.snapshots.last().expect("a snapshot was asked for");
        saved.push(zxid);
        let log_floor = saved[saved.len().min(oldest_kept + 1) - 1];
        node.replica.handle(Input::SnapshotSaved { zxid, log_floor });
    }
    for i in 0..3 {
        e.call(c, create(&format!("/after-{i}"), CreateMode::Persistent)).unwrap();
    }
    let log = e.nodes[&leader].replica.zab().log();
    (log.len(), log.len() + log.stored_len(), log.base(), saved)
}

#[test]
fn the_log_holds_few_entries_in_memory_and_reaches_back_as_far_as_storage_does() {
    // Up to two snapshots' worth of decoded entries used to stay in memory:
    // 30-60 B per znode at 1 M znodes. Now a few are held, the rest stored.
    let (held, total, base, saved) = log_after_two_snapshots(0);
    assert!(held <= 8, "at most twice the resident entries held, not {held}");
    assert!(total > held, "older entries are stored");
    assert_eq!(base, saved[0], "a DIFF reaches back to the snapshot before the newest");
    // Storage keeping only the newest snapshot keeps the log only after it.
    let (_, _, base, saved) = log_after_two_snapshots(1);
    assert_eq!(base, saved[1], "no DIFF from a log storage purged");
}

#[test]
fn a_snapshot_is_asked_for_only_once_the_log_it_reflects_is_durable() {
    // A follower applies what the leader commits as soon as the entries are in
    // its in-memory log, possibly before its own disk has them (the leader and
    // the other follower make the quorum). A snapshot of that tree written
    // before the appends makes the store refuse them ("cannot append Z after
    // Z") and the replica stop: seen with sled under a write load.
    let mut e = Ensemble::new_with(3, |c| c.snapshot_every = 3);
    let leader = e.leader();
    let slow = (1..=3).find(|id| *id != leader).unwrap();
    let (c, _, _) = e.connect(leader);
    e.nodes.get_mut(&slow).unwrap().hold = true;
    for i in 0..7 {
        e.call(c, create(&format!("/s{i}"), CreateMode::Persistent)).unwrap();
    }
    e.settle(1);
    let node = &e.nodes[&slow];
    assert!(node.replica.tree().state().node("/s6").is_some(), "the slow follower applied the commits");
    let durable_end = node.durable.log.last().map_or(Zxid::ZERO, |e| e.zxid);
    assert!(durable_end < node.replica.tree().last_zxid(), "its disk is behind its tree");
    let ahead = |snapshots: &[(Zxid, Zxid)]| snapshots.iter().copied().filter(|(z, end)| z > end).collect::<Vec<_>>();
    assert_eq!(ahead(&node.snapshots), vec![], "snapshots ahead of the durable log");
    let before = node.snapshots.len();
    e.release_disk(slow);
    let node = &e.nodes[&slow];
    assert!(node.snapshots.len() > before, "the snapshot is asked for once the log is durable");
    assert_eq!(ahead(&node.snapshots), vec![], "snapshots ahead of the durable log");
}

#[test]
fn a_leader_short_of_disk_refuses_growing_writes_serves_the_rest_and_resumes() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let (follower, _) = followers_of(leader);
    let (c, _, _) = e.connect(follower);
    e.call(c, create("/keep", CreateMode::Persistent)).unwrap();
    e.call(c, create("/drop", CreateMode::Persistent)).unwrap();
    e.nodes.get_mut(&leader).unwrap().replica.handle(Input::DiskSpace { low: true });
    let refused = e.call(c, create("/new", CreateMode::Persistent)).unwrap_err();
    assert_eq!(refused.code, ErrorCode::ThrottledOp);
    assert!(refused.reason.contains("free-space reserve"), "{refused}");
    let set = Op::SetData { path: "/keep".into(), data: Bytes::from_static(b"x").into(), version: -1 };
    assert_eq!(e.call(c, set.clone()).unwrap_err().code, ErrorCode::ThrottledOp);
    let multi = Op::Multi(vec![Op::Delete { path: "/drop".into(), version: -1 }, create("/m", CreateMode::Persistent)]);
    assert_eq!(e.call(c, multi).unwrap_err().code, ErrorCode::ThrottledOp, "a multi that creates grows the state");
    // Reads and deletes go on: an operator can make room.
    assert!(e.call(c, get("/keep", false)).is_ok());
    e.call(c, Op::Delete { path: "/drop".into(), version: -1 }).unwrap();
    // A follower's own disk does not decide: only the leader's log is refused.
    e.nodes.get_mut(&leader).unwrap().replica.handle(Input::DiskSpace { low: false });
    e.nodes.get_mut(&follower).unwrap().replica.handle(Input::DiskSpace { low: true });
    e.call(c, set).unwrap();
    e.call(c, create("/new", CreateMode::Persistent)).unwrap();
    e.settle(2);
    for node in e.nodes.values() {
        let state = node.replica.tree().state();
        assert!(state.node("/new").is_some() && state.node("/drop").is_none());
    }
}

#[test]
fn whoami_lists_the_sessions_identities_sorted() {
    let mut e = Ensemble::new(1);
    let (c, _, _) = e.connect(1);
    for user in ["zed:pw", "alice:pw"] {
        e.call(c, Op::Auth { scheme: "digest".into(), auth: Bytes::from(user.to_string()) }).unwrap();
    }
    let Ok(OpResult::Identities(ids)) = e.call(c, Op::WhoAmI) else { panic!("whoAmI answers identities") };
    let keys: Vec<(String, String)> = ids.iter().map(|i| (i.scheme.clone(), i.id.clone())).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "sorted by scheme then id");
    let at = |user: &str| keys.iter().position(|k| k.1.starts_with(user)).expect("the identity is listed");
    assert!(at("alice:") < at("zed:"), "{keys:?}");
}

#[test]
fn a_restarted_members_resumed_session_starts_only_after_its_first_lifes_writes_commit() {
    // A restarted member tags requests from the first tag again, so the
    // second write of a session resumed there carries the tag its first
    // life gave a write that may still be uncommitted. With five members,
    // the leader and the restarted member holding that write after the sync
    // is no quorum, so its commit could come after the new write started,
    // and be taken for the new write's. The resumed session's revalidation
    // prevents it: the member attaches the session only once it has applied
    // everything the leader had proposed.
    let mut e = Ensemble::new(5);
    let leader = e.leader();
    let others: Vec<ServerId> = (1..=5).filter(|id| *id != leader).collect();
    let (member, slow) = (others[0], &others[1..]);
    let (conn, session, password) = e.connect(member);
    // Every follower's disk is slow: the member's write is proposed and
    // stays uncommitted (the others still answer the leader's probes).
    for id in &others {
        e.nodes.get_mut(id).unwrap().hold = true;
    }
    e.send(conn, create("/first-life", CreateMode::Persistent));
    e.deliver();
    e.crash(member);
    e.restart(member);
    e.settle(3);
    assert!(e.nodes[&member].replica.status().serving, "the restarted member syncs and serves");
    let resume = ConnectRequest { session_id: session.0, password, timeout_ms: 10_000, last_zxid_seen: 0 };
    let conn = e.connect_with(member, resume);
    e.settle(3);
    assert!(e.take(conn).is_empty(), "the session waits for the first life's write");
    for id in slow {
        e.release_disk(*id);
    }
    e.settle(2);
    assert!(matches!(e.take(conn).first(), Some(ClientMessage::Connected { .. })), "the session resumes");
    assert_eq!(
        e.call(conn, create("/second-life", CreateMode::Persistent)).map_err(|err| err.code),
        Ok(created(&e, member, "/second-life"))
    );
    assert!(e.nodes[&member].replica.tree().state().node("/first-life").is_some());
}

#[test]
fn a_member_with_audit_on_records_each_change_its_clients_make_once() {
    let mut e = Ensemble::new_with(3, |c| c.audit = true);
    let leader = e.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    let (c, session, _) = e.connect(follower);
    e.call(c, create("/audited", CreateMode::Persistent)).unwrap();
    let missing = e.call(c, Op::Delete { path: "/nothing".into(), version: -1 });
    assert_eq!(missing.unwrap_err().code, ErrorCode::NoNode);
    e.call(c, Op::GetData { path: "/audited".into(), watch: false }).unwrap();
    e.settle(2);
    let seen: Vec<_> =
        e.audits.iter().map(|(at, r)| (*at, r.session, r.operation, r.znode.as_str(), r.result)).collect();
    assert_eq!(
        seen,
        vec![(follower, session, "create", "/audited", "success"), (follower, session, "delete", "/nothing", "NoNode"),]
    );
    let mut quiet = Ensemble::new(3);
    let (c, _, _) = quiet.connect(leader);
    quiet.call(c, create("/not-audited", CreateMode::Persistent)).unwrap();
    assert!(quiet.audits.is_empty(), "audit is off by default");
}

#[test]
fn the_leader_knows_when_every_session_expires_and_followers_none() {
    let mut e = Ensemble::new(3);
    let leader = e.leader();
    let follower = if leader == 1 { 2 } else { 1 };
    let (_, on_follower, _) = e.connect(follower);
    let (_, on_leader, _) = e.connect(leader);
    let mut expiries: Vec<_> = e.nodes[&leader].replica.session_expiries().into_iter().map(|(s, _)| s).collect();
    expiries.sort_unstable();
    let mut both = vec![on_follower, on_leader];
    both.sort_unstable();
    assert_eq!(expiries, both, "sessions connected to a follower too");
    let timeout_ticks = e.nodes[&leader].replica.session_expiries().iter().map(|(_, left)| *left).max();
    assert!(timeout_ticks.is_some_and(|t| t > 0), "{timeout_ticks:?}");
    assert!(e.nodes[&follower].replica.session_expiries().is_empty());
}
