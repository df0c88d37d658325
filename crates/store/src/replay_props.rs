//! Property: whatever client writes a leader prepares and applies, the tree
//! a replica rebuilds from its store (snapshot, then the log after it) is the
//! tree it had. Random op sequences cover every create mode, versioned
//! writes, ACL changes and multis, many of which fail legitimately and are
//! logged as error transactions; the store is flushed in random batches, a
//! snapshot is taken at a random point and the log optionally purged.

use crate::SledStorage;
use bytes::Bytes;
use proptest::prelude::*;
use zabkeeper_core::acl::{self, Acl, Id};
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::op::Op;
use zabkeeper_core::replica::prep::check::{Context, Limits, PendingChanges};
use zabkeeper_core::storage::mem_store::MemStorage;
use zabkeeper_core::storage::{Recovered, Storage};
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::{path, snapshot, DataTree, TreeState};
use zabkeeper_core::txn::{Entry, Txn, TxnBody};
use zabkeeper_core::zab::StorageOp;

const SESSION: SessionId = SessionId(0x0100_0000_0000_00aa);
/// Parents a create or a child lookup starts from ("/missing" never exists).
const PARENTS: [&str; 6] = ["/", "/a", "/b", "/a/x", "/missing", "/zookeeper"];
/// Names created under them ("s-" is the natural sequential prefix).
const NAMES: [&str; 4] = ["a", "b", "x", "s-"];
/// Fixed targets of the other writes, special and missing nodes included.
const PATHS: [&str; 8] = ["/a", "/b", "/a/x", "/a/x/a", "/b/s-", "/zookeeper", "/", "/missing/a"];
const MODES: [CreateMode; 7] = [
    CreateMode::Persistent,
    CreateMode::Ephemeral,
    CreateMode::PersistentSequential,
    CreateMode::EphemeralSequential,
    CreateMode::Container,
    CreateMode::PersistentWithTtl,
    CreateMode::PersistentSequentialWithTtl,
];

/// Which node a write is aimed at, resolved against the live tree when run.
#[derive(Clone, Debug)]
enum Target {
    /// One of [`PATHS`].
    Fixed(usize),
    /// The n-th child (modulo their number) of one of [`PARENTS`].
    Child { parent: usize, n: usize },
}

/// One client write, before it meets the tree.
#[derive(Clone, Debug)]
enum Step {
    Create {
        parent: usize,
        name: usize,
        data: Vec<u8>,
        acl: usize,
        mode: usize,
        /// `None`: a TTL that fits the mode; `Some`: this one, fitting or not.
        ttl_ms: Option<i64>,
    },
    Delete {
        target: Target,
        version: i32,
    },
    SetData {
        target: Target,
        data: Vec<u8>,
        version: i32,
    },
    SetAcl {
        target: Target,
        acl: usize,
        version: i32,
    },
    Check {
        target: Target,
        version: i32,
    },
    Multi(Vec<Step>),
    CloseSession,
}

fn acl_choice(i: usize) -> Vec<Acl> {
    match i % 8 {
        0 => Acl::read_unsafe(),
        1 => Acl::creator_all(),
        2 => Vec::new(),
        _ => Acl::open_unsafe(),
    }
}

fn resolve_target(target: &Target, tree: &TreeState) -> String {
    match target {
        Target::Fixed(i) => PATHS[i % PATHS.len()].to_string(),
        Target::Child { parent, n } => {
            let parent = PARENTS[parent % PARENTS.len()];
            match tree.node(parent) {
                Some(node) if node.num_children() > 0 => match tree.children(parent).nth(n % node.num_children()) {
                    Some(child) => child.to_string(),
                    None => path::join(parent, "none"),
                },
                _ => path::join(parent, "none"),
            }
        }
    }
}

impl Step {
    fn resolve(&self, tree: &TreeState) -> Op {
        match self {
            Step::Create { parent, name, data, acl, mode, ttl_ms } => {
                let mode = MODES[mode % MODES.len()];
                let fitting = if mode.is_ttl() { 5_000 } else { -1 };
                Op::Create {
                    path: path::join(PARENTS[parent % PARENTS.len()], NAMES[name % NAMES.len()]),
                    data: Bytes::from(data.clone()).into(),
                    acl: acl_choice(*acl),
                    mode,
                    ttl_ms: ttl_ms.unwrap_or(fitting),
                }
            }
            Step::Delete { target, version } => Op::Delete { path: resolve_target(target, tree), version: *version },
            Step::SetData { target, data, version } => Op::SetData {
                path: resolve_target(target, tree),
                data: Bytes::from(data.clone()).into(),
                version: *version,
            },
            Step::SetAcl { target, acl, version } => {
                Op::SetAcl { path: resolve_target(target, tree), acl: acl_choice(*acl), version: *version }
            }
            Step::Check { target, version } => Op::Check { path: resolve_target(target, tree), version: *version },
            Step::Multi(steps) => Op::Multi(steps.iter().map(|s| s.resolve(tree)).collect()),
            Step::CloseSession => Op::CloseSession,
        }
    }
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (0..PATHS.len()).prop_map(Target::Fixed),
        (0..PARENTS.len(), 0..8usize).prop_map(|(parent, n)| Target::Child { parent, n }),
    ]
}

