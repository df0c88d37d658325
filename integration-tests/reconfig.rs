//! Reconfiguration on real processes: an ensemble started as three grows to
//! five with `zkctl admin member add`, survives two of its first three
//! members down, refuses a shrink that would leave no quorum reachable, and
//! shrinks back to three. Writes acknowledged along the way are on every
//! member at the end.
//!
//! Every wait is bounded; the harness stops every process by PID.

use crate::support::{connect, runtime, serial, Ensemble, Settings};
use std::time::Duration;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_proto::admin as pb;

/// `zkctl admin member ...` against member `via`; its stdout, or a panic with its stderr.
fn member(ensemble: &Ensemble, via: u64, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["admin", "member"];
    all.extend_from_slice(args);
    let out = ensemble.zkctl(via, &all);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(stderr)
    }
}

async fn configuration(ensemble: &Ensemble, id: u64) -> pb::ConfigurationReply {
    let mut admin =
        zabkeeper_proto::admin::admin_client::AdminClient::connect(format!("http://{}", ensemble.admin(id)))
            .await
            .expect("admin connects");
    admin.get_configuration(pb::GetConfigurationRequest {}).await.expect("configuration").into_inner()
}

fn voters(c: &pb::ConfigurationReply) -> Vec<u64> {
    c.members.iter().filter(|m| m.role == "participant").map(|m| m.id).collect()
}

#[test]
fn three_members_grow_to_five_and_shrink_back_under_writes() {
    let _serial = serial();
    let mut ensemble = Ensemble::configure(Settings { size: 5, ..Settings::default() });
    let first = ensemble.config_of(&[1, 2, 3], "first-three.toml");
    for id in 1..=3 {
        ensemble.spawn_with_config(id, &first, &[]);
    }
    let rt = runtime();
    let mut written = Vec::new();
    let acl = Acl::open_unsafe();
    rt.block_on(async {
        ensemble.wait_serving_async(&[1, 2, 3], Duration::from_secs(30)).await;
        let c = connect(&ensemble.grpc(&[1, 2, 3])).await;
        c.create("/grow", b"", CreateMode::Persistent, &acl).await.expect("create");
        for n in 0..20 {
            let path = format!("/grow/before-{n}");
            c.create(&path, b"x", CreateMode::Persistent, &acl).await.expect("write before");
            written.push(path);
        }
        c.close().await.expect("close");
    });
    // Members 4 and 5 start from the whole file: they follow the leader as
    // learners, take its configuration of three, and are not yet counted.
    ensemble.spawn(4);
    ensemble.spawn(5);
    rt.block_on(async {
        ensemble.wait_serving_async(&[1, 2, 3, 4, 5], Duration::from_secs(30)).await;
        assert_eq!(voters(&configuration(&ensemble, 4).await), vec![1, 2, 3], "a learner holds the ensemble's three");
    });

    let (line4, line5) = (ensemble.server_line(4, "participant"), ensemble.server_line(5, "participant"));
    let added = member(&ensemble, 1, &["add", &line4, &line5]).unwrap_or_else(|e| panic!("add refused: {e}"));
    assert!(added.contains("reconfigured to version"), "{added}");
    rt.block_on(async {
        for id in 1..=5 {
            let c = configuration(&ensemble, id).await;
            assert_eq!(voters(&c), vec![1, 2, 3, 4, 5], "member {id} holds the five");
            assert!(!c.joint);
        }
        // `/zookeeper/config` shows the five as ZooKeeper's clients read it.
        let c = connect(&ensemble.grpc(&[5])).await;
        c.sync("/zookeeper/config").await.expect("sync");
        let (text, _) = c.get_data("/zookeeper/config").await.expect("read the config node");
        let text = String::from_utf8(text).expect("text");
        assert!(text.contains(&line4) && text.contains(&line5), "{text}");
        c.close().await.expect("close");
    });

    // Two of the first three down: the five still have a majority.
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let down: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &down {
        ensemble.kill(*id);
    }
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[leader, 4, 5])).await;
        for n in 0..20 {
            let path = format!("/grow/five-{n}");
            c.create(&path, b"x", CreateMode::Persistent, &acl).await.expect("a majority of five commits");
            written.push(path);
        }
        c.close().await.expect("close");
    });
    // Removing 4 and 5 now would leave {1, 2, 3} with two of them down: refused.
    let refused = member(&ensemble, 4, &["remove", "4", "5"]).expect_err("no quorum of the three is up");
    assert!(refused.contains("not connected"), "{refused}");
    for id in &down {
        ensemble.spawn_with_config(*id, &first, &[]);
    }
    rt.block_on(ensemble.wait_serving_async(&[1, 2, 3, 4, 5], Duration::from_secs(30)));
    member(&ensemble, 1, &["remove", "4", "5"]).unwrap_or_else(|e| panic!("remove refused: {e}"));
    ensemble.kill(4);
    ensemble.kill(5);
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[1, 2, 3])).await;
        c.create("/grow/three-again", b"x", CreateMode::Persistent, &acl).await.expect("three commit alone");
        written.push("/grow/three-again".into());
        c.close().await.expect("close");
        for id in 1..=3 {
            assert_eq!(voters(&configuration(&ensemble, id).await), vec![1, 2, 3]);
            let c = connect(&ensemble.grpc(&[id])).await;
            c.sync("/grow").await.expect("sync");
            for path in &written {
                assert!(c.exists(path).await.expect("exists").is_some(), "member {id} lacks {path}");
            }
            c.close().await.expect("close");
        }
    });
    let list = member(&ensemble, 2, &["list"]).expect("list");
    let ids: Vec<&str> = list.lines().skip(2).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(ids, vec!["1", "2", "3"], "{list}");
}

