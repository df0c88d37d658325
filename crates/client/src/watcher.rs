//! Client-side watches: the futures and streams an application holds, and the
//! registry the background task uses to route server events to them (the
//! counterpart of ZooKeeper's `ZKWatchManager`).
//!
//! One-shot watches are registered when their read's answer arrives (so an
//! event delivered before that answer never reaches them), kept per kind
//! because SetWatches replays each kind with its own rule, and forgotten once
//! they fire. Persistent watches stay until removed; each holds a bounded
//! queue, and one whose application stops reading is cut off (it ends with
//! [`WatchedEvent::Overflowed`]) rather than stalling the connection.

use super::control::Control;
use super::error::ClientError;
use super::state::ConnectionState;
use crate::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};
use futures::Stream;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};

/// What a watcher is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchedEvent {
    /// Something happened to a watched node (or the watch was removed:
    /// `DataWatchRemoved`, `ChildWatchRemoved`, `PersistentWatchRemoved`).
    Node(WatchEvent),
    /// The session's state. One-shot watchers only hear terminal states
    /// (`Expired`, `Closed`: the watch will never fire); persistent watchers
    /// also hear `Disconnected` and `Connected` (events may have been missed
    /// in between: ZooKeeper does not replay them).
    State(ConnectionState),
    /// A persistent watcher's queue filled up because it was not read; it was
    /// removed and its stream ends after this.
    Overflowed,
}

impl WatchedEvent {
    /// The node event, if this is one.
    pub fn node_event(&self) -> Option<&WatchEvent> {
        match self {
            WatchedEvent::Node(e) => Some(e),
            _ => None,
        }
    }
}

fn local_event(event_type: EventType, path: &str) -> WatchedEvent {
    WatchedEvent::Node(WatchEvent { event_type, path: path.to_string(), zxid: -1 })
}

/// A one-shot watch: resolves to the first event on its node, or to a terminal
/// session state (`Expired`, `Closed`) if it can never fire.
#[must_use = "a watcher does nothing unless awaited"]
pub struct OneshotWatcher {
    rx: oneshot::Receiver<WatchedEvent>,
}

impl OneshotWatcher {
    pub(crate) fn new() -> (oneshot::Sender<WatchedEvent>, OneshotWatcher) {
        let (tx, rx) = oneshot::channel();
        (tx, OneshotWatcher { rx })
    }

    /// The event if it already arrived, without waiting.
    pub fn try_event(&mut self) -> Option<WatchedEvent> {
        match self.rx.try_recv() {
            Ok(e) => Some(e),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(WatchedEvent::State(ConnectionState::Closed)),
        }
    }
}

