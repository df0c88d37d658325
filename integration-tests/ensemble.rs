//! Ensembles of real `zabkeeper` processes (3 and 5 members) on loopback,
//! driven by the Rust client (the harness in `support/`):
//!
//! * a write made through any member is read back from every member;
//! * kill -9 of the leader under a write load: a new leader is elected, no
//!   acknowledged write is lost, the ephemerals of live sessions (those on
//!   survivors and those that failed over) stay, and the killed member,
//!   restarted, catches up by DIFF;
//! * a member that fell behind the leader's in-memory log catches up by SNAP
//!   (under a concurrent write load);
//! * with a minority down writes go on; with a majority down clients get
//!   ConnectionLoss (bounded by the request timeout, never a hang) and the
//!   same session writes again once a quorum is back;
//! * a 5-member ensemble survives two failures;
//! * the recipes (a lock, an election) keep their guarantees across members
//!   and through a leader kill.
//!
//! Every wait is bounded in time; the harness stops every process by PID.

use crate::support::{connect, env_number, eventually, options, runtime, serial, within_for};
use crate::support::{Ensemble, Settings};
use futures::future::join_all;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zabkeeper_client::recipes::{Election, Lock, RecipeError};
use zabkeeper_client::{Client, ClientError};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;

/// Runs blocking harness calls (kill, spawn, wait_serving) off the async threads.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The members other than `gone`.
fn others(ensemble: &Ensemble, gone: &[u64]) -> Vec<u64> {
    ensemble.ids().into_iter().filter(|id| !gone.contains(id)).collect()
}

/// The children of `path` as member `id` holds them, read through a session
/// on that member alone, after a sync (so everything committed before is in).
async fn children_on(ensemble: &Ensemble, id: u64, path: &str) -> BTreeSet<String> {
    let c = connect(&ensemble.grpc(&[id])).await;
    c.sync(path).await.unwrap_or_else(|e| panic!("sync on member {id}: {e}"));
    let children = c.get_children(path).await.unwrap_or_else(|e| panic!("children of {path} on member {id}: {e}"));
    c.close().await.expect("close");
    children.into_iter().collect()
}

