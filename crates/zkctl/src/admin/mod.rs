//! `zkctl admin …`: the operator API of a replica (its admin port), no
//! session involved, or a stopped member's data directory (`--data-dir`):
//! status of one member or all, the transaction log (paged, filtered,
//! followed live), snapshots (list, take, save, inspect, restore, purge),
//! sessions, watches, members and leadership.

mod backup;
mod leader;
pub(crate) mod load;
mod log;
mod member;
pub(crate) mod show;
mod snapshot;

use crate::output::{Exit, Printer};
use serde_json::json;
use show::{table, zxid};
use std::path::PathBuf;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use zabkeeper_client::{ClientError, ClientTls};
use zabkeeper_core::storage::Storage;
use zabkeeper_datadir::{offline, snapshots};
use zabkeeper_proto::admin as pb;
use zabkeeper_proto::admin::admin_client::AdminClient;

/// Where to send admin calls and how to authenticate them.
#[derive(clap::Args, Debug)]
pub struct AdminOptions {
    /// The admin token, when the ensemble's config sets one.
    #[arg(long, global = true, env = "ZKCTL_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A file holding the admin token.
    #[arg(long, global = true, conflicts_with = "admin_token")]
    admin_token_file: Option<PathBuf>,
    /// TLS to admin ports (`[tls] admin = true`), from `--cacert`, `--cert` and `--key`.
    #[arg(skip)]
    pub tls: Option<ClientTls>,
}

/// What to ask.
#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Role, leader, epochs, zxids, counts; with --all, one row per member.
    Status {
        /// Ask every member of the ensemble (found through this one).
        #[arg(long)]
        all: bool,
    },
    /// The ensemble's members and whether this one reaches each.
    Members,
    /// Transactions from the log, decoded and filtered.
    Log(log::LogArgs),
    /// The snapshots kept on disk.
    Snapshots {
        /// Read a stopped member's data directory instead of asking a server.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Take, save, inspect or restore a snapshot.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Keep the newest K snapshots; drop older ones and the log before them.
    Purge {
        /// Snapshots to keep (at least 1).
        #[arg(long)]
        keep: u32,
    },
    /// Live sessions: timeout, the member they are attached to, ephemerals.
    Sessions {
        /// Ask every member, to show where each session is attached.
        #[arg(long)]
        all: bool,
    },
    /// Watches on this member, by session (or by path).
    Watches {
        /// One row per watched path with the sessions watching it.
        #[arg(long)]
        by_path: bool,
    },
    /// Hand leadership to another member.
    #[command(subcommand)]
    Leader(leader::LeaderCommand),
    /// The ensemble's membership: list it, add, remove or promote members.
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// Keep a point-in-time backup in a directory until interrupted: a
    /// snapshot and every committed transaction after it (restore with
    /// `zkctl restore`). --admin may list several members: it goes on from
    /// another when the one it reads from goes away.
    Backup(backup::BackupArgs),
}

pub(crate) fn parse_u64(what: &str, text: &str) -> Result<u64, ClientError> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| ClientError::InvalidArgument(format!("{what} {text:?} is not a number (decimal or 0x-hex)")))
}

pub(crate) fn rpc_error(server: &str, what: &str, status: tonic::Status) -> ClientError {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
            ClientError::Transport { server: server.to_string(), reason: format!("{what}: {}", status.message()) }
        }
        Code::Unauthenticated => ClientError::InvalidArgument(format!(
            "{what} on {server}: {} (pass --admin-token or --admin-token-file)",
            status.message()
        )),
        _ => ClientError::InvalidArgument(format!("{what} on {server}: {:?}: {}", status.code(), status.message())),
    }
}

pub(crate) fn offline_error(e: offline::OfflineError) -> ClientError {
    ClientError::InvalidArgument(e.to_string())
}