impl Future for OneshotWatcher {
    type Output = WatchedEvent;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WatchedEvent> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(event)) => Poll::Ready(event),
            // The background task is gone without telling: the client is over.
            Poll::Ready(Err(_)) => Poll::Ready(WatchedEvent::State(ConnectionState::Closed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The registry's end of a persistent watcher.
pub(crate) struct Sink {
    id: u64,
    tx: mpsc::Sender<WatchedEvent>,
    overflowed: Arc<AtomicBool>,
}

/// A persistent (or persistent recursive) watch: a stream of events until it
/// is removed, the session ends, or it overflows. Dropping it removes the
/// watch from the server once no other watcher of the client needs it.
pub struct PersistentWatcher {
    path: String,
    mode: AddWatchMode,
    id: u64,
    rx: mpsc::Receiver<WatchedEvent>,
    overflowed: Arc<AtomicBool>,
    control: mpsc::UnboundedSender<Control>,
    detached: bool,
}

impl PersistentWatcher {
    /// A watcher and the registry's end of it; `capacity` bounds its queue.
    pub(crate) fn new(
        path: &str,
        mode: AddWatchMode,
        id: u64,
        capacity: usize,
        control: mpsc::UnboundedSender<Control>,
    ) -> (Sink, PersistentWatcher) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let overflowed = Arc::new(AtomicBool::new(false));
        let sink = Sink { id, tx, overflowed: overflowed.clone() };
        (sink, PersistentWatcher { path: path.to_string(), mode, id, rx, overflowed, control, detached: false })
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Persistent or persistent recursive.
    pub fn mode(&self) -> AddWatchMode {
        self.mode
    }

    /// The next event; `None` once the watch is removed or the session is over.
    pub async fn next_event(&mut self) -> Option<WatchedEvent> {
        futures::StreamExt::next(self).await
    }

    /// Removes the watch and waits until the server has dropped it too (when
    /// no other watcher of this client needs it).
    pub async fn remove(mut self) -> Result<(), ClientError> {
        self.detached = true;
        let (reply, rx) = oneshot::channel();
        let msg = Control::DropPersistent { mode: self.mode, path: self.path.clone(), id: self.id, reply: Some(reply) };
        // A closed channel means the client is over, and with it the watch.
        if self.control.send(msg).is_err() {
            return Ok(());
        }
        rx.await.unwrap_or(Ok(()))
    }
}

impl Stream for PersistentWatcher {
    type Item = WatchedEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchedEvent>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => Poll::Ready(Some(event)),
            Poll::Ready(None) if self.overflowed.swap(false, Ordering::AcqRel) => {
                Poll::Ready(Some(WatchedEvent::Overflowed))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for PersistentWatcher {
    fn drop(&mut self) {
        if !self.detached {
            let msg = Control::DropPersistent {
                mode: self.mode,
                path: std::mem::take(&mut self.path),
                id: self.id,
                reply: None,
            };
            // The task may be gone already; then so is the watch.
            let _ = self.control.send(msg);
        }
    }
}

/// Which one-shot table a watch belongs to (SetWatches replays each differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OneshotKind {
    /// getData, or exists on a node that exists.
    Data,
    /// exists on a node that does not exist.
    Exist,
    /// getChildren.
    Child,
}

/// The watches to replay after a reconnect, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WatchLists {
    pub data: Vec<String>,
    pub exist: Vec<String>,
    pub child: Vec<String>,
    pub persistent: Vec<String>,
    pub recursive: Vec<String>,
}

impl WatchLists {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }
}

/// A persistent watch whose last local watcher went away: the server must be told.
pub(crate) type Orphan = (AddWatchMode, String);

/// Every watch of the session, as the client sees it.
#[derive(Default)]
pub(crate) struct WatchRegistry {
    data: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    exist: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    child: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    persistent: HashMap<String, Vec<Sink>>,
    recursive: HashMap<String, Vec<Sink>>,
}

type OneshotTable = HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>;

fn fire_oneshots(table: &mut OneshotTable, path: &str, event: &WatchedEvent) {
    for tx in table.remove(path).unwrap_or_default() {
        // The application may have dropped its watcher: nothing to tell.
        let _ = tx.send(event.clone());
    }
}

/// Sends to every sink of `path`; drops those that are gone or full. Returns
/// whether the path lost its last sink that way.
fn feed(table: &mut HashMap<String, Vec<Sink>>, path: &str, event: &WatchedEvent) -> bool {
    let Some(sinks) = table.get_mut(path) else { return false };
    sinks.retain(|sink| match sink.tx.try_send(event.clone()) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            sink.overflowed.store(true, Ordering::Release);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    });
    if sinks.is_empty() {
        table.remove(path);
        return true;
    }
    false
}

/// `path` and each of its ancestors up to the root.
fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let current = next?;
        next = match current.rfind('/') {
            _ if current == "/" || current.is_empty() => None,
            Some(0) => Some("/"),
            Some(i) => Some(&current[..i]),
            None => None,
        };
        Some(current)
    })
}

impl WatchRegistry {
    fn oneshot_table(&mut self, kind: OneshotKind) -> &mut OneshotTable {
        match kind {
            OneshotKind::Data => &mut self.data,
            OneshotKind::Exist => &mut self.exist,
            OneshotKind::Child => &mut self.child,
        }
    }

    fn persistent_table(&mut self, mode: AddWatchMode) -> &mut HashMap<String, Vec<Sink>> {
        match mode {
            AddWatchMode::Persistent => &mut self.persistent,
            AddWatchMode::PersistentRecursive => &mut self.recursive,
        }
    }

    /// Registers a one-shot watcher (its read was answered).
    pub(crate) fn add_oneshot(&mut self, kind: OneshotKind, path: &str, tx: oneshot::Sender<WatchedEvent>) {
        let list = self.oneshot_table(kind).entry(path.to_string()).or_default();
        // Forget watchers the application dropped, so a path watched in a loop stays small.
        list.retain(|tx| !tx.is_closed());
        list.push(tx);
    }

    /// Registers a persistent watcher.
    pub(crate) fn add_persistent(&mut self, mode: AddWatchMode, path: &str, sink: Sink) {
        self.persistent_table(mode).entry(path.to_string()).or_default().push(sink);
    }

