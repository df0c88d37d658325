//! The rules both stores share, so they cannot drift apart: which zxid may
//! follow which in the log, and how recovery chooses a snapshot and checks
//! the log after it.
//!
//! Within one epoch counters are contiguous; a new epoch may start at any
//! counter ≥ 1 (its leader's first proposals can be behind a snapshot). A log
//! with no snapshot under it must start at counter 1, because anything else
//! means entries were purged or lost and the tree cannot be rebuilt.

use super::{Recovered, StorageError};
use crate::ids::{Epoch, Zxid};
use crate::tree::snapshot::SnapshotError;
use crate::tree::TreeState;
use crate::txn::Entry;

/// Whether `next` may directly follow `prev` (the previous entry, or the
/// snapshot's zxid — zero when there is none — for the first entry).
pub fn follows(prev: Zxid, next: Zxid) -> bool {
    if next <= prev || next.counter() == 0 {
        return false;
    }
    if prev == Zxid::ZERO {
        return next.counter() == 1;
    }
    next.epoch() != prev.epoch() || next.counter() == prev.counter().wrapping_add(1)
}

/// Checks a batch about to be appended after `last` (the last log entry, or
/// the newest snapshot's zxid when that is higher).
pub fn check_append<'a>(last: Zxid, entries: impl IntoIterator<Item = &'a Entry>) -> Result<(), StorageError> {
    let mut prev = last;
    for entry in entries {
        if !follows(prev, entry.zxid) {
            let why = if entry.zxid <= prev {
                "zxids must strictly increase"
            } else if entry.zxid.counter() == 0 {
                "counter 0 is not a transaction zxid"
            } else if prev == Zxid::ZERO {
                "an empty store's log must start at counter 1"
            } else {
                "counters within an epoch must be contiguous"
            };
            return Err(StorageError::Invalid(format!("cannot append {:?} after {prev:?}: {why}", entry.zxid)));
        }
        prev = entry.zxid;
    }
    Ok(())
}

/// Checks that `log` continues from `base` (the snapshot's zxid, zero when none).
pub fn check_chain(base: Zxid, log: &[Entry]) -> Result<(), StorageError> {
    let mut prev = base;
    for (i, entry) in log.iter().enumerate() {
        if !follows(prev, entry.zxid) {
            return Err(if i == 0 {
                StorageError::Gap { snapshot: base, first_log: entry.zxid }
            } else {
                StorageError::Discontiguous { previous: prev, found: entry.zxid }
            });
        }
        prev = entry.zxid;
    }
    Ok(())
}

/// What recovery needs to read from a store.
pub trait Source {
    /// (acceptedEpoch, currentEpoch), zero when never set.
    fn epochs(&self) -> Result<(Epoch, Epoch), StorageError>;
    /// The zxids of snapshots whose write completed, oldest first.
    fn snapshot_zxids(&self) -> Result<Vec<Zxid>, StorageError>;
    /// Reads and decodes one snapshot.
    fn load_snapshot(&self, zxid: Zxid) -> Result<TreeState, StorageError>;
    /// Every log entry with a zxid above `zxid`, decoded, in order.
    fn log_after(&self, zxid: Zxid) -> Result<Vec<Entry>, StorageError>;
}

/// Loads a snapshot and checks it describes the zxid it is stored under.
fn load_checked(source: &impl Source, zxid: Zxid) -> Result<TreeState, StorageError> {
    let state = source.load_snapshot(zxid)?;
    if state.last_zxid() != zxid {
        return Err(StorageError::CorruptSnapshot {
            zxid,
            source: SnapshotError::Inconsistent {
                index: 0,
                reason: format!("header is for {:?}, stored under {zxid:?}", state.last_zxid()),
            },
        });
    }
    Ok(state)
}

