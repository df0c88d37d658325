//! Loading a tree into a running ensemble's empty one (admin RPC
//! `LoadTree`, `zkctl admin snapshot load`, the AdminServer's `restore`),
//! with real processes: a tree written on one 3-member ensemble, saved,
//! and loaded into another through a follower's address (zkctl finds the
//! leader). Every node arrives with its data, ACL and every Stat field on
//! every member, the source's open session and its ephemeral come along
//! (and expire there as ZooKeeper would, nobody resuming them), the next
//! write's zxid is above every loaded one, and a second load, or a body
//! that is no snapshot, is refused with its reason.

use crate::support::{connect, runtime, serial, Ensemble, Settings};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use zabkeeper_client::Client;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::{CreateMode, Stat};

/// Every node under `/` but ZooKeeper's own: path -> (data, Stat, ACL).
async fn tree(c: &Client) -> BTreeMap<String, (Vec<u8>, Stat, Vec<Acl>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_string()];
    while let Some(path) = stack.pop() {
        let (data, stat) = c.get_data(&path).await.unwrap_or_else(|e| panic!("get {path}: {e}"));
        let (acl, _) = c.get_acl(&path).await.unwrap_or_else(|e| panic!("getACL {path}: {e}"));
        for child in c.get_children(&path).await.unwrap_or_else(|e| panic!("children {path}: {e}")) {
            let child = if path == "/" { format!("/{child}") } else { format!("{path}/{child}") };
            if !child.starts_with("/zookeeper") {
                stack.push(child);
            }
        }
        out.insert(path, (data, stat, acl));
    }
    out
}

/// `zkctl --json admin ARGS` against member `id`: its documents, or its stderr.
fn zkctl_json(ensemble: &Ensemble, id: u64, args: &[&str]) -> Result<Vec<Value>, String> {
    let mut all = vec!["--json", "admin"];
    all.extend_from_slice(args);
    let out = ensemble.zkctl(id, &all);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect())
}

