//! Three members on three hosts: each member in a Linux network namespace
//! of its own with its own IP on a bridge this test creates, members and
//! clients reaching each other by host names the test maps (`zk-1`..`zk-3`
//! in each namespace's /etc/hosts, which `ip netns exec` puts in place),
//! members binding 0.0.0.0 and advertising their names, TLS on every port
//! (mutual between members). Then real network faults, not process kills:
//!
//! * a follower cut off (its link down), then healed;
//! * the leader isolated from both followers while its own clients still
//!   reach it: the old leader stops acknowledging writes within syncLimit,
//!   the majority elects another and its clients' sessions live on;
//! * packet loss and delay on the leader's link (`tc netem`, or where the
//!   kernel has no `sch_netem`, iptables' statistic match for the loss and
//!   netfilter's queue to a delaying worker for the delay);
//! * a rolling restart of all three members under a write load;
//! * a member with another member's certificate, then with none on its
//!   peer links: refused.
//!
//! After each: exactly one leader serves writes, every member converges,
//! and every acknowledged write is on every member. Clients are writer
//! processes in a client namespace (this test binary run again as a worker,
//! speaking the ZooKeeper protocol over TLS with the `zookeeper-client`
//! crate) that print each write as it is acknowledged; the delayer is such a
//! worker too, in the impaired member's namespace.
//!
//! Needs root (network namespaces), iproute2 and iptables: `make test-multi-host`,
//! which CI runs. Elsewhere it says why it is skipped. Everything it creates
//! (namespaces, /etc/netns entries, processes by PID) is removed at the end.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One tick of the ensemble, and syncLimit in ticks: the old leader must
/// stop acknowledging within `SYNC_LIMIT_TICKS * TICK_MS`.
const TICK_MS: u64 = 50;
const SYNC_LIMIT_TICKS: u64 = 20;
/// Members.
const SIZE: u8 = 3;
/// Set in a worker's environment: what it is to do.
const WORKER: &str = "ZABKEEPER_TEST_MULTI_HOST_WORKER";

/// Runs a command, returning its stdout, or why it failed.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn ip(args: &[&str]) {
    if let Err(e) = run("ip", args) {
        panic!("{e}");
    }
}

/// The test's hosts: a switch namespace holding a bridge, one namespace per
/// member and one for clients, each with a veth into the bridge.
struct Network {
    prefix: String,
    names: Vec<String>,
}

impl Network {
    fn member_ns(&self, id: u8) -> String {
        format!("{}-{id}", self.prefix)
    }

    fn client_ns(&self) -> String {
        format!("{}-c", self.prefix)
    }

    fn address(id: u8) -> String {
        format!("10.213.0.{id}")
    }

