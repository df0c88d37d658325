//! The ensemble changes shape while a writer writes: members are added with
//! `zkctl admin member` and start on new hosts with `--join` (peer TLS lets
//! in only members of the configuration), are removed, replaced and
//! promoted, all over TLS (peer, admin, client).

use super::hosts::Hosts;
use super::netns::Network;
use super::sessions::ClientSession;
use super::support;
use super::workers::{self, Writer};
use std::collections::BTreeSet;
use std::time::Duration;

/// Server hosts: three to start on, three more to grow and replace onto.
const HOSTS: u8 = 6;
/// This test, as its workers run it.
const TEST: &str = "membership::an_ensemble_grows_shrinks_replaces_dead_members_and_promotes_an_observer";
/// Each step's wait for the new shape.
const CONVERGE: Duration = Duration::from_secs(40);

/// Member `id` on host `host`, as `zkctl admin member add` takes it.
fn line(id: u8, host: u8, role: &str) -> String {
    format!("server.{id}=zk-{host}:2888:2888:{role};")
}

/// Asks member `via` to change the membership (panics with its answer if
/// refused), and says how long the change took and the writer's longest
/// wait between two acknowledgements, from the last before it to the fifth after.
fn change(hosts: &Hosts, writer: &Writer, via: u8, args: &[&str]) {
    let before = writer.acks().len();
    let out = hosts
        .admin(via, &[&["member"], args].concat())
        .unwrap_or_else(|e| panic!("member {args:?} through {via}: {e}"));
    let docs = out.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    let took = docs.filter_map(|d| d["took_ms"].as_u64()).next_back();
    writer.wait_acks(5, CONVERGE);
    let acks = writer.acks();
    let pause = acks[before.saturating_sub(1)..].windows(2).map(|w| w[1].0 - w[0].0).max();
    eprintln!("  member {}: took {took:?} ms, longest wait between the writer's acks {pause:?}", args.join(" "));
}

/// The voters and observers of the configuration, as member `id` lists it.
fn shape(hosts: &Hosts, id: u8) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let out = hosts.admin(id, &["member", "list"]).unwrap_or_else(|e| panic!("member list on {id}: {e}"));
    let (mut voters, mut observers) = (BTreeSet::new(), BTreeSet::new());
    for doc in out.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        for m in doc["members"].as_array().into_iter().flatten() {
            let id = m["id"].as_u64().expect("an id");
            if m["role"] == "observer" {
                observers.insert(id)
            } else {
                voters.insert(id)
            };
        }
    }
    (voters, observers)
}

/// Waits until `ids` have converged and the leader lists `voters` and
/// `observers`; then every write `writer` had acknowledged is on each of
/// `ids` (read after a sync).
fn settled(hosts: &Hosts, writer: &Writer, ids: &[u8], voters: &[u64], observers: &[u64]) -> u8 {
    let leader = hosts.converged(ids, false, CONVERGE);
    let want = (voters.iter().copied().collect(), observers.iter().copied().collect());
    assert_eq!(shape(hosts, leader), want, "the configuration after the change");
    let acked: BTreeSet<String> = writer.acks().into_iter().map(|(_, n)| format!("{n:06}")).collect();
    let path = format!("/mh/{}", writer.label);
    for &id in ids {
        let held = hosts.children(id, &path);
        let lost: Vec<&String> = acked.difference(&held).collect();
        assert!(lost.is_empty(), "member {id} lacks acknowledged writes after the change: {lost:?}");
    }
    leader
}

