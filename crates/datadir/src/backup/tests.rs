//! The backup kept and restored end to end on disk: round trips against a
//! tree built by applying the same transactions, torn tails, versions,
//! gaps and the choice of what a restore targets.

use super::format::{FormatError, FORMAT_VERSION};
use super::restore::{self, plan, Target};
use super::writer::{Options, Writer};
use super::*;
use bytes::Bytes;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::ids::SessionId;
use zabkeeper_core::storage::Storage;
use zabkeeper_core::tree::DataTree;
use zabkeeper_core::txn::{Txn, TxnBody};
use zabkeeper_store::SledStorage;

/// Whether two states built apart hold the same nodes (path, data, Stat,
/// ACL), sessions and last zxid.
fn same(a: &zabkeeper_core::tree::TreeState, b: &zabkeeper_core::tree::TreeState) -> bool {
    let nodes = |s: &zabkeeper_core::tree::TreeState| -> Vec<(String, Vec<u8>, zabkeeper_core::tree::stat::StatPersisted, Vec<Acl>)> {
        s.nodes().map(|(p, n)| (p.to_string(), n.data().to_vec(), n.persisted(), n.acl().to_vec())).collect()
    };
    a.last_zxid() == b.last_zxid() && a.digest() == b.digest() && nodes(a) == nodes(b)
}

/// Milliseconds of transaction `counter` of an epoch: 10 apart.
fn time_of(zxid: Zxid) -> i64 {
    1_000_000 + i64::from(zxid.epoch()) * 100_000 + i64::from(zxid.counter()) * 10
}

/// A create of /n<counter> in epoch 1; deletes and sets now and then.
fn txn(zxid: Zxid) -> Txn {
    let c = zxid.counter();
    let body = match c % 5 {
        3 => TxnBody::SetData {
            path: "/n1".into(),
            data: Bytes::from(format!("v{c}")).into(),
            version: (c / 5 + 1) as i32,
        },
        4 => TxnBody::Delete { path: format!("/n{}", c - 2) },
        _ => TxnBody::Create {
            path: format!("/n{c}"),
            data: Bytes::from(format!("d{c}")).into(),
            acl: Acl::open_unsafe(),
            ephemeral_owner: 0,
            parent_cversion: c as i32,
        },
    };
    Txn { session: SessionId(7), cxid: c as i32, time_ms: time_of(zxid), body }
}

/// The chunks of `tree`'s snapshot, small so a snapshot spans several frames.
fn chunks_of(tree: &DataTree) -> Vec<Vec<u8>> {
    zabkeeper_core::tree::snapshot::to_chunks(tree.state(), 64).0.iter().map(|c| c.to_vec()).collect()
}

/// A tree with `/n1` created at zxid 1.1.
fn base() -> DataTree {
    let mut tree = DataTree::new();
    tree.apply(Zxid::new(1, 1), &txn(Zxid::new(1, 1)));
    tree
}

fn options(snapshot_every: u64) -> Options {
    Options { snapshot_every, file_bytes: 600, keep_snapshots: 0 }
}

/// A backup from `base()` holding transactions 1.2 ..= 1.`upto`, rolling
/// every `every`; and the expected trees after each zxid.
fn backup(dir: &Path, upto: u32, every: u64) -> (Writer, Vec<(Zxid, DataTree)>) {
    let mut tree = base();
    let mut writer =
        Writer::start(dir, options(every), chunks_of(&tree), time_of(Zxid::new(1, 1)), "test").expect("start");
    let mut expected = Vec::new();
    for c in 2..=upto {
        let z = Zxid::new(1, c);
        let t = txn(z);
        assert!(writer.append(z, &zabkeeper_core::txn::codec::encode(&t)).expect("append"));
        tree.apply(z, &t);
        expected.push((z, DataTree::from_state(tree.snapshot())));
        if writer.snapshot_due() {
            writer.roll().expect("roll");
        }
    }
    writer.sync().expect("sync");
    (writer, expected)
}

/// Appends the transactions after the writer's last through 1.`upto`,
/// rolling whenever a snapshot is due, and syncs.
fn append_through(writer: &mut Writer, upto: u32) {
    while writer.last() < Zxid::new(1, upto) {
        let z = Zxid::new(1, writer.last().counter() + 1);
        writer.append(z, &zabkeeper_core::txn::codec::encode(&txn(z))).expect("append");
        if writer.snapshot_due() {
            writer.roll().expect("roll");
        }
    }
    writer.sync().expect("sync");
}

