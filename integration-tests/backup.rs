//! Point-in-time recovery with real processes on loopback: `zkctl admin
//! backup` runs (a child process, stopped by PID) while a workload writes
//! to a 3-member ensemble; the member it reads from is killed part way and
//! it goes on from another; then an accidental `rm -r /app`. `zkctl restore
//! --to-zxid` (the zxid found in the backup's own listing) and `--to-time`
//! make data directories that a 1-member and a 3-member ensemble start on,
//! and each serves exactly the tree (data, Stat, ACL) the clients read
//! before the delete. A backup away while every member purges the log it
//! needs starts over from a fresh snapshot, and a restore into the span it
//! lacks is refused. Every wait is bounded in count and time.

use crate::support::{cli_binary, connect, runtime, serial, Ensemble, Settings};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use zabkeeper_client::{Client, MultiOp};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::{CreateMode, Stat};

/// Every node but `/zookeeper`'s (each ensemble's own configuration):
/// path to data, Stat and ACL.
type Tree = BTreeMap<String, (Vec<u8>, Stat, Vec<Acl>)>;

/// Reads the whole tree through `c` (bounded: at most 10 000 nodes).
async fn read_tree(c: &Client) -> Tree {
    let mut tree = Tree::new();
    let mut todo = vec!["/".to_string()];
    while let Some(path) = todo.pop() {
        assert!(tree.len() < 10_000, "the tree is larger than this test ever writes");
        if path == "/zookeeper" {
            continue;
        }
        let (data, stat) = c.get_data(&path).await.unwrap_or_else(|e| panic!("get {path}: {e}"));
        let (acl, _) = c.get_acl(&path).await.unwrap_or_else(|e| panic!("getacl {path}: {e}"));
        for child in c.get_children(&path).await.unwrap_or_else(|e| panic!("ls {path}: {e}")) {
            todo.push(if path == "/" { format!("/{child}") } else { format!("{path}/{child}") });
        }
        tree.insert(path, (data, stat, acl));
    }
    tree
}

/// The backup process, killed (by PID) if the test ends before stopping it.
struct Backup {
    child: Option<Child>,
    out: PathBuf,
}

