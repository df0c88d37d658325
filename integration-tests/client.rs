//! The client library and `zkctl` against real `zabkeeper` processes on
//! loopback (the harness in `support/`): every operation and its error codes,
//! watch delivery and order, ephemerals on close and on expiry, the session
//! surviving a SIGKILL and restart of its server (and a move to another
//! member of an ensemble) with its watches, and the CLI's JSON output and
//! exit codes. Every wait is bounded.

use crate::support::{eventually, runtime, within, Ensemble};
use futures::StreamExt;
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use zabkeeper_client::{
    Client, ClientError, ClientOptions, ConnectionState, MultiOp, MultiResult, ReadOp, ReadResult, WatchedEvent,
    ANY_VERSION,
};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};

fn options(session_ms: u64) -> ClientOptions {
    ClientOptions::default()
        .with_session_timeout(Duration::from_millis(session_ms))
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(15))
}

async fn connect(address: &str) -> Client {
    Client::connect(address, options(6000)).await.expect("connect")
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

#[test]
fn every_operation_and_its_error_codes_against_the_real_server() {
    let ensemble = Ensemble::start(1);
    let address = ensemble.grpc_all();
    runtime().block_on(async {
        let c = connect(&address).await;
        let acl = Acl::open_unsafe();
        assert_eq!(c.server(), address);
        // create / get / set / delete / exists / check
        let (path, stat) = c.create_with_stat("/a", b"1", CreateMode::Persistent, &acl).await.unwrap();
        assert_eq!((path.as_str(), stat.version), ("/a", 0));
        assert_eq!(c.get_data("/a").await.unwrap().0, b"1");
        assert_eq!(c.set_data("/a", b"2", 0).await.unwrap().version, 1);
        c.check("/a", 1).await.unwrap();
        assert_eq!(code(c.check("/a", 0).await), ErrorCode::BadVersion);
        assert_eq!(code(c.set_data("/a", b"x", 0).await), ErrorCode::BadVersion);
        assert_eq!(code(c.create("/a", b"", CreateMode::Persistent, &acl).await), ErrorCode::NodeExists);
        assert_eq!(code(c.get_data("/nope").await), ErrorCode::NoNode);
        assert_eq!(code(c.create("/nope/x", b"", CreateMode::Persistent, &acl).await), ErrorCode::NoNode);
        assert_eq!(code(c.create("/bad", b"", CreateMode::Persistent, &[]).await), ErrorCode::InvalidAcl);
        // As ZooKeeper's server: a malformed read path names no node.
        assert_eq!(code(c.get_data("relative").await), ErrorCode::NoNode);
        // sequential, ephemeral, container, TTL
        assert_eq!(c.create("/a/s-", b"", CreateMode::PersistentSequential, &acl).await.unwrap(), "/a/s-0000000000");
        c.create("/e", b"", CreateMode::Ephemeral, &acl).await.unwrap();
        assert_eq!(code(c.create("/e/x", b"", CreateMode::Persistent, &acl).await), ErrorCode::NoChildrenForEphemerals);
        assert_eq!(c.get_ephemerals("/").await.unwrap(), vec!["/e".to_string()]);
        c.create("/box", b"", CreateMode::Container, &acl).await.unwrap();
        let ttl = c.create_ttl("/ttl", b"", CreateMode::PersistentWithTtl, &acl, Duration::from_secs(600)).await;
        assert_eq!(ttl.unwrap(), "/ttl");
        // children, counts, sync
        assert_eq!(code(c.delete("/a", ANY_VERSION).await), ErrorCode::NotEmpty);
        assert_eq!(c.get_children("/a").await.unwrap(), vec!["s-0000000000"]);
        assert_eq!(c.get_children_with_stat("/a").await.unwrap().1.num_children, 1);
        assert_eq!(c.get_all_children_number("/a").await.unwrap(), 1);
        assert_eq!(c.sync("/a").await.unwrap(), "/a");
        // ACLs and auth
        let (got, stat) = c.get_acl("/a").await.unwrap();
        assert_eq!(got, acl);
        assert_eq!(code(c.set_acl("/a", &acl, stat.aversion + 1).await), ErrorCode::BadVersion);
        c.set_acl("/a", &Acl::read_unsafe(), stat.aversion).await.unwrap();
        assert_eq!(code(c.set_data("/a", b"x", ANY_VERSION).await), ErrorCode::NoAuth);
        assert_eq!(code(c.set_acl("/a", &acl, ANY_VERSION).await), ErrorCode::NoAuth, "setACL needs ADMIN");
        c.add_auth("digest", b"u:p").await.unwrap();
        assert!(c.who_am_i().await.unwrap().iter().any(|id| id.scheme == "digest"));
        assert_eq!(code(c.add_auth("nosuch", b"x").await), ErrorCode::AuthFailed);
        c.create("/mine", b"", CreateMode::Persistent, &Acl::creator_all()).await.unwrap();
        let other = connect(&address).await;
        assert_eq!(code(other.get_data("/mine").await), ErrorCode::NoAuth);
        // multi and multi_read
        let results = c
            .multi(&[MultiOp::create("/m", b"", CreateMode::Persistent, &acl), MultiOp::check("/m", 0)])
            .await
            .unwrap();
        assert_eq!(results[1], MultiResult::Checked);
        let failed = c.multi(&[MultiOp::delete("/m", ANY_VERSION), MultiOp::check("/m", 5)]).await.unwrap_err();
        assert!(
            matches!(&failed, ClientError::MultiFailed { index: 1, results, .. } if results.len() == 2),
            "{failed}"
        );
        assert!(c.exists("/m").await.unwrap().is_some(), "a failed multi applies nothing");
        let reads = c.multi_read(&[ReadOp::GetChildren("/a".into()), ReadOp::GetData("/gone".into())]).await.unwrap();
        assert_eq!(reads[0], Ok(ReadResult::Children(vec!["s-0000000000".into()])));
        assert_eq!(reads[1].as_ref().unwrap_err().code, ErrorCode::NoNode);
        // watch management
        assert_eq!(code(c.remove_watches("/a", WatcherType::Any).await), ErrorCode::NoWatcher);
        assert_eq!(code(c.check_watches("/a", WatcherType::Data).await), ErrorCode::NoWatcher);
        c.close().await.unwrap();
        assert!(matches!(c.get_data("/").await, Err(ClientError::Closed)));
    });
}

#[test]
fn watches_fire_once_in_order_and_ephemerals_vanish_on_close_and_on_expiry() {
    let ensemble = Ensemble::start(1);
    let address = ensemble.grpc_all();
    runtime().block_on(async {
        let reader = connect(&address).await;
        let writer = connect(&address).await;
        let acl = Acl::open_unsafe();
        writer.create("/w", b"0", CreateMode::Persistent, &acl).await.unwrap();
        let (_, _, mut data_watch) = reader.get_data_and_watch("/w").await.unwrap();
        let (_, mut child_watch) = reader.get_children_and_watch("/w").await.unwrap();
        let mut persistent = reader.add_watch("/w", AddWatchMode::PersistentRecursive).await.unwrap();
        writer.set_data("/w", b"1", ANY_VERSION).await.unwrap();
        writer.set_data("/w", b"2", ANY_VERSION).await.unwrap();
        eventually(10, "the second change is visible", || async { reader.get_data("/w").await.unwrap().0 == b"2" })
            .await;
        // The event came before the answer that shows the change, and only once.
        let fired = data_watch.try_event().expect("event before the answer");
        assert_eq!(node_event(fired), (EventType::NodeDataChanged, "/w".to_string()));
        assert_eq!(child_watch.try_event(), None);
        assert_eq!(code(reader.check_watches("/w", WatcherType::Data).await), ErrorCode::NoWatcher);
        for _ in 0..2 {
            assert_eq!(node_event(within(5, persistent.next()).await.unwrap()).0, EventType::NodeDataChanged);
        }
        writer.create("/w/c", b"", CreateMode::Persistent, &acl).await.unwrap();
        assert_eq!(node_event(within(5, child_watch).await), (EventType::NodeChildrenChanged, "/w".to_string()));
        assert_eq!(
            node_event(within(5, persistent.next()).await.unwrap()),
            (EventType::NodeCreated, "/w/c".to_string())
        );
        reader.sync("/").await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(200), persistent.next()).await.is_err(), "nothing more");

        // Close: the ephemeral is gone when close returns.
        let closer = connect(&address).await;
        closer.create("/on-close", b"", CreateMode::Ephemeral, &acl).await.unwrap();
        closer.close().await.unwrap();
        assert_eq!(reader.exists("/on-close").await.unwrap(), None);

        // Expiry: a client whose runtime dies without closing loses its ephemeral after the timeout.
        let address2 = address.clone();
        let victim = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let c = Client::connect(&address2, options(1000)).await.expect("connect");
                c.create("/on-expiry", b"", CreateMode::Ephemeral, &Acl::open_unsafe()).await.expect("create");
                // Never closed: the runtime is dropped with the client's task in it.
                std::mem::forget(c);
            });
        });
        within(10, async {
            while !victim.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        victim.join().expect("victim thread");
        assert!(reader.exists("/on-expiry").await.unwrap().is_some());
        eventually(15, "the expired session's ephemeral vanishes", || async {
            reader.exists("/on-expiry").await.unwrap().is_none()
        })
        .await;
    });
}

