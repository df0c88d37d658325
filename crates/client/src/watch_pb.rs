//! Watches in the session stream's protobuf: the SetWatches requests that
//! replay a session's watches after a reconnect, and the events the server sends.

use super::watcher::WatchLists;
use crate::proto::client as pb;
use crate::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};

/// Largest total path length in one SetWatches request (ZooKeeper's
/// `SET_WATCHES_MAX_LENGTH`); more watches go in several requests.
pub(crate) const SET_WATCHES_MAX_BYTES: usize = 128 * 1024;

/// Picks one list of a SetWatches request.
type Field = fn(&mut pb::SetWatchesRequest) -> &mut Vec<String>;

/// Splits the watches to replay into SetWatches requests of at most `max_bytes` of paths each.
pub(crate) fn set_watches_requests(
    lists: WatchLists,
    relative_zxid: i64,
    max_bytes: usize,
) -> Vec<pb::SetWatchesRequest> {
    let empty = || pb::SetWatchesRequest { relative_zxid, ..Default::default() };
    let mut out = Vec::new();
    let mut current = empty();
    let mut bytes = 0usize;
    let kinds: [(Vec<String>, Field); 5] = [
        (lists.data, |r| &mut r.data_watches),
        (lists.exist, |r| &mut r.exist_watches),
        (lists.child, |r| &mut r.child_watches),
        (lists.persistent, |r| &mut r.persistent_watches),
        (lists.recursive, |r| &mut r.persistent_recursive_watches),
    ];
    for (paths, field) in kinds {
        for path in paths {
            if bytes > 0 && bytes + path.len() > max_bytes {
                out.push(std::mem::replace(&mut current, empty()));
                bytes = 0;
            }
            bytes += path.len();
            field(&mut current).push(path);
        }
    }
    if bytes > 0 {
        out.push(current);
    }
    out
}

/// The event a server message carries, in domain form (`None` for an unknown type).
pub(super) fn event_from_pb(e: pb::WatchEvent) -> Option<WatchEvent> {
    // The protobuf enum numbers "None" 0; ZooKeeper numbers it -1.
    let event_type =
        if e.r#type == pb::EventType::None as i32 { EventType::None } else { EventType::from_code(e.r#type)? };
    Some(WatchEvent { event_type, path: e.path, zxid: e.zxid })
}

pub(super) fn watcher_type_for(mode: AddWatchMode) -> WatcherType {
    match mode {
        AddWatchMode::Persistent => WatcherType::Persistent,
        AddWatchMode::PersistentRecursive => WatcherType::PersistentRecursive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lists(data: &[&str], persistent: &[&str]) -> WatchLists {
        WatchLists {
            data: data.iter().map(|s| s.to_string()).collect(),
            persistent: persistent.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn set_watches_are_split_by_path_bytes_and_keep_their_kinds() {
        let reqs = set_watches_requests(lists(&["/aaaa", "/bbbb", "/cccc"], &["/pppp"]), 42, 10);
        assert_eq!(reqs.len(), 2);
        assert!(reqs.iter().all(|r| r.relative_zxid == 42));
        assert_eq!(reqs[0].data_watches, vec!["/aaaa", "/bbbb"]);
        assert_eq!(reqs[1].data_watches, vec!["/cccc"]);
        assert_eq!(reqs[1].persistent_watches, vec!["/pppp"]);
        assert!(set_watches_requests(WatchLists::default(), 1, 10).is_empty());
    }

    #[test]
    fn a_path_longer_than_the_limit_still_travels_alone() {
        let reqs = set_watches_requests(lists(&["/a-very-long-path"], &["/b"]), 0, 4);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].data_watches, vec!["/a-very-long-path"]);
    }

    #[test]
    fn event_types_map_from_protobuf_numbers() {
        let e = event_from_pb(pb::WatchEvent { r#type: 0, path: "/".into(), zxid: -1 }).unwrap();
        assert_eq!(e.event_type, EventType::None);
        let e = event_from_pb(pb::WatchEvent { r#type: 4, path: "/p".into(), zxid: 7 }).unwrap();
        assert_eq!((e.event_type, e.zxid), (EventType::NodeChildrenChanged, 7));
        assert!(event_from_pb(pb::WatchEvent { r#type: 99, path: "/".into(), zxid: 0 }).is_none());
    }
}
