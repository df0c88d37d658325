//! ZooKeeper's AdminServer commands (`org.apache.zookeeper.server.admin.Commands`,
//! 3.8/3.9): their names and aliases, and each one's JSON under ZooKeeper's
//! field names, rendered from the same [`Facts`] as the four-letter words.
//! Pure: the HTTP side (`super`) gathers the facts and sends the answer.

use crate::ops::facts::{self, Facts, Figure};
use serde_json::{json, Map, Value};
use zabkeeper_core::storage::SnapshotMeta;
use zabkeeper_store::DiskUsage;

/// How a command is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET /commands/<name>`.
    Get,
    /// `POST /commands/<name>` with a body.
    Post,
}

/// One command: its names (the first is ZooKeeper's primary name, which
/// answers carry in `command`), and what it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// The primary name, then the aliases.
    pub names: &'static [&'static str],
    /// Whether it answers only while the member serves (ZooKeeper's `isServerRequired`).
    pub server_required: bool,
    /// Whether it needs the admin token (ZooKeeper's `AuthRequest`).
    pub needs_token: bool,
    /// GET or POST.
    pub method: Method,
    /// Its four-letter word, if it has one: the command answers only when
    /// `four_letter_words` allows that word, so what an operator keeps off
    /// the client port (`envi`, `cons`, `dump`) stays off HTTP too.
    pub word: Option<&'static str>,
    /// One line on what it answers.
    pub about: &'static str,
}

impl Command {
    /// ZooKeeper's primary name.
    pub fn primary(&self) -> &'static str {
        self.names[0]
    }
}

const fn get(
    names: &'static [&'static str],
    word: Option<&'static str>,
    server_required: bool,
    about: &'static str,
) -> Command {
    Command { names, server_required, needs_token: false, method: Method::Get, word, about }
}

/// Every command served, sorted by primary name as ZooKeeper lists them.
/// `hash` also answers to `digest` (ours; ZooKeeper knows only `hash`).
pub const COMMANDS: &[Command] = &[
    get(&["configuration", "conf", "config"], Some("conf"), true, "this member's settings"),
    get(&["connection_stat_reset", "crst"], Some("crst"), true, "sets every connection's counters here back to zero"),
    get(&["connections", "cons"], Some("cons"), true, "every client connection here, with its session and counters"),
    get(&["dirs"], None, true, "bytes in the data directory (log and snapshots)"),
    get(&["dump"], Some("dump"), true, "sessions connected here by expiry time, and ephemerals by session"),
    get(&["environment", "env", "envi"], Some("envi"), false, "the process's environment"),
    get(&["get_trace_mask", "gtmk"], Some("gtmk"), false, "the text trace mask: which events are logged at TRACE"),
    get(&["hash", "digest"], None, true, "tree digests (none are kept: always empty)"),
    get(&["is_read_only", "isro"], Some("isro"), true, "whether the member serves read-only (never)"),
    get(&["last_snapshot", "lsnp"], None, true, "the newest snapshot's zxid and time"),
    get(&["leader", "lead"], None, true, "whether this member leads, and who does"),
    get(&["monitor", "mntr"], Some("mntr"), false, "the figures of mntr"),
    get(&["observers", "obsr"], None, true, "observers synced with this leader"),
    Command {
        names: &["restore", "rest"],
        server_required: true,
        needs_token: true,
        method: Method::Post,
        word: None,
        about: "loads a snapshot (ours or ZooKeeper's) into the ensemble's empty tree, through the leader",
    },
    get(&["ruok"], Some("ruok"), true, "answers while the member serves"),
    get(&["server_stats", "srvr"], Some("srvr"), true, "the figures of srvr"),
    get(&["set_trace_mask", "stmk"], Some("stmk"), false, "sets the text trace mask (traceMask=<decimal long>)"),
    Command {
        names: &["snapshot", "snap"],
        server_required: true,
        needs_token: true,
        method: Method::Get,
        word: None,
        about: "takes a snapshot; with streaming=true (the default) sends it",
    },
    get(&["stat_reset", "srst"], Some("srst"), true, "sets this member's request statistics back to zero"),
    get(&["stats", "stat"], Some("stat"), true, "srvr's figures and the connections"),
    get(&["voting_view"], None, true, "the voting members"),
    get(&["watch_summary", "wchs"], Some("wchs"), true, "counts of watches"),
    get(&["watches", "wchc"], Some("wchc"), true, "watched paths by session"),
    get(&["watches_by_path", "wchp"], Some("wchp"), true, "watching sessions by path"),
    get(&["zabstate"], None, false, "the Zab phase and last zxid"),
];

