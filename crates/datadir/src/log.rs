//! Log queries: a zxid range or the last N entries, filtered by path prefix,
//! session and type, gathered up to a byte budget so one answer's memory is
//! bounded however large the log or its entries are.

use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::members::Change;
use zabkeeper_core::storage::{Scan, Storage, StorageError};
use zabkeeper_core::txn::{codec, Entry, TxnBody};

/// Most entries one page holds.
pub const MAX_ENTRIES: usize = 10_000;
/// Bytes one page gathers unless asked for less.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 20;
/// The largest byte budget a caller may ask for.
pub const MAX_BYTES: u64 = 64 << 20;

/// Which entries a query keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only entries touching a path with this prefix.
    pub path_prefix: Option<String>,
    /// Only entries of this session.
    pub session: Option<SessionId>,
    /// Only entries of this type, or multis holding an op of it.
    pub kind: Option<String>,
}

impl Filter {
    /// Whether `body` (of a transaction by `session`) passes.
    pub fn matches(&self, session: SessionId, body: &TxnBody) -> bool {
        if self.session.is_some_and(|s| s != session) {
            return false;
        }
        if let Some(kind) = &self.kind {
            let nested = match body {
                TxnBody::Multi(ops) => ops.iter().any(|op| kind_of(op) == kind),
                _ => false,
            };
            if kind_of(body) != kind && !nested {
                return false;
            }
        }
        match &self.path_prefix {
            Some(prefix) => paths_of(body).iter().any(|p| p.starts_with(prefix.as_str())),
            None => true,
        }
    }
}

/// A transaction type's name, as ZooKeeper's log tools spell it.
pub fn kind_of(body: &TxnBody) -> &'static str {
    match body {
        TxnBody::CreateSession { .. } => "createSession",
        TxnBody::CloseSession { .. } => "closeSession",
        TxnBody::Create { .. } => "create",
        TxnBody::Delete { .. } => "delete",
        TxnBody::SetData { .. } => "setData",
        TxnBody::SetAcl { .. } => "setACL",
        TxnBody::Check { .. } => "check",
        TxnBody::Multi(_) => "multi",
        TxnBody::MultiError(_) | TxnBody::Error(_) => "error",
        TxnBody::Reconfig(Change::Enter { .. }) => "reconfig",
        TxnBody::Reconfig(Change::Complete { .. }) => "reconfigComplete",
        TxnBody::Load { .. } => "load",
    }
}

/// Every type name [`kind_of`] gives, for checking a filter.
pub const KINDS: [&str; 12] = [
    "createSession",
    "closeSession",
    "create",
    "delete",
    "setData",
    "setACL",
    "check",
    "multi",
    "error",
    "reconfig",
    "reconfigComplete",
    "load",
];

/// The paths a transaction touches (a session's close: its ephemerals).
pub fn paths_of(body: &TxnBody) -> Vec<&str> {
    match body {
        TxnBody::Create { path, .. }
        | TxnBody::Delete { path }
        | TxnBody::SetData { path, .. }
        | TxnBody::SetAcl { path, .. }
        | TxnBody::Check { path } => vec![path.as_str()],
        TxnBody::CloseSession { paths } => paths.iter().map(String::as_str).collect(),
        TxnBody::Multi(ops) => ops.iter().flat_map(paths_of).collect(),
        TxnBody::Reconfig(Change::Enter { .. }) => vec![zabkeeper_core::tree::CONFIG_PATH],
        // Every path: a filter by prefix shows the load to whoever watches any.
        TxnBody::Load { .. } => vec!["/"],
        TxnBody::CreateSession { .. }
        | TxnBody::MultiError(_)
        | TxnBody::Error(_)
        | TxnBody::Reconfig(Change::Complete { .. }) => Vec::new(),
    }
}

/// The encoded size of an entry (what the log stores for it).
pub fn size_of(entry: &Entry) -> u64 {
    codec::encode(&entry.txn).len() as u64
}

