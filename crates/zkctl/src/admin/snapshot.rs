//! `zkctl admin snapshot`: take one, save it to a file, look inside one (on
//! a member, in a data directory or in a saved file), restore a member from one.

use super::show::{self as show, table, zxid};
use super::{offline_error, parse_u64, rpc_error, Dialer};
use crate::output::{Exit, Printer};
use serde_json::json;
use std::path::PathBuf;
use zabkeeper_client::ClientError;
use zabkeeper_datadir::{offline, snapshots};
use zabkeeper_proto::admin as pb;

/// `zkctl admin snapshot …`.
#[derive(clap::Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Take a snapshot now; prints its zxid, size and node count once durable.
    Take,
    /// Write a stored snapshot to a file (as `etcdctl snapshot save`).
    Save {
        /// The file to write.
        file: PathBuf,
        /// The snapshot (default: the newest).
        #[arg(long)]
        zxid: Option<String>,
    },
    /// List the nodes of a snapshot: on a server, in a data directory, or in a saved file.
    Inspect {
        /// The snapshot (default: the newest).
        #[arg(long)]
        zxid: Option<String>,
        /// Only nodes under this prefix.
        #[arg(long)]
        path: Option<String>,
        /// At most this many nodes.
        #[arg(long)]
        limit: Option<u64>,
        /// Read a stopped member's data directory instead of asking a server.
        #[arg(long, conflicts_with = "file")]
        data_dir: Option<PathBuf>,
        /// Read a file written by `snapshot save`.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Load a saved snapshot into a running ensemble whose tree is empty,
    /// through its leader: every node with its Stat, and its sessions. The
    /// ensemble then writes in an epoch above the snapshot's history.
    Load {
        /// A file written by `snapshot save` (or fetched from the AdminServer's `snapshot`).
        file: PathBuf,
    },
    /// Make a fresh data directory from a saved snapshot (the member then
    /// joins and catches up from the leader).
    Restore {
        /// A file written by `snapshot save`.
        file: PathBuf,
        /// The member's data directory to create (must be empty or absent).
        #[arg(long)]
        data_dir: PathBuf,
    },
}

