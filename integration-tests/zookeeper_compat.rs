//! A ZooKeeper client we did not write — the `zookeeper-client` crate
//! (kezhuw/zookeeper-client-rust) — against real `zabkeeper` processes, over
//! the ZooKeeper port only: every operation the crate offers, the error codes,
//! one-shot and persistent watches (one-shot: exactly once, and the event
//! arrives before the reply of a read that sees the change), the session
//! moving to another member when its server is SIGKILLed (same session,
//! ephemerals kept, watches re-registered by SetWatches and firing), and
//! session expiry, and writers riding out a SIGKILL of the leader (no
//! acknowledged write lost, sessions and ephemerals kept). Everything runs on
//! 127.0.0.1; every wait is bounded.
//!
//! What the crate refuses before sending (malformed paths, empty ACLs, bad
//! TTLs) never reaches the server; the server's own answers to such requests
//! are compared with Apache ZooKeeper's by `zk_side_by_side.py`.

use crate::support::{runtime, within, zk_wire, Ensemble, Settings};
use futures::FutureExt;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;
use zookeeper_client::{
    Acl, Acls, AddWatchMode, AuthId, AuthUser, Client, CreateMode, EventType, MultiReadResult, MultiWriteError,
    MultiWriteResult, Permission, SessionState, WatchedEvent,
};

/// Connects with a session timeout of `session_ms`, bounded in time.
async fn connect(hosts: &str, session_ms: u64) -> Client {
    let connector = Client::connector()
        .with_session_timeout(Duration::from_millis(session_ms))
        .with_connection_timeout(Duration::from_secs(5));
    within(20, connector.connect(hosts)).await.expect("connect")
}

fn open() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn digest(user: &str, password: &str) -> String {
    use base64::Engine;
    use sha1::Digest;
    let hash = sha1::Sha1::digest(format!("{user}:{password}").as_bytes());
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))
}

/// The answer to a four-letter word (empty when the member is down).
fn four_letter(addr: SocketAddr, word: &str) -> String {
    four_letter_bytes(addr, word.as_bytes())
}

/// Sends `bytes` (a word and what follows it), ends the sending side, and
/// returns the text answer ('' if none).
fn four_letter_bytes(addr: SocketAddr, bytes: &[u8]) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(bytes).is_err() {
        return String::new();
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The member whose ZooKeeper port serves `session` (from `cons`), if any.
fn serving_member(e: &Ensemble, session: i64) -> Option<u64> {
    let needle = format!("sid=0x{session:x},");
    e.members.iter().find(|m| four_letter(m.ports.client, "cons").contains(&needle)).map(|m| m.id)
}

async fn wait_state(client: &Client, want: SessionState, secs: u64) {
    let mut watcher = client.state_watcher();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut state = watcher.peek_state();
    while state != want {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "session never reached {want:?} within {secs}s (last {state:?})");
        state = tokio::time::timeout(left, watcher.changed()).await.unwrap_or(state);
    }
}

