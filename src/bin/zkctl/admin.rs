//! `zkctl admin …`: the operator API of a replica (its admin port), no
//! session involved, or a stopped member's data directory (`--data-dir`):
//! status of one member or all, the transaction log (paged, filtered,
//! followed live), snapshots (list, take, save, inspect, restore, purge),
//! sessions, watches and members.

use crate::admin_show::{self as show, table, zxid};
use crate::output::{Exit, Printer};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use zabkeeper::admin::{convert, log, offline};
use zabkeeper::client::ClientError;
use zabkeeper::proto::admin as pb;
use zabkeeper::proto::admin::admin_client::AdminClient;
use zabkeeper::storage::Storage;
use zabkeeper::tree::snapshot::{Visit, Walker};

/// Where to send admin calls and how to authenticate them.
#[derive(clap::Args, Debug)]
pub struct AdminOptions {
    /// The admin token, when the ensemble's config sets one.
    #[arg(long, global = true, env = "ZKCTL_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A file holding the admin token.
    #[arg(long, global = true, conflicts_with = "admin_token")]
    admin_token_file: Option<PathBuf>,
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
    Log(LogArgs),
    /// The snapshots kept on disk.
    Snapshots {
        /// Read a stopped member's data directory instead of asking a server.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Take, save, inspect or restore a snapshot.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
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
}

/// `zkctl admin log`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LogArgs {
    #[command(subcommand)]
    show: Option<LogCommand>,
    /// First zxid (decimal or 0x-hex).
    #[arg(long)]
    from: Option<String>,
    /// Last zxid (decimal or 0x-hex).
    #[arg(long)]
    to: Option<String>,
    /// The last N matching entries.
    #[arg(long, conflicts_with = "follow")]
    last: Option<u32>,
    /// At most this many entries (the server caps a page at 10000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Only entries touching paths with this prefix.
    #[arg(long)]
    path: Option<String>,
    /// Only entries of this session (decimal or 0x-hex).
    #[arg(long)]
    session: Option<String>,
    /// Only entries of this type (create, delete, setData, setACL, multi, createSession, closeSession, error).
    #[arg(long = "type")]
    kind: Option<String>,
    /// Keep printing committed transactions as they happen (from --from, or from now).
    #[arg(long)]
    follow: bool,
    /// Read a stopped member's data directory instead of asking a server.
    #[arg(long, conflicts_with = "follow")]
    data_dir: Option<PathBuf>,
}

/// `zkctl admin log show`.
#[derive(clap::Subcommand, Debug)]
pub enum LogCommand {
    /// One entry in full.
    Show {
        /// Its zxid (decimal or 0x-hex).
        zxid: String,
        /// Read a stopped member's data directory instead of asking a server.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

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

fn parse_u64(what: &str, text: &str) -> Result<u64, ClientError> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| ClientError::InvalidArgument(format!("{what} {text:?} is not a number (decimal or 0x-hex)")))
}

