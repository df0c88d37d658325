//! Looking inside stored snapshots: finding one, and walking its nodes
//! chunk by chunk (never loaded as a tree), for the admin service and the
//! offline reader alike.

use super::convert;
use bytes::Bytes;
use zabkeeper_core::storage::{SnapshotMeta, Storage, StorageError};
use zabkeeper_core::tree::snapshot::{SnapshotError, Visit, Walker};
use zabkeeper_proto::admin as pb;

/// Why a walk through a snapshot stopped.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// The store failed.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// A chunk is gone (the snapshot was purged while being read).
    #[error("chunk {index} of the snapshot is missing (purged while it was being read?)")]
    Missing {
        /// The chunk.
        index: u32,
    },
    /// The snapshot's bytes do not decode.
    #[error("the snapshot is damaged: {0}")]
    Damaged(#[from] SnapshotError),
}

/// The stored snapshot at `zxid`, or the newest when `zxid` is 0.
pub fn find(storage: &dyn Storage, zxid: u64) -> Result<Option<SnapshotMeta>, StorageError> {
    let all = storage.snapshots()?;
    Ok(if zxid == 0 { all.last().copied() } else { all.into_iter().find(|s| s.zxid.0 == zxid) })
}

/// The chunks of the stored snapshot `meta`, read one at a time.
pub fn stored_chunks<'a>(
    storage: &'a dyn Storage,
    meta: SnapshotMeta,
) -> impl Iterator<Item = Result<Bytes, WalkError>> + 'a {
    (0..meta.chunks).map(move |index| storage.snapshot_chunk(meta.zxid, index)?.ok_or(WalkError::Missing { index }))
}

/// Shows `visit` every node of the snapshot in `chunks` whose path starts
/// with `prefix`, at most `limit` of them, until it returns false.
pub fn nodes(
    chunks: impl Iterator<Item = Result<Bytes, WalkError>>,
    prefix: &str,
    limit: u64,
    visit: &mut dyn FnMut(pb::SnapshotNode) -> bool,
) -> Result<(), WalkError> {
    let mut walker = Walker::new();
    let (mut shown, mut going) = (0u64, true);
    for chunk in chunks {
        walker.feed(&chunk?, &mut |record| {
            if let Visit::Node { path, data, acl, stat } = record {
                if going && shown < limit && path.starts_with(prefix) {
                    shown += 1;
                    going = visit(convert::snapshot_node(path, data.len(), &acl, &stat));
                }
            }
        })?;
        if !going || shown >= limit {
            return Ok(());
        }
    }
    Ok(walker.finish()?)
}

/// A snapshot's listing entry.
pub fn info(s: &SnapshotMeta) -> pb::SnapshotInfo {
    pb::SnapshotInfo {
        zxid: s.zxid.0,
        size_bytes: s.bytes,
        node_count: s.nodes,
        created_ms: s.created_ms,
        chunks: s.chunks,
    }
}
