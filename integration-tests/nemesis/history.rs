//! The record of a nemesis run and its checker: clients record every operation on a few znodes with
//! [`Recorder`], and [`check`] verifies the history against ZooKeeper's guarantees (versions identify
//! writes, failed writes leave no trace, writes and sync reads respect real time, sessions never go
//! back, acknowledged writes survive and members converge). Everything is sorted per key, so a run of
//! ~50 000 operations checks in well under a second.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Completion time of an operation that never completed.
pub const NEVER: u64 = u64::MAX;

/// Final state read from each member after the run: member id -> key -> (value, version).
pub type FinalStates = BTreeMap<u64, BTreeMap<String, (String, i32)>>;

/// What an operation asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// setData of a value unique across the run; `expected: None` is a blind write (version -1).
    Write { value: String, expected: Option<i32> },
    /// getData, served by the member the session is connected to (may be stale).
    Read,
    /// sync then getData on the same connection (must not be stale).
    SyncRead,
    /// getData on a member with `linearizable_reads` (must not be stale).
    LinearizableRead,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The write succeeded and created this version.
    Written { version: i32 },
    /// The read returned this value at this version.
    Read { value: String, version: i32 },
    /// Definitely had no effect (e.g. BadVersion).
    Failed(String),
    /// May or may not have taken effect (ConnectionLoss, timeout, never completed).
    Unknown(String),
}

/// One recorded operation; its position in the history is its name (`op#N`) in anomalies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Session id at invocation (a client whose session expired continues under a new id).
    pub session: u64,
    /// Index of the client task, to follow one client across its sessions.
    pub client: usize,
    /// Path of the znode.
    pub key: String,
    /// What was asked.
    pub kind: OpKind,
    /// Nanoseconds since the recorder's start, taken just before the request was sent.
    pub invoke: u64,
    /// Nanoseconds since the recorder's start when the outcome was known, or [`NEVER`].
    pub complete: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// Records operations from many tasks against one monotonic clock; clones share the history.
#[derive(Clone, Debug)]
pub struct Recorder {
    base: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

/// An invoked operation awaiting [`Recorder::complete`]; dropping it leaves the op Unknown forever.
#[must_use = "an operation never completed counts as Unknown with an infinite completion time"]
#[derive(Debug)]
pub struct Pending {
    index: usize,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        Recorder { base: Instant::now(), ops: Arc::default() }
    }

    /// Nanoseconds since the recorder started.
    pub fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(NEVER - 1)
    }

    /// Records the invocation; until completed the op is Unknown with completion [`NEVER`].
    pub fn invoke(&self, session: u64, client: usize, key: &str, kind: OpKind) -> Pending {
        let invoke = self.now();
        let mut ops = self.lock();
        let outcome = Outcome::Unknown("never completed".into());
        ops.push(Op { session, client, key: key.to_string(), kind, invoke, complete: NEVER, outcome });
        Pending { index: ops.len() - 1 }
    }

    /// Records the outcome of an invoked operation, timestamped now.
    pub fn complete(&self, pending: Pending, outcome: Outcome) {
        let complete = self.now();
        let mut ops = self.lock();
        let op = &mut ops[pending.index];
        op.complete = complete;
        op.outcome = outcome;
    }

    /// A copy of the history so far, in invocation-record order.
    pub fn ops(&self) -> Vec<Op> {
        self.lock().clone()
    }

    // A panicking client task cannot leave a half-written entry (pushes and field stores are whole), so
    // a poisoned lock still guards a usable history.
    fn lock(&self) -> MutexGuard<'_, Vec<Op>> {
        self.ops.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes a history as JSON, to look up the ops a failed run's anomalies name (`op#N` is entry N).
pub fn write_json(ops: &[Op], path: &Path) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer(&mut file, ops)?;
    std::io::Write::flush(&mut file)
}

/// Where a (value, version) pair was claimed or seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The value the key was created with, at version 0.
    Initial,
    /// The operation with this index (an acknowledged write or a read).
    Op(usize),
    /// The final read from this member.
    Member(u64),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Initial => write!(f, "initial"),
            Source::Op(i) => write!(f, "op#{i}"),
            Source::Member(m) => write!(f, "member {m}"),
        }
    }
}

