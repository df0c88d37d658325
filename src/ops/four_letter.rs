//! Answers to four-letter words, in ZooKeeper's text formats (ops tools parse
//! `srvr`'s `Mode:` line and `mntr`'s tab-separated keys). A word not in the
//! configured whitelist gets ZooKeeper's refusal text. The figures come from
//! [`Facts`], which the AdminServer's JSON commands render too.

use super::facts::{self, Facts, NOT_SERVING};
use crate::runtime::handle::Handle;
use futures::future::BoxFuture;
use std::fmt::Write;
use zabkeeper_core::wire::four_letter::FourLetterWord;

pub use super::facts::VERSION;

/// The text answer to `word` (`mask`: the one `stmk` carries).
pub async fn answer(word: FourLetterWord, mask: Option<i64>, handle: &Handle) -> String {
    if word == FourLetterWord::TelnetClose {
        return String::new();
    }
    let name = word.name();
    if !handle.config.four_letter_word_enabled(name) {
        return format!("{name} is not executed because it is not in the whitelist.\n");
    }
    // As ZooKeeper's, the trace mask is read and set whether or not the member serves.
    match (word, mask) {
        (FourLetterWord::Gtmk, _) => return handle.trace_mask.get().to_string(),
        (FourLetterWord::Stmk, Some(mask)) => {
            handle.trace_mask.set(mask);
            return mask.to_string();
        }
        _ => {}
    }
    match Facts::gather(handle).await {
        // Only mntr, dirs and conf show the disk: the others skip the walk of the data directory.
        Some(facts) if matches!(word, FourLetterWord::Mntr | FourLetterWord::Dirs | FourLetterWord::Conf) => {
            render(word, &facts.with_disk().await)
        }
        Some(facts) if matches!(word, FourLetterWord::Srst | FourLetterWord::Crst) => {
            serving_or(&facts, || reset(word, handle))
        }
        Some(facts) => render(word, &facts),
        None if word == FourLetterWord::Isro => "null".into(),
        None => format!("{NOT_SERVING}\n"),
    }
}

/// `srst` and `crst`: the member's request statistics, or every
/// connection's, start afresh (`srvr`, `stat` and `cons` show them; the
/// Prometheus counters are never reset, as counters must not be).
fn reset(word: FourLetterWord, handle: &Handle) -> String {
    if word == FourLetterWord::Srst {
        handle.stats.reset();
        "Server stats reset.\n".into()
    } else {
        handle.conns.reset_all();
        "Connection stats reset.\n".into()
    }
}

/// [`answer`] in the form the ZooKeeper port takes it
/// (`crate::ports::zookeeper::Words`).
pub fn answer_boxed(word: FourLetterWord, mask: Option<i64>, handle: Handle) -> BoxFuture<'static, String> {
    Box::pin(async move { answer(word, mask, &handle).await })
}

