//! Disks that fill, on real processes whose data directories are small
//! tmpfs mounts the test makes (it needs root to mount; it says it is
//! skipped where it cannot, and CI runs as root):
//!
//! * the leader's disk falls below `disk_reserve_bytes`: writes that would
//!   grow the state get ThrottledOp with a reason, reads, deletes and new
//!   sessions go on, and writes resume once space returns;
//! * a follower's disk fills to the last byte: its log write fails and the
//!   member stops (crash-stop, no retry), the other two go on acknowledging
//!   writes, and once it has room again it restarts and catches up with
//!   every acknowledged write.
//!
//! Every wait is bounded; mounts are removed even when the test fails.

use crate::support::{connect, runtime, serial, Ensemble, Settings};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use zabkeeper_client::ClientError;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zookeeper_client as zk;

/// Size of each member's tmpfs.
const DISK_MIB: u64 = 48;
/// The reserve the members keep.
const RESERVE_MIB: u64 = 12;

/// A tmpfs mounted by the test; lazily unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB at `path`, or says why it cannot.
    fn mount(path: &Path, mib: u64) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs { path: path.to_path_buf() })
    }

    /// Fills the filesystem with a file until at most `leave` bytes are free.
    fn fill(&self, leave: u64) -> PathBuf {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).expect("create the filler");
        let chunk = vec![0xa5u8; 256 * 1024];
        let deadline = Instant::now() + Duration::from_secs(30);
        while free_bytes(&self.path) > leave && Instant::now() < deadline {
            let room = free_bytes(&self.path) - leave;
            let n = room.min(chunk.len() as u64) as usize;
            if file.write_all(&chunk[..n]).is_err() {
                break;
            }
        }
        let _ = file.sync_all();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn free_bytes(dir: &Path) -> u64 {
    zabkeeper::runtime::disk::free_bytes(dir).expect("statvfs")
}

/// Mounts a tmpfs on every member's data directory, or None with the reason printed.
fn mount_all(ensemble: &Ensemble) -> Option<Vec<Tmpfs>> {
    let mut mounts = Vec::new();
    for id in ensemble.ids() {
        match Tmpfs::mount(&ensemble.data_dir(id), DISK_MIB) {
            Ok(m) => mounts.push(m),
            Err(reason) => {
                eprintln!("skipped: this test needs to mount a small tmpfs (run as root): {reason}");
                return None;
            }
        }
    }
    Some(mounts)
}

fn mib(n: u64) -> u64 {
    n * 1024 * 1024
}

async fn wait_disk_low(ensemble: &Ensemble, id: u64, low: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if ensemble.status(id).await.is_some_and(|s| s.disk_low == low) {
            return;
        }
        assert!(Instant::now() < deadline, "member {id} never reported disk_low = {low}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_leader_below_its_disk_reserve_refuses_growing_writes_and_resumes_when_space_returns() {
    let _serial = serial();
    let settings = Settings { extra: format!("disk_reserve_bytes = {}", mib(RESERVE_MIB)), ..Settings::default() };
    let mut ensemble = Ensemble::configure(settings);
    let Some(mounts) = mount_all(&ensemble) else { return };
    ensemble.start_all();
    let rt = runtime();
    rt.block_on(async {
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let follower = ensemble.ids().into_iter().find(|id| *id != leader).expect("a follower");
        let client = connect(&ensemble.grpc(&[follower])).await;
        let open = Acl::open_unsafe();
        client.create("/keep", b"v", CreateMode::Persistent, &open).await.expect("create /keep");
        client.create("/gone", b"v", CreateMode::Persistent, &open).await.expect("create /gone");

        let filler = mounts[leader as usize - 1].fill(mib(RESERVE_MIB) / 2);
        wait_disk_low(&ensemble, leader, true).await;

        let err =
            client.create("/new", b"v", CreateMode::Persistent, &open).await.expect_err("the leader is short of disk");
        match &err {
            ClientError::Server(z) => {
                assert_eq!(z.code, ErrorCode::ThrottledOp, "{err}");
                assert!(z.reason.contains("disk_reserve_bytes"), "the reason names the setting: {err}");
            }
            other => panic!("expected ThrottledOp, got {other}"),
        }
        let err = client.set_data("/keep", b"w", -1).await.expect_err("setData grows the state");
        assert!(matches!(&err, ClientError::Server(z) if z.code == ErrorCode::ThrottledOp), "{err}");

        // A real ZooKeeper client sees ZooKeeper's code for it.
        let zk_client = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&ensemble.zookeeper(&[leader]))
            .await
            .expect("a new session while the disk is short");
        let zk_open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let err = zk_client.create("/zk", b"v", &zk_open).await.expect_err("throttled");
        assert!(matches!(err, zk::Error::Throttled), "{err:?}");
        let (data, _) = zk_client.get_data("/keep").await.expect("reads go on");
        assert_eq!(data, b"v");

        // Deletes still go through: an operator can make room.
        client.delete("/gone", -1).await.expect("delete while short of disk");
        assert_eq!(client.get_data("/keep").await.expect("read").0, b"v");

        std::fs::remove_file(&filler).expect("free the space");
        wait_disk_low(&ensemble, leader, false).await;
        client.create("/new", b"v", CreateMode::Persistent, &open).await.expect("writes resume");
        client.set_data("/keep", b"w", -1).await.expect("setData resumes");
        zk_client.create("/zk", b"v", &zk_open).await.expect("and on the ZooKeeper port");
    });
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
    drop(ensemble);
    drop(mounts);
}