/// Adds the token to every call.
#[derive(Clone)]
pub(crate) struct Token(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

pub(crate) type Admin = AdminClient<InterceptedService<Channel, Token>>;

/// How to reach admin ports.
pub(crate) struct Dialer {
    timeout: Duration,
    token: Token,
    tls: Option<ClientTls>,
}

impl Dialer {
    pub(crate) fn new(options: &AdminOptions, timeout: Duration) -> Result<Dialer, ClientError> {
        let secret = match (&options.admin_token, &options.admin_token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(file)) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| ClientError::InvalidArgument(format!("--admin-token-file {}: {e}", file.display())))?
                    .trim()
                    .to_string(),
            ),
            (None, None) => None,
        };
        let token = match secret {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| ClientError::InvalidArgument("the admin token must be printable ASCII".into()))?,
            ),
            None => None,
        };
        Ok(Dialer { timeout, token: Token(token), tls: options.tls.clone() })
    }

    pub(crate) async fn connect(&self, server: &str) -> Result<Admin, ClientError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{server}"))
            .map_err(|e| ClientError::InvalidArgument(format!("admin address {server:?}: {e}")))?
            .connect_timeout(self.timeout);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.tonic_config())
                .map_err(|e| ClientError::InvalidArgument(format!("TLS to {server}: {e}")))?;
        }
        let channel = endpoint.connect().await.map_err(|e| ClientError::Transport {
            server: server.to_string(),
            reason: format!("cannot connect to the admin port: {e}"),
        })?;
        // A log entry can be as large as a loaded tree (under 64 MiB, as a peer message).
        Ok(AdminClient::with_interceptor(channel, self.token.clone()).max_decoding_message_size(64 * 1024 * 1024))
    }

    pub(crate) async fn status(&self, server: &str) -> Result<pb::StatusReply, ClientError> {
        let mut admin = self.connect(server).await?;
        let call = tokio::time::timeout(self.timeout, admin.status(pb::StatusRequest {}));
        match call.await {
            Ok(reply) => Ok(reply.map_err(|e| rpc_error(server, "status", e))?.into_inner()),
            Err(_) => Err(ClientError::Transport { server: server.into(), reason: "status timed out".into() }),
        }
    }
}

