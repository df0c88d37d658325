//! `zkctl admin backup --to DIR`: keeps a point-in-time backup of the
//! ensemble (`zabkeeper_datadir::backup`): a member's snapshot, then every
//! committed transaction from its FollowRaw stream, and snapshots of the
//! backup's own as it goes. When the member goes away it resumes after the
//! last transaction it holds on another member; when the log it needs was
//! purged there it starts over from a fresh snapshot, and says so.

use super::show::zxid;
use super::{rpc_error, Admin, Dialer};
use crate::output::{Exit, Printer};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use zabkeeper_client::ClientError;
use zabkeeper_core::ids::Zxid;
use zabkeeper_datadir::backup::writer::{Options, Writer};
use zabkeeper_datadir::backup::BackupError;
use zabkeeper_proto::admin as pb;

/// How long buffered transactions may wait before they are made durable.
const SYNC_EVERY: Duration = Duration::from_millis(100);
/// A stream quiet this long has its member asked whether it still serves.
const QUIET: Duration = Duration::from_secs(5);
/// The pause before trying the next member after a failure.
const RETRY: Duration = Duration::from_millis(200);

/// `zkctl admin backup`.
#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    /// The backup directory: made when absent or empty, resumed otherwise.
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// Write a snapshot of the backup's own after this many transactions (0: never).
    #[arg(long, default_value_t = 100_000)]
    snapshot_every: u64,
    /// Keep the newest N snapshots and the transactions after the oldest of them (0: everything).
    #[arg(long, default_value_t = 0)]
    keep_snapshots: usize,
    /// Start a new transaction file past this many MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    file_mib: u64,
    /// Give up once no member has answered for this many seconds (0: keep trying).
    #[arg(long, default_value_t = 0)]
    give_up_after_s: u64,
}

/// Why following one member stopped.
enum Stop {
    /// Try the next member.
    Member(String),
    /// Nothing another member could mend.
    Fatal(ClientError),
}

fn fatal(e: BackupError) -> Stop {
    Stop::Fatal(ClientError::InvalidArgument(format!("backup: {e}")))
}

/// What the backup tells its operator, as text or one JSON document.
fn say(out: &Printer, event: &str, text: String, fields: Value) {
    if out.json {
        let mut doc = json!({ "event": event });
        if let (Value::Object(into), Value::Object(extra)) = (&mut doc, fields) {
            into.extend(extra);
        }
        out.doc(doc);
    } else {
        out.line(&format!("backup: {text}"));
    }
}

