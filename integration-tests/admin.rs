//! Operating a 3-member ensemble of real processes through the admin API,
//! `zkctl admin` and `/metrics`:
//!
//! * once quiet, `status --all` shows exactly one leader and no lag, every
//!   member lists the same log entries (zxids and payloads), the filters
//!   pick the right ones, and the offline reader prints what the RPC printed;
//! * `/metrics` parses as Prometheus text and its counters move with the
//!   workload; sessions and watches are listed where they are attached;
//! * the follow stream delivers every committed write exactly once and in
//!   order across a leader kill -9;
//! * a snapshot taken by RPC is listed with its real node count, saved to a
//!   file, inspected, and a member whose data is lost recovers from it;
//! * a configured admin token is enforced; JSON logs carry the member's span.
//!
//! Every wait is bounded; the harness stops every process by PID.

use crate::support::{cli_binary, connect, runtime, serial, Ensemble, Settings};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zabkeeper_client::MultiOp;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_proto::admin as pb;
use zabkeeper_proto::admin::admin_client::AdminClient;

/// Runs `zkctl ARGS` against member `id`'s admin port.
fn zkctl(ensemble: &Ensemble, id: u64, args: &[&str]) -> Output {
    ensemble.zkctl(id, args)
}

/// The JSON documents `zkctl --json admin ARGS` printed, one per line; panics with its stderr on failure.
fn zkctl_json(ensemble: &Ensemble, id: u64, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json", "admin"];
    all.extend_from_slice(args);
    let out = zkctl(ensemble, id, &all);
    assert!(out.status.success(), "zkctl {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

async fn admin(ensemble: &Ensemble, id: u64) -> AdminClient<tonic::transport::Channel> {
    AdminClient::connect(format!("http://{}", ensemble.admin(id))).await.expect("admin connects")
}

/// Every entry of member `id`'s log as (zxid, type, ops), through the RPC.
async fn log_of(ensemble: &Ensemble, id: u64) -> Vec<(u64, String, Vec<pb::TxnOp>)> {
    let mut client = admin(ensemble, id).await;
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let page = client
            .read_log(pb::ReadLogRequest { from_zxid: from, limit: 10_000, ..Default::default() })
            .await
            .expect("read log")
            .into_inner();
        out.extend(page.entries.into_iter().map(|e| (e.zxid, e.r#type, e.ops)));
        if page.next_zxid == 0 {
            return out;
        }
        from = page.next_zxid;
    }
}

/// Waits (bounded) until `check` holds.
fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not within {limit:?}");
}

/// `GET /metrics` over plain HTTP/1.0.
pub(crate) fn scrape(ensemble: &Ensemble, id: u64) -> String {
    let addr = ensemble.members[id as usize - 1].ports.metrics;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("metrics port");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain"), "{head}");
    body.to_string()
}

/// Parses Prometheus text: every line a comment or `name{labels} value`.
pub(crate) fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "unclosed labels in {line}");
        }
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line}"));
        out.insert(series.to_string(), value);
    }
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF");
    out
}

fn creates_ok(ensemble: &Ensemble) -> f64 {
    ensemble
        .ids()
        .iter()
        .map(|id| {
            samples(&scrape(ensemble, *id))
                .get("zabkeeper_requests_total{op=\"create\",result=\"ok\"}")
                .copied()
                .unwrap_or(0.0)
        })
        .sum()
}