pub async fn snapshot_command(
    server: &str,
    dialer: &Dialer,
    command: SnapshotCommand,
    out: &Printer,
) -> Result<Exit, ClientError> {
    match command {
        SnapshotCommand::Take => {
            let mut admin = dialer.connect(server).await?;
            let reply = admin.take_snapshot(pb::TakeSnapshotRequest {}).await;
            let r = reply.map_err(|e| rpc_error(server, "take snapshot", e))?.into_inner();
            if out.json {
                out.doc(json!({ "snapshot_zxid": zxid(r.zxid), "bytes": r.size_bytes, "nodes": r.node_count }));
            } else {
                out.line(&format!("snapshot at {} ({} bytes, {} nodes)", zxid(r.zxid), r.size_bytes, r.node_count));
            }
        }
        SnapshotCommand::Save { file, zxid: at } => {
            let at = at.as_deref().map(|t| parse_u64("--zxid", t)).transpose()?.unwrap_or(0);
            let mut admin = dialer.connect(server).await?;
            let reply = admin.save_snapshot(pb::SaveSnapshotRequest { zxid: at }).await;
            let mut stream = reply.map_err(|e| rpc_error(server, "save snapshot", e))?.into_inner();
            // Written beside the target and renamed at the end: a cut-short
            // download never looks like a snapshot.
            let partial = file.with_extension("partial");
            let io = |e: std::io::Error| ClientError::InvalidArgument(format!("{}: {e}", partial.display()));
            let mut f = std::fs::File::create(&partial).map_err(io)?;
            let (mut bytes, mut snapshot_zxid, mut expected, mut got) = (0u64, 0u64, 0u32, 0u32);
            while let Some(chunk) = stream.message().await.map_err(|e| rpc_error(server, "save snapshot", e))? {
                use std::io::Write;
                if chunk.index != got {
                    return Err(ClientError::InvalidArgument(format!(
                        "chunk {} arrived where {got} was due",
                        chunk.index
                    )));
                }
                f.write_all(&chunk.data).map_err(io)?;
                bytes += chunk.data.len() as u64;
                (snapshot_zxid, expected, got) = (chunk.zxid, chunk.count, got + 1);
            }
            if got == 0 || got != expected {
                return Err(ClientError::InvalidArgument(format!(
                    "the snapshot ended after {got} of {expected} chunks"
                )));
            }
            f.sync_all().map_err(io)?;
            std::fs::rename(&partial, &file).map_err(io)?;
            let (_, _, nodes) = offline::read_snapshot_file(&file).map_err(offline_error)?;
            if out.json {
                out.doc(json!({ "file": file, "snapshot_zxid": zxid(snapshot_zxid), "bytes": bytes, "nodes": nodes }));
            } else {
                out.line(&format!(
                    "saved snapshot {} to {} ({bytes} bytes, {nodes} nodes, checked)",
                    zxid(snapshot_zxid),
                    file.display()
                ));
            }
        }
        SnapshotCommand::Inspect { zxid: at, path, limit, data_dir, file } => {
            let at = at.as_deref().map(|t| parse_u64("--zxid", t)).transpose()?.unwrap_or(0);
            let prefix = path.unwrap_or_default();
            let mut nodes = Vec::new();
            let mut keep = |n: pb::SnapshotNode| {
                if out.json {
                    out.doc(show::node_json(&n));
                } else {
                    nodes.push(show::node_row(&n));
                }
                true
            };
            let cap = limit.unwrap_or(u64::MAX);
            match (data_dir, file) {
                (Some(dir), _) => {
                    let copy = offline::open_copy(&dir).map_err(offline_error)?;
                    let found =
                        snapshots::find(&copy.storage, at).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                    let meta = found.ok_or_else(|| {
                        ClientError::InvalidArgument("no such snapshot in this data directory".into())
                    })?;
                    snapshots::nodes(snapshots::stored_chunks(&copy.storage, meta), &prefix, cap, &mut keep)
                        .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                }
                (None, Some(file)) => {
                    let (_, chunks, _) = offline::read_snapshot_file(&file).map_err(offline_error)?;
                    snapshots::nodes(chunks.into_iter().map(Ok), &prefix, cap, &mut keep)
                        .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                }
                (None, None) => {
                    let mut admin = dialer.connect(server).await?;
                    let request =
                        pb::InspectSnapshotRequest { zxid: at, path_prefix: prefix, limit: limit.unwrap_or(0) };
                    let reply = admin.inspect_snapshot(request).await;
                    let mut stream = reply.map_err(|e| rpc_error(server, "inspect snapshot", e))?.into_inner();
                    while let Some(n) = stream.message().await.map_err(|e| rpc_error(server, "inspect snapshot", e))? {
                        keep(n);
                    }
                }
            }
            if !out.json {
                out.line(&table(&show::NODE_HEADER, &nodes));
            }
        }
        SnapshotCommand::Load { file } => {
            let (_, chunks, _) = offline::read_snapshot_file(&file).map_err(offline_error)?;
            super::load::load(server, dialer, &chunks, 0, &format!("{}", file.display()), out).await?;
        }
        SnapshotCommand::Restore { file, data_dir } => {
            let (z, nodes) = offline::restore(&file, &data_dir).map_err(offline_error)?;
            if out.json {
                out.doc(json!({ "data_dir": data_dir, "snapshot_zxid": zxid(z.0), "nodes": nodes }));
            } else {
                out.line(&format!(
                    "restored snapshot {} ({nodes} nodes) into {}; start the member and it catches up from the leader",
                    zxid(z.0),
                    data_dir.display()
                ));
            }
        }
    }
    Ok(Exit::Ok)
}