/// Keeps the backup until interrupted (SIGINT, SIGTERM), or fails.
pub async fn backup_command(
    server: &str,
    dialer: &Dialer,
    args: BackupArgs,
    out: &Printer,
) -> Result<Exit, ClientError> {
    let mut members: Vec<String> =
        server.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    if members.is_empty() {
        return Err(ClientError::InvalidArgument(
            "backup: give the admin addresses with --admin HOST:PORT[,...]".into(),
        ));
    }
    let options = Options {
        snapshot_every: args.snapshot_every,
        file_bytes: args.file_mib << 20,
        keep_snapshots: args.keep_snapshots,
    };
    let dir = args.to;
    let backup_err = |e: BackupError| ClientError::InvalidArgument(format!("backup: {e}"));
    // Held until the command ends: one writer per backup directory.
    let _lock = zabkeeper_datadir::backup::lock_for_writing(&dir).map_err(backup_err)?;
    let mut writer = match Writer::open(&dir, options).map_err(backup_err)? {
        Some((writer, reopened)) => {
            if let Some((file, offset)) = &reopened.truncated {
                say(
                    out,
                    "truncated",
                    format!(
                        "{}: cut off a torn last record at offset {offset} (a backup stopped mid-write)",
                        file.display()
                    ),
                    json!({ "file": file, "offset": offset }),
                );
            }
            say(
                out,
                "resumed",
                format!(
                    "resuming {} after {} (snapshot {} and {} transactions after it)",
                    dir.display(),
                    writer.last(),
                    reopened.snapshot,
                    reopened.replayed
                ),
                json!({ "dir": dir, "last": zxid(writer.last().0), "snapshot": zxid(reopened.snapshot.0) }),
            );
            Some(writer)
        }
        None => None,
    };
    let mut stop_signal = std::pin::pin!(crate::commands::interrupted());
    let mut turn = 0usize;
    let mut failing_since: Option<Instant> = None;
    loop {
        let addr = members[turn % members.len()].clone();
        turn += 1;
        let attempt = follow_member(&addr, dialer, &dir, options, &mut writer, &mut members, &mut failing_since, out);
        let stopped = tokio::select! {
            stop = attempt => Some(stop),
            () = &mut stop_signal => None,
        };
        if let Some(w) = writer.as_mut() {
            w.sync().map_err(backup_err)?;
        }
        let held = writer.as_ref().map_or(Zxid::ZERO, Writer::last);
        match stopped {
            None => {
                say(
                    out,
                    "stopped",
                    format!("stopped; {} holds up to {held}", dir.display()),
                    json!({ "last": zxid(held.0) }),
                );
                return Ok(Exit::Ok);
            }
            Some(Stop::Fatal(e)) => return Err(e),
            Some(Stop::Member(reason)) => {
                say(
                    out,
                    "lost",
                    format!("{addr}: {reason}; resuming after {held} on another member"),
                    json!({ "member": addr, "reason": reason, "last": zxid(held.0) }),
                );
                let since = *failing_since.get_or_insert_with(Instant::now);
                if args.give_up_after_s > 0 && since.elapsed() > Duration::from_secs(args.give_up_after_s) {
                    return Err(ClientError::Transport {
                        server: members.join(","),
                        reason: format!("backup: no member answered for {} s", args.give_up_after_s),
                    });
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Follows one member until it fails: starts the backup (or starts it over
/// after a purge) from its snapshot when needed, appends what it streams.
#[allow(clippy::too_many_arguments)]
async fn follow_member(
    addr: &str,
    dialer: &Dialer,
    dir: &std::path::Path,
    options: Options,
    writer: &mut Option<Writer>,
    members: &mut Vec<String>,
    failing_since: &mut Option<Instant>,
    out: &Printer,
) -> Stop {
    let member = |e: ClientError| Stop::Member(e.to_string());
    let mut admin = match dialer.connect(addr).await {
        Ok(admin) => admin,
        Err(e) => return member(e),
    };
    // Learn the rest of the ensemble from whoever answers.
    match dialer.status(addr).await {
        Ok(status) => {
            for m in status.members.iter().filter(|m| !m.admin_addr.is_empty()) {
                if !members.contains(&m.admin_addr) {
                    members.push(m.admin_addr.clone());
                }
            }
        }
        Err(e) => return member(e),
    }
    loop {
        if writer.is_none() {
            match start_from_snapshot(&mut admin, addr, dir, options, out).await {
                Ok(w) => *writer = Some(w),
                Err(stop) => return stop,
            }
        }
        let Some(w) = writer.as_mut() else { unreachable!("just started") };
        let from = w.last().0 + 1;
        let request = pb::FollowRequest { from_zxid: from, ..pb::FollowRequest::default() };
        let mut stream = match admin.follow_raw(request).await {
            Ok(reply) => reply.into_inner(),
            Err(status) => match follow_failed(addr, status) {
                Some(stop) => return stop,
                None => {
                    purged(addr, w, out);
                    *writer = None;
                    continue;
                }
            },
        };
        say(
            out,
            "following",
            format!("following {addr} from {}", zxid(from)),
            json!({ "member": addr, "from": zxid(from) }),
        );
        let mut synced = Instant::now();
        let mut dirty = false;
        loop {
            let flush_at = tokio::time::Instant::from_std(synced + SYNC_EVERY);
            let message = tokio::select! {
                m = tokio::time::timeout(QUIET, stream.message()) => m,
                () = tokio::time::sleep_until(flush_at), if dirty => {
                    if let Err(e) = w.sync() {
                        return fatal(e);
                    }
                    (synced, dirty) = (Instant::now(), false);
                    continue;
                }
            };
            let entry = match message {
                Ok(Ok(Some(entry))) => entry,
                Ok(Ok(None)) => return Stop::Member("the stream ended".into()),
                Ok(Err(status)) => match follow_failed(addr, status) {
                    Some(stop) => return stop,
                    None => {
                        purged(addr, w, out);
                        *writer = None;
                        break;
                    }
                },
                Err(_) => {
                    // Quiet: fine while the member serves (no writes), not if it stopped.
                    match dialer.status(addr).await {
                        Ok(s) if s.serving => {
                            // Only a member that serves resets the clock of --give-up-after-s:
                            // one that opens a stream and then fails must not.
                            *failing_since = None;
                            continue;
                        }
                        Ok(_) => return Stop::Member("it stopped serving".into()),
                        Err(e) => return member(e),
                    }
                }
            };
            if entry.raw.is_empty() {
                return Stop::Fatal(ClientError::InvalidArgument(format!(
                    "backup: {addr} streams transactions without their bytes (a server older than this zkctl?)"
                )));
            }
            match w.append(Zxid(entry.zxid), &entry.raw) {
                Ok(_) => (dirty, *failing_since) = (true, None),
                Err(e @ BackupError::OutOfOrder { .. }) => return Stop::Member(e.to_string()),
                Err(e) => return fatal(e),
            }
            if w.snapshot_due() {
                match w.roll() {
                    Ok(file) => say(
                        out,
                        "snapshot",
                        format!("snapshot at {} written to {}", file.zxid, file.path.display()),
                        json!({ "zxid": zxid(file.zxid.0), "file": file.path }),
                    ),
                    Err(e) => return fatal(e),
                }
                (synced, dirty) = (Instant::now(), false);
            }
        }
    }
}

/// What a failed Follow call means: None when the log needed was purged
/// (start over on this member), else whether another member may do better.
fn follow_failed(addr: &str, status: tonic::Status) -> Option<Stop> {
    use tonic::Code;
    match status.code() {
        Code::OutOfRange => None,
        Code::Unimplemented => Some(Stop::Fatal(ClientError::InvalidArgument(format!(
            "backup: {addr} does not serve FollowRaw (a server older than this zkctl?)"
        )))),
        Code::Unauthenticated | Code::PermissionDenied => Some(Stop::Fatal(rpc_error(addr, "follow", status))),
        _ => Some(Stop::Member(rpc_error(addr, "follow", status).to_string())),
    }
}

fn purged(addr: &str, w: &mut Writer, out: &Printer) {
    let last = w.last();
    // Whatever is buffered is kept: it is history up to `last`.
    let _ = w.sync();
    say(
        out,
        "purged",
        format!(
            "{addr} no longer has the log after {last} (purged): starting over from a fresh snapshot; the \
             transactions between {last} and it will be missing from the backup"
        ),
        json!({ "member": addr, "last": zxid(last.0) }),
    );
}

/// Starts the backup (or starts it over) from `addr`'s newest snapshot, taking one if it has none.
async fn start_from_snapshot(
    admin: &mut Admin,
    addr: &str,
    dir: &std::path::Path,
    options: Options,
    out: &Printer,
) -> Result<Writer, Stop> {
    let member = |what: &str, status: tonic::Status| Stop::Member(rpc_error(addr, what, status).to_string());
    let (chunks, at) = match download(admin, addr, 0).await {
        Ok(got) => got,
        Err(status) if status.code() == tonic::Code::NotFound => {
            let taken =
                admin.take_snapshot(pb::TakeSnapshotRequest {}).await.map_err(|s| member("take snapshot", s))?;
            download(admin, addr, taken.into_inner().zxid).await.map_err(|s| member("save snapshot", s))?
        }
        Err(status) => return Err(member("save snapshot", status)),
    };
    // The snapshot's time: its last transaction's, or else when the member wrote it.
    let time_ms = match admin.get_entry(pb::GetEntryRequest { zxid: at }).await {
        Ok(entry) => entry.into_inner().time_ms,
        Err(_) => match admin.list_snapshots(pb::ListSnapshotsRequest {}).await {
            Ok(list) => list.into_inner().snapshots.iter().find(|s| s.zxid == at).map_or(0, |s| s.created_ms),
            Err(status) => return Err(member("list snapshots", status)),
        },
    };
    let source = format!("snapshot {} from {addr}", zxid(at));
    let writer = Writer::start(dir, options, chunks, time_ms, &source).map_err(fatal)?;
    say(
        out,
        "started",
        format!("started {} from the {source}", dir.display()),
        json!({ "member": addr, "snapshot": zxid(at), "dir": dir }),
    );
    Ok(writer)
}

/// The chunks of `addr`'s snapshot at `at` (0: its newest), in order, and its zxid.
async fn download(admin: &mut Admin, addr: &str, at: u64) -> Result<(Vec<Vec<u8>>, u64), tonic::Status> {
    let mut stream = admin.save_snapshot(pb::SaveSnapshotRequest { zxid: at }).await?.into_inner();
    let (mut chunks, mut snapshot_zxid, mut expected) = (Vec::new(), 0u64, 0u32);
    while let Some(chunk) = stream.message().await? {
        if chunk.index as usize != chunks.len() {
            return Err(tonic::Status::data_loss(format!(
                "{addr}: snapshot chunk {} arrived where {} was due",
                chunk.index,
                chunks.len()
            )));
        }
        (snapshot_zxid, expected) = (chunk.zxid, chunk.count);
        chunks.push(chunk.data);
    }
    if chunks.is_empty() || chunks.len() != expected as usize {
        return Err(tonic::Status::unavailable(format!(
            "{addr}: the snapshot ended after {} of {expected} chunks",
            chunks.len()
        )));
    }
    Ok((chunks, snapshot_zxid))
}