#[test]
fn one_leader_the_same_log_everywhere_filters_metrics_sessions_and_the_offline_reader() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let acl = Acl::open_unsafe();
    let rt = runtime();
    let (watcher_session, ephemeral, _watch) = rt.block_on(async {
        let c = connect(&ensemble.grpc_all()).await;
        c.create("/app", b"", CreateMode::Persistent, &acl).await.expect("create /app");
        for i in 0..20 {
            c.create(&format!("/app/n-{i}"), format!("v-{i}").as_bytes(), CreateMode::Persistent, &acl)
                .await
                .expect("create");
        }
        for i in 0..5 {
            c.set_data(&format!("/app/n-{i}"), format!("w-{i}").as_bytes(), -1).await.expect("set");
        }
        for i in 17..20 {
            c.delete(&format!("/app/n-{i}"), -1).await.expect("delete");
        }
        let ops = [
            MultiOp::create("/app/m", b"multi", CreateMode::Persistent, &acl),
            MultiOp::set_data("/app/n-5", b"in-multi", -1),
        ];
        c.multi(&ops).await.expect("multi");
        // A session on member 1 alone, with an ephemeral and a watch.
        let on_one = connect(&ensemble.grpc(&[1])).await;
        let path = on_one.create("/app/e-", b"", CreateMode::EphemeralSequential, &acl).await.expect("ephemeral");
        let (_, watch) = on_one.exists_and_watch("/app/watched").await.expect("watch");
        (on_one, path, watch)
    });

    // Quiet: one leader, every follower at lag 0, every member applied the same.
    until("one leader and no lag", Duration::from_secs(15), || {
        let rows = zkctl_json(&ensemble, 2, &["status", "--all"]);
        let leaders = rows.iter().filter(|r| r["status"]["role"] == "leader").count();
        let applied: BTreeSet<String> =
            rows.iter().map(|r| r["status"]["last_applied_zxid"].as_str().unwrap_or("?").to_string()).collect();
        rows.len() == 3 && leaders == 1 && rows.iter().all(|r| r["lag"] == "0") && applied.len() == 1
    });
    let text = zkctl(&ensemble, 1, &["admin", "status", "--all"]);
    let table = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(table.starts_with("ID  ROLE"), "{table}");
    assert_eq!(table.matches("leader ").count(), 1, "{table}");

    let logs: Vec<_> = rt.block_on(async {
        let mut logs = Vec::new();
        for id in ensemble.ids() {
            logs.push(log_of(&ensemble, id).await);
        }
        logs
    });
    assert!(logs[0].len() >= 31, "the workload's transactions are logged: {}", logs[0].len());
    assert_eq!(logs[0], logs[1], "members 1 and 2 list the same entries");
    assert_eq!(logs[0], logs[2], "members 1 and 3 list the same entries");
    let set = logs[0].iter().find(|(_, t, ops)| t == "setData" && ops[0].path == "/app/n-3").expect("a setData");
    assert_eq!(set.2[0].data, b"w-3");
    let multi = logs[0].iter().find(|(_, t, _)| t == "multi").expect("the multi");
    assert_eq!(multi.2.iter().map(|o| o.r#type.as_str()).collect::<Vec<_>>(), ["create", "setData"]);

    // Filters and one entry by zxid.
    let only = zkctl_json(&ensemble, 3, &["log", "--path", "/app/n-1", "--type", "setData", "--limit", "1000"]);
    assert_eq!(only.iter().map(|e| e["ops"][0]["path"].as_str().unwrap_or("")).collect::<Vec<_>>(), ["/app/n-1"]);
    assert_eq!(only[0]["ops"][0]["data"]["text"], "w-1");
    assert_eq!(only[0]["committed"], true);
    let last = zkctl_json(&ensemble, 3, &["log", "--last", "2"]);
    assert_eq!(last.len(), 2);
    let zxid = format!("{:#x}", set.0);
    let shown = zkctl_json(&ensemble, 1, &["log", "show", &zxid]);
    assert_eq!((shown[0]["zxid"].as_str(), shown[0]["type"].as_str()), (Some(zxid.as_str()), Some("setData")));

    // Sessions and watches where they are attached.
    let sessions = zkctl_json(&ensemble, 1, &["sessions", "--all"]);
    let mine = format!("{:#x}", watcher_session.session_id());
    let row = sessions.iter().find(|s| s["session"] == mine.as_str()).expect("the session is listed");
    assert_eq!(row["member"], 1);
    assert_eq!(row["ephemerals"][0], ephemeral.as_str());
    let watches = zkctl_json(&ensemble, 1, &["watches"]);
    assert!(watches.iter().any(|w| w["session"] == mine.as_str() && w["paths"][0] == "/app/watched"), "{watches:?}");
    let by_path = zkctl_json(&ensemble, 1, &["watches", "--by-path"]);
    assert!(by_path.iter().any(|w| w["path"] == "/app/watched" && w["sessions"][0] == mine.as_str()), "{by_path:?}");

    // Metrics parse, and their counters move with the workload.
    let before = creates_ok(&ensemble);
    assert!(before >= 21.0, "the creates so far are counted: {before}");
    rt.block_on(async {
        let c = connect(&ensemble.grpc_all()).await;
        for i in 0..10 {
            c.create(&format!("/app/more-{i}"), b"", CreateMode::Persistent, &acl).await.expect("create");
        }
    });
    assert_eq!(creates_ok(&ensemble) - before, 10.0);
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(5)));
    let m = samples(&scrape(&ensemble, leader));
    assert_eq!(m.get("zabkeeper_is_leader"), Some(&1.0));
    assert!(m.get("zabkeeper_proposal_commit_duration_seconds_count").is_some_and(|n| *n >= 10.0), "{m:?}");
    assert!(m.get("zabkeeper_fsync_duration_seconds_count").is_some_and(|n| *n > 0.0));
    assert!(m.keys().any(|k| k.starts_with("zabkeeper_follower_lag_transactions{follower=")), "{m:?}");
    // The server runs jemalloc, which reports its heap.
    let allocated = m.get("zabkeeper_heap_allocated_bytes").copied().unwrap_or(0.0);
    let resident = m.get("zabkeeper_heap_resident_bytes").copied().unwrap_or(0.0);
    assert!(allocated > 1e5 && resident >= allocated, "heap allocated {allocated}, resident {resident}: {m:?}");
    // Three members on one machine share its CPUs (no `worker_threads` set).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(m.get("zabkeeper_runtime_workers"), Some(&((cpus / 3).max(1) as f64)), "{cpus} CPUs: {m:?}");

    // The offline reader prints what the RPC printed.
    drop(_watch);
    rt.block_on(watcher_session.close()).expect("close the session");
    until("member 3 caught up", Duration::from_secs(10), || {
        rt.block_on(async { log_of(&ensemble, 3).await.len() == log_of(&ensemble, leader).await.len() })
    });
    let online = zkctl_json(&ensemble, 3, &["log", "--limit", "10000"]);
    assert!(ensemble.terminate(3).is_some_and(|s| s.success()), "member 3 stops cleanly");
    let dir = ensemble.data_dir(3);
    let offline = zkctl_json(&ensemble, 3, &["log", "--limit", "10000", "--data-dir", dir.to_str().expect("utf-8")]);
    let strip = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .map(|d| {
                let mut d = d.clone();
                d.as_object_mut().expect("an object").remove("committed");
                d
            })
            .collect()
    };
    let (offline_entries, online_entries) = (strip(&offline), strip(&online));
    assert_eq!(offline_entries.len(), online_entries.len(), "as many entries offline as online");
    for (off, on) in offline_entries.iter().zip(&online_entries) {
        assert_eq!(off, on, "offline and online readers agree");
    }
    assert!(offline.iter().all(|d| d["committed"].is_null()), "offline, commitment is unknown and said so");
}