#[test]
fn session_and_watches_survive_sigkill_and_restart_of_the_server() {
    let mut ensemble = Ensemble::start(1);
    let address = ensemble.grpc_all();
    runtime().block_on(async {
        let c = Client::connect(&address, options(8000).with_digest_auth("bob", "pw")).await.unwrap();
        let acl = Acl::open_unsafe();
        c.create("/r", b"0", CreateMode::Persistent, &acl).await.unwrap();
        c.create("/mine", b"", CreateMode::Ephemeral, &acl).await.unwrap();
        c.create("/bobs", b"", CreateMode::Persistent, &Acl::creator_all()).await.unwrap();
        let (_, _, data_watch) = c.get_data_and_watch("/r").await.unwrap();
        let (_, exist_watch) = c.exists_and_watch("/later").await.unwrap();
        let mut persistent = c.add_watch("/r", AddWatchMode::Persistent).await.unwrap();
        let session = c.session_id();
        let mut states = c.state_stream();

        tokio::task::block_in_place(|| ensemble.kill(1));
        assert_eq!(within(10, states.next()).await, Some(ConnectionState::Disconnected));
        tokio::task::block_in_place(|| ensemble.spawn(1));
        assert_eq!(within(20, states.next()).await, Some(ConnectionState::Connected));
        assert_eq!(c.session_id(), session);
        assert!(c.exists("/mine").await.unwrap().is_some(), "the session survived, with its ephemeral");
        c.get_data("/bobs").await.expect("auth was re-added");

        let writer = connect(&address).await;
        writer.set_data("/r", b"1", ANY_VERSION).await.unwrap();
        writer.create("/later", b"", CreateMode::Persistent, &acl).await.unwrap();
        assert_eq!(node_event(within(10, data_watch).await), (EventType::NodeDataChanged, "/r".to_string()));
        assert_eq!(node_event(within(10, exist_watch).await), (EventType::NodeCreated, "/later".to_string()));
        let mut events = Vec::new();
        while events.len() < 3 {
            events.push(within(10, persistent.next()).await.expect("a watch event"));
        }
        assert_eq!(events[0], WatchedEvent::State(ConnectionState::Disconnected));
        assert_eq!(events[1], WatchedEvent::State(ConnectionState::Connected));
        assert_eq!(node_event(events[2].clone()).0, EventType::NodeDataChanged);
    });
}

