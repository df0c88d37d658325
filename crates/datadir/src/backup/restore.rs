//! `zkctl restore`: a data directory holding exactly the state after one
//! transaction of a backup (given by zxid, or as the last one at or before
//! a time): the newest backup snapshot at or before it, its transactions
//! replayed up to it, written as `snapshot restore` and `zkctl import`
//! write a member's data ([`offline::write_data_dir`]). Also what a backup
//! holds, for finding the transaction to restore to.

use super::format::{FormatError, Frames, Kind};
use super::{decode, read_snapshot, BackupError, Catalog, SnapshotFile};
use crate::offline;
use std::path::{Path, PathBuf};
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::members::Configuration;
use zabkeeper_core::tree::{snapshot, DataTree};
use zabkeeper_core::txn::Entry;

/// What to restore to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The state after this transaction.
    Zxid(Zxid),
    /// The state after the last transaction at or before this time (ms
    /// since the Unix epoch): every transaction up to the first one after it.
    Time(i64),
}

/// Where a restore starts and ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The transaction whose state is restored.
    pub target: Zxid,
    /// The snapshot replayed from (the newest at or before the target).
    pub snapshot: SnapshotFile,
    /// The newest transaction the backup holds.
    pub newest: Zxid,
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The transaction whose state was restored.
    pub target: Zxid,
    /// Its time (ms since the Unix epoch; the snapshot's when no transaction was replayed).
    pub target_time_ms: i64,
    /// The snapshot file started from.
    pub snapshot: PathBuf,
    /// Its zxid.
    pub snapshot_zxid: Zxid,
    /// Transactions replayed on top of it.
    pub replayed: u64,
    /// Nodes in the restored tree.
    pub nodes: usize,
    /// Open sessions in it.
    pub sessions: usize,
    /// The epoch the data directory starts with (the newest the backup
    /// saw), so an ensemble started on it writes after every zxid backed up.
    pub epoch: u32,
    /// The members the restored data names, when it names any.
    pub members: Option<String>,
}

/// Picks the transaction and the snapshot a restore to `target` uses, or
/// says why there is none.
pub fn plan(catalog: &Catalog, target: Target) -> Result<Plan, BackupError> {
    let oldest = catalog.snapshots.first().ok_or_else(|| BackupError::Empty { dir: catalog.dir.clone() })?;
    let (newest, torn) = catalog.newest()?;
    let target = match target {
        Target::Zxid(z) => z,
        Target::Time(t) => zxid_at_time(catalog, t)?,
    };
    if target < oldest.zxid {
        return Err(BackupError::BeforeOldest { target, oldest: oldest.zxid });
    }
    if target > newest {
        let torn = torn.map_or(String::new(), |e| format!("; the newest file ends torn: {e}"));
        return Err(BackupError::AfterNewest { target, newest, torn });
    }
    let snapshot = catalog.snapshot_at_or_before(target).cloned().unwrap_or_else(|| oldest.clone());
    Ok(Plan { target, snapshot, newest })
}

/// The last transaction at or before `time_ms`, taking the history as a
/// prefix: it stops at the first transaction after the time (leaders'
/// clocks may disagree a little, so a later one could carry an earlier time).
fn zxid_at_time(catalog: &Catalog, time_ms: i64) -> Result<Zxid, BackupError> {
    let oldest = catalog.snapshots.first().ok_or_else(|| BackupError::Empty { dir: catalog.dir.clone() })?;
    if oldest.time_ms > time_ms {
        return Err(BackupError::TimeBeforeOldest { time_ms, oldest: oldest.zxid, oldest_time_ms: oldest.time_ms });
    }
    let mut best = oldest.zxid;
    let mut at = oldest.zxid;
    loop {
        let walked = catalog.replay(at, &mut |_, _, entry| {
            if entry.txn.time_ms > time_ms {
                return Ok(false);
            }
            best = entry.zxid;
            Ok(true)
        });
        match walked {
            Ok(_) => return Ok(best),
            // After a gap the history goes on from the snapshot the backup
            // started over from, if it was taken in time.
            Err(gap @ BackupError::Gap { .. }) => {
                let BackupError::Gap { prev, .. } = gap else { unreachable!("matched as a gap") };
                match catalog.snapshots.iter().find(|s| s.zxid == prev) {
                    Some(s) if s.time_ms <= time_ms => {
                        best = s.zxid;
                        at = s.zxid;
                    }
                    // The state at that time may lie in the missing span: refused, as for a zxid.
                    _ => return Err(gap),
                }
            }
            // A torn end is where the history stops, for a time as for a zxid.
            Err(BackupError::Format(FormatError::Torn { path, .. }))
                if catalog.txn_files.last().is_some_and(|f| f.path == path) =>
            {
                return Ok(best)
            }
            Err(e) => return Err(e),
        }
    }
}