/// Restores into a fresh directory and reads the state back as a member would.
fn restored(
    backup: &Path,
    target: Target,
) -> Result<(restore::Restored, zabkeeper_core::tree::TreeState), BackupError> {
    let out = tempfile::tempdir().expect("dir");
    let data = out.path().join("data");
    let report = restore::restore(backup, target, &data, None)?;
    let recovered = SledStorage::open(&data).expect("open").recover().expect("recover");
    Ok((report, recovered.snapshot.expect("a snapshot")))
}

#[test]
fn every_transaction_restores_exactly_from_the_right_snapshot() {
    let dir = tempfile::tempdir().expect("dir");
    let (writer, expected) = backup(dir.path(), 40, 12);
    let catalog = Catalog::open(dir.path()).expect("open");
    let snapshots: Vec<u32> = catalog.snapshots.iter().map(|s| s.zxid.counter()).collect();
    assert_eq!(snapshots, [1, 13, 25, 37], "a snapshot every 12 transactions");
    assert!(catalog.txn_files.len() > snapshots.len(), "files roll by size too");
    assert_eq!(writer.last(), Zxid::new(1, 40));
    for (zxid, tree) in &expected {
        let (report, state) = restored(dir.path(), Target::Zxid(*zxid)).expect("restore");
        assert!(same(&state, tree.state()), "the state after {zxid}");
        assert_eq!(state.last_zxid(), *zxid);
        let from = catalog.snapshot_at_or_before(*zxid).expect("a snapshot").zxid;
        assert_eq!((report.snapshot_zxid, report.replayed), (from, u64::from(zxid.counter() - from.counter())));
        assert_eq!((report.target_time_ms, report.epoch), (time_of(*zxid), 1));
    }
    let (_, state) = restored(dir.path(), Target::Zxid(Zxid::new(1, 1))).expect("the first snapshot itself");
    assert!(same(&state, base().state()));
}

#[test]
fn a_reopened_backup_goes_on_without_a_gap_or_a_duplicate() {
    let dir = tempfile::tempdir().expect("dir");
    let (writer, expected) = backup(dir.path(), 20, 8);
    drop(writer);
    let (mut writer, reopened) = Writer::open(dir.path(), options(8)).expect("open").expect("a backup");
    assert_eq!((reopened.snapshot, reopened.replayed, reopened.truncated), (Zxid::new(1, 17), 3, None));
    assert_eq!(writer.last(), Zxid::new(1, 20));
    let again = zabkeeper_core::txn::codec::encode(&txn(Zxid::new(1, 20)));
    assert!(!writer.append(Zxid::new(1, 20), &again).expect("a duplicate"), "held already: skipped");
    let skipped = zabkeeper_core::txn::codec::encode(&txn(Zxid::new(1, 22)));
    assert!(matches!(writer.append(Zxid::new(1, 22), &skipped), Err(BackupError::OutOfOrder { .. })));
    let mut tree = DataTree::from_state(expected.last().expect("some").1.snapshot());
    for c in 21..=24 {
        let (z, t) = (Zxid::new(1, c), txn(Zxid::new(1, c)));
        writer.append(z, &zabkeeper_core::txn::codec::encode(&t)).expect("append");
        tree.apply(z, &t);
    }
    // A later epoch starts at its counter 1: a stream that starts further
    // on (a member that took a leader's snapshot past what the backup
    // holds) has skipped some, and is refused.
    let mid_epoch = Txn { time_ms: time_of(Zxid::new(2, 5)), ..txn(Zxid::new(1, 25)) };
    assert!(matches!(
        writer.append(Zxid::new(2, 5), &zabkeeper_core::txn::codec::encode(&mid_epoch)),
        Err(BackupError::OutOfOrder { .. })
    ));
    let next = Txn { time_ms: time_of(Zxid::new(2, 1)), ..txn(Zxid::new(1, 25)) };
    writer.append(Zxid::new(2, 1), &zabkeeper_core::txn::codec::encode(&next)).expect("a new epoch");
    tree.apply(Zxid::new(2, 1), &next);
    writer.sync().expect("sync");
    let (report, state) = restored(dir.path(), Target::Zxid(Zxid::new(2, 1))).expect("restore");
    assert!(same(&state, tree.state()));
    assert_eq!(report.epoch, 2);
    let garbage = writer.append(Zxid::new(2, 2), b"not a record");
    assert!(matches!(garbage, Err(BackupError::Txn { .. })), "{garbage:?}");
}