/// The text of `word` from `facts` (the whitelist already checked).
pub fn render(word: FourLetterWord, facts: &Facts) -> String {
    match word {
        FourLetterWord::Ruok => "imok".into(),
        // As ZooKeeper's: "null" where no server runs (a member without a
        // quorum serves nothing here), never "rw" on a member that does not serve.
        FourLetterWord::Isro if !facts.serving() => "null".into(),
        FourLetterWord::Isro => "rw".into(),
        FourLetterWord::Srvr => serving_or(facts, || version_line() + &server_stats(facts)),
        FourLetterWord::Stat => serving_or(facts, || {
            let mut out = version_line() + "Clients:\n";
            for c in &facts.connections {
                out.push_str(&connection_line(c, false));
            }
            out.push('\n');
            out + &server_stats(facts)
        }),
        FourLetterWord::Mntr => mntr(facts),
        // ZooKeeper's dataDir holds its snapshots, its dataLogDir the log;
        // both are in one data directory here, told apart by what they are.
        FourLetterWord::Dirs => serving_or(facts, || {
            let disk = facts.disk.unwrap_or_default();
            format!("datadir_size: {}\nlogdir_size: {}\n", disk.total() - disk.log, disk.log)
        }),
        FourLetterWord::Conf => conf(facts),
        FourLetterWord::Cons => {
            let mut out = String::new();
            for c in &facts.connections {
                out.push_str(&connection_line(c, true));
            }
            out.push('\n');
            out
        }
        FourLetterWord::Envi => {
            let mut out = String::from("Environment:\n");
            for (k, v) in facts::environment() {
                let _ = writeln!(out, "{k}={v}");
            }
            out
        }
        FourLetterWord::Wchs => {
            let (sessions, paths, total) = facts.watch_summary();
            format!("{sessions} connections watching {paths} paths\nTotal watches:{total}\n")
        }
        FourLetterWord::Wchc => {
            let mut out = String::new();
            for (session, paths) in &facts.details.watches {
                let _ = writeln!(out, "0x{:x}", session.0);
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out
        }
        FourLetterWord::Wchp => {
            let mut out = String::new();
            for (path, sessions) in facts.watches_by_path() {
                let _ = writeln!(out, "{path}");
                for s in sessions {
                    let _ = writeln!(out, "\t0x{:x}", s.0);
                }
            }
            out
        }
        FourLetterWord::Dump => {
            let mut out = String::from("SessionTracker dump:\n");
            if facts.report.status.role == zabkeeper_core::zab::Role::Leading {
                // The leader's tracker: every session, by expiry time.
                let buckets = facts.expiry_buckets();
                let total: usize = buckets.values().map(Vec::len).sum();
                let _ = writeln!(out, "Session Sets ({})/({total}):", buckets.len());
                for (at, sessions) in &buckets {
                    let _ = writeln!(out, "{} expire at {}:", sessions.len(), java_date(*at));
                    for s in sessions {
                        let _ = writeln!(out, "\t0x{:x}", s.0);
                    }
                }
            } else {
                let mut sessions = facts.details.sessions.clone();
                sessions.sort_unstable();
                let _ = writeln!(out, "Global Sessions({}):", sessions.len());
                for (s, timeout_ms) in &sessions {
                    let _ = writeln!(out, "0x{:x}\t{timeout_ms}ms", s.0);
                }
            }
            let ephemerals = &facts.details.ephemerals;
            let _ = writeln!(out, "ephemeral nodes dump:\nSessions with Ephemerals ({}):", ephemerals.len());
            for (session, paths) in ephemerals {
                let _ = writeln!(out, "0x{:x}:", session.0);
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push_str(&connections_dump(facts));
            out
        }
        other => format!("{} is not executed because it is not supported by this server.\n", other.name()),
    }
}

fn serving_or(facts: &Facts, f: impl FnOnce() -> String) -> String {
    if facts.serving() {
        f()
    } else {
        format!("{NOT_SERVING}\n")
    }
}

fn version_line() -> String {
    format!("Zookeeper version: {}\n", facts::full_version())
}

/// One connection as ZooKeeper's `dumpConnectionInfo` prints it: brief for
/// `stat`, with the session and the last operation for `cons`.
fn connection_line(c: &facts::Connection, full: bool) -> String {
    let (received, sent) = c.figures.as_ref().map_or((0, 0), |f| (f.received, f.sent));
    let mut out = format!(" /{}[1](queued={},recved={received},sent={sent}", c.remote, c.queued);
    if let (true, Some(session), Some(f)) = (full, c.session, &c.figures) {
        let _ = write!(
            out,
            ",sid=0x{:x},lop={},est={},to={},lcxid=0x{:x},lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            session.0,
            f.last_op,
            f.established_ms,
            c.timeout_ms,
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
fn server_stats(facts: &Facts) -> String {
    let s = facts.server_stats();
    let mut out = format!(
        "Latency min/avg/max: {}/{:.4}/{}\nReceived: {}\nSent: {}\nConnections: {}\nOutstanding: {}\nZxid: 0x{:x}\nMode: {}\nNode count: {}\n",
        s.min_latency,
        s.avg_latency,
        s.max_latency,
        s.packets_received,
        s.packets_sent,
        s.connections,
        s.outstanding,
        s.last_processed_zxid,
        s.server_state,
        s.node_count
    );
    if facts.leads_an_ensemble() {
        let p = facts.stats.proposals;
        let _ = writeln!(out, "Proposal sizes last/min/max: {}/{}/{}", p.last, p.min, p.max);
    }
    out
}

/// `mntr`: ZooKeeper's keys with `zk_`, then three this server has always
/// printed (zk_followers is ZooKeeper 3.4's name for 3.5's zk_learners).
fn mntr(facts: &Facts) -> String {
    let mut out = String::new();
    for (k, v) in facts.monitor() {
        let _ = writeln!(out, "zk_{k}\t{}", v.text());
    }
    let _ = writeln!(out, "zk_last_zxid\t0x{:x}", facts.report.last_applied.0);
    let _ = writeln!(out, "zk_expired_sessions\t{}", facts.report.counters.expired_sessions);
    if facts.leads_an_ensemble() {
        let _ = writeln!(out, "zk_followers\t{}", facts.report.followers.len());
    }
    out
}

/// `dump`'s last part, as ZooKeeper's: the connections by when they expire
/// unless heard from (their session's timeout after they were last heard).
fn connections_dump(facts: &Facts) -> String {
    let mut sets: std::collections::BTreeMap<i64, Vec<&facts::Connection>> = std::collections::BTreeMap::new();
    for c in &facts.connections {
        sets.entry(facts.expiry_bucket(c.expires_at_ms())).or_default().push(c);
    }
    let mut out = format!("Connections dump:\nConnections Sets ({})/({}):\n", sets.len(), facts.connections.len());
    for (at, conns) in &sets {
        let _ = writeln!(out, "{} expire at {}:", conns.len(), java_date(*at));
        for c in conns {
            let _ = writeln!(out, "\tip: /{} sessionId: 0x{:x}", c.remote, c.session.map_or(0, |s| s.0));
        }
    }
    out
}

/// A time (ms since the epoch) as Java's `Date.toString` writes it in UTC:
/// `Wed Dec 02 19:59:53 UTC 2026`.
fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (days, secs) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000) / 1000);
    let (year, month, day) = zabkeeper_store::clock::civil_from_days(days);
    let weekday = DAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month_name = MONTHS[usize::try_from(month.saturating_sub(1)).unwrap_or(0)];
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{weekday} {month_name} {day:02} {h:02}:{m:02}:{s:02} UTC {year}")
}

/// `conf`, in ZooKeeper 3.8's order with its keys (and ours after them),
/// then the membership as `/zookeeper/config` gives it.
fn conf(facts: &Facts) -> String {
    let c = &facts.config;
    let disk = facts.disk.unwrap_or_default();
    let peer_port = c.me().peer_addr.port();
    let mut out = String::new();
    for s in facts::settings(c) {
        let Some(key) = s.text else { continue };
        let _ = writeln!(out, "{key}={}", s.value.text());
        // ZooKeeper's keys that are figures of the run, not settings.
        let _ = match key {
            "dataDir" => writeln!(out, "dataDirSize={}", disk.total() - disk.log),
            "dataLogDir" => writeln!(out, "dataLogSize={}", disk.log),
            // The OS default backlog, which ZooKeeper shows as -1.
            "maxSessionTimeout" => writeln!(out, "clientPortListenBacklog=-1"),
            // Elections and Zab share the peer port; 3 is ZooKeeper's only
            // algorithm (fast leader election), and peerType its LearnerType.
            "syncLimit" => writeln!(
                out,
                "electionAlg=3\nelectionPort={peer_port}\nquorumPort={peer_port}\npeerType={}",
                u8::from(facts.is_observer(c.id))
            ),
            _ => Ok(()),
        };
    }
    let _ = writeln!(out, "membership: ");
    match &facts.configuration {
        Some(configuration) => {
            let _ = writeln!(out, "{}", configuration.current());
            let _ = writeln!(out, "version={:x}", configuration.version.0);
        }
        None => {
            for m in &c.members {
                let role = if c.observers().contains(&m.id) { "observer" } else { "participant" };
                let client = m.client_addr.as_ref().map_or(String::new(), ToString::to_string);
                let (host, port) = (m.peer_addr.host(), m.peer_addr.port());
                let _ = writeln!(out, "server.{}={host}:{port}:{port}:{role};{client}", m.id);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::facts::tests::leader;

    #[test]
    fn text_words_render_the_shared_figures() {
        let f = leader();
        let srvr = render(FourLetterWord::Srvr, &f);
        assert!(srvr.contains("Latency min/avg/max: 0/1.0000/3\n"), "{srvr}");
        assert!(srvr.contains("Mode: leader\n") && srvr.contains("Zxid: 0x100000005\n"), "{srvr}");
        let mntr = render(FourLetterWord::Mntr, &f);
        for line in ["zk_server_state\tleader", "zk_synced_followers\t1", "zk_followers\t2", "zk_avg_latency\t1.0000"] {
            assert!(mntr.lines().any(|l| l == line), "{line} in {mntr}");
        }
        let cons = render(FourLetterWord::Cons, &f);
        assert!(cons.starts_with(" /127.0.0.1:5000[1](queued=0,recved=3,sent=4,sid=0x10,lop=GETD,"), "{cons}");
        assert_eq!(render(FourLetterWord::Wchp, &f), "/a\n\t0x10\n/b\n\t0x10\n");
        assert_eq!(render(FourLetterWord::Wchc, &f), "0x10\n\t/a\n\t/b\n");
        assert!(render(FourLetterWord::Conf, &f).contains("tickTime=100\n"));
        // The fixture's data directory: a 1 MiB log, 3 MiB of snapshots, sled's 4 KiB and 19 B else.
        let dirs = render(FourLetterWord::Dirs, &f);
        assert_eq!(dirs, format!("datadir_size: {}\nlogdir_size: {}\n", (3 << 20) + 4096 + 19, 1 << 20));
    }

    /// ZooKeeper 3.8's `conf` on a quorum member, keys in its order (read
    /// off Debian's 3.8 server), with ours (clientPortAddress, snapCount, ...) beside them.
    #[test]
    fn conf_gives_zookeepers_keys_in_its_order_and_the_membership() {
        const ZOOKEEPER: [&str; 18] = [
            "clientPort",
            "secureClientPort",
            "dataDir",
            "dataDirSize",
            "dataLogDir",
            "dataLogSize",
            "tickTime",
            "maxClientCnxns",
            "minSessionTimeout",
            "maxSessionTimeout",
            "clientPortListenBacklog",
            "serverId",
            "initLimit",
            "syncLimit",
            "electionAlg",
            "electionPort",
            "quorumPort",
            "peerType",
        ];
        let conf = render(FourLetterWord::Conf, &leader());
        let keys: Vec<&str> = conf.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
        let ours: Vec<&str> = keys.iter().copied().filter(|k| ZOOKEEPER.contains(k)).collect();
        assert_eq!(ours, ZOOKEEPER, "{conf}");
        for line in ["dataDirSize=3149843", "dataLogSize=1048576", "electionAlg=3", "electionPort=2888", "peerType=0"] {
            assert!(conf.lines().any(|l| l == line), "{line} in {conf}");
        }
        let membership = conf.split_once("membership: \n").expect("a membership").1;
        assert!(membership.starts_with("server.1=127.0.0.1:2888:2888:participant;127.0.0.1:2181\n"), "{conf}");
    }

    #[test]
    fn the_leader_shows_proposal_sizes_and_its_uptime_and_every_member_reply_sizes() {
        let f = leader();
        let srvr = render(FourLetterWord::Srvr, &f);
        assert!(srvr.ends_with("Node count: 7\nProposal sizes last/min/max: 186/48/186\n"), "{srvr}");
        let mntr = render(FourLetterWord::Mntr, &f);
        for line in [
            "zk_last_proposal_size\t186",
            "zk_min_proposal_size\t48",
            "zk_max_proposal_size\t186",
            "zk_leader_uptime\t4000",
            "zk_last_client_response_size\t188",
            "zk_min_client_response_size\t22",
            "zk_max_client_response_size\t400",
        ] {
            assert!(mntr.lines().any(|l| l == line), "{line} in {mntr}");
        }
        let mut follower = leader();
        follower.report.status.role = zabkeeper_core::zab::Role::Following;
        assert!(!render(FourLetterWord::Srvr, &follower).contains("Proposal sizes"));
        let mntr = render(FourLetterWord::Mntr, &follower);
        assert!(
            !mntr.contains("proposal_size")
                && !mntr.contains("leader_uptime")
                && mntr.contains("zk_last_client_response_size")
        );
    }

    #[test]
    fn dates_read_as_javas() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(1_796_241_593_000), "Wed Dec 02 19:59:53 UTC 2026");
        assert_eq!(java_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
    }

    /// ZooKeeper 3.8's `dump` (read off Debian's server): a follower lists
    /// every session with its timeout, the leader its sessions by expiry;
    /// both then the ephemerals and the connections by expiry.
    #[test]
    fn dump_is_in_zookeepers_formats_on_leader_and_follower() {
        let leader = leader();
        let dump = render(FourLetterWord::Dump, &leader);
        let lines: Vec<&str> = dump.lines().collect();
        assert_eq!(lines[..2], ["SessionTracker dump:", "Session Sets (1)/(1):"], "{dump}");
        assert!(
            lines[2].starts_with("1 expire at ") && lines[2].ends_with(" UTC 1970:") && lines[3] == "\t0x10",
            "{dump}"
        );
        assert!(dump.contains("ephemeral nodes dump:\nSessions with Ephemerals ("), "{dump}");
        assert!(dump.contains("Connections dump:\nConnections Sets (1)/(1):\n"), "{dump}");
        assert!(dump.contains("\tip: /127.0.0.1:5000 sessionId: 0x10\n"), "{dump}");
        let mut everyone = leader.clone();
        everyone.details.expiries.push((zabkeeper_core::ids::SessionId(0x20), 60_000));
        let dump = render(FourLetterWord::Dump, &everyone);
        assert!(
            dump.starts_with("SessionTracker dump:\nSession Sets (2)/(2):\n"),
            "sessions connected elsewhere too: {dump}"
        );
        assert!(dump.contains("1 expire at Thu Jan 01 00:01:00 UTC 1970:\n\t0x20\n"), "{dump}");
        let mut follower = leader;
        follower.report.status.role = zabkeeper_core::zab::Role::Following;
        let dump = render(FourLetterWord::Dump, &follower);
        let sessions = follower.details.sessions.len();
        assert!(dump.starts_with(&format!("SessionTracker dump:\nGlobal Sessions({sessions}):\n0x10\t")), "{dump}");
    }

    #[test]
    fn a_member_not_serving_says_so() {
        let mut f = leader();
        f.report.status.serving = false;
        assert_eq!(render(FourLetterWord::Srvr, &f), format!("{NOT_SERVING}\n"));
        assert_eq!(render(FourLetterWord::Dirs, &f), format!("{NOT_SERVING}\n"));
        assert_eq!(render(FourLetterWord::Isro, &f), "null", "never rw on a member that does not serve");
        assert!(render(FourLetterWord::Mntr, &f).contains("zk_server_state\tlooking\n"));
        f.report.status.serving = true;
        assert_eq!(render(FourLetterWord::Isro, &f), "rw");
    }
}