/// Reads `path` through `c` until its data is `want` (bounded) and returns
/// that read's Stat. Each client reads from its own member, which may apply a
/// change another client made a moment later than the writer's member did
/// (ZooKeeper's reads are sequentially consistent, not linearizable).
async fn read_until_data(c: &Client, path: &str, want: &[u8]) -> zk::Stat {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (data, stat) = within(10, c.get_data(path)).await.unwrap();
        if data == want {
            return stat;
        }
        assert!(Instant::now() < deadline, "{path} never read {want:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Like [`read_until_data`], until `path` exists.
async fn read_until_exists(c: &Client, path: &str) -> zk::Stat {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(stat) = within(10, c.check_stat(path)).await.unwrap() {
            return stat;
        }
        assert!(Instant::now() < deadline, "{path} never appeared");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Drops `c` (the crate then closes its session with closeSession) and waits,
/// bounded, until `witness` sees the session's ephemeral marker go.
async fn close_and_wait(c: Client, witness: &Client) {
    let marker = format!("/closing-{:x}", c.session_id().0);
    c.create(&marker, b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        within(10, witness.sync("/")).await.unwrap();
        if within(10, witness.check_stat(&marker)).await.unwrap().is_none() {
            return;
        }
        assert!(Instant::now() < deadline, "the closed session's ephemeral stayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn node(event: &WatchedEvent) -> (EventType, &str) {
    (event.event_type, event.path.as_str())
}

#[test]
fn every_operation_and_error_code_through_the_zookeeper_port() {
    let ensemble = Ensemble::start(3);
    let hosts = ensemble.zookeeper(&ensemble.ids());
    runtime().block_on(async {
        let c = connect(&hosts, 6000).await;
        let other = connect(&hosts, 6000).await;

        // create, every mode
        let (stat, _) = c.create("/app", b"root", &open()).await.unwrap();
        assert_eq!((stat.version, stat.data_length, stat.ephemeral_owner), (0, 4, 0));
        assert_eq!(stat.czxid, stat.mzxid);
        let seq = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
        let (_, first) = c.create("/app/s-", b"", &seq).await.unwrap();
        let (_, second) = c.create("/app/s-", b"", &seq).await.unwrap();
        assert_eq!((first.into_i64(), second.into_i64()), (0, 1), "suffix = the parent's child creates so far");
        assert_eq!(format!("{second}"), "0000000001");
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let (stat, _) = c.create("/app/e", b"", &eph).await.unwrap();
        assert_eq!(stat.ephemeral_owner, c.session_id().0);
        let eseq = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (_, n) = c.create("/app/es-", b"", &eseq).await.unwrap();
        assert_eq!(n.into_i64(), 3);
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let (stat, _) = c.create("/box", b"", &container).await.unwrap();
        assert_eq!(stat.ephemeral_owner, 0, "container owners read 0, as in ZooKeeper");
        let ttl = open().with_ttl(Duration::from_secs(3600));
        let (stat, _) = c.create("/ttl", b"t", &ttl).await.unwrap();
        assert_eq!(stat.ephemeral_owner, 0, "TTL owners read 0, as in ZooKeeper");
        let ttl_seq = CreateMode::PersistentSequential.with_acls(Acls::anyone_all()).with_ttl(Duration::from_secs(60));
        let (_, n) = c.create("/app/ts-", b"", &ttl_seq).await.unwrap();
        assert_eq!(n.into_i64(), 4);

        // create errors
        assert_eq!(c.create("/app", b"", &open()).await.unwrap_err(), zk::Error::NodeExists);
        assert_eq!(c.create("/nope/x", b"", &open()).await.unwrap_err(), zk::Error::NoNode);
        assert_eq!(c.create("/app/e/x", b"", &open()).await.unwrap_err(), zk::Error::NoChildrenForEphemerals);
        assert!(matches!(c.create("/app/", b"", &open()).await.unwrap_err(), zk::Error::BadArguments(_)));
        assert!(matches!(c.create("relative", b"", &open()).await.unwrap_err(), zk::Error::BadArguments(_)));
        // The "auth" scheme with no authenticated identity: the server answers InvalidACL.
        let creator = CreateMode::Persistent.with_acls(Acls::creator_all());
        assert_eq!(c.create("/mine", b"", &creator).await.unwrap_err(), zk::Error::InvalidAcl);

        // reads
        let (data, stat) = c.get_data("/app").await.unwrap();
        assert_eq!((data.as_slice(), stat.num_children), (&b"root"[..], 5));
        assert_eq!(c.get_data("/nope").await.unwrap_err(), zk::Error::NoNode);
        assert!(c.check_stat("/nope").await.unwrap().is_none());
        assert_eq!(c.check_stat("/app").await.unwrap().unwrap().num_children, 5);
        let mut children = c.list_children("/app").await.unwrap();
        children.sort();
        assert_eq!(children, ["e", "es-0000000003", "s-0000000000", "s-0000000001", "ts-0000000004"]);
        let (children, stat) = c.get_children("/app").await.unwrap();
        assert_eq!((children.len(), stat.num_children, stat.cversion), (5, 5, 5));
        assert_eq!(c.list_children("/nope").await.unwrap_err(), zk::Error::NoNode);
        assert_eq!(c.count_descendants_number("/app").await.unwrap(), 5);
        assert_eq!(c.count_descendants_number("/nope").await.unwrap_err(), zk::Error::NoNode);
        let mut mine = c.list_ephemerals("/").await.unwrap();
        mine.sort();
        assert_eq!(mine, ["/app/e", "/app/es-0000000003"]);
        assert_eq!(c.list_ephemerals("/app/es").await.unwrap(), ["/app/es-0000000003"]);
        assert!(other.list_ephemerals("/").await.unwrap().is_empty(), "ephemerals are per session");
        // `other` may be served by another member: sync makes it catch up.
        other.sync("/").await.unwrap();
        assert_eq!(other.count_descendants_number("/app").await.unwrap(), 5);
        c.sync("/app").await.unwrap();

        // setData / delete with versions; cversion counts deletes too
        let stat = c.set_data("/app", b"v1", Some(0)).await.unwrap();
        assert_eq!(stat.version, 1);
        assert!(stat.mzxid > stat.czxid, "mzxid moves past czxid with a set");
        assert_eq!(c.set_data("/app", b"v2", Some(0)).await.unwrap_err(), zk::Error::BadVersion);
        assert_eq!(c.set_data("/app", b"v2", None).await.unwrap().version, 2);
        assert_eq!(c.set_data("/nope", b"", None).await.unwrap_err(), zk::Error::NoNode);
        assert_eq!(c.delete("/app", None).await.unwrap_err(), zk::Error::NotEmpty);
        assert_eq!(c.delete("/app/s-0000000001", Some(3)).await.unwrap_err(), zk::Error::BadVersion);
        c.delete("/app/s-0000000001", Some(0)).await.unwrap();
        assert_eq!(c.delete("/app/s-0000000001", None).await.unwrap_err(), zk::Error::NoNode);
        let (_, stat) = c.get_children("/app").await.unwrap();
        assert_eq!((stat.num_children, stat.cversion), (4, 6), "a delete is a child change");
        let (_, next) = c.create("/app/s-", b"", &seq).await.unwrap();
        assert_eq!(next.into_i64(), 5, "the sequence counts creates only");
        assert!(matches!(c.delete("/zookeeper", None).await.unwrap_err(), zk::Error::BadArguments(_)));

        // multi: success with per-op results, failure with the failing index
        let mut w = c.new_multi_writer();
        w.add_create("/m", b"m", &open()).unwrap();
        w.add_create("/m/c-", b"", &seq).unwrap();
        w.add_set_data("/m", b"m2", Some(0)).unwrap();
        w.add_check_version("/m", 1).unwrap();
        w.add_delete("/m/c-0000000000", Some(0)).unwrap();
        let results = within(10, w.commit()).await.unwrap();
        assert_eq!(results.len(), 5);
        assert!(matches!(&results[0], MultiWriteResult::Create { path, .. } if path == "/m"));
        assert!(matches!(&results[1], MultiWriteResult::Create { path, .. } if path == "/m/c-0000000000"));
        assert!(matches!(&results[2], MultiWriteResult::SetData { stat } if stat.version == 1));
        assert_eq!(results[3], MultiWriteResult::Check);
        assert_eq!(results[4], MultiWriteResult::Delete);
        let mut w = c.new_multi_writer();
        w.add_create("/m2", b"", &open()).unwrap();
        w.add_check_version("/m", 0).unwrap();
        w.add_set_data("/m", b"never", None).unwrap();
        let err = within(10, w.commit()).await.unwrap_err();
        assert_eq!(err, MultiWriteError::OperationFailed { index: 1, source: zk::Error::BadVersion });
        assert!(c.check_stat("/m2").await.unwrap().is_none(), "a failed multi applies nothing");
        assert_eq!(c.get_data("/m").await.unwrap().0, b"m2");

        // multiRead: per-op results and errors
        let mut r = c.new_multi_reader();
        r.add_get_data("/m").unwrap();
        r.add_get_children("/m").unwrap();
        r.add_get_data("/nope").unwrap();
        let results = within(10, r.commit()).await.unwrap();
        assert!(matches!(&results[0], MultiReadResult::Data { data, stat } if data == b"m2" && stat.version == 1));
        assert!(matches!(&results[1], MultiReadResult::Children { children } if children.is_empty()));
        assert!(matches!(&results[2], MultiReadResult::Error { err: zk::Error::NoNode }));

        // ACLs with digest auth
        let alice = digest("alice", "secret");
        let acl =
            [Acl::new(Permission::ALL, AuthId::new("digest", &alice)), Acl::new(Permission::READ, AuthId::anyone())];
        let stat = c.set_acl("/m", &Acls::new(&acl), Some(0)).await.unwrap();
        assert_eq!(stat.aversion, 1);
        // ADMIN is checked before the version, as ZooKeeper's PrepRequestProcessor does.
        assert_eq!(c.set_acl("/m", &Acls::anyone_all(), Some(0)).await.unwrap_err(), zk::Error::NoAuth);
        let (got, stat) = c.get_acl("/m").await.unwrap();
        assert_eq!(stat.aversion, 1);
        // Without ADMIN the digest hash is masked, as ZooKeeper 3.9 does.
        assert_eq!(got[0], Acl::new(Permission::ALL, AuthId::new("digest", "alice:x")));
        assert_eq!(c.set_data("/m", b"x", None).await.unwrap_err(), zk::Error::NoAuth);
        assert_eq!(c.set_acl("/m", &Acls::anyone_all(), None).await.unwrap_err(), zk::Error::NoAuth);
        assert_eq!(c.get_data("/m").await.unwrap().0, b"m2", "world may still read");
        let users = c.list_auth_users().await.unwrap();
        assert_eq!(users, [AuthUser::new("ip", "127.0.0.1")]);
        c.auth("digest", b"alice:secret").await.unwrap();
        let mut users = c.list_auth_users().await.unwrap();
        users.sort_by(|a, b| a.scheme().cmp(b.scheme()));
        assert_eq!(users, [AuthUser::new("digest", "alice"), AuthUser::new("ip", "127.0.0.1")]);
        c.set_data("/m", b"alice", None).await.unwrap();
        let (got, _) = c.get_acl("/m").await.unwrap();
        assert_eq!(got[0], Acl::new(Permission::ALL, AuthId::new("digest", &alice)), "ADMIN sees the hash");
        assert_eq!(c.set_acl("/m", &Acls::anyone_all(), Some(0)).await.unwrap_err(), zk::Error::BadVersion);
        let (_, _) = c.create("/mine", b"", &creator).await.unwrap();
        other.sync("/mine").await.unwrap();
        assert_eq!(other.get_data("/mine").await.unwrap_err(), zk::Error::NoAuth);
        assert_eq!(other.create("/mine/x", b"", &open()).await.unwrap_err(), zk::Error::NoAuth);
        // A read-only node refuses children.
        let ro = CreateMode::Persistent.with_acls(Acls::anyone_read());
        c.create("/ro", b"", &ro).await.unwrap();
        assert_eq!(c.create("/ro/x", b"", &open()).await.unwrap_err(), zk::Error::NoAuth);

        // The config node exists, readable, with ZooKeeper's aversion -1.
        let (_, stat) = within(10, c.get_config()).await.unwrap();
        assert_eq!(stat.aversion, -1);
        // Reconfig is answered as a ZooKeeper with reconfig disabled answers it.
        let servers = ["server.9=127.0.0.1:1:2;127.0.0.1:3"];
        let update =
            zk::EnsembleUpdate::Incremental { joinings: servers.iter().copied(), leavings: [].iter().copied() };
        assert_eq!(within(10, c.update_ensemble(update, None)).await.unwrap_err(), zk::Error::ReconfigDisabled);
        assert_eq!(c.state(), SessionState::SyncConnected, "the session survives every error above");
        close_and_wait(c, &other).await;
    });
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

#[test]
fn watches_fire_once_in_order_and_survive_a_move_to_another_member() {
    let mut ensemble = Ensemble::start(3);
    let hosts = ensemble.zookeeper(&ensemble.ids());
    let rt = runtime();
    let (c, w) = rt.block_on(async {
        let c = connect(&hosts, 8000).await;
        let w = connect(&hosts, 8000).await;
        c.create("/w", b"0", &open()).await.unwrap();

        // One-shot data watch: the event is delivered before the reply of a
        // read that sees the change, and only once.
        let (_, _, watcher) = c.get_and_watch_data("/w").await.unwrap();
        w.set_data("/w", b"1", None).await.unwrap();
        let stat = read_until_data(&c, "/w", b"1").await;
        assert_eq!(stat.version, 1);
        let event = watcher.changed().now_or_never().expect("event delivered before the read's reply");
        assert_eq!(node(&event), (EventType::NodeDataChanged, "/w"));
        assert_eq!(event.zxid, stat.mzxid, "the notification carries the zxid of its change (3.9)");
        // Exists watch on a missing node, child watch on the parent.
        let (none, created) = c.check_and_watch_stat("/w/k").await.unwrap();
        assert!(none.is_none());
        let (_, children_changed) = c.list_and_watch_children("/w").await.unwrap();
        w.create("/w/k", b"", &open()).await.unwrap();
        read_until_exists(&c, "/w/k").await;
        let created = created.changed().now_or_never().expect("NodeCreated before the read");
        assert_eq!(node(&created), (EventType::NodeCreated, "/w/k"));
        let changed = children_changed.changed().now_or_never().expect("NodeChildrenChanged before the read");
        assert_eq!(node(&changed), (EventType::NodeChildrenChanged, "/w"));
        // A second change with no watch left: a new watch sees the newer state only.
        w.set_data("/w", b"2", None).await.unwrap();
        read_until_data(&c, "/w", b"2").await;
        let (data, _, again) = c.get_and_watch_data("/w").await.unwrap();
        assert_eq!(data, b"2");
        w.delete("/w/k", None).await.unwrap();
        w.set_data("/w", b"3", None).await.unwrap();
        let event = within(10, again.changed()).await;
        assert_eq!(node(&event), (EventType::NodeDataChanged, "/w"));

        // Persistent and recursive watches.
        let mut persistent = c.watch("/w", AddWatchMode::Persistent).await.unwrap();
        let mut recursive = c.watch("/r", AddWatchMode::PersistentRecursive).await.unwrap();
        w.create("/r", b"", &open()).await.unwrap();
        w.create("/r/a", b"", &open()).await.unwrap();
        w.set_data("/r/a", b"x", None).await.unwrap();
        w.set_data("/w", b"4", None).await.unwrap();
        w.create("/w/p", b"", &open()).await.unwrap();
        for want in
            [(EventType::NodeCreated, "/r"), (EventType::NodeCreated, "/r/a"), (EventType::NodeDataChanged, "/r/a")]
        {
            let e = within(10, recursive.changed()).await;
            assert_eq!(node(&e), want);
        }
        for want in [(EventType::NodeDataChanged, "/w"), (EventType::NodeChildrenChanged, "/w")] {
            let e = within(10, persistent.changed()).await;
            assert_eq!(node(&e), want);
        }
        // removeWatches: the server confirms each removal. (`remove` is
        // deprecated in favour of drop, which does not report the answer.)
        let (_, _, removed) = c.get_and_watch_data("/r").await.unwrap();
        #[allow(deprecated)]
        {
            within(10, removed.remove()).await.unwrap();
            within(10, recursive.remove()).await.unwrap();
        }

        // Watches to carry across the move.
        c.create("/eph", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
        (c, w)
    });

    // Kill, by PID, the member serving the session.
    let session = c.session_id().0;
    let before = serving_member(&ensemble, session).expect("some member serves the session");
    let (data_watch, exist_watch, mut persistent) = rt.block_on(async {
        let (_, _, data_watch) = c.get_and_watch_data("/w").await.unwrap();
        let (_, exist_watch) = c.check_and_watch_stat("/later").await.unwrap();
        let persistent = c.watch("/w", AddWatchMode::Persistent).await.unwrap();
        (data_watch, exist_watch, persistent)
    });
    let started = Instant::now();
    ensemble.kill(before);
    rt.block_on(async {
        // The other client may be on the killed member too; it moves as well.
        // Requests in flight at the kill fail with ConnectionLoss; retry until
        // one succeeds on the new member (bounded).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match within(30, c.sync("/")).await {
                Ok(()) => break,
                Err(zk::Error::ConnectionLoss) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await
                }
                Err(e) => panic!("sync after the kill: {e}"),
            }
        }
        let moved = Instant::now().duration_since(started);
        wait_state(&c, SessionState::SyncConnected, 30).await;
        assert_eq!(c.session_id().0, session, "same session");
        eprintln!("first request served by another member {moved:?} after the SIGKILL");
        // Changes after the move fire the re-registered watches.
        within(20, w.set_data("/w", b"after", None)).await.unwrap();
        within(20, w.create("/later", b"", &open())).await.unwrap();
        let e = within(10, data_watch.changed()).await;
        assert_eq!(node(&e), (EventType::NodeDataChanged, "/w"));
        let e = within(10, exist_watch.changed()).await;
        assert_eq!(node(&e), (EventType::NodeCreated, "/later"));
        // A persistent watcher also hears the connection go and come back.
        let mut states = Vec::new();
        let e = loop {
            let e = within(10, persistent.changed()).await;
            if e.event_type != EventType::Session {
                break e;
            }
            assert!(states.len() < 10, "too many session events: {states:?}");
            states.push(e.session_state);
        };
        // One Disconnected/SyncConnected pair per reconnection; when the
        // killed member led, the first member reached may drop its clients
        // once more for the election, so there may be two.
        assert!(!states.is_empty() && states.len() % 2 == 0, "{states:?}");
        for pair in states.chunks(2) {
            assert_eq!(pair, [SessionState::Disconnected, SessionState::SyncConnected], "{states:?}");
        }
        assert_eq!(node(&e), (EventType::NodeDataChanged, "/w"));
        // The ephemeral stayed with the session.
        let stat = within(10, w.check_stat("/eph")).await.unwrap().expect("the ephemeral survived the move");
        assert_eq!(stat.ephemeral_owner, session);
        assert_eq!(c.list_ephemerals("/").await.unwrap(), ["/eph"]);
    });
    let after = serving_member(&ensemble, session).expect("a member serves the session after the move");
    assert_ne!(after, before);
    rt.block_on(close_and_wait(c, &w));
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

#[test]
fn an_expired_session_loses_its_ephemerals() {
    let mut ensemble = Ensemble::start(3);
    let hosts = ensemble.zookeeper(&ensemble.ids());
    let rt = runtime();
    rt.block_on(async {
        let observer = connect(&hosts, 10_000).await;
        observer.create("/x", b"", &open()).await.unwrap();

        // A detached session whose client goes away without closing it: the
        // leader expires it after its timeout and deletes its ephemeral.
        let connector = Client::connector()
            .with_session_timeout(Duration::from_millis(2000))
            .with_connection_timeout(Duration::from_secs(5))
            .with_detached();
        let gone = within(20, connector.connect(&hosts)).await.unwrap();
        gone.create("/x/gone", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
        observer.sync("/x").await.unwrap();
        let (seen, deleted) = observer.check_and_watch_stat("/x/gone").await.unwrap();
        assert!(seen.is_some(), "after sync the observer sees the ephemeral");
        let info = gone.into_session();
        let started = Instant::now();
        let e = within(20, deleted.changed()).await;
        assert_eq!(node(&e), (EventType::NodeDeleted, "/x/gone"));
        let waited = Instant::now().duration_since(started);
        assert!(waited >= Duration::from_millis(1500), "expired after {waited:?}, before its 2 s timeout");
        eprintln!("detached session expired {waited:?} after its client left");
        // Reattaching the expired session is refused by every member (a
        // follower revalidates the session with the leader first).
        let again = Client::connector().with_session(info).with_connection_timeout(Duration::from_secs(5));
        let err = within(20, again.connect(&hosts)).await.unwrap_err();
        assert_eq!(err, zk::Error::SessionExpired);
    });

    // A live client cut off from the ensemble: connected to one member only,
    // which is killed; its session expires, and when the member is back the
    // client learns it.
    let follower = rt.block_on(async {
        let mut follower = None;
        for id in ensemble.ids() {
            if ensemble.status(id).await.is_some_and(|s| s.role == "follower") {
                follower = Some(id);
            }
        }
        follower.expect("a follower")
    });
    let lonely_hosts = ensemble.zookeeper(&[follower]);
    let (lonely, observer) = rt.block_on(async {
        let lonely = connect(&lonely_hosts, 2000).await;
        lonely.create("/x/lonely", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
        let others: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != follower).collect();
        let observer = connect(&ensemble.zookeeper(&others), 10_000).await;
        (lonely, observer)
    });
    let (seen, deleted) = rt.block_on(async {
        observer.sync("/x").await.unwrap();
        observer.check_and_watch_stat("/x/lonely").await.unwrap()
    });
    assert!(seen.is_some(), "after sync the observer sees the ephemeral");
    ensemble.kill(follower);
    rt.block_on(async {
        let e = within(20, deleted.changed()).await;
        assert_eq!(node(&e), (EventType::NodeDeleted, "/x/lonely"));
        assert!(observer.get_children("/x").await.unwrap().0.is_empty());
    });
    ensemble.spawn(follower);
    rt.block_on(async {
        wait_state(&lonely, SessionState::Expired, 30).await;
        assert_eq!(lonely.get_data("/x").await.unwrap_err(), zk::Error::SessionExpired);
        let witness = connect(&hosts, 10_000).await;
        close_and_wait(observer, &witness).await;
    });
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// Regression: a connect the server refuses (its writer closes the socket)
/// followed by pipelined requests made the reader poll the writer's finished
/// JoinHandle twice, and tokio panicked. The side-by-side check caught it
/// once in CI; here the race is run many times.
#[test]
fn a_refused_connect_with_pipelined_requests_never_panics() {
    let ensemble = Ensemble::start(1);
    let addr: SocketAddr = ensemble.zookeeper(&[1]).parse().expect("one address");
    let mut bytes = zk_wire::connect_frame(0x5eed_0000_0000_0001);
    for xid in 1..=200 {
        bytes.extend_from_slice(&zk_wire::get_data_frame(xid, "/"));
    }
    let mut refused = 0;
    for _ in 0..60 {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        // The server may close before it has read everything: a write error is fine.
        let _ = s.write_all(&bytes);
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        // An unknown session is answered with a ConnectResponse of timeout 0, then EOF.
        if answer.len() >= 12 && answer[8..12] == [0, 0, 0, 0] {
            refused += 1;
        }
    }
    assert_eq!(refused, 60, "every connect is refused as expired, then closed");
    // Other clients are still served.
    let answer = four_letter(addr, "ruok");
    assert_eq!(answer, "imok");
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// What one ZooKeeper-protocol writer saw.
#[derive(Debug, Default)]
struct Writes {
    /// Paths whose create was acknowledged, with when.
    acked: Vec<(String, Instant)>,
    /// Errors (each an outcome unknown to the writer).
    errors: Vec<String>,
}

/// Creates `/ride/w<i>-<n>` for n = 0, 1, ... until `stop`.
async fn write_until(client: Client, i: usize, stop: Arc<AtomicBool>) -> Writes {
    let mut writes = Writes::default();
    let mut n = 0;
    while !stop.load(Ordering::Acquire) && n < 100_000 {
        let path = format!("/ride/w{i}-{n}");
        n += 1;
        match tokio::time::timeout(Duration::from_secs(10), client.create(&path, b"", &open())).await {
            Ok(Ok(_)) => writes.acked.push((path, Instant::now())),
            Ok(Err(zk::Error::SessionExpired)) => {
                panic!("writer {i}: the session expired; before: {:?}", writes.errors)
            }
            Ok(Err(e)) => writes.errors.push(format!("{path}: {e}")),
            Err(_) => writes.errors.push(format!("{path}: no answer within 10 s")),
        }
    }
    writes
}

/// ZooKeeper-protocol clients through a leader kill: writers whose sessions
/// are spread over a 3-member ensemble keep getting writes acknowledged
/// after the leader dies, no acknowledged write is lost, and every session
/// lives on with its ephemeral.
#[test]
fn zookeeper_clients_ride_out_a_leader_kill() {
    let mut ensemble = Ensemble::start(3);
    let rt = runtime();
    let hosts = ensemble.zookeeper(&ensemble.ids());
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let stop = Arc::new(AtomicBool::new(false));
    let (clients, writers) = rt.block_on(async {
        let setup = connect(&hosts, 20_000).await;
        setup.create("/ride", b"", &open()).await.unwrap();
        let mut clients = Vec::new();
        let mut writers = Vec::new();
        for i in 0..3 {
            let c = connect(&hosts, 20_000).await;
            let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
            c.create(&format!("/ride/e{i}"), b"", &ephemeral).await.unwrap();
            writers.push(tokio::spawn(write_until(c.clone(), i, stop.clone())));
            clients.push(c);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        (clients, writers)
    });
    let killed_at = Instant::now();
    ensemble.kill(leader);
    let survivors: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != leader).collect();
    ensemble.wait_serving(survivors.clone(), Duration::from_secs(20));
    let writes: Vec<Writes> = rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        stop.store(true, Ordering::Release);
        let mut all = Vec::new();
        for w in writers {
            all.push(within(60, w).await.expect("a writer task"));
        }
        all
    });
    rt.block_on(async {
        let checker = connect(&ensemble.zookeeper(&survivors), 20_000).await;
        checker.sync("/ride").await.unwrap();
        let (children, _) = checker.get_children("/ride").await.unwrap();
        for (i, w) in writes.iter().enumerate() {
            assert!(
                w.acked.iter().any(|(_, at)| *at > killed_at),
                "writer {i} got no write acknowledged after the kill: {:?}",
                w.errors
            );
            for (path, _) in &w.acked {
                let name = path.trim_start_matches("/ride/");
                assert!(children.iter().any(|c| c == name), "acknowledged {path} is lost");
            }
            assert!(children.iter().any(|c| *c == format!("e{i}")), "session {i}'s ephemeral is gone");
        }
        for c in &clients {
            assert!(c.get_data("/ride").await.is_ok(), "a session did not survive the kill");
        }
    });
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// Reads one length-prefixed frame (bounded by the stream's read timeout); None at EOF.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut payload = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut payload).ok()?;
    Some(payload)
}

/// A reply's xid and error code.
fn reply_header(frame: &[u8]) -> (i32, i32) {
    let xid = i32::from_be_bytes(frame[0..4].try_into().expect("4 bytes"));
    let err = i32::from_be_bytes(frame[12..16].try_into().expect("4 bytes"));
    (xid, err)
}

/// As ZooKeeper's UnimplementedRequestProcessor: an unknown opcode is
/// answered UNIMPLEMENTED after the replies before it, then the connection
/// closes; the session lives on and can be resumed.
#[test]
fn an_unknown_opcode_is_answered_then_the_connection_closes_and_the_session_lives() {
    let ensemble = Ensemble::start(1);
    let addr: SocketAddr = ensemble.zookeeper(&[1]).parse().expect("one address");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&zk_wire::connect_frame(0)).expect("send connect");
    let connected = read_frame(&mut s).expect("a ConnectResponse");
    let session = i64::from_be_bytes(connected[8..16].try_into().expect("8 bytes"));
    let password = connected[20..36].to_vec();
    assert_ne!(session, 0, "a new session");
    let mut unknown = 2i32.to_be_bytes().to_vec();
    unknown.extend_from_slice(&999i32.to_be_bytes());
    let mut pipelined = zk_wire::get_data_frame(1, "/");
    pipelined.extend_from_slice(&zk_wire::frame(&unknown));
    pipelined.extend_from_slice(&zk_wire::get_data_frame(3, "/"));
    s.write_all(&pipelined).expect("send requests");
    assert_eq!(read_frame(&mut s).map(|f| reply_header(&f)), Some((1, 0)), "the read before it is answered");
    assert_eq!(read_frame(&mut s).map(|f| reply_header(&f)), Some((2, -6)), "UNIMPLEMENTED");
    assert_eq!(read_frame(&mut s), None, "then the connection closes; the request after it is not served");

    // The session lives on: a reconnect with its password resumes it.
    let mut again = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    again.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut resume = Vec::new();
    resume.extend_from_slice(&0i32.to_be_bytes());
    resume.extend_from_slice(&0i64.to_be_bytes());
    resume.extend_from_slice(&10_000i32.to_be_bytes());
    resume.extend_from_slice(&session.to_be_bytes());
    resume.extend_from_slice(&16i32.to_be_bytes());
    resume.extend_from_slice(&password);
    resume.push(0);
    again.write_all(&zk_wire::frame(&resume)).expect("send the reattach");
    let resumed = read_frame(&mut again).expect("a ConnectResponse");
    assert_ne!(&resumed[4..8], &[0, 0, 0, 0], "the session was resumed (a timeout, not expired)");
    assert_eq!(i64::from_be_bytes(resumed[8..16].try_into().expect("8 bytes")), session);
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// A raw ZooKeeper session on member `id`: the stream, after its ConnectResponse.
fn raw_session(ensemble: &Ensemble, id: u64) -> TcpStream {
    let addr: SocketAddr = ensemble.zookeeper(&[id]).parse().expect("one address");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&zk_wire::connect_frame(0)).expect("send connect");
    read_frame(&mut s).expect("a ConnectResponse");
    s
}

/// The data length field of a getData reply for `path` on `s`: -1 for null;
/// None while the node is missing.
fn data_length(s: &mut TcpStream, xid: i32, path: &str) -> Option<i32> {
    s.write_all(&zk_wire::get_data_frame(xid, path)).expect("send getData");
    let reply = read_frame(s).expect("a getData reply");
    let (got, err) = reply_header(&reply);
    assert_eq!(got, xid);
    (err == 0).then(|| i32::from_be_bytes(reply[16..20].try_into().expect("4 bytes")))
}

/// ZooKeeper keeps null data (a buffer of length -1) apart from 0 bytes:
/// Java's getData returns null, kazoo None. Both must survive replication
/// to another member and a restart of the whole ensemble from its disks.
#[test]
fn null_data_reads_back_null_on_every_member_and_after_a_full_restart() {
    let mut ensemble = Ensemble::start(3);
    let mut writer = raw_session(&ensemble, 1);
    writer.write_all(&zk_wire::create_frame(1, "/null", None)).expect("send create");
    assert_eq!(read_frame(&mut writer).map(|f| reply_header(&f)), Some((1, 0)), "created /null");
    writer.write_all(&zk_wire::create_frame(2, "/empty", Some(b""))).expect("send create");
    assert_eq!(read_frame(&mut writer).map(|f| reply_header(&f)), Some((2, 0)), "created /empty");
    assert_eq!(data_length(&mut writer, 3, "/null"), Some(-1), "null on the member that wrote it");
    assert_eq!(data_length(&mut writer, 4, "/empty"), Some(0));
    drop(writer);

    let read_everywhere = |ensemble: &Ensemble, when: &str| {
        for id in ensemble.ids() {
            let mut reader = raw_session(ensemble, id);
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut xid = 1;
            let null = loop {
                xid += 1;
                match data_length(&mut reader, xid, "/null") {
                    Some(len) => break len,
                    None => {
                        assert!(Instant::now() < deadline, "member {id} never saw /null ({when})");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            };
            assert_eq!(null, -1, "/null on member {id} ({when})");
            assert_eq!(data_length(&mut reader, xid + 1, "/empty"), Some(0), "/empty on member {id} ({when})");
        }
    };
    read_everywhere(&ensemble, "replicated");
    for id in ensemble.ids() {
        ensemble.kill(id);
    }
    for id in ensemble.ids() {
        ensemble.spawn(id);
    }
    ensemble.wait_serving(ensemble.ids(), Duration::from_secs(30));
    read_everywhere(&ensemble, "after a full restart");
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// The figure after `label` (`Received: 12` in srvr, `recved=12,` in cons).
fn figure(text: &str, label: &str) -> u64 {
    let at = text.find(label).unwrap_or_else(|| panic!("no {label:?} in {text:?}")) + label.len();
    text[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect("a number")
}

/// `srst` and `crst` start the request statistics afresh, as ZooKeeper's
/// do: `srvr`'s counts and `cons`'s per-connection counts drop, and go on
/// counting after.
#[test]
fn srst_and_crst_reset_the_server_and_connection_statistics() {
    let ensemble = Ensemble::start(1);
    let addr = ensemble.members[0].ports.client;
    runtime().block_on(async {
        let c = connect(&ensemble.zookeeper(&[1]), 6000).await;
        for i in 0..30 {
            c.create(&format!("/stats-{i}"), b"x", &open()).await.expect("create");
        }
        let before = figure(&four_letter(addr, "srvr"), "Received: ");
        assert!(before >= 30, "every request counted: {before}");
        assert_eq!(four_letter(addr, "srst"), "Server stats reset.\n");
        let after = figure(&four_letter(addr, "srvr"), "Received: ");
        assert!(after < before && after < 30, "reset: {after}, was {before}");

        let cons = four_letter(addr, "cons");
        let before = figure(&cons, "recved=");
        assert!(before >= 30, "the connection's requests counted: {cons}");
        assert_eq!(four_letter(addr, "crst"), "Connection stats reset.\n");
        let cons = four_letter(addr, "cons");
        let after = figure(&cons, "recved=");
        assert!(after < 30, "reset: {cons}");
        assert!(cons.contains("lop=NA"), "no operation since the reset: {cons}");
        c.create("/stats-after", b"x", &open()).await.expect("create");
        let cons = four_letter(addr, "cons");
        assert!(figure(&cons, "recved=") > after, "counting goes on: {cons}");
    });
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// `gtmk` and `stmk` read and set the trace mask as ZooKeeper's do: 306 at
/// start; `stmk` takes the 8-byte big-endian mask after the word, answers
/// it in decimal and puts it in force for every later connection; a `stmk`
/// cut short gets no answer and changes nothing.
#[test]
fn gtmk_and_stmk_read_and_set_the_trace_mask() {
    let ensemble = Ensemble::start(1);
    let addr = ensemble.members[0].ports.client;
    let stmk = |mask: i64| [b"stmk".as_slice(), &mask.to_be_bytes()].concat();
    assert_eq!(four_letter(addr, "gtmk"), "306");
    assert_eq!(four_letter_bytes(addr, &stmk(0b0011111010)), "250");
    assert_eq!(four_letter(addr, "gtmk"), "250");
    assert_eq!(four_letter_bytes(addr, &stmk(-1)), "-1", "every bit kept, as a Java long");
    assert_eq!(four_letter_bytes(addr, b"stmk\0\0\0"), "", "a mask cut short gets no answer");
    assert_eq!(four_letter(addr, "gtmk"), "-1", "and changes nothing");
    assert_eq!(four_letter(addr, "ruok"), "imok", "the member serves on");
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// `audit_log = true`: every change a client makes is one JSON line of the
/// member it is connected to, with ZooKeeper's audit fields (session, user,
/// ip, operation, znode, znode_type, acl, result, and the zxid), failures
/// included; reads are not audited, and other members log nothing of it.
#[test]
fn the_audit_log_has_one_line_per_change_with_zookeepers_fields() {
    let extra = "audit_log = true\nlog_format = \"json\"\n".to_string();
    let ensemble = Ensemble::start_with(Settings { size: 3, extra, ..Settings::default() });
    let session = runtime().block_on(async {
        let c = connect(&ensemble.zookeeper(&[2]), 6000).await;
        c.auth("digest", b"alice:secret").await.expect("addauth");
        c.create("/audited", b"x", &open()).await.expect("create");
        let seq = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        c.create("/audited/n-", b"", &seq).await.expect("create sequential");
        c.set_data("/audited", b"y", None).await.expect("setData");
        assert_eq!(c.delete("/nothing", None).await.unwrap_err(), zk::Error::NoNode);
        c.get_data("/audited").await.expect("a read");
        c.session_id().0
    });
    let audit_lines = |id: u64| -> Vec<serde_json::Value> {
        ensemble
            .log(id)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["message"] == "audit")
            .map(|v| v["fields"].clone())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while audit_lines(2).len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = audit_lines(2);
    let got: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|f| {
            (
                f["operation"].as_str().unwrap_or(""),
                f["znode"].as_str().unwrap_or(""),
                f["result"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("create", "/audited", "success"),
            ("create", "/audited/n-0000000000", "success"),
            ("setData", "/audited", "success"),
            ("delete", "/nothing", "NoNode"),
        ],
        "{}",
        ensemble.log(2)
    );
    let first = &lines[0];
    assert_eq!(first["session"], format!("0x{session:x}"));
    assert_eq!(first["user"], "127.0.0.1,alice");
    assert_eq!(first["ip"], "127.0.0.1");
    assert_eq!(first["znode_type"], "persistent");
    assert_eq!(first["acl"], "world:anyone:rwcda");
    assert_eq!(lines[1]["znode_type"], "ephemeral_sequential");
    for other in [1, 3] {
        assert!(audit_lines(other).is_empty(), "member {other} logged another member's client");
    }
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}