#[test]
fn a_torn_tail_is_cut_off_on_resume_and_refused_on_restore_past_it() {
    let dir = tempfile::tempdir().expect("dir");
    let (writer, expected) = backup(dir.path(), 30, 0);
    drop(writer);
    let catalog = Catalog::open(dir.path()).expect("open");
    assert!(catalog.txn_files.len() >= 2, "{catalog:?}");
    let last_file = catalog.txn_files.last().expect("a file").path.clone();
    let len = std::fs::metadata(&last_file).expect("meta").len();
    let file = std::fs::OpenOptions::new().write(true).open(&last_file).expect("open");
    file.set_len(len - 3).expect("tear");
    // Restoring up to before the tear works; past it is refused, naming the tear.
    let (_, state) = restored(dir.path(), Target::Zxid(Zxid::new(1, 29))).expect("before the tear");
    assert!(same(&state, expected[27].1.state()));
    let past = restored(dir.path(), Target::Zxid(Zxid::new(1, 30))).expect_err("the torn one");
    let message = past.to_string();
    assert!(matches!(past, BackupError::AfterNewest { .. }), "{message}");
    assert!(message.contains("torn at offset") && message.contains(&*last_file.to_string_lossy()), "{message}");
    let listed = restore::list(&Catalog::open(dir.path()).expect("open")).expect("list");
    assert!(listed.last().and_then(|l| l.problem.as_ref()).is_some_and(|p| p.contains("torn")), "{listed:?}");
    // The backup cuts it off and asks for 1.30 again.
    let (writer, reopened) = Writer::open(dir.path(), options(0)).expect("open").expect("a backup");
    let (path, offset) = reopened.truncated.expect("cut off");
    assert_eq!(path, last_file);
    assert_eq!(writer.last(), Zxid::new(1, 29));
    assert!(offset < len - 3 && std::fs::metadata(&last_file).expect("meta").len() == offset);
    drop(writer);

    // A tear anywhere but at the end of the newest file is damage: refused.
    let first = Catalog::open(dir.path()).expect("open").txn_files[0].path.clone();
    let first_len = std::fs::metadata(&first).expect("meta").len();
    std::fs::OpenOptions::new().write(true).open(&first).expect("open").set_len(first_len - 1).expect("tear");
    let e = restored(dir.path(), Target::Zxid(Zxid::new(1, 29))).expect_err("torn in the middle");
    assert!(matches!(&e, BackupError::Format(FormatError::Torn { path, .. }) if *path == first), "{e}");
    assert!(matches!(Writer::open(dir.path(), options(0)), Err(BackupError::Format(FormatError::Torn { .. }))));
}

#[test]
fn a_corrupt_record_and_another_version_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    drop(backup(dir.path(), 6, 0));
    let catalog = Catalog::open(dir.path()).expect("open");
    let file = catalog.txn_files[0].path.clone();
    let mut bytes = std::fs::read(&file).expect("read");
    let at = format::HEADER_LEN + format::FRAME_HEAD + 20;
    bytes[at] ^= 0x10;
    std::fs::write(&file, &bytes).expect("write");
    let e = restored(dir.path(), Target::Zxid(Zxid::new(1, 5))).expect_err("corrupt");
    assert!(
        matches!(&e, BackupError::Format(FormatError::Corrupt { offset, .. }) if *offset == format::HEADER_LEN as u64),
        "{e}"
    );
    bytes[at] ^= 0x10;
    bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
    std::fs::write(&file, &bytes).expect("write");
    let e = Catalog::open(dir.path()).expect_err("another version");
    assert!(matches!(&e, BackupError::Format(FormatError::Version { found: 2, supported: FORMAT_VERSION, .. })), "{e}");
    assert!(e.to_string().contains(&*file.to_string_lossy()), "{e}");
    bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    std::fs::write(&file, &bytes).expect("write");
    let manifest = dir.path().join(MANIFEST);
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(&manifest, text.replace("\"version\": 1", "\"version\": 9")).expect("write");
    let e = Catalog::open(dir.path()).expect_err("manifest version");
    assert!(e.to_string().contains("version 9") && e.to_string().contains("version 1"), "{e}");
    std::fs::remove_file(&manifest).expect("remove");
    assert!(matches!(Catalog::open(dir.path()), Err(BackupError::NotBackup { .. })));
    assert!(
        matches!(Writer::open(dir.path(), options(0)), Err(BackupError::NotBackup { .. })),
        "not made over other files"
    );
}