/// The member's log with ANSI colour codes removed (the server's tracing
/// output colours field names).
fn plain_log(ensemble: &Ensemble, id: u64) -> String {
    let raw = ensemble.log(id);
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters final-byte
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Log lines of member `id` that contain every one of `needles`.
fn log_lines(ensemble: &Ensemble, id: u64, needles: &[&str]) -> Vec<String> {
    plain_log(ensemble, id).lines().filter(|l| needles.iter().all(|n| l.contains(n))).map(str::to_string).collect()
}

/// Fails if a member the test left running stopped on its own (a replica
/// stops when its storage fails, for one).
fn assert_none_stopped(ensemble: &mut Ensemble) {
    for id in ensemble.ids() {
        let member = ensemble.member(id);
        if member.pid().is_some() && !member.is_running() {
            panic!("member {id} stopped on its own; its log:\n{}", plain_log(ensemble, id));
        }
    }
}

/// What one writer saw.
#[derive(Debug, Default)]
struct WriteLog {
    /// Paths whose create was acknowledged, with when.
    acked: Vec<(String, Instant)>,
    /// When each acknowledged create was answered, and its zxid (whose high
    /// 32 bits are the epoch of the leader that proposed it).
    acked_zxids: Vec<(Instant, i64)>,
    /// Paths whose outcome is unknown (connection loss or timeout).
    unknown: Vec<String>,
    /// The connection errors, for failure messages.
    errors: Vec<String>,
}

/// Creates `/load/<name>-N` for N = 0, 1, … until `stop`, remembering which
/// creates were acknowledged. Every path is new, so no answer but Ok or a
/// connection problem is acceptable; the session must never expire.
async fn write_until(client: Client, name: String, stop: Arc<AtomicBool>) -> WriteLog {
    let acl = Acl::open_unsafe();
    let mut log = WriteLog::default();
    let mut n = 0u32;
    while !stop.load(Ordering::Acquire) {
        let path = format!("/load/{name}-{n:06}");
        n += 1;
        match client.create_with_stat(&path, b"v", CreateMode::Persistent, &acl).await {
            Ok((created, stat)) => {
                assert_eq!(created, path);
                let now = Instant::now();
                log.acked.push((path, now));
                log.acked_zxids.push((now, stat.czxid));
            }
            Err(e @ (ClientError::SessionExpired | ClientError::Closed)) => panic!("{name}: the session ended: {e}"),
            Err(e) if e.is_connection_problem() => {
                log.unknown.push(path);
                log.errors.push(e.to_string());
            }
            Err(e) => panic!("{name}: unexpected answer to create {path}: {e}"),
        }
    }
    log
}

/// `depth` writers sharing one session (so its requests are pipelined), merged.
async fn write_pipelined(client: Client, name: String, depth: usize, stop: Arc<AtomicBool>) -> WriteLog {
    let loops = (0..depth).map(|k| write_until(client.clone(), format!("{name}p{k}"), stop.clone()));
    let mut merged = WriteLog::default();
    for log in join_all(loops).await {
        merged.acked.extend(log.acked);
        merged.acked_zxids.extend(log.acked_zxids);
        merged.unknown.extend(log.unknown);
        merged.errors.extend(log.errors);
    }
    merged
}

/// Every member's view of `/load` after a sync: identical, and holding every acknowledged write.
async fn check_no_acked_write_lost(ensemble: &Ensemble, members: &[u64], logs: &[WriteLog]) -> BTreeSet<String> {
    let acked: BTreeSet<String> =
        logs.iter().flat_map(|l| l.acked.iter().map(|(p, _)| p.trim_start_matches("/load/").to_string())).collect();
    let mut first: Option<(u64, BTreeSet<String>)> = None;
    for &id in members {
        let held = children_on(ensemble, id, "/load").await;
        let missing: Vec<&String> = acked.difference(&held).collect();
        assert!(
            missing.is_empty(),
            "member {id} lost {} acknowledged writes, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        match &first {
            None => first = Some((id, held)),
            Some((other, theirs)) => {
                assert!(
                    theirs == &held,
                    "members {other} and {id} disagree on /load: {} vs {} children",
                    theirs.len(),
                    held.len()
                )
            }
        }
    }
    first.map(|(_, held)| held).unwrap_or_default()
}

#[test]
fn writes_through_any_member_reach_every_member() {
    let _serial = serial();
    for size in [3usize, 5] {
        let mut ensemble = Ensemble::start(size);
        runtime().block_on(async {
            let acl = Acl::open_unsafe();
            let setup = connect(&ensemble.grpc_all()).await;
            setup.create("/any", b"", CreateMode::Persistent, &acl).await.expect("create /any");
            for id in ensemble.ids() {
                let c = connect(&ensemble.grpc(&[id])).await;
                for i in 0..3 {
                    let path = format!("/any/m{id}-{i}");
                    c.create(&path, format!("{id}").as_bytes(), CreateMode::Persistent, &acl)
                        .await
                        .unwrap_or_else(|e| panic!("create {path} through member {id}: {e}"));
                }
                c.set_data("/any", format!("last {id}").as_bytes(), -1).await.expect("set_data");
                c.close().await.expect("close");
            }
            let expected: BTreeSet<String> =
                ensemble.ids().into_iter().flat_map(|id| (0..3).map(move |i| format!("m{id}-{i}"))).collect();
            for id in ensemble.ids() {
                assert_eq!(children_on(&ensemble, id, "/any").await, expected, "member {id} of {size}");
                let c = connect(&ensemble.grpc(&[id])).await;
                let (data, stat) = c.get_data("/any/m1-2").await.expect("get_data");
                assert_eq!((data.as_slice(), stat.version), (b"1".as_slice(), 0));
                let (data, stat) = c.get_data("/any").await.expect("get_data");
                assert_eq!(data, format!("last {size}").into_bytes(), "member {id}");
                assert_eq!(stat.version, size as i32);
                c.close().await.expect("close");
            }
            // Every member applies the same history (the last sessions' closes
            // reach the followers with the leader's next commit or ping).
            eventually(10, "every member at the same applied zxid", || async {
                let mut applied = BTreeSet::new();
                for id in ensemble.ids() {
                    applied.insert(ensemble.status(id).await.map(|s| s.last_applied_zxid));
                }
                applied.len() == 1
            })
            .await;
        });
        assert_none_stopped(&mut ensemble);
    }
}

/// Clients on random members, at least one on `leader` (it must fail over)
/// and one elsewhere (it must stay), at least `count` in all.
async fn clients_on_leader_and_elsewhere(ensemble: &Ensemble, leader: u64, count: usize) -> Vec<Client> {
    let leader_addr = ensemble.members[leader as usize - 1].ports.grpc.to_string();
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..40 {
        let have_leader = clients.iter().any(|c| c.server() == leader_addr);
        let have_other = clients.iter().any(|c| c.server() != leader_addr);
        if clients.len() >= count && have_leader && have_other {
            return clients;
        }
        let c = connect(&ensemble.grpc_all()).await;
        let on_leader = c.server() == leader_addr;
        if clients.len() < count || (on_leader && !have_leader) || (!on_leader && !have_other) {
            clients.push(c);
        } else {
            c.close().await.expect("close");
        }
    }
    panic!("no session landed on the leader and on another member in 40 tries");
}

#[test]
fn killing_the_leader_under_load_loses_no_acknowledged_write_and_keeps_live_sessions() {
    let _serial = serial();
    // No snapshot during the load: whether a member back after a kill gets
    // a DIFF must not depend on how many writes this machine fits between
    // two snapshots (DIFF from above the leader's snapshot point is covered
    // by the Zab unit tests and the simulation; SNAP by the test below).
    let mut ensemble = Ensemble::start_with(Settings { size: 3, snapshot_every: 1_000_000, ..Settings::default() });
    let rt = runtime();
    rt.block_on(async {
        let acl = Acl::open_unsafe();
        let setup = connect(&ensemble.grpc_all()).await;
        for p in ["/load", "/eph"] {
            setup.create(p, b"", CreateMode::Persistent, &acl).await.expect("create parent");
        }
        setup.close().await.expect("close");
        let mut all_logs: Vec<WriteLog> = Vec::new();
        let mut sessions: Vec<i64> = Vec::new();
        let mut clients: Vec<Client> = Vec::new();
        // Two rounds: the second kills a leader that was itself restarted and
        // caught up in the first.
        for round in 0..2 {
            let leader = ensemble.leader(Duration::from_secs(10)).await;
            let leader_addr = ensemble.members[leader as usize - 1].ports.grpc.to_string();
            let fresh = clients_on_leader_and_elsewhere(&ensemble, leader, 3).await;
            for c in fresh {
                let i = clients.len();
                c.create(&format!("/eph/w{i}"), b"", CreateMode::Ephemeral, &acl).await.expect("ephemeral");
                sessions.push(c.session_id());
                clients.push(c);
            }
            let failing_over: Vec<usize> = (0..clients.len()).filter(|&i| clients[i].server() == leader_addr).collect();
            assert!(!failing_over.is_empty());

            // Every client writes, four requests in flight at a time.
            let stop = Arc::new(AtomicBool::new(false));
            let tasks: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(i, c)| tokio::spawn(write_pipelined(c.clone(), format!("r{round}w{i}"), 4, stop.clone())))
                .collect();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let killed_at = Instant::now();
            blocking(|| ensemble.kill(leader));
            let survivors = others(&ensemble, &[leader]);
            let wait = ensemble.wait_serving_async(&survivors, Duration::from_secs(20));
            let new_leader = within_for(20, "a new leader serving", wait).await;
            assert_ne!(new_leader, leader);
            // Writes go on under the new leader, from every writer.
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop.store(true, Ordering::Release);
            let logs: Vec<WriteLog> =
                within_for(30, "writers stop", join_all(tasks)).await.into_iter().map(|r| r.expect("writer task")).collect();
            for (i, log) in logs.iter().enumerate() {
                assert!(
                    log.acked.iter().any(|(_, at)| *at > killed_at),
                    "round {round}: writer {i} got no write acknowledged after the kill: {:?}",
                    log.errors
                );
            }
            let acked: usize = logs.iter().map(|l| l.acked.len()).sum();
            let unknown: usize = logs.iter().map(|l| l.unknown.len()).sum();
            eprintln!("round {round}: killed leader {leader}, new leader {new_leader}; {acked} writes acknowledged, {unknown} unknown");
            all_logs.extend(logs);

            // No acknowledged write lost, in this round or an earlier one.
            let held = check_no_acked_write_lost(&ensemble, &survivors, &all_logs).await;

            // Sessions kept: the same ids, their ephemerals on every survivor.
            for (i, c) in clients.iter().enumerate() {
                assert_eq!(c.session_id(), sessions[i]);
                if failing_over.contains(&i) {
                    assert_ne!(c.server(), leader_addr, "writer {i} failed over");
                }
            }
            for &id in &survivors {
                let c = connect(&ensemble.grpc(&[id])).await;
                c.sync("/eph").await.expect("sync");
                for (i, session) in sessions.iter().enumerate() {
                    let stat = c.exists(&format!("/eph/w{i}")).await.expect("exists");
                    let stat = stat.unwrap_or_else(|| panic!("member {id} lost the ephemeral of live session {i}"));
                    assert_eq!(stat.ephemeral_owner, *session);
                }
                c.close().await.expect("close");
            }

            // The killed member comes back and catches up by DIFF.
            let needle = format!("follower={leader}");
            let diffs_before = log_lines(&ensemble, new_leader, &["DIFF sync", &needle]).len();
            blocking(|| ensemble.spawn(leader));
            within_for(30, "all serving", ensemble.wait_serving_async(&ensemble.ids(), Duration::from_secs(30))).await;
            let diffs = log_lines(&ensemble, new_leader, &["DIFF sync", &needle]);
            assert!(
                diffs.len() > diffs_before,
                "the restarted member was not synced by DIFF; leader log:\n{}",
                plain_log(&ensemble, new_leader)
            );
            assert!(log_lines(&ensemble, leader, &["installed leader snapshot"]).is_empty(), "no snapshot expected");
            assert_eq!(children_on(&ensemble, leader, "/load").await, held, "the restarted member's /load");
            let c = connect(&ensemble.grpc(&[leader])).await;
            for i in 0..sessions.len() {
                assert!(c.exists(&format!("/eph/w{i}")).await.expect("exists").is_some());
            }
            c.close().await.expect("close");
            eventually(10, "every member at the same applied zxid", || async {
                let mut seen = BTreeSet::new();
                for id in ensemble.ids() {
                    seen.insert(ensemble.status(id).await.map(|s| s.last_applied_zxid));
                }
                seen.len() == 1
            })
            .await;
        }
        for c in clients {
            c.close().await.expect("close");
        }
    });
    assert_none_stopped(&mut ensemble);
}

