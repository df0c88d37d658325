//! Fresh reads from a leader cut off from its followers while its own
//! clients still reach it (issue 33's scenario): the old leader keeps a
//! longer syncLimit than its followers (100 ticks against 20), so it goes on
//! serving for a while after the others have elected a leader and
//! acknowledged writes. A reader process writes through the majority, and
//! after each acknowledgement reads the same node from the old leader three
//! ways: a plain read (allowed to be stale: it is, and that is counted), a
//! `sync` then read, and a linearizable read (gRPC `LINEARIZABLE`). The last
//! two must never return a value older than the one just acknowledged.

use super::hosts::{Hosts, TICK_MS};
use super::netns::Network;
use super::support;
use super::workers::{self, Round, WorkerEvent};
use std::time::{Duration, Instant};

/// Members, each on its host.
const SIZE: u8 = 3;
/// This test, as its workers run it.
const TEST: &str = "reads::an_isolated_leader_never_answers_a_sync_or_linearizable_read_stale";
/// The old leader's syncLimit, in ticks (its followers keep 20).
const LONG_SYNC_LIMIT_TICKS: u64 = 100;

/// The rounds reported so far.
fn rounds(events: &[(Instant, WorkerEvent)]) -> Vec<(Instant, Round)> {
    events.iter().filter_map(|(t, e)| if let WorkerEvent::Read(r) = e { Some((*t, *r)) } else { None }).collect()
}

#[test]
#[ignore = "needs root and network namespaces: make test-multi-host (CI runs it)"]
fn an_isolated_leader_never_answers_a_sync_or_linearizable_read_stale() {
    if workers::serve_if_worker() {
        return;
    }
    let _serial = support::serial();
    let Some(net) = Network::create_or_skip("r", SIZE) else { return };
    let mut hosts = Hosts::start(net, SIZE, TEST);
    let converge = Duration::from_secs(30);
    // Member 1 with the long syncLimit, made the leader.
    hosts.converged(&[1, 2, 3], false, converge);
    hosts.terminate(1);
    hosts.spawn_with_env(1, &[("ZABKEEPER_SYNC_LIMIT_TICKS", LONG_SYNC_LIMIT_TICKS.to_string())]);
    // Synced again before it can take leadership over.
    let leader = hosts.converged(&[1, 2, 3], false, converge);
    if leader != 1 {
        hosts.admin(leader, &["leader", "transfer", "--to", "1"]).unwrap_or_else(|e| panic!("transfer to 1: {e}"));
    }
    assert_eq!(hosts.converged(&[1, 2, 3], false, converge), 1, "member 1 leads");

    let majority = ["zk-2:2281", "zk-3:2281"].join(",");
    let spec = format!("fresh;{majority};zk-1:2281;zk-1:3181;{}", hosts.ca().display());
    let log = hosts.dir.path().join("fresh.log");
    let reader = hosts.worker(&hosts.net.client_ns(), &spec, log);
    reader.wait_for(|events| rounds(events).len() >= 20, converge);

    // Cut the leader from both followers; its clients still reach it.
    let cut = Instant::now();
    for f in [2, 3] {
        hosts.net.partition(1, f, true);
    }
    let long_limit = Duration::from_millis(TICK_MS * LONG_SYNC_LIMIT_TICKS);
    // Past the old leader's syncLimit, and rounds after it (bounded; while
    // the old leader cannot confirm, each round waits out its reads' timeouts).
    let after = |since: Instant, count: usize| {
        move |events: &[(Instant, WorkerEvent)]| rounds(events).iter().filter(|(t, _)| *t > since).count() >= count
    };
    reader.wait_for(after(cut + long_limit, 3), Duration::from_secs(60));
    for f in [2, 3] {
        hosts.net.partition(1, f, false);
    }
    hosts.converged(&[1, 2, 3], false, converge);
    let healed = Instant::now();
    reader.wait_for(after(healed, 20), Duration::from_secs(60));
    let events = reader.finish();

    let all: Vec<Round> =
        events.iter().filter_map(|e| if let WorkerEvent::Read(r) = e { Some(*r) } else { None }).collect();
    let stale = |get: fn(&Round) -> Option<u64>| -> Vec<Round> {
        all.iter().filter(|r| get(r).is_some_and(|v| v < r.written)).copied().collect()
    };
    let answered = |get: fn(&Round) -> Option<u64>| all.iter().filter(|r| get(r).is_some()).count();
    let (stale_sync, stale_linearizable) = (stale(|r| r.sync), stale(|r| r.linearizable));
    let stale_plain = stale(|r| r.plain);
    eprintln!(
        "{} rounds: plain reads {} answered, {} stale (up to {} writes behind); sync+read {} answered, {} stale; \
         linearizable {} answered, {} stale",
        all.len(),
        answered(|r| r.plain),
        stale_plain.len(),
        stale_plain.iter().map(|r| r.written - r.plain.unwrap_or(0)).max().unwrap_or(0),
        answered(|r| r.sync),
        stale_sync.len(),
        answered(|r| r.linearizable),
        stale_linearizable.len(),
    );
    assert!(stale_sync.is_empty(), "sync+read on the old leader returned stale data: {stale_sync:?}");
    assert!(stale_linearizable.is_empty(), "a linearizable read returned stale data: {stale_linearizable:?}");
    assert!(answered(|r| r.sync) >= 20 && answered(|r| r.linearizable) >= 20, "fresh reads were answered");
    // The scenario has teeth: the old leader did serve stale plain reads
    // while it believed it led.
    assert!(!stale_plain.is_empty(), "no plain read was stale: the old leader never served after the cut");
}