#[test]
fn the_session_moves_to_another_member_when_its_server_dies() {
    let mut ensemble = Ensemble::start(3);
    let all = ensemble.grpc_all();
    runtime().block_on(async {
        let c = Client::connect(&all, options(8000)).await.unwrap();
        let acl = Acl::open_unsafe();
        c.create("/f", b"0", CreateMode::Persistent, &acl).await.unwrap();
        c.create("/f-eph", b"", CreateMode::Ephemeral, &acl).await.unwrap();
        let (_, _, watch) = c.get_data_and_watch("/f").await.unwrap();
        let session = c.session_id();
        let first = c.server();
        let victim = ensemble.members.iter().find(|m| m.ports.grpc.to_string() == first).map(|m| m.id).expect("member");
        // Subscribed before the kill: the client may be connected elsewhere
        // again before this task looks, and a `watch` would miss the dip.
        let mut states = c.state_stream();
        tokio::task::block_in_place(|| ensemble.kill(victim));
        assert_eq!(within(10, states.next()).await, Some(ConnectionState::Disconnected));
        assert_eq!(within(30, states.next()).await, Some(ConnectionState::Connected));
        assert_ne!(c.server(), first, "resumed on another member");
        assert_eq!(c.session_id(), session);
        let survivors: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != victim).collect();
        let writer = Client::connect(&ensemble.grpc(&survivors), options(6000)).await.unwrap();
        writer.set_data("/f", b"1", ANY_VERSION).await.unwrap();
        assert_eq!(node_event(within(10, watch).await), (EventType::NodeDataChanged, "/f".to_string()));
        assert!(writer.exists("/f-eph").await.unwrap().is_some(), "the session and its ephemeral live on");
        c.close().await.unwrap();
        // The writer's member may apply the close a moment after c's member
        // did (reads are sequentially consistent): sync first.
        writer.sync("/").await.unwrap();
        assert_eq!(writer.exists("/f-eph").await.unwrap(), None);
    });
}