fn version() -> impl Strategy<Value = i32> {
    prop_oneof![3 => Just(-1), 1 => 0..3i32]
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24)
}

/// A write that may appear inside a multi (setACL may too: it must fail there).
fn simple_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            prop_oneof![2 => Just(0usize), 3 => 1..PARENTS.len()],
            0..NAMES.len(),
            data(),
            0..8usize,
            0..MODES.len(),
            prop_oneof![6 => Just(None), 1 => Just(Some(0i64)), 1 => Just(Some(100))],
        )
            .prop_map(|(parent, name, data, acl, mode, ttl_ms)| Step::Create { parent, name, data, acl, mode, ttl_ms }),
        2 => (target(), version()).prop_map(|(target, version)| Step::Delete { target, version }),
        3 => (target(), data(), version()).prop_map(|(target, data, version)| Step::SetData { target, data, version }),
        1 => (target(), 0..8usize, version()).prop_map(|(target, acl, version)| Step::SetAcl { target, acl, version }),
        1 => (target(), version()).prop_map(|(target, version)| Step::Check { target, version }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => simple_step(),
        3 => proptest::collection::vec(simple_step(), 1..5).prop_map(Step::Multi),
        1 => Just(Step::CloseSession),
    ]
}

/// The leader's side of a run: prepare each write, apply it, remember it.
struct Live {
    tree: DataTree,
    pending: PendingChanges,
    identities: Vec<Id>,
    entries: Vec<Entry>,
}

impl Live {
    fn new() -> Live {
        let alice = acl::digest_id("alice:secret").expect("a well-formed credential");
        let mut live = Live {
            tree: DataTree::new(),
            pending: PendingChanges::new(),
            identities: vec![Id::new("digest", alice)],
            entries: Vec::new(),
        };
        live.commit(TxnBody::CreateSession { timeout_ms: 30_000, password: Bytes::from_static(&[1; 16]) });
        live
    }

    fn next_zxid(&self) -> Zxid {
        Zxid::new(1, self.entries.len() as u32 + 1)
    }

    fn commit(&mut self, body: TxnBody) {
        let zxid = self.next_zxid();
        let txn =
            Txn { session: SESSION, cxid: zxid.counter() as i32, time_ms: 1_000 + 7 * i64::from(zxid.counter()), body };
        self.tree.apply(zxid, &txn);
        self.pending.retire(zxid);
        self.entries.push(Entry::new(zxid, txn));
    }

    fn run(&mut self, step: &Step) {
        let op = step.resolve(self.tree.state());
        let zxid = self.next_zxid();
        let ctx = Context {
            session: SESSION,
            identities: &self.identities,
            zxid,
            time_ms: 1_000 + 7 * i64::from(zxid.counter()),
            limits: Limits::default(),
        };
        let body = self.pending.prepare(self.tree.state(), &ctx, &op).unwrap_or_else(|e| TxnBody::Error(e.code));
        self.commit(body);
    }
}

/// How a run persists: batch sizes cycled through, and an optional snapshot.
#[derive(Clone, Debug)]
struct Plan {
    steps: Vec<Step>,
    batches: Vec<usize>,
    snapshot_after: Option<usize>,
    purge: bool,
    chunk_bytes: usize,
}

fn plan() -> impl Strategy<Value = Plan> {
    (
        proptest::collection::vec(step(), 1..60),
        proptest::collection::vec(1..8usize, 1..6),
        proptest::option::of(0..60usize),
        any::<bool>(),
        prop_oneof![Just(64usize), Just(512), Just(1 << 16)],
    )
        .prop_map(|(steps, batches, snapshot_after, purge, chunk_bytes)| Plan {
            snapshot_after: snapshot_after.map(|i| i % steps.len()),
            steps,
            batches,
            purge,
            chunk_bytes,
        })
}

fn replay(recovered: &Recovered) -> TreeState {
    let mut tree = recovered.snapshot.clone().map_or_else(DataTree::new, DataTree::from_state);
    for entry in &recovered.log {
        tree.apply(entry.zxid, &entry.txn);
    }
    tree.snapshot()
}

