//! A load generator that speaks ZooKeeper's client protocol through the
//! `zookeeper-client` crate (a client we did not write), so the same load
//! runs against zabkeeper and against Apache ZooKeeper. `make
//! bench-vs-zookeeper` runs it against both, side by side.
//!
//! Phases, each a fixed number of operations spread over `--sessions`
//! sessions with `--inflight` requests outstanding per session: create
//! persistent nodes, getData, setData, mixed (90% getData, 10% setData), delete; and on
//! request `syncget` (sync, then getData: ZooKeeper's way to a fresh read). Prints one JSON line per phase
//! with operations per second and latency (p50, p99 and the mean). With `--keys K` the
//! operations cycle over K nodes (overwrites of a fixed data set); with
//! `--rate R` the whole phase is paced to R operations per second. The
//! `probe` phase measures write pauses instead (see [`probe`]). With `--step` it
//! prints `{"ready":"<phase>"}` before each phase and starts the phase only
//! when a line arrives on stdin, so a driver can count the servers' work
//! (CPU, context switches, syscalls, flushes) over exactly that phase. Everything runs on one
//! thread (see [`OneThread`]), so the generator's own cost stays well below
//! the servers' it measures.

use clap::Parser;
use futures::stream::{self, StreamExt};
use std::time::{Duration, Instant};
use zookeeper_client::{Acls, Client, CreateMode};

/// Load for one server's ZooKeeper port.
#[derive(Parser, Debug)]
struct Args {
    /// ZooKeeper connect string (host:port,...); session i connects to the i-th host, round robin.
    #[arg(long)]
    hosts: String,
    /// Parent of the nodes this run creates (must not exist).
    #[arg(long, default_value = "/load")]
    root: String,
    /// Sessions, each its own connection.
    #[arg(long, default_value_t = 4)]
    sessions: usize,
    /// Requests outstanding per session.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// Operations per phase (over all sessions).
    #[arg(long, default_value_t = 10_000)]
    ops: usize,
    /// Bytes of data per node.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Limit for each phase, in seconds.
    #[arg(long, default_value_t = 120)]
    phase_limit_secs: u64,
    /// Phases to run, in order (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = Phase::ALL)]
    phases: Vec<Phase>,
    /// Leave the root and its nodes in place at the end (for measuring memory).
    #[arg(long)]
    keep: bool,
    /// The root exists already (with its nodes, from an earlier run with `--keep`): do not create it.
    #[arg(long)]
    existing_root: bool,
    /// Operations address nodes `n-(i % keys)` instead of `n-i` (0: one node per operation).
    #[arg(long, default_value_t = 0)]
    keys: usize,
    /// Paces each phase to at most this many operations per second over all sessions (0: as fast as answered).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// The probe phase: how long it runs, in seconds.
    #[arg(long, default_value_t = 40)]
    probe_secs: u64,
    /// The probe phase: one probe write every this many milliseconds.
    #[arg(long, default_value_t = 10)]
    probe_every_ms: u64,
    /// Before each phase, print `{"ready":"<phase>"}` and wait for a line on stdin (a driver's "go").
    #[arg(long)]
    step: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    Create,
    Get,
    Set,
    /// Nine getData for every setData, on the nodes created before.
    Mixed,
    Delete,
    /// sync then getData of the same node (both pipelined in one session).
    Syncget,
    /// One session writes every `--probe-every-ms` while the others run
    /// setData paced by `--rate`; reports the longest pause between two
    /// acknowledged probe writes.
    Probe,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Phase {
    const ALL: [Phase; 5] = [Phase::Create, Phase::Get, Phase::Set, Phase::Mixed, Phase::Delete];

    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Get => "get",
            Phase::Set => "set",
            Phase::Mixed => "mixed",
            Phase::Delete => "delete",
            Phase::Syncget => "syncget",
            Phase::Probe => "probe",
        }
    }
}