/// zkctl against `server` with JSON output, a 5 s timeout and no stdin.
fn zkctl_command(server: &str, args: &[&str]) -> Command {
    let mut command = Command::new(crate::support::cli_binary());
    command
        .args(["--server", server, "--timeout-ms", "5000", "--json"])
        .args(args)
        .env_remove("ZKCTL_SERVER")
        .stdin(Stdio::null());
    command
}

/// Runs zkctl to its end.
fn zkctl(server: &str, args: &[&str]) -> Output {
    zkctl_command(server, args).output().expect("run zkctl")
}

/// Starts zkctl in the background, its output piped.
fn zkctl_spawn(server: &str, args: &[&str]) -> std::process::Child {
    zkctl_command(server, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start zkctl")
}

/// Every stdout line as JSON.
fn docs(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

fn error_code(out: &Output) -> i64 {
    let text = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("stderr not JSON: {text:?}: {e}"));
    doc["error"]["code"].as_i64().unwrap_or_else(|| panic!("no code in {doc}"))
}

fn ok(out: &Output) -> Vec<Value> {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    docs(out)
}

#[test]
fn zkctl_prints_json_and_exits_by_error_kind() {
    let ensemble = Ensemble::start(1);
    let s = ensemble.grpc_all();
    let s = s.as_str();
    assert_eq!(ok(&zkctl(s, &["create", "/c", "hello"]))[0]["path"], "/c");
    let seq = ok(&zkctl(s, &["create", "-s", "/c/n-"]));
    assert_eq!(seq[0]["path"], "/c/n-0000000000");
    let dup = zkctl(s, &["create", "/c"]);
    assert_eq!((dup.status.code(), error_code(&dup)), (Some(1), -110));
    let got = ok(&zkctl(s, &["get", "-s", "/c"]));
    assert_eq!((got[0]["data"].as_str(), got[0]["stat"]["numChildren"].as_i64()), (Some("hello"), Some(1)));
    let missing = zkctl(s, &["get", "/missing"]);
    assert_eq!((missing.status.code(), error_code(&missing)), (Some(1), -101));
    assert_eq!(ok(&zkctl(s, &["set", "-v", "0", "/c", "bye"]))[0]["stat"]["version"], 1);
    let stale = zkctl(s, &["set", "-v", "0", "/c", "x"]);
    assert_eq!((stale.status.code(), error_code(&stale)), (Some(1), -103));
    assert_eq!(ok(&zkctl(s, &["ls", "/c"]))[0]["children"], serde_json::json!(["n-0000000000"]));
    let tree = ok(&zkctl(s, &["ls", "-R", "/"]));
    assert!(tree[0]["children"].as_array().unwrap().iter().any(|p| p == "/c/n-0000000000"));
    assert_eq!(ok(&zkctl(s, &["stat", "/c"]))[0]["stat"]["dataLength"], 3);
    assert_eq!(ok(&zkctl(s, &["count", "/c"]))[0]["count"], 1);
    assert_eq!(ok(&zkctl(s, &["sync", "/c"]))[0]["synced"], "/c");
    let acl = ok(&zkctl(s, &["getacl", "/c"]));
    assert_eq!(acl[0]["acl"][0]["perms"], "cdrwa");
    ok(&zkctl(s, &["create", "/ro"]));
    assert_eq!(ok(&zkctl(s, &["setacl", "-v", "0", "/ro", "world:anyone:r"]))[0]["stat"]["aversion"], 1);
    assert_eq!(ok(&zkctl(s, &["getacl", "/ro"]))[0]["acl"][0]["perms"], "r");
    let denied = zkctl(s, &["set", "/ro", "x"]);
    assert_eq!((denied.status.code(), error_code(&denied)), (Some(1), -102));
    let who = ok(&zkctl(s, &["--auth", "digest:alice:pw", "whoami"]));
    assert!(who[0]["identities"].as_array().unwrap().iter().any(|i| i["scheme"] == "digest"));
    let added = ok(&zkctl(s, &["addauth", "digest", "alice:pw"]));
    assert!(added[0]["identities"].as_array().unwrap().iter().any(|i| i["scheme"] == "digest"));
    let bad_auth = zkctl(s, &["addauth", "nosuch", "x"]);
    assert_eq!((bad_auth.status.code(), error_code(&bad_auth)), (Some(1), -115));
    assert_eq!(ok(&zkctl(s, &["ephemerals"]))[0]["ephemerals"], serde_json::json!([]));
    assert_eq!(ok(&zkctl(s, &["create", "-e", "/gone"]))[0]["path"], "/gone");
    let after = zkctl(s, &["stat", "/gone"]);
    assert_eq!(error_code(&after), -101, "an ephemeral of zkctl lives as long as its invocation");
    let not_empty = zkctl(s, &["delete", "/c"]);
    assert_eq!((not_empty.status.code(), error_code(&not_empty)), (Some(1), -111));
    assert!(ok(&zkctl(s, &["rm", "-r", "/c"]))[0]["deleted"].as_array().unwrap().len() == 2);
    assert_eq!(error_code(&zkctl(s, &["stat", "/c"])), -101);
    // Usage errors exit 2 (clap's own, and ours after parsing); connection problems 3.
    assert_eq!(zkctl(s, &["frobnicate"]).status.code(), Some(2));
    assert_eq!(zkctl(s, &["setacl", "/", "world:anyone:xyz"]).status.code(), Some(2));
    assert_eq!(zkctl(s, &["create", "-c", "-e", "/x"]).status.code(), Some(2));
    let unreachable = Command::new(crate::support::cli_binary())
        .args(["--server", "127.0.0.1:1", "--timeout-ms", "300", "--json", "ls", "/"])
        .output()
        .expect("run zkctl");
    assert_eq!((unreachable.status.code(), error_code(&unreachable)), (Some(3), -4));

    // watch --count and get -w print the events a concurrent writer causes.
    ok(&zkctl(s, &["create", "/wt", "0"]));
    let watcher = zkctl_spawn(s, &["watch", "--recursive", "--count", "2", "/wt"]);
    let getter = zkctl_spawn(s, &["get", "-w", "/wt"]);
    // Writes until both have seen enough (each started its watch at some point meanwhile).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    let mut watcher = Some(watcher);
    let mut getter = Some(getter);
    let mut outputs = Vec::new();
    while watcher.is_some() || getter.is_some() {
        assert!(Instant::now() < deadline, "zkctl watchers did not finish");
        i += 1;
        ok(&zkctl(s, &["set", "/wt", &i.to_string()]));
        std::thread::sleep(Duration::from_millis(100));
        for slot in [&mut watcher, &mut getter] {
            if let Some(child) = slot {
                if child.try_wait().expect("try_wait").is_some() {
                    outputs.push(slot.take().expect("present").wait_with_output().expect("output"));
                }
            }
        }
    }
    for out in &outputs {
        let lines = ok(out);
        let events: Vec<&Value> = lines.iter().filter(|d| d.get("event").is_some()).collect();
        assert!(!events.is_empty(), "{lines:?}");
        assert!(events.iter().all(|e| e["event"]["type"] == "NodeDataChanged" && e["event"]["path"] == "/wt"));
    }
}

/// Waits (bounded) for a background zkctl; kills it by PID and fails if it runs on.
fn finish(mut child: std::process::Child, secs: u64) -> Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("collect zkctl's output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("collect zkctl's output");
    panic!("zkctl still running after {secs}s; stderr: {}", String::from_utf8_lossy(&out.stderr));
}

/// Polls `check` (bounded) until it holds.
fn wait_until(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not within {secs}s");
}

fn children_count(server: &str, path: &str) -> usize {
    let out = zkctl(server, &["ls", path]);
    if out.status.code() != Some(0) {
        return 0;
    }
    docs(&out).first().and_then(|d| d["children"].as_array().map(|c| c.len())).unwrap_or(0)
}

#[test]
fn zkctl_lock_runs_commands_one_at_a_time_and_elect_hands_over() {
    let ensemble = Ensemble::start(1);
    let s = ensemble.grpc_all();
    let s = s.as_str();

    // The command's exit code is zkctl's; the lock is released afterwards.
    let out = zkctl(s, &["lock", "/l", "--", "sh", "-c", "test -n \"$ZKCTL_LOCK_NODE\" && exit 3"]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(docs(&out)[0]["locked"], "/l");
    assert_eq!(children_count(s, "/l"), 0);

    // Three commands under one lock never overlap.
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("log");
    let script = format!("echo start >> '{0}'; sleep 0.2; echo end >> '{0}'", log.display());
    let runs: Vec<_> = (0..3).map(|_| zkctl_spawn(s, &["lock", "/l", "--", "sh", "-c", &script])).collect();
    for run in runs {
        let out = finish(run, 30);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    let lines = std::fs::read_to_string(&log).expect("the commands' log");
    assert_eq!(lines, "start\nend\n".repeat(3), "commands overlapped");

    // --wait-ms gives up on a held lock with OperationTimeout.
    let holder = zkctl_spawn(s, &["lock", "/l", "--", "sleep", "2"]);
    wait_until(10, "the holder takes the lock", || children_count(s, "/l") == 1);
    let out = zkctl(s, &["lock", "--wait-ms", "200", "/l"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(error_code(&out), ErrorCode::OperationTimeout.code() as i64);
    assert_eq!(finish(holder, 30).status.code(), Some(0));

    // A candidate leads until SIGTERM, then resigns at once.
    let leader_of = || docs(&zkctl(s, &["elect", "--leader", "/e"]))[0]["leader"].clone();
    assert_eq!(leader_of(), Value::Null);
    let candidate = zkctl_spawn(s, &["elect", "/e", "node-a"]);
    wait_until(10, "node-a leads", || leader_of()["data"] == "node-a");
    let _ = Command::new("kill").arg("-TERM").arg(candidate.id().to_string()).status();
    let out = finish(candidate, 10);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(docs(&out)[0]["elected"], "/e");
    assert_eq!(leader_of(), Value::Null, "the candidate resigned on SIGTERM");

    let out = zkctl(s, &["elect", "/e"]);
    assert_eq!(out.status.code(), Some(2), "campaigning needs a value");
}

/// zkctl with no command is a shell on one session: driven here in a
/// pseudo-terminal, as a person types (tab completion of commands and paths,
/// errors that leave the shell running, history kept in a file, and the
/// session's ephemerals gone once it quits).
#[test]
fn zkctl_without_a_command_is_an_interactive_shell() {
    let ensemble = Ensemble::start(1);
    let server = ensemble.grpc(&[1]);
    let history = tempfile::tempdir().expect("temp dir");
    let history_file = history.path().join("history");
    let mut command = Command::new(crate::support::cli_binary());
    command.args(["--server", &server]).env_remove("ZKCTL_SERVER").env("ZKCTL_HISTORY", &history_file);
    let mut shell = rexpect::session::spawn_command(command, Some(15_000)).expect("start zkctl in a pty");
    let prompt = format!("[zkctl: {server}] ");
    shell.exp_string(&prompt).expect("the prompt");
    shell.send_line("create /shell hello").expect("type");
    shell.exp_string("/shell").expect("the created path");
    shell.exp_string(&prompt).expect("the prompt again");
    shell.send_line("create -e /shell/eph x").expect("type");
    shell.exp_string(&prompt).expect("the prompt again");
    // "cre" completes to the command, "/sh" to the path.
    // Keys without a newline must be flushed to reach the terminal.
    shell.send("cre\t").expect("type");
    shell.flush().expect("type");
    shell.exp_string("create").expect("the command completed");
    shell.send(" -e /sh\t").expect("type");
    shell.flush().expect("type");
    shell.exp_string("/shell").expect("the path completed");
    shell.send("/second y\r").expect("type");
    shell.flush().expect("type");
    shell.exp_string("/shell/second").expect("created through the completed line");
    shell.exp_string(&prompt).expect("the prompt again");
    shell.send_line("get /shell").expect("type");
    shell.exp_string("hello").expect("the data");
    shell.send_line("frobnicate").expect("type");
    shell.exp_string("unrecognized subcommand").expect("a usage error");
    shell.exp_string(&prompt).expect("the shell goes on");
    shell.send_line("ls /shell").expect("type");
    shell.exp_string("eph").expect("the children, ephemerals of this session included");
    shell.send_line("quit").expect("type");
    shell.exp_eof().expect("the shell ends");

    let saved = std::fs::read_to_string(&history_file).expect("the history file");
    assert!(saved.contains("create /shell hello") && saved.contains("get /shell"), "{saved}");
    // One session for the whole shell: its ephemerals went when it quit.
    let after = ok(&zkctl(&server, &["ls", "/shell"]));
    assert_eq!(after[0]["children"], serde_json::json!([]), "{after:?}");
}