/// Rebuilds what a replica finds on disk: the newest usable snapshot and the
/// log after it, every step checked.
///
/// When the newest snapshot is unusable, an older one (or none at all) is
/// used only if the log after it is intact and contains the newest
/// snapshot's own zxid: then replay reaches at least the state that snapshot
/// held. Otherwise the newest snapshot's fault is returned, because loading
/// less would silently forget committed transactions.
pub fn recover(source: &impl Source) -> Result<Recovered, StorageError> {
    let (accepted_epoch, current_epoch) = source.epochs()?;
    let zxids = source.snapshot_zxids()?;
    let build =
        |snapshot: Option<TreeState>, log: Vec<Entry>| Recovered { accepted_epoch, current_epoch, snapshot, log };
    let Some((&newest, older)) = zxids.split_last() else {
        let log = source.log_after(Zxid::ZERO)?;
        check_chain(Zxid::ZERO, &log)?;
        return Ok(build(None, log));
    };
    let fault = match load_checked(source, newest) {
        Ok(state) => {
            let log = source.log_after(newest)?;
            check_chain(newest, &log)?;
            return Ok(build(Some(state), log));
        }
        Err(e) if e.is_snapshot_fault() => e,
        Err(e) => return Err(e),
    };
    // Newest older snapshot first; `None` stands for replaying from the empty tree.
    let candidates = older.iter().rev().copied().map(Some).chain([None]);
    for candidate in candidates {
        let (base, state) = match candidate {
            Some(zxid) => match load_checked(source, zxid) {
                Ok(state) => (zxid, Some(state)),
                Err(e) if e.is_snapshot_fault() => {
                    tracing::warn!(%zxid, error = %e, "older snapshot is unusable too");
                    continue;
                }
                Err(e) => return Err(e),
            },
            None => (Zxid::ZERO, None),
        };
        // The first loadable base decides: an older base needs the same log
        // and more of it, so it cannot succeed where this one fails.
        let log = match source.log_after(base) {
            Ok(log) => log,
            Err(e @ StorageError::Io { .. }) => return Err(e),
            Err(_) => return Err(fault),
        };
        let covers = check_chain(base, &log).is_ok() && log.binary_search_by_key(&newest, |e| e.zxid).is_ok();
        if !covers {
            return Err(fault);
        }
        tracing::warn!(
            unusable = %newest,
            base = %base,
            error = %fault,
            "newest snapshot is unusable; recovering from an older base and the log, which covers it"
        );
        return Ok(build(state, log));
    }
    Err(fault)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(epoch: Epoch, counter: u32) -> Zxid {
        Zxid::new(epoch, counter)
    }

    #[test]
    fn contiguity_rules() {
        assert!(follows(Zxid::ZERO, z(1, 1)));
        assert!(follows(Zxid::ZERO, z(3, 1)), "history may start in any epoch");
        assert!(!follows(Zxid::ZERO, z(1, 2)), "no snapshot: must start at counter 1");
        assert!(follows(z(1, 4), z(1, 5)));
        assert!(!follows(z(1, 4), z(1, 6)));
        assert!(!follows(z(1, 4), z(1, 4)));
        assert!(!follows(z(1, 4), z(1, 3)));
        assert!(follows(z(1, 4), z(2, 1)));
        assert!(follows(z(1, 4), z(2, 7)), "a new epoch may start at any counter");
        assert!(!follows(z(1, 4), z(2, 0)));
    }

    #[test]
    fn append_errors_name_the_rule() {
        let e = |zxid| {
            Entry::new(
                zxid,
                crate::txn::Txn {
                    session: crate::ids::SessionId::NONE,
                    cxid: 0,
                    time_ms: 0,
                    body: crate::txn::TxnBody::Check { path: "/".into() },
                },
            )
        };
        let err = check_append(z(1, 2), &[e(z(1, 3)), e(z(1, 5))]).unwrap_err().to_string();
        assert!(err.contains("contiguous"), "{err}");
        let err = check_append(z(1, 2), &[e(z(1, 2))]).unwrap_err().to_string();
        assert!(err.contains("strictly increase"), "{err}");
        let err = check_append(Zxid::ZERO, &[e(z(1, 2))]).unwrap_err().to_string();
        assert!(err.contains("counter 1"), "{err}");
        assert!(check_append(z(1, 2), &[e(z(1, 3)), e(z(2, 9))]).is_ok());
    }
}