/// The answer to a four-letter word on member `id`'s ZooKeeper port.
fn four_letter(ensemble: &Ensemble, id: u64, word: &str) -> String {
    let addr = ensemble.members[id as usize - 1].ports.client;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("client port");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(word.as_bytes()).expect("send the word");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `mntr` as monitoring agents read it: one `key<TAB>value` per line.
fn mntr(ensemble: &Ensemble, id: u64) -> BTreeMap<String, String> {
    four_letter(ensemble, id, "mntr")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap_or_else(|| panic!("mntr line without a tab: {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn four_letter_words_tell_the_truth_in_the_formats_tools_parse() {
    let _serial = serial();
    let ensemble = Ensemble::start(3);
    let rt = runtime();
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let follower = ensemble.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let acl = Acl::open_unsafe();
    let (client, _watch) = rt.block_on(async {
        let c = connect(&ensemble.grpc(&[follower])).await;
        c.create("/w", b"x", CreateMode::Persistent, &acl).await.expect("create");
        let (_, _, watch) = c.get_data_and_watch("/w").await.expect("getData");
        (c, watch)
    });
    let session = format!("sid=0x{:x},", client.session_id());

    let m = mntr(&ensemble, leader);
    assert_eq!(m["zk_server_state"], "leader");
    assert_eq!((m["zk_followers"].as_str(), m["zk_synced_followers"].as_str()), ("2", "2"), "{m:?}");
    assert!(m["zk_pending_syncs"].parse::<u64>().is_ok(), "{m:?}");
    for key in ["zk_znode_count", "zk_watch_count", "zk_num_alive_connections", "zk_outstanding_requests"] {
        assert!(m[key].parse::<u64>().is_ok(), "{key} in {m:?}");
    }
    let f = mntr(&ensemble, follower);
    assert_eq!(f["zk_server_state"], "follower");
    assert!(!f.contains_key("zk_followers"), "only a leader counts followers");
    assert_eq!(f["zk_watch_count"], "1");

    let srvr = four_letter(&ensemble, follower, "srvr");
    assert!(srvr.starts_with("Zookeeper version: "), "{srvr}");
    assert!(srvr.lines().any(|l| l == "Mode: follower"), "{srvr}");
    assert!(srvr.lines().any(|l| l.strip_prefix("Node count: ").is_some_and(|n| n.parse::<u64>().is_ok())), "{srvr}");

    // The connection's own figures, as ZooKeeper's dumpConnectionInfo prints them.
    let cons = four_letter(&ensemble, follower, "cons");
    let line = cons.lines().find(|l| l.contains(&session)).unwrap_or_else(|| panic!("{session} in {cons}"));
    assert!(line.starts_with(" /127.0.0.1:") && line.contains("[1](queued=0,recved="), "{line}");
    let field = |name: &str| -> String {
        let start = line.find(&format!("{name}=")).unwrap_or_else(|| panic!("{name} in {line}")) + name.len() + 1;
        line[start..].split([',', ')']).next().expect("a value").to_string()
    };
    assert!(field("recved").parse::<u64>().is_ok_and(|n| n >= 2), "{line}");
    assert_eq!(field("lop"), "GETD", "{line}");
    assert_eq!(field("to"), "20000", "{line}");
    assert!(field("lzxid").starts_with("0x") && field("lzxid") != "0xffffffffffffffff", "{line}");
    assert!(field("est").parse::<i64>().is_ok_and(|t| t > 1_600_000_000_000), "{line}");
    for lat in ["llat", "minlat", "avglat", "maxlat"] {
        assert!(field(lat).parse::<u64>().is_ok(), "{lat} in {line}");
    }
    let stat = four_letter(&ensemble, follower, "stat");
    assert!(stat.starts_with("Zookeeper version: ") && stat.contains("\nClients:\n"), "{stat}");
    assert!(stat.lines().any(|l| l.starts_with(" /127.0.0.1:") && l.ends_with(")") && !l.contains("sid=")), "{stat}");
    assert!(stat.lines().any(|l| l == "Mode: follower"), "{stat}");

    let conf = four_letter(&ensemble, follower, "conf");
    let conf: BTreeMap<&str, &str> = conf.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(conf.get("maxClientCnxns"), Some(&"60"), "the per-address limit, as ZooKeeper means it");
    assert_eq!(conf.get("tickTime"), Some(&"50"));
    let wchs = four_letter(&ensemble, follower, "wchs");
    assert_eq!(wchs, "1 connections watching 1 paths\nTotal watches:1\n");
    assert_eq!(four_letter(&ensemble, follower, "ruok"), "imok");
    drop(client);
}

#[test]
fn the_follow_stream_delivers_every_commit_once_in_order_across_a_leader_kill() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let rt = runtime();
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let followers: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != leader).collect();
    let watched = followers[0];
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let received = rt.block_on(async {
        let mut stream = admin(&ensemble, watched)
            .await
            .follow(pb::FollowRequest { from_zxid: 0, path_prefix: "/f".into(), ..Default::default() })
            .await
            .expect("follow")
            .into_inner();
        let writer = {
            let acked = acked.clone();
            let address = ensemble.grpc(&followers);
            tokio::spawn(async move {
                let c = connect(&address).await;
                let acl = Acl::open_unsafe();
                let deadline = Instant::now() + Duration::from_secs(40);
                let _ = c.create("/f", b"", CreateMode::Persistent, &acl).await;
                for i in 0..300 {
                    if Instant::now() > deadline {
                        break;
                    }
                    let path = format!("/f/{i:04}");
                    // A write lost in the failover is retried; "exists" means
                    // the first attempt did commit.
                    for _ in 0..50 {
                        match c.create(&path, b"x", CreateMode::Persistent, &acl).await {
                            Ok(_) => {
                                acked.lock().expect("lock").push(path.clone());
                                break;
                            }
                            Err(e) if e.to_string().contains("NodeExists") => {
                                acked.lock().expect("lock").push(path.clone());
                                break;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                }
            })
        };
        let mut received: Vec<pb::LogEntry> = Vec::new();
        let mut killed = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = writer.is_finished();
            match tokio::time::timeout(Duration::from_millis(500), stream.message()).await {
                Ok(Ok(Some(e))) => received.push(e),
                Ok(other) => panic!("the stream on a follower ended across the failover: {other:?}"),
                Err(_) if done => break,
                Err(_) => {}
            }
            if !killed && acked.lock().expect("lock").len() >= 100 {
                tokio::task::block_in_place(|| ensemble.kill(leader));
                killed = true;
            }
            assert!(Instant::now() < deadline, "bounded");
        }
        assert!(killed, "the leader was killed mid-run");
        received
    });
    let zxids: Vec<u64> = received.iter().map(|e| e.zxid).collect();
    assert!(zxids.windows(2).all(|w| w[0] < w[1]), "in order, no duplicate: {zxids:?}");
    assert!(received.iter().all(|e| e.committed), "only committed entries are streamed");
    let created: Vec<String> =
        received.iter().flat_map(|e| e.ops.iter()).filter(|o| o.r#type == "create").map(|o| o.path.clone()).collect();
    let unique: BTreeSet<&String> = created.iter().collect();
    assert_eq!(unique.len(), created.len(), "each create delivered once");
    let acked = acked.lock().expect("lock").clone();
    assert!(acked.len() >= 150, "the workload went on after the failover: {}", acked.len());
    for path in &acked {
        assert!(unique.contains(path), "acknowledged {path} was not streamed");
    }
}

#[test]
fn a_snapshot_is_listed_saved_inspected_and_restores_a_member() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let acl = Acl::open_unsafe();
    let rt = runtime();
    rt.block_on(async {
        let c = connect(&ensemble.grpc_all()).await;
        c.create("/s", b"", CreateMode::Persistent, &acl).await.expect("create /s");
        for i in 0..50 {
            c.create(&format!("/s/{i}"), b"kept", CreateMode::Persistent, &acl).await.expect("create");
        }
        c.sync("/").await.expect("sync");
    });
    until("member 2 applied everything", Duration::from_secs(10), || {
        rt.block_on(async { ensemble.status(2).await.is_some_and(|s| s.node_count >= 51) })
    });
    let status = rt.block_on(ensemble.status(2)).expect("status");
    let taken = &zkctl_json(&ensemble, 2, &["snapshot", "take"])[0];
    assert_eq!(taken["nodes"].as_u64(), Some(status.node_count), "{taken}");
    let listed = zkctl_json(&ensemble, 2, &["snapshots"]);
    let entry = listed.iter().find(|s| s["zxid"] == taken["snapshot_zxid"]).expect("the new snapshot is listed");
    assert_eq!(entry["nodes"].as_u64(), Some(status.node_count));
    assert!(entry["created_ms"].as_i64().is_some_and(|t| t > 1_600_000_000_000), "{entry}");

    // Disk usage, by what the files hold, the same in status and /metrics.
    let usage = zkctl_json(&ensemble, 2, &["status"])[0]["disk_usage"].clone();
    let bytes = |kind: &str| usage[kind].as_u64().unwrap_or_else(|| panic!("no {kind} in {usage}"));
    assert!(bytes("log_bytes") > 0 && bytes("snapshot_bytes") > 0 && bytes("sled_bytes") > 0, "{usage}");
    let m = samples(&scrape(&ensemble, 2));
    let metric = |kind: &str| m.get(&format!("zabkeeper_disk_usage_bytes{{kind=\"{kind}\"}}")).copied();
    assert!(metric("snapshots").is_some_and(|b| b > 0.0), "{m:?}");
    let total: f64 = ["log", "snapshots", "sled", "other"].iter().filter_map(|k| metric(k)).sum();
    assert_eq!(m.get("zabkeeper_data_dir_size_bytes").copied(), Some(total), "the kinds add up to the whole");

    let file = ensemble.dir.path().join("saved.snap");
    let file_arg = file.to_str().expect("utf-8").to_string();
    let saved = &zkctl_json(&ensemble, 2, &["snapshot", "save", &file_arg])[0];
    assert_eq!(saved["nodes"].as_u64(), Some(status.node_count));
    let from_file = zkctl_json(&ensemble, 2, &["snapshot", "inspect", "--file", &file_arg, "--path", "/s/"]);
    let from_rpc = zkctl_json(&ensemble, 2, &["snapshot", "inspect", "--path", "/s/"]);
    assert_eq!(from_file.len(), 50);
    assert_eq!(from_file, from_rpc, "the file and the member's copy hold the same nodes");
    assert!(from_file.iter().all(|n| n["stat"]["dataLength"] == 4));

    // A write after the snapshot, then member 2 loses its disk and comes back from the file.
    rt.block_on(async {
        let c = connect(&ensemble.grpc_all()).await;
        c.create("/after", b"later", CreateMode::Persistent, &acl).await.expect("create /after");
    });
    ensemble.kill(2);
    let dir = ensemble.data_dir(2);
    std::fs::rename(&dir, dir.with_extension("lost")).expect("move the data aside");
    let restored =
        zkctl_json(&ensemble, 2, &["snapshot", "restore", &file_arg, "--data-dir", dir.to_str().expect("utf-8")]);
    assert_eq!(restored[0]["snapshot_zxid"], taken["snapshot_zxid"]);
    ensemble.spawn(2);
    ensemble.wait_serving(ensemble.ids(), Duration::from_secs(30));
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[2])).await;
        c.sync("/").await.expect("sync");
        assert_eq!(c.get_data("/s/7").await.expect("from the snapshot").0, b"kept");
        assert_eq!(c.get_data("/after").await.expect("caught up from the leader").0, b"later");
    });
    let purged = &zkctl_json(&ensemble, 1, &["purge", "--keep", "1"])[0];
    assert!(purged["snapshots_removed"].is_u64(), "{purged}");
    let refused = zkctl(&ensemble, 1, &["admin", "purge", "--keep", "0"]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
}

