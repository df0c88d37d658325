//! Apache Curator, unchanged, against a 3-member ensemble: the program in
//! `integration-tests/curator/CuratorSuite.java` is compiled at test time
//! against Debian's `libcurator-framework-java`, `libcurator-recipes-java`
//! and `libzookeeper-java` (`make java-clients` installs them; without them
//! the test says it is skipped and why). It runs CRUD, transactions,
//! LeaderLatch, LeaderSelector, InterProcessMutex, InterProcessSemaphoreV2,
//! DistributedDoubleBarrier, DistributedAtomicLong, SharedCount, CuratorCache,
//! a protected ephemeral PersistentNode, and reconfig()/getConfig() as the
//! super user (the ensemble serves reconfig); when it prints `KILL_LEADER`
//! this test kill -9s the leader, restarts it, and answers `KILLED`.
//!
//! Every wait is bounded; the Java process and the members are stopped by PID.

use crate::support::{java, runtime, serial, Ensemble, Settings};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Checks the suite runs, in order.
const CHECKS: [&str; 12] = [
    "crud",
    "transaction",
    "leader-latch",
    "leader-selector",
    "mutex",
    "semaphore",
    "double-barrier",
    "atomic-long",
    "shared-count",
    "cache",
    "persistent-node",
    "reconfig",
];

#[test]
fn curator_recipes_work_unchanged_across_a_leader_kill() {
    let classpath = match java::classpath(&[]) {
        Ok(cp) => cp,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let _serial = serial();
    let classes = tempfile::tempdir().expect("temp dir");
    java::compile(&classpath, "integration-tests/curator/CuratorSuite.java", classes.path());
    // The suite's reconfig check authenticates as the super user.
    let digest = zabkeeper_core::acl::digest_id("super:curator-secret").expect("a digest");
    let extra = format!("reconfig_enabled = true\nsuper_digest = \"{digest}\"");
    let mut ensemble = Ensemble::start_with(Settings { size: 3, extra, ..Settings::default() });
    let rt = runtime();
    let mut java = Command::new("java")
        .arg("-cp")
        .arg(format!("{}:{classpath}", classes.path().display()))
        .arg("CuratorSuite")
        .arg(ensemble.zookeeper(&ensemble.ids()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start java");
    let mut to_suite = java.stdin.take().expect("piped stdin");
    let stdout = java.stdout.take().expect("piped stdout");
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(600);
    let mut passed = Vec::new();
    let mut output = Vec::new();
    let mut kills = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else { break };
        println!("curator: {line}");
        if let Some(check) = line.strip_prefix("PASS ") {
            passed.push(check.to_string());
        } else if line.starts_with("KILL_LEADER") {
            let leader = rt.block_on(ensemble.leader(Duration::from_secs(30)));
            ensemble.kill(leader);
            ensemble.spawn(leader);
            kills += 1;
            writeln!(to_suite, "KILLED").expect("answer the suite");
            to_suite.flush().expect("answer the suite");
        }
        output.push(line);
    }
    let status = loop {
        if let Ok(Some(status)) = java.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = java.kill();
            let _ = java.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = output.join("\n");
    assert!(status.is_some_and(|s| s.success()), "the Curator suite failed ({status:?}):\n{output}");
    assert_eq!(passed, CHECKS, "every check passed, in order:\n{output}");
    assert_eq!(kills, 3, "the leader was killed during the latch, mutex and persistent-node checks");
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
}
