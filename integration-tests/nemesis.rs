//! Consistency of a real-process ensemble under faults (nemesis): client
//! sessions on every member compare-and-set, blind-write, read and
//! sync-then-read a few znodes through the ZooKeeper protocol (the
//! `zookeeper-client` crate; member 1 runs with `linearizable_reads = true`,
//! so the plain reads of the client that stays on it are linearizable reads
//! and are checked as sync reads are) while a nemesis kill -9s, SIGSTOPs and restarts
//! leaders and followers, removes one from the configuration and adds it
//! back (`zkctl admin member`), or hands leadership to a follower
//! (`zkctl admin leader transfer`), never more than one member at once; then
//! every member is killed together and restarted. Every operation is recorded, and
//! [`history::check`] verifies the record against ZooKeeper's guarantees
//! (see the checker's own tests for what each check catches).
//!
//! `NEMESIS_SECS` sets how long the faults run (15 s by default, as part of
//! `make test`; `make test-nemesis` runs longer); `NEMESIS_SEED` picks another
//! schedule of faults and of the sessions' operations (the run prints it). Every loop is bounded in
//! count and time; members are stopped by PID.

mod support;

#[allow(dead_code)]
#[path = "nemesis/history.rs"]
mod history;

use history::{FinalStates, OpKind, Outcome, Recorder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{env_number, runtime, serial, Ensemble, Settings};
use zookeeper_client as zk;

/// The znodes the clients fight over.
const KEYS: [&str; 3] = ["/nemesis/k0", "/nemesis/k1", "/nemesis/k2"];
/// Client sessions (two per member).
const CLIENTS: usize = 6;
/// Most operations one client makes in a run of up to 200 s.
const MAX_OPS_PER_CLIENT: usize = 50_000;
/// Longer runs allow this many a second of the run, so that memory and the
/// checker's time stay bounded (the clients do thousands a second each).
const OPS_PER_CLIENT_SECOND: usize = 250;
/// A request not answered in this long counts as Unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(4);

/// The member whose every read is linearizable (`linearizable_reads`).
const LINEARIZABLE_MEMBER: u64 = 1;

/// Starts member `id` (again), member 1 with every read linearizable.
fn start(ensemble: &mut Ensemble, id: u64) {
    let env: &[(&str, &str)] =
        if id == LINEARIZABLE_MEMBER { &[("ZABKEEPER_LINEARIZABLE_READS", "true")] } else { &[] };
    ensemble.spawn_with_env(id, env);
}

/// Starts every member and waits until they serve.
fn start_all(ensemble: &mut Ensemble) {
    for id in ensemble.ids() {
        start(ensemble, id);
    }
    ensemble.wait_serving(ensemble.ids(), Duration::from_secs(30));
}

/// How long the faults run (at most a day, which keeps the pacing in range).
fn run_seconds() -> u64 {
    env_number("NEMESIS_SECS", 15).min(86_400)
}

/// The seed of the faults' schedule and of the sessions' operations:
/// `NEMESIS_SEED`, or the one CI runs.
fn seed() -> u64 {
    env_number("NEMESIS_SEED", 0x6e6d_e515)
}

fn initial_value(key: &str) -> String {
    format!("init:{key}")
}

async fn session(hosts: &str) -> Option<zk::Client> {
    let connecting = zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(hosts);
    tokio::time::timeout(Duration::from_secs(5), connecting).await.ok()?.ok()
}

/// What a client task does until `until`: a random mix on random keys,
/// each operation recorded before it is sent and when its answer comes.
/// `linearizable`: the client's member makes every read linearizable.
/// Its operations are spread over the run, so that the last faults meet
/// a load too (unpaced, they ran out in under a minute).
async fn client_loop(index: usize, hosts: String, linearizable: bool, recorder: Recorder, until: Instant) {
    let mut rng = StdRng::seed_from_u64(seed().rotate_left(16) ^ index as u64);
    let mut client: Option<zk::Client> = None;
    // The last version this client saw per key: what its CAS expects.
    let mut seen: BTreeMap<&str, i32> = BTreeMap::new();
    let mut written = 0u64;
    let started = tokio::time::Instant::now();
    let run = Duration::from_secs(run_seconds());
    let budget = MAX_OPS_PER_CLIENT.max(OPS_PER_CLIENT_SECOND * run.as_secs() as usize);
    // At most 250 x 86 400 operations: a u32 holds the budget and every index.
    let pace = run / u32::try_from(budget).expect("the budget fits a u32");
    for op in 0..budget {
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep_until(started + pace * op as u32).await;
        let Some(c) = client.as_ref() else {
            client = session(&hosts).await;
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        };
        let session_id = c.session_id().0 as u64;
        let key = KEYS[rng.random_range(0..KEYS.len())];
        let roll = rng.random_range(0..100);
        let result = if roll < 50 {
            written += 1;
            let value = format!("c{index}-{written}");
            let expected = (roll < 30).then(|| seen.get(key).copied().unwrap_or(0));
            let kind = OpKind::Write { value: value.clone(), expected };
            let pending = recorder.invoke(session_id, index, key, kind);
            let outcome = match tokio::time::timeout(OP_TIMEOUT, c.set_data(key, value.as_bytes(), expected)).await {
                Ok(Ok(stat)) => {
                    seen.insert(key, stat.version);
                    Outcome::Written { version: stat.version }
                }
                // Only a refusal on the version is sure to have changed nothing.
                Ok(Err(zk::Error::BadVersion)) => {
                    seen.remove(key);
                    Outcome::Failed("BadVersion".into())
                }
                Ok(Err(e)) => Outcome::Unknown(e.to_string()),
                Err(_) => Outcome::Unknown("timed out".into()),
            };
            recorder.complete(pending, outcome.clone());
            outcome
        } else {
            let sync = roll >= 80;
            let kind = match (sync, linearizable) {
                (true, _) => OpKind::SyncRead,
                (false, true) => OpKind::LinearizableRead,
                (false, false) => OpKind::Read,
            };
            let pending = recorder.invoke(session_id, index, key, kind);
            let read = async {
                if sync {
                    c.sync(key).await?;
                }
                c.get_data(key).await
            };
            let outcome = match tokio::time::timeout(OP_TIMEOUT, read).await {
                Ok(Ok((data, stat))) => {
                    seen.insert(key, stat.version);
                    Outcome::Read { value: String::from_utf8_lossy(&data).into_owned(), version: stat.version }
                }
                Ok(Err(e)) => Outcome::Unknown(e.to_string()),
                Err(_) => Outcome::Unknown("timed out".into()),
            };
            recorder.complete(pending, outcome.clone());
            outcome
        };
        // An expired session is over: the client carries on under a new one.
        if matches!(&result, Outcome::Unknown(e) if e.to_lowercase().contains("expired")) {
            client = None;
        }
    }
}

/// Sends `signal` to member `id` by its PID.
fn signal(ensemble: &mut Ensemble, id: u64, signal: &str) {
    if let Some(pid) = ensemble.member(id).pid() {
        let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
    }
}

/// `zkctl admin ARGS` through member `via` (it finds the leader), retried
/// while a change is under way or the leader moves (bounded); an error
/// naming `settled` means what was asked already holds.
fn admin(ensemble: &Ensemble, via: u64, args: &[&str], settled: Option<&str>) {
    let all: Vec<&str> = std::iter::once("admin").chain(args.iter().copied()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = ensemble.zkctl(via, &all);
        if out.status.success() {
            return;
        }
        let why = String::from_utf8_lossy(&out.stderr).to_string();
        if settled.is_some_and(|s| why.contains(s)) {
            return;
        }
        assert!(Instant::now() < deadline, "zkctl admin {args:?} kept failing: {why}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The faults, one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Stop,
    Membership,
    Transfer,
}

/// The first faults of every run are one of each kind, so that a short run
/// (CI's 60 s, `make test`'s 15 s) meets them all; then they are drawn.
const FIRST_FAULTS: [Fault; 4] = [Fault::Transfer, Fault::Kill, Fault::Membership, Fault::Stop];

/// Kills and stops members, changes the membership and moves leadership,
/// one at a time, until `until`; returns what it did.
fn nemesis(ensemble: &mut Ensemble, rt: &tokio::runtime::Runtime, until: Instant, started: Instant) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed());
    let mut timeline = Vec::new();
    let ids = ensemble.ids();
    let mut counts: BTreeMap<Fault, usize> = BTreeMap::new();
    for round in 0..1000 {
        std::thread::sleep(Duration::from_millis(rng.random_range(500..1500)));
        if Instant::now() >= until {
            break;
        }
        let leader = rt.block_on(ensemble.leader(Duration::from_secs(30)));
        let first = FIRST_FAULTS.get(round).copied();
        let victim = if first != Some(Fault::Transfer) && rng.random_bool(0.5) {
            leader
        } else {
            let followers: Vec<u64> = ids.iter().copied().filter(|id| *id != leader).collect();
            followers[rng.random_range(0..followers.len())]
        };
        let role = if victim == leader { "leader" } else { "follower" };
        let down_for = Duration::from_millis(rng.random_range(300..3000));
        let at = started.elapsed().as_secs_f64();
        let fault = first.unwrap_or_else(|| {
            if victim != leader && rng.random_bool(0.15) {
                Fault::Transfer
            } else if rng.random_bool(0.25) {
                Fault::Membership
            } else if rng.random_bool(0.5) {
                Fault::Kill
            } else {
                Fault::Stop
            }
        });
        *counts.entry(fault).or_default() += 1;
        if fault == Fault::Transfer {
            // Leadership handed to a follower under the load, at once
            // (no election timeout): in-flight proposals must commit first.
            timeline.push(format!("{at:7.2}s hand leadership from {leader} to follower {victim}"));
            admin(ensemble, leader, &["leader", "transfer", "--to", &victim.to_string()], Some("already leads"));
        } else if fault == Fault::Membership {
            // A membership change under the load: the victim leaves the
            // configuration (it keeps serving its clients without a vote)
            // and comes back with its line.
            timeline.push(format!("{at:7.2}s remove {role} {victim} from the configuration for {down_for:?}"));
            admin(ensemble, leader, &["member", "remove", &victim.to_string()], None);
            std::thread::sleep(down_for);
            timeline.push(format!("{:7.2}s add member {victim} back", started.elapsed().as_secs_f64()));
            let line = ensemble.server_line(victim, "participant");
            admin(ensemble, leader, &["member", "add", &line], None);
        } else if fault == Fault::Kill {
            timeline.push(format!("{at:7.2}s kill -9 {role} {victim}, restart after {down_for:?}"));
            ensemble.kill(victim);
            std::thread::sleep(down_for);
            start(ensemble, victim);
        } else {
            timeline.push(format!("{at:7.2}s SIGSTOP {role} {victim} for {down_for:?}"));
            signal(ensemble, victim, "STOP");
            std::thread::sleep(down_for);
            signal(ensemble, victim, "CONT");
        }
        ensemble.wait_serving(ids.clone(), Duration::from_secs(30));
    }
    timeline.push(format!("faults of each kind: {counts:?}"));
    timeline
}

/// Every key's value and version as member `id` has it, after a sync.
async fn final_state(ensemble: &Ensemble, id: u64) -> BTreeMap<String, (String, i32)> {
    let client = session(&ensemble.zookeeper(&[id])).await.unwrap_or_else(|| panic!("a session on member {id}"));
    let mut out = BTreeMap::new();
    for key in KEYS {
        client.sync(key).await.unwrap_or_else(|e| panic!("sync {key} on member {id}: {e}"));
        let (data, stat) = client.get_data(key).await.unwrap_or_else(|e| panic!("read {key} on member {id}: {e}"));
        out.insert(key.to_string(), (String::from_utf8_lossy(&data).into_owned(), stat.version));
    }
    out
}

#[test]
fn writes_stay_linearizable_and_durable_while_members_are_killed_and_stopped() {
    let _serial = serial();
    // Printed first, so that a run that fails before its report names it.
    println!("faults and operations from NEMESIS_SEED={}, for {} s", seed(), run_seconds());
    let settings = Settings { snapshot_every: 300, ..Settings::default() };
    // (Membership changes go through the admin API, which needs no reconfig_enabled.)
    let mut ensemble = Ensemble::configure(settings);
    start_all(&mut ensemble);
    let rt = runtime();
    let hosts: Vec<String> = ensemble.ids().iter().map(|id| ensemble.zookeeper(&[*id])).collect();
    rt.block_on(async {
        let client = session(&ensemble.zookeeper(&ensemble.ids())).await.expect("a session");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/nemesis", b"", &open).await.expect("create /nemesis");
        for key in KEYS {
            client.create(key, initial_value(key).as_bytes(), &open).await.expect("create a key");
        }
    });

    let recorder = Recorder::new();
    let started = Instant::now();
    let until = started + Duration::from_secs(run_seconds());
    let all = Arc::new(ensemble.zookeeper(&ensemble.ids()));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            // Half the clients stay on one member (and ride out its faults
            // there); the others may move to any member.
            let hosts = if i < hosts.len() { hosts[i].clone() } else { all.to_string() };
            let linearizable = i + 1 == LINEARIZABLE_MEMBER as usize;
            rt.spawn(client_loop(i, hosts, linearizable, recorder.clone(), until))
        })
        .collect();
    let mut timeline = nemesis(&mut ensemble, &rt, until, started);
    rt.block_on(async {
        for task in tasks {
            let _ = tokio::time::timeout(OP_TIMEOUT * 3, task).await;
        }
    });

    timeline.push(format!("{:7.2}s kill -9 every member, then restart all", started.elapsed().as_secs_f64()));
    for id in ensemble.ids() {
        ensemble.kill(id);
    }
    start_all(&mut ensemble);
    let finals: FinalStates = rt.block_on(async {
        let mut finals = FinalStates::new();
        for id in ensemble.ids() {
            finals.insert(id, final_state(&ensemble, id).await);
        }
        finals
    });

    let ops = recorder.ops();
    let initial = KEYS.iter().map(|k| (k.to_string(), initial_value(k))).collect();
    let report = history::check(&ops, &initial, &finals);
    println!("nemesis timeline:\n{}\n{report}", timeline.join("\n"));
    if !report.is_valid() {
        let kept = std::env::temp_dir().join(format!("zabkeeper-nemesis-history-{}.json", std::process::id()));
        let _ = history::write_json(&ops, &kept);
        panic!("the history broke ZooKeeper's guarantees (history kept in {}):\n{report}", kept.display());
    }
    let fresh = ops
        .iter()
        .filter(|o| matches!((&o.kind, &o.outcome), (OpKind::LinearizableRead, Outcome::Read { .. })))
        .count();
    println!("{fresh} linearizable reads answered on member {LINEARIZABLE_MEMBER}, each checked as a sync read");
    assert!(fresh > 0, "no linearizable read was answered: the check saw none");
    let acked = ops.iter().filter(|o| matches!(o.outcome, Outcome::Written { .. })).count();
    assert!(acked > 100, "the clients made progress under the nemesis: {acked} writes acknowledged");
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
}