/// A page of the log to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Entries with zxid ≥ this.
    pub from: Zxid,
    /// Entries with zxid ≤ this.
    pub to: Zxid,
    /// The last N matching entries up to `to` instead of the first from `from`.
    pub last: Option<usize>,
    /// At most this many entries.
    pub limit: usize,
    /// Stop once this many bytes are gathered (at least one entry is).
    pub max_bytes: u64,
    /// Which entries to keep.
    pub filter: Filter,
}

impl Default for Query {
    fn default() -> Query {
        Query {
            from: Zxid::ZERO,
            to: Zxid(u64::MAX),
            last: None,
            limit: 100,
            max_bytes: DEFAULT_MAX_BYTES,
            filter: Filter::default(),
        }
    }
}

/// One page of matching entries, oldest first.
#[derive(Debug, Default)]
pub struct Page {
    /// The entries.
    pub entries: Vec<Entry>,
    /// Where the next page starts (as `from`) when this one stopped early.
    pub next: Option<Zxid>,
}

/// Reads one page of `storage`'s log.
pub fn read(storage: &dyn Storage, query: &Query) -> Result<Page, StorageError> {
    let limit = query.last.unwrap_or(query.limit).clamp(1, MAX_ENTRIES);
    let budget = query.max_bytes.clamp(1, MAX_BYTES);
    let mut page = Page::default();
    let mut bytes = 0u64;
    let mut full = false;
    let (scan, backwards) = match query.last {
        Some(_) => (Scan::Back(query.to), true),
        None => (Scan::From(query.from), false),
    };
    storage.scan_log(scan, &mut |entry| {
        let in_range = if backwards { entry.zxid >= query.from } else { entry.zxid <= query.to };
        if !in_range {
            return false;
        }
        if !query.filter.matches(entry.txn.session, &entry.txn.body) {
            return true;
        }
        if full {
            // One more match exists: the page stopped early here.
            page.next = Some(entry.zxid);
            return false;
        }
        bytes += size_of(&entry);
        page.entries.push(entry);
        full = page.entries.len() >= limit || bytes >= budget;
        true
    })?;
    if backwards {
        page.entries.reverse();
        page.next = None;
    }
    Ok(page)
}

/// The entry at `zxid`, if the log holds it.
pub fn entry(storage: &dyn Storage, zxid: Zxid) -> Result<Option<Entry>, StorageError> {
    let mut found = None;
    storage.scan_log(Scan::From(zxid), &mut |entry| {
        if entry.zxid == zxid {
            found = Some(entry);
        }
        false
    })?;
    Ok(found)
}

/// Why entries from a zxid cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("entries from {from} were purged: the log now starts after the snapshot at {snapshot} (first entry {first})")]
pub struct Purged {
    /// The zxid asked for.
    pub from: Zxid,
    /// The oldest snapshot kept.
    pub snapshot: Zxid,
    /// The first entry in the log (zero when it is empty).
    pub first: Zxid,
}

/// Checks that every entry with zxid ≥ `from` is still in the log: entries
/// at or below the oldest snapshot kept may have been purged with older
/// snapshots, or replaced by a leader's snapshot (SNAP).
pub fn available_from(storage: &dyn Storage, from: Zxid) -> Result<Result<(), Purged>, StorageError> {
    let snapshot = storage.snapshots()?.first().map_or(Zxid::ZERO, |s| s.zxid);
    let first = storage.log_bounds()?.map(|(first, _)| first);
    let held = first.is_some_and(|first| first <= from);
    if snapshot == Zxid::ZERO || from > snapshot || held {
        return Ok(Ok(()));
    }
    Ok(Err(Purged { from, snapshot, first: first.unwrap_or(Zxid::ZERO) }))
}

