//! The checker against hand-made histories: one clean, and one per anomaly it must catch.

use super::*;

fn op(session: u64, key: &str, kind: OpKind, (invoke, complete): (u64, u64), outcome: Outcome) -> Op {
    Op { session, client: session as usize, key: key.into(), kind, invoke, complete, outcome }
}

fn write(s: u64, key: &str, value: &str, expected: Option<i32>, t: (u64, u64), outcome: Outcome) -> Op {
    op(s, key, OpKind::Write { value: value.into(), expected }, t, outcome)
}

fn read(s: u64, key: &str, sync: bool, t: (u64, u64), value: &str, version: i32) -> Op {
    let kind = if sync { OpKind::SyncRead } else { OpKind::Read };
    op(s, key, kind, t, Outcome::Read { value: value.into(), version })
}

fn acked(version: i32) -> Outcome {
    Outcome::Written { version }
}

fn unknown() -> Outcome {
    Outcome::Unknown("ConnectionLoss".into())
}

fn failed() -> Outcome {
    Outcome::Failed("BadVersion".into())
}

/// Checks with keys a and b created as "a0" and "b0"; `finals` lists (member, key, value, version).
fn run(ops: &[Op], finals: &[(u64, &str, &str, i32)]) -> Report {
    let initial = [("a", "a0"), ("b", "b0")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut states = FinalStates::new();
    for &(m, key, value, version) in finals {
        states.entry(m).or_default().insert(key.into(), (value.into(), version));
    }
    check(ops, &initial, &states)
}

/// Every member ends with `a` at (value, version) and `b` at ("b0", 0).
fn agreed(value: &'static str, version: i32) -> Vec<(u64, &'static str, &'static str, i32)> {
    (1..=3).flat_map(|m| [(m, "a", value, version), (m, "b", "b0", 0)]).collect()
}

fn kinds(report: &Report) -> Vec<&'static str> {
    let mut kinds: Vec<_> = report.anomalies.iter().map(Anomaly::kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

#[test]
fn clean_history_with_concurrency_unknowns_and_failed_cas_passes() {
    let ops = [
        write(1, "a", "a1", None, (0, 10), acked(1)),
        write(2, "a", "a2", Some(0), (2, 12), failed()), // lost the race with op#0
        read(2, "a", false, (13, 15), "a1", 1),
        write(2, "a", "a3", Some(1), (16, 30), unknown()), // took effect: seen at 2 below
        read(1, "a", false, (20, 22), "a1", 1),            // concurrent with op#3, stale is fine
        read(3, "a", true, (31, 35), "a3", 2),             // client 1's new session after expiry
        write(1, "a", "a4", None, (40, NEVER), unknown()), // never completed, overwritten unseen
        write(3, "a", "a5", Some(3), (50, 60), acked(4)),
        write(1, "b", "b1", None, (5, 9), acked(1)),
        read(2, "b", false, (6, 8), "b0", 0),
        read(2, "b", true, (10, 11), "b1", 1),
        write(2, "b", "b2", Some(0), (12, 14), failed()),
    ];
    let finals: Vec<_> = (1..=3).flat_map(|m| [(m, "a", "a5", 4), (m, "b", "b1", 1)]).collect();
    let report = run(&ops, &finals);
    assert!(report.is_valid(), "{report}");
    let a = &report.summary.keys["a"];
    assert_eq!((a.final_version, a.acked, a.inferred, a.unseen_unknown), (Some(4), 2, 1, 1));
    assert_eq!((report.summary.ok, report.summary.failed, report.summary.unknown), (8, 2, 2));
}

#[test]
fn stale_sync_read_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(2, "a", true, (20, 25), "a0", 0)];
    let report = run(&ops, &agreed("a1", 1));
    assert_eq!(kinds(&report), ["StaleSyncRead"], "{report}");
    // The same read concurrent with the write may be stale.
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(2, "a", true, (5, 25), "a0", 0)];
    assert!(run(&ops, &agreed("a1", 1)).is_valid());
    // A linearizable read is held to the same; a plain one is not.
    let linearizable = op(2, "a", OpKind::LinearizableRead, (20, 25), Outcome::Read { value: "a0".into(), version: 0 });
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), linearizable];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["StaleSyncRead"]);
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(2, "a", false, (20, 25), "a0", 0)];
    assert!(run(&ops, &agreed("a1", 1)).is_valid());
}

#[test]
fn lost_acknowledged_write_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1))];
    let report = run(&ops, &agreed("a0", 0));
    assert_eq!(kinds(&report), ["LostWrite"], "{report}");
    assert_eq!(report.count("LostWrite"), 3);
}

#[test]
fn two_acks_with_one_version_are_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), write(2, "a", "a2", None, (20, 30), acked(1))];
    assert_eq!(kinds(&run(&ops, &agreed("a2", 1))), ["DuplicateVersion"]);
}

#[test]
fn cas_acked_with_wrong_version_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), write(2, "a", "a2", Some(0), (20, 30), acked(2))];
    assert_eq!(kinds(&run(&ops, &agreed("a2", 2))), ["CasWrongVersion"]);
}

#[test]
fn phantom_value_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(2, "a", false, (20, 25), "ghost", 1)];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["Phantom"]);
}

#[test]
fn failed_write_visible_is_caught() {
    let ops = [write(1, "a", "a1", Some(0), (0, 10), failed())];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["FailedWriteVisible"]);
}

