//! Loading a tree into a running ensemble's empty one, through its leader
//! (found through any member): `zkctl admin snapshot load FILE` and `zkctl
//! import --load`. The tree is streamed in chunks; the leader answers once
//! every member applied it and the ensemble writes again.

use super::leader::leader_admin_addr;
use super::show::zxid;
use super::{rpc_error, Dialer};
use crate::output::Printer;
use serde_json::json;
use zabkeeper_client::ClientError;
use zabkeeper_proto::admin as pb;

/// Bytes per streamed message (well under gRPC's 4 MiB default).
const CHUNK_BYTES: usize = 1024 * 1024;

/// Loads `chunks` (a tree snapshot) through the leader behind `server`;
/// `epoch` is the highest epoch of the history it came from.
pub(crate) async fn load(
    server: &str,
    dialer: &Dialer,
    chunks: &[impl AsRef<[u8]>],
    epoch: u32,
    what: &str,
    out: &Printer,
) -> Result<(), ClientError> {
    let leader = leader_admin_addr(server, dialer).await?;
    let mut admin = dialer.connect(&leader).await?;
    let wait_ms = u32::try_from(dialer.timeout.as_millis()).unwrap_or(u32::MAX).max(30_000);
    let bytes: Vec<u8> = chunks.iter().flat_map(|c| c.as_ref().iter().copied()).collect();
    let mut messages: Vec<pb::LoadTreeChunk> =
        bytes.chunks(CHUNK_BYTES).map(|data| pb::LoadTreeChunk { data: data.to_vec(), epoch, wait_ms }).collect();
    if messages.is_empty() {
        messages.push(pb::LoadTreeChunk { data: Vec::new(), epoch, wait_ms });
    }
    let reply = admin.load_tree(futures::stream::iter(messages)).await;
    let r = reply.map_err(|e| rpc_error(&leader, "load tree", e))?.into_inner();
    if out.json {
        out.doc(json!({
            "loaded": what,
            "leader": leader,
            "zxid": zxid(r.zxid),
            "nodes": r.nodes,
            "epoch": r.epoch,
            "took_ms": r.took_ms,
        }));
    } else {
        out.line(&format!(
            "loaded {what} into the ensemble through its leader {leader}: {} nodes at {}, writes go on in epoch {} \
             ({} ms)",
            r.nodes,
            zxid(r.zxid),
            r.epoch,
            r.took_ms
        ));
    }
    Ok(())
}
