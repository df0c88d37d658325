//! Crash-stop for panics, on real processes: a panic in a task that holds
//! the replica or its durability (the owner task, the storage thread, the
//! snapshot writer) stops the member with exit status 1 and the panic's
//! message in its log, so a supervisor with `Restart=on-failure` restarts
//! it. Before, a panicked owner task exited 0 ("stopped") and a panicked
//! storage thread went unnoticed while acknowledgements stalled.
//!
//! The panics are injected through `FAILPOINTS` (debug builds only; see
//! `zabkeeper::runtime::crash`). Every wait is bounded; the member is
//! stopped by its PID if it outlives the test.

use crate::support::{options, runtime, serial, Ensemble, Settings};
use std::time::{Duration, Instant};
use zabkeeper_client::Client;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;

/// Starts a lone member with `point` armed; once it serves, does `trigger`
/// (without one, the point is reached on the way to serving); and checks it
/// stopped with a failure that names `task`.
fn crashes(point: &str, task: &str, trigger: Option<fn(&Ensemble)>) {
    let _one = serial();
    let mut ensemble = Ensemble::configure(Settings { size: 1, ..Settings::default() });
    ensemble.spawn_with_env(1, &[("FAILPOINTS", &format!("{point}=panic"))]);
    if let Some(trigger) = trigger {
        ensemble.wait_serving(vec![1], Duration::from_secs(20));
        assert!(ensemble.member(1).is_running(), "{point}: armed, but nothing reached it yet");
        trigger(&ensemble);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = ensemble.member(1).exited() {
            break status;
        }
        assert!(Instant::now() < deadline, "{point}: the member kept running; log:\n{}", ensemble.log(1));
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = ensemble.log(1);
    assert_eq!(status.code(), Some(1), "{point}: exit status {status}; log:\n{log}");
    assert!(log.contains(&format!("failpoint {point} reached")), "{point}: the panic's message is logged:\n{log}");
    assert!(log.contains(task), "{point}: the stop names the {task}:\n{log}");
}

/// A write: the member proposes, persists and flushes it (opening the
/// session is one already). The member may stop before it answers either.
fn write(ensemble: &Ensemble) {
    let address = ensemble.grpc(&[1]);
    runtime().block_on(async {
        let opened = tokio::time::timeout(Duration::from_secs(5), Client::connect(&address, options())).await;
        if let Ok(Ok(client)) = opened {
            let acl = Acl::open_unsafe();
            let create = client.create("/crash", b"x", CreateMode::Persistent, &acl);
            let _ = tokio::time::timeout(Duration::from_secs(5), create).await;
        }
    });
}

#[test]
fn a_panic_in_the_owner_task_stops_the_member_with_a_failure() {
    crashes("owner-persist", "the owner task panicked", Some(write));
}

#[test]
fn a_panic_on_the_storage_thread_stops_the_member_with_a_failure() {
    // The first flush is the epoch the member is about to lead in: before
    // the fix it waited for that flush's answer for ever.
    crashes("storage-flush", "the storage thread panicked", None);
}

#[test]
fn a_panic_in_the_snapshot_writer_stops_the_member_with_a_failure() {
    crashes(
        "snapshot-write",
        "the snapshot writer panicked",
        Some(|ensemble| {
            // Answered or not: the writer panics before the snapshot is durable.
            let _ = ensemble.zkctl(1, &["admin", "snapshot", "take"]);
        }),
    );
}
