//! Watches: which sessions want to hear about which paths, and which of them
//! a change fires (ZooKeeper's `WatchManager` pair for data and children).
//!
//! Watches are local to the replica a session is connected to and are not
//! replicated; after a reconnect the client re-registers them (SetWatches).
//! This module decides who is told what; delivery belongs to the session layer.

use crate::ids::SessionId;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// ZooKeeper's watch event types (`Watcher.Event.EventType`), wire numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i32)]
pub enum EventType {
    /// A state change, not a node event.
    None = -1,
    /// The watched node was created.
    NodeCreated = 1,
    /// The watched node was deleted.
    NodeDeleted = 2,
    /// The watched node's data changed.
    NodeDataChanged = 3,
    /// The watched node's children changed.
    NodeChildrenChanged = 4,
    /// A data watch was removed (client-side).
    DataWatchRemoved = 5,
    /// A child watch was removed (client-side).
    ChildWatchRemoved = 6,
    /// A persistent watch was removed (client-side).
    PersistentWatchRemoved = 7,
}

impl EventType {
    /// The wire number.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The event type for a wire number.
    pub fn from_code(code: i32) -> Option<EventType> {
        Some(match code {
            -1 => EventType::None,
            1 => EventType::NodeCreated,
            2 => EventType::NodeDeleted,
            3 => EventType::NodeDataChanged,
            4 => EventType::NodeChildrenChanged,
            5 => EventType::DataWatchRemoved,
            6 => EventType::ChildWatchRemoved,
            7 => EventType::PersistentWatchRemoved,
            _ => return None,
        })
    }
}

/// Which watches removeWatches/checkWatches act on (ZooKeeper's `WatcherType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatcherType {
    /// One-shot child watches.
    Children = 1,
    /// One-shot data and exists watches.
    Data = 2,
    /// Every watch of the session on the path.
    Any = 3,
    /// Persistent watches.
    Persistent = 4,
    /// Persistent recursive watches.
    PersistentRecursive = 5,
}

impl WatcherType {
    /// The type for a wire number.
    pub fn from_code(code: i32) -> Option<WatcherType> {
        Some(match code {
            1 => WatcherType::Children,
            2 => WatcherType::Data,
            3 => WatcherType::Any,
            4 => WatcherType::Persistent,
            5 => WatcherType::PersistentRecursive,
            _ => return None,
        })
    }
}

/// addWatch modes (ZooKeeper's `AddWatchMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddWatchMode {
    /// Fires on every change of the node and its child list, until removed.
    Persistent = 0,
    /// Fires on every change of the node and every descendant, until removed.
    PersistentRecursive = 1,
}

impl AddWatchMode {
    /// The mode for a wire number.
    pub fn from_code(code: i32) -> Option<AddWatchMode> {
        match code {
            0 => Some(AddWatchMode::Persistent),
            1 => Some(AddWatchMode::PersistentRecursive),
            _ => None,
        }
    }
}

/// One event for one session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// What happened.
    pub event_type: EventType,
    /// The node it happened to.
    pub path: String,
    /// The zxid of the transaction that fired it (-1 when none).
    pub zxid: i64,
}

/// A change the tree reports: the node and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The node.
    pub path: String,
    /// What happened.
    pub event_type: EventType,
}

type Table = FxHashMap<String, FxHashSet<SessionId>>;

/// Every session's watches on this replica.
#[derive(Default, Debug)]
pub struct WatchManager {
    /// One-shot data and exists watches.
    data: Table,
    /// One-shot child watches.
    child: Table,
    /// Persistent watches (node and its child list).
    persistent: Table,
    /// Persistent recursive watches (node and every descendant).
    recursive: Table,
    /// Per session, the paths it watches, to drop them when it goes away.
    by_session: FxHashMap<SessionId, FxHashSet<String>>,
}

fn add(table: &mut Table, path: &str, session: SessionId) -> bool {
    table.entry(path.to_string()).or_default().insert(session)
}

fn remove(table: &mut Table, path: &str, session: SessionId) -> bool {
    let Some(set) = table.get_mut(path) else { return false };
    let removed = set.remove(&session);
    if set.is_empty() {
        table.remove(path);
    }
    removed
}

fn holds(table: &Table, path: &str, session: SessionId) -> bool {
    table.get(path).is_some_and(|s| s.contains(&session))
}

impl WatchManager {
    /// Registers a one-shot data watch (getData, or exists on a present node).
    pub fn add_data(&mut self, path: &str, session: SessionId) {
        add(&mut self.data, path, session);
        self.index(path, session);
    }

    /// Registers a one-shot exists watch; the server keeps it with the data watches.
    pub fn add_exists(&mut self, path: &str, session: SessionId) {
        self.add_data(path, session);
    }

    /// Registers a one-shot child watch.
    pub fn add_child(&mut self, path: &str, session: SessionId) {
        add(&mut self.child, path, session);
        self.index(path, session);
    }