    /// Forgets one persistent watcher. True when it was found and was the
    /// path's last of that mode, so the server's watch must be removed.
    pub(crate) fn remove_persistent(&mut self, mode: AddWatchMode, path: &str, id: u64) -> bool {
        let table = self.persistent_table(mode);
        let Some(sinks) = table.get_mut(path) else { return false };
        let before = sinks.len();
        sinks.retain(|s| s.id != id);
        let found = sinks.len() != before;
        if sinks.is_empty() {
            table.remove(path);
            return found;
        }
        false
    }

    /// Routes a server event to the watchers it concerns (ZooKeeper's
    /// `materialize`). Returns persistent watches left without a watcher.
    pub(crate) fn dispatch(&mut self, event: &WatchEvent) -> Vec<Orphan> {
        let path = event.path.as_str();
        let notice = WatchedEvent::Node(event.clone());
        match event.event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                fire_oneshots(&mut self.data, path, &notice);
                fire_oneshots(&mut self.exist, path, &notice);
            }
            EventType::NodeDeleted => {
                fire_oneshots(&mut self.data, path, &notice);
                fire_oneshots(&mut self.exist, path, &notice);
                fire_oneshots(&mut self.child, path, &notice);
            }
            EventType::NodeChildrenChanged => fire_oneshots(&mut self.child, path, &notice),
            // The server never sends these; nothing is registered for them.
            EventType::None
            | EventType::DataWatchRemoved
            | EventType::ChildWatchRemoved
            | EventType::PersistentWatchRemoved => return Vec::new(),
        }
        let mut orphans = Vec::new();
        if feed(&mut self.persistent, path, &notice) {
            orphans.push((AddWatchMode::Persistent, path.to_string()));
        }
        // Recursive watches see every node event below them, but not child-list changes.
        if event.event_type != EventType::NodeChildrenChanged && !self.recursive.is_empty() {
            for at in self_and_ancestors(path) {
                if feed(&mut self.recursive, at, &notice) {
                    orphans.push((AddWatchMode::PersistentRecursive, at.to_string()));
                }
            }
        }
        orphans
    }

    /// The server removed the watches of `kind` on `path`: tell and forget the local ones.
    pub(crate) fn removed(&mut self, path: &str, kind: WatcherType) {
        let data_removed = local_event(EventType::DataWatchRemoved, path);
        let child_removed = local_event(EventType::ChildWatchRemoved, path);
        let persistent_removed = local_event(EventType::PersistentWatchRemoved, path);
        let (data, child, persistent, recursive) = match kind {
            WatcherType::Data => (true, false, false, false),
            WatcherType::Children => (false, true, false, false),
            WatcherType::Persistent => (false, false, true, false),
            WatcherType::PersistentRecursive => (false, false, false, true),
            WatcherType::Any => (true, true, true, true),
        };
        if data {
            fire_oneshots(&mut self.data, path, &data_removed);
            fire_oneshots(&mut self.exist, path, &data_removed);
        }
        if child {
            fire_oneshots(&mut self.child, path, &child_removed);
        }
        for (wanted, table) in [(persistent, &mut self.persistent), (recursive, &mut self.recursive)] {
            if wanted {
                for sink in table.remove(path).unwrap_or_default() {
                    let _ = sink.tx.try_send(persistent_removed.clone());
                }
            }
        }
    }

    /// Tells persistent watchers about a connection change (`Disconnected`, `Connected`).
    /// Returns persistent watches left without a watcher.
    pub(crate) fn connection_changed(&mut self, state: ConnectionState) -> Vec<Orphan> {
        let notice = WatchedEvent::State(state);
        let mut orphans = Vec::new();
        for mode in [AddWatchMode::Persistent, AddWatchMode::PersistentRecursive] {
            let paths: Vec<String> = self.persistent_table(mode).keys().cloned().collect();
            for path in paths {
                if feed(self.persistent_table(mode), &path, &notice) {
                    orphans.push((mode, path));
                }
            }
        }
        orphans
    }

    /// The session is over: every watcher hears `state` and is forgotten.
    pub(crate) fn terminate(&mut self, state: ConnectionState) {
        let notice = WatchedEvent::State(state);
        for table in [&mut self.data, &mut self.exist, &mut self.child] {
            for (_, txs) in table.drain() {
                for tx in txs {
                    let _ = tx.send(notice.clone());
                }
            }
        }
        for table in [&mut self.persistent, &mut self.recursive] {
            for (_, sinks) in table.drain() {
                for sink in sinks {
                    let _ = sink.tx.try_send(notice.clone());
                }
            }
        }
    }

    /// The watches to re-register after a reconnect (dropped one-shot
    /// watchers are forgotten first, so they cost the server nothing).
    pub(crate) fn lists(&mut self) -> WatchLists {
        fn live(table: &mut OneshotTable) -> Vec<String> {
            table.retain(|_, txs| {
                txs.retain(|tx| !tx.is_closed());
                !txs.is_empty()
            });
            let mut paths: Vec<String> = table.keys().cloned().collect();
            paths.sort();
            paths
        }
        fn keys(table: &HashMap<String, Vec<Sink>>) -> Vec<String> {
            let mut paths: Vec<String> = table.keys().cloned().collect();
            paths.sort();
            paths
        }
        WatchLists {
            data: live(&mut self.data),
            exist: live(&mut self.exist),
            child: live(&mut self.child),
            persistent: keys(&self.persistent),
            recursive: keys(&self.recursive),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn ev(event_type: EventType, path: &str) -> WatchEvent {
        WatchEvent { event_type, path: path.into(), zxid: 9 }
    }

    fn control() -> (mpsc::UnboundedSender<Control>, mpsc::UnboundedReceiver<Control>) {
        mpsc::unbounded_channel()
    }

    #[test]
    fn ancestors_walk_up_to_the_root() {
        assert_eq!(self_and_ancestors("/a/b/c").collect::<Vec<_>>(), vec!["/a/b/c", "/a/b", "/a", "/"]);
        assert_eq!(self_and_ancestors("/").collect::<Vec<_>>(), vec!["/"]);
        assert_eq!(self_and_ancestors("odd").collect::<Vec<_>>(), vec!["odd"]);
        assert_eq!(self_and_ancestors("").collect::<Vec<_>>(), vec![""]);
    }

    #[tokio::test]
    async fn oneshot_watches_fire_once_by_kind() {
        let mut reg = WatchRegistry::default();
        let (data_tx, data) = OneshotWatcher::new();
        let (exist_tx, exist) = OneshotWatcher::new();
        let (child_tx, mut child) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Data, "/a", data_tx);
        reg.add_oneshot(OneshotKind::Exist, "/a", exist_tx);
        reg.add_oneshot(OneshotKind::Child, "/a", child_tx);
        reg.dispatch(&ev(EventType::NodeDataChanged, "/a"));
        assert_eq!(data.await, WatchedEvent::Node(ev(EventType::NodeDataChanged, "/a")));
        assert_eq!(exist.await, WatchedEvent::Node(ev(EventType::NodeDataChanged, "/a")));
        assert_eq!(child.try_event(), None, "a data change does not fire a child watch");
        reg.dispatch(&ev(EventType::NodeDeleted, "/a"));
        assert_eq!(child.await, WatchedEvent::Node(ev(EventType::NodeDeleted, "/a")));
        assert!(reg.lists().is_empty(), "fired watches are forgotten");
    }

    #[tokio::test]
    async fn persistent_watchers_get_every_event_and_recursive_ones_skip_child_lists() {
        let mut reg = WatchRegistry::default();
        let (ctl, _ctl_rx) = control();
        let (sink, mut plain) = PersistentWatcher::new("/a", AddWatchMode::Persistent, 1, 16, ctl.clone());
        reg.add_persistent(AddWatchMode::Persistent, "/a", sink);
        let (sink, mut deep) = PersistentWatcher::new("/a", AddWatchMode::PersistentRecursive, 2, 16, ctl);
        reg.add_persistent(AddWatchMode::PersistentRecursive, "/a", sink);
        for e in [
            ev(EventType::NodeDataChanged, "/a"),
            ev(EventType::NodeChildrenChanged, "/a"),
            ev(EventType::NodeCreated, "/a/b/c"),
            ev(EventType::NodeCreated, "/ab"),
        ] {
            assert!(reg.dispatch(&e).is_empty());
        }
        assert_eq!(plain.next().await, Some(WatchedEvent::Node(ev(EventType::NodeDataChanged, "/a"))));
        assert_eq!(plain.next().await, Some(WatchedEvent::Node(ev(EventType::NodeChildrenChanged, "/a"))));
        assert_eq!(deep.next().await, Some(WatchedEvent::Node(ev(EventType::NodeDataChanged, "/a"))));
        assert_eq!(deep.next().await, Some(WatchedEvent::Node(ev(EventType::NodeCreated, "/a/b/c"))));
        reg.terminate(ConnectionState::Expired);
        assert_eq!(plain.next().await, Some(WatchedEvent::State(ConnectionState::Expired)));
        assert_eq!(plain.next().await, None);
        assert_eq!(deep.next().await, Some(WatchedEvent::State(ConnectionState::Expired)));
    }

    #[tokio::test]
    async fn a_full_persistent_watcher_is_cut_off_and_reported_as_an_orphan() {
        let mut reg = WatchRegistry::default();
        let (ctl, _ctl_rx) = control();
        let (sink, mut w) = PersistentWatcher::new("/a", AddWatchMode::Persistent, 1, 2, ctl);
        reg.add_persistent(AddWatchMode::Persistent, "/a", sink);
        assert!(reg.dispatch(&ev(EventType::NodeDataChanged, "/a")).is_empty());
        assert!(reg.dispatch(&ev(EventType::NodeDataChanged, "/a")).is_empty());
        let orphans = reg.dispatch(&ev(EventType::NodeDataChanged, "/a"));
        assert_eq!(orphans, vec![(AddWatchMode::Persistent, "/a".to_string())]);
        assert!(w.next().await.is_some());
        assert!(w.next().await.is_some());
        assert_eq!(w.next().await, Some(WatchedEvent::Overflowed));
        assert_eq!(w.next().await, None);
    }

    #[test]
    fn removing_the_last_persistent_watcher_of_a_path_needs_the_server() {
        let mut reg = WatchRegistry::default();
        let (ctl, _ctl_rx) = control();
        let (s1, _w1) = PersistentWatcher::new("/a", AddWatchMode::Persistent, 1, 4, ctl.clone());
        let (s2, _w2) = PersistentWatcher::new("/a", AddWatchMode::Persistent, 2, 4, ctl);
        reg.add_persistent(AddWatchMode::Persistent, "/a", s1);
        reg.add_persistent(AddWatchMode::Persistent, "/a", s2);
        assert!(!reg.remove_persistent(AddWatchMode::Persistent, "/a", 1));
        assert!(!reg.remove_persistent(AddWatchMode::PersistentRecursive, "/a", 2), "wrong mode: not found");
        assert!(reg.remove_persistent(AddWatchMode::Persistent, "/a", 2));
        assert!(!reg.remove_persistent(AddWatchMode::Persistent, "/a", 2), "already gone");
    }

    #[tokio::test]
    async fn dropping_a_persistent_watcher_tells_the_task() {
        let (ctl, mut ctl_rx) = control();
        let (_sink, w) = PersistentWatcher::new("/a", AddWatchMode::PersistentRecursive, 5, 4, ctl);
        drop(w);
        match ctl_rx.recv().await {
            Some(Control::DropPersistent { mode, path, id, reply }) => {
                assert_eq!((mode, path.as_str(), id), (AddWatchMode::PersistentRecursive, "/a", 5));
                assert!(reply.is_none());
            }
            _ => panic!("expected DropPersistent"),
        }
    }

    #[tokio::test]
    async fn remove_watches_tells_local_watchers_with_removal_events() {
        let mut reg = WatchRegistry::default();
        let (tx, data) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Data, "/a", tx);
        let (tx, mut child) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Child, "/a", tx);
        reg.removed("/a", WatcherType::Data);
        assert_eq!(data.await.node_event().map(|e| e.event_type), Some(EventType::DataWatchRemoved));
        assert_eq!(child.try_event(), None);
        reg.removed("/a", WatcherType::Any);
        assert_eq!(child.await.node_event().map(|e| e.event_type), Some(EventType::ChildWatchRemoved));
    }

    #[test]
    fn replay_lists_skip_dropped_watchers_and_keep_kinds_apart() {
        let mut reg = WatchRegistry::default();
        let (ctl, _ctl_rx) = control();
        let (tx, _kept) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Data, "/d", tx);
        let (tx, dropped) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Child, "/gone", tx);
        drop(dropped);
        let (tx, _e) = OneshotWatcher::new();
        reg.add_oneshot(OneshotKind::Exist, "/e", tx);
        let (sink, _p) = PersistentWatcher::new("/p", AddWatchMode::Persistent, 1, 4, ctl.clone());
        reg.add_persistent(AddWatchMode::Persistent, "/p", sink);
        let (sink, _r) = PersistentWatcher::new("/r", AddWatchMode::PersistentRecursive, 2, 4, ctl);
        reg.add_persistent(AddWatchMode::PersistentRecursive, "/r", sink);
        let lists = reg.lists();
        assert_eq!(lists.data, vec!["/d"]);
        assert_eq!(lists.exist, vec!["/e"]);
        assert!(lists.child.is_empty());
        assert_eq!(lists.persistent, vec!["/p"]);
        assert_eq!(lists.recursive, vec!["/r"]);
    }
}