/// Runs one admin command against `server` (an admin address) or offline.
pub async fn run(
    server: &str,
    options: &AdminOptions,
    timeout: Duration,
    command: AdminCommand,
    out: &Printer,
) -> Exit {
    let result = match Dialer::new(options, timeout) {
        Ok(dialer) => run_inner(server, &dialer, command, out).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(|e| out.fail(&e))
}

async fn run_inner(server: &str, dialer: &Dialer, command: AdminCommand, out: &Printer) -> Result<Exit, ClientError> {
    match command {
        AdminCommand::Status { all: false } => {
            let s = dialer.status(server).await?;
            print_status(&s, out);
        }
        AdminCommand::Status { all: true } => status_all(server, dialer, out).await?,
        AdminCommand::Members => {
            let s = dialer.status(server).await?;
            if out.json {
                s.members.iter().for_each(|m| out.doc(show::member_json(m)));
            } else {
                let rows: Vec<Vec<String>> = s
                    .members
                    .iter()
                    .map(|m| {
                        vec![
                            m.id.to_string(),
                            m.peer_addr.clone(),
                            m.grpc_addr.clone(),
                            or_dash(&m.client_addr),
                            or_dash(&m.admin_addr),
                            if m.is_self { "self".into() } else { yes_no(m.reachable).into() },
                        ]
                    })
                    .collect();
                out.line(&table(&["ID", "PEER", "GRPC", "ZOOKEEPER", "ADMIN", "REACHABLE"], &rows));
            }
        }
        AdminCommand::Log(args) => return log::log_command(server, dialer, args, out).await,
        AdminCommand::Snapshots { data_dir } => {
            let snapshots: Vec<pb::SnapshotInfo> = match data_dir {
                Some(dir) => {
                    let copy = offline::open_copy(&dir).map_err(offline_error)?;
                    let metas = copy.storage.snapshots().map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                    metas.iter().map(snapshots::info).collect()
                }
                None => {
                    let mut admin = dialer.connect(server).await?;
                    let reply = admin.list_snapshots(pb::ListSnapshotsRequest {}).await;
                    reply.map_err(|e| rpc_error(server, "list snapshots", e))?.into_inner().snapshots
                }
            };
            if out.json {
                snapshots.iter().for_each(|s| out.doc(show::snapshot_json(s)));
            } else {
                let rows: Vec<Vec<String>> = snapshots.iter().map(show::snapshot_row).collect();
                out.line(&table(&show::SNAPSHOT_HEADER, &rows));
            }
        }
        AdminCommand::Snapshot(command) => return snapshot::snapshot_command(server, dialer, command, out).await,
        AdminCommand::Purge { keep } => {
            let mut admin = dialer.connect(server).await?;
            let reply = admin.purge(pb::PurgeRequest { keep }).await.map_err(|e| rpc_error(server, "purge", e))?;
            let r = reply.into_inner();
            if out.json {
                out.doc(json!({ "snapshots_removed": r.snapshots_removed, "entries_removed": r.entries_removed }));
            } else {
                out.line(&format!("removed {} snapshots and {} log entries", r.snapshots_removed, r.entries_removed));
            }
        }
        AdminCommand::Sessions { all } => sessions(server, dialer, all, out).await?,
        AdminCommand::Leader(command) => return leader::leader_command(server, dialer, command, out).await,
        AdminCommand::Member(command) => return member::member_command(server, dialer, command, out).await,
        AdminCommand::Backup(args) => return backup::backup_command(server, dialer, args, out).await,
        AdminCommand::Watches { by_path } => {
            let mut admin = dialer.connect(server).await?;
            let reply = admin.list_watches(pb::ListWatchesRequest {}).await;
            let reply = reply.map_err(|e| rpc_error(server, "list watches", e))?.into_inner();
            if by_path {
                let mut paths: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
                for s in &reply.sessions {
                    for p in &s.paths {
                        paths.entry(p).or_default().push(format!("{:#x}", s.session_id));
                    }
                }
                if out.json {
                    paths.iter().for_each(|(p, sessions)| out.doc(json!({ "path": p, "sessions": sessions })));
                } else {
                    let rows: Vec<Vec<String>> =
                        paths.iter().map(|(p, sessions)| vec![p.to_string(), sessions.join(",")]).collect();
                    out.line(&table(&["PATH", "SESSIONS"], &rows));
                }
            } else if out.json {
                for s in &reply.sessions {
                    out.doc(json!({ "session": format!("{:#x}", s.session_id), "paths": s.paths }));
                }
            } else {
                let rows: Vec<Vec<String>> = reply
                    .sessions
                    .iter()
                    .flat_map(|s| s.paths.iter().map(move |p| vec![format!("{:#x}", s.session_id), p.clone()]))
                    .collect();
                out.line(&table(&["SESSION", "PATH"], &rows));
            }
        }
    }
    Ok(Exit::Ok)
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.into()
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn print_status(s: &pb::StatusReply, out: &Printer) {
    if out.json {
        out.doc(show::status_json(s));
        return;
    }
    out.line(&format!(
        "server {} ({} of {}), {}{}, version {}, up {} s",
        s.server_id,
        s.role,
        s.ensemble_size,
        if s.serving { "serving" } else { "not serving" },
        if s.leader_id != 0 { format!(", leader {}", s.leader_id) } else { String::new() },
        s.version,
        s.uptime_ms / 1000
    ));
    out.line(&format!("epochs: accepted {} current {}", s.accepted_epoch, s.current_epoch));
    out.line(&format!(
        "zxids: logged {} committed {} applied {} snapshot {}",
        zxid(s.last_logged_zxid),
        zxid(s.last_committed_zxid),
        zxid(s.last_applied_zxid),
        zxid(s.last_snapshot_zxid)
    ));
    out.line(&format!(
        "nodes {} ({} data bytes) sessions {} connections {} watches {} ephemerals {}",
        s.node_count, s.data_bytes, s.session_count, s.connection_count, s.watch_count, s.ephemeral_count
    ));
    if !s.last_snapshot_error.is_empty() {
        out.line(&format!("last snapshot failed: {}", s.last_snapshot_error));
    }
    out.line(&format!(
        "disk: {} MiB free{}",
        s.disk_free_bytes >> 20,
        if s.disk_low { ", below the reserve: writes that grow the state are refused while leading" } else { "" }
    ));
    if let Some(d) = &s.disk_usage {
        out.line(&format!(
            "data directory: log {}, snapshots {}, sled's own {}, other {}",
            size(d.log_bytes),
            size(d.snapshot_bytes),
            size(d.sled_bytes),
            size(d.other_bytes)
        ));
    }
    if !s.followers.is_empty() {
        let rows: Vec<Vec<String>> = s
            .followers
            .iter()
            .map(|f| vec![f.id.to_string(), yes_no(f.synced).into(), zxid(f.acked_zxid), f.lag.to_string()])
            .collect();
        out.line(&table(&["FOLLOWER", "SYNCED", "ACKED", "LAG"], &rows));
    }
}

/// One row per member, found through `server`: who leads and who lags at a glance.
async fn status_all(server: &str, dialer: &Dialer, out: &Printer) -> Result<(), ClientError> {
    let first = dialer.status(server).await?;
    let addrs: Vec<(u64, String)> = first.members.iter().map(|m| (m.id, m.admin_addr.clone())).collect();
    let asked = addrs.iter().map(|(id, addr)| async move {
        let status = if addr.is_empty() {
            Err(ClientError::InvalidArgument("its admin address is not in the config file of the member asked".into()))
        } else {
            dialer.status(addr).await
        };
        (*id, addr.clone(), status)
    });
    let statuses = futures::future::join_all(asked).await;
    // The leader's view of each follower's lag.
    let lags: Vec<(u64, u64)> = statuses
        .iter()
        .filter_map(|(_, _, s)| s.as_ref().ok())
        .filter(|s| s.role == "leader")
        .flat_map(|s| s.followers.iter().map(|f| (f.id, f.lag)))
        .collect();
    let lag_of = |id: u64, role: &str| match role {
        "leader" | "standalone" => "0".to_string(),
        _ => lags.iter().find(|(f, _)| *f == id).map_or("-".to_string(), |(_, lag)| lag.to_string()),
    };
    if out.json {
        for (id, addr, status) in &statuses {
            match status {
                Ok(s) => out.doc(json!({ "id": id, "admin_addr": addr, "status": show::status_json(s), "lag": lag_of(*id, &s.role) })),
                Err(e) => out.doc(json!({ "id": id, "admin_addr": addr, "error": e.to_string() })),
            }
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|(id, addr, status)| match status {
            Ok(s) => vec![
                id.to_string(),
                s.role.clone(),
                yes_no(s.serving).into(),
                s.current_epoch.to_string(),
                zxid(s.last_logged_zxid),
                zxid(s.last_committed_zxid),
                zxid(s.last_applied_zxid),
                lag_of(*id, &s.role),
                s.session_count.to_string(),
                s.node_count.to_string(),
                addr.clone(),
            ],
            Err(e) => {
                let mut row = vec![id.to_string(), "unreachable".into()];
                row.extend(std::iter::repeat_n("-".to_string(), 8));
                row.push(format!("{addr} ({e})"));
                row
            }
        })
        .collect();
    let header =
        ["ID", "ROLE", "SERVING", "EPOCH", "LOGGED", "COMMITTED", "APPLIED", "LAG", "SESSIONS", "ZNODES", "ADMIN"];
    out.line(&table(&header, &rows));
    Ok(())
}

async fn sessions(server: &str, dialer: &Dialer, all: bool, out: &Printer) -> Result<(), ClientError> {
    let targets: Vec<(u64, String)> = if all {
        let s = dialer.status(server).await?;
        s.members.iter().filter(|m| !m.admin_addr.is_empty()).map(|m| (m.id, m.admin_addr.clone())).collect()
    } else {
        vec![(dialer.status(server).await?.server_id, server.to_string())]
    };
    // Every member knows every session (they live in the tree); each knows
    // only the connections attached to it.
    let mut merged: std::collections::BTreeMap<i64, (pb::SessionInfo, Option<u64>)> = Default::default();
    for (id, addr) in targets {
        let mut admin = match dialer.connect(&addr).await {
            Ok(a) => a,
            Err(e) if all => {
                eprintln!("member {id} ({addr}) skipped: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let reply = admin.list_sessions(pb::ListSessionsRequest {}).await;
        let reply = reply.map_err(|e| rpc_error(&addr, "list sessions", e))?.into_inner();
        for s in reply.sessions {
            let attached = s.local.then_some(id);
            let slot = merged.entry(s.id).or_insert_with(|| (s.clone(), None));
            if attached.is_some() {
                *slot = (s, attached);
            }
        }
    }
    if out.json {
        for (s, member) in merged.values() {
            out.doc(json!({
                "session": format!("{:#x}", s.id), "timeout_ms": s.timeout_ms, "member": member,
                "last_heard_ms_ago": (s.last_heard_ms_ago >= 0).then_some(s.last_heard_ms_ago),
                "ephemerals": s.ephemerals,
            }));
        }
    } else {
        let rows: Vec<Vec<String>> = merged
            .values()
            .map(|(s, member)| {
                vec![
                    format!("{:#x}", s.id),
                    s.timeout_ms.to_string(),
                    member.map_or("-".into(), |m| m.to_string()),
                    if s.last_heard_ms_ago >= 0 { format!("{} ms", s.last_heard_ms_ago) } else { "-".into() },
                    s.ephemerals.join(","),
                ]
            })
            .collect();
        out.line(&table(&["SESSION", "TIMEOUT_MS", "MEMBER", "LAST_HEARD", "EPHEMERALS"], &rows));
    }
    Ok(())
}

/// Bytes in the largest unit that keeps a whole number in front (KiB, MiB, GiB).
fn size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 3] = [("GiB", 30), ("MiB", 20), ("KiB", 10)];
    match UNITS.iter().find(|(_, shift)| bytes >= 1 << shift) {
        Some((unit, shift)) => format!("{:.1} {unit}", bytes as f64 / f64::from(1u32 << shift)),
        None => format!("{bytes} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_in_decimal_and_hex() {
        assert_eq!(parse_u64("--from", "0x100000002").unwrap(), 0x1_0000_0002);
        assert_eq!(parse_u64("--from", "42").unwrap(), 42);
        assert!(parse_u64("--from", "zz").is_err());
    }

    #[test]
    fn sizes_read_in_the_largest_whole_unit() {
        assert_eq!(size(19), "19 B");
        assert_eq!(size(4096), "4.0 KiB");
        assert_eq!(size(10 << 20), "10.0 MiB");
        assert_eq!(size(3 << 30 | 1 << 29), "3.5 GiB");
    }
}
