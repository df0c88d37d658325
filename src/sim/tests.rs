//! Runs many seeded schedules. `SIM_SEED=<n>` replays one; `SIM_SEEDS=<n>`
//! changes how many run (default keeps `make test` short).

use super::*;

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("SIM_SEED") {
        return vec![seed.parse().expect("SIM_SEED is a number")];
    }
    let count = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    (0..count).map(|i| 0x5eed_0000 + i).collect()
}

fn run_all(nodes: u64, default: u64) {
    if std::env::var("SIM_TRACE").is_ok() {
        let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("info").try_init();
    }
    let mut total = Report::default();
    let seeds = seeds(default);
    for &seed in &seeds {
        match Simulation::new(seed, Options::faulty(nodes)).run() {
            Ok(r) => {
                total.committed += r.committed;
                total.crashes += r.crashes;
                total.partitions += r.partitions;
                total.stalls += r.stalls;
                total.acked_writes += r.acked_writes;
                total.epochs += r.epochs;
            }
            Err(f) => panic!("{f}\nreplay: SIM_SEED={} cargo test --lib sim::tests", f.seed),
        }
    }
    println!(
        "{} schedules of {nodes} replicas: {} committed transactions, {} acked writes, {} epochs, {} crashes, {} partitions, {} stalled clocks",
        seeds.len(),
        total.committed,
        total.acked_writes,
        total.epochs,
        total.crashes,
        total.partitions,
        total.stalls
    );
    assert!(total.acked_writes > 0, "the workload made no progress at all");
}

#[test]
fn three_replicas_survive_faults() {
    run_all(3, 60);
}

#[test]
fn five_replicas_survive_faults() {
    run_all(5, 30);
}

/// Seeds that once broke an invariant, replayed on every run (with the bug each exposed).
const REGRESSIONS: [(u64, u64, &str); 8] = [
    (5, 0x5eed_0000, "a follower waited forever in sync while pings kept it alive"),
    (3, 0x5eed_0004, "a lost SNAP let a DIFF graft the leader's entries onto an uncommitted tail"),
    (3, 0x5eed_0005, "a lost SNAP let a DIFF graft the leader's entries onto an uncommitted tail"),
    (3, 0x5eed_007b, "an interrupted SNAP sync dropped committed entries, then a leader without them won"),
    (5, 0x5eed_0038, "an interrupted SNAP sync dropped committed entries, then a leader without them won"),
    (3, 0x5eed_0000, "a forward that arrived late was taken after the follower's later ones (session FIFO)"),
    (5, 0x5eed_0019, "a write left on the member a session moved away from was applied after its newer writes"),
    (5, 0x5eed_02c2, "a late FOLLOWERINFO restarted a synced follower's tracking; pings kept it content and behind"),
];

#[test]
fn pinned_regression_seeds() {
    for (nodes, seed, bug) in REGRESSIONS {
        if let Err(f) = Simulation::new(seed, Options::classic(nodes)).run() {
            panic!("regression ({bug}) is back: {f}");
        }
    }
}

#[test]
fn a_quiet_network_commits_everything() {
    let mut options = Options::faulty(3);
    options.faults = network::Faults::none();
    options.crash = 0.0;
    options.partition = 0.0;
    options.stall = 0.0;
    let report = Simulation::new(1, options).run().unwrap();
    assert!(report.acked_writes > 50, "{report:?}");
    assert_eq!(report.epochs, 1, "one leader for the whole run");
}
