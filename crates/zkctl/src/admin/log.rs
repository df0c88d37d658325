//! `zkctl admin log`: a page of the log (from a member or a stopped
//! member's data directory), one entry in full, or the committed
//! transactions as they happen.

use super::show::{self as show, zxid};
use super::{offline_error, parse_u64, rpc_error, Dialer};
use crate::output::{Exit, Printer};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use zabkeeper_client::ClientError;
use zabkeeper_datadir::{convert, log, offline};
use zabkeeper_proto::admin as pb;

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
            .map(|s| zabkeeper_core::ids::SessionId(s as i64)),
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

pub async fn log_command(server: &str, dialer: &Dialer, args: LogArgs, out: &Printer) -> Result<Exit, ClientError> {
    if let Some(LogCommand::Show { zxid: text, data_dir }) = &args.show {
        let z = parse_u64("zxid", text)?;
        let (entry, offline) = match data_dir {
            Some(dir) => {
                let copy = offline::open_copy(dir).map_err(offline_error)?;
                let found = log::entry(&copy.storage, zabkeeper_core::ids::Zxid(z))
                    .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
                let found = found
                    .ok_or_else(|| ClientError::InvalidArgument(format!("no entry {z:#x} in {}", dir.display())))?;
                (convert::entry(&found, zabkeeper_core::ids::Zxid::ZERO), true)
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
            from: zabkeeper_core::ids::Zxid(from.unwrap_or(0)),
            to: zabkeeper_core::ids::Zxid(to.unwrap_or(u64::MAX)),
            last: args.last.map(|n| n as usize),
            limit: args.limit as usize,
            filter,
            ..log::Query::default()
        };
        let page = log::read(&copy.storage, &query).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let entries: Vec<pb::LogEntry> =
            page.entries.iter().map(|e| convert::entry(e, zabkeeper_core::ids::Zxid::ZERO)).collect();
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
        raw: false,
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
            let request = pb::FollowRequest {
                from_zxid: next,
                path_prefix: filter.path_prefix.clone().unwrap_or_default(),
                session_id: filter.session.map(|s| s.0),
                r#type: filter.kind.clone().unwrap_or_default(),
            };
            let mut stream = admin.follow(request).await.map_err(|e| rpc_error(addr, "follow", e))?.into_inner();
            failing_since = None;
            loop {
                match stream.message().await {
                    Ok(Some(e)) => {
                        next = e.zxid.saturating_add(1);
                        print_entries(std::slice::from_ref(&e), false, out);
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