    /// Registers a persistent or persistent recursive watch.
    pub fn add_persistent(&mut self, path: &str, mode: AddWatchMode, session: SessionId) {
        match mode {
            AddWatchMode::Persistent => add(&mut self.persistent, path, session),
            AddWatchMode::PersistentRecursive => add(&mut self.recursive, path, session),
        };
        self.index(path, session);
    }

    fn index(&mut self, path: &str, session: SessionId) {
        self.by_session.entry(session).or_default().insert(path.to_string());
    }

    /// Removes the session's watches of `kind` on `path`; false when none existed.
    pub fn remove(&mut self, path: &str, kind: WatcherType, session: SessionId) -> bool {
        let removed = match kind {
            WatcherType::Children => remove(&mut self.child, path, session),
            WatcherType::Data => remove(&mut self.data, path, session),
            WatcherType::Any => {
                let a = remove(&mut self.child, path, session);
                let b = remove(&mut self.data, path, session);
                let c = remove(&mut self.persistent, path, session);
                let d = remove(&mut self.recursive, path, session);
                a | b | c | d
            }
            WatcherType::Persistent => remove(&mut self.persistent, path, session),
            WatcherType::PersistentRecursive => remove(&mut self.recursive, path, session),
        };
        self.reindex(path, session);
        removed
    }

    /// Whether the session has a watch of `kind` on `path` (checkWatches).
    pub fn contains(&self, path: &str, kind: WatcherType, session: SessionId) -> bool {
        match kind {
            WatcherType::Children => holds(&self.child, path, session),
            WatcherType::Data => holds(&self.data, path, session),
            WatcherType::Any => {
                holds(&self.child, path, session)
                    || holds(&self.data, path, session)
                    || holds(&self.persistent, path, session)
                    || holds(&self.recursive, path, session)
            }
            WatcherType::Persistent => holds(&self.persistent, path, session),
            WatcherType::PersistentRecursive => holds(&self.recursive, path, session),
        }
    }

    fn reindex(&mut self, path: &str, session: SessionId) {
        if self.contains(path, WatcherType::Any, session) {
            return;
        }
        if let Some(paths) = self.by_session.get_mut(&session) {
            paths.remove(path);
            if paths.is_empty() {
                self.by_session.remove(&session);
            }
        }
    }

    /// Drops every watch of a session (it closed, expired or moved away).
    pub fn remove_session(&mut self, session: SessionId) {
        let Some(paths) = self.by_session.remove(&session) else { return };
        for path in paths {
            remove(&mut self.data, &path, session);
            remove(&mut self.child, &path, session);
            remove(&mut self.persistent, &path, session);
            remove(&mut self.recursive, &path, session);
        }
    }

    /// How many paths `session` watches.
    pub fn paths_of(&self, session: SessionId) -> usize {
        self.by_session.get(&session).map_or(0, FxHashSet::len)
    }

    /// Total number of (path, session, kind) watches.
    pub fn count(&self) -> usize {
        [&self.data, &self.child, &self.persistent, &self.recursive]
            .iter()
            .map(|t| t.values().map(FxHashSet::len).sum::<usize>())
            .sum()
    }

    /// The watched paths of each session (for `wchc`-style reports), sorted.
    pub fn by_session(&self) -> Vec<(SessionId, Vec<String>)> {
        let mut out: Vec<_> = self
            .by_session
            .iter()
            .map(|(s, paths)| {
                let mut paths: Vec<String> = paths.iter().cloned().collect();
                paths.sort();
                (*s, paths)
            })
            .collect();
        out.sort();
        out
    }