#[test]
fn value_at_two_versions_and_read_from_future_are_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(2, "a", false, (20, 25), "a1", 0)];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["ValueAtTwoVersions"]);
    let ops = [read(2, "a", false, (0, 5), "a1", 1), write(1, "a", "a1", None, (10, 20), acked(1))];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["ReadFromFuture"]);
}

#[test]
fn real_time_inversion_of_two_writes_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(2)), write(2, "a", "a2", None, (20, 30), acked(1))];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 2))), ["RealTimeInversion"]);
    // An unknown write's completion bounds nothing: it may commit after the client gave up.
    let ops = [write(1, "a", "a1", None, (0, 10), unknown()), write(2, "a", "a2", None, (20, 30), acked(1))];
    assert!(run(&ops, &agreed("a1", 2)).is_valid());
}

#[test]
fn session_reading_backwards_is_caught() {
    let ops = [
        write(2, "a", "a1", None, (0, 10), acked(1)),
        read(1, "a", false, (20, 25), "a1", 1),
        read(1, "a", false, (30, 35), "a0", 0),
    ];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["SessionWentBackwards"]);
    // The same reads from two sessions are fine (plain reads may be stale).
    let mut ops = ops;
    ops[2].session = 3;
    assert!(run(&ops, &agreed("a1", 1)).is_valid());
}

#[test]
fn read_your_writes_violation_is_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), acked(1)), read(1, "a", false, (20, 25), "a0", 0)];
    assert_eq!(kinds(&run(&ops, &agreed("a1", 1))), ["ReadYourWrites"]);
}

#[test]
fn diverging_members_are_caught() {
    let ops = [write(1, "a", "a1", None, (0, 10), unknown())];
    let report = run(&ops, &[(1, "a", "a1", 1), (2, "a", "a0", 0), (3, "a", "a1", 1)]);
    assert_eq!(kinds(&report), ["MembersDiverge"], "{report}");
}

#[test]
fn unaccounted_version_gap_is_caught() {
    // The unseen unknown CAS on 0 could only have made version 1, which op#0 made.
    let mut ops = vec![
        write(1, "a", "a1", None, (0, 10), acked(1)),
        write(1, "a", "a3", None, (20, 30), acked(3)),
        write(2, "a", "ax", Some(0), (0, 40), unknown()),
    ];
    let report = run(&ops, &agreed("a3", 3));
    assert_eq!(kinds(&report), ["UnaccountedVersions"], "{report}");
    assert!(matches!(&report.anomalies[0], Anomaly::UnaccountedVersions { missing, .. } if *missing == [2]));
    // A blind unknown write may have made version 2 and been overwritten unseen.
    ops[2] = write(2, "a", "ax", None, (0, 40), unknown());
    assert!(run(&ops, &agreed("a3", 3)).is_valid());
}

#[test]
fn recorder_marks_uncompleted_ops_unknown_and_report_displays() {
    let recorder = Recorder::new();
    let threads: Vec<_> = (0..4)
        .map(|c| {
            let r = recorder.clone();
            std::thread::spawn(move || {
                let p = r.invoke(c, c as usize, "a", OpKind::Read);
                r.complete(p, Outcome::Read { value: "a0".into(), version: 0 });
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().expect("recording thread panicked"));
    let _never = recorder.invoke(9, 9, "a", OpKind::Write { value: "a1".into(), expected: None });
    let ops = recorder.ops();
    assert_eq!(ops.len(), 5);
    assert!(ops[..4].iter().all(|o| o.invoke <= o.complete && o.complete != NEVER));
    assert_eq!((ops[4].complete, &ops[4].outcome), (NEVER, &Outcome::Unknown("never completed".into())));
    let report = run(&ops, &agreed("a1", 1));
    assert!(report.is_valid(), "{report}");
    let text = run(&ops, &agreed("a0", 1)).to_string();
    assert!(text.contains("ValueAtTwoVersions: a: \"a0\" at several versions: 0 by initial"), "{text}");
    assert!(text.contains("5 ops: 4 ok, 0 failed, 1 unknown"), "{text}");
}

#[test]
fn fifty_thousand_ops_check_quickly() {
    let keys = ["a", "b", "c", "d", "e"];
    let mut state: Vec<(String, i32)> = keys.iter().map(|k| (format!("{k}0"), 0)).collect();
    let mut ops = Vec::new();
    for i in 0..50_000u64 {
        let (k, s, t) = ((i % 5) as usize, i % 10, (i * 10, i * 10 + 5));
        if i % 3 == 0 {
            let value = format!("{}-{i}", keys[k]);
            let outcome = if i % 51 == 0 { unknown() } else { acked(state[k].1 + 1) };
            ops.push(write(s, keys[k], &value, Some(state[k].1), t, outcome));
            state[k] = (value, state[k].1 + 1);
        } else {
            ops.push(read(s, keys[k], i % 2 == 0, t, &state[k].0, state[k].1));
        }
    }
    let mut finals = FinalStates::new();
    for m in 1..=3 {
        finals.insert(m, keys.iter().zip(&state).map(|(k, s)| (k.to_string(), s.clone())).collect());
    }
    let initial = keys.iter().map(|k| (k.to_string(), format!("{k}0"))).collect();
    let started = Instant::now();
    let report = check(&ops, &initial, &finals);
    assert!(report.is_valid(), "{report}");
    assert!(started.elapsed().as_secs() < 5, "checking took {:?}", started.elapsed());
}