    /// Creates the hosts, or says why it cannot (not root, no iproute2).
    fn create() -> Result<Network, String> {
        if run("id", &["-u"]).map(|uid| uid.trim() != "0").unwrap_or(true) {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        run("ip", &["-V"]).map_err(|e| format!("iproute2 missing ({e})"))?;
        let prefix = format!("zkmh{}", std::process::id() % 100_000);
        let mut net = Network { prefix, names: Vec::new() };
        let switch = format!("{}-sw", net.prefix);
        run("ip", &["netns", "add", &switch]).map_err(|e| format!("cannot create a network namespace: {e}"))?;
        net.names.push(switch.clone());
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for id in 1..=SIZE {
            hosts.push_str(&format!("{} zk-{id}\n", Network::address(id)));
        }
        hosts.push_str("10.213.0.100 client\n");
        let hosts_of = |ns: &str| PathBuf::from("/etc/netns").join(ns);
        let mut hosts_list: Vec<(String, String)> =
            (1..=SIZE).map(|id| (net.member_ns(id), Network::address(id))).collect();
        hosts_list.push((net.client_ns(), "10.213.0.100".into()));
        for (n, (ns, addr)) in hosts_list.iter().enumerate() {
            ip(&["netns", "add", ns]);
            net.names.push(ns.clone());
            let port = format!("p{n}");
            ip(&["link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", &port, "netns", &switch]);
            ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            std::fs::create_dir_all(hosts_of(ns)).expect("create /etc/netns entry");
            std::fs::write(hosts_of(ns).join("hosts"), &hosts).expect("write hosts");
        }
        Ok(net)
    }

    /// Cuts member `id` off (its link down) or brings it back.
    fn link(&self, id: u8, up: bool) {
        ip(&["-n", &self.member_ns(id), "link", "set", "eth0", if up { "up" } else { "down" }]);
    }

    /// Drops every packet between `a` and `b` (both ways), or lets them through again.
    fn partition(&self, a: u8, b: u8, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        for (from, to) in [(a, b), (b, a)] {
            ip(&["-n", &self.member_ns(from), "route", verb, "blackhole", &format!("{}/32", Network::address(to))]);
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in self.names.iter().rev() {
            let _ = run("ip", &["netns", "del", ns]);
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
        // Remove /etc/netns itself only if nothing else uses it.
        let _ = std::fs::remove_dir("/etc/netns");
    }
}

/// Packet loss and delay on one member's link: `tc netem` where the kernel
/// has `sch_netem`; else iptables' statistic match drops packets and a
/// worker holds every other packet of the link in netfilter's queue for the
/// delay before letting it through.
enum Impairment {
    Netem,
    Netfilter(Worker),
}

/// Added to each direction of the impaired link.
const DELAY_MS: u64 = 20;

impl Impairment {
    /// Adds loss and delay on member `id`'s link; says what was added, or
    /// why nothing could be.
    fn add(hosts: &Hosts, id: u8) -> Result<(Impairment, String), String> {
        let ns = hosts.net.member_ns(id);
        let delay = format!("{DELAY_MS}ms");
        let netem = ["-n", &ns, "qdisc", "add", "dev", "eth0", "root", "netem", "delay", &delay, "loss", "5%"];
        if run("tc", &netem).is_ok() {
            return Ok((Impairment::Netem, format!("tc netem: delay {DELAY_MS} ms, loss 5%")));
        }
        let log = hosts.dir.path().join(format!("delayer-{id}.log"));
        let delayer = Worker::start(&ns, &format!("delay;{DELAY_MS}"), log);
        delayer.wait_for(|events| events.iter().any(|(_, e)| *e == WorkerEvent::Ready), Duration::from_secs(10));
        let iptables = |args: &[&str]| {
            let args: Vec<&str> = ["netns", "exec", &ns, "iptables"].iter().chain(args).copied().collect();
            run("ip", &args).map_err(|e| format!("neither tc netem nor iptables: {e}"))
        };
        for (chain, dir) in [("INPUT", "-i"), ("OUTPUT", "-o")] {
            let lose = ["-m", "statistic", "--mode", "random", "--probability", "0.05", "-j", "DROP"];
            iptables(&[&["-A", chain, dir, "eth0"][..], &lose].concat())?;
            iptables(&["-A", chain, dir, "eth0", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"])?;
        }
        let what =
            format!("iptables: loss 5% and a delay of {DELAY_MS} ms each way through NFQUEUE (no sch_netem here)");
        Ok((Impairment::Netfilter(delayer), what))
    }

    /// Removes it; returns how many packets were delayed in user space.
    fn remove(self, net: &Network, id: u8) -> Option<u64> {
        let ns = net.member_ns(id);
        match self {
            Impairment::Netem => {
                let _ = run("tc", &["-n", &ns, "qdisc", "del", "dev", "eth0", "root"]);
                None
            }
            Impairment::Netfilter(delayer) => {
                let _ = run("ip", &["netns", "exec", &ns, "iptables", "-F"]);
                let events = delayer.finish();
                events.into_iter().find_map(|e| if let WorkerEvent::Delayed(n) = e { Some(n) } else { None })
            }
        }
    }
}

/// A member process running in its namespace.
struct Member {
    id: u8,
    child: Option<Child>,
    log: PathBuf,
}

/// The ensemble on the test's hosts.
struct Hosts {
    net: Network,
    dir: tempfile::TempDir,
    config: PathBuf,
    members: Vec<Member>,
}

impl Hosts {
    fn start(net: Network) -> Hosts {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path().display().to_string();
        write_certificates(dir.path());
        let mut toml = format!(
            "tick_ms = {TICK_MS}\ninit_limit_ticks = 40\nsync_limit_ticks = {SYNC_LIMIT_TICKS}\n\
             min_session_timeout_ms = 1000\nmax_session_timeout_ms = 60000\nsnapshot_every = 500\n\
             four_letter_words = [\"*\"]\nbind_host = \"0.0.0.0\"\ndata_dir = \"{d}/data-{{id}}\"\n"
        );
        for id in 1..=SIZE {
            toml.push_str(&format!(
                "\n[[server]]\nid = {id}\npeer_addr = \"zk-{id}:2888\"\ngrpc_addr = \"zk-{id}:3181\"\n\
                 secure_client_addr = \"zk-{id}:2281\"\nadmin_addr = \"127.0.0.1:4181\"\n"
            ));
        }
        toml.push_str(&format!(
            "\n[tls]\ncert_file = \"{d}/member-{{id}}.pem\"\nkey_file = \"{d}/member-{{id}}-key.pem\"\n\
             ca_file = \"{d}/ca.pem\"\ngrpc = true\npeer = true\n"
        ));
        let config = dir.path().join("ensemble.toml");
        std::fs::write(&config, toml).expect("write config");
        let members =
            (1..=SIZE).map(|id| Member { id, child: None, log: dir.path().join(format!("zk{id}.log")) }).collect();
        let mut hosts = Hosts { net, dir, config, members };
        for id in 1..=SIZE {
            hosts.spawn(id);
        }
        hosts
    }

    fn spawn(&mut self, id: u8) {
        self.spawn_with_env(id, &[]);
    }

    /// Starts member `id` with `ZABKEEPER_*` overrides in its environment.
    fn spawn_with_env(&mut self, id: u8, env: &[(&str, String)]) {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.net.member_ns(id)]).arg(support::server_binary());
        command.arg("--config").arg(&self.config).args(["--id", &id.to_string()]);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let child = support::start_member(command, id, &self.members[id as usize - 1].log);
        self.members[id as usize - 1].child = Some(child);
    }

    /// Stops member `id` with SIGTERM (by PID), as a rolling restart does.
    fn terminate(&mut self, id: u8) {
        let Some(mut child) = self.members[id as usize - 1].child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn log(&self, id: u8) -> String {
        std::fs::read_to_string(&self.members[id as usize - 1].log).unwrap_or_default()
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `zkctl admin status` on member `id`, from its own host (the admin
    /// port stays on each member's loopback).
    fn status(&self, id: u8) -> Option<serde_json::Value> {
        let zkctl = support::cli_binary().display().to_string();
        let ns = self.net.member_ns(id);
        let args = ["netns", "exec", &ns, &zkctl, "--admin", "127.0.0.1:4181", "--timeout-ms", "1000", "--json"];
        let out = run("ip", &[&args[..], &["admin", "status"]].concat()).ok()?;
        serde_json::from_str(out.trim()).ok()
    }

    /// Waits until every member in `ids` answers and serves, exactly one of
    /// them leads, and it counts every other as a synced follower (with
    /// `quiet`, once writes have stopped: also all have applied the same
    /// zxid); returns the leader.
    fn converged(&self, ids: &[u8], quiet: bool, within: Duration) -> u8 {
        let deadline = Instant::now() + within;
        loop {
            let statuses: Vec<Option<serde_json::Value>> = ids.iter().map(|&id| self.status(id)).collect();
            if let Some(leader) = Hosts::agreed(ids, &statuses, quiet) {
                return leader;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = ids.iter().map(|&id| format!("--- member {id}\n{}", self.log(id))).collect();
                panic!("members {ids:?} did not converge within {within:?}: {statuses:?}\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The leader, if `statuses` (of `ids`) show a converged ensemble.
    fn agreed(ids: &[u8], statuses: &[Option<serde_json::Value>], quiet: bool) -> Option<u8> {
        let s: Vec<&serde_json::Value> = statuses.iter().flatten().collect();
        if s.len() != ids.len() || !s.iter().all(|s| s["serving"] == true) {
            return None;
        }
        let leaders: Vec<(u8, &serde_json::Value)> =
            ids.iter().copied().zip(s.iter().copied()).filter(|(_, s)| s["role"] == "leader").collect();
        let [(leader, status)] = leaders[..] else { return None };
        let synced: BTreeSet<u64> =
            status["synced_followers"].as_array()?.iter().filter_map(serde_json::Value::as_u64).collect();
        let all_synced = ids.iter().filter(|&&id| id != leader).all(|&id| synced.contains(&u64::from(id)));
        let applied: BTreeSet<String> = s.iter().map(|s| s["last_applied_zxid"].to_string()).collect();
        (all_synced && (!quiet || applied.len() == 1)).then_some(leader)
    }

    /// Members that say they lead and serve.
    fn serving_leaders(&self) -> Vec<u8> {
        (1..=SIZE)
            .filter(|&id| self.status(id).is_some_and(|s| s["role"] == "leader" && s["serving"] == true))
            .collect()
    }

    /// The children of `path` as member `id` holds them (zkctl over TLS from the client host).
    fn children(&self, id: u8, path: &str) -> BTreeSet<String> {
        let zkctl = support::cli_binary().display().to_string();
        let ca = self.ca().display().to_string();
        let server = format!("zk-{id}:3181");
        let ns = self.net.client_ns();
        let args = ["netns", "exec", &ns, &zkctl, "--server", &server, "--cacert", &ca, "ls", path];
        match run("ip", &args) {
            Ok(out) => out.lines().map(str::to_string).collect(),
            Err(e) => panic!("ls {path} on member {id}: {e}"),
        }
    }

    /// Starts a writer in the client host, with a session on `servers`
    /// (host names), creating `/mh/<label>/<n>` one after another.
    fn writer(&self, label: &str, servers: &[u8]) -> Writer {
        let connect: Vec<String> = servers.iter().map(|id| format!("zk-{id}:2281")).collect();
        let spec = format!("writer;{label};{};{}", connect.join(","), self.ca().display());
        let log = self.dir.path().join(format!("writer-{label}.log"));
        let writer = Writer { label: label.to_string(), worker: Worker::start(&self.net.client_ns(), &spec, log) };
        writer.wait_acks(1, Duration::from_secs(30));
        writer
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            let keep = std::env::temp_dir().join(format!("zabkeeper-multi-host-failed-{}", std::process::id()));
            if std::fs::create_dir_all(&keep).is_ok() {
                for m in &self.members {
                    let _ = std::fs::copy(&m.log, keep.join(format!("zk{}.log", m.id)));
                }
                eprintln!("member logs kept in {}", keep.display());
            }
        }
    }
}

/// The ensemble's CA, and each member's certificate for its host name.
fn write_certificates(dir: &Path) {
    let key = rcgen::KeyPair::generate().expect("CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).expect("CA");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write CA");
    let issuer = rcgen::Issuer::new(params, key);
    for id in 1..=SIZE {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![format!("zk-{id}")])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("sign");
        std::fs::write(dir.join(format!("member-{id}.pem")), cert.pem()).expect("write certificate");
        std::fs::write(dir.join(format!("member-{id}-key.pem")), key.serialize_pem()).expect("write key");
    }
}

/// What a worker reports, a line each.
#[derive(Clone, Debug, PartialEq)]
enum WorkerEvent {
    /// It is ready (the delayer has bound its queue).
    Ready,
    /// Write `n` acknowledged.
    Ack(u64),
    /// Write `n` got ConnectionLoss; it is retried.
    Loss(u64),
    /// Any other error: a client must not see one.
    Error(String),
    /// The session expired.
    Expired,
    /// The delayer held this many packets, at its end.
    Delayed(u64),
}

impl WorkerEvent {
    fn parse(line: &str) -> Option<WorkerEvent> {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "READY" => Some(WorkerEvent::Ready),
            "ACK" => rest.parse().ok().map(WorkerEvent::Ack),
            "LOSS" => rest.parse().ok().map(WorkerEvent::Loss),
            "ERR" => Some(WorkerEvent::Error(rest.to_string())),
            "EXPIRED" => Some(WorkerEvent::Expired),
            "DELAYED" => rest.parse().ok().map(WorkerEvent::Delayed),
            _ => None,
        }
    }

    fn say(&self) {
        let line = match self {
            WorkerEvent::Ready => "READY".to_string(),
            WorkerEvent::Ack(n) => format!("ACK {n}"),
            WorkerEvent::Loss(n) => format!("LOSS {n}"),
            WorkerEvent::Error(e) => format!("ERR {e}"),
            WorkerEvent::Expired => "EXPIRED".to_string(),
            WorkerEvent::Delayed(n) => format!("DELAYED {n}"),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// This test binary run again inside a namespace with `WORKER` set, and
/// what it reported, with when. It stops when its stdin closes.
struct Worker {
    /// Its stderr.
    log: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<Vec<(Instant, WorkerEvent)>>>,
}

impl Worker {
    fn start(ns: &str, spec: &str, log: PathBuf) -> Worker {
        let stderr = std::fs::File::create(&log).expect("worker log");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "three_hosts_survive_network_faults_and_a_rolling_restart", "--ignored", "--nocapture"])
            .env(WORKER, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start a worker");
        let stdout = child.stdout.take().expect("piped");
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(event) = WorkerEvent::parse(&line) {
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push((Instant::now(), event));
                }
            }
        });
        let stdin = child.stdin.take();
        Worker { log, child, stdin, events }
    }

    fn events(&self) -> Vec<(Instant, WorkerEvent)> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until what it reported satisfies `what`.
    fn wait_for(&self, what: impl Fn(&[(Instant, WorkerEvent)]) -> bool, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !what(&self.events()) {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("worker: not within {limit:?}: {:?}\n{log}", self.events());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it (closing its stdin, then by PID after 5 s) and returns what it reported.
    fn finish(mut self) -> Vec<WorkerEvent> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader thread may still hold the last lines for a moment.
        std::thread::sleep(Duration::from_millis(50));
        self.events().into_iter().map(|(_, e)| e).collect()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A writer and its label.
struct Writer {
    label: String,
    worker: Worker,
}

impl Writer {
    fn acks(&self) -> Vec<(Instant, u64)> {
        let events = self.worker.events();
        events.into_iter().filter_map(|(t, e)| if let WorkerEvent::Ack(n) = e { Some((t, n)) } else { None }).collect()
    }

    /// Waits until `more` acknowledgements beyond the present ones arrive.
    fn wait_acks(&self, more: usize, limit: Duration) {
        let enough = self.acks().len() + more;
        let acked =
            |events: &[(Instant, WorkerEvent)]| events.iter().filter(|(_, e)| matches!(e, WorkerEvent::Ack(_))).count();
        self.worker.wait_for(|events| acked(events) >= enough, limit);
    }

    /// Only ConnectionLoss, never another error nor an expired session.
    fn assert_only_connection_loss(&self) {
        for (_, e) in self.worker.events() {
            assert!(
                matches!(e, WorkerEvent::Ack(_) | WorkerEvent::Loss(_)),
                "writer {}: {e:?} (a client should see at most ConnectionLoss)",
                self.label
            );
        }
    }

    /// Stops it and returns the paths it had acknowledged.
    fn stop(self) -> BTreeSet<String> {
        let events = self.worker.finish();
        events
            .into_iter()
            .filter_map(|e| if let WorkerEvent::Ack(n) = e { Some(format!("{n:06}")) } else { None })
            .collect()
    }
}

/// The writer: one session over TLS, creating `/mh/<label>/<n>` for n = 0,
/// 1, … one at a time; a write that meets ConnectionLoss is retried (and
/// NodeExists on the retry means the first attempt landed). Ends when its
/// stdin closes, or after 10 000 writes or 10 minutes.
fn writer_worker(label: &str, servers: &str, ca: &str) {
    use zookeeper_client as zk;
    let ca_pem = std::fs::read_to_string(ca).expect("read the CA");
    // Both ring and aws-lc-rs are linked into this test: choose one for the crate.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let stop = stop_when_stdin_closes();
    let rt = support::runtime();
    rt.block_on(async {
        let tls = zk::TlsOptions::new().with_pem_ca(&ca_pem).expect("CA");
        let connector = zk::Client::connector().with_tls(tls).with_session_timeout(Duration::from_secs(15));
        let client = connector.secure_connect(servers).await.expect("connect");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let _ = client.create("/mh", b"", &open).await;
        let _ = client.create(&format!("/mh/{label}"), b"", &open).await;
        let started = Instant::now();
        let mut n = 0u64;
        let mut retry = false;
        while n < 10_000 && started.elapsed() < Duration::from_secs(600) && !stop.load(Ordering::SeqCst) {
            let path = format!("/mh/{label}/{n:06}");
            match client.create(&path, b"w", &open).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) if retry => {}
                // A server that stops answering (its link cut) is the crate's
                // "no response from connection": ZooKeeper's ConnectionLoss.
                Err(e) if e == zk::Error::ConnectionLoss || e.to_string().contains("no response from connection") => {
                    WorkerEvent::Loss(n).say();
                    retry = true;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(zk::Error::SessionExpired) => return WorkerEvent::Expired.say(),
                Err(e) => return WorkerEvent::Error(format!("{n} {e}")).say(),
            }
            WorkerEvent::Ack(n).say();
            retry = false;
            n += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// The delayer: holds every packet netfilter queues to it (queue 0) for
/// `delay_ms`, then lets it through, in order. Ends when its stdin closes
/// (letting through what it holds), or after 10 minutes.
fn delay_worker(delay_ms: u64) {
    let mut queue = nfq::Queue::open().expect("a netfilter queue socket");
    queue.bind(0).expect("bind queue 0");
    // Metadata only: the verdict needs no payload.
    queue.set_copy_range(0, 0).expect("copy range");
    queue.set_fail_open(0, true).expect("fail open");
    queue.set_nonblocking(true);
    let stop = stop_when_stdin_closes();
    WorkerEvent::Ready.say();
    let delay = Duration::from_millis(delay_ms);
    let started = Instant::now();
    let mut held = std::collections::VecDeque::new();
    let mut delayed = 0u64;
    loop {
        loop {
            match queue.recv() {
                Ok(mut message) => {
                    message.set_verdict(nfq::Verdict::Accept);
                    held.push_back((Instant::now() + delay, message));
                    delayed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("netfilter queue: {e}"),
            }
        }
        let stopping = stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(600);
        while held.front().is_some_and(|(due, _)| stopping || *due <= Instant::now()) {
            let (_, message) = held.pop_front().expect("checked");
            queue.verdict(message).expect("verdict");
        }
        if stopping {
            return WorkerEvent::Delayed(delayed).say();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A flag that turns true when this process's stdin closes (the test's way
/// of saying stop).
fn stop_when_stdin_closes() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        stopping.store(true, Ordering::SeqCst);
    });
    stop
}

#[test]
#[ignore = "needs root and network namespaces: make test-multi-host (CI runs it)"]
fn three_hosts_survive_network_faults_and_a_rolling_restart() {
    if let Ok(spec) = std::env::var(WORKER) {
        let parts: Vec<&str> = spec.split(';').collect();
        match parts[..] {
            ["writer", label, servers, ca] => writer_worker(label, servers, ca),
            ["delay", ms] => delay_worker(ms.parse().expect("delay in ms")),
            _ => panic!("{WORKER}={spec:?}: no such worker"),
        }
        return;
    }
    let net = match Network::create() {
        Ok(net) => net,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut hosts = Hosts::start(net);
    let leader = hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
    eprintln!("three hosts up; member {leader} leads");
    let all = hosts.writer("all", &[1, 2, 3]);

    // A follower cut off: the other two go on; it catches up once back.
    let follower = (1..=SIZE).find(|&id| id != leader).expect("a follower");
    hosts.net.link(follower, false);
    all.wait_acks(50, Duration::from_secs(30));
    assert_eq!(hosts.serving_leaders(), vec![leader], "the leader keeps leading with one follower cut off");
    hosts.net.link(follower, true);
    let leader = hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
    eprintln!("follower {follower} cut off and healed; member {leader} leads");

    // The leader isolated from both followers; its own client still reaches it.
    let followers: Vec<u8> = (1..=SIZE).filter(|&id| id != leader).collect();
    let minority = hosts.writer("minority", &[leader]);
    let majority = hosts.writer("majority", &followers);
    let isolated = Instant::now();
    for &f in &followers {
        hosts.net.partition(leader, f, true);
    }
    majority.wait_acks(50, Duration::from_secs(30));
    let new_leader = loop {
        let leaders = hosts.serving_leaders();
        if leaders.len() == 1 && leaders[0] != leader {
            break leaders[0];
        }
        assert!(isolated.elapsed() < Duration::from_secs(30), "no single new leader: {leaders:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let sync_limit = Duration::from_millis(TICK_MS * SYNC_LIMIT_TICKS);
    // Look only once the old leader has had twice syncLimit to give up.
    if let Some(rest) = (2 * sync_limit).checked_sub(isolated.elapsed()) {
        std::thread::sleep(rest);
    }
    let last_minority_ack = minority.acks().last().map(|(t, _)| t.duration_since(isolated));
    eprintln!(
        "leader {leader} isolated: member {new_leader} leads; the old leader's last ack {last_minority_ack:?} after"
    );
    if let Some(after) = last_minority_ack {
        // The isolation takes effect between two statements of this test,
        // and the client's report reaches it through a pipe: a small margin.
        assert!(
            after <= sync_limit + Duration::from_millis(500),
            "the isolated leader acknowledged a write {after:?} after"
        );
    }
    for &f in &followers {
        hosts.net.partition(leader, f, false);
    }
    hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
    majority.assert_only_connection_loss();

    // Loss (and delay, where the kernel can) on the leader's link.
    let leader = hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
    match Impairment::add(&hosts, leader) {
        Ok((impairment, what)) => {
            let before = all.acks().len();
            std::thread::sleep(Duration::from_secs(4));
            let delayed = impairment.remove(&hosts.net, leader);
            let writes = all.acks().len() - before;
            eprintln!(
                "{what} on leader {leader}'s link: {writes} writes in 4 s, {delayed:?} packets delayed in user space"
            );
            assert!(writes > 0, "no write went through a lossy, slow link");
            assert!(delayed.is_none_or(|n| n > 0), "the delayer held no packet: the link was not slowed");
        }
        Err(why) => eprintln!("loss and delay skipped: {why}"),
    }
    hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));

    // A rolling restart under load.
    let rolling = hosts.writer("rolling", &[1, 2, 3]);
    for id in 1..=SIZE {
        hosts.terminate(id);
        rolling.wait_acks(10, Duration::from_secs(30));
        hosts.spawn(id);
        hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
        rolling.wait_acks(10, Duration::from_secs(30));
    }
    rolling.assert_only_connection_loss();
    all.assert_only_connection_loss();

    // Every acknowledged write, on every member.
    let written: Vec<(String, BTreeSet<String>)> =
        [all, minority, majority, rolling].into_iter().map(|w| (format!("/mh/{}", w.label), w.stop())).collect();
    hosts.converged(&[1, 2, 3], true, Duration::from_secs(30));
    for (path, acked) in &written {
        for id in 1..=SIZE {
            let held = hosts.children(id, path);
            let lost: Vec<&String> = acked.difference(&held).collect();
            assert!(lost.is_empty(), "member {id} lacks acknowledged writes under {path}: {lost:?}");
        }
        eprintln!("{path}: {} acknowledged writes, all on every member", acked.len());
    }

    // Member 3 with member 2's certificate (from the ensemble's CA), then
    // with none on its peer links: refused both times, then back as itself.
    let dir = hosts.dir.path().display().to_string();
    let impostor = [
        ("ZABKEEPER_TLS_CERT_FILE", format!("{dir}/member-2.pem")),
        ("ZABKEEPER_TLS_KEY_FILE", format!("{dir}/member-2-key.pem")),
    ];
    for env in [&impostor[..], &[("ZABKEEPER_TLS_PEER", "false".to_string())][..]] {
        hosts.terminate(3);
        hosts.spawn_with_env(3, env);
        std::thread::sleep(Duration::from_secs(3));
        let statuses: Vec<Option<serde_json::Value>> = [1, 2, 3].iter().map(|&id| hosts.status(id)).collect();
        assert!(Hosts::agreed(&[1, 2], &statuses[..2], false).is_some(), "1 and 2 serve: {statuses:?}");
        assert!(Hosts::agreed(&[1, 2, 3], &statuses, false).is_none(), "member 3 joined with {env:?}: {statuses:?}");
        eprintln!("member 3 with {env:?}: refused");
    }
    hosts.terminate(3);
    hosts.spawn(3);
    hosts.converged(&[1, 2, 3], false, Duration::from_secs(30));
}