/// The command `name` names (a primary name or an alias).
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.names.contains(&name))
}

pub use crate::ops::facts::NOT_SERVING;

/// Figures read from storage for a few commands, gathered by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Extras {
    /// The data directory's disk usage (`srvr`, `stat`, `dirs`).
    pub disk: DiskUsage,
    /// The newest snapshot (`lsnp`).
    pub last_snapshot: Option<SnapshotMeta>,
    /// The text trace mask (`gtmk`, `stmk`).
    pub trace_mask: i64,
}

/// ZooKeeper's answer: the data, then `command` (the primary name) and `error`.
pub fn response(command: &str, error: Option<&str>, mut data: Map<String, Value>) -> Value {
    data.insert("command".into(), json!(command));
    data.insert("error".into(), error.map_or(Value::Null, |e| json!(e)));
    Value::Object(data)
}

/// The refusal of a command whose four-letter word `allowed` says is off
/// (ZooKeeper's words for a word off its whitelist), or None to go on.
pub fn refused_by_whitelist(command: &Command, allowed: impl Fn(&str) -> bool) -> Option<Value> {
    let word = command.word?;
    if allowed(word) {
        return None;
    }
    let why = format!("{word} is not executed because it is not in the whitelist (four_letter_words).");
    Some(response(command.primary(), Some(&why), Map::new()))
}

/// The answer to an unknown command, as ZooKeeper gives it (HTTP 200).
pub fn unknown(name: &str) -> Value {
    response(name, Some(&format!("Unknown command: {name}")), Map::new())
}

/// The JSON list `GET /commands` answers.
pub fn listing(base: &str) -> Value {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|c| {
            json!({
                "name": c.primary(),
                "names": c.names,
                "url": format!("{base}/{}", c.primary()),
                "method": if c.method == Method::Get { "GET" } else { "POST" },
                "needs_token": c.needs_token,
                "about": c.about,
            })
        })
        .collect();
    let mut data = Map::new();
    data.insert("commands".into(), Value::Array(commands));
    response("commands", None, data)
}

/// ZooKeeper's own listing: a link per primary name (what a browser gets).
pub fn listing_html(base: &str) -> String {
    COMMANDS.iter().map(|c| format!("<a href=\"{base}/{0}\">{0}</a>\n<br/>\n", c.primary())).collect()
}

fn figure(f: &Figure) -> Value {
    match f {
        Figure::Int(n) => json!(n),
        Figure::Float(x) => json!(x),
        Figure::Text(s) => json!(s),
    }
}

