//! Runs many seeded schedules. `SIM_SEED=<n>` replays one; `SIM_SEEDS=<n>`
//! changes how many run (default keeps `make test` short), and
//! `SIM_SEED_START=<k>` starts them k seeds further on (CI runs the first
//! ones every time; a soak moves on to schedules none has run).

use super::*;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The first seed of the window (SIM_SEED_START counts from it).
const FIRST_SEED: u64 = 0x5eed_0000;

/// The number in the environment variable `name`, if it is set; a value
/// that is not a number stops the run, naming the variable.
fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.parse().unwrap_or_else(|e| panic!("{name} is a number: {e:?}")))
}

/// The seeds a test runs; every seeded test takes them here, so `SIM_TRACE`
/// logs any of them.
fn seeds(default: u64) -> Vec<u64> {
    // SIM_TRACE=1 logs at info; any other value is the filter (SIM_TRACE=debug).
    if let Ok(filter) = std::env::var("SIM_TRACE") {
        let filter = if filter == "1" { "info".to_string() } else { filter };
        let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(filter).try_init();
    }
    if let Some(seed) = env_number("SIM_SEED") {
        return vec![seed];
    }
    let count = env_number("SIM_SEEDS").unwrap_or(default);
    let start = env_number("SIM_SEED_START").unwrap_or(0);
    let window = FIRST_SEED.checked_add(start).and_then(|first| Some(first..first.checked_add(count)?));
    window.expect("SIM_SEED_START + SIM_SEEDS is past the last seed").collect()
}

