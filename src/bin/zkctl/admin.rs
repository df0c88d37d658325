//! `zkctl admin …`: the operator API of one replica (its admin port), no
//! session involved: role and position, the transaction log, snapshots.

use crate::output::{Exit, Printer};
use serde_json::json;
use std::time::Duration;
use zabkeeper::client::ClientError;
use zabkeeper::proto::admin::admin_client::AdminClient;
use zabkeeper::proto::admin::{ListSnapshotsRequest, ReadLogRequest, StatusRequest, TakeSnapshotRequest};

/// What to ask the replica.
#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Role, leader, epochs, zxids and counts.
    Status,
    /// Transactions from the log, decoded, from a zxid on.
    Log {
        /// First zxid to show (decimal or 0x-hex); 0 for the start of the log.
        #[arg(long, default_value = "0")]
        from: String,
        /// At most this many entries (the server caps it at 10000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// The snapshots kept on disk.
    Snapshots,
    /// Take a snapshot now and print its zxid once durable.
    Snapshot,
}

fn parse_zxid(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("--from {text:?} is not a zxid (decimal or 0x-hex)"))
}

fn connection_error(server: &str, what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Transport { server: server.to_string(), reason: format!("{what}: {e}") }
}

/// Runs one admin command against `server` (an admin address).
pub async fn run(server: &str, timeout: Duration, command: AdminCommand, out: &Printer) -> Exit {
    match run_inner(server, timeout, command, out).await {
        Ok(exit) => exit,
        Err(e) => out.fail(&e),
    }
}

async fn run_inner(server: &str, timeout: Duration, command: AdminCommand, out: &Printer) -> Result<Exit, ClientError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{server}"))
        .map_err(|e| ClientError::InvalidArgument(format!("--admin {server:?}: {e}")))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint.connect().await.map_err(|e| connection_error(server, "cannot connect", e))?;
    let mut admin = AdminClient::new(channel);
    match command {
        AdminCommand::Status => {
            let s =
                admin.status(StatusRequest {}).await.map_err(|e| connection_error(server, "status", e))?.into_inner();
            if out.json {
                out.doc(json!({
                    "server_id": s.server_id, "role": s.role, "serving": s.serving, "leader_id": s.leader_id,
                    "accepted_epoch": s.accepted_epoch, "current_epoch": s.current_epoch,
                    "last_logged_zxid": format!("{:#x}", s.last_logged_zxid),
                    "last_committed_zxid": format!("{:#x}", s.last_committed_zxid),
                    "last_applied_zxid": format!("{:#x}", s.last_applied_zxid),
                    "last_snapshot_zxid": format!("{:#x}", s.last_snapshot_zxid),
                    "nodes": s.node_count, "sessions": s.session_count, "connections": s.connection_count,
                    "watches": s.watch_count, "synced_followers": s.synced_followers, "ensemble_size": s.ensemble_size,
                }));
            } else {
                out.line(&format!(
                    "server {} ({} of {}), {}{}",
                    s.server_id,
                    s.role,
                    s.ensemble_size,
                    if s.serving { "serving" } else { "not serving" },
                    if s.leader_id != 0 { format!(", leader {}", s.leader_id) } else { String::new() }
                ));
                out.line(&format!("epochs: accepted {} current {}", s.accepted_epoch, s.current_epoch));
                out.line(&format!(
                    "zxids: logged {:#x} committed {:#x} applied {:#x} snapshot {:#x}",
                    s.last_logged_zxid, s.last_committed_zxid, s.last_applied_zxid, s.last_snapshot_zxid
                ));
                out.line(&format!(
                    "nodes {} sessions {} connections {} watches {}",
                    s.node_count, s.session_count, s.connection_count, s.watch_count
                ));
                if !s.synced_followers.is_empty() {
                    out.line(&format!("synced followers: {:?}", s.synced_followers));
                }
            }
        }
        AdminCommand::Log { from, limit } => {
            let from_zxid = parse_zxid(&from).map_err(ClientError::InvalidArgument)?;
            let reply = admin
                .read_log(ReadLogRequest { from_zxid, limit })
                .await
                .map_err(|e| connection_error(server, "read log", e))?
                .into_inner();
            if out.json {
                for e in &reply.entries {
                    out.doc(json!({
                        "zxid": format!("{:#x}", e.zxid), "session": format!("{:#x}", e.session_id), "cxid": e.cxid,
                        "time_ms": e.time_ms, "txn": e.description, "bytes": e.size_bytes,
                    }));
                }
            } else {
                out.line(&format!("log holds {:#x} .. {:#x}", reply.first_zxid, reply.last_zxid));
                for e in &reply.entries {
                    out.line(&format!("{:#x} session {:#x} cxid {} {}", e.zxid, e.session_id, e.cxid, e.description));
                }
            }
        }
        AdminCommand::Snapshots => {
            let reply = admin
                .list_snapshots(ListSnapshotsRequest {})
                .await
                .map_err(|e| connection_error(server, "list snapshots", e))?
                .into_inner();
            for s in &reply.snapshots {
                if out.json {
                    out.doc(json!({ "zxid": format!("{:#x}", s.zxid), "bytes": s.size_bytes }));
                } else {
                    out.line(&format!("{:#x} {} bytes", s.zxid, s.size_bytes));
                }
            }
        }
        AdminCommand::Snapshot => {
            let reply = admin
                .take_snapshot(TakeSnapshotRequest {})
                .await
                .map_err(|e| connection_error(server, "take snapshot", e))?
                .into_inner();
            if out.json {
                out.doc(json!({ "snapshot_zxid": format!("{:#x}", reply.zxid) }));
            } else {
                out.line(&format!("snapshot at {:#x}", reply.zxid));
            }
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zxids_parse_in_decimal_and_hex() {
        assert_eq!(parse_zxid("0x100000002"), Ok(0x1_0000_0002));
        assert_eq!(parse_zxid("42"), Ok(42));
        assert!(parse_zxid("zz").is_err());
    }
}