/// The answer to a GET command that needs nothing but facts (everything
/// but `snapshot` and `restore`). `facts` is None when the replica does
/// not answer (it is stopping).
pub fn answer(command: &Command, facts: Option<&Facts>, extras: &Extras) -> Value {
    let name = command.primary();
    let Some(f) = facts else { return response(name, Some(NOT_SERVING), Map::new()) };
    if command.server_required && !f.serving() {
        return response(name, Some(NOT_SERVING), Map::new());
    }
    let mut d = Map::new();
    let mut put = |k: &str, v: Value| {
        d.insert(k.to_string(), v);
    };
    match name {
        // The resets are done by the caller; ZooKeeper answers them with no data.
        "ruok" | "stat_reset" | "connection_stat_reset" => {}
        "get_trace_mask" | "set_trace_mask" => put("tracemask", json!(extras.trace_mask)),
        "server_stats" => server_stats(f, extras, &mut put),
        "stats" => {
            server_stats(f, extras, &mut put);
            put("connections", Value::Array(f.connections.iter().map(|c| connection(c, true)).collect()));
            put("secure_connections", json!([]));
        }
        "monitor" => {
            for (k, v) in f.monitor() {
                put(k, figure(&v));
            }
        }
        "configuration" => {
            for s in facts::settings(&f.config) {
                if let Some(key) = s.json {
                    put(key, figure(&s.value));
                }
            }
        }
        "connections" => {
            put("connections", Value::Array(f.connections.iter().map(|c| connection(c, false)).collect()));
            // TLS connections are listed with the others (the counters do not tell them apart).
            put("secure_connections", json!([]));
        }
        "dirs" => {
            // ZooKeeper's dataDir holds its snapshots, its dataLogDir the log.
            put("datadir_size", json!(extras.disk.total() - extras.disk.log));
            put("logdir_size", json!(extras.disk.log));
        }
        "dump" => {
            let expiry: Map<String, Value> = f
                .expiry_buckets()
                .into_iter()
                .map(|(at, ids)| (at.to_string(), json!(ids.iter().map(|s| s.0).collect::<Vec<_>>())))
                .collect();
            let ephemerals: Map<String, Value> =
                f.details.ephemerals.iter().map(|(s, paths)| (s.0.to_string(), json!(paths))).collect();
            put("expiry_time_to_session_ids", Value::Object(expiry));
            put("session_id_to_ephemeral_paths", Value::Object(ephemerals));
        }
        "environment" => {
            for (k, v) in facts::environment() {
                put(k, json!(v));
            }
        }
        "hash" => put("digests", json!([])),
        "is_read_only" => put("read_only", json!(false)),
        "last_snapshot" => {
            let (zxid, seconds) = match extras.last_snapshot {
                Some(s) if s.created_ms > 0 => (s.zxid.0, s.created_ms / 1000),
                Some(s) => (s.zxid.0, -1),
                // ZooKeeper's Long.toHexString(-1L) and -1 when it has none.
                None => (u64::MAX, -1),
            };
            put("zxid", json!(format!("{zxid:x}")));
            put("timestamp", json!(seconds));
        }
        "leader" => {
            put("is_leader", json!(f.report.status.role == zabkeeper_core::zab::Role::Leading));
            put("leader_id", json!(f.report.status.leader.map_or(-1, |l| i64::try_from(l).unwrap_or(-1))));
            put("leader_ip", json!(f.leader_host().unwrap_or_default()));
        }
        "observers" => {
            let synced = f.synced_observers();
            let observers: Vec<Value> = synced
                .iter()
                .map(|(id, acked)| {
                    let peer = f.config.members.iter().find(|m| m.id == *id).map(|m| m.peer_addr.to_string());
                    json!({ "remote_socket_address": peer.unwrap_or_default(), "sid": id, "last_zxid": acked })
                })
                .collect();
            put("synced_observers", json!(synced.len()));
            put("observers", Value::Array(observers));
        }
        "voting_view" => put("current_config", voting_view(f)),
        "watch_summary" => {
            let (sessions, paths, total) = f.watch_summary();
            put("num_connections", json!(sessions));
            put("num_paths", json!(paths));
            put("num_total_watches", json!(total));
        }
        "watches" => {
            let by_session: Map<String, Value> =
                f.details.watches.iter().map(|(s, paths)| (s.0.to_string(), json!(paths))).collect();
            put("session_id_to_watched_paths", Value::Object(by_session));
        }
        "watches_by_path" => {
            let by_path: Map<String, Value> = f
                .watches_by_path()
                .into_iter()
                .map(|(p, ids)| (p.to_string(), json!(ids.iter().map(|s| s.0).collect::<Vec<_>>())))
                .collect();
            put("path_to_session_ids", Value::Object(by_path));
        }
        "zabstate" => zab_state(f, &mut put),
        other => return response(other, Some(&format!("{other} is not answered here")), Map::new()),
    }
    response(name, None, d)
}