/// The members `zkctl admin status --all` shows answering, asked of member
/// `id`: each reached through the admin address the configuration gives it
/// (a member added since, with a line that has no place for it, told its
/// own, and the leader recorded it: waited for, bounded).
fn status_all_ids(hosts: &Hosts, id: u8) -> BTreeSet<u64> {
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let out = hosts.admin(id, &["status", "--all"]).unwrap_or_else(|e| panic!("status --all on {id}: {e}"));
        let rows: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let unanswered: Vec<&serde_json::Value> = rows.iter().filter(|r| r.get("status").is_none()).collect();
        if unanswered.is_empty() {
            return rows.iter().filter_map(|r| r["id"].as_u64()).collect();
        }
        assert!(std::time::Instant::now() < deadline, "status --all on {id}: {unanswered:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root and network namespaces: make test-multi-host (CI runs it)"]
fn an_ensemble_grows_shrinks_replaces_dead_members_and_promotes_an_observer() {
    if workers::serve_if_worker() {
        return;
    }
    let _serial = support::serial();
    let Some(net) = Network::create_or_skip("m", HOSTS) else { return };
    let mut hosts = Hosts::start(net, 3, TEST);
    hosts.converged(&[1, 2, 3], false, CONVERGE);
    let writer = hosts.writer("membership", &[1, 2, 3]);
    let servers: Vec<String> = (1..=HOSTS).map(|h| format!("zk-{h}:2281")).collect();
    let kazoo = ClientSession::kazoo(&hosts, &servers).map_err(|why| eprintln!("kazoo session skipped: {why}")).ok();
    let curator =
        ClientSession::curator(&hosts, &servers).map_err(|why| eprintln!("Curator session skipped: {why}")).ok();

    // Grow 3 -> 5: two members are added, then start on new hosts with
    // --join (under peer TLS a member is let in once the configuration names it).
    change(&hosts, &writer, 1, &["add", &line(4, 4, "participant"), &line(5, 5, "participant")]);
    hosts.join(4, 4, 1);
    hosts.join(5, 5, 2);
    let leader = settled(&hosts, &writer, &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5], &[]);
    writer.wait_acks(20, CONVERGE);
    assert_eq!(status_all_ids(&hosts, 4), BTreeSet::from([1, 2, 3, 4, 5]), "status --all shows five");
    eprintln!("grown to 5; member {leader} leads");

    // Shrink 5 -> 3: remove two (the leader among them if it is one), then stop them.
    let leaving: Vec<u8> = if leader >= 4 { vec![leader, 9 - leader] } else { vec![4, 5] };
    let ask = [1u8, 2, 3].into_iter().find(|id| !leaving.contains(id)).expect("a member that stays");
    change(&hosts, &writer, ask, &["remove", &leaving[0].to_string(), &leaving[1].to_string()]);
    for &id in &leaving {
        hosts.terminate(id);
    }
    let leader = settled(&hosts, &writer, &[1, 2, 3], &[1, 2, 3], &[]);
    writer.wait_acks(20, CONVERGE);
    eprintln!("shrunk to 3; member {leader} leads");

    // A member's host dies: a new host takes its id (its data from the leader).
    let dead = [1u8, 2, 3].into_iter().find(|&id| id != leader).expect("a follower");
    hosts.kill(dead);
    let rest: Vec<u8> = [1u8, 2, 3].into_iter().filter(|&id| id != dead).collect();
    change(&hosts, &writer, leader, &["remove", &dead.to_string()]);
    change(&hosts, &writer, leader, &["add", &line(dead, 6, "participant")]);
    hosts.join(dead, 6, leader);
    let leader = settled(&hosts, &writer, &[1, 2, 3], &[1, 2, 3], &[]);
    writer.wait_acks(20, CONVERGE);
    eprintln!("member {dead} replaced by host zk-6 under the same id; member {leader} leads");

    // Another dies: a member with a new id takes its place, on host 4.
    let dead = [1u8, 2, 3].into_iter().find(|&id| id != leader && hosts.host(id) != 6).unwrap_or(rest[0]);
    hosts.kill(dead);
    change(&hosts, &writer, leader, &["remove", &dead.to_string()]);
    change(&hosts, &writer, leader, &["add", &line(7, 4, "participant")]);
    hosts.join(7, 4, leader);
    let mut voters: Vec<u8> = [1u8, 2, 3, 7].into_iter().filter(|&id| id != dead).collect();
    let leader = settled(&hosts, &writer, &voters, &voters.iter().map(|&id| u64::from(id)).collect::<Vec<_>>(), &[]);
    writer.wait_acks(20, CONVERGE);
    eprintln!("member {dead} replaced by member 7 on host zk-4; member {leader} leads");

    // An observer joins on host 5 (it serves reads), then is promoted.
    change(&hosts, &writer, leader, &["add", &line(8, 5, "observer")]);
    hosts.join(8, 5, leader);
    let mut all = voters.clone();
    all.push(8);
    let as_u64 = |ids: &[u8]| ids.iter().map(|&id| u64::from(id)).collect::<Vec<u64>>();
    settled(&hosts, &writer, &all, &as_u64(&voters), &[8]);
    writer.wait_acks(20, CONVERGE);
    change(&hosts, &writer, leader, &["promote", "8"]);
    voters.push(8);
    let leader = settled(&hosts, &writer, &all, &as_u64(&voters), &[]);
    writer.wait_acks(20, CONVERGE);
    eprintln!("observer 8 added and promoted; voters {voters:?}, member {leader} leads");

    // The writer and the kazoo client kept their sessions throughout; every
    // acknowledged write is on every member.
    writer.assert_only_connection_loss();
    for session in [kazoo, curator].into_iter().flatten() {
        let (client, verdict) = session.finish();
        assert!(verdict.starts_with("OK "), "the {client} session: {verdict}");
        eprintln!("{client} session kept through every change: {verdict}");
    }
    let path = format!("/mh/{}", writer.label);
    let acked = writer.stop();
    hosts.converged(&all, true, CONVERGE);
    for &id in &all {
        let lost: Vec<String> = acked.difference(&hosts.children(id, &path)).cloned().collect();
        assert!(lost.is_empty(), "member {id} lacks acknowledged writes: {lost:?}");
    }
    assert_eq!(status_all_ids(&hosts, leader), as_u64(&all).into_iter().collect(), "status --all shows the shape");
    eprintln!("{path}: {} acknowledged writes, all on each of {all:?}", acked.len());
}