/// A violation of one of the checked guarantees; ops are indices into the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anomaly {
    /// Several writes (acknowledged or inferred from reads) created the same version.
    DuplicateVersion { key: String, version: i32, writes: Vec<Source> },
    /// A conditional write on `expected` was acknowledged (or seen) at a version other than expected + 1.
    CasWrongVersion { key: String, op: usize, expected: i32, version: i32, acked: bool },
    /// A read or final state returned a value no operation wrote.
    Phantom { key: String, value: String, version: i32, seen: Source, times: usize },
    /// One value was acknowledged or seen at different versions.
    ValueAtTwoVersions { key: String, value: String, claims: Vec<(i32, Source)> },
    /// The value of a write that definitely failed is visible.
    FailedWriteVisible { key: String, op: usize, value: String, version: i32, seen: Source },
    /// A read completed before the write whose value it returned was invoked.
    ReadFromFuture { key: String, op: usize, complete: u64, write: usize, write_invoke: u64 },
    /// A write completed before another was invoked, yet got the higher version.
    RealTimeInversion {
        key: String,
        earlier: usize,
        earlier_version: i32,
        complete: u64,
        later: usize,
        later_version: i32,
        invoke: u64,
    },
    /// A sync read or a linearizable read missed a write acknowledged
    /// before it was invoked.
    StaleSyncRead {
        key: String,
        op: usize,
        session: u64,
        version: i32,
        invoke: u64,
        write: usize,
        write_version: i32,
        write_complete: u64,
    },
    /// A session observed a lower version than one it had observed before (or wrote at or below it).
    SessionWentBackwards { key: String, session: u64, op: usize, version: i32, earlier: usize, earlier_version: i32 },
    /// A session read a version older than its own acknowledged write.
    ReadYourWrites { key: String, session: u64, op: usize, version: i32, write: usize, write_version: i32 },
    /// Members ended with different states of the key (None: the member has no such key).
    MembersDiverge { key: String, states: Vec<(u64, Option<(String, i32)>)> },
    /// A member ended below a version that was acknowledged or read.
    LostWrite { key: String, member: u64, final_version: i32, version: i32, evidence: Source },
    /// More versions up to the final one lack a write than unseen unknown writes could fill (`missing`: the first 20).
    UnaccountedVersions {
        key: String,
        final_version: i32,
        missing_count: usize,
        missing: Vec<i32>,
        unseen_unknown: usize,
    },
    /// Several operations wrote the same value (a harness bug: values must be unique).
    AmbiguousValue { key: String, value: String, ops: Vec<usize> },
}

impl Anomaly {
    /// The variant's name, to count or match anomalies by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Anomaly::DuplicateVersion { .. } => "DuplicateVersion",
            Anomaly::CasWrongVersion { .. } => "CasWrongVersion",
            Anomaly::Phantom { .. } => "Phantom",
            Anomaly::ValueAtTwoVersions { .. } => "ValueAtTwoVersions",
            Anomaly::FailedWriteVisible { .. } => "FailedWriteVisible",
            Anomaly::ReadFromFuture { .. } => "ReadFromFuture",
            Anomaly::RealTimeInversion { .. } => "RealTimeInversion",
            Anomaly::StaleSyncRead { .. } => "StaleSyncRead",
            Anomaly::SessionWentBackwards { .. } => "SessionWentBackwards",
            Anomaly::ReadYourWrites { .. } => "ReadYourWrites",
            Anomaly::MembersDiverge { .. } => "MembersDiverge",
            Anomaly::LostWrite { .. } => "LostWrite",
            Anomaly::UnaccountedVersions { .. } => "UnaccountedVersions",
            Anomaly::AmbiguousValue { .. } => "AmbiguousValue",
        }
    }
}

fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.kind())?;
        match self {
            Anomaly::DuplicateVersion { key, version, writes } => {
                write!(f, "{key}: version {version} created by each of {}", list(writes))
            }
            Anomaly::CasWrongVersion { key, op, expected, version, acked } => {
                let how = if *acked { "acknowledged with" } else { "seen at" };
                write!(f, "{key}: op#{op} expected version {expected} but was {how} version {version}")
            }
            Anomaly::Phantom { key, value, version, seen, times } => {
                write!(f, "{key}: {value:?}@{version} was never written (seen {times}x, first by {seen})")
            }
            Anomaly::ValueAtTwoVersions { key, value, claims } => {
                let claims = list(claims.iter().map(|(v, s)| format!("{v} by {s}")));
                write!(f, "{key}: {value:?} at several versions: {claims}")
            }
            Anomaly::FailedWriteVisible { key, op, value, version, seen } => {
                write!(f, "{key}: op#{op} definitely failed but its {value:?} is visible at version {version} ({seen})")
            }
            Anomaly::ReadFromFuture { key, op, complete, write, write_invoke } => {
                write!(f, "{key}: op#{op} completed at {complete}ns, reading op#{write} invoked at {write_invoke}ns")
            }
            Anomaly::RealTimeInversion { key, earlier, earlier_version, complete, later, later_version, invoke } => {
                write!(
                    f,
                    "{key}: op#{earlier} (version {earlier_version}) completed at {complete}ns before op#{later} \
                     was invoked at {invoke}ns, yet op#{later} got the lower version {later_version}"
                )
            }
            Anomaly::StaleSyncRead { key, op, session, version, invoke, write, write_version, write_complete } => {
                write!(
                    f,
                    "{key}: sync or linearizable read op#{op} (session {session:#x}, invoked at {invoke}ns) returned version \
                     {version} but op#{write} was acknowledged with version {write_version} at {write_complete}ns"
                )
            }
            Anomaly::SessionWentBackwards { key, session, op, version, earlier, earlier_version } => {
                let earlier = format!("its op#{earlier} had seen version {earlier_version}");
                write!(f, "{key}: session {session:#x} op#{op} got version {version} after {earlier}")
            }
            Anomaly::ReadYourWrites { key, session, op, version, write, write_version } => {
                let own = format!("its own op#{write} was acknowledged with version {write_version}");
                write!(f, "{key}: session {session:#x} op#{op} read version {version} after {own}")
            }
            Anomaly::MembersDiverge { key, states } => {
                let states = states.iter().map(|(m, s)| match s {
                    Some((value, version)) => format!("member {m} {value:?}@{version}"),
                    None => format!("member {m} missing"),
                });
                write!(f, "{key}: members disagree: {}", list(states))
            }
            Anomaly::LostWrite { key, member, final_version, version, evidence } => {
                let lost = format!("version {version} was acknowledged or read ({evidence})");
                write!(f, "{key}: member {member} ends at version {final_version} but {lost}")
            }
            Anomaly::UnaccountedVersions { key, final_version, missing_count, missing, unseen_unknown } => {
                let more = if *missing_count > missing.len() { ", ..." } else { "" };
                let missing = format!("{missing_count} versions ({}{more}) have no write", list(missing));
                let fill = format!("{unseen_unknown} unseen unknown writes cannot fill them");
                write!(f, "{key}: final version {final_version} but {missing} and {fill}")
            }
            Anomaly::AmbiguousValue { key, value, ops } => {
                write!(f, "{key}: {value:?} written by several ops {} (values must be unique)", list(ops))
            }
        }
    }
}

/// What happened to one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySummary {
    /// Highest final version over the members (None without final states).
    pub final_version: Option<i32>,
    /// Acknowledged writes.
    pub acked: usize,
    /// Failed or unknown writes whose value was seen, so they took effect.
    pub inferred: usize,
    /// Unknown writes never seen: they may have been lost or overwritten unseen.
    pub unseen_unknown: usize,
}

/// Counts over the whole history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// All operations.
    pub ops: usize,
    /// Operations that succeeded.
    pub ok: usize,
    /// Operations that definitely failed.
    pub failed: usize,
    /// Operations with an unknown outcome (including never completed).
    pub unknown: usize,
    /// Per key.
    pub keys: BTreeMap<String, KeySummary>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Summary { ops, ok, failed, unknown, .. } = self;
        write!(f, "{ops} ops: {ok} ok, {failed} failed, {unknown} unknown")?;
        for (key, k) in &self.keys {
            let v = k.final_version.map_or("?".into(), |v| v.to_string());
            write!(
                f,
                "\n  {key}: final version {v}, {} acked, {} inferred, {} unseen unknown writes",
                k.acked, k.inferred, k.unseen_unknown
            )?;
        }
        Ok(())
    }
}

/// The result of [`check`].
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every violation found, grouped by key.
    pub anomalies: Vec<Anomaly>,
    /// Counts, to judge whether the run exercised anything.
    pub summary: Summary,
}

