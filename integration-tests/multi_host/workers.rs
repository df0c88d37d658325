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
        ["fresh", majority, old_zk, old_grpc, ca] => fresh_worker(majority, old_zk, old_grpc, ca),
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
    /// The fresh-read worker's round.
    Read(Round),
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
            "READ" => Round::parse(rest).map(WorkerEvent::Read),
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

/// How long each read may take before it counts as unanswered.
const READ_TIMEOUT: Duration = Duration::from_millis(1000);

/// One round the fresh-read worker reported: the value it had just written
/// through the majority, and what each read of the old leader returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    /// The value acknowledged before the reads were sent.
    pub written: u64,
    /// A plain read (None: no answer, or an error).
    pub plain: Option<u64>,
    /// `sync` then read.
    pub sync: Option<u64>,
    /// A linearizable read.
    pub linearizable: Option<u64>,
}

impl Round {
    /// `READ written plain sync linearizable`, `-` for none.
    pub fn line(&self) -> String {
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!("READ {} {} {} {}", self.written, show(self.plain), show(self.sync), show(self.linearizable))
    }

    /// The inverse of [`Round::line`] (after `READ `).
    pub fn parse(rest: &str) -> Option<Round> {
        let parts: Vec<&str> = rest.split(' ').collect();
        let value = |s: &str| if s == "-" { Some(None) } else { s.parse().ok().map(Some) };
        match parts[..] {
            [w, p, s, l] => {
                Some(Round { written: w.parse().ok()?, plain: value(p)?, sync: value(s)?, linearizable: value(l)? })
            }
            _ => None,
        }
    }
}

/// The fresh-read worker: a session on the majority writes `/mh/fresh`
/// = n, n = 1, 2, …; after each acknowledgement it reads the node from the
/// old leader three ways at once (each bounded by [`READ_TIMEOUT`]) and
/// reports a [`Round`]. Ends when its stdin closes, or after 5 000 rounds or
/// 5 minutes.
pub fn fresh_worker(majority: &str, old_zk: &str, old_grpc: &str, ca: &str) {
    use zookeeper_client as zk;
    let ca_pem = std::fs::read_to_string(ca).expect("read the CA");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let stop = stop_when_stdin_closes();
    let rt = support::runtime();
    rt.block_on(async {
        let writer = connect(majority, &ca_pem).await;
        let plain = connect(old_zk, &ca_pem).await;
        let syncing = connect(old_zk, &ca_pem).await;
        let options = zabkeeper_client::ClientOptions::default()
            .with_session_timeout(Duration::from_secs(40))
            .with_request_timeout(READ_TIMEOUT)
            .with_tls(zabkeeper_client::ClientTls::from_files(ca.as_ref(), None).expect("the CA"));
        let grpc = zabkeeper_client::Client::connect(old_grpc, options).await.expect("connect the gRPC reader");
        let fresh = grpc.linearizable();
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let _ = writer.create("/mh", b"", &open).await;
        let _ = writer.create("/mh/fresh", b"0", &open).await;
        WorkerEvent::Ready.say();
        let started = Instant::now();
        let parse = |data: &[u8]| String::from_utf8_lossy(data).parse::<u64>().ok();
        let mut n = 0u64;
        while n < 5_000 && started.elapsed() < Duration::from_secs(300) && !stop.load(Ordering::SeqCst) {
            let value = (n + 1).to_string();
            match writer.set_data("/mh/fresh", value.as_bytes(), None).await {
                Ok(_) => n += 1,
                // Not acknowledged: nothing to compare with; written again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let (p, s, l) = tokio::join!(
                bounded(plain.get_data("/mh/fresh")),
                bounded(async {
                    syncing.sync("/mh/fresh").await?;
                    syncing.get_data("/mh/fresh").await
                }),
                bounded(fresh.get_data("/mh/fresh")),
            );
            let round = Round {
                written: n,
                plain: p.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
                sync: s.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
                linearizable: l.and_then(Result::ok).and_then(|(d, _)| parse(&d)),
            };
            WorkerEvent::Read(round).say();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// A ZooKeeper session over TLS on `servers`. It outlives the cut: a session
/// on the cut-off member pings no leader meanwhile.
async fn connect(servers: &str, ca_pem: &str) -> zookeeper_client::Client {
    use zookeeper_client as zk;
    let tls = zk::TlsOptions::new().with_pem_ca(ca_pem).expect("CA");
    let connector = zk::Client::connector().with_tls(tls).with_session_timeout(Duration::from_secs(40));
    connector.secure_connect(servers).await.unwrap_or_else(|e| panic!("connect to {servers}: {e}"))
}

/// `f`'s outcome, or None after [`READ_TIMEOUT`].
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(READ_TIMEOUT, f).await.ok()
}