/// Whether this member's history holds `zxid` itself, as a log entry or as
/// the zxid of a snapshot: then what its log holds after `zxid` follows it
/// with nothing left out. Zero, the start of history, is always held. A
/// member that took a leader's snapshot (SNAP) past `zxid` keeps older
/// snapshots but no log between them and the leader's, so a scan from
/// `zxid` there would skip what lies between.
pub fn holds(storage: &dyn Storage, zxid: Zxid) -> Result<bool, StorageError> {
    if zxid == Zxid::ZERO || storage.snapshots()?.iter().any(|s| s.zxid == zxid) {
        return Ok(true);
    }
    let mut found = false;
    storage.scan_log(Scan::From(zxid), &mut |entry| {
        found = entry.zxid == zxid;
        false
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use zabkeeper_core::acl::Acl;
    use zabkeeper_core::storage::mem_store::MemStorage;
    use zabkeeper_core::tree::DataTree;
    use zabkeeper_core::txn::Txn;
    use zabkeeper_core::zab::StorageOp;

    fn z(counter: u32) -> Zxid {
        Zxid::new(1, counter)
    }

    /// Entries 1..=n alternating two sessions: creates of /a/<i>, setData of /b on every third.
    fn store(n: u32) -> MemStorage {
        let store = MemStorage::new();
        let entries: Vec<Entry> = (1..=n)
            .map(|i| {
                let body = if i % 3 == 0 {
                    TxnBody::SetData { path: "/b".into(), data: Bytes::from(vec![0; 100]).into(), version: i as i32 }
                } else {
                    TxnBody::Create {
                        path: format!("/a/{i}"),
                        data: Bytes::new().into(),
                        acl: Acl::open_unsafe(),
                        ephemeral_owner: 0,
                        parent_cversion: 1,
                    }
                };
                Entry::new(z(i), Txn { session: SessionId(i64::from(i % 2)), cxid: i as i32, time_ms: 0, body })
            })
            .collect();
        store.apply(&[StorageOp::Append(entries)]).expect("append");
        store.flush().expect("flush");
        store
    }

    fn zxids(page: &Page) -> Vec<u32> {
        page.entries.iter().map(|e| e.zxid.counter()).collect()
    }

    #[test]
    fn ranges_pages_and_the_last_n() {
        let s = store(20);
        let page = read(&s, &Query { from: z(5), to: z(9), limit: 100, ..Query::default() }).unwrap();
        assert_eq!((zxids(&page), page.next), (vec![5, 6, 7, 8, 9], None));
        let page = read(&s, &Query { from: z(5), limit: 3, ..Query::default() }).unwrap();
        assert_eq!((zxids(&page), page.next), (vec![5, 6, 7], Some(z(8))));
        let page = read(&s, &Query { last: Some(4), ..Query::default() }).unwrap();
        assert_eq!(zxids(&page), [17, 18, 19, 20]);
        let page = read(&s, &Query { last: Some(4), to: z(10), from: z(9), ..Query::default() }).unwrap();
        assert_eq!(zxids(&page), [9, 10]);
    }

    #[test]
    fn filters_by_path_session_and_type() {
        let s = store(20);
        let q = |filter: Filter| zxids(&read(&s, &Query { filter, limit: 100, ..Query::default() }).unwrap());
        let sets = q(Filter { kind: Some("setData".into()), ..Filter::default() });
        assert_eq!(sets, [3, 6, 9, 12, 15, 18]);
        assert_eq!(q(Filter { path_prefix: Some("/b".into()), ..Filter::default() }), sets);
        assert_eq!(
            q(Filter { path_prefix: Some("/a/1".into()), ..Filter::default() }),
            [1, 10, 11, 13, 14, 16, 17, 19]
        );
        let odd = q(Filter { session: Some(SessionId(1)), kind: Some("setData".into()), ..Filter::default() });
        assert_eq!(odd, [3, 9, 15]);
        assert_eq!(q(Filter { kind: Some("delete".into()), ..Filter::default() }), Vec::<u32>::new());
    }

    #[test]
    fn a_closed_session_matches_by_its_ephemerals() {
        let close = TxnBody::CloseSession { paths: vec!["/e/1".into()] };
        let by_path = |p: &str| Filter { path_prefix: Some(p.into()), ..Filter::default() };
        assert!(by_path("/e").matches(SessionId(5), &close));
        assert!(!by_path("/f").matches(SessionId(5), &close));
        let by_kind = Filter { kind: Some("closeSession".into()), session: Some(SessionId(5)), ..Filter::default() };
        assert!(by_kind.matches(SessionId(5), &close));
        assert!(!by_kind.matches(SessionId(6), &close));
    }

    #[test]
    fn the_byte_budget_bounds_a_page_but_never_empties_it() {
        let s = store(20);
        let one = size_of(&entry(&s, z(3)).unwrap().unwrap());
        let filter = Filter { kind: Some("setData".into()), ..Filter::default() };
        let page =
            read(&s, &Query { max_bytes: 2 * one, limit: 100, filter: filter.clone(), ..Query::default() }).unwrap();
        assert_eq!((zxids(&page), page.next), (vec![3, 6], Some(z(9))));
        let page = read(&s, &Query { max_bytes: 1, limit: 100, filter, ..Query::default() }).unwrap();
        assert_eq!(zxids(&page), [3]);
    }

    #[test]
    fn one_entry_by_zxid() {
        let s = store(5);
        assert_eq!(entry(&s, z(4)).unwrap().map(|e| e.zxid), Some(z(4)));
        assert!(entry(&s, z(6)).unwrap().is_none());
    }

    #[test]
    fn purged_entries_are_named() {
        let s = store(20);
        assert_eq!(available_from(&s, z(1)).unwrap(), Ok(()), "nothing purged yet");
        let tree = DataTree::new();
        let (chunks, _) = zabkeeper_core::tree::snapshot::to_chunks(tree.state(), 1 << 20);
        s.save_snapshot(z(10), &chunks).unwrap();
        s.save_snapshot(z(15), &chunks).unwrap();
        s.purge(1).unwrap();
        assert_eq!(s.log_bounds().unwrap(), Some((z(16), z(20))));
        assert_eq!(available_from(&s, z(16)).unwrap(), Ok(()));
        assert_eq!(available_from(&s, z(21)).unwrap(), Ok(()), "the future is not purged");
        assert_eq!(available_from(&s, z(12)).unwrap(), Err(Purged { from: z(12), snapshot: z(15), first: z(16) }));
    }

    #[test]
    fn a_member_holds_a_zxid_in_its_log_or_as_a_snapshot_and_not_across_a_leaders_snapshot() {
        let s = store(20);
        assert!(holds(&s, Zxid::ZERO).unwrap(), "the start of history");
        assert!(holds(&s, z(7)).unwrap() && holds(&s, z(20)).unwrap());
        assert!(!holds(&s, z(21)).unwrap(), "not yet written");
        // A leader's snapshot (SNAP) at 1.30 replaces the log: 1.21..=1.29 never
        // reached this member, though a scan from 1.21 would start at 1.31.
        let (chunks, _) = zabkeeper_core::tree::snapshot::to_chunks(DataTree::new().state(), 1 << 20);
        s.save_snapshot(z(10), &chunks).unwrap();
        s.apply(&[StorageOp::InstallSnapshot { zxid: z(30), chunks: chunks.clone() }]).unwrap();
        let later: Vec<Entry> = (31..=33)
            .map(|i| {
                let body = TxnBody::Delete { path: format!("/a/{i}") };
                Entry::new(z(i), Txn { session: SessionId(1), cxid: i as i32, time_ms: 0, body })
            })
            .collect();
        s.apply(&[StorageOp::Append(later)]).unwrap();
        assert!(holds(&s, z(10)).unwrap() && holds(&s, z(30)).unwrap() && holds(&s, z(32)).unwrap());
        assert!(!holds(&s, z(20)).unwrap(), "its old log went with the leader's snapshot");
        assert_eq!(available_from(&s, z(21)).unwrap(), Ok(()), "which the purge check alone does not see");
    }
}
