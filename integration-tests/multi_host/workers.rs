//! Clients and helpers as processes: this test binary run again inside a
//! namespace, with `WORKER` set to what it is to do, reporting a line per
//! event on its stdout.

use super::support;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set in a worker's environment: what it is to do.
const WORKER: &str = "ZABKEEPER_TEST_MULTI_HOST_WORKER";

/// In a worker process, does its work and says so; in the test, false.
pub fn serve_if_worker() -> bool {
    let Ok(spec) = std::env::var(WORKER) else { return false };
    let parts: Vec<&str> = spec.split(';').collect();
    match parts[..] {
        ["writer", label, servers, ca] => writer_worker(label, servers, ca),
        ["delay", ms] => delay_worker(ms.parse().expect("delay in ms")),
        ["fresh", majority, old_zk, old_grpc, ca] => super::reads::fresh_worker(majority, old_zk, old_grpc, ca),
        _ => panic!("{WORKER}={spec:?}: no such worker"),
    }
    true
}

/// What a worker reports, a line each.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerEvent {
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
    /// The fresh-read worker's round (see `reads`).
    Read(super::reads::Round),
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
            "READ" => super::reads::Round::parse(rest).map(WorkerEvent::Read),
            _ => None,
        }
    }

    pub fn say(&self) {
        let line = match self {
            WorkerEvent::Ready => "READY".to_string(),
            WorkerEvent::Ack(n) => format!("ACK {n}"),
            WorkerEvent::Loss(n) => format!("LOSS {n}"),
            WorkerEvent::Error(e) => format!("ERR {e}"),
            WorkerEvent::Expired => "EXPIRED".to_string(),
            WorkerEvent::Delayed(n) => format!("DELAYED {n}"),
            WorkerEvent::Read(round) => round.line(),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// This test binary run again inside a namespace with `WORKER` set, and
/// what it reported, with when. It stops when its stdin closes.
pub struct Worker {
    /// Its stderr.
    log: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<Vec<(Instant, WorkerEvent)>>>,
}

impl Worker {
    /// Starts a worker in namespace `ns` through `test`, the test
    /// function the worker runs as (it must call [`serve_if_worker`] first).
    pub fn start(ns: &str, test: &str, spec: &str, log: PathBuf) -> Worker {
        let stderr = std::fs::File::create(&log).expect("worker log");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(std::env::current_exe().expect("this test binary"))
            .args(["--exact", test, "--ignored", "--nocapture"])
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

    pub fn events(&self) -> Vec<(Instant, WorkerEvent)> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits until what it reported satisfies `what`.
    pub fn wait_for(&self, what: impl Fn(&[(Instant, WorkerEvent)]) -> bool, limit: Duration) {
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
    pub fn finish(mut self) -> Vec<WorkerEvent> {
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
pub struct Writer {
    /// Its paths are `/mh/<label>/<n>`.
    pub label: String,
    /// The process.
    pub worker: Worker,
}

impl Writer {
    pub fn acks(&self) -> Vec<(Instant, u64)> {
        let events = self.worker.events();
        events.into_iter().filter_map(|(t, e)| if let WorkerEvent::Ack(n) = e { Some((t, n)) } else { None }).collect()
    }

    /// Waits until `more` acknowledgements beyond the present ones arrive.
    pub fn wait_acks(&self, more: usize, limit: Duration) {
        let enough = self.acks().len() + more;
        let acked =
            |events: &[(Instant, WorkerEvent)]| events.iter().filter(|(_, e)| matches!(e, WorkerEvent::Ack(_))).count();
        self.worker.wait_for(|events| acked(events) >= enough, limit);
    }

    /// Only ConnectionLoss, never another error nor an expired session.
    pub fn assert_only_connection_loss(&self) {
        for (_, e) in self.worker.events() {
            assert!(
                matches!(e, WorkerEvent::Ack(_) | WorkerEvent::Loss(_)),
                "writer {}: {e:?} (a client should see at most ConnectionLoss)",
                self.label
            );
        }
    }

    /// Stops it and returns the paths it had acknowledged.
    pub fn stop(self) -> BTreeSet<String> {
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
                // "no response from connection", one killed under it a reset or
                // a TLS stream cut short: all ZooKeeper's ConnectionLoss.
                Err(e) if e == zk::Error::ConnectionLoss || is_connection_loss(&e.to_string()) => {
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

/// Whether the crate's error text is a connection lost under a request.
fn is_connection_loss(text: &str) -> bool {
    let lost =
        ["no response from connection", "Connection reset by peer", "Broken pipe", "without sending TLS close_notify"];
    lost.iter().any(|t| text.contains(t))
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
pub fn stop_when_stdin_closes() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        stopping.store(true, Ordering::SeqCst);
    });
    stop
}