fn rpc_error(server: &str, what: &str, status: tonic::Status) -> ClientError {
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

fn offline_error(e: offline::OfflineError) -> ClientError {
    ClientError::InvalidArgument(e.to_string())
}

/// Adds the token to every call.
#[derive(Clone)]
struct Token(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Admin = AdminClient<InterceptedService<Channel, Token>>;

/// How to reach admin ports.
struct Dialer {
    timeout: Duration,
    token: Token,
}

impl Dialer {
    fn new(options: &AdminOptions, timeout: Duration) -> Result<Dialer, ClientError> {
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
        Ok(Dialer { timeout, token: Token(token) })
    }

    async fn connect(&self, server: &str) -> Result<Admin, ClientError> {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{server}"))
            .map_err(|e| ClientError::InvalidArgument(format!("admin address {server:?}: {e}")))?
            .connect_timeout(self.timeout);
        let channel = endpoint.connect().await.map_err(|e| ClientError::Transport {
            server: server.to_string(),
            reason: format!("cannot connect to the admin port: {e}"),
        })?;
        Ok(AdminClient::with_interceptor(channel, self.token.clone()))
    }

    async fn status(&self, server: &str) -> Result<pb::StatusReply, ClientError> {
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
        AdminCommand::Log(args) => return log_command(server, dialer, args, out).await,
        AdminCommand::Snapshots { data_dir } => {
            let snapshots: Vec<pb::SnapshotInfo> = match data_dir {
                Some(dir) => {
                    let copy = offline::open_copy(&dir).map_err(offline_error)?;
                    let metas = copy.storage.snapshots().map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                    metas
                        .iter()
                        .map(|s| pb::SnapshotInfo {
                            zxid: s.zxid.0,
                            size_bytes: s.bytes,
                            node_count: s.nodes,
                            created_ms: s.created_ms,
                            chunks: s.chunks,
                        })
                        .collect()
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
        AdminCommand::Snapshot(command) => return snapshot_command(server, dialer, command, out).await,
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
            Err(ClientError::InvalidArgument("no admin_addr in the config".into()))
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

fn log_filter(args: &LogArgs) -> Result<log::Filter, ClientError> {
    if let Some(kind) = &args.kind {
        if !log::KINDS.contains(&kind.as_str()) {
            return Err(ClientError::InvalidArgument(format!(
                "--type {kind:?} is not a transaction type; known: {}",
                log::KINDS.join(", ")
            )));
        }
    }
    Ok(log::Filter {
        path_prefix: args.path.clone(),
        session: args
            .session
            .as_deref()
            .map(|s| parse_u64("--session", s))
            .transpose()?
            .map(|s| zabkeeper::ids::SessionId(s as i64)),
        kind: args.kind.clone(),
    })
}

fn print_entries(entries: &[pb::LogEntry], offline: bool, out: &Printer) {
    for e in entries {
        let committed = (!offline).then_some(e.committed);
        if out.json {
            out.doc(show::entry_json(e, committed));
        } else {
            out.line(&show::entry_line(e, committed));
        }
    }
}

async fn log_command(server: &str, dialer: &Dialer, args: LogArgs, out: &Printer) -> Result<Exit, ClientError> {
    if let Some(LogCommand::Show { zxid: text, data_dir }) = &args.show {
        let z = parse_u64("zxid", text)?;
        let (entry, offline) = match data_dir {
            Some(dir) => {
                let copy = offline::open_copy(dir).map_err(offline_error)?;
                let found = log::entry(&copy.storage, zabkeeper::ids::Zxid(z))
                    .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                let found = found
                    .ok_or_else(|| ClientError::InvalidArgument(format!("no entry {z:#x} in {}", dir.display())))?;
                (convert::entry(&found, zabkeeper::ids::Zxid::ZERO), true)
            }
            None => {
                let mut admin = dialer.connect(server).await?;
                let reply = admin.get_entry(pb::GetEntryRequest { zxid: z }).await;
                (reply.map_err(|e| rpc_error(server, "get entry", e))?.into_inner(), false)
            }
        };
        let committed = (!offline).then_some(entry.committed);
        if out.json {
            out.doc(show::entry_json(&entry, committed));
        } else {
            out.line(&show::entry_detail(&entry, committed));
        }
        return Ok(Exit::Ok);
    }
    let filter = log_filter(&args)?;
    let from = args.from.as_deref().map(|t| parse_u64("--from", t)).transpose()?;
    let to = args.to.as_deref().map(|t| parse_u64("--to", t)).transpose()?;
    if args.follow {
        return follow(server, dialer, from.unwrap_or(0), filter, out).await;
    }
    if let Some(dir) = &args.data_dir {
        let copy = offline::open_copy(dir).map_err(offline_error)?;
        let query = log::Query {
            from: zabkeeper::ids::Zxid(from.unwrap_or(0)),
            to: zabkeeper::ids::Zxid(to.unwrap_or(u64::MAX)),
            last: args.last.map(|n| n as usize),
            limit: args.limit as usize,
            filter,
            ..log::Query::default()
        };
        let page = log::read(&copy.storage, &query).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let entries: Vec<pb::LogEntry> =
            page.entries.iter().map(|e| convert::entry(e, zabkeeper::ids::Zxid::ZERO)).collect();
        print_entries(&entries, true, out);
        if let Some(next) = page.next {
            eprintln!("more entries follow: continue with --from {}", zxid(next.0));
        }
        return Ok(Exit::Ok);
    }
    let mut admin = dialer.connect(server).await?;
    let request = pb::ReadLogRequest {
        from_zxid: from.unwrap_or(0),
        limit: args.limit,
        to_zxid: to.unwrap_or(0),
        last: args.last.unwrap_or(0),
        path_prefix: filter.path_prefix.unwrap_or_default(),
        session_id: filter.session.map(|s| s.0),
        r#type: filter.kind.unwrap_or_default(),
        max_bytes: 0,
    };
    let reply = admin.read_log(request).await.map_err(|e| rpc_error(server, "read log", e))?.into_inner();
    if !out.json {
        out.line(&format!(
            "log holds {} .. {}, committed up to {}",
            zxid(reply.first_zxid),
            zxid(reply.last_zxid),
            zxid(reply.last_committed_zxid)
        ));
    }
    print_entries(&reply.entries, false, out);
    if reply.next_zxid != 0 {
        eprintln!("more entries follow: continue with --from {}", zxid(reply.next_zxid));
    }
    Ok(Exit::Ok)
}

/// How long `--follow` keeps trying other members when none answers.
const FOLLOW_GIVE_UP: Duration = Duration::from_secs(30);

/// Prints committed transactions as they happen. When the member it streams
/// from goes away, it resumes from the next zxid on another member.
async fn follow(
    server: &str,
    dialer: &Dialer,
    from: u64,
    filter: log::Filter,
    out: &Printer,
) -> Result<Exit, ClientError> {
    let first = dialer.status(server).await?;
    let mut members: Vec<String> = vec![server.to_string()];
    members
        .extend(first.members.iter().filter(|m| !m.admin_addr.is_empty() && !m.is_self).map(|m| m.admin_addr.clone()));
    let mut next = if from == 0 { first.last_applied_zxid.saturating_add(1) } else { from };
    let mut failing_since: Option<Instant> = None;
    let mut turn = 0usize;
    loop {
        let addr = &members[turn % members.len()];
        turn += 1;
        let attempt = async {
            let mut admin = dialer.connect(addr).await?;
            let path_prefix = filter.path_prefix.clone().unwrap_or_default();
            let request = pb::FollowRequest { from_zxid: next, path_prefix };
            let mut stream = admin.follow(request).await.map_err(|e| rpc_error(addr, "follow", e))?.into_inner();
            failing_since = None;
            loop {
                match stream.message().await {
                    Ok(Some(e)) => {
                        next = e.zxid.saturating_add(1);
                        if matches_filter(&filter, &e) {
                            print_entries(std::slice::from_ref(&e), false, out);
                        }
                    }
                    Ok(None) => {
                        return Err(ClientError::Transport { server: addr.clone(), reason: "the stream ended".into() })
                    }
                    Err(status) if status.code() == tonic::Code::OutOfRange => {
                        return Err(ClientError::InvalidArgument(format!("follow on {addr}: {}", status.message())))
                    }
                    Err(status) => return Err(rpc_error(addr, "follow", status)),
                }
            }
        };
        match attempt.await {
            Err(e @ ClientError::InvalidArgument(_)) => return Err(e),
            Err(e) => {
                eprintln!("follow: {e}; resuming from {} on another member", zxid(next));
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > FOLLOW_GIVE_UP {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(()) => unreachable!("the stream loop only returns errors"),
        }
    }
}

fn matches_filter(filter: &log::Filter, e: &pb::LogEntry) -> bool {
    if filter.session.is_some_and(|s| s.0 != e.session_id) {
        return false;
    }
    if let Some(kind) = &filter.kind {
        if &e.r#type != kind && !e.ops.iter().any(|op| &op.r#type == kind) {
            return false;
        }
    }
    match &filter.path_prefix {
        Some(prefix) => e
            .ops
            .iter()
            .any(|op| op.path.starts_with(prefix.as_str()) || op.paths.iter().any(|p| p.starts_with(prefix.as_str()))),
        None => true,
    }
}

async fn snapshot_command(
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
            };
            let cap = limit.unwrap_or(u64::MAX);
            match (data_dir, file) {
                (Some(dir), _) => {
                    let copy = offline::open_copy(&dir).map_err(offline_error)?;
                    inspect_local(&copy.storage, at, &prefix, cap, &mut keep)?;
                }
                (None, Some(file)) => {
                    let (_, chunks, _) = offline::read_snapshot_file(&file).map_err(offline_error)?;
                    walk_chunks(chunks.iter().map(|c| Ok(c.clone())), &prefix, cap, &mut keep)?;
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

fn inspect_local(
    storage: &dyn Storage,
    at: u64,
    prefix: &str,
    cap: u64,
    keep: &mut dyn FnMut(pb::SnapshotNode),
) -> Result<(), ClientError> {
    let failed = |e: zabkeeper::storage::StorageError| ClientError::InvalidArgument(e.to_string());
    let all = storage.snapshots().map_err(failed)?;
    let meta = if at == 0 { all.last() } else { all.iter().find(|s| s.zxid.0 == at) };
    let meta = *meta.ok_or_else(|| ClientError::InvalidArgument("no such snapshot in this data directory".into()))?;
    let chunks = (0..meta.chunks).map(|i| {
        storage
            .snapshot_chunk(meta.zxid, i)
            .map_err(failed)?
            .ok_or_else(|| ClientError::InvalidArgument(format!("snapshot chunk {i} is missing")))
    });
    walk_chunks(chunks, prefix, cap, keep)
}

fn walk_chunks(
    chunks: impl Iterator<Item = Result<bytes::Bytes, ClientError>>,
    prefix: &str,
    cap: u64,
    keep: &mut dyn FnMut(pb::SnapshotNode),
) -> Result<(), ClientError> {
    let mut walker = Walker::new();
    let mut shown = 0u64;
    for chunk in chunks {
        let chunk = chunk?;
        walker
            .feed(&chunk, &mut |visit| {
                if let Visit::Node { path, data, acl, stat } = visit {
                    if shown < cap && path.starts_with(prefix) {
                        shown += 1;
                        keep(convert::snapshot_node(path, data.len(), &acl, &stat));
                    }
                }
            })
            .map_err(|e| ClientError::InvalidArgument(format!("the snapshot is damaged: {e}")))?;
        if shown >= cap {
            return Ok(());
        }
    }
    walker.finish().map_err(|e| ClientError::InvalidArgument(format!("the snapshot is damaged: {e}")))
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
    fn the_follow_filter_matches_ops_and_closed_sessions() {
        let op = |t: &str, path: &str| pb::TxnOp { r#type: t.into(), path: path.into(), ..Default::default() };
        let e = pb::LogEntry {
            session_id: 5,
            r#type: "multi".into(),
            ops: vec![op("create", "/a/x"), op("delete", "/b")],
            ..Default::default()
        };
        let f = |path: Option<&str>, kind: Option<&str>, session: Option<i64>| log::Filter {
            path_prefix: path.map(String::from),
            kind: kind.map(String::from),
            session: session.map(zabkeeper::ids::SessionId),
        };
        assert!(matches_filter(&f(Some("/b"), None, None), &e));
        assert!(matches_filter(&f(None, Some("create"), Some(5)), &e));
        assert!(!matches_filter(&f(None, Some("setData"), None), &e));
        assert!(!matches_filter(&f(None, None, Some(6)), &e));
        let close = pb::LogEntry {
            r#type: "closeSession".into(),
            ops: vec![pb::TxnOp { r#type: "closeSession".into(), paths: vec!["/e/1".into()], ..Default::default() }],
            ..Default::default()
        };
        assert!(matches_filter(&f(Some("/e"), None, None), &close));
    }
}
