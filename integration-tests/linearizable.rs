//! Linearizable reads on real processes (loopback): a gRPC client's
//! `LINEARIZABLE` reads on a follower and on an observer, `zkctl get/ls
//! --linearizable`, and a member with `linearizable_reads = true` serving a
//! ZooKeeper client, each
//! reading every write acknowledged through another member before the read
//! was sent. Bounded: a fixed count of rounds, every wait with a deadline.

use crate::support::{runtime, within, Ensemble, Settings};
use std::process::{Command, Stdio};
use std::time::Duration;
use zabkeeper_client::{Client, ClientOptions, ANY_VERSION};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;

/// Write-then-read rounds per check.
const ROUNDS: u32 = 200;

fn options() -> ClientOptions {
    ClientOptions::default()
        .with_session_timeout(Duration::from_secs(6))
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(15))
}

/// A member other than the leader.
async fn follower(ensemble: &Ensemble) -> u64 {
    let leader = ensemble.leader(Duration::from_secs(30)).await;
    ensemble.ids().into_iter().find(|id| *id != leader).expect("a follower")
}

#[test]
fn linearizable_reads_on_a_follower_see_every_write_acknowledged_elsewhere() {
    let ensemble = Ensemble::start(3);
    runtime().block_on(async {
        let reading = follower(&ensemble).await;
        let writing: Vec<u64> = ensemble.ids().into_iter().filter(|id| *id != reading).collect();
        let writer = within(20, Client::connect(&ensemble.grpc(&writing[..1]), options())).await.expect("writer");
        let reader = within(20, Client::connect(&ensemble.grpc(&[reading]), options())).await.expect("reader");
        let fresh = reader.linearizable();
        writer.create("/lin", b"0", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        for i in 1..=ROUNDS {
            let value = i.to_string();
            writer.set_data("/lin", value.as_bytes(), ANY_VERSION).await.unwrap();
            let (data, _) = within(15, fresh.get_data("/lin")).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&data), value, "round {i}: a linearizable read missed an acked write");
            let name = format!("c{i}");
            writer.create(&format!("/lin/{name}"), b"", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
            let children = within(15, fresh.get_children("/lin")).await.unwrap();
            assert!(children.contains(&name), "round {i}: a linearizable listing missed {name}");
            assert!(within(15, fresh.exists(&format!("/lin/{name}"))).await.unwrap().is_some());
        }
        // Both handles share one session, in one order.
        assert_eq!(reader.get_data("/lin").await.unwrap().0, ROUNDS.to_string().as_bytes());

        // The follower timed its read-index rounds: one quorum round trip each.
        let metrics = crate::admin::samples(&crate::admin::scrape(&ensemble, reading));
        let timed = metrics.get("zabkeeper_read_index_round_duration_seconds_count").copied().unwrap_or(0.0);
        let asked = metrics.get("zabkeeper_read_index_rounds_total").copied().unwrap_or(0.0);
        assert!(timed >= 1.0 && timed <= asked, "rounds timed {timed}, asked {asked}");
        assert!(
            metrics.get("zabkeeper_read_index_round_duration_seconds_sum").is_some_and(|s| *s > 0.0),
            "{metrics:?}"
        );

        // zkctl on the follower, right after a write acknowledged elsewhere.
        writer.set_data("/lin", b"by-zkctl", ANY_VERSION).await.unwrap();
        let zkctl = |args: &[&str]| {
            let out = Command::new(crate::support::cli_binary())
                .args(["--server", &ensemble.grpc(&[reading]), "--timeout-ms", "10000", "--json"])
                .args(args)
                .env_remove("ZKCTL_SERVER")
                .stdin(Stdio::null())
                .output()
                .expect("run zkctl");
            assert_eq!(out.status.code(), Some(0), "zkctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let got = zkctl(&["get", "--linearizable", "/lin"]);
        assert!(got.contains("by-zkctl"), "zkctl get --linearizable: {got}");
        writer.create("/lin/last", b"", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        let listed = zkctl(&["ls", "--linearizable", "/lin"]);
        assert!(listed.contains("last"), "zkctl ls --linearizable: {listed}");
    });
}

#[test]
fn a_member_with_linearizable_reads_serves_zookeeper_clients_fresh_reads() {
    let settings = Settings { size: 3, extra: "linearizable_reads = true".into(), ..Settings::default() };
    let ensemble = Ensemble::start_with(settings);
    runtime().block_on(async {
        let reading = follower(&ensemble).await;
        let writing = ensemble.ids().into_iter().find(|id| *id != reading).expect("another member");
        let connect = |hosts: String| async move {
            let connector = zookeeper_client::Client::connector()
                .with_session_timeout(Duration::from_secs(6))
                .with_connection_timeout(Duration::from_secs(5));
            within(20, connector.connect(&hosts)).await.expect("connect")
        };
        let writer = connect(ensemble.zookeeper(&[writing])).await;
        let reader = connect(ensemble.zookeeper(&[reading])).await;
        let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        writer.create("/zk-lin", b"0", &open).await.unwrap();
        for i in 1..=ROUNDS {
            let value = i.to_string();
            writer.set_data("/zk-lin", value.as_bytes(), None).await.unwrap();
            let (data, _) = within(15, reader.get_data("/zk-lin")).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&data), value, "round {i}: a read on the member missed an acked write");
        }
    });
}

#[test]
fn an_observer_serves_linearizable_reads_as_a_follower_does() {
    let ensemble = Ensemble::start_with(Settings { size: 4, observers: 1, ..Settings::default() });
    runtime().block_on(async {
        let writer = within(20, Client::connect(&ensemble.grpc(&[1]), options())).await.expect("writer");
        let reader = within(20, Client::connect(&ensemble.grpc(&[4]), options())).await.expect("observer reader");
        let fresh = reader.linearizable();
        writer.create("/obs-lin", b"0", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        for i in 1..=ROUNDS {
            let value = i.to_string();
            writer.set_data("/obs-lin", value.as_bytes(), ANY_VERSION).await.unwrap();
            let (data, _) = within(15, fresh.get_data("/obs-lin")).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&data), value, "round {i}: the observer's linearizable read missed it");
        }
    });
}