/// Runs a plan against a store; returns the live tree and the snapshot taken.
fn persist(plan: &Plan, store: &impl Storage) -> Result<(Live, Option<TreeState>), TestCaseError> {
    let mut live = Live::new();
    let mut written = 0;
    let mut batches = plan.batches.iter().cycle();
    let mut batch = *batches.next().unwrap_or(&1);
    let mut snapshot = None;
    let write = |live: &Live, written: &mut usize| -> Result<(), TestCaseError> {
        let fresh = live.entries[*written..].to_vec();
        *written = live.entries.len();
        store.apply(&[StorageOp::Append(fresh)]).map_err(|e| TestCaseError::fail(e.to_string()))
    };
    for (i, step) in plan.steps.iter().enumerate() {
        live.run(step);
        if live.entries.len() - written >= batch {
            write(&live, &mut written)?;
            store.flush().map_err(|e| TestCaseError::fail(e.to_string()))?;
            batch = *batches.next().unwrap_or(&1);
        }
        if plan.snapshot_after == Some(i) {
            // The snapshot is of committed state, so its entries are logged first.
            write(&live, &mut written)?;
            let state = live.tree.snapshot();
            let (chunks, _) = snapshot::to_chunks(&state, plan.chunk_bytes);
            store.save_snapshot(state.last_zxid(), &chunks).map_err(|e| TestCaseError::fail(e.to_string()))?;
            if plan.purge {
                store.purge(1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            snapshot = Some(state);
        }
    }
    write(&live, &mut written)?;
    store.flush().map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok((live, snapshot))
}

fn check_recovered(recovered: &Recovered, live: &Live, snapshot: &Option<TreeState>) -> Result<(), TestCaseError> {
    let last = live.tree.last_zxid();
    prop_assert_eq!(recovered.last_zxid(), last);
    match snapshot {
        Some(state) => {
            prop_assert_eq!(recovered.snapshot_zxid(), state.last_zxid());
            let loaded = recovered.snapshot.as_ref().map(TreeState::digest);
            prop_assert_eq!(loaded, Some(state.digest()), "the snapshot loads as it was taken");
        }
        None => prop_assert!(recovered.snapshot.is_none()),
    }
    let expected: Vec<Zxid> = live.entries.iter().map(|e| e.zxid).filter(|z| *z > recovered.snapshot_zxid()).collect();
    let found: Vec<Zxid> = recovered.log.iter().map(|e| e.zxid).collect();
    prop_assert_eq!(found, expected);
    let rebuilt = replay(recovered);
    prop_assert_eq!(rebuilt.digest(), live.tree.state().digest(), "snapshot + log replay differs from the live tree");
    prop_assert_eq!(rebuilt.node_count(), live.tree.state().node_count());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sled_replay_rebuilds_the_live_tree(plan in plan()) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let path = dir.path().join("store");
        let (live, snapshot) = {
            let store = SledStorage::open(&path).map_err(|e| TestCaseError::fail(e.to_string()))?;
            persist(&plan, &store)?
        };
        let store = SledStorage::open(&path).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let recovered = store.recover().map_err(|e| TestCaseError::fail(e.to_string()))?;
        check_recovered(&recovered, &live, &snapshot)?;
        if snapshot.is_none() || !plan.purge {
            // The whole log alone rebuilds the tree too.
            let log = store.read_log(Zxid::ZERO, usize::MAX).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut tree = DataTree::new();
            for entry in &log {
                tree.apply(entry.zxid, &entry.txn);
            }
            prop_assert_eq!(tree.state().digest(), live.tree.state().digest());
        }
    }

    #[test]
    fn mem_replay_rebuilds_the_live_tree(plan in plan()) {
        let store = MemStorage::new();
        let (live, snapshot) = persist(&plan, &store)?;
        store.crash();
        let recovered = store.recover().map_err(|e| TestCaseError::fail(e.to_string()))?;
        check_recovered(&recovered, &live, &snapshot)?;
    }
}

/// The generator must exercise what the property claims: every create mode
/// succeeding, and failures of several kinds, not only happy paths.
#[test]
fn generated_writes_mix_successes_and_failures() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRng, TestRunner};
    use std::collections::HashSet;
    use zabkeeper_core::tree::stat::EphemeralType;
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::deterministic_rng(Default::default()));
    let mut kinds = HashSet::new();
    let (mut created, mut errors, mut multi_ok, mut multi_failed) = (0, HashSet::new(), 0, 0);
    for _ in 0..40 {
        let plan = plan().new_tree(&mut runner).expect("a plan").current();
        let mut live = Live::new();
        for step in &plan.steps {
            live.run(step);
        }
        for entry in &live.entries {
            match &entry.txn.body {
                TxnBody::Create { ephemeral_owner, path, .. } => {
                    created += 1;
                    kinds.insert(match EphemeralType::of(*ephemeral_owner) {
                        EphemeralType::Void => "persistent",
                        EphemeralType::Normal => "ephemeral",
                        EphemeralType::Container => "container",
                        EphemeralType::Ttl(_) => "ttl",
                    });
                    if path.ends_with(|c: char| c.is_ascii_digit()) {
                        kinds.insert("sequential");
                    }
                }
                TxnBody::Error(code) => {
                    errors.insert(*code);
                }
                TxnBody::Multi(_) => multi_ok += 1,
                TxnBody::MultiError(_) => multi_failed += 1,
                _ => {}
            }
        }
    }
    eprintln!("creates {created}, kinds {kinds:?}, errors {errors:?}, multi ok {multi_ok} failed {multi_failed}");
    assert!(created > 100, "only {created} creates succeeded");
    assert_eq!(kinds.len(), 5, "create kinds seen: {kinds:?}");
    assert!(errors.len() >= 5, "too few kinds of failure: {errors:?}");
    assert!(multi_ok > 0 && multi_failed > 0, "multi ok {multi_ok}, failed {multi_failed}");
}