#[test]
fn a_member_started_with_join_follows_and_is_added() {
    let _serial = serial();
    let mut ensemble = Ensemble::configure(Settings { size: 4, ..Settings::default() });
    let first = ensemble.config_of(&[1, 2, 3], "first-three.toml");
    for id in 1..=3 {
        ensemble.spawn_with_config(id, &first, &[]);
    }
    let rt = runtime();
    rt.block_on(ensemble.wait_serving_async(&[1, 2, 3], Duration::from_secs(30)));
    // Its file lists only itself: alone it would lead itself; --join makes it follow.
    let alone = ensemble.config_of(&[4], "only-four.toml");
    let via = ensemble.admin(2);
    ensemble.spawn_with_config(4, &alone, &[("ZABKEEPER_JOIN", via.as_str())]);
    rt.block_on(async {
        ensemble.wait_serving_async(&[1, 2, 3, 4], Duration::from_secs(30)).await;
        let s = ensemble.status(4).await.expect("member 4 answers");
        assert_eq!(s.role, "follower", "a joiner follows, it does not lead itself");
        assert_eq!(voters(&configuration(&ensemble, 4).await), vec![1, 2, 3]);
    });
    let line4 = ensemble.server_line(4, "participant");
    member(&ensemble, 1, &["add", &line4]).unwrap_or_else(|e| panic!("add refused: {e}"));
    rt.block_on(async {
        let conf = configuration(&ensemble, 4).await;
        assert_eq!(voters(&conf), vec![1, 2, 3, 4]);
        // Its line had no place for its other addresses: the leader took
        // them from what member 4 said of itself, and every member has them.
        for id in [1, 4] {
            let conf = configuration(&ensemble, id).await;
            let four = conf.members.iter().find(|m| m.id == 4).expect("member 4 listed");
            let admin = format!("admin={}", ensemble.admin(4));
            assert!(four.endpoints.contains(&admin), "member {id} lists 4 with {:?}", four.endpoints);
            assert!(conf.text.contains("zabkeeper.4="), "{}", conf.text);
        }
        let s = ensemble.status(1).await.expect("member 1 answers");
        let four = s.members.iter().find(|m| m.id == 4).expect("status lists member 4");
        assert_eq!(four.admin_addr, ensemble.admin(4), "status knows 4's admin address though 1's file does not");
        let c = connect(&ensemble.grpc(&[4])).await;
        c.create("/joined", b"4", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("a write through 4");
        c.close().await.expect("close");
        let c = connect(&ensemble.grpc(&[1])).await;
        c.sync("/joined").await.expect("sync");
        assert_eq!(c.get_data("/joined").await.expect("read").0, b"4");
        c.close().await.expect("close");
    });
    // Both files were rewritten to the configuration in force (comments and
    // settings kept): member 4's lists the four and starts without --join,
    // even with its data gone.
    let (four, one) = (ensemble.member_config(4, &alone), ensemble.member_config(1, &first));
    for (file, who, id) in [(&four, "member 4's", 4), (&one, "member 1's", 1)] {
        // Each member rewrites its file as it applies the change, which may
        // be a moment after the leader answered.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let (text, ids) = loop {
            let text = std::fs::read_to_string(file).expect("read the config file");
            let config = zabkeeper_config::ServerConfig::parse(&text, Some(id));
            let config = config.unwrap_or_else(|e| panic!("{who} file does not load: {e}\n{text}"));
            let ids: Vec<u64> = config.members.iter().map(|m| m.id).collect();
            if ids.len() == 4 || std::time::Instant::now() > deadline {
                break (text, ids);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(ids, vec![1, 2, 3, 4], "{who} file:\n{text}");
        assert!(text.starts_with("tick_ms = 50\n"), "{who} file keeps its settings:\n{text}");
    }
    ensemble.kill(4);
    std::fs::remove_dir_all(ensemble.data_dir(4)).expect("remove member 4's data");
    ensemble.spawn_with_config(4, &four, &[]);
    rt.block_on(async {
        ensemble.wait_serving_async(&[1, 2, 3, 4], Duration::from_secs(30)).await;
        let c = connect(&ensemble.grpc(&[4])).await;
        c.sync("/joined").await.expect("sync");
        assert_eq!(c.get_data("/joined").await.expect("read").0, b"4", "member 4 caught up from the others");
        c.close().await.expect("close");
    });
}
