//! `zkctl restore`: a data directory holding the state after one
//! transaction of a backup kept by `zkctl admin backup`, or what the backup
//! holds (its files; its transactions, to find the one to restore to).

use crate::admin::show;
use crate::output::{Exit, Printer};
use serde_json::json;
use std::path::{Path, PathBuf};
use zabkeeper_client::ClientError;
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_datadir::backup::format::Kind;
use zabkeeper_datadir::backup::restore::{self, Target};
use zabkeeper_datadir::backup::time::{format_time, parse_time};
use zabkeeper_datadir::backup::{BackupError, Catalog};
use zabkeeper_datadir::{convert, log};

/// What `zkctl restore` was asked.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["to_zxid", "to_time", "list", "log"])))]
pub struct RestoreArgs {
    /// The backup directory (kept by `zkctl admin backup`).
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// Restore the state after this transaction (decimal or 0x-hex).
    #[arg(long, value_name = "ZXID")]
    to_zxid: Option<String>,
    /// Restore the state after the last transaction at or before this time:
    /// RFC 3339 (2024-05-01T12:30:00Z) or milliseconds since the Unix epoch.
    #[arg(long, value_name = "TIME")]
    to_time: Option<String>,
    /// The data directory to write (absent or empty); start a member on it.
    #[arg(long, value_name = "OUT", required_unless_present_any = ["list", "log"], conflicts_with_all = ["list", "log"])]
    data_dir: Option<PathBuf>,
    /// The config file of the ensemble that will run on the restored data:
    /// its members replace those of the ensemble backed up (taken from that
    /// one's file). Without it the data names the members backed up.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["list", "log"])]
    config: Option<PathBuf>,
    /// Instead: list the backup's files (snapshots, transaction files, torn tails, gaps).
    #[arg(long)]
    list: bool,
    /// Instead: print the transactions the backup holds, oldest first.
    #[arg(long)]
    log: bool,
    /// With --log: only transactions touching paths with this prefix.
    #[arg(long, requires = "log")]
    path: Option<String>,
    /// With --log: only transactions of this type (as `admin log --type`).
    #[arg(long = "type", requires = "log")]
    kind: Option<String>,
    /// With --log: only transactions of this session (decimal or 0x-hex).
    #[arg(long, requires = "log")]
    session: Option<String>,
}

fn failed(e: BackupError) -> ClientError {
    ClientError::InvalidArgument(format!("restore: {e}"))
}

/// Runs `zkctl restore`.
pub fn run(args: RestoreArgs, out: &Printer) -> Result<Exit, ClientError> {
    if args.list {
        return list(&args.from, out);
    }
    if args.log {
        return print_log(&args, out);
    }
    let target = match (&args.to_zxid, &args.to_time) {
        (Some(z), _) => Target::Zxid(Zxid(crate::admin::parse_u64("--to-zxid", z)?)),
        (None, Some(t)) => Target::Time(parse_time(t).map_err(|e| ClientError::InvalidArgument(e.to_string()))?),
        (None, None) => return Err(ClientError::InvalidArgument("restore: give --to-zxid or --to-time".into())),
    };
    let Some(data_dir) = &args.data_dir else {
        return Err(ClientError::InvalidArgument("restore: give --data-dir OUT".into()));
    };
    let r = restore::restore(&args.from, target, data_dir, args.config.as_deref()).map_err(failed)?;
    if out.json {
        out.doc(json!({
            "data_dir": data_dir,
            "zxid": show::zxid(r.target.0),
            "time_ms": r.target_time_ms,
            "time": format_time(r.target_time_ms),
            "snapshot": r.snapshot,
            "snapshot_zxid": show::zxid(r.snapshot_zxid.0),
            "replayed": r.replayed,
            "nodes": r.nodes,
            "sessions": r.sessions,
            "epoch": r.epoch,
            "members": r.members,
        }));
    } else {
        out.line(&format!(
            "restored the state after {} ({}) into {}: snapshot {} and {} transactions replayed; {} nodes, {} open \
             sessions; start a member on it (a new ensemble: the others join by sync, with empty data directories)",
            r.target,
            format_time(r.target_time_ms),
            data_dir.display(),
            r.snapshot.display(),
            r.replayed,
            r.nodes,
            r.sessions
        ));
        if let (Some(members), None) = (&r.members, &args.config) {
            out.line(&format!(
                "it names the members backed up ({members}); for an ensemble elsewhere, restore with --config FILE"
            ));
        }
    }
    Ok(Exit::Ok)
}