/// POSTs `body` to the AdminServer's `restore` on member `id`: status line and body.
fn restore(ensemble: &Ensemble, id: u64, body: &[u8]) -> (String, String) {
    let addr = ensemble.members[id as usize - 1].ports.metrics;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("http port");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let head = format!("POST /commands/restore HTTP/1.0\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

#[test]
fn a_saved_tree_loads_into_an_empty_ensemble_whole_and_writes_go_on_above_it() {
    let _serial = serial();
    let source = Ensemble::start(3);
    let rt = runtime();
    let open = Acl::open_unsafe();
    let (before, owner) = rt.block_on(async {
        let c = connect(&source.grpc_all()).await;
        c.create("/app", b"root", CreateMode::Persistent, &open).await.expect("create");
        for i in 0..30 {
            c.create(&format!("/app/n{i}"), &[i as u8; 3], CreateMode::Persistent, &open).await.expect("create");
        }
        for _ in 0..3 {
            c.create("/app/job-", b"", CreateMode::PersistentSequential, &open).await.expect("sequential");
        }
        c.delete("/app/n7", -1).await.expect("delete");
        c.set_data("/app/n3", b"changed", -1).await.expect("set");
        c.set_acl("/app/n4", &Acl::read_unsafe(), -1).await.expect("setACL");
        c.create("/app/lock", b"", CreateMode::Ephemeral, &open).await.expect("ephemeral");
        c.sync("/").await.expect("sync");
        let before = tree(&c).await;
        // The session stays open on the source while its tree is saved.
        let owner = c.session_id();
        std::mem::forget(c);
        (before, owner)
    });
    let file = source.dir.path().join("saved.snap");
    let file_arg = file.to_str().expect("utf-8");
    zkctl_json(&source, 1, &["snapshot", "take"]).expect("take");
    zkctl_json(&source, 1, &["snapshot", "save", file_arg]).expect("save");
    let loaded_max = before.values().map(|(_, s, _)| s.mzxid.max(s.czxid).max(s.pzxid)).max().expect("nodes");

    let target = Ensemble::start(3);
    let leader = rt.block_on(target.leader(Duration::from_secs(30)));
    let follower = target.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let (status, body) = restore(&target, follower, b"not a snapshot");
    assert!(status.contains(" 400 ") && body.contains("neither a snapshot"), "{status} {body}");

    let started = Instant::now();
    let done = zkctl_json(&target, follower, &["snapshot", "load", file_arg]).expect("load");
    assert_eq!(done[0]["nodes"].as_u64(), Some(before.len() as u64 + 3), "{done:?} (and ZooKeeper's 3 nodes)");
    assert!(done[0]["epoch"].as_u64().is_some_and(|e| e > loaded_max as u64 >> 32), "{done:?}");
    println!("loaded {} nodes in {:?}: {done:?}", before.len(), started.elapsed());

    rt.block_on(async {
        for id in target.ids() {
            let c = connect(&target.grpc(&[id])).await;
            c.sync("/").await.expect("sync");
            let after = tree(&c).await;
            // The root's child count and pzxid are the source's, as every other node's.
            assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "member {id}");
            for (path, want) in &before {
                assert_eq!(&after[path], want, "member {id}: {path}");
            }
        }
        let c = connect(&target.grpc_all()).await;
        assert_eq!(c.get_data("/app/lock").await.expect("the ephemeral came").1.ephemeral_owner, owner);
        let name = c.create("/app/job-", b"", CreateMode::PersistentSequential, &open).await.expect("create");
        let theirs = connect(&source.grpc_all()).await;
        let next = theirs.create("/app/job-", b"", CreateMode::PersistentSequential, &open).await.expect("create");
        assert_eq!(name, next, "the sequence continues where the source's does");
        let (_, stat) = c.get_data(&name).await.expect("read");
        assert!(stat.czxid > loaded_max, "new zxid {:#x} above every loaded one {loaded_max:#x}", stat.czxid);
        // Nobody resumes the loaded session: it expires, and its ephemeral with it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.exists("/app/lock").await.expect("exists").is_some() {
            assert!(Instant::now() < deadline, "the loaded session's ephemeral never expired");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });

    let refused = zkctl_json(&target, leader, &["snapshot", "load", file_arg]).expect_err("a second load");
    assert!(refused.contains("not empty") && refused.contains("/app"), "{refused}");
    let (status, body) = restore(&target, leader, &std::fs::read(&file).expect("the file"));
    assert!(status.contains(" 409 ") && body.contains("not empty"), "{status} {body}");
    assert!(target.panics().is_empty() && source.panics().is_empty());
}

/// Then, member 3 started and the node deleted again, the saved tree goes
/// back in through a follower's `restore`, which hands it to the leader as
/// ZooKeeper's can be asked of any server: the node returns as it was.
#[test]
fn a_load_is_refused_while_a_member_has_not_followed_the_leader() {
    let _serial = serial();
    // Member 3 never starts: the leader cannot know it reads a load.
    let mut ensemble = Ensemble::configure(Settings::default());
    ensemble.spawn(1);
    ensemble.spawn(2);
    let leader = ensemble.wait_serving(vec![1, 2], Duration::from_secs(30));
    let rt = runtime();
    let file = ensemble.dir.path().join("one.snap");
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[1, 2])).await;
        c.create("/x", b"", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("create");
    });
    let file_arg = file.to_str().expect("utf-8");
    zkctl_json(&ensemble, leader, &["snapshot", "take"]).expect("take");
    zkctl_json(&ensemble, leader, &["snapshot", "save", file_arg]).expect("save");
    let refused = zkctl_json(&ensemble, leader, &["snapshot", "load", file_arg]).expect_err("member 3 is unknown");
    assert!(refused.contains("member 3 has not followed this member"), "{refused}");

    let saved = rt.block_on(async {
        let c = connect(&ensemble.grpc(&[1, 2])).await;
        let (_, stat) = c.get_data("/x").await.expect("read");
        c.delete("/x", -1).await.expect("delete");
        stat
    });
    ensemble.spawn(3);
    let leader = ensemble.wait_serving(vec![1, 2, 3], Duration::from_secs(30));
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).expect("a follower");
    let (status, body) = restore(&ensemble, follower, &std::fs::read(&file).expect("the file"));
    assert!(status.contains(" 200 "), "{status} {body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(answer["error"], Value::Null, "{answer}");
    assert!(answer["epoch"].as_u64().is_some_and(|e| e > (saved.czxid as u64 >> 32)), "{answer}");
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[3])).await;
        c.sync("/").await.expect("sync");
        assert_eq!(c.get_data("/x").await.expect("restored").1, saved, "the node returns with its Stat");
    });
    assert!(ensemble.panics().is_empty());
}