/// Runs operations `range` of `phase` on one session; returns each operation's latency.
async fn run_session(
    client: Client,
    args: &Args,
    phase: Phase,
    range: std::ops::Range<usize>,
) -> Result<Vec<Duration>, String> {
    let data = vec![b'x'; args.size];
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let (client, data, options) = (&client, &data, &options);
    let sessions = if phase == Phase::Probe { args.sessions.saturating_sub(1) } else { args.sessions };
    let pace = Pace::new(args.rate, sessions);
    let (pace, first) = (&pace, range.start);
    let results: Vec<Result<Duration, String>> = stream::iter(range)
        .map(|i| async move {
            pace.wait(i - first).await;
            let key = if args.keys > 0 { i % args.keys } else { i };
            let path = format!("{}/n-{key}", args.root);
            let start = Instant::now();
            let outcome = match phase {
                Phase::Create => client.create(&path, data, options).await.map(|_| ()),
                Phase::Get => client.get_data(&path).await.map(|_| ()),
                Phase::Set => client.set_data(&path, data, None).await.map(|_| ()),
                Phase::Mixed if i % 10 == 0 => client.set_data(&path, data, None).await.map(|_| ()),
                Phase::Mixed => client.get_data(&path).await.map(|_| ()),
                Phase::Delete => client.delete(&path, None).await,
                Phase::Syncget => {
                    // Sent back to back: the read is answered after the sync, in session order.
                    let (synced, read) = futures::join!(client.sync(&path), client.get_data(&path));
                    synced.and(read.map(|_| ()))
                }
                Phase::Probe => client.set_data(&path, data, None).await.map(|_| ()),
            };
            outcome.map(|()| start.elapsed()).map_err(|e| format!("{} {path}: {e}", phase.name()))
        })
        .buffer_unordered(args.inflight)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Spaces one session's operations so that all sessions together issue at
/// most `rate` per second: a session's `k`-th operation starts no earlier
/// than `k * sessions / rate` seconds after the phase began.
struct Pace {
    start: Instant,
    /// Seconds between two operations of one session (0: unpaced).
    interval: f64,
}

impl Pace {
    fn new(rate: u64, sessions: usize) -> Pace {
        let interval = if rate == 0 { 0.0 } else { sessions.max(1) as f64 / rate as f64 };
        Pace { start: Instant::now(), interval }
    }

    async fn wait(&self, k: usize) {
        if self.interval == 0.0 {
            return;
        }
        let due = self.start + Duration::from_secs_f64(k as f64 * self.interval);
        let now = Instant::now();
        if due > now {
            async_io::Timer::after(due - now).await;
        }
    }
}

/// The probe phase: on `probe`, a setData every `--probe-every-ms` (the next
/// one as soon as the last is answered when that took longer), for
/// `--probe-secs`; meanwhile `load` (the other sessions) run setData paced
/// by `--rate` over `--keys` nodes. A pause is the time between two
/// consecutive acknowledged probe writes, so the longest pause is how long
/// the ensemble accepted no write at all from the probe's point of view.
async fn probe(probe: Client, load: Vec<Client>, args: &Args) -> Result<(), String> {
    let path = format!("{}/probe", args.root);
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    probe.create(&path, b"", &open).await.map_err(|e| format!("create {path}: {e}"))?;
    let every = Duration::from_millis(args.probe_every_ms);
    let until = Instant::now() + Duration::from_secs(args.probe_secs);
    let background = async {
        // Enough operations to last the probe; the probe ends the phase.
        let ops = (args.rate.max(1) * (args.probe_secs + 5)) as usize;
        let per_session = ops.div_ceil(load.len().max(1));
        let work = load.iter().enumerate().map(|(s, client)| {
            let range = (s * per_session)..((s + 1) * per_session);
            run_session(client.clone(), args, Phase::Probe, range)
        });
        futures::future::join_all(work).await
    };
    let probing = async {
        let data = vec![b'p'; args.size];
        let mut pauses: Vec<Duration> = Vec::new();
        let mut latencies: Vec<Duration> = Vec::new();
        let began = Instant::now();
        let mut last_ack = began;
        while Instant::now() < until {
            let sent = Instant::now();
            probe.set_data(&path, &data, None).await.map_err(|e| format!("probe setData {path}: {e}"))?;
            let acked = Instant::now();
            latencies.push(acked - sent);
            let pause = acked - last_ack;
            if pause > Duration::from_millis(20) {
                // On stderr, for lining pauses up with the servers' logs.
                eprintln!(
                    "probe pause {:.1} ms ending at {:.3} s",
                    pause.as_secs_f64() * 1000.0,
                    (acked - began).as_secs_f64()
                );
            }
            pauses.push(pause);
            last_ack = acked;
            let next = sent + every;
            if next > acked {
                async_io::Timer::after(next - acked).await;
            }
        }
        Ok::<_, String>((pauses, latencies))
    };
    let start = Instant::now();
    let (probing, background) = (std::pin::pin!(probing), std::pin::pin!(background));
    let (mut pauses, mut latencies) = match futures::future::select(probing, background).await {
        futures::future::Either::Left((probed, _)) => probed?,
        futures::future::Either::Right((finished, _)) => {
            for outcome in finished {
                outcome?;
            }
            return Err("the background load ended before the probe".into());
        }
    };
    let secs = start.elapsed().as_secs_f64();
    pauses.sort();
    latencies.sort();
    let over = |ms: u64| pauses.iter().filter(|p| **p > Duration::from_millis(ms)).count();
    println!(
        "{{\"phase\":\"probe\",\"ops\":{},\"secs\":{secs:.3},\"max_pause_ms\":{:.1},\"pauses_over_50_ms\":{},\"pauses_over_20_ms\":{},\"p50_ms\":{:.2},\"p99_ms\":{:.2}}}",
        latencies.len(),
        pauses.last().map_or(0.0, |p| p.as_secs_f64() * 1000.0),
        over(50),
        over(20),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
    );
    Ok(())
}

/// The mean in milliseconds (0 for none). Beside the p50 because under a
/// saturated closed loop the mean is what the throughput sets (Little's law),
/// while the p50 also follows how the answers spread.
fn mean_ms(latencies: &[Duration]) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.iter().sum::<Duration>().as_secs_f64() * 1000.0 / latencies.len() as f64
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

async fn run(args: Args) -> Result<(), String> {
    // Sessions are spread over the members round robin, as clients of a
    // real ensemble spread themselves, so every member serves its share.
    let members: Vec<&str> = args.hosts.split(',').filter(|h| !h.is_empty()).collect();
    if members.is_empty() {
        return Err("--hosts names no server".into());
    }
    let connect = |host: String| async move {
        Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .with_connection_timeout(Duration::from_secs(10))
            .connect(&host)
            .await
            .map_err(|e| format!("connect to {host}: {e}"))
    };
    let mut clients = Vec::new();
    for s in 0..args.sessions {
        clients.push(connect(members[s % members.len()].to_string()).await?);
    }
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    if !args.existing_root {
        clients[0].create(&args.root, b"", &open).await.map_err(|e| format!("create {}: {e}", args.root))?;
    }
    let per_session = args.ops.div_ceil(args.sessions);
    for &phase in &args.phases {
        if args.step {
            wait_for_go(phase)?;
        }
        if phase == Phase::Probe {
            let (first, rest) = clients.split_first().ok_or("no session")?;
            probe(first.clone(), rest.to_vec(), &args).await?;
            continue;
        }
        let start = Instant::now();
        let work = clients.iter().enumerate().map(|(s, client)| {
            let range = (s * per_session)..((s + 1) * per_session).min(args.ops);
            run_session(client.clone(), &args, phase, range)
        });
        let limit = Duration::from_secs(args.phase_limit_secs);
        let all = futures::future::join_all(work);
        let late = async_io::Timer::after(limit);
        let outcomes = match futures::future::select(std::pin::pin!(all), std::pin::pin!(late)).await {
            futures::future::Either::Left((outcomes, _)) => outcomes,
            futures::future::Either::Right(_) => {
                return Err(format!("{} phase not done within {limit:?}", phase.name()))
            }
        };
        let secs = start.elapsed().as_secs_f64();
        let mut latencies = Vec::with_capacity(args.ops);
        for outcome in outcomes {
            latencies.extend(outcome?);
        }
        latencies.sort();
        println!(
            "{{\"phase\":\"{}\",\"ops\":{},\"secs\":{secs:.3},\"ops_per_sec\":{:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"mean_ms\":{:.3}}}",
            phase.name(),
            latencies.len(),
            latencies.len() as f64 / secs,
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            mean_ms(&latencies),
        );
    }
    if !args.keep {
        clients[0].delete(&args.root, None).await.map_err(|e| format!("delete {}: {e}", args.root))?;
    }
    close_sessions(clients).await;
    Ok(())
}

/// Says the sessions are ready for `phase`, then waits for the driver's line
/// on stdin. It blocks this thread, the client's tasks too, for as long as
/// the driver takes to start counting (well under the sessions' timeout).
fn wait_for_go(phase: Phase) -> Result<(), String> {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    writeln!(out, "{{\"ready\":\"{}\"}}", phase.name())
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
    if line.is_empty() {
        return Err(format!("stdin closed before the {} phase", phase.name()));
    }
    Ok(())
}

/// Closes every session before the program ends. A client sends its
/// closeSession when its last handle drops, from a task this thread runs, so
/// the tasks must run until then; left open, the sessions would expire 30 s
/// later, in the middle of whatever the servers measure next.
async fn close_sessions(clients: Vec<Client>) {
    let mut watchers: Vec<_> = clients.iter().map(Client::state_watcher).collect();
    drop(clients);
    let closed = futures::future::join_all(watchers.iter_mut().map(|w| async move {
        while !w.peek_state().is_terminated() {
            w.changed().await;
        }
    }));
    let limit = async_io::Timer::after(Duration::from_secs(5));
    // A server that does not answer does not hold the benchmark up.
    let _ = futures::future::select(std::pin::pin!(closed), std::pin::pin!(limit)).await;
}

/// Runs the client's tasks on the thread that drives the load.
///
/// The `zookeeper-client` crate reads and writes its sockets through
/// async-io, whose reactor runs on a thread of its own unless the thread
/// blocking on the work polls it. On a tokio runtime every reply therefore
/// crossed threads twice (reactor to worker, worker back), and the load
/// generator spent more CPU per getData than the server it measured. Here one
/// thread runs every task and polls the sockets itself, for both systems alike.
struct OneThread(std::sync::Arc<async_executor::Executor<'static>>);

impl spawns_core::Spawn for OneThread {
    fn spawn(&self, task: spawns_core::Task) {
        self.0.spawn(Box::into_pin(task.future)).detach();
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let executor = std::sync::Arc::new(async_executor::Executor::new());
    let spawner = OneThread(executor.clone());
    let _scope = spawns_core::enter(&spawner);
    match async_io::block_on(executor.run(run(args))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zk_load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