impl Report {
    /// True when no anomaly was found.
    pub fn is_valid(&self) -> bool {
        self.anomalies.is_empty()
    }

    /// Number of anomalies of one kind (see [`Anomaly::kind`]).
    pub fn count(&self, kind: &str) -> usize {
        self.anomalies.iter().filter(|a| a.kind() == kind).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary)?;
        writeln!(f, "{} anomalies", self.anomalies.len())?;
        for a in self.anomalies.iter().take(20) {
            writeln!(f, "  {a}")?;
        }
        if self.anomalies.len() > 20 {
            writeln!(f, "  ... and {} more", self.anomalies.len() - 20)?;
        }
        Ok(())
    }
}

/// Checks a history; `initial` holds each key's value at version 0, `finals` what every member holds at the end.
pub fn check(ops: &[Op], initial: &BTreeMap<String, String>, finals: &FinalStates) -> Report {
    let mut by_key: BTreeMap<&str, Vec<usize>> = initial.keys().map(|k| (k.as_str(), vec![])).collect();
    for key in finals.values().flat_map(|s| s.keys()) {
        by_key.entry(key).or_default();
    }
    for (i, op) in ops.iter().enumerate() {
        by_key.entry(&op.key).or_default().push(i);
    }
    let mut report = Report::default();
    for op in ops {
        report.summary.ops += 1;
        match op.outcome {
            Outcome::Written { .. } | Outcome::Read { .. } => report.summary.ok += 1,
            Outcome::Failed(_) => report.summary.failed += 1,
            Outcome::Unknown(_) => report.summary.unknown += 1,
        }
    }
    for (key, idx) in by_key {
        let initial = initial.get(key).map(String::as_str);
        let summary = check_key(ops, key, &idx, initial, finals, &mut report.anomalies);
        report.summary.keys.insert(key.to_string(), summary);
    }
    report
}

/// A write that took effect, at the version it created.
struct Effect {
    op: usize,
    version: i32,
    invoke: u64,
    // NEVER unless acknowledged: a timed-out request may still commit long after the client gave up.
    complete: u64,
}