/// Kills `follower`, then creates `batches` x 50 children `/load/{prefix}-*`
/// through `c` while it is down.
async fn write_with_a_follower_down(ensemble: &mut Ensemble, c: &Client, follower: u64, prefix: &str, batches: usize) {
    let acl = Acl::open_unsafe();
    c.create("/load", b"", CreateMode::Persistent, &acl).await.expect("create /load");
    blocking(|| ensemble.kill(follower));
    for batch in 0..batches {
        write_batch(c, prefix, batch).await;
    }
}

/// Creates `/load/<prefix>-<batch>-00` to `-49`, all at once.
async fn write_batch(c: &Client, prefix: &str, batch: usize) {
    let acl = Acl::open_unsafe();
    let creates = (0..50).map(|i| {
        let (c, acl) = (c.clone(), acl.clone());
        async move { c.create(&format!("/load/{prefix}-{batch}-{i:02}"), b"v", CreateMode::Persistent, &acl).await }
    });
    for r in join_all(creates).await {
        r.expect("create while a follower is down");
    }
}

/// Writes batches (as [`write_batch`], numbered on from `batches`) until
/// the leader's newest durable snapshot is past `past`; returns the batches
/// written in all and that snapshot's zxid. A member writes a snapshot
/// beside its writes, one at a time, and takes the next only as it applies
/// more: on an idle machine 400 writes were over before the leader's first
/// snapshot was durable. Bounded: 40 batches, up to 2 s of waiting before each.
async fn write_until_snapshot_past(
    ensemble: &Ensemble,
    c: &Client,
    leader: u64,
    prefix: &str,
    mut batches: usize,
    past: u64,
) -> (usize, u64) {
    for _ in 0..40 {
        for _ in 0..20 {
            let newest = ensemble.status(leader).await.expect("the leader's status").last_snapshot_zxid;
            if newest > past {
                return (batches, newest);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        write_batch(c, prefix, batches).await;
        batches += 1;
    }
    panic!("the leader took no snapshot past {past:#x} in 40 more batches of writes");
}

/// Restarts `follower` under a write load through `leader`, so proposals
/// arrive during its sync too; what the writer did, once every member serves.
async fn rejoin_under_load(ensemble: &mut Ensemble, leader: u64, follower: u64) -> WriteLog {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(connect(&ensemble.grpc(&[leader])).await, "during".into(), stop.clone()));
    blocking(|| ensemble.spawn(follower));
    within_for(30, "all serving", ensemble.wait_serving_async(&ensemble.ids(), Duration::from_secs(30))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Release);
    let log = within_for(30, "writer stops", writer).await.expect("writer");
    assert!(!log.acked.is_empty());
    log
}

#[test]
fn a_member_behind_what_the_leader_holds_in_memory_catches_up_by_diff_from_storage() {
    let _serial = serial();
    let extra = "resident_log_entries = 10".to_string();
    let mut ensemble = Ensemble::start_with(Settings { size: 3, extra, ..Settings::default() });
    let rt = runtime();
    rt.block_on(async {
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let follower = others(&ensemble, &[leader])[0];
        let c = connect(&ensemble.grpc(&[leader])).await;
        // Twenty times what the leader holds in memory.
        write_with_a_follower_down(&mut ensemble, &c, follower, "d", 4).await;
        let log = rejoin_under_load(&mut ensemble, leader, follower).await;

        let from_storage = log_lines(&ensemble, leader, &["DIFF from storage", &format!("follower={follower}")]);
        assert!(
            !from_storage.is_empty(),
            "no DIFF read from storage; the leader's log:\n{}",
            plain_log(&ensemble, leader)
        );
        let snaps = log_lines(&ensemble, leader, &["SNAP sync", &format!("follower={follower}")]);
        assert!(snaps.is_empty(), "a DIFF was enough, yet the leader sent a snapshot: {snaps:?}");
        let held = check_no_acked_write_lost(&ensemble, &ensemble.ids(), &[log]).await;
        assert_eq!(held.iter().filter(|p| p.starts_with("d-")).count(), 200);
        c.close().await.expect("close");
    });
    assert_none_stopped(&mut ensemble);
}

#[test]
fn a_member_behind_the_leaders_log_catches_up_by_snapshot() {
    let _serial = serial();
    let mut ensemble = Ensemble::start_with(Settings { size: 3, snapshot_every: 50, ..Settings::default() });
    let rt = runtime();
    rt.block_on(async {
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let follower = others(&ensemble, &[leader])[0];
        let c = connect(&ensemble.grpc(&[leader])).await;
        // Far more than two snapshot intervals, and on until the leader holds
        // two snapshots past the follower: a DIFF reaches back only to the
        // leader's second newest snapshot.
        write_with_a_follower_down(&mut ensemble, &c, follower, "s", 8).await;
        let (batches, first) = write_until_snapshot_past(&ensemble, &c, leader, "s", 8, 0).await;
        let (batches, _) = write_until_snapshot_past(&ensemble, &c, leader, "s", batches, first).await;
        let snaps_before = log_lines(&ensemble, leader, &["SNAP sync", &format!("follower={follower}")]).len();
        let log = rejoin_under_load(&mut ensemble, leader, follower).await;

        let snaps = log_lines(&ensemble, leader, &["SNAP sync", &format!("follower={follower}")]);
        assert!(
            snaps.len() > snaps_before,
            "the leader did not send a snapshot; its log:\n{}",
            plain_log(&ensemble, leader)
        );
        let installed = log_lines(&ensemble, follower, &["installed leader snapshot"]);
        assert!(
            !installed.is_empty(),
            "the follower did not install a snapshot; its log:\n{}",
            plain_log(&ensemble, follower)
        );
        let held = check_no_acked_write_lost(&ensemble, &ensemble.ids(), &[log]).await;
        assert_eq!(held.iter().filter(|p| p.starts_with("s-")).count(), batches * 50);
        let status = ensemble.status(follower).await.expect("status");
        assert!(status.last_snapshot_zxid > 0, "the installed snapshot is on the follower's disk");
        c.close().await.expect("close");
    });
    assert_none_stopped(&mut ensemble);
}

#[test]
fn a_minority_down_keeps_writes_going_a_majority_down_refuses_them_until_a_quorum_returns() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let rt = runtime();
    rt.block_on(async {
        let acl = Acl::open_unsafe();
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let followers = others(&ensemble, &[leader]);
        let c = Client::connect(&ensemble.grpc_all(), options().with_request_timeout(Duration::from_secs(3)))
            .await
            .expect("connect");
        c.create("/q", b"", CreateMode::Persistent, &acl).await.expect("create /q");

        // A minority down: writes still succeed (after a failover if needed).
        blocking(|| ensemble.kill(followers[0]));
        let mut ok = false;
        for i in 0..20 {
            match c.create(&format!("/q/minority-{i}"), b"", CreateMode::Persistent, &acl).await {
                Ok(_) => {
                    ok = true;
                    break;
                }
                Err(e) if e.is_connection_problem() => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(ok, "no write succeeded with one member of three down");

        // A majority down: the survivor stops serving; a write fails with a
        // connection error within the request timeout instead of hanging.
        let survivor = followers[1];
        blocking(|| ensemble.kill(leader));
        eventually(10, "the survivor stops serving", || async {
            ensemble.status(survivor).await.is_some_and(|s| !s.serving)
        })
        .await;
        // The first write may still reach the survivor's closing connection
        // ("lost its leader"); later ones wait for a server to take the session
        // and then name why none did.
        let mut errors = Vec::new();
        for i in 0..3 {
            let started = Instant::now();
            let path = format!("/q/none-{i}");
            let write = c.create(&path, b"", CreateMode::Persistent, &acl);
            let err =
                within_for(10, "a write without a quorum fails", write).await.expect_err("a write without a quorum");
            eprintln!("without a quorum, after {:?}: {err}", started.elapsed());
            assert_eq!(err.code(), Some(ErrorCode::ConnectionLoss), "{err}");
            errors.push(err.to_string());
            if errors.last().is_some_and(|e| e.contains("not serving")) {
                break;
            }
        }
        assert!(errors.last().is_some_and(|e| e.contains("not serving")), "the error says why: {errors:?}");
        let fresh =
            Client::connect(&ensemble.grpc(&[survivor]), options().with_connect_timeout(Duration::from_secs(2))).await;
        let fresh = fresh.expect_err("no new session without a quorum");
        assert_eq!(fresh.code(), Some(ErrorCode::ConnectionLoss), "{fresh}");

        // A quorum returns: the same session writes again.
        let session = c.session_id();
        blocking(|| ensemble.spawn(leader));
        within_for(30, "a quorum serving", ensemble.wait_serving_async(&[leader, survivor], Duration::from_secs(30)))
            .await;
        let mut resumed = false;
        for i in 0..40 {
            match c.create(&format!("/q/back-{i}"), b"", CreateMode::Persistent, &acl).await {
                Ok(_) => {
                    resumed = true;
                    break;
                }
                Err(e)
                    if e.is_connection_problem() && !matches!(e, ClientError::SessionExpired | ClientError::Closed) =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(resumed, "writes did not resume once a quorum returned");
        assert_eq!(c.session_id(), session, "the session survived the outage");
        for i in 0..errors.len() {
            let path = format!("/q/none-{i}");
            assert!(c.exists(&path).await.expect("exists").is_none(), "the refused write {path} was not applied");
        }

        blocking(|| ensemble.spawn(followers[0]));
        within_for(30, "all serving", ensemble.wait_serving_async(&ensemble.ids(), Duration::from_secs(30))).await;
        let expected = children_on(&ensemble, leader, "/q").await;
        for id in ensemble.ids() {
            assert_eq!(children_on(&ensemble, id, "/q").await, expected, "member {id}");
        }
        c.close().await.expect("close");
    });
    assert_none_stopped(&mut ensemble);
}

#[test]
fn five_members_survive_two_failures() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(5);
    let rt = runtime();
    rt.block_on(async {
        let acl = Acl::open_unsafe();
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let follower = others(&ensemble, &[leader])[0];
        let setup = connect(&ensemble.grpc_all()).await;
        setup.create("/load", b"", CreateMode::Persistent, &acl).await.expect("create /load");
        setup.close().await.expect("close");
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let c = connect(&ensemble.grpc_all()).await;
            tasks.push(tokio::spawn(write_until(c, format!("f{i}"), stop.clone())));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed_at = Instant::now();
        blocking(|| ensemble.kill(follower));
        blocking(|| ensemble.kill(leader));
        let survivors = others(&ensemble, &[leader, follower]);
        let new_leader =
            within_for(20, "a new leader", ensemble.wait_serving_async(&survivors, Duration::from_secs(20))).await;
        assert!(survivors.contains(&new_leader));
        tokio::time::sleep(Duration::from_millis(700)).await;
        stop.store(true, Ordering::Release);
        let logs: Vec<WriteLog> =
            within_for(30, "writers stop", join_all(tasks)).await.into_iter().map(|r| r.expect("writer")).collect();
        for (i, log) in logs.iter().enumerate() {
            assert!(
                log.acked.iter().any(|(_, at)| *at > killed_at),
                "writer {i} got no write acknowledged after the kills: {:?}",
                log.errors
            );
        }
        let held = check_no_acked_write_lost(&ensemble, &survivors, &logs).await;
        blocking(|| {
            ensemble.spawn(leader);
            ensemble.spawn(follower);
        });
        within_for(30, "all five serving", ensemble.wait_serving_async(&ensemble.ids(), Duration::from_secs(30))).await;
        for id in [leader, follower] {
            assert_eq!(children_on(&ensemble, id, "/load").await, held, "restarted member {id}");
        }
    });
    assert_none_stopped(&mut ensemble);
}

/// Seconds since midnight UTC of a log line's leading timestamp
/// (`2025-01-01T12:34:56.789012Z ...`, tracing's default format).
fn log_time(line: &str) -> Option<f64> {
    let time = line.split_whitespace().next()?.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// Seconds since midnight UTC now.
fn time_of_day() -> f64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    (since_epoch.as_secs_f64()) % 86_400.0
}

/// Milliseconds from `t0` (time of day) to the first line of member `id`
/// after `t0` that contains `needle`.
fn phase_ms(ensemble: &Ensemble, id: u64, needle: &str, t0: f64) -> Option<f64> {
    plain_log(ensemble, id)
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(log_time)
        .map(|t| if t + 43_200.0 < t0 { t + 86_400.0 } else { t })
        .find(|t| *t >= t0)
        .map(|t| (t - t0) * 1000.0)
}

/// Failover time, measured (not asserted): kill -9 of the leader of a
/// 3-member ensemble under a write load, to the first write a client gets
/// acknowledged afterwards. Each run prints that and where the time went
/// (from the survivors' logs); the median ends the output.
/// `make bench-failover` runs it on release binaries.
#[test]
#[ignore = "a measurement: make bench-failover"]
fn failover_time_from_leader_kill_to_first_acknowledged_write() {
    let _serial = serial();
    let runs = env_number("FAILOVER_RUNS", 7);
    let mut totals = Vec::new();
    for run in 1..=runs {
        let mut ensemble = Ensemble::start(3);
        let rt = runtime();
        let total = rt.block_on(async {
            let acl = Acl::open_unsafe();
            let leader = ensemble.leader(Duration::from_secs(10)).await;
            let setup = connect(&ensemble.grpc_all()).await;
            setup.create("/load", b"", CreateMode::Persistent, &acl).await.expect("create /load");
            setup.close().await.expect("close");
            let stop = Arc::new(AtomicBool::new(false));
            let mut tasks = Vec::new();
            for i in 0..3 {
                let c = connect(&ensemble.grpc_all()).await;
                tasks.push(tokio::spawn(write_until(c, format!("r{i}"), stop.clone())));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let ensemble_epoch_before = ensemble.status(leader).await.map(|s| u64::from(s.current_epoch));
            let t0 = time_of_day();
            let killed_at = Instant::now();
            blocking(|| ensemble.kill(leader));
            let survivors = others(&ensemble, &[leader]);
            let new_leader =
                within_for(20, "a new leader", ensemble.wait_serving_async(&survivors, Duration::from_secs(20))).await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            stop.store(true, Ordering::Release);
            let logs: Vec<WriteLog> =
                within_for(30, "writers stop", join_all(tasks)).await.into_iter().map(|r| r.expect("writer")).collect();
            // Answers to writes the old leader committed may still arrive just
            // after the kill: only a write of a later epoch counts.
            let old_epoch = ensemble_epoch_before.expect("the old leader's epoch");
            let first = logs
                .iter()
                .filter_map(|l| {
                    l.acked_zxids.iter().find(|(_, zxid)| (*zxid >> 32) as u64 > old_epoch).map(|(at, _)| *at)
                })
                .min()
                .expect("a write of the new epoch acknowledged");
            let total = (first - killed_at).as_secs_f64() * 1000.0;
            let follower = survivors.iter().copied().find(|id| *id != new_leader).expect("a follower");
            let show = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |ms| format!("{ms:.0}"));
            println!(
                "run {run}: {total:.0} ms to the first acknowledged write | ms after the kill: \
                 looking {} / {}, elected {}, following {}, established {}, follower serving {}",
                show(phase_ms(&ensemble, new_leader, "looking for a leader", t0)),
                show(phase_ms(&ensemble, follower, "looking for a leader", t0)),
                show(phase_ms(&ensemble, new_leader, "elected leader", t0)),
                show(phase_ms(&ensemble, follower, "following", t0)),
                show(phase_ms(&ensemble, new_leader, "leader established", t0)),
                show(phase_ms(&ensemble, follower, "synced with leader, serving", t0)),
            );
            if std::env::var_os("FAILOVER_SHOW_LOGS").is_some() {
                for id in survivors {
                    for line in plain_log(&ensemble, id).lines() {
                        if log_time(line).is_some_and(|t| t >= t0 && t < t0 + 0.5) {
                            println!("  {id}: {line}");
                        }
                    }
                }
            }
            total
        });
        totals.push(total);
    }
    totals.sort_by(f64::total_cmp);
    let median = totals[totals.len() / 2];
    println!(
        "failover over {runs} runs: median {median:.0} ms (min {:.0}, max {:.0}); \
         design.md: ZooKeeper 3.8 takes 400-700 ms, our goal is under 250 ms",
        totals[0],
        totals[totals.len() - 1]
    );
}

/// One lock worker's outcome.
#[derive(Debug, Default)]
struct LockWork {
    /// Increments of `/protected` the ensemble acknowledged.
    acked: u64,
    /// Increments whose outcome is unknown (connection loss or timeout).
    unknown: u64,
    /// Connection errors met on the way, for failure messages.
    errors: Vec<String>,
}

/// Takes `/locks/counter` `rounds` times and, inside it, reads `/protected`
/// and writes it back plus one, unconditionally: only mutual exclusion (and a
/// waiter seeing the previous holder's write when it gets the lock, wherever
/// it reads) keeps increments from being lost.
async fn increment_under_lock(
    client: Client,
    rounds: u64,
    inside: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
) -> LockWork {
    let lock = Lock::new(&client, "/locks/counter");
    let mut work = LockWork::default();
    for _ in 0..rounds {
        let mut attempts = 0;
        let guard = loop {
            attempts += 1;
            match lock.acquire().await {
                Ok(guard) => break guard,
                Err(RecipeError::Client(e)) if e.is_connection_problem() && attempts < 20 => {
                    work.errors.push(format!("acquire: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("acquire failed after {attempts} attempts: {e}; before: {:?}", work.errors),
            }
        };
        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two lock holders at once");
        let increment = async {
            let (data, _) = client.get_data("/protected").await?;
            let value: u64 = String::from_utf8_lossy(&data).parse().expect("a number");
            tokio::time::sleep(Duration::from_millis(3)).await;
            client.set_data("/protected", (value + 1).to_string().as_bytes(), -1).await
        };
        match increment.await {
            Ok(_) => work.acked += 1,
            Err(e) if e.is_connection_problem() => {
                work.errors.push(format!("increment: {e}"));
                work.unknown += 1;
            }
            Err(e) => panic!("increment: {e}"),
        }
        inside.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = guard.release().await {
            panic!("release: {e}; before: {:?}", work.errors);
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    work
}

/// The recipes across members: lock workers on random members increment a
/// plain znode under the lock while the ensemble's leader is killed, and an
/// election's leader keeps its place through the kill. No two workers are
/// ever inside at once, every round completes, and the znode counts every
/// acknowledged increment; the election hands over only when its leader
/// resigns.
#[test]
fn recipes_hold_across_members_and_a_leader_kill() {
    let _serial = serial();
    let mut ensemble = Ensemble::start(3);
    let rt = runtime();
    rt.block_on(async {
        let acl = Acl::open_unsafe();
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let followers = others(&ensemble, &[leader]);
        let setup = connect(&ensemble.grpc_all()).await;
        setup.create("/protected", b"0", CreateMode::Persistent, &acl).await.expect("create /protected");

        // Two candidates on the two followers (they outlive the kill).
        let a = connect(&ensemble.grpc(&[followers[0]])).await;
        let b = connect(&ensemble.grpc(&[followers[1]])).await;
        let a_leads = Election::new(&a, "/election").campaign(b"a").await.expect("a is elected");
        let b_campaign = tokio::spawn({
            let election = Election::new(&b, "/election");
            async move { election.campaign(b"b").await }
        });
        eventually(10, "b queues", || async { b.get_children("/election").await.is_ok_and(|c| c.len() == 2) }).await;

        const ROUNDS: u64 = 40;
        let inside = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        // At least one worker starts on the leader, so it has to move when it dies.
        let clients = clients_on_leader_and_elsewhere(&ensemble, leader, 3).await;
        let total = clients.len() as u64 * ROUNDS;
        let workers: Vec<_> = clients
            .into_iter()
            .map(|client| tokio::spawn(increment_under_lock(client, ROUNDS, inside.clone(), done.clone())))
            .collect();
        eventually(30, "ten rounds under the lock", || async { done.load(Ordering::SeqCst) >= 10 }).await;
        blocking(|| ensemble.kill(leader));
        let done_at_kill = done.load(Ordering::SeqCst);
        let survivors = others(&ensemble, &[leader]);
        within_for(20, "a new leader", ensemble.wait_serving_async(&survivors, Duration::from_secs(20))).await;
        let works: Vec<LockWork> = within_for(120, "lock workers finish", join_all(workers))
            .await
            .into_iter()
            .map(|r| r.expect("worker"))
            .collect();
        let acked: u64 = works.iter().map(|w| w.acked).sum();
        let unknown: u64 = works.iter().map(|w| w.unknown).sum();
        assert_eq!(acked + unknown, total);
        assert!(done_at_kill < total as usize / 2, "the kill came after most rounds ({done_at_kill})");
        for id in &survivors {
            let c = connect(&ensemble.grpc(&[*id])).await;
            c.sync("/protected").await.expect("sync");
            let (data, _) = c.get_data("/protected").await.expect("read /protected");
            let value: u64 = String::from_utf8_lossy(&data).parse().expect("a number");
            assert!(
                (acked..=acked + unknown).contains(&value),
                "member {id}: /protected = {value}, acknowledged increments {acked}, unknown {unknown}: {works:?}"
            );
            assert_eq!(c.get_children("/locks/counter").await.expect("lock dir"), Vec::<String>::new());
        }

        // The election's leader kept its place through the kill.
        assert!(!b_campaign.is_finished(), "b was elected while a leads");
        a_leads.proclaim(b"a, after the kill").await.expect("proclaim");
        let observed = Election::new(&b, "/election").leader().await.expect("leader");
        assert_eq!(observed, Some(b"a, after the kill".to_vec()));
        a_leads.resign().await.expect("resign");
        let b_leads = within_for(10, "b is elected", b_campaign).await.expect("task").expect("campaign");
        assert_eq!(Election::new(&a, "/election").leader().await.expect("leader"), Some(b"b".to_vec()));
        b_leads.resign().await.expect("resign");
    });
    assert_none_stopped(&mut ensemble);
}