impl Backup {
    /// Starts `zkctl admin backup --to DIR` on the members `admins`, its
    /// events (JSON) going to `out`, with `extra` arguments.
    fn start(admins: &str, dir: &Path, out: &Path, extra: &[&str]) -> Backup {
        let errors = out.with_extension("err");
        let child = Command::new(cli_binary())
            .args(["--json", "--timeout-ms", "3000", "--admin", admins, "admin", "backup"])
            .args(["--to", dir.to_str().expect("utf-8"), "--file-mib", "1"])
            .args(extra)
            .stdout(std::fs::File::options().create(true).append(true).open(out).expect("output file"))
            .stderr(std::fs::File::create(errors).expect("error file"))
            .env_remove("ZKCTL_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .spawn()
            .expect("start the backup");
        Backup { child: Some(child), out: out.to_path_buf() }
    }

    /// Waits (bounded) until it has printed an event `event`, `count` in all.
    fn wait_event(&self, event: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.events().iter().filter(|e| e["event"] == event).count() < count {
            assert!(Instant::now() < deadline, "no `{event}` event (#{count}): {:?}", self.events());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its events so far (one JSON document per line).
    fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// SIGTERM by PID, then waits (bounded) for a clean exit.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the backup did not stop within 15 s of SIGTERM");
    }
}

impl Drop for Backup {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `zkctl ARGS` (offline commands and client commands).
fn zkctl(args: &[&str]) -> Output {
    Command::new(cli_binary()).args(args).env_remove("ZKCTL_ADMIN_TOKEN").output().expect("run zkctl")
}

/// The JSON documents a successful `zkctl --json ARGS` printed.
fn zkctl_json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = zkctl(&all);
    assert!(out.status.success(), "zkctl {all:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect()
}

fn hex(value: &Value) -> u64 {
    let text = value.as_str().unwrap_or_else(|| panic!("not a zxid: {value}"));
    u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex")
}

/// The newest zxid the backup in `dir` holds, from its own listing.
fn newest_held(dir: &Path) -> u64 {
    let listed = zkctl_json(&["restore", "--from", dir.to_str().expect("utf-8"), "--list"]);
    hex(&listed.last().expect("a summary")["newest"])
}

/// Waits (bounded) until the backup holds `zxid`.
fn wait_held(dir: &Path, zxid: u64, backup: &Backup) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while newest_held(dir) < zxid {
        assert!(Instant::now() < deadline, "the backup did not reach {zxid:#x}: {:?}", backup.events());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last committed zxid, as member `id` knows it.
fn committed(ensemble: &Ensemble, id: u64) -> u64 {
    runtime().block_on(ensemble.status(id)).expect("status").last_committed_zxid
}

/// Starts an ensemble of `size` whose member 1 starts on the restored data
/// (`zkctl restore ARGS --data-dir <member 1's>`) and the others empty;
/// returns it with the tree as member `size` serves it.
fn restored_ensemble(size: usize, backup: &Path, target: &[&str]) -> (Ensemble, Value, Tree) {
    let mut ensemble = Ensemble::configure(Settings { size, ..Settings::default() });
    let data = ensemble.data_dir(1);
    let config = ensemble.config_path().to_str().expect("utf-8").to_string();
    let mut args = vec!["restore", "--from", backup.to_str().expect("utf-8")];
    args.extend_from_slice(target);
    args.extend_from_slice(&["--data-dir", data.to_str().expect("utf-8"), "--config", &config]);
    let report = zkctl_json(&args).remove(0);
    ensemble.start_all();
    let tree = runtime().block_on(async {
        let c = connect(&ensemble.grpc(&[size as u64])).await;
        c.sync("/").await.expect("sync");
        read_tree(&c).await
    });
    (ensemble, report, tree)
}

#[test]
fn a_backup_survives_a_member_kill_and_restores_to_just_before_a_recursive_delete() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let rt = runtime();
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let others: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != leader).collect();
    // The backup reads from the leader first: the member killed part way.
    let admins = [leader, others[0], others[1]].map(|id| ensemble.admin(id)).join(",");
    // Apart from the ensemble's directory, which goes with it.
    let home = tempfile::tempdir().expect("a directory for the backup");
    let dir = home.path().join("backup");
    let out = home.path().join("backup.out");
    let mut backup = Backup::start(&admins, &dir, &out, &["--snapshot-every", "250", "--keep-snapshots", "2"]);
    let leader_admin = ensemble.admin(leader);
    let following =
        |b: &Backup, member: &str| b.events().iter().any(|e| e["event"] == "following" && e["member"] == member);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !following(&backup, &leader_admin) {
        assert!(Instant::now() < deadline, "the backup did not start: {:?}", backup.events());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The workload: creates, sets, deletes, ACL changes and multis under
    // /app; the leader (which the backup reads) is killed part way.
    let acl = Acl::open_unsafe();
    let read_only = Acl::read_unsafe();
    let grpc = ensemble.grpc(&others);
    rt.block_on(async {
        let c = connect(&grpc).await;
        for path in ["/app", "/app/items", "/app/cfg", "/keep"] {
            c.create(path, b"", CreateMode::Persistent, &acl).await.expect("create");
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        for i in 0..360u32 {
            assert!(Instant::now() < deadline, "the workload is bounded");
            if i == 150 {
                tokio::task::block_in_place(|| ensemble.kill(leader));
            }
            let item = format!("/app/items/{i:04}");
            // A write lost in the failover is retried (bounded).
            for attempt in 0..60 {
                let done = match i % 6 {
                    // i - 13 is a multiple of 6: an item created, not an op on another.
                    1 if i > 13 => c.delete(&format!("/app/items/{:04}", i - 13), -1).await.map(|_| ()),
                    2 => c.set_data("/app/cfg", format!("v{i}").as_bytes(), -1).await.map(|_| ()),
                    3 => c
                        .multi(&[
                            MultiOp::create(&item, &i.to_be_bytes(), CreateMode::Persistent, &acl),
                            MultiOp::set_data("/keep", &[i as u8; 3], -1),
                        ])
                        .await
                        .map(|_| ()),
                    4 if i % 24 == 4 => c.create(&item, b"ro", CreateMode::Persistent, &read_only).await.map(|_| ()),
                    _ => {
                        c.create(&item, format!("item {i}").as_bytes(), CreateMode::Persistent, &acl).await.map(|_| ())
                    }
                };
                match done {
                    Ok(()) => break,
                    Err(e) if e.to_string().contains("NodeExists") || e.to_string().contains("NoNode") => break,
                    Err(e) => {
                        assert!(attempt < 59, "write {i} kept failing: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
        c.sync("/").await.expect("sync");
    });
    let live = others[0];
    let expected = rt.block_on(async { read_tree(&connect(&ensemble.grpc(&[live])).await).await });
    assert!(expected.len() > 150, "the workload built a tree: {}", expected.len());
    let before_delete = committed(&ensemble, live);
    wait_held(&dir, before_delete, &backup);

    // The accident, a little later, so a time between the two exists.
    std::thread::sleep(Duration::from_millis(300));
    let rm = zkctl(&["--server", &grpc, "rm", "-r", "/app"]);
    assert!(rm.status.success(), "rm -r /app: {}", String::from_utf8_lossy(&rm.stderr));
    wait_held(&dir, committed(&ensemble, live), &backup);
    let status = backup.stop();
    assert!(status.success(), "the backup stops cleanly on SIGTERM: {status:?}: {:?}", backup.events());
    let events = backup.events();
    let lost = events.iter().position(|e| e["event"] == "lost" && e["member"] == leader_admin.as_str());
    let lost = lost.unwrap_or_else(|| panic!("the backup saw its member go: {events:?}"));
    assert!(
        events[lost..].iter().any(|e| e["event"] == "following" && e["member"] != leader_admin.as_str()),
        "it went on from another member: {events:?}"
    );
    assert!(events.iter().any(|e| e["event"] == "snapshot"), "it rolled to snapshots of its own: {events:?}");

    // The backup's own listing: the first delete after the workload, and the transaction before it.
    let dir_arg = dir.to_str().expect("utf-8");
    let log = zkctl_json(&["restore", "--from", dir_arg, "--log"]);
    let zxids: Vec<u64> = log.iter().map(|e| hex(&e["zxid"])).collect();
    assert!(zxids.windows(2).all(|w| w[0] < w[1]), "in order, no duplicate");
    let first_delete = log
        .iter()
        .position(|e| hex(&e["zxid"]) > before_delete && e["type"] == "delete")
        .expect("the recursive delete is in the backup");
    assert_eq!(log[first_delete]["ops"][0]["path"].as_str().map(|p| p.starts_with("/app")), Some(true));
    let just_before = log[first_delete - 1]["zxid"].as_str().expect("a zxid").to_string();
    let delete_ms = log[first_delete]["time_ms"].as_i64().expect("a time");

    // Refusals: precise, non-zero.
    let refused = |args: &[&str], says: &str| {
        let out = zkctl(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} should say {says:?}: {stderr}");
    };
    let taken = ensemble.dir.path().join("taken");
    std::fs::create_dir_all(&taken).expect("dir");
    std::fs::write(taken.join("x"), b"x").expect("file");
    let taken_arg = taken.to_str().expect("utf-8");
    let unused = ensemble.dir.path().join("unused");
    let unused = unused.to_str().expect("utf-8");
    refused(&["restore", "--from", dir_arg, "--to-zxid", &just_before, "--data-dir", taken_arg], "not empty");
    refused(
        &["restore", "--from", dir_arg, "--to-zxid", "0x7fffffff00000001", "--data-dir", unused],
        "after the newest",
    );
    // Two snapshots kept (the backup rolls every 250 transactions): the
    // initial one is gone, and with it what came before the oldest kept.
    let listed = zkctl_json(&["restore", "--from", dir_arg, "--list"]);
    let snapshots = listed.iter().filter(|f| f["kind"] == "snapshot").count();
    assert_eq!(snapshots, 2, "{listed:?}");
    let oldest = hex(&listed.last().expect("a summary")["oldest_snapshot"]);
    assert!(oldest > 0 && oldest < hex(&Value::from(just_before.as_str())), "{listed:?}");
    let too_old = format!("{:#x}", oldest - 1);
    refused(&["restore", "--from", dir_arg, "--to-zxid", &too_old, "--data-dir", unused], "before the oldest snapshot");
    refused(&["restore", "--from", dir_arg, "--to-time", "yesterday", "--data-dir", unused], "RFC 3339");
    drop(ensemble);

    // To the zxid: a single member serves exactly what the clients read.
    let (single, report, tree) = restored_ensemble(1, &dir, &["--to-zxid", &just_before]);
    assert_eq!(report["zxid"].as_str(), Some(just_before.as_str()));
    assert_tree(&expected, &tree, "restored --to-zxid");
    drop(single);

    // To a time just before the delete (RFC 3339): a 3-member ensemble, the
    // others joined by sync, serves it from its last member.
    let time = zabkeeper_datadir::backup::time::format_time(delete_ms - 1);
    let (three, report, tree) = restored_ensemble(3, &dir, &["--to-time", &time]);
    assert!(hex(&report["zxid"]) < hex(&log[first_delete]["zxid"]), "{report}");
    assert_tree(&expected, &tree, "restored --to-time");
    assert!(three.panics().is_empty(), "{:?}", three.panics());
}

fn assert_tree(expected: &Tree, got: &Tree, what: &str) {
    let missing: Vec<&String> = expected.keys().filter(|p| !got.contains_key(*p)).collect();
    let extra: Vec<&String> = got.keys().filter(|p| !expected.contains_key(*p)).collect();
    assert!(missing.is_empty() && extra.is_empty(), "{what}: missing {missing:?}, extra {extra:?}");
    for (path, want) in expected {
        assert_eq!(&got[path], want, "{what}: {path}");
    }
}

#[test]
fn a_backup_away_while_the_members_purge_starts_over_and_restore_refuses_the_gap() {
    let _serial = serial();
    let ensemble = Ensemble::start(3);
    let rt = runtime();
    let admins = ensemble.ids().into_iter().map(|id| ensemble.admin(id)).collect::<Vec<_>>().join(",");
    let home = tempfile::tempdir().expect("a directory for the backup");
    let dir = home.path().join("backup");
    let out = home.path().join("backup.out");
    let grpc = ensemble.grpc(&ensemble.ids());
    let write = |from: u32, to: u32| {
        rt.block_on(async {
            let c = connect(&grpc).await;
            for i in from..to {
                let path = format!("/n{i:04}");
                c.create(&path, b"x", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("create");
            }
            c.sync("/").await.expect("sync");
        })
    };
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));

    // Backed up, then stopped.
    let mut backup = Backup::start(&admins, &dir, &out, &[]);
    backup.wait_event("following", 1);
    write(0, 20);
    let held = committed(&ensemble, leader);
    wait_held(&dir, held, &backup);
    assert!(backup.stop().success(), "{:?}", backup.events());

    // Away while every member writes on, snapshots twice and purges its log
    // before the newest snapshot: what the backup needs next is gone.
    write(20, 60);
    let dir_arg = dir.to_str().expect("utf-8");
    for id in ensemble.ids() {
        let admin = ensemble.admin(id);
        for _ in 0..2 {
            let taken = zkctl(&["--admin", &admin, "admin", "snapshot", "take"]);
            assert!(taken.status.success(), "snapshot on {id}: {}", String::from_utf8_lossy(&taken.stderr));
        }
        let purged = zkctl(&["--admin", &admin, "admin", "purge", "--keep", "1"]);
        assert!(purged.status.success(), "purge on {id}: {}", String::from_utf8_lossy(&purged.stderr));
    }

    // Back: it says the log was purged and starts over from a fresh snapshot.
    let mut backup = Backup::start(&admins, &dir, &out, &[]);
    backup.wait_event("purged", 1);
    backup.wait_event("started", 2);
    write(60, 70);
    let newest = committed(&ensemble, leader);
    wait_held(&dir, newest, &backup);
    assert!(backup.stop().success(), "{:?}", backup.events());

    // The span in between is not held: a restore into it is refused, one after it works.
    let listed = zkctl_json(&["restore", "--from", dir_arg, "--list"]);
    assert!(
        listed.iter().any(|l| l["problem"].as_str().is_some_and(|p| p.contains("not held"))),
        "the listing shows the gap: {listed:?}"
    );
    let unused = home.path().join("unused");
    let unused = unused.to_str().expect("utf-8");
    let inside = format!("{:#x}", held + 5);
    let out = zkctl(&["restore", "--from", dir_arg, "--to-zxid", &inside, "--data-dir", unused]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("are missing"), "a restore into the gap says why: {stderr}");
    let made = home.path().join("made");
    let newest_arg = format!("{newest:#x}");
    let restored = zkctl_json(&[
        "restore",
        "--from",
        dir_arg,
        "--to-zxid",
        &newest_arg,
        "--data-dir",
        made.to_str().expect("utf-8"),
    ]);
    assert_eq!(restored[0]["zxid"].as_str().map(|z| hex(&Value::from(z))), Some(newest), "{restored:?}");
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
}