fn check_key(
    ops: &[Op],
    key: &str,
    idx: &[usize],
    initial: Option<&str>,
    finals: &FinalStates,
    out: &mut Vec<Anomaly>,
) -> KeySummary {
    let members: Vec<(u64, Option<(&str, i32)>)> =
        finals.iter().map(|(m, s)| (*m, s.get(key).map(|(v, n)| (v.as_str(), *n)))).collect();
    let mut writer: HashMap<&str, usize> = HashMap::new();
    let mut seen: BTreeMap<&str, Vec<(i32, Source)>> = BTreeMap::new();
    for &i in idx {
        match (&ops[i].kind, &ops[i].outcome) {
            (OpKind::Write { value, .. }, _) => match writer.get(value.as_str()) {
                Some(&first) => {
                    out.push(Anomaly::AmbiguousValue { key: key.into(), value: value.clone(), ops: vec![first, i] })
                }
                None => {
                    writer.insert(value, i);
                }
            },
            (_, Outcome::Read { value, version }) => seen.entry(value).or_default().push((*version, Source::Op(i))),
            _ => {}
        }
    }
    for (m, state) in &members {
        if let Some((value, version)) = state {
            seen.entry(value).or_default().push((*version, Source::Member(*m)));
        }
    }
    let two_versions = |value: &str, claims: Vec<(i32, Source)>, out: &mut Vec<Anomaly>| {
        if claims.iter().any(|(v, _)| *v != claims[0].0) {
            out.push(Anomaly::ValueAtTwoVersions { key: key.into(), value: value.into(), claims });
        }
    };

    // Checks 1 and 2: every observed value belongs to a write that did not fail, and gives it its version.
    // The highest version acknowledged or read must survive (reads only see committed data).
    let mut must_survive: Option<(i32, Source)> = None;
    if let Some(init) = initial {
        let claims = std::iter::once((0, Source::Initial)).chain(seen.get(init).into_iter().flatten().copied());
        two_versions(init, claims.collect(), out);
    }
    for (value, obs) in &seen {
        if writer.contains_key(value) || initial == Some(*value) {
            must_survive = must_survive.max(obs.iter().filter(|(_, s)| matches!(s, Source::Op(_))).max().copied());
        } else {
            let (version, seen) = obs[0];
            out.push(Anomaly::Phantom { key: key.into(), value: value.to_string(), version, seen, times: obs.len() });
        }
    }
    let mut summary = KeySummary::default();
    let mut effects = Vec::new();
    // Each unseen unknown CAS could only have created expected + 1; unseen blind writes any version.
    let (mut cas_fills, mut blind_unseen) = (HashSet::new(), 0);
    let mut writes: Vec<usize> = writer.values().copied().collect();
    writes.sort_unstable();
    for w in writes {
        let op = &ops[w];
        let OpKind::Write { value, expected } = &op.kind else { continue };
        let obs = seen.get(value.as_str()).map_or(&[][..], Vec::as_slice);
        for &(_, src) in obs {
            if let Source::Op(r) = src {
                if ops[r].complete < op.invoke {
                    let (complete, write_invoke) = (ops[r].complete, op.invoke);
                    out.push(Anomaly::ReadFromFuture { key: key.into(), op: r, complete, write: w, write_invoke });
                }
            }
        }
        let (version, complete) = match &op.outcome {
            Outcome::Written { version } => {
                summary.acked += 1;
                must_survive = must_survive.max(Some((*version, Source::Op(w))));
                two_versions(
                    value,
                    std::iter::once((*version, Source::Op(w))).chain(obs.iter().copied()).collect(),
                    out,
                );
                (*version, op.complete)
            }
            Outcome::Read { .. } => continue,
            Outcome::Failed(_) if obs.is_empty() => continue,
            Outcome::Unknown(_) if obs.is_empty() => {
                summary.unseen_unknown += 1;
                match expected {
                    Some(e) => {
                        cas_fills.insert(e.saturating_add(1));
                    }
                    None => blind_unseen += 1,
                }
                continue;
            }
            outcome => {
                summary.inferred += 1;
                two_versions(value, obs.to_vec(), out);
                let (version, seen) = obs[0];
                if let Outcome::Failed(_) = outcome {
                    out.push(Anomaly::FailedWriteVisible {
                        key: key.into(),
                        op: w,
                        value: value.clone(),
                        version,
                        seen,
                    });
                }
                (version, NEVER)
            }
        };
        if let Some(e) = *expected {
            if version != e.saturating_add(1) {
                let acked = complete != NEVER;
                out.push(Anomaly::CasWrongVersion { key: key.into(), op: w, expected: e, version, acked });
            }
        }
        effects.push(Effect { op: w, version, invoke: op.invoke, complete });
    }

    // Check 1: one write per version (the initial value holds version 0).
    effects.sort_by_key(|e| e.version);
    let groups: Vec<&[Effect]> = effects.chunk_by(|a, b| a.version == b.version).collect();
    for group in &groups {
        let initial_too = initial.is_some() && group[0].version == 0;
        if group.len() > 1 || initial_too {
            let mut writes: Vec<Source> = group.iter().map(|e| Source::Op(e.op)).collect();
            if initial_too {
                writes.insert(0, Source::Initial);
            }
            out.push(Anomaly::DuplicateVersion { key: key.into(), version: group[0].version, writes });
        }
    }

    // Check 3, real time: walking down the versions, compare each write with the earliest-completed higher one.
    let mut earliest: Option<&Effect> = None;
    for group in groups.iter().rev() {
        if let Some(a) = earliest {
            for b in group.iter().filter(|b| a.complete < b.invoke) {
                out.push(Anomaly::RealTimeInversion {
                    key: key.into(),
                    earlier: a.op,
                    earlier_version: a.version,
                    complete: a.complete,
                    later: b.op,
                    later_version: b.version,
                    invoke: b.invoke,
                });
            }
        }
        for b in group.iter() {
            if earliest.is_none_or(|a| b.complete < a.complete) {
                earliest = Some(b);
            }
        }
    }

    // Check 3, sync and linearizable reads: at least the highest version
    // acknowledged before the read (or its sync) was invoked.
    let mut acks: Vec<(u64, i32, usize)> =
        effects.iter().filter(|e| e.complete != NEVER).map(|e| (e.complete, e.version, e.op)).collect();
    acks.sort_unstable();
    let prefix_max: Vec<(i32, usize)> = acks
        .iter()
        .scan((i32::MIN, 0), |best, &(_, v, w)| {
            *best = (*best).max((v, w));
            Some(*best)
        })
        .collect();
    for &r in idx {
        if let (OpKind::SyncRead | OpKind::LinearizableRead, Outcome::Read { version, .. }) =
            (&ops[r].kind, &ops[r].outcome)
        {
            let acked_before = acks.partition_point(|a| a.0 < ops[r].invoke);
            if let Some(&(write_version, write)) = acked_before.checked_sub(1).map(|n| &prefix_max[n]) {
                if *version < write_version {
                    let (session, invoke, write_complete) = (ops[r].session, ops[r].invoke, ops[write].complete);
                    out.push(Anomaly::StaleSyncRead {
                        key: key.into(),
                        op: r,
                        session,
                        version: *version,
                        invoke,
                        write,
                        write_version,
                        write_complete,
                    });
                }
            }
        }
    }

    check_sessions(ops, key, idx, out);

    // Check 5: durability and convergence.
    let reported: Vec<(u64, i32)> = members.iter().filter_map(|(m, s)| s.map(|(_, v)| (*m, v))).collect();
    if members.iter().any(|(_, s)| *s != members[0].1) {
        let states = members.iter().map(|(m, s)| (*m, s.map(|(value, v)| (value.to_string(), v)))).collect();
        out.push(Anomaly::MembersDiverge { key: key.into(), states });
    }
    for &(member, final_version) in &reported {
        if let Some((version, evidence)) = must_survive.filter(|(v, _)| *v > final_version) {
            out.push(Anomaly::LostWrite { key: key.into(), member, final_version, version, evidence });
        }
    }
    summary.final_version = reported.iter().map(|(_, v)| *v).max();
    if let Some(top) = summary.final_version {
        let created: HashSet<i32> = effects.iter().map(|e| e.version).filter(|v| (1..=top).contains(v)).collect();
        // Counted rather than listed: a corrupt final version near i32::MAX must not allocate billions.
        let missing_count = usize::try_from(top).unwrap_or(0) - created.len();
        let gap = |v: &i32| (1..=top).contains(v) && !created.contains(v);
        if missing_count - cas_fills.iter().filter(|v| gap(v)).count() > blind_unseen {
            let (missing, unseen_unknown) = ((1..=top).filter(gap).take(20).collect(), summary.unseen_unknown);
            let final_version = top;
            out.push(Anomaly::UnaccountedVersions {
                key: key.into(),
                final_version,
                missing_count,
                missing,
                unseen_unknown,
            });
        }
    }
    summary
}

