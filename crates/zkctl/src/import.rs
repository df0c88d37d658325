//! `zkctl import`: a member's data directory from Apache ZooKeeper's;
//! `zkctl export`: Apache ZooKeeper's snapshot of ours, the way back.

use crate::output::{Exit, Printer};
use serde_json::json;
use std::path::Path;
use zabkeeper_client::ClientError;
use zabkeeper_datadir::zookeeper_export::{self, Source};
use zabkeeper_datadir::zookeeper_import;

/// Imports ZooKeeper's data in `zookeeper_data` (logs in `log_dir` if apart) into `data_dir`.
pub fn run(zookeeper_data: &Path, log_dir: Option<&Path>, data_dir: &Path, out: &Printer) -> Result<Exit, ClientError> {
    let report = zookeeper_import::import(zookeeper_data, log_dir, data_dir)
        .map_err(|e| ClientError::InvalidArgument(format!("import: {e}")))?;
    let zxid = |z: i64| format!("{z:#x}");
    if out.json {
        out.doc(json!({
            "data_dir": data_dir,
            "snapshot": report.snapshot,
            "snapshot_zxid": zxid(report.snapshot_zxid),
            "incomplete_snapshots": report.incomplete_snapshots,
            "logs": report.logs,
            "torn": report.torn.iter().map(|(f, o)| json!({ "file": f, "offset": o })).collect::<Vec<_>>(),
            "last_zxid": zxid(report.last_zxid.0 as i64),
            "epoch": report.epoch,
            "nodes": report.nodes,
            "sessions": report.sessions,
            "replayed": report.stats.replayed,
            "dead_ephemerals": report.stats.dead_ephemerals,
        }));
        return Ok(Exit::Ok);
    }
    for path in &report.incomplete_snapshots {
        out.line(&format!("passed over incomplete snapshot {} (as ZooKeeper does)", path.display()));
    }
    for (path, offset) in &report.torn {
        out.line(&format!(
            "{} ends in a record cut short at offset {offset}: never acknowledged, ignored (as ZooKeeper does)",
            path.display()
        ));
    }
    out.line(&format!(
        "imported {} nodes and {} open sessions into {}: snapshot {} ({}) and {} transactions from {} log file(s); \
         last zxid {}, next writes in an epoch after {}",
        report.nodes,
        report.sessions,
        data_dir.display(),
        report.snapshot.display(),
        zxid(report.snapshot_zxid),
        report.stats.replayed,
        report.logs.len(),
        zxid(report.last_zxid.0 as i64),
        report.epoch,
    ));
    if report.stats.dead_ephemerals > 0 {
        out.line(&format!(
            "deleted {} ephemerals of sessions already closed, as ZooKeeper does on restart",
            report.stats.dead_ephemerals
        ));
    }
    Ok(Exit::Ok)
}

/// Loads ZooKeeper's data in `zookeeper_data` into the running ensemble at
/// `server` (an admin address), whose tree must be empty.
pub async fn load(
    zookeeper_data: &Path,
    log_dir: Option<&Path>,
    server: &str,
    options: &crate::admin::AdminOptions,
    timeout: std::time::Duration,
    out: &Printer,
) -> Result<Exit, ClientError> {
    let (chunks, report) = zookeeper_import::read(zookeeper_data, log_dir)
        .map_err(|e| ClientError::InvalidArgument(format!("import: {e}")))?;
    let what = format!(
        "{} nodes and {} open sessions of ZooKeeper's {} (last zxid {:#x})",
        report.nodes,
        report.sessions,
        zookeeper_data.display(),
        report.last_zxid.0
    );
    let dialer = crate::admin::Dialer::new(options, timeout)?;
    crate::admin::load::load(server, &dialer, &chunks, report.epoch, &what, out).await?;
    Ok(Exit::Ok)
}

/// Exports the tree in `snapshot` (a saved file) or `data_dir` (a stopped
/// member's newest snapshot) as Apache ZooKeeper's snapshot at `to`.
pub fn export(snapshot: Option<&Path>, data_dir: Option<&Path>, to: &Path, out: &Printer) -> Result<Exit, ClientError> {
    let source = match (snapshot, data_dir) {
        (Some(file), _) => Source::SnapshotFile(file),
        (None, Some(dir)) => Source::DataDir(dir),
        (None, None) => {
            return Err(ClientError::InvalidArgument("export: give --snapshot FILE or --data-dir DIR".into()))
        }
    };
    let report =
        zookeeper_export::export(source, to).map_err(|e| ClientError::InvalidArgument(format!("export: {e}")))?;
    let zxid = format!("{:#x}", report.zxid.0);
    let later = report.later_entries.map(|(first, last)| (format!("{:#x}", first.0), format!("{:#x}", last.0)));
    if out.json {
        out.doc(json!({
            "file": report.file,
            "zxid": zxid,
            "nodes": report.nodes,
            "sessions": report.sessions,
            "later_entries": later.map(|(first, last)| json!({ "first": first, "last": last })),
        }));
        return Ok(Exit::Ok);
    }
    out.line(&format!(
        "wrote {} nodes and {} open sessions at zxid {zxid} to {}: ZooKeeper starts from it as \
         <dataDir>/version-2/snapshot.{:x}",
        report.nodes,
        report.sessions,
        report.file.display(),
        report.zxid.0
    ));
    if let Some((first, last)) = later {
        out.line(&format!(
            "not included: transactions {first} to {last} logged after that snapshot (take a snapshot on a running \
             member first: zkctl admin snapshot take)"
        ));
    }
    if report.sessions > 0 {
        out.line("sessions go back with their timeouts, not their passwords: clients open new sessions on ZooKeeper");
    }
    Ok(Exit::Ok)
}