#[test]
fn a_backup_that_starts_over_leaves_a_gap_that_restore_refuses() {
    let dir = tempfile::tempdir().expect("dir");
    let (writer, expected) = backup(dir.path(), 8, 0);
    drop(writer);
    // The log it needed was purged: it starts over from a member's snapshot at 1.14.
    let mut tree = DataTree::from_state(expected.last().expect("some").1.snapshot());
    for c in 9..=14 {
        tree.apply(Zxid::new(1, c), &txn(Zxid::new(1, c)));
    }
    let mut writer =
        Writer::start(dir.path(), options(0), chunks_of(&tree), time_of(Zxid::new(1, 14)), "test").expect("start");
    for c in 15..=16 {
        let (z, t) = (Zxid::new(1, c), txn(Zxid::new(1, c)));
        writer.append(z, &zabkeeper_core::txn::codec::encode(&t)).expect("append");
        tree.apply(z, &t);
    }
    writer.sync().expect("sync");
    let (_, state) = restored(dir.path(), Target::Zxid(Zxid::new(1, 8))).expect("before the gap");
    assert!(same(&state, expected.last().expect("some").1.state()));
    let (_, state) = restored(dir.path(), Target::Zxid(Zxid::new(1, 16))).expect("after it");
    assert!(same(&state, tree.state()));
    let e = restored(dir.path(), Target::Zxid(Zxid::new(1, 11))).expect_err("inside the gap");
    assert!(
        matches!(e, BackupError::Gap { last, prev, .. } if last == Zxid::new(1, 8) && prev == Zxid::new(1, 14)),
        "{e}"
    );
    let listed = restore::list(&Catalog::open(dir.path()).expect("open")).expect("list");
    assert!(listed.iter().any(|l| l.problem.as_deref().is_some_and(|p| p.contains("not held"))), "{listed:?}");
    // By time: the state at a time in the gap is not held either (what the
    // missing transactions did before it is unknown), so it is refused too.
    let at = |t| plan(&Catalog::open(dir.path()).expect("open"), Target::Time(t)).map(|p| p.target);
    assert_eq!(at(time_of(Zxid::new(1, 7))).expect("before the gap"), Zxid::new(1, 7));
    assert!(matches!(at(time_of(Zxid::new(1, 11))), Err(BackupError::Gap { .. })), "a time in the gap");
    assert_eq!(at(time_of(Zxid::new(1, 15)) + 5).expect("after it"), Zxid::new(1, 15));
}

#[test]
fn targets_outside_what_is_held_are_refused_precisely() {
    let dir = tempfile::tempdir().expect("dir");
    let keep = Options { keep_snapshots: 2, ..options(5) };
    let mut writer =
        Writer::start(dir.path(), keep, chunks_of(&base()), time_of(Zxid::new(1, 1)), "test").expect("start");
    append_through(&mut writer, 22);
    let catalog = Catalog::open(dir.path()).expect("open");
    let kept: Vec<u32> = catalog.snapshots.iter().map(|s| s.zxid.counter()).collect();
    assert_eq!(kept, [16, 21], "the newest two");
    assert!(catalog.txn_files.iter().all(|f| f.follows >= Zxid::new(1, 16)), "older transactions dropped with them");
    let p = |target| plan(&catalog, target);
    assert!(
        matches!(p(Target::Zxid(Zxid::new(1, 15))), Err(BackupError::BeforeOldest { oldest, .. }) if oldest == Zxid::new(1, 16))
    );
    assert!(
        matches!(p(Target::Zxid(Zxid::new(1, 23))), Err(BackupError::AfterNewest { newest, .. }) if newest == Zxid::new(1, 22))
    );
    let plan20 = p(Target::Zxid(Zxid::new(1, 20))).expect("held");
    assert_eq!(
        (plan20.target, plan20.snapshot.zxid, plan20.newest),
        (Zxid::new(1, 20), Zxid::new(1, 16), Zxid::new(1, 22))
    );
    assert_eq!(p(Target::Zxid(Zxid::new(1, 21))).expect("held").snapshot.zxid, Zxid::new(1, 21));
    // By time: the last transaction at or before it; before the oldest snapshot is refused.
    let t = |ms| p(Target::Time(ms)).map(|plan| plan.target);
    assert_eq!(t(time_of(Zxid::new(1, 18))).expect("exact"), Zxid::new(1, 18));
    assert_eq!(t(time_of(Zxid::new(1, 18)) + 9).expect("between"), Zxid::new(1, 18));
    assert_eq!(t(time_of(Zxid::new(1, 16)) + 1).expect("just after the snapshot"), Zxid::new(1, 16));
    assert_eq!(t(i64::MAX).expect("the newest"), Zxid::new(1, 22));
    assert!(matches!(t(time_of(Zxid::new(1, 16)) - 1), Err(BackupError::TimeBeforeOldest { .. })));
    let (report, state) = restored(dir.path(), Target::Zxid(Zxid::new(1, 19))).expect("held");
    assert_eq!((report.snapshot_zxid, report.replayed, state.last_zxid()), (Zxid::new(1, 16), 3, Zxid::new(1, 19)));
    let out = tempfile::tempdir().expect("dir");
    std::fs::write(out.path().join("x"), b"y").expect("write");
    let e = restore::restore(dir.path(), Target::Zxid(Zxid::new(1, 20)), out.path(), None).expect_err("not empty");
    assert!(matches!(e, BackupError::Offline(crate::offline::OfflineError::NotEmpty { .. })), "{e}");
    let empty = tempfile::tempdir().expect("dir");
    assert!(matches!(
        Catalog::create_or_open(empty.path()).map(|c| plan(&c, Target::Zxid(Zxid(1)))),
        Ok(Err(BackupError::Empty { .. }))
    ));
}

