//! The snapshot format's tests: round trips, each way a stream can be torn,
//! corrupt or inconsistent, and streams written by earlier versions.

use super::*;
use crate::data::Data;
use crate::tree::stat::CreateMode;
use crate::tree::{DataTree, TreeState};
use crate::txn::{Txn, TxnBody};

fn sample_tree() -> DataTree {
    let mut tree = DataTree::new();
    let s = SessionId(0x0100_0000_0000_0007);
    let mut z = 0;
    let mut apply = |tree: &mut DataTree, body: TxnBody| {
        z += 1;
        tree.apply(Zxid::new(1, z), &Txn { session: s, cxid: z as i32, time_ms: 5, body });
    };
    apply(&mut tree, TxnBody::CreateSession { timeout_ms: 4000, password: Bytes::from_static(&[7; 16]) });
    for i in 0..50 {
        let owner = if i % 5 == 0 { s.0 } else { 0 };
        apply(
            &mut tree,
            TxnBody::Create {
                path: format!("/n{i}"),
                // Every seventh node from /n3 on holds null data; /n0 holds 0 bytes.
                data: if i % 7 == 3 { Data::NULL } else { Bytes::from(vec![i as u8; i]).into() },
                acl: if i % 2 == 0 { Acl::open_unsafe() } else { Acl::read_unsafe() },
                ephemeral_owner: owner,
                parent_cversion: i as i32 + 1,
            },
        );
    }
    let _ = CreateMode::Persistent;
    tree
}

#[test]
fn round_trips_through_small_chunks() {
    let tree = sample_tree();
    let (chunks, info) = to_chunks(tree.state(), 64);
    assert!(chunks.len() > 10);
    assert_eq!(info.nodes as usize, tree.state().node_count());
    let loaded = from_chunks(chunks.iter().map(|c| c.as_ref())).unwrap();
    assert_eq!(loaded.digest(), tree.state().digest());
    assert_eq!(loaded.last_zxid(), tree.state().last_zxid());
    assert_eq!(loaded.ephemerals_of(SessionId(0x0100_0000_0000_0007)).len(), 10);
    let null = |path| loaded.node(path).map(|n| n.data_is_null());
    assert_eq!(
        (null("/n3"), null("/n10"), null("/n0"), null("/n4")),
        (Some(true), Some(true), Some(false), Some(false))
    );
}

#[test]
fn truncation_is_reported() {
    let (chunks, _) = to_chunks(sample_tree().state(), 1 << 20);
    let bytes = &chunks[0];
    let err = from_chunks([&bytes[..bytes.len() - 10]]).unwrap_err();
    assert!(matches!(err, SnapshotError::Truncated { .. }), "{err}");
}

#[test]
fn corruption_is_reported() {
    let (chunks, _) = to_chunks(sample_tree().state(), 1 << 20);
    let mut bytes = chunks[0].to_vec();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let err = from_chunks([bytes.as_slice()]).unwrap_err();
    assert!(
        matches!(
            err,
            SnapshotError::Corrupt { .. } | SnapshotError::Inconsistent { .. } | SnapshotError::Truncated { .. }
        ),
        "{err}"
    );
}

/// A snapshot stream of these nodes in this order, framed as `Chunks` frames it.
fn stream_of(paths: &[&str]) -> Vec<u8> {
    let state = TreeState::empty();
    let mut chunks = Chunks::new(&state, 1 << 20);
    chunks.push(&RecordRef::Header { format: FORMAT, zxid: Zxid::new(1, 9) });
    chunks.push(&RecordRef::Acl { id: 0, acl: &Acl::open_unsafe() });
    let stat = StatPersisted::created(1, 5, 0);
    for path in paths {
        chunks.push(&RecordRef::Node { path, data: b"d", acl: 0, stat: &stat });
    }
    chunks.push(&RecordRef::Footer { nodes: paths.len() as u64, sessions: 0 });
    chunks.buffer
}