#[test]
fn a_follower_whose_disk_fills_stops_and_catches_up_after_a_restart() {
    let _serial = serial();
    // No reserve: the disk really fills, and the write to it fails.
    let settings = Settings { extra: "disk_reserve_bytes = 0".into(), ..Settings::default() };
    let mut ensemble = Ensemble::configure(settings);
    let Some(mounts) = mount_all(&ensemble) else { return };
    ensemble.start_all();
    let rt = runtime();
    let victim = rt.block_on(async {
        let leader = ensemble.leader(Duration::from_secs(10)).await;
        let victim = ensemble.ids().into_iter().find(|id| *id != leader).expect("a follower");
        let client = connect(&ensemble.grpc(&[leader])).await;
        let open = Acl::open_unsafe();
        client.create("/w", b"", CreateMode::Persistent, &open).await.expect("create /w");
        let filler = mounts[victim as usize - 1].fill(0);
        assert!(free_bytes(&ensemble.data_dir(victim)) < 64 * 1024, "the disk is full");

        // Writes go on with the other two; the victim's log write fails.
        let value = vec![7u8; 4096];
        let mut acked = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut stopped = None;
        for i in 0..2000 {
            let path = format!("/w/n{i:05}");
            client.create(&path, &value, CreateMode::Persistent, &open).await.expect("the majority acknowledges");
            acked.push(path);
            if i % 20 == 0 {
                stopped = ensemble.member(victim).exited();
                if stopped.is_some() || Instant::now() > deadline {
                    break;
                }
            }
        }
        let status = stopped.expect("the follower stopped once its disk was full");
        assert!(!status.success(), "a storage failure is a failed exit: {status}");
        let log = ensemble.log(victim);
        assert!(log.contains("storage failed"), "the log says why it stopped:\n{log}");
        for i in 0..20 {
            let path = format!("/w/after{i}");
            client.create(&path, &value, CreateMode::Persistent, &open).await.expect("the majority goes on");
            acked.push(path);
        }

        std::fs::remove_file(&filler).expect("free the space");
        (victim, acked)
    });
    let (victim, acked) = victim;
    ensemble.spawn(victim);
    ensemble.wait_serving(ensemble.ids(), Duration::from_secs(30));
    rt.block_on(async {
        let client = connect(&ensemble.grpc(&[victim])).await;
        client.sync("/w").await.expect("sync");
        let children = client.get_children("/w").await.expect("children");
        assert_eq!(children.len(), acked.len(), "every acknowledged write is on the restarted member");
    });
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
    drop(ensemble);
    drop(mounts);
}