/// The initial configuration a member started on the config file `path`
/// takes (as the replica takes it from its file), and whether it shows it
/// in `/zookeeper/config` (not when standalone, as ZooKeeper).
fn configuration_of(path: &Path) -> Result<(Configuration, bool), BackupError> {
    let bad = |reason: String| BackupError::Config { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    // Every member of a file lists the same members: any id selects one.
    let table: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let first = table.get("server").and_then(|s| s.as_array()).and_then(|s| s.first());
    let id = first.and_then(|s| s.get("id")).and_then(toml::Value::as_integer).and_then(|id| u64::try_from(id).ok());
    let config = ServerConfig::parse(&text, id).map_err(|e| bad(e.to_string()))?;
    let replica = config.replica_config();
    let shown = replica.members.is_some();
    let initial = replica.members.unwrap_or_else(|| replica.zab.initial_configuration().active);
    Ok((Configuration::initial(initial), shown))
}

/// Restores the backup in `backup` to `target` into the data directory
/// `data_dir`, which must be absent or empty. With `config` (the file of the
/// ensemble that will run on it), its members replace those of the
/// ensemble backed up (from its file or from a reconfiguration).
pub fn restore(backup: &Path, target: Target, data_dir: &Path, config: Option<&Path>) -> Result<Restored, BackupError> {
    offline::ensure_empty(data_dir)?;
    let membership = config.map(configuration_of).transpose()?;
    let catalog = Catalog::open(backup)?;
    let plan = plan(&catalog, target)?;
    let mut tree = DataTree::from_state(read_snapshot(&plan.snapshot)?);
    let (mut replayed, mut target_time_ms) = (0u64, plan.snapshot.time_ms);
    let mut before = plan.snapshot.zxid;
    let mut overshot = None;
    if plan.target > plan.snapshot.zxid {
        catalog.replay(plan.snapshot.zxid, &mut |_, _, entry| {
            if entry.zxid > plan.target {
                overshot = Some(entry.zxid);
                return Ok(false);
            }
            tree.apply(entry.zxid, &entry.txn);
            (before, target_time_ms, replayed) = (entry.zxid, entry.txn.time_ms, replayed + 1);
            Ok(entry.zxid < plan.target)
        })?;
    }
    if let Some(after) = overshot {
        return Err(BackupError::NotATransaction { target: plan.target, before, after });
    }
    if tree.last_zxid() != plan.target {
        return Err(BackupError::Unreachable { snapshot: plan.snapshot.zxid, last: before, target: plan.target });
    }
    if let Some((configuration, shown)) = membership {
        // Even a membership the ensemble backed up changed by reconfiguration:
        // the new ensemble is the file's, and starts from that.
        tree.reseed_configuration(configuration, shown);
    }
    let state = tree.state();
    let (nodes, sessions) = (state.node_count(), state.session_count());
    let members = state.configuration().map(|c| c.current().to_string());
    let epoch = plan.newest.epoch().max(plan.target.epoch());
    let (chunks, _) = snapshot::to_chunks(state, zabkeeper_store::SNAPSHOT_CHUNK_BYTES);
    offline::write_data_dir(data_dir, plan.target, chunks, epoch)?;
    Ok(Restored {
        target: plan.target,
        target_time_ms,
        snapshot: plan.snapshot.path.clone(),
        snapshot_zxid: plan.snapshot.zxid,
        replayed,
        nodes,
        sessions,
        epoch,
        members,
    })
}

/// One file of a backup, as `zkctl restore --list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The file.
    pub path: PathBuf,
    /// A snapshot, or transactions.
    pub kind: Kind,
    /// The snapshot's zxid; the first transaction's (0 when none).
    pub first: Zxid,
    /// The snapshot's zxid; the last whole transaction's (0 when none).
    pub last: Zxid,
    /// The time of `first` (a snapshot's: of its last transaction).
    pub first_time_ms: i64,
    /// The time of `last`.
    pub last_time_ms: i64,
    /// Transactions in it (0 for a snapshot).
    pub transactions: u64,
    /// What is wrong with it, if anything: a torn tail, damage, or a gap
    /// before its first transaction.
    pub problem: Option<String>,
}

