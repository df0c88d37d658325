//! How `zkctl admin` shows what it got: aligned tables for people, one JSON
//! document per line for scripts.

use base64::Engine;
use serde_json::{json, Value};
use zabkeeper_proto::admin as pb;

/// Rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(rows.iter().map(|r| line(r.iter().map(String::as_str).collect())));
    out.join("\n")
}

/// A zxid as operators read it.
pub fn zxid(z: u64) -> String {
    format!("{z:#x}")
}

fn data_value(data: &[u8]) -> Value {
    json!({
        "text": std::str::from_utf8(data).ok(),
        "base64": base64::engine::general_purpose::STANDARD.encode(data),
    })
}

fn acl_value(acl: &[pb::Acl]) -> Value {
    acl.iter().map(|a| json!({ "scheme": a.scheme, "id": a.id, "perms": a.perms })).collect()
}

fn op_value(op: &pb::TxnOp) -> Value {
    let mut v = json!({ "type": op.r#type });
    let m = v.as_object_mut().expect("an object");
    if !op.path.is_empty() {
        m.insert("path".into(), json!(op.path));
    }
    match op.r#type.as_str() {
        "create" => {
            m.insert("data".into(), data_value(&op.data));
            m.insert("acl".into(), acl_value(&op.acl));
            m.insert("ephemeral_owner".into(), json!(format!("{:#x}", op.ephemeral_owner)));
            m.insert("parent_cversion".into(), json!(op.parent_cversion));
        }
        "setData" => {
            m.insert("data".into(), data_value(&op.data));
            m.insert("version".into(), json!(op.version));
        }
        "setACL" => {
            m.insert("acl".into(), acl_value(&op.acl));
            m.insert("version".into(), json!(op.version));
        }
        "createSession" => {
            m.insert("timeout_ms".into(), json!(op.timeout_ms));
        }
        "closeSession" => {
            m.insert("ephemerals".into(), json!(op.paths));
        }
        "error" => {
            m.insert("error".into(), json!(op.error));
            m.insert("code".into(), json!(op.error_code));
        }
        _ => {}
    }
    v
}

/// A log entry as JSON; `committed` is None when nobody knows (offline).
pub fn entry_json(e: &pb::LogEntry, committed: Option<bool>) -> Value {
    json!({
        "zxid": zxid(e.zxid),
        "session": format!("{:#x}", e.session_id),
        "cxid": e.cxid,
        "time_ms": e.time_ms,
        "type": e.r#type,
        "committed": committed,
        "bytes": e.size_bytes,
        "ops": e.ops.iter().map(op_value).collect::<Vec<_>>(),
        "txn": e.description,
    })
}

/// A log entry as one line of text.
pub fn entry_line(e: &pb::LogEntry, committed: Option<bool>) -> String {
    let mark = match committed {
        Some(true) => "",
        Some(false) => " (not committed)",
        None => "",
    };
    format!("{} session {:#x} cxid {} {}{mark}", zxid(e.zxid), e.session_id, e.cxid, e.description)
}

/// A log entry in full, for `log show`.
pub fn entry_detail(e: &pb::LogEntry, committed: Option<bool>) -> String {
    let mut out = vec![
        format!("zxid       {}", zxid(e.zxid)),
        format!("time       {} ({} ms)", crate::output::format_time(e.time_ms), e.time_ms),
        format!("session    {:#x} cxid {}", e.session_id, e.cxid),
        format!("type       {}", e.r#type),
        format!("bytes      {}", e.size_bytes),
        format!(
            "committed  {}",
            committed.map_or("unknown (read offline)".to_string(), |c| if c { "yes" } else { "no" }.to_string())
        ),
    ];
    for (i, op) in e.ops.iter().enumerate() {
        out.push(format!("op {i}       {}", op_value(op)));
    }
    out.join("\n")
}

/// A snapshot node as JSON.
pub fn node_json(n: &pb::SnapshotNode) -> Value {
    let s = n.stat.unwrap_or_default();
    json!({
        "path": n.path,
        "stat": {
            "czxid": s.czxid, "mzxid": s.mzxid, "ctime": s.ctime, "mtime": s.mtime, "version": s.version,
            "cversion": s.cversion, "aversion": s.aversion, "ephemeralOwner": s.ephemeral_owner,
            "pzxid": s.pzxid, "dataLength": s.data_length,
        },
        "acl": acl_value(&n.acl),
    })
}

/// A snapshot node as a table row.
pub fn node_row(n: &pb::SnapshotNode) -> Vec<String> {
    let s = n.stat.unwrap_or_default();
    vec![
        n.path.clone(),
        zxid(s.czxid as u64),
        zxid(s.mzxid as u64),
        s.version.to_string(),
        s.data_length.to_string(),
        if s.ephemeral_owner == 0 { "-".into() } else { format!("{:#x}", s.ephemeral_owner) },
    ]
}

/// Columns of [`node_row`].
pub const NODE_HEADER: [&str; 6] = ["PATH", "CZXID", "MZXID", "VERSION", "BYTES", "EPHEMERAL_OWNER"];

/// A snapshot's listing row and JSON.
pub fn snapshot_row(s: &pb::SnapshotInfo) -> Vec<String> {
    let when = if s.created_ms == 0 { "-".to_string() } else { crate::output::format_time(s.created_ms) };
    vec![zxid(s.zxid), s.size_bytes.to_string(), s.node_count.to_string(), s.chunks.to_string(), when]
}

/// Columns of [`snapshot_row`].
pub const SNAPSHOT_HEADER: [&str; 5] = ["ZXID", "BYTES", "NODES", "CHUNKS", "WRITTEN"];

/// A snapshot as JSON.
pub fn snapshot_json(s: &pb::SnapshotInfo) -> Value {
    json!({
        "zxid": zxid(s.zxid), "bytes": s.size_bytes, "nodes": s.node_count, "chunks": s.chunks,
        "created_ms": s.created_ms,
    })
}

/// One member's status as JSON.
pub fn status_json(s: &pb::StatusReply) -> Value {
    json!({
        "server_id": s.server_id, "role": s.role, "serving": s.serving, "leader_id": s.leader_id,
        "accepted_epoch": s.accepted_epoch, "current_epoch": s.current_epoch,
        "last_logged_zxid": zxid(s.last_logged_zxid),
        "last_committed_zxid": zxid(s.last_committed_zxid),
        "last_applied_zxid": zxid(s.last_applied_zxid),
        "last_snapshot_zxid": zxid(s.last_snapshot_zxid),
        "last_snapshot_error": (!s.last_snapshot_error.is_empty()).then_some(&s.last_snapshot_error),
        "nodes": s.node_count, "data_bytes": s.data_bytes, "sessions": s.session_count,
        "connections": s.connection_count, "watches": s.watch_count, "ephemerals": s.ephemeral_count,
        "synced_followers": s.synced_followers, "ensemble_size": s.ensemble_size,
        "uptime_ms": s.uptime_ms, "version": s.version,
        "disk_free_bytes": s.disk_free_bytes, "disk_low": s.disk_low,
        "disk_usage": s.disk_usage.as_ref().map(|d| json!({
            "log_bytes": d.log_bytes, "snapshot_bytes": d.snapshot_bytes,
            "sled_bytes": d.sled_bytes, "other_bytes": d.other_bytes,
        })),
        "followers": s.followers.iter().map(|f| json!({
            "id": f.id, "synced": f.synced, "acked_zxid": zxid(f.acked_zxid), "lag": f.lag,
        })).collect::<Vec<_>>(),
        "members": s.members.iter().map(member_json).collect::<Vec<_>>(),
    })
}

/// A member as JSON.
pub fn member_json(m: &pb::MemberInfo) -> Value {
    json!({
        "id": m.id, "peer_addr": m.peer_addr, "grpc_addr": m.grpc_addr,
        "client_addr": (!m.client_addr.is_empty()).then_some(&m.client_addr),
        "admin_addr": (!m.admin_addr.is_empty()).then_some(&m.admin_addr),
        "reachable": m.reachable, "self": m.is_self,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![vec!["1".to_string(), "leading".to_string()], vec!["22".to_string(), "-".to_string()]];
        assert_eq!(table(&["ID", "ROLE"], &rows), "ID  ROLE\n1   leading\n22  -");
    }
}