/// Check 4, session order: an op must observe at least every version its session observed in ops that completed
/// before it was invoked (strictly more for a write, which creates a new version).
fn check_sessions(ops: &[Op], key: &str, idx: &[usize], out: &mut Vec<Anomaly>) {
    let mut by_session: BTreeMap<u64, Vec<(usize, i32, bool)>> = BTreeMap::new();
    for &i in idx {
        let (version, is_write) = match &ops[i].outcome {
            Outcome::Written { version } => (*version, true),
            Outcome::Read { version, .. } => (*version, false),
            _ => continue,
        };
        by_session.entry(ops[i].session).or_default().push((i, version, is_write));
    }
    for (session, mut issued) in by_session {
        let mut done = issued.clone();
        issued.sort_by_key(|(i, ..)| ops[*i].invoke);
        done.sort_by_key(|(i, ..)| ops[*i].complete);
        // The highest version seen so far by the session, and by its own writes: (version, op).
        let (mut any, mut own, mut next) = (None, None, 0);
        for &(op, version, is_write) in &issued {
            while let Some(&(d, v, w)) = done.get(next).filter(|(d, ..)| ops[*d].complete < ops[op].invoke) {
                any = any.max(Some((v, d)));
                own = if w { own.max(Some((v, d))) } else { own };
                next += 1;
            }
            let behind = |max: Option<(i32, usize)>| max.filter(|(m, _)| *m > version || (is_write && *m == version));
            if let Some((write_version, write)) = behind(own).filter(|_| !is_write) {
                out.push(Anomaly::ReadYourWrites { key: key.into(), session, op, version, write, write_version });
            } else if let Some((earlier_version, earlier)) = behind(any) {
                out.push(Anomaly::SessionWentBackwards {
                    key: key.into(),
                    session,
                    op,
                    version,
                    earlier,
                    earlier_version,
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
