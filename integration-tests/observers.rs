//! Observers on real processes: 3 voters and 2 observers. The observers
//! serve sessions and reads, forward writes and see every commit, are
//! reported as observers, never lead, and are not needed for a quorum;
//! without a quorum of voters they stop serving with everyone else.
//!
//! Every wait is bounded; the harness stops every process by PID.

use crate::support::{connect, runtime, serial, Ensemble, Settings};
use std::time::Duration;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;

#[test]
fn observers_serve_forward_and_follow_but_never_vote() {
    let _serial = serial();
    let mut ensemble = Ensemble::start_with(Settings { size: 5, observers: 2, ..Settings::default() });
    let rt = runtime();
    rt.block_on(async {
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        assert!(leader <= 3, "a voter leads, not {leader}");
        for id in [4, 5] {
            let s = ensemble.status(id).await.expect("observer answers");
            assert_eq!(s.role, "observer", "member {id} reports itself an observer");
            assert!(s.serving);
        }
        // A write through an observer is forwarded, committed and seen everywhere.
        let c = connect(&ensemble.grpc(&[4])).await;
        let acl = Acl::open_unsafe();
        c.create("/via-observer", b"1", CreateMode::Persistent, &acl).await.expect("create through an observer");
        c.close().await.expect("close");
        for id in 1..=5 {
            let c = connect(&ensemble.grpc(&[id])).await;
            c.sync("/via-observer").await.expect("sync");
            let (data, _) = c.get_data("/via-observer").await.expect("read");
            assert_eq!(data, b"1", "member {id} sees the write");
            c.close().await.expect("close");
        }
    });
    // Both observers down: the voters commit without them.
    ensemble.kill(4);
    ensemble.kill(5);
    rt.block_on(async {
        let c = connect(&ensemble.grpc(&[1, 2, 3])).await;
        c.set_data("/via-observer", b"2", -1).await.expect("writes need no observer");
        c.close().await.expect("close");
    });
    ensemble.spawn(4);
    ensemble.spawn(5);
    rt.block_on(async {
        ensemble.wait_serving_async(&[1, 2, 3, 4, 5], Duration::from_secs(20)).await;
        let c = connect(&ensemble.grpc(&[5])).await;
        c.sync("/via-observer").await.expect("sync");
        assert_eq!(c.get_data("/via-observer").await.expect("read").0, b"2", "a restarted observer caught up");
        c.close().await.expect("close");
    });
    // Two voters down: one voter and two observers are no quorum.
    let leader = rt.block_on(ensemble.leader(Duration::from_secs(10)));
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &others {
        ensemble.kill(*id);
    }
    rt.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let serving = [leader, 4, 5];
            let mut any = false;
            for id in serving {
                any |= ensemble.status(id).await.is_some_and(|s| s.serving);
            }
            if !any {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "members kept serving without a quorum of voters");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
