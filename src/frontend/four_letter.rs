//! Answers to four-letter words, in ZooKeeper's text formats (ops tools parse
//! `srvr`'s `Mode:` line and `mntr`'s tab-separated keys). A word not in the
//! configured whitelist gets ZooKeeper's refusal text.

use crate::handle::{Details, Handle, StatusReport};
use crate::replica::ConnSummary;
use crate::wire::four_letter::FourLetterWord;
use std::fmt::Write;

/// The version line tools see.
pub const VERSION: &str = concat!("3.9.0-zabkeeper-", env!("CARGO_PKG_VERSION"));

/// The text answer to `word`.
pub async fn answer(word: FourLetterWord, handle: &Handle) -> String {
    if word == FourLetterWord::TelnetClose {
        return String::new();
    }
    let name = word.name();
    if !handle.config.four_letter_word_enabled(name) {
        return format!("{name} is not executed because it is not in the whitelist.\n");
    }
    let Some(report) = handle.status_report().await else {
        return "This ZooKeeper instance is not currently serving requests\n".into();
    };
    let details = handle.details().await.unwrap_or_default();
    let outstanding: usize = details.connections.iter().map(|c| c.queued).sum();
    match word {
        FourLetterWord::Ruok => "imok".into(),
        FourLetterWord::Isro => "rw".into(),
        FourLetterWord::Srvr => serving_or(&report, || version_line() + &server_stats(handle, &report, outstanding)),
        FourLetterWord::Stat => serving_or(&report, || {
            let mut out = version_line() + "Clients:\n";
            for c in &details.connections {
                out.push_str(&connection_line(handle, c, &details, false));
            }
            out.push('\n');
            out + &server_stats(handle, &report, outstanding)
        }),
        FourLetterWord::Mntr => mntr(handle, &report, outstanding),
        FourLetterWord::Conf => conf(handle),
        FourLetterWord::Cons => {
            let mut out = String::new();
            for c in &details.connections {
                out.push_str(&connection_line(handle, c, &details, true));
            }
            out.push('\n');
            out
        }
        FourLetterWord::Envi => envi(),
        FourLetterWord::Wchs => {
            let sessions = details.watches.len();
            let paths: std::collections::BTreeSet<&String> =
                details.watches.iter().flat_map(|(_, p)| p.iter()).collect();
            format!("{sessions} connections watching {} paths\nTotal watches:{}\n", paths.len(), report.watches)
        }
        FourLetterWord::Dump => {
            let mut out = format!("SessionTracker dump:\nGlobal Sessions({}):\n", report.sessions);
            let _ = writeln!(out, "ephemeral nodes dump:\nSessions with Ephemerals ({}):", details.ephemerals.len());
            for (session, paths) in &details.ephemerals {
                let _ = writeln!(out, "0x{:x}:", session.0);
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out
        }
        other => format!("{} is not executed because it is not supported by this server.\n", other.name()),
    }
}

fn serving_or(report: &StatusReport, f: impl FnOnce() -> String) -> String {
    if report.status.serving {
        f()
    } else {
        "This ZooKeeper instance is not currently serving requests\n".into()
    }
}

fn mode(handle: &Handle, report: &StatusReport) -> &'static str {
    handle.config.role_name(report.status.role)
}

fn version_line() -> String {
    format!("Zookeeper version: {VERSION}, built on unknown\n")
}

/// One connection as ZooKeeper's `dumpConnectionInfo` prints it: brief for
/// `stat`, with the session and the last operation for `cons`.
fn connection_line(handle: &Handle, c: &ConnSummary, details: &Details, full: bool) -> String {
    let figures = handle.conns.get(c.conn);
    let peer = figures.as_ref().and_then(|f| f.peer).map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let (received, sent) = figures.as_ref().map_or((0, 0), |f| (f.received, f.sent));
    let mut out = format!(" /{peer}[1](queued={},recved={received},sent={sent}", c.queued);
    if let (true, Some(session), Some(f)) = (full, c.session, figures) {
        let timeout = details.sessions.iter().find(|(id, _)| *id == session).map_or(0, |(_, t)| *t);
        let _ = write!(
            out,
            ",sid=0x{:x},lop={},est={},to={timeout},lcxid=0x{:x},lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            session.0,
            f.last_op,
            f.established_ms,
            f.last_xid,
            f.last_zxid,
            f.last_response_ms,
            f.last_latency_ms,
            f.min_latency_ms as u64,
            f.avg_latency_ms as u64,
            f.max_latency_ms as u64,
        );
    }
    out.push_str(")\n");
    out
}