#[test]
fn a_snapshot_of_an_unknown_format_is_refused_naming_both_formats() {
    let state = TreeState::empty();
    let mut chunks = Chunks::new(&state, 1 << 20);
    chunks.push(&RecordRef::Header { format: FORMAT + 1, zxid: Zxid::new(1, 9) });
    let err = from_chunks([chunks.buffer.as_slice()]).unwrap_err();
    let expected = format!("unknown snapshot format {}, this build reads format {FORMAT}", FORMAT + 1);
    assert!(err.to_string().contains(&expected), "{err}");
}

#[test]
fn a_pre_order_snapshot_of_earlier_versions_loads() {
    // Pre-order puts /a/b before /b; the table order puts it after.
    let loaded = from_chunks([stream_of(&["/", "/a", "/a/b", "/b"]).as_slice()]).expect("loads");
    assert_eq!(loaded.node_count(), 4);
    assert_eq!(loaded.node("/").map(|n| n.num_children()), Some(2));
    assert_eq!(loaded.node("/a").map(|n| n.num_children()), Some(1));
    assert_eq!(loaded.children("/a").collect::<Vec<_>>(), ["/a/b"]);
}

#[test]
fn a_duplicate_or_an_orphan_is_inconsistent_in_any_order() {
    for paths in [&["/", "/a", "/b", "/a"][..], &["/", "/a", "/a/b", "/a"], &["/", "/a", "/a"]] {
        let err = from_chunks([stream_of(paths).as_slice()]).unwrap_err();
        assert!(
            matches!(&err, SnapshotError::Inconsistent { reason, .. } if reason.contains("appears twice")),
            "{paths:?}: {err}"
        );
    }
    let err = from_chunks([stream_of(&["/", "/a/b"]).as_slice()]).unwrap_err();
    assert!(matches!(&err, SnapshotError::Inconsistent { reason, .. } if reason.contains("no parent")), "{err}");
}

#[test]
fn the_footer_is_read_from_the_last_chunk_alone() {
    let tree = sample_tree();
    for size in [64, 1 << 20] {
        let (chunks, info) = to_chunks(tree.state(), size);
        let last = chunks.last().expect("chunks");
        assert_eq!(footer_counts(last), Some((info.nodes, info.sessions)), "chunks of {size}");
        assert_eq!(footer_counts(&last[..last.len() - 1]), None);
    }
    assert_eq!(footer_counts(b""), None);
}

#[test]
fn a_walker_shows_every_record_and_checks_the_end() {
    let tree = sample_tree();
    let (chunks, _) = to_chunks(tree.state(), 100);
    let mut walker = Walker::new();
    let mut seen = Vec::new();
    for chunk in &chunks {
        walker.feed(chunk, &mut |v| seen.push(v)).expect("walks");
    }
    walker.finish().expect("complete");
    assert_eq!(seen.first(), Some(&Visit::Header { zxid: tree.last_zxid() }));
    let nodes = tree.state().node_count() as u64;
    assert_eq!(seen.last(), Some(&Visit::Footer { nodes, sessions: 1 }));
    let paths: Vec<&str> = seen
        .iter()
        .filter_map(|v| match v {
            Visit::Node { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(paths.len(), tree.state().node_count());
    let n7 = seen.iter().find_map(|v| match v {
        Visit::Node { path, data, stat, .. } if path == "/n7" => Some((data.len(), stat.czxid)),
        _ => None,
    });
    assert_eq!(n7, Some((7, Zxid::new(1, 9).0 as i64)));
    let mut cut = Walker::new();
    cut.feed(&chunks[0], &mut |_| {}).expect("first chunk");
    assert!(matches!(cut.finish(), Err(SnapshotError::Truncated { .. })));
}

#[test]
fn empty_input_is_truncated() {
    assert_eq!(from_chunks(std::iter::empty()).unwrap_err(), SnapshotError::Truncated { records: 0 });
}
