//! `zkctl import`: a member's data directory from Apache ZooKeeper's.

use crate::output::{Exit, Printer};
use serde_json::json;
use std::path::Path;
use zabkeeper::admin::zookeeper_import;
use zabkeeper_client::ClientError;

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