/// ZooKeeper's `BufferStats` as JSON.
fn sizes(s: crate::telemetry::stats::Sizes) -> Value {
    json!({ "last_buffer_size": s.last, "min_buffer_size": s.min, "max_buffer_size": s.max })
}

/// `srvr`'s JSON: ZooKeeper's `ServerStats` fields this server keeps.
fn server_stats(f: &Facts, extras: &Extras, put: &mut impl FnMut(&str, Value)) {
    let s = f.server_stats();
    put("client_response", sizes(f.stats.client_response));
    if f.leads_an_ensemble() {
        put("proposal_stats", sizes(f.stats.proposals));
    }
    put("version", json!(facts::full_version()));
    put("read_only", json!(false));
    put(
        "server_stats",
        json!({
            "packets_sent": s.packets_sent,
            "packets_received": s.packets_received,
            "provider_null": false,
            "server_state": s.server_state,
            "outstanding_requests": s.outstanding,
            "min_latency": s.min_latency,
            "avg_latency": s.avg_latency,
            "max_latency": s.max_latency,
            "data_dir_size": extras.disk.total() - extras.disk.log,
            "log_dir_size": extras.disk.log,
            "last_processed_zxid": s.last_processed_zxid,
            "num_alive_client_connections": s.connections,
            "uptime": s.uptime_ms,
            "client_response_stats": sizes(f.stats.client_response),
        }),
    );
    put("node_count", json!(s.node_count));
}

/// One connection as ZooKeeper's `getConnectionInfo(brief)` shows it.
fn connection(c: &facts::Connection, brief: bool) -> Value {
    let (received, sent) = c.figures.as_ref().map_or((0, 0), |f| (f.received, f.sent));
    let mut v = json!({
        "remote_socket_address": c.remote,
        // Java NIO's OP_READ: the connection is always read.
        "interest_ops": 1,
        "outstanding_requests": c.queued,
        "packets_received": received,
        "packets_sent": sent,
    });
    if let (false, Some(f), Value::Object(m)) = (brief, &c.figures, &mut v) {
        let more = json!({
            "session_id": c.session.map_or(0, |s| s.0),
            "last_operation": f.last_op,
            "established": f.established_ms,
            "session_timeout": c.timeout_ms,
            "last_cxid": f.last_xid,
            "last_zxid": f.last_zxid,
            "last_response_time": f.last_response_ms,
            "last_latency": f.last_latency_ms,
            "min_latency": f.min_latency_ms.round() as i64,
            "avg_latency": f.avg_latency_ms.round() as i64,
            "max_latency": f.max_latency_ms.round() as i64,
        });
        if let Value::Object(more) = more {
            m.extend(more);
        }
    }
    v
}

/// `voting_view`: each voter by id. Elections and Zab share one peer port
/// here, so the election address is the peer address.
fn voting_view(f: &Facts) -> Value {
    let mut view = Map::new();
    let voters: Vec<(u64, String, String)> = match &f.configuration {
        Some(c) => c
            .current()
            .members()
            .iter()
            .filter(|m| m.votes())
            .map(|m| (m.id, m.peer_address.clone(), m.client_address.clone()))
            .collect(),
        None => f
            .config
            .members
            .iter()
            .filter(|m| m.role == zabkeeper_config::MemberRole::Participant)
            .map(|m| {
                let peer = format!("{}:{}", m.peer_addr, m.peer_addr.port());
                (m.id, peer, m.client_addr.as_ref().map(|a| a.to_string()).unwrap_or_default())
            })
            .collect(),
    };
    for (id, peer, client) in voters {
        // ZooKeeper's host:quorumPort:electionPort.
        let (quorum, election) = match peer.rsplit_once(':') {
            Some((rest, election_port)) => {
                let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
                (rest.to_string(), format!("{host}:{election_port}"))
            }
            None => (peer.clone(), peer.clone()),
        };
        view.insert(
            id.to_string(),
            json!({
                "server_addresses": [quorum],
                "election_addresses": [election],
                "client_address": client,
                "learner_type": "participant",
            }),
        );
    }
    Value::Object(view)
}