#[test]
fn a_zxid_between_epochs_is_no_transaction() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut writer, _) = backup(dir.path(), 4, 0);
    let next = Txn { time_ms: time_of(Zxid::new(3, 1)), ..txn(Zxid::new(1, 5)) };
    writer.append(Zxid::new(3, 1), &zabkeeper_core::txn::codec::encode(&next)).expect("a new epoch");
    writer.sync().expect("sync");
    let e = restored(dir.path(), Target::Zxid(Zxid::new(2, 7))).expect_err("no such transaction");
    assert!(
        matches!(e, BackupError::NotATransaction { before, after, .. } if before == Zxid::new(1, 4) && after == Zxid::new(3, 1)),
        "{e}"
    );
}

#[test]
fn one_writer_keeps_a_directory_and_its_lock_does_not_make_it_a_backup() {
    let dir = tempfile::tempdir().expect("dir");
    let backup_dir = dir.path().join("b");
    let held = lock_for_writing(&backup_dir).expect("the first writer");
    assert!(matches!(lock_for_writing(&backup_dir), Err(BackupError::Busy { .. })), "a second writer is refused");
    // The lock alone is an empty directory: the writer makes it a backup.
    Catalog::create_or_open(&backup_dir).expect("made a backup beside its lock");
    assert!(backup_dir.join(MANIFEST).is_file());
    drop(held);
    lock_for_writing(&backup_dir).expect("free again once the first lets go");
}

#[test]
fn files_a_reader_listed_stay_until_it_is_done_and_are_pruned_at_a_later_roll() {
    // `zkctl restore --list` on a backup being written failed with "No such
    // file or directory" (CI, 2026-11-29): it listed a transaction file that
    // the writer pruned before it was opened.
    let dir = tempfile::tempdir().expect("dir");
    let keep = Options { keep_snapshots: 1, ..options(5) };
    let mut writer =
        Writer::start(dir.path(), keep, chunks_of(&base()), time_of(Zxid::new(1, 1)), "test").expect("start");
    append_through(&mut writer, 8);
    let reader = Catalog::open(dir.path()).expect("open");
    let listed: Vec<PathBuf> = reader
        .snapshots
        .iter()
        .map(|s| s.path.clone())
        .chain(reader.txn_files.iter().map(|f| f.path.clone()))
        .collect();
    let listing = restore::list(&reader).expect("list").len();
    // Rolls that would prune what the reader listed, while it reads.
    append_through(&mut writer, 18);
    for path in &listed {
        assert!(path.exists(), "{} was pruned under a reader", path.display());
    }
    assert_eq!(restore::list(&reader).expect("the listing still reads").len(), listing);
    assert!(reader.newest().is_ok(), "the newest transaction still reads");
    drop(reader);
    // Done reading: the next roll prunes what was due, and more.
    append_through(&mut writer, 23);
    let after = Catalog::open(dir.path()).expect("open");
    let kept: Vec<u32> = after.snapshots.iter().map(|s| s.zxid.counter()).collect();
    assert_eq!(kept, [21], "the newest snapshot alone, as kept");
    assert!(listed.iter().all(|p| !p.exists()), "what the reader held went at the roll after it let go");
}