fn run_all(nodes: u64, default: u64) {
    let seeds = seeds(default);
    // Schedules are independent: every core takes its share, in order, and
    // the first failure (by seed order) is the one reported.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(seeds.len().max(1));
    let reports: Vec<Result<Vec<Report>, Failure>> = std::thread::scope(|scope| {
        let share = seeds.len().div_ceil(threads);
        let workers: Vec<_> = seeds
            .chunks(share.max(1))
            .map(|part| {
                scope.spawn(move || {
                    part.iter().map(|&seed| Simulation::new(seed, Options::faulty(nodes)).run()).collect()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a schedule's thread panicked")).collect()
    });
    let mut total = Report::default();
    for part in reports {
        match part {
            Ok(runs) => {
                for r in runs {
                    total.committed += r.committed;
                    total.crashes += r.crashes;
                    total.partitions += r.partitions;
                    total.stalls += r.stalls;
                    total.pauses += r.pauses;
                    total.disk_faults += r.disk_faults;
                    total.snapshot_faults += r.snapshot_faults;
                    total.slow += r.slow;
                    total.disk_low += r.disk_low;
                    total.liveness_checks += r.liveness_checks;
                    total.acked_writes += r.acked_writes;
                    total.epochs += r.epochs;
                    total.stored_diffs += r.stored_diffs;
                    total.stored_reads_lost += r.stored_reads_lost;
                    total.transfers += r.transfers;
                    total.handovers += r.handovers;
                    total.handovers_missed += r.handovers_missed;
                    total.reads.linearizable += r.reads.linearizable;
                    total.reads.plain += r.reads.plain;
                    total.reads.stale_plain += r.reads.stale_plain;
                }
            }
            Err(f) => panic!("{f}\nreplay: SIM_SEED={} cargo test -p zabkeeper-sim --lib tests", f.seed),
        }
    }
    println!(
        "{} schedules of {nodes} replicas: {} committed transactions, {} acked writes, {} epochs, {} crashes, {} partitions, {} stalled clocks ({} of them paused), \
         {} failed flushes, {} failed snapshots, {} slow members, {} disks short of space, {} liveness windows checked, \
         {} DIFFs from storage, {} of them purged away, {} leadership transfers ({} to the nominee, {} elsewhere), \
         {} linearizable reads (none stale), {} plain reads ({} stale)",
        seeds.len(),
        total.committed,
        total.acked_writes,
        total.epochs,
        total.crashes,
        total.partitions,
        total.stalls,
        total.pauses,
        total.disk_faults,
        total.snapshot_faults,
        total.slow,
        total.disk_low,
        total.liveness_checks,
        total.stored_diffs,
        total.stored_reads_lost,
        total.transfers,
        total.handovers,
        total.handovers_missed,
        total.reads.linearizable,
        total.reads.plain,
        total.reads.stale_plain
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

/// Seeds found with [`Options::faulty`] as it was when they failed (disk
/// faults, slow members, liveness checks; snapshots every 40 transactions).
const FAULTY_REGRESSIONS: [(u64, u64, &str); 1] =
    [(3, 0x5eed_0674, "a follower that promised a later epoch to a would-be leader could never join the running one")];

/// Seeds of the soak (`Options::faulty`, as `run_all` runs them) that found a bug.
const SOAK_REGRESSIONS: [(u64, u64, &str); 5] = [
    (
        3,
        1_592_594_729,
        "a follower that lost an old epoch's end in a DIFF took the new epoch's entries as its continuation",
    ),
    (
        3,
        1_592_594_170,
        "a leader resumed from a pause answered a sync from its own log, behind a newer leader's writes",
    ),
    (3, 1_592_591_225, "a member kept following a would-be leader that followed another, round after round"),
    (3, 1_592_595_209, "followers timed out of syncs that took initLimit in all, though each step came in time"),
    (
        3,
        1_592_591_875,
        "a request sent to a paused member was lost when a second stall hit it (the simulation's own bug)",
    ),
];

#[test]
fn pinned_regression_seeds() {
    // Pinned seeds replay the schedules they were found with, in which
    // every member snapshotted after the same count.
    for (nodes, seed, bug) in SOAK_REGRESSIONS {
        let options =
            Options { snapshot_turns: false, transfer: 0.0, linearizable_reads: false, ..Options::faulty(nodes) };
        if let Err(f) = Simulation::new(seed, options).run() {
            panic!("regression ({bug}) is back: {f}");
        }
    }
    for (nodes, seed, bug) in REGRESSIONS {
        if let Err(f) = Simulation::new(seed, Options::classic(nodes)).run() {
            panic!("regression ({bug}) is back: {f}");
        }
    }
    for (nodes, seed, bug) in FAULTY_REGRESSIONS {
        let options = Options {
            snapshot_every: 40,
            snapshot_turns: false,
            digest_every: 10,
            transfer: 0.0,
            linearizable_reads: false,
            ..Options::faulty(nodes)
        };
        if let Err(f) = Simulation::new(seed, options).run() {
            panic!("regression ({bug}) is back: {f}");
        }
    }
}

/// Issue 33's checker at work: across seeded schedules with pauses and
/// partitions, plain reads are found stale (a paused or cut-off leader
/// answers from its old tree: allowed, they are sequentially consistent)
/// while no linearizable read and no sync ever is (each run fails on one).
#[test]
fn plain_reads_go_stale_under_faults_linearizable_reads_and_syncs_never() {
    let options = Options { stall: 0.004, ..Options::faulty(3) };
    let mut found = None;
    let mut linearizable = 0;
    for seed in seeds(40) {
        let report = Simulation::new(seed, options.clone())
            .run()
            .unwrap_or_else(|f| panic!("{f}\nreplay: SIM_SEED={seed} cargo test -p zabkeeper-sim --lib plain_reads"));
        linearizable += report.reads.linearizable;
        if report.reads.stale_plain > 0 && found.is_none() {
            found = Some((seed, report.reads.stale_plain));
        }
    }
    assert!(linearizable > 0, "no linearizable read was answered");
    let (seed, stale) = found.expect("no schedule had a stale plain read: the checker would not see one");
    println!("seed {seed:#x}: {stale} stale plain reads; {linearizable} linearizable reads, none stale");
}

#[test]
fn a_quiet_network_commits_everything() {
    let report = Simulation::new(1, calm(3)).run().unwrap();
    assert!(report.acked_writes > 50, "{report:?}");
    assert!(report.liveness_checks >= 4, "a quiet network is healthy the whole run: {report:?}");
    assert_eq!(report.epochs, 1, "one leader for the whole run");
}

/// Runs `default` schedules (or `SIM_SEEDS`) of 3 voters and 2 observers.
#[test]
fn observers_follow_every_commit_and_never_vote_under_faults() {
    let seeds = seeds(30);
    for &seed in &seeds {
        let options = Options { observers: 2, ..Options::faulty(3) };
        if let Err(f) = Simulation::new(seed, options).run() {
            panic!("{f}\nreplay: SIM_SEED={} cargo test -p zabkeeper-sim --lib observers", f.seed);
        }
    }
}

/// Runs `default` schedules (or `SIM_SEEDS`) of 3 voters and 2 spares whose
/// leader is asked to reconfigure now and then, to memberships drawn from all
/// five (grow, shrink, replace, observe, promote), under every fault.
#[test]
fn membership_changes_under_faults_lose_nothing_and_keep_one_order() {
    let seeds = seeds(30);
    let mut total = Report::default();
    for &seed in &seeds {
        let options = Options { spares: 2, reconfig: 0.01, ..Options::faulty(3) };
        match Simulation::new(seed, options).run() {
            Ok(r) => {
                total.reconfigs += r.reconfigs;
                total.reconfigs_refused += r.reconfigs_refused;
                total.liveness_checks += r.liveness_checks;
            }
            Err(f) => panic!("{f}\nreplay: SIM_SEED={} cargo test -p zabkeeper-sim --lib membership", f.seed),
        }
    }
    println!(
        "{} schedules: {} reconfigurations, {} refused, {} liveness checks",
        seeds.len(),
        total.reconfigs,
        total.reconfigs_refused,
        total.liveness_checks
    );
    assert!(total.reconfigs >= seeds.len(), "reconfigurations happen: {total:?}");
}

#[test]
fn a_calm_ensemble_reconfigures_often_and_stays_live() {
    let options = Options { spares: 2, reconfig: 0.01, ..calm(3) };
    let report = Simulation::new(5, options).run().unwrap();
    assert!(report.reconfigs >= 10, "{report:?}");
    assert!(report.acked_writes > 50, "writes go on across reconfigurations: {report:?}");
    assert!(report.liveness_checks >= 2, "{report:?}");
}

#[test]
fn a_calm_ensemble_hands_leadership_to_every_nominee() {
    for nodes in [3, 5] {
        let report = Simulation::new(11, Options { transfer: 0.004, ..calm(nodes) }).run().unwrap();
        assert!(report.transfers >= 5, "{report:?}");
        assert_eq!(report.handovers_missed, 0, "with nothing failing, the nominee always leads next: {report:?}");
        assert!(
            report.handovers + 1 >= report.transfers,
            "each transfer lands (the last may still be under way): {report:?}"
        );
        assert!(report.acked_writes > 50, "writes go on across the handovers: {report:?}");
        println!(
            "{nodes} members: {} transfers, {} handovers, {} epochs",
            report.transfers, report.handovers, report.epochs
        );
    }
}

/// A tree loaded as soon as a leader serves, its history epochs ahead:
/// under crashes, partitions, stalls and transfers no transaction commits
/// after it in an epoch that is not past the loaded one (the oracle fails
/// the run), every replica applies it alike, and most schedules load it.
#[test]
fn a_loaded_tree_moves_the_ensemble_past_its_epoch_under_faults() {
    let (mut loads, mut committed, mut refused, mut epochs) = (0, 0, 0, 0);
    let seeds = seeds(30);
    for &seed in &seeds {
        let options = Options { load: true, ..Options::faulty(3) };
        match Simulation::new(seed, options).run() {
            Ok(r) => {
                loads += r.loads;
                committed += r.loads_committed;
                refused += r.loads_refused;
                epochs += r.epochs;
            }
            Err(f) => panic!("{f}\nreplay: SIM_SEED={} cargo test -p zabkeeper-sim --lib loaded", f.seed),
        }
    }
    println!(
        "{} schedules: {loads} loads proposed, {committed} committed, {refused} refused, {epochs} epochs",
        seeds.len()
    );
    // The oracle checks what follows a committed load: most schedules must have one.
    assert!(committed * 2 > seeds.len(), "too few loads committed ({committed} of {}): the check is weak", seeds.len());
}

/// A network without faults and replicas that neither crash nor stall.
fn calm(nodes: u64) -> Options {
    Options {
        faults: network::Faults::none(),
        crash: 0.0,
        partition: 0.0,
        stall: 0.0,
        slow: 0.0,
        disk_low: 0.0,
        disk_fault: 0.0,
        snapshot_fault: 0.0,
        transfer: 0.0,
        ..Options::faulty(nodes)
    }
}

#[test]
fn the_liveness_check_fails_disks_that_never_finish_a_flush() {
    let options = Options { flush: 0.0, ..calm(3) };
    let failure = Simulation::new(7, options).run().expect_err("nothing is durable, so nothing commits");
    assert!(failure.to_string().contains("no write of the probe committed"), "{failure}");
    assert!(failure.step >= LIVENESS_STEPS && failure.step < 2 * LIVENESS_STEPS, "{failure}");
}