/// ZooKeeper's `MultipleAddresses` as Jackson writes it, for one address.
fn addresses(host: &str, port: u16) -> Value {
    let one = format!("{host}:{port}");
    json!({
        "empty": false,
        "all_addresses": [one],
        "all_reachable_addresses": [one],
        "one": one,
        "reachable_address": one,
        "wildcard_addresses": [format!("0.0.0.0:{port}")],
        "all_ports": [port],
        "all_host_strings": [host],
        "all_reachable_addresses_or_all": [one],
        "reachable_or_one": one,
    })
}

fn zab_state(f: &Facts, put: &mut impl FnMut(&str, Value)) {
    let me = f.config.me();
    let peer = addresses(me.peer_addr.host(), me.peer_addr.port());
    let zxid = f.report.last_applied.0;
    let voting = match &f.configuration {
        Some(c) => c.is_voter(f.config.id),
        None => me.role == zabkeeper_config::MemberRole::Participant,
    };
    put("myid", json!(f.config.id));
    put("is_leader", json!(f.report.status.role == zabkeeper_core::zab::Role::Leading));
    put("quorum_address", peer.clone());
    put("election_address", peer);
    put("client_address", json!(me.client_addr.as_ref().map(|a| a.to_string()).unwrap_or_default()));
    put("voting", json!(voting));
    put("last_zxid", json!(format!("0x{zxid:x}")));
    put("zab_epoch", json!(zxid >> 32));
    put("zab_counter", json!(zxid & 0xffff_ffff));
    put("zabstate", json!(f.zab_state()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::facts::tests::leader;
    use zabkeeper_core::ids::Zxid;

    fn run(name: &str) -> Value {
        let extras = Extras {
            disk: DiskUsage { log: 4096, snapshots: 8192, sled: 100, other: 19 },
            last_snapshot: Some(SnapshotMeta {
                zxid: Zxid(0x1_0000_0003),
                bytes: 10,
                chunks: 1,
                nodes: 5,
                created_ms: 1_700_000_000_123,
            }),
            trace_mask: 306,
        };
        answer(find(name).expect("a command"), Some(&leader()), &extras)
    }

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().expect("an object").keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn every_alias_names_its_command_and_answers_carry_command_and_error() {
        for c in COMMANDS {
            for n in c.names {
                assert_eq!(find(n), Some(c));
            }
            if c.method == Method::Get && !c.needs_token {
                let v = answer(c, Some(&leader()), &Extras::default());
                assert_eq!(v["command"], json!(c.primary()), "{v}");
                assert_eq!(v["error"], Value::Null, "{v}");
            }
        }
        let primaries: Vec<_> = COMMANDS.iter().map(Command::primary).collect();
        let mut sorted = primaries.clone();
        sorted.sort_unstable();
        assert_eq!(primaries, sorted, "listed sorted, as ZooKeeper lists them");
        assert_eq!(unknown("nosuch"), json!({"command": "nosuch", "error": "Unknown command: nosuch"}));
    }

    #[test]
    fn srvr_and_stat_use_zookeepers_fields() {
        let v = run("srvr");
        let fields = ["client_response", "command", "error", "node_count", "proposal_stats", "read_only"];
        assert_eq!(keys(&v), [&fields[..], &["server_stats", "version"]].concat());
        let sizes = json!({"last_buffer_size": 188, "min_buffer_size": 22, "max_buffer_size": 400});
        assert_eq!((&v["client_response"], &v["server_stats"]["client_response_stats"]), (&sizes, &sizes));
        assert_eq!(
            v["proposal_stats"],
            json!({"last_buffer_size": 186, "min_buffer_size": 48, "max_buffer_size": 186})
        );
        assert_eq!(v["server_stats"]["server_state"], "leader");
        assert_eq!(v["server_stats"]["avg_latency"], json!(1.0));
        assert_eq!(v["server_stats"]["max_latency"], json!(3));
        assert_eq!(v["server_stats"]["data_dir_size"], json!(8192 + 100 + 19), "everything but the log");
        assert_eq!(v["server_stats"]["log_dir_size"], json!(4096));
        assert_eq!(v["node_count"], json!(7));
        let v = run("stat");
        assert_eq!(v["command"], "stats");
        assert_eq!(
            keys(&v["connections"][0]),
            ["interest_ops", "outstanding_requests", "packets_received", "packets_sent", "remote_socket_address"]
        );
        assert_eq!(v["secure_connections"], json!([]));
    }

    #[test]
    fn cons_dump_and_watches_key_sessions_by_decimal_id() {
        let v = run("cons");
        let c = &v["connections"][0];
        assert_eq!((c["session_id"].clone(), c["last_operation"].clone()), (json!(16), json!("GETD")));
        assert_eq!((c["session_timeout"].clone(), c["max_latency"].clone()), (json!(4000), json!(3)));
        let v = run("dump");
        assert_eq!(v["expiry_time_to_session_ids"], json!({"5100": [16]}));
        assert_eq!(v["session_id_to_ephemeral_paths"], json!({"16": ["/e"]}));
        assert_eq!(run("wchc")["session_id_to_watched_paths"], json!({"16": ["/a", "/b"]}));
        assert_eq!(run("wchp")["path_to_session_ids"], json!({"/a": [16], "/b": [16]}));
        let v = run("wchs");
        assert_eq!((v["num_connections"].clone(), v["num_paths"].clone()), (json!(1), json!(2)));
        assert_eq!(v["num_total_watches"], json!(2));
    }

    #[test]
    fn mntr_conf_and_envi_are_flat_maps() {
        let v = run("mntr");
        assert_eq!(v["command"], "monitor");
        assert_eq!((v["znode_count"].clone(), v["learners"].clone()), (json!(7), json!(2)));
        assert!(v["avg_latency"].is_f64() && v["min_latency"].is_i64(), "{v}");
        let v = run("conf");
        assert_eq!(v["command"], "configuration");
        assert_eq!((v["client_port"].clone(), v["tick_time"].clone()), (json!(2181), json!(100)));
        assert_eq!((v["data_dir"].clone(), v["server_id"].clone()), (json!("/var/lib/zk1"), json!(1)));
        assert!(v.get("clientPort").is_none(), "JSON names, not zoo.cfg's");
        let v = run("envi");
        assert_eq!(v["command"], "environment");
        assert!(v["zookeeper.version"].as_str().is_some_and(|s| s.starts_with("3.9.0-zabkeeper-")));
    }

    #[test]
    fn leadership_and_membership_commands() {
        let v = run("lead");
        assert_eq!((v["is_leader"].clone(), v["leader_id"].clone()), (json!(true), json!(1)));
        assert_eq!(v["leader_ip"], "127.0.0.1");
        let v = run("voting_view");
        assert_eq!(keys(&v["current_config"]), ["1", "2"], "the observer does not vote");
        let one = &v["current_config"]["1"];
        assert_eq!(one["server_addresses"], json!(["127.0.0.1:2888"]));
        assert_eq!(one["election_addresses"], json!(["127.0.0.1:2888"]));
        assert_eq!(one["learner_type"], "participant");
        let v = run("zabstate");
        assert_eq!((v["last_zxid"].clone(), v["zab_epoch"].clone()), (json!("0x100000005"), json!(1)));
        assert_eq!((v["zab_counter"].clone(), v["zabstate"].clone()), (json!(5), json!("broadcast")));
        assert_eq!(v["quorum_address"]["all_ports"], json!([2888]));
        assert_eq!(v["voting"], json!(true));
        let v = run("obsr");
        assert_eq!(v["synced_observers"], json!(1));
        assert_eq!(v["observers"][0]["sid"], json!(3));
        assert_eq!(run("isro")["read_only"], json!(false));
        assert_eq!(run("hash")["digests"], json!([]));
        assert_eq!(run("digest")["command"], "hash");
    }

    #[test]
    fn lsnp_gives_hex_zxid_and_seconds_or_zookeepers_none() {
        let v = run("lsnp");
        assert_eq!((v["zxid"].clone(), v["timestamp"].clone()), (json!("100000003"), json!(1_700_000_000)));
        let none = answer(find("lsnp").expect("lsnp"), Some(&leader()), &Extras::default());
        assert_eq!((none["zxid"].clone(), none["timestamp"].clone()), (json!("ffffffffffffffff"), json!(-1)));
    }

    #[test]
    fn a_member_not_serving_answers_only_what_zookeeper_answers_then() {
        let mut f = leader();
        f.report.status.serving = false;
        let srvr = answer(find("srvr").expect("srvr"), Some(&f), &Extras::default());
        assert_eq!(srvr, json!({"command": "server_stats", "error": NOT_SERVING}));
        let mntr = answer(find("mntr").expect("mntr"), Some(&f), &Extras::default());
        assert_eq!((mntr["server_state"].clone(), mntr["error"].clone()), (json!("looking"), Value::Null));
        let stopped = answer(find("zabstate").expect("zabstate"), None, &Extras::default());
        assert_eq!(stopped["error"], NOT_SERVING);
    }

    #[test]
    fn commands_with_a_four_letter_word_follow_its_whitelist() {
        let only_srvr = |w: &str| w == "srvr";
        assert_eq!(refused_by_whitelist(find("srvr").expect("srvr"), only_srvr), None);
        let envi = refused_by_whitelist(find("environment").expect("envi"), only_srvr).expect("refused");
        assert_eq!(envi["command"], "environment");
        assert!(envi["error"].as_str().is_some_and(|e| e.starts_with("envi is not executed")));
        assert_eq!(refused_by_whitelist(find("zabstate").expect("zabstate"), only_srvr), None, "no word");
        let words: Vec<_> = COMMANDS.iter().filter_map(|c| c.word).collect();
        for w in &words {
            assert!(zabkeeper_core::wire::four_letter::ALL.iter().any(|f| f.name() == *w), "{w} is a four-letter word");
        }
    }

    #[test]
    fn the_trace_mask_commands_answer_the_mask_and_the_resets_nothing_more() {
        for name in ["gtmk", "get_trace_mask", "stmk"] {
            assert_eq!(keys(&run(name)), ["command", "error", "tracemask"], "{name}");
            assert_eq!(run(name)["tracemask"], 306);
        }
        for name in ["srst", "crst"] {
            assert_eq!(keys(&run(name)), ["command", "error"], "{name}");
        }
        assert_eq!(run("crst")["command"], "connection_stat_reset");
    }

    #[test]
    fn the_listing_names_every_command() {
        let v = listing("/commands");
        let names: Vec<&str> =
            v["commands"].as_array().expect("a list").iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names.len(), COMMANDS.len());
        assert_eq!(v["commands"][0]["url"], "/commands/configuration");
        assert!(listing_html("/commands").starts_with("<a href=\"/commands/configuration\">configuration</a>\n<br/>\n"));
    }
}