    /// Every path a one-shot or persistent watch is left on, sorted.
    pub fn watched_paths(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.data.keys().chain(self.child.keys()).chain(self.persistent.keys()).cloned().collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every path a persistent recursive watch is left on.
    pub fn recursive_paths(&self) -> Vec<String> {
        self.recursive.keys().cloned().collect()
    }

    /// Fires the watches that `triggers` (in order) concern and returns one
    /// event per interested session per trigger. One-shot watches are removed
    /// as they fire; a session hears about one trigger at most once.
    pub fn fire(&mut self, triggers: &[Trigger], zxid: i64) -> Vec<(SessionId, WatchEvent)> {
        let mut events = Vec::new();
        if self.by_session.is_empty() {
            return events;
        }
        for trigger in triggers {
            let mut told: FxHashSet<SessionId> = FxHashSet::default();
            let path = trigger.path.as_str();
            let data_kind = matches!(
                trigger.event_type,
                EventType::NodeCreated | EventType::NodeDeleted | EventType::NodeDataChanged
            );
            let child_kind = matches!(trigger.event_type, EventType::NodeChildrenChanged | EventType::NodeDeleted);
            let mut touched: Vec<SessionId> = Vec::new();
            if data_kind {
                if let Some(set) = self.data.remove(path) {
                    touched.extend(set.iter().copied());
                    told.extend(set);
                }
            }
            if child_kind {
                if let Some(set) = self.child.remove(path) {
                    touched.extend(set.iter().copied());
                    told.extend(set);
                }
            }
            if let Some(set) = self.persistent.get(path) {
                told.extend(set.iter().copied());
            }
            if data_kind && !self.recursive.is_empty() {
                let mut at = path;
                loop {
                    if let Some(set) = self.recursive.get(at) {
                        told.extend(set.iter().copied());
                    }
                    if at == "/" {
                        break;
                    }
                    at = super::path::parent(at);
                }
            }
            for session in touched {
                self.reindex(path, session);
            }
            let mut told: Vec<SessionId> = told.into_iter().collect();
            told.sort();
            for session in told {
                events.push((session, WatchEvent { event_type: trigger.event_type, path: trigger.path.clone(), zxid }));
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: SessionId = SessionId(1);
    const S2: SessionId = SessionId(2);

    fn trig(path: &str, event_type: EventType) -> Trigger {
        Trigger { path: path.into(), event_type }
    }

    fn kinds(events: &[(SessionId, WatchEvent)]) -> Vec<(i64, EventType, String)> {
        events.iter().map(|(s, e)| (s.0, e.event_type, e.path.clone())).collect()
    }

    #[test]
    fn one_shot_data_watch_fires_once() {
        let mut w = WatchManager::default();
        w.add_data("/a", S1);
        let first = w.fire(&[trig("/a", EventType::NodeDataChanged)], 5);
        assert_eq!(kinds(&first), vec![(1, EventType::NodeDataChanged, "/a".into())]);
        assert_eq!(first[0].1.zxid, 5);
        assert!(w.fire(&[trig("/a", EventType::NodeDataChanged)], 6).is_empty());
        assert_eq!(w.count(), 0);
    }

    #[test]
    fn child_watch_ignores_data_changes() {
        let mut w = WatchManager::default();
        w.add_child("/a", S1);
        assert!(w.fire(&[trig("/a", EventType::NodeDataChanged)], 1).is_empty());
        let ev = w.fire(&[trig("/a", EventType::NodeChildrenChanged)], 2);
        assert_eq!(kinds(&ev), vec![(1, EventType::NodeChildrenChanged, "/a".into())]);
    }

    #[test]
    fn delete_tells_a_session_with_data_and_child_watches_once() {
        let mut w = WatchManager::default();
        w.add_data("/a", S1);
        w.add_child("/a", S1);
        w.add_child("/a", S2);
        let ev = w.fire(&[trig("/a", EventType::NodeDeleted)], 1);
        assert_eq!(
            kinds(&ev),
            vec![(1, EventType::NodeDeleted, "/a".into()), (2, EventType::NodeDeleted, "/a".into())]
        );
        assert_eq!(w.count(), 0);
    }

    #[test]
    fn persistent_watch_keeps_firing_including_children_changes() {
        let mut w = WatchManager::default();
        w.add_persistent("/a", AddWatchMode::Persistent, S1);
        for _ in 0..3 {
            assert_eq!(w.fire(&[trig("/a", EventType::NodeDataChanged)], 1).len(), 1);
        }
        assert_eq!(w.fire(&[trig("/a", EventType::NodeChildrenChanged)], 1).len(), 1);
        assert!(w.fire(&[trig("/a/b", EventType::NodeCreated)], 1).is_empty());
    }

    #[test]
    fn recursive_watch_sees_descendants_but_not_child_list_changes() {
        let mut w = WatchManager::default();
        w.add_persistent("/a", AddWatchMode::PersistentRecursive, S1);
        let ev = w.fire(&[trig("/a/b/c", EventType::NodeCreated), trig("/a/b", EventType::NodeChildrenChanged)], 1);
        assert_eq!(kinds(&ev), vec![(1, EventType::NodeCreated, "/a/b/c".into())]);
        assert!(w.fire(&[trig("/ab", EventType::NodeCreated)], 1).is_empty());
    }

    #[test]
    fn remove_and_check_by_type() {
        let mut w = WatchManager::default();
        w.add_data("/a", S1);
        assert!(!w.contains("/a", WatcherType::Children, S1));
        assert!(w.contains("/a", WatcherType::Data, S1));
        assert!(!w.remove("/a", WatcherType::Children, S1));
        assert!(w.remove("/a", WatcherType::Any, S1));
        assert!(!w.remove("/a", WatcherType::Any, S1));
        w.add_persistent("/p", AddWatchMode::PersistentRecursive, S2);
        assert!(!w.remove("/p", WatcherType::Persistent, S2));
        assert!(w.remove("/p", WatcherType::PersistentRecursive, S2));
        assert_eq!(w.count(), 0);
        assert!(w.by_session().is_empty());
    }

    #[test]
    fn session_removal_drops_everything() {
        let mut w = WatchManager::default();
        w.add_data("/a", S1);
        w.add_child("/b", S1);
        w.add_persistent("/c", AddWatchMode::Persistent, S1);
        w.add_data("/a", S2);
        w.remove_session(S1);
        assert_eq!(w.count(), 1);
        let ev = w.fire(&[trig("/a", EventType::NodeDataChanged)], 1);
        assert_eq!(kinds(&ev), vec![(2, EventType::NodeDataChanged, "/a".into())]);
    }
}
