//! End-to-end tests of the client against a real replica in this process
//! (see `test_server`): every operation, error codes, watch delivery and
//! order, ephemerals, expiry, and session resumption across a server restart
//! or a cut connection. Every wait is bounded.

use super::test_server::{connect, options, Proxy, TestServer};
use crate::testing::{eventually, within};
use futures::StreamExt;
use std::time::{Duration, Instant};
use zabkeeper_client::*;
use zabkeeper_core::acl::perms;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::stat::EphemeralType;
use zabkeeper_core::tree::watch::{AddWatchMode, WatcherType};
use zabkeeper_core::tree::watch::{EventType, WatchEvent};

fn open_acl() -> Vec<Acl> {
    Acl::open_unsafe()
}

async fn wait_state(client: &Client, state: ConnectionState, secs: u64) {
    let mut watch = client.state_watch();
    within(secs, watch.wait_for(|s| *s == state)).await.expect("the client's state channel stays open");
}

fn node_event(e: WatchedEvent) -> (EventType, String) {
    match e {
        WatchedEvent::Node(WatchEvent { event_type, path, .. }) => (event_type, path),
        other => panic!("expected a node event, got {other:?}"),
    }
}

fn code<T: std::fmt::Debug>(result: Result<T, ClientError>) -> ErrorCode {
    let e = result.expect_err("expected an error");
    e.code().unwrap_or_else(|| panic!("no code in {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_set_delete_round_trip() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    assert_eq!(c.state(), ConnectionState::Connected);
    assert_ne!(c.session_id(), 0);
    assert_eq!(c.session_timeout(), Duration::from_secs(3));
    assert_eq!(c.server(), server.address());
    let (path, stat) = c.create_with_stat("/a", b"one", CreateMode::Persistent, &open_acl()).await.unwrap();
    assert_eq!(path, "/a");
    assert_eq!(stat.version, 0);
    let (data, stat) = c.get_data("/a").await.unwrap();
    assert_eq!(data, b"one");
    assert_eq!(stat.data_length, 3);
    let stat = c.set_data("/a", b"two", 0).await.unwrap();
    assert_eq!(stat.version, 1);
    assert!(c.last_zxid() >= stat.mzxid);
    c.check("/a", 1).await.unwrap();
    c.delete("/a", 1).await.unwrap();
    assert_eq!(c.exists("/a").await.unwrap(), None);
    c.close().await.unwrap();
    assert_eq!(c.state(), ConnectionState::Closed);
    assert!(matches!(c.get_data("/").await, Err(ClientError::Closed)));
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_error_codes_reach_the_caller_with_their_path() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    let acl = open_acl();
    let missing = c.get_data("/missing").await.unwrap_err();
    assert_eq!(missing.to_string(), "NoNode (-101) for /missing");
    c.create("/p", b"", CreateMode::Persistent, &acl).await.unwrap();
    c.create("/p/c", b"", CreateMode::Persistent, &acl).await.unwrap();
    c.create("/e", b"", CreateMode::Ephemeral, &acl).await.unwrap();
    assert_eq!(code(c.create("/p", b"", CreateMode::Persistent, &acl).await), ErrorCode::NodeExists);
    assert_eq!(code(c.set_data("/p", b"x", 7).await), ErrorCode::BadVersion);
    assert_eq!(code(c.delete("/p/c", 3).await), ErrorCode::BadVersion);
    assert_eq!(code(c.check("/p", 5).await), ErrorCode::BadVersion);
    assert_eq!(code(c.check("/nope", ANY_VERSION).await), ErrorCode::NoNode);
    assert_eq!(code(c.delete("/p", ANY_VERSION).await), ErrorCode::NotEmpty);
    assert_eq!(code(c.delete("/nope", ANY_VERSION).await), ErrorCode::NoNode);
    assert_eq!(code(c.create("/x/y", b"", CreateMode::Persistent, &acl).await), ErrorCode::NoNode);
    assert_eq!(code(c.create("/e/child", b"", CreateMode::Persistent, &acl).await), ErrorCode::NoChildrenForEphemerals);
    assert_eq!(code(c.create("/noacl", b"", CreateMode::Persistent, &[]).await), ErrorCode::InvalidAcl);
    // As ZooKeeper's server: reads do not validate paths, a malformed one names no node.
    let bad_path = c.get_data("no-slash").await.unwrap_err();
    assert_eq!(bad_path.code(), Some(ErrorCode::NoNode), "{bad_path}");
    let bad_create = c.create("no-slash", b"", CreateMode::Persistent, &acl).await.unwrap_err();
    assert_eq!(bad_create.code(), Some(ErrorCode::BadArguments), "{bad_create}");
    assert_eq!(code(c.remove_watches("/p", WatcherType::Data).await), ErrorCode::NoWatcher);
    assert_eq!(code(c.check_watches("/p", WatcherType::Any).await), ErrorCode::NoWatcher);
    assert_eq!(code(c.add_auth("nosuchscheme", b"x").await), ErrorCode::AuthFailed);
    assert_eq!(code(c.set_acl("/p", &acl, 9).await), ErrorCode::BadVersion);
    assert_eq!(code(c.get_acl("/nope").await), ErrorCode::NoNode);
    assert_eq!(code(c.get_all_children_number("/nope").await), ErrorCode::NoNode);
    let ttl = c.create_ttl("/ttl", b"", CreateMode::Persistent, &acl, Duration::from_secs(1)).await;
    assert_eq!(code(ttl), ErrorCode::BadArguments, "create_ttl refuses non-TTL modes before sending");
    let zero_ttl = c.create_ttl("/ttl", b"", CreateMode::PersistentWithTtl, &acl, Duration::ZERO).await;
    assert_eq!(code(zero_ttl), ErrorCode::BadArguments);
    // The session is still usable after every error.
    assert_eq!(c.get_children("/p").await.unwrap(), vec!["c"]);
    assert_eq!(c.state(), ConnectionState::Connected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_kinds_sequential_ephemeral_container_and_ttl() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    let acl = open_acl();
    c.create("/q", b"", CreateMode::Persistent, &acl).await.unwrap();
    let first = c.create("/q/n-", b"", CreateMode::PersistentSequential, &acl).await.unwrap();
    let second = c.create("/q/n-", b"", CreateMode::EphemeralSequential, &acl).await.unwrap();
    assert_eq!(first, "/q/n-0000000000");
    assert_eq!(second, "/q/n-0000000001");
    let (_, stat) = c.create_with_stat("/eph", b"", CreateMode::Ephemeral, &acl).await.unwrap();
    assert_eq!(stat.ephemeral_owner, c.session_id());
    let mut mine = c.get_ephemerals("/").await.unwrap();
    mine.sort();
    assert_eq!(mine, vec!["/eph".to_string(), second.clone()]);
    assert_eq!(c.get_ephemerals("/q").await.unwrap(), vec![second]);
    let ttl = c.create_ttl("/ttl", b"", CreateMode::PersistentWithTtl, &acl, Duration::from_secs(3600)).await.unwrap();
    let stat = c.exists(&ttl).await.unwrap().expect("the TTL node exists");
    // As ZooKeeper, the TTL encoding of ephemeralOwner is internal: clients see 0.
    assert_eq!(EphemeralType::of(stat.ephemeral_owner), EphemeralType::Void);
    // A container goes once its last child is gone (the server reaps it).
    c.create("/box", b"", CreateMode::Container, &acl).await.unwrap();
    c.create("/box/item", b"", CreateMode::Persistent, &acl).await.unwrap();
    c.delete("/box/item", ANY_VERSION).await.unwrap();
    eventually(10, "the empty container is reaped", || async { c.exists("/box").await.unwrap().is_none() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_counts_sync_and_acls() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    let acl = open_acl();
    c.create("/r", b"", CreateMode::Persistent, &acl).await.unwrap();
    for name in ["b", "a", "c"] {
        c.create(&format!("/r/{name}"), b"", CreateMode::Persistent, &acl).await.unwrap();
    }
    c.create("/r/a/deep", b"", CreateMode::Persistent, &acl).await.unwrap();
    assert_eq!(c.get_children("/r").await.unwrap(), vec!["a", "b", "c"]);
    let (children, stat) = c.get_children_with_stat("/r").await.unwrap();
    assert_eq!(children.len(), 3);
    assert_eq!(stat.num_children, 3);
    assert_eq!(c.get_all_children_number("/r").await.unwrap(), 4);
    assert_eq!(c.sync("/r").await.unwrap(), "/r");
    let (got, stat) = c.get_acl("/r").await.unwrap();
    assert_eq!(got, acl);
    let read_only = Acl::read_unsafe();
    let stat = c.set_acl("/r", &read_only, stat.aversion).await.unwrap();
    assert_eq!(stat.aversion, 1);
    assert_eq!(c.get_acl("/r").await.unwrap().0, read_only);
    assert_eq!(code(c.set_data("/r", b"x", ANY_VERSION).await), ErrorCode::NoAuth);
    assert_eq!(code(c.create("/r/d", b"", CreateMode::Persistent, &acl).await), ErrorCode::NoAuth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_whoami_and_acl_enforcement() {
    let server = TestServer::fresh().await;
    let alice = Client::connect(&server.address(), options().with_digest_auth("alice", "secret")).await.unwrap();
    let ids = alice.who_am_i().await.unwrap();
    assert!(ids.iter().any(|id| id.scheme == "digest" && id.id.starts_with("alice:")), "{ids:?}");
    alice.create("/private", b"s", CreateMode::Persistent, &Acl::creator_all()).await.unwrap();
    let (acl, _) = alice.get_acl("/private").await.unwrap();
    assert_eq!(acl.len(), 1);
    assert_eq!((acl[0].perms, acl[0].id.scheme.as_str()), (perms::ALL, "digest"));
    let stranger = connect(&server.address()).await;
    assert_eq!(code(stranger.get_data("/private").await), ErrorCode::NoAuth);
    assert!(!stranger.who_am_i().await.unwrap().iter().any(|id| id.scheme == "digest"));
    stranger.add_auth("digest", b"alice:secret").await.unwrap();
    assert_eq!(stranger.get_data("/private").await.unwrap().0, b"s");
    let wrong = Client::connect(&server.address(), options().with_auth("nosuchscheme", b"x")).await.unwrap_err();
    assert_eq!(wrong.code(), Some(ErrorCode::AuthFailed), "{wrong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_applies_all_or_nothing_and_reports_every_op() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    let acl = open_acl();
    assert!(c.multi(&[]).await.unwrap().is_empty());
    let results = c
        .multi(&[
            MultiOp::create("/m", b"0", CreateMode::Persistent, &acl),
            MultiOp::create("/m/s-", b"", CreateMode::PersistentSequential, &acl),
            MultiOp::set_data("/m", b"1", 0),
            MultiOp::check("/m", 1),
        ])
        .await
        .unwrap();
    assert!(matches!(&results[0], MultiResult::Created { path, .. } if path == "/m"));
    assert!(matches!(&results[1], MultiResult::Created { path, .. } if path == "/m/s-0000000000"));
    assert!(matches!(&results[2], MultiResult::DataSet(stat) if stat.version == 1));
    assert_eq!(results[3], MultiResult::Checked);
    let err = c
        .multi(&[
            MultiOp::set_data("/m", b"2", 1),
            MultiOp::delete("/m/nope", ANY_VERSION),
            MultiOp::create("/m/never", b"", CreateMode::Persistent, &acl),
        ])
        .await
        .unwrap_err();
    let ClientError::MultiFailed { index, error, results } = err else { panic!("expected MultiFailed") };
    assert_eq!((index, error.code, error.path.as_str()), (1, ErrorCode::NoNode, "/m/nope"));
    assert_eq!(
        results,
        vec![
            MultiResult::Error(ErrorCode::Ok),
            MultiResult::Error(ErrorCode::NoNode),
            MultiResult::Error(ErrorCode::RuntimeInconsistency)
        ]
    );
    // Nothing of the failed multi was applied.
    assert_eq!(c.get_data("/m").await.unwrap().0, b"1");
    assert_eq!(c.exists("/m/never").await.unwrap(), None);
    let reads = c
        .multi_read(&[ReadOp::GetData("/m".into()), ReadOp::GetChildren("/m".into()), ReadOp::GetData("/x".into())])
        .await
        .unwrap();
    assert!(matches!(&reads[0], Ok(ReadResult::Data { data, .. }) if data == b"1"));
    assert_eq!(reads[1], Ok(ReadResult::Children(vec!["s-0000000000".into()])));
    assert_eq!(reads[2], Err(zabkeeper_core::error::ZkError::new(ErrorCode::NoNode, "/x")));
    let none = c.multi_read(&[ReadOp::GetData("/x".into())]).await.unwrap();
    assert_eq!(none[0].as_ref().unwrap_err().code, ErrorCode::NoNode);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oneshot_watches_fire_once_and_before_the_answer_that_shows_the_change() {
    let server = TestServer::fresh().await;
    let watcher_client = connect(&server.address()).await;
    let writer = connect(&server.address()).await;
    let acl = open_acl();
    writer.create("/w", b"0", CreateMode::Persistent, &acl).await.unwrap();
    let (_, _, mut data_watch) = watcher_client.get_data_and_watch("/w").await.unwrap();
    let (_, mut second_watch) = watcher_client.exists_and_watch("/w").await.unwrap();
    let (_, mut child_watch) = watcher_client.get_children_and_watch("/w").await.unwrap();
    let (absent, created_watch) = watcher_client.exists_and_watch("/later").await.unwrap();
    assert_eq!(absent, None);
    watcher_client.check_watches("/w", WatcherType::Data).await.unwrap();
    writer.set_data("/w", b"1", ANY_VERSION).await.unwrap();
    // Read until the change is visible: by then the event must have arrived.
    eventually(5, "the change becomes visible", || async { watcher_client.get_data("/w").await.unwrap().0 == b"1" })
        .await;
    let fired = data_watch.try_event().expect("the event precedes the answer showing the change");
    assert_eq!(node_event(fired), (EventType::NodeDataChanged, "/w".to_string()));
    assert_eq!(node_event(second_watch.try_event().expect("both watchers fire")).0, EventType::NodeDataChanged);
    assert_eq!(child_watch.try_event(), None, "a data change leaves the child watch armed");
    // Fired once: the server forgot the data watch, another change tells nobody.
    assert_eq!(code(watcher_client.check_watches("/w", WatcherType::Data).await), ErrorCode::NoWatcher);
    writer.create("/w/kid", b"", CreateMode::Persistent, &acl).await.unwrap();
    assert_eq!(node_event(within(5, child_watch).await), (EventType::NodeChildrenChanged, "/w".to_string()));
    writer.create("/later", b"", CreateMode::Persistent, &acl).await.unwrap();
    assert_eq!(node_event(within(5, created_watch).await), (EventType::NodeCreated, "/later".to_string()));
    let (_, deleted_watch) = watcher_client.exists_and_watch("/later").await.unwrap();
    writer.delete("/later", ANY_VERSION).await.unwrap();
    assert_eq!(node_event(within(5, deleted_watch).await), (EventType::NodeDeleted, "/later".to_string()));
    // No watch on the failing read: getData of a missing node leaves none.
    assert_eq!(code(watcher_client.get_data_and_watch("/absent").await.map(|(d, s, _)| (d, s))), ErrorCode::NoNode);
    assert_eq!(code(watcher_client.check_watches("/absent", WatcherType::Any).await), ErrorCode::NoWatcher);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_watches_stream_every_change_until_removed() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    let writer = connect(&server.address()).await;
    let acl = open_acl();
    writer.create("/p", b"", CreateMode::Persistent, &acl).await.unwrap();
    let mut plain = c.add_watch("/p", AddWatchMode::Persistent).await.unwrap();
    let mut deep = c.add_watch("/p", AddWatchMode::PersistentRecursive).await.unwrap();
    assert_eq!(plain.path(), "/p");
    for i in 0..3 {
        writer.set_data("/p", format!("{i}").as_bytes(), ANY_VERSION).await.unwrap();
    }
    writer.create("/p/k", b"", CreateMode::Persistent, &acl).await.unwrap();
    writer.create("/p/k/g", b"", CreateMode::Persistent, &acl).await.unwrap();
    let mut got_plain = Vec::new();
    for _ in 0..4 {
        got_plain.push(node_event(within(5, plain.next_event()).await.expect("an event")));
    }
    assert_eq!(
        got_plain,
        vec![
            (EventType::NodeDataChanged, "/p".to_string()),
            (EventType::NodeDataChanged, "/p".to_string()),
            (EventType::NodeDataChanged, "/p".to_string()),
            (EventType::NodeChildrenChanged, "/p".to_string()),
        ]
    );
    let mut got_deep = Vec::new();
    for _ in 0..5 {
        got_deep.push(node_event(within(5, deep.next_event()).await.expect("an event")));
    }
    assert_eq!(got_deep[3], (EventType::NodeCreated, "/p/k".to_string()));
    assert_eq!(got_deep[4], (EventType::NodeCreated, "/p/k/g".to_string()));
    // Exactly once each: nothing else is queued after a round trip.
    c.sync("/").await.unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(100), plain.next_event()).await.is_err());
    deep.remove().await.unwrap();
    assert_eq!(code(c.check_watches("/p", WatcherType::PersistentRecursive).await), ErrorCode::NoWatcher);
    c.check_watches("/p", WatcherType::Persistent).await.unwrap();
    drop(plain);
    eventually(5, "dropping the last watcher removes the server's watch", || async {
        c.check_watches("/p", WatcherType::Persistent).await.is_err()
    })
    .await;
    // remove_watches tells local watchers with a removal event and ends their stream.
    let mut again = c.add_watch("/p", AddWatchMode::Persistent).await.unwrap();
    c.remove_watches("/p", WatcherType::Persistent).await.unwrap();
    let removed = within(5, again.next_event()).await.expect("a removal event");
    assert_eq!(node_event(removed).0, EventType::PersistentWatchRemoved);
    assert_eq!(within(5, again.next_event()).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_watches_resolves_oneshot_watchers_with_a_removal_event() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    c.create("/n", b"", CreateMode::Persistent, &open_acl()).await.unwrap();
    let (_, _, data) = c.get_data_and_watch("/n").await.unwrap();
    let (_, mut child) = c.get_children_and_watch("/n").await.unwrap();
    c.remove_watches("/n", WatcherType::Data).await.unwrap();
    assert_eq!(node_event(within(5, data).await), (EventType::DataWatchRemoved, "/n".to_string()));
    assert_eq!(child.try_event(), None);
    c.remove_watches("/n", WatcherType::Any).await.unwrap();
    assert_eq!(node_event(within(5, child).await).0, EventType::ChildWatchRemoved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_respect_the_pending_limit_and_all_complete() {
    let server = TestServer::fresh().await;
    let options = ClientOptions { max_pending: 4, ..options() };
    let c = Client::connect(&server.address(), options).await.unwrap();
    c.create("/load", b"", CreateMode::Persistent, &open_acl()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.create(&format!("/load/n{i}"), b"x", CreateMode::Persistent, &Acl::open_unsafe()).await
        }));
    }
    for task in tasks {
        within(30, task).await.expect("task").expect("create");
    }
    assert_eq!(c.get_all_children_number("/load").await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_removes_ephemerals_at_once_and_dropping_the_last_handle_closes_too() {
    let server = TestServer::fresh().await;
    let observer = connect(&server.address()).await;
    let acl = open_acl();
    let closer =
        Client::connect(&server.address(), options().with_session_timeout(Duration::from_secs(30))).await.unwrap();
    closer.create("/gone-on-close", b"", CreateMode::Ephemeral, &acl).await.unwrap();
    // The ephemeral's own deletion would fire a watch on it: watch another node.
    let (_, watcher) = closer.exists_and_watch("/unrelated").await.unwrap();
    closer.close().await.unwrap();
    assert_eq!(within(5, watcher).await, WatchedEvent::State(ConnectionState::Closed));
    assert_eq!(observer.exists("/gone-on-close").await.unwrap(), None, "the close was applied before it returned");
    let dropped =
        Client::connect(&server.address(), options().with_session_timeout(Duration::from_secs(30))).await.unwrap();
    dropped.create("/gone-on-drop", b"", CreateMode::Ephemeral, &acl).await.unwrap();
    drop(dropped);
    // Far sooner than the 30 s session timeout: the drop closed the session.
    eventually(5, "the dropped client's ephemeral vanishes", || async {
        observer.exists("/gone-on-drop").await.unwrap().is_none()
    })
    .await;
}

#[test]
fn ephemerals_vanish_when_a_client_dies_without_closing() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let server = TestServer::fresh().await;
        let observer = connect(&server.address()).await;
        // The victim lives in its own runtime; dropping that runtime kills its
        // task and socket without a Close, as a crashed process would.
        let victim_runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let address = server.address();
        let owner = std::thread::spawn(move || {
            victim_runtime.block_on(async {
                let c = Client::connect(&address, options().with_session_timeout(Duration::from_millis(600)))
                    .await
                    .unwrap();
                c.create("/victim", b"", CreateMode::Ephemeral, &Acl::open_unsafe()).await.unwrap();
                std::mem::forget(c);
            });
            drop(victim_runtime);
        });
        within(10, async {
            while !owner.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        owner.join().unwrap();
        let appeared = Instant::now();
        assert!(observer.exists("/victim").await.unwrap().is_some(), "the session outlives its connection for a while");
        eventually(10, "the dead client's ephemeral vanishes on expiry", || async {
            observer.exists("/victim").await.unwrap().is_none()
        })
        .await;
        assert!(appeared.elapsed() >= Duration::from_millis(200), "not before the session timed out");
    });
}

#[test]
fn a_client_that_stops_pinging_is_told_its_session_expired() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let server = TestServer::fresh().await;
        let observer = connect(&server.address()).await;
        let address = server.address();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The client's task runs on a runtime whose only thread we then block:
        // no pings go out, the server expires the session and says so.
        let owner = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let c = Client::connect(&address, options().with_session_timeout(Duration::from_millis(500)))
                    .await
                    .unwrap();
                c.create("/stalled", b"", CreateMode::Ephemeral, &Acl::open_unsafe()).await.unwrap();
                let (_, watcher) = c.exists_and_watch("/unrelated").await.unwrap();
                let persistent = c.add_watch("/", AddWatchMode::PersistentRecursive).await.unwrap();
                let _ = tx.send((c, watcher, persistent));
                std::thread::sleep(Duration::from_secs(3));
                // Let the task read what the server said meanwhile.
                tokio::time::sleep(Duration::from_secs(2)).await;
            });
        });
        let (c, watcher, mut persistent) = within(10, rx).await.unwrap();
        eventually(10, "the stalled session's ephemeral vanishes", || async {
            observer.exists("/stalled").await.unwrap().is_none()
        })
        .await;
        wait_state(&c, ConnectionState::Expired, 10).await;
        assert_eq!(within(5, watcher).await, WatchedEvent::State(ConnectionState::Expired));
        let mut last = None;
        while let Some(event) = within(5, persistent.next()).await {
            last = Some(event);
        }
        assert_eq!(last, Some(WatchedEvent::State(ConnectionState::Expired)));
        assert!(matches!(c.get_data("/").await, Err(ClientError::SessionExpired)));
        owner.join().unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_left_and_requests_in_flight_fail_with_connection_loss() {
    let server = TestServer::fresh().await;
    let c = connect(&server.address()).await;
    c.create("/s", b"v", CreateMode::Persistent, &open_acl()).await.unwrap();
    let session = c.session_id();
    // Silent for longer than the read timeout (2/3 of 3 s), shorter than the session.
    server.stall(Duration::from_millis(2500));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let lost = c.get_data("/s").await.unwrap_err();
    assert!(matches!(lost, ClientError::ConnectionLoss(_)), "{lost}");
    assert!(started.elapsed() >= Duration::from_millis(900), "only after the read timeout: {:?}", started.elapsed());
    wait_state(&c, ConnectionState::Connected, 10).await;
    assert_eq!(c.get_data("/s").await.unwrap().0, b"v");
    assert_eq!(c.session_id(), session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_and_watches_survive_a_server_restart() {
    let server = TestServer::fresh().await;
    let c = Client::connect(&server.address(), options().with_digest_auth("bob", "pw")).await.unwrap();
    let acl = open_acl();
    c.create("/r", b"0", CreateMode::Persistent, &acl).await.unwrap();
    c.create("/bobs", b"", CreateMode::Persistent, &Acl::creator_all()).await.unwrap();
    c.create("/mine", b"", CreateMode::Ephemeral, &acl).await.unwrap();
    let (_, _, data_watch) = c.get_data_and_watch("/r").await.unwrap();
    let (_, exist_watch) = c.exists_and_watch("/new").await.unwrap();
    let (_, child_watch) = c.get_children_and_watch("/r").await.unwrap();
    let mut persistent = c.add_watch("/r", AddWatchMode::Persistent).await.unwrap();
    let session = c.session_id();
    let mut states = c.state_stream();

    let server = server.restart().await;
    assert_eq!(within(10, states.next()).await, Some(ConnectionState::Disconnected));
    assert_eq!(within(10, states.next()).await, Some(ConnectionState::Connected));
    assert_eq!(within(5, persistent.next()).await, Some(WatchedEvent::State(ConnectionState::Disconnected)));
    assert_eq!(within(5, persistent.next()).await, Some(WatchedEvent::State(ConnectionState::Connected)));
    assert_eq!(c.session_id(), session);
    assert!(c.exists("/mine").await.unwrap().is_some(), "the session, and so its ephemeral, survived");
    assert!(c.who_am_i().await.unwrap().iter().any(|id| id.scheme == "digest"), "auth was re-added");
    c.get_data("/bobs").await.unwrap();

    let writer = connect(&server.address()).await;
    writer.set_data("/r", b"1", ANY_VERSION).await.unwrap();
    writer.create("/new", b"", CreateMode::Persistent, &acl).await.unwrap();
    writer.create("/r/kid", b"", CreateMode::Persistent, &acl).await.unwrap();
    assert_eq!(node_event(within(5, data_watch).await), (EventType::NodeDataChanged, "/r".to_string()));
    assert_eq!(node_event(within(5, exist_watch).await), (EventType::NodeCreated, "/new".to_string()));
    assert_eq!(node_event(within(5, child_watch).await), (EventType::NodeChildrenChanged, "/r".to_string()));
    assert_eq!(node_event(within(5, persistent.next()).await.unwrap()).0, EventType::NodeDataChanged);
    assert_eq!(node_event(within(5, persistent.next()).await.unwrap()).0, EventType::NodeChildrenChanged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_missed_while_cut_off_fire_on_resume_and_requests_wait_for_it() {
    let server = TestServer::fresh().await;
    let mut proxy = Proxy::start(server.port).await;
    let c = connect(&proxy.address()).await;
    let writer = connect(&server.address()).await;
    let acl = open_acl();
    writer.create("/d", b"0", CreateMode::Persistent, &acl).await.unwrap();
    writer.create("/gone", b"", CreateMode::Persistent, &acl).await.unwrap();
    let (_, _, changed) = c.get_data_and_watch("/d").await.unwrap();
    let (_, _, deleted) = c.get_data_and_watch("/gone").await.unwrap();
    let (_, created) = c.exists_and_watch("/born").await.unwrap();
    let (_, _, untouched) = c.get_data_and_watch("/").await.unwrap();

    proxy.cut();
    wait_state(&c, ConnectionState::Disconnected, 10).await;
    writer.set_data("/d", b"1", ANY_VERSION).await.unwrap();
    writer.delete("/gone", ANY_VERSION).await.unwrap();
    writer.create("/born", b"", CreateMode::Persistent, &acl).await.unwrap();
    // A request made while disconnected waits for the session to resume.
    let pending = tokio::spawn({
        let c = c.clone();
        async move { c.get_data("/d").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    proxy.resume().await;
    let (data, _) = within(10, pending).await.unwrap().unwrap();
    assert_eq!(data, b"1");
    assert_eq!(c.state(), ConnectionState::Connected);
    // SetWatches (relative to the last zxid seen) fired what changed meanwhile.
    assert_eq!(node_event(within(5, changed).await), (EventType::NodeDataChanged, "/d".to_string()));
    assert_eq!(node_event(within(5, deleted).await), (EventType::NodeDeleted, "/gone".to_string()));
    assert_eq!(node_event(within(5, created).await), (EventType::NodeCreated, "/born".to_string()));
    // ... and re-armed what did not change.
    let mut untouched = untouched;
    assert_eq!(untouched.try_event(), None);
    c.check_watches("/", WatcherType::Data).await.unwrap();
    writer.set_data("/", b"root", ANY_VERSION).await.unwrap();
    assert_eq!(node_event(within(5, untouched).await), (EventType::NodeDataChanged, "/".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_for_longer_than_the_timeout_the_session_expires_locally() {
    let server = TestServer::fresh().await;
    let options =
        options().with_session_timeout(Duration::from_millis(800)).with_request_timeout(Duration::from_millis(200));
    let c = Client::connect(&server.address(), options).await.unwrap();
    let port = server.port;
    let (_, watcher) = c.exists_and_watch("/x").await.unwrap();
    let mut persistent = c.add_watch("/", AddWatchMode::Persistent).await.unwrap();
    let started = Instant::now();
    drop(server.kill());
    wait_state(&c, ConnectionState::Disconnected, 5).await;
    // While reconnecting, a request waits, then fails with ConnectionLoss
    // saying why no server took the session.
    let waited = c.get_data("/").await.unwrap_err();
    assert!(matches!(waited, ClientError::ConnectionLoss(_)), "{waited}");
    assert_eq!(waited.code(), Some(ErrorCode::ConnectionLoss));
    let text = waited.to_string();
    assert!(text.contains("get_data /") && text.contains("200ms"), "{text}");
    assert!(text.contains(&format!("cannot reach 127.0.0.1:{port}")), "{text}");
    wait_state(&c, ConnectionState::Expired, 10).await;
    assert!(started.elapsed() >= Duration::from_millis(500), "not before the session timeout");
    assert_eq!(within(5, watcher).await, WatchedEvent::State(ConnectionState::Expired));
    assert_eq!(within(5, persistent.next()).await, Some(WatchedEvent::State(ConnectionState::Disconnected)));
    assert_eq!(within(5, persistent.next()).await, Some(WatchedEvent::State(ConnectionState::Expired)));
    assert_eq!(within(5, persistent.next()).await, None);
    assert!(matches!(c.exists("/").await, Err(ClientError::SessionExpired)));
    c.close().await.unwrap();
    assert_eq!(c.state(), ConnectionState::Expired);
}
