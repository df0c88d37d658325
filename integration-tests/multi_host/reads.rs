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
use super::workers::{self, WorkerEvent};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Members, each on its host.
const SIZE: u8 = 3;
/// This test, as its workers run it.
const TEST: &str = "reads::an_isolated_leader_never_answers_a_sync_or_linearizable_read_stale";
/// The old leader's syncLimit, in ticks (its followers keep 20).
const LONG_SYNC_LIMIT_TICKS: u64 = 100;
/// How long each read may take before it counts as unanswered.
const READ_TIMEOUT: Duration = Duration::from_millis(1000);

/// One round the fresh-read worker reported: the value it had just written
/// through the majority, and what each read of the old leader returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    /// The value acknowledged before the reads were sent.
    pub written: u64,
    /// A plain read (None: no answer, or an error).
    pub plain: Option<u64>,
    /// `sync` then read.
    pub sync: Option<u64>,
    /// A linearizable read.
    pub linearizable: Option<u64>,
}

impl Round {
    /// `READ written plain sync linearizable`, `-` for none.
    pub fn line(&self) -> String {
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!("READ {} {} {} {}", self.written, show(self.plain), show(self.sync), show(self.linearizable))
    }

    /// The inverse of [`Round::line`] (after `READ `).
    pub fn parse(rest: &str) -> Option<Round> {
        let parts: Vec<&str> = rest.split(' ').collect();
        let value = |s: &str| if s == "-" { Some(None) } else { s.parse().ok().map(Some) };
        match parts[..] {
            [w, p, s, l] => {
                Some(Round { written: w.parse().ok()?, plain: value(p)?, sync: value(s)?, linearizable: value(l)? })
            }
            _ => None,
        }
    }
}

/// The fresh-read worker: a session on the majority writes `/mh/fresh`
/// = n, n = 1, 2, …; after each acknowledgement it reads the node from the
/// old leader three ways at once (each bounded by [`READ_TIMEOUT`]) and
/// reports a [`Round`]. Ends when its stdin closes, or after 5 000 rounds or
/// 5 minutes.
pub fn fresh_worker(majority: &str, old_zk: &str, old_grpc: &str, ca: &str) {
    use zookeeper_client as zk;
    let ca_pem = std::fs::read_to_string(ca).expect("read the CA");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let stop = workers::stop_when_stdin_closes();
    let rt = support::runtime();
    rt.block_on(async {
        let writer = connect(majority, &ca_pem).await;
        let plain = connect(old_zk, &ca_pem).await;
        let syncing = connect(old_zk, &ca_pem).await;
        let options = zabkeeper_client::ClientOptions::default()
            .with_session_timeout(Duration::from_secs(40))
            .with_request_timeout(READ_TIMEOUT)
            .with_tls(zabkeeper_client::ClientTls::from_files(ca.as_ref(), None).expect("the CA"));
        let grpc = zabkeeper_client::Client::connect(old_grpc, options).await.expect("connect the gRPC reader");
        let fresh = grpc.linearizable();
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let _ = writer.create("/mh", b"", &open).await;
        let _ = writer.create("/mh/fresh", b"0", &open).await;
        WorkerEvent::Ready.say();
        let started = Instant::now();
        let parse = |data: &[u8]| String::from_utf8_lossy(data).parse::<u64>().ok();
        let mut n = 0u64;
        while n < 5_000 && started.elapsed() < Duration::from_secs(300) && !stop.load(Ordering::SeqCst) {
            let value = (n + 1).to_string();
            match writer.set_data("/mh/fresh", value.as_bytes(), None).await {
                Ok(_) => n += 1,
                // Not acknowledged: nothing to compare with; written again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let (p, s, l) = tokio::join!(
                bounded(plain.get_data("/mh/fresh")),
                bounded(async {
                    syncing.sync("/mh/fresh").await?;
                    syncing.get_data("/mh/fresh").await
                }),
                bounded(fresh.get_data("/mh/fresh")),
            );
            let round = Round {
                written: n,
                plain: p.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
                sync: s.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
                linearizable: l.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
            };
            WorkerEvent::Read(round).say();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// A ZooKeeper session over TLS on `servers`. It outlives the cut: a session
/// on the cut-off member pings no leader meanwhile.
async fn connect(servers: &str, ca_pem: &str) -> zookeeper_client::Client {
    use zookeeper_client as zk;
    let tls = zk::TlsOptions::new().with_pem_ca(ca_pem).expect("CA");
    let connector = zk::Client::connector().with_tls(tls).with_session_timeout(Duration::from_secs(40));
    connector.secure_connect(servers).await.unwrap_or_else(|e| panic!("connect to {servers}: {e}"))
}

/// `f`'s outcome, or None after [`READ_TIMEOUT`].
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(READ_TIMEOUT, f).await.ok()
}

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