#[test]
fn the_admin_token_is_enforced_and_json_logs_carry_the_member() {
    let _serial = serial();
    let settings = Settings {
        size: 1,
        admin_token: Some("t0ken-for-tests".into()),
        extra: "log_format = \"json\"".into(),
        ..Settings::default()
    };
    let ensemble = Ensemble::start_with(settings);
    let without = zkctl(&ensemble, 1, &["admin", "status"]);
    assert_eq!(without.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(stderr.contains("token"), "{stderr}");
    let wrong = zkctl(&ensemble, 1, &["--admin-token", "guess", "admin", "status"]);
    assert_eq!(wrong.status.code(), Some(2));
    let right = zkctl(&ensemble, 1, &["--admin-token", "t0ken-for-tests", "admin", "status"]);
    assert!(right.status.success(), "{}", String::from_utf8_lossy(&right.stderr));
    let by_env = Command::new(cli_binary())
        .args(["--admin", &ensemble.admin(1), "admin", "status"])
        .env("ZKCTL_ADMIN_TOKEN", "t0ken-for-tests")
        .output()
        .expect("run zkctl");
    assert!(by_env.status.success(), "{}", String::from_utf8_lossy(&by_env.stderr));

    let log = ensemble.log(1);
    let lines: Vec<Value> =
        log.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert!(!lines.is_empty(), "JSON log lines: {log}");
    let role_change = lines.iter().find(|l| l["fields"]["message"] == "role changed").expect("a role change is logged");
    let spans = role_change["spans"].as_array().expect("the span list");
    assert!(spans.iter().any(|s| s["name"] == "replica" && s["id"] == 1), "{role_change}");
    assert!(spans.iter().any(|s| s["name"] == "zab" && s["epoch"].is_u64() && s["zxid"].is_string()), "{role_change}");
}

#[test]
fn worker_threads_sizes_the_runtime_a_member_serves_on() {
    let mut ensemble =
        Ensemble::start_with(Settings { size: 1, extra: "worker_threads = 1".into(), ..Settings::default() });
    let workers = |ensemble: &Ensemble| samples(&scrape(ensemble, 1)).get("zabkeeper_runtime_workers").copied();
    assert_eq!(workers(&ensemble), Some(1.0));
    let addr = ensemble.grpc_all();
    runtime().block_on(async {
        let client = connect(&addr).await;
        client.create("/one-worker", b"x", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        assert_eq!(client.get_data("/one-worker").await.unwrap().0, b"x");
    });
    // The environment overrides the file, as for every key.
    ensemble.terminate(1);
    ensemble.spawn_with_env(1, &[("ZABKEEPER_WORKER_THREADS", "3")]);
    assert_eq!(workers(&ensemble), Some(3.0));
}