/// The body `srvr` and `stat` share (ZooKeeper's `ServerStats.toString`).
fn server_stats(handle: &Handle, report: &StatusReport, outstanding: usize) -> String {
    let stats = handle.stats.snapshot();
    format!(
        "Latency min/avg/max: {:.0}/{:.4}/{:.0}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {outstanding}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
        stats.min_ms,
        stats.avg_ms,
        stats.max_ms,
        stats.received,
        stats.sent,
        report.connections,
        report.last_applied.0,
        mode(handle, report),
        report.nodes
    )
}

fn mntr(handle: &Handle, report: &StatusReport, outstanding: usize) -> String {
    let stats = handle.stats.snapshot();
    let state = if report.status.serving { mode(handle, report) } else { "looking" };
    let mut lines = vec![
        ("zk_version", VERSION.to_string()),
        ("zk_server_state", state.to_string()),
        ("zk_avg_latency", format!("{:.4}", stats.avg_ms)),
        ("zk_max_latency", format!("{:.0}", stats.max_ms)),
        ("zk_min_latency", format!("{:.0}", stats.min_ms)),
        ("zk_packets_received", stats.received.to_string()),
        ("zk_packets_sent", stats.sent.to_string()),
        ("zk_num_alive_connections", report.connections.to_string()),
        ("zk_outstanding_requests", outstanding.to_string()),
        ("zk_znode_count", report.nodes.to_string()),
        ("zk_watch_count", report.watches.to_string()),
        ("zk_ephemerals_count", report.ephemerals.to_string()),
        ("zk_approximate_data_size", report.data_bytes.to_string()),
        ("zk_global_sessions", report.sessions.to_string()),
        ("zk_last_zxid", format!("0x{:x}", report.last_applied.0)),
        ("zk_expired_sessions", report.counters.expired_sessions.to_string()),
    ];
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        lines.push(("zk_open_file_descriptor_count", fds.count().to_string()));
    }
    if report.status.role == crate::zab::Role::Leading && !handle.config.standalone() {
        // As the leader sees them: connected (syncing or synced), and synced.
        lines.push(("zk_followers", report.followers.len().to_string()));
        lines.push(("zk_synced_followers", report.followers.iter().filter(|f| f.synced).count().to_string()));
        lines.push(("zk_pending_syncs", report.pending_syncs.to_string()));
    }
    let mut out = String::new();
    for (k, v) in lines {
        let _ = writeln!(out, "{k}\t{v}");
    }
    out
}

fn conf(handle: &Handle) -> String {
    let c = &handle.config;
    let me = c.me();
    let mut out = String::new();
    if let Some(client) = &me.client_addr {
        let _ = writeln!(out, "clientPort={}", client.port());
        let _ = writeln!(out, "clientPortAddress={}", client.host());
    }
    let _ = writeln!(out, "secureClientPort=-1");
    let _ = writeln!(out, "dataDir={}", me.data_dir.display());
    let _ = writeln!(out, "dataLogDir={}", me.data_dir.display());
    let _ = writeln!(out, "tickTime={}", c.tick_ms);
    // ZooKeeper's maxClientCnxns is the per-address limit (0: none).
    let _ = writeln!(out, "maxClientCnxns={}", c.limits.max_connections_per_address);
    let _ = writeln!(out, "minSessionTimeout={}", c.min_session_timeout_ms);
    let _ = writeln!(out, "maxSessionTimeout={}", c.max_session_timeout_ms);
    let _ = writeln!(out, "serverId={}", c.id);
    let _ = writeln!(out, "initLimit={}", c.init_limit_ticks);
    let _ = writeln!(out, "syncLimit={}", c.sync_limit_ticks);
    let _ = writeln!(out, "snapCount={}", c.snapshot_every);
    let _ = writeln!(out, "autopurge.snapRetainCount={}", c.snapshots_retained);
    let _ = writeln!(out, "jute.maxbuffer={}", c.max_data_bytes);
    let _ = writeln!(out, "membership: ");
    for m in &c.members {
        let client = m.client_addr.as_ref().map_or(String::new(), |a| format!(";{a}"));
        let _ = writeln!(out, "server.{}={}:{}:participant{client}", m.id, m.peer_addr.host(), m.peer_addr.port());
    }
    out
}

fn envi() -> String {
    let mut out = String::from("Environment:\n");
    let _ = writeln!(out, "zookeeper.version={VERSION}");
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let _ = writeln!(out, "host.name={host}");
    let _ = writeln!(out, "os.name={}", std::env::consts::OS);
    let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
    if let Ok(dir) = std::env::current_dir() {
        let _ = writeln!(out, "user.dir={}", dir.display());
    }
    let _ = writeln!(out, "process.id={}", std::process::id());
    out
}