/// Every file of a backup in the order of the history (a snapshot before
/// the transactions that follow it), each transaction file read through.
pub fn list(catalog: &Catalog) -> Result<Vec<Listed>, BackupError> {
    let mut out: Vec<((Zxid, bool), Listed)> = catalog
        .snapshots
        .iter()
        .map(|s| {
            let listed = Listed {
                path: s.path.clone(),
                kind: Kind::Snapshot,
                first: s.zxid,
                last: s.zxid,
                first_time_ms: s.time_ms,
                last_time_ms: s.time_ms,
                transactions: 0,
                problem: None,
            };
            ((s.zxid, false), listed)
        })
        .collect();
    let mut previous_end: Option<Zxid> = None;
    for file in &catalog.txn_files {
        let mut listed = Listed {
            path: file.path.clone(),
            kind: Kind::Txns,
            first: Zxid::ZERO,
            last: Zxid::ZERO,
            first_time_ms: 0,
            last_time_ms: 0,
            transactions: 0,
            problem: None,
        };
        if let Some(end) = previous_end.filter(|end| *end != file.follows) {
            let restarted = catalog.snapshots.iter().any(|s| s.zxid == file.follows);
            listed.problem = Some(if restarted {
                format!(
                    "the transactions after {end} up to {} are not held (the backup started over from that snapshot)",
                    file.follows
                )
            } else {
                format!("gap: it follows {}, the file before ends at {end}", file.follows)
            });
        }
        let mut frames = Frames::open(&file.path, Kind::Txns)?;
        let mut last = file.follows;
        loop {
            let record = match frames.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(e) => {
                    listed.problem = Some(e.to_string());
                    break;
                }
            };
            let entry = match decode(&file.path, &record) {
                Ok(entry) => entry,
                Err(e) => {
                    listed.problem = Some(e.to_string());
                    break;
                }
            };
            if record.prev != last && listed.problem.is_none() {
                listed.problem = Some(format!(
                    "gap at offset {}: {} follows {}, not {last}",
                    record.offset, record.zxid, record.prev
                ));
            }
            if listed.transactions == 0 {
                (listed.first, listed.first_time_ms) = (entry.zxid, entry.txn.time_ms);
            }
            (listed.last, listed.last_time_ms) = (entry.zxid, entry.txn.time_ms);
            listed.transactions += 1;
            last = record.zxid;
        }
        previous_end = Some(last);
        out.push(((file.follows, true), listed));
    }
    out.sort_by_key(|(key, _)| *key);
    Ok(out.into_iter().map(|(_, listed)| listed).collect())
}

/// Shows `visit` every transaction the backup holds, in order, until it
/// returns false; a torn end stops the walk (it is reported by [`list`]).
pub fn entries(catalog: &Catalog, visit: &mut dyn FnMut(&Path, Entry) -> bool) -> Result<(), BackupError> {
    for file in &catalog.txn_files {
        let mut frames = Frames::open(&file.path, Kind::Txns)?;
        loop {
            match frames.next_record() {
                Ok(Some(record)) => {
                    if !visit(&file.path, decode(&file.path, &record)?) {
                        return Ok(());
                    }
                }
                Ok(None) => break,
                Err(FormatError::Torn { .. }) if catalog.txn_files.last().is_some_and(|f| f.path == file.path) => {
                    return Ok(())
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