fn list(dir: &Path, out: &Printer) -> Result<Exit, ClientError> {
    let catalog = Catalog::open(dir).map_err(failed)?;
    let files = restore::list(&catalog).map_err(failed)?;
    let (newest, _) = catalog.newest().map_err(failed)?;
    let oldest = catalog.snapshots.first().map(|s| s.zxid);
    let kind = |k: Kind| if k == Kind::Snapshot { "snapshot" } else { "transactions" };
    let time = |ms: i64, held: bool| if held { format_time(ms) } else { "-".into() };
    if out.json {
        for f in &files {
            let held = f.kind == Kind::Snapshot || f.transactions > 0;
            out.doc(json!({
                "file": f.path,
                "kind": kind(f.kind),
                "first": show::zxid(f.first.0),
                "last": show::zxid(f.last.0),
                "first_time_ms": held.then_some(f.first_time_ms),
                "last_time_ms": held.then_some(f.last_time_ms),
                "transactions": f.transactions,
                "problem": f.problem,
            }));
        }
        out.doc(json!({ "oldest_snapshot": oldest.map(|z| show::zxid(z.0)), "newest": show::zxid(newest.0) }));
        return Ok(Exit::Ok);
    }
    let rows: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            let held = f.kind == Kind::Snapshot || f.transactions > 0;
            let name =
                f.path.file_name().map_or_else(|| f.path.display().to_string(), |n| n.to_string_lossy().into_owned());
            vec![
                name,
                kind(f.kind).into(),
                if held { show::zxid(f.first.0) } else { "-".into() },
                if held { show::zxid(f.last.0) } else { "-".into() },
                time(f.first_time_ms, held),
                time(f.last_time_ms, held),
                f.transactions.to_string(),
                f.problem.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["FILE", "KIND", "FIRST", "LAST", "FIRST_TIME", "LAST_TIME", "TXNS", "PROBLEM"];
    out.line(&show::table(&header, &rows));
    match oldest {
        Some(oldest) => out.line(&format!("restorable: from {oldest} to {newest}")),
        None => out.line("no snapshot yet: nothing restorable"),
    }
    Ok(Exit::Ok)
}

fn print_log(args: &RestoreArgs, out: &Printer) -> Result<Exit, ClientError> {
    if let Some(kind) = &args.kind {
        if !log::KINDS.contains(&kind.as_str()) {
            return Err(ClientError::InvalidArgument(format!(
                "--type {kind:?} is not a transaction type; known: {}",
                log::KINDS.join(", ")
            )));
        }
    }
    let session = args.session.as_deref().map(|s| crate::admin::parse_u64("--session", s)).transpose()?;
    let filter = log::Filter {
        path_prefix: args.path.clone(),
        session: session.map(|s| SessionId(s as i64)),
        kind: args.kind.clone(),
    };
    let catalog = Catalog::open(&args.from).map_err(failed)?;
    restore::entries(&catalog, &mut |_, entry| {
        if filter.matches(entry.txn.session, &entry.txn.body) {
            let shown = convert::entry(&entry, Zxid::ZERO);
            if out.json {
                out.doc(show::entry_json(&shown, None));
            } else {
                out.line(&format!("{} {}", format_time(shown.time_ms), show::entry_line(&shown, None)));
            }
        }
        true
    })
    .map_err(failed)?;
    Ok(Exit::Ok)
}
