//! Test harness: real `zabkeeper` processes on free loopback ports, each with
//! its own temporary data directory, started, killed (SIGKILL, by PID) and
//! restarted by the tests. Every wait is bounded; every process is stopped
//! when the harness is dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zabkeeper_proto::admin::admin_client::AdminClient;
use zabkeeper_proto::admin::StatusRequest;

pub mod java;

/// The server binary: `TEST_SERVER_BINARY` when set (`make bench-failover`
/// passes the release build users run, which lacks the features the tests'
/// dev-dependencies switch on), else the one cargo built for these tests.
pub fn server_binary() -> PathBuf {
    match std::env::var_os("TEST_SERVER_BINARY") {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "TEST_SERVER_BINARY={} is no file", path.display());
            path
        }
        None => built_server_binary(),
    }
}

/// The server binary cargo built for these tests; the other binaries lie beside it.
fn built_server_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_zabkeeper"))
}

/// The CLI binary: `zkctl` is another package of the workspace, so cargo
/// does not build it for these tests; it lies beside the server's binary
/// once built (`make test` builds every binary first).
pub fn cli_binary() -> PathBuf {
    let zkctl = built_server_binary().with_file_name(format!("zkctl{}", std::env::consts::EXE_SUFFIX));
    assert!(zkctl.exists(), "{} is not built: run `cargo build --workspace --bins` (make test does)", zkctl.display());
    zkctl
}

/// A number from the environment, or `default`; a value that is set but no
/// number stops the run rather than quietly running another one.
pub fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// Ports of one member.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    /// Zab traffic.
    pub peer: SocketAddr,
    /// gRPC sessions.
    pub grpc: SocketAddr,
    /// ZooKeeper wire protocol.
    pub client: SocketAddr,
    /// Admin API.
    pub admin: SocketAddr,
    /// Prometheus metrics.
    pub metrics: SocketAddr,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One member process.
pub struct Member {
    /// Its id.
    pub id: u64,
    /// Its ports.
    pub ports: Ports,
    child: Option<Child>,
}

impl Member {
    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How the process ended, once it has (it still counts as started:
    /// [`Ensemble::spawn`] runs it again).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

/// An ensemble of real server processes.
pub struct Ensemble {
    /// Holds every data dir and the config file; removed on drop.
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// The members, by position (id = index + 1).
    pub members: Vec<Member>,
    /// The admin token, when the config sets one.
    pub admin_token: Option<String>,
    /// TLS to the admin ports, when the config turns it on.
    pub admin_tls: Option<zabkeeper_client::ClientTls>,
    /// The config file's settings before its `[[server]]` tables.
    header: String,
    /// Each member's `[[server]]` table, by position.
    tables: Vec<String>,
}

/// Settings the tests may change.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Members.
    pub size: usize,
    /// Snapshot interval.
    pub snapshot_every: u64,
    /// Extra top-level TOML lines.
    pub extra: String,
    /// A token the admin API demands.
    pub admin_token: Option<String>,
    /// How many of the members (the last ids) are observers.
    pub observers: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { size: 3, snapshot_every: 10_000, extra: String::new(), admin_token: None, observers: 0 }
    }
}

impl Ensemble {
    /// Starts `size` members and waits until one leads and all serve.
    pub fn start(size: usize) -> Ensemble {
        Ensemble::start_with(Settings { size, ..Settings::default() })
    }

    /// Starts an ensemble with `settings`.
    pub fn start_with(settings: Settings) -> Ensemble {
        let mut ensemble = Ensemble::configure(settings);
        ensemble.start_all();
        ensemble
    }

    /// Starts every member and waits until one leads and all serve.
    pub fn start_all(&mut self) {
        for id in self.ids() {
            self.spawn(id);
        }
        self.wait_serving(self.ids(), Duration::from_secs(30));
    }

    /// Writes the config of an ensemble with `settings` and starts nothing
    /// (a test may prepare the data directories first).
    pub fn configure(settings: Settings) -> Ensemble {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut toml = format!(
            "tick_ms = 50\ninit_limit_ticks = 40\nsync_limit_ticks = 20\nmin_session_timeout_ms = 1000\nmax_session_timeout_ms = 60000\nsnapshot_every = {}\nsnapshots_retained = 2\nfour_letter_words = [\"*\"]\n{}\n",
            settings.snapshot_every, settings.extra
        );
        if let Some(token) = &settings.admin_token {
            toml.push_str(&format!("admin_token = \"{token}\"\n"));
        }
        let header = toml.clone();
        let mut tables = Vec::new();
        let mut members = Vec::new();
        for i in 0..settings.size {
            let id = i as u64 + 1;
            let ports = Ports {
                peer: loopback(free_port()),
                grpc: loopback(free_port()),
                client: loopback(free_port()),
                admin: loopback(free_port()),
                metrics: loopback(free_port()),
            };
            let data = dir.path().join(format!("zk{id}"));
            let mut table = format!(
                "\n[[server]]\nid = {id}\npeer_addr = \"{}\"\ngrpc_addr = \"{}\"\nclient_addr = \"{}\"\nadmin_addr = \"{}\"\nmetrics_addr = \"{}\"\ndata_dir = \"{}\"\n",
                ports.peer,
                ports.grpc,
                ports.client,
                ports.admin,
                ports.metrics,
                data.display()
            );
            if i >= settings.size - settings.observers.min(settings.size) {
                table.push_str("role = \"observer\"\n");
            }
            toml.push_str(&table);
            tables.push(table);
            members.push(Member { id, ports, child: None });
        }
        let config = dir.path().join("ensemble.toml");
        std::fs::write(&config, toml).expect("write config");
        Ensemble { dir, config, members, admin_token: settings.admin_token, admin_tls: None, header, tables }
    }

    /// Every member id.
    pub fn ids(&self) -> Vec<u64> {
        self.members.iter().map(|m| m.id).collect()
    }

    /// A member.
    pub fn member(&mut self, id: u64) -> &mut Member {
        &mut self.members[id as usize - 1]
    }

    /// The data dir of a member.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("zk{id}"))
    }

    /// The gRPC connect string of the given members.
    pub fn grpc(&self, ids: &[u64]) -> String {
        ids.iter().map(|id| self.members[*id as usize - 1].ports.grpc.to_string()).collect::<Vec<_>>().join(",")
    }

    /// The gRPC connect string of every member.
    pub fn grpc_all(&self) -> String {
        self.grpc(&self.ids())
    }

    /// The ZooKeeper-protocol connect string of the given members.
    pub fn zookeeper(&self, ids: &[u64]) -> String {
        ids.iter().map(|id| self.members[*id as usize - 1].ports.client.to_string()).collect::<Vec<_>>().join(",")
    }

    /// Starts member `id` and waits for its "ready" line (bounded).
    pub fn spawn(&mut self, id: u64) {
        self.spawn_with_env(id, &[]);
    }

    /// Starts member `id` with extra environment variables (`ZABKEEPER_*`
    /// overrides) and waits for its "ready" line (bounded).
    pub fn spawn_with_env(&mut self, id: u64, env: &[(&str, &str)]) {
        let config = self.config.clone();
        self.spawn_with_config(id, &config, env);
    }

    /// Starts member `id` from the config file `config` (one written by
    /// [`Ensemble::config_of`], say) and waits for its "ready" line (bounded).
    /// It runs on a copy of its own made now ([`Ensemble::member_config`]),
    /// as a member on a host of its own has a file of its own: a member
    /// rewrites its file after a reconfiguration, and one removed must still
    /// find itself in the file it restarts on.
    pub fn spawn_with_config(&mut self, id: u64, config: &Path, env: &[(&str, &str)]) {
        let log = self.dir.path().join(format!("zk{id}.log"));
        let own = self.member_config(id, config);
        std::fs::copy(config, &own).expect("copy the config file");
        let mut command = Command::new(server_binary());
        command.arg("--config").arg(&own).arg("--id").arg(id.to_string()).envs(env.iter().copied());
        let child = start_member(command, id, &log);
        self.member(id).child = Some(child);
    }

    /// Member `id`'s own copy of `config`, the file it runs on.
    pub fn member_config(&self, id: u64, config: &Path) -> PathBuf {
        let name = config.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.dir.path().join(format!("member-{id}-{name}"))
    }

    /// Writes (as `name`) the config file of an ensemble of these members
    /// only, with the same settings and addresses: the file an ensemble
    /// that is later reconfigured started from.
    pub fn config_of(&self, ids: &[u64], name: &str) -> PathBuf {
        let mut toml = self.header.clone();
        for id in ids {
            toml.push_str(&self.tables[*id as usize - 1]);
        }
        let path = self.dir.path().join(name);
        std::fs::write(&path, toml).expect("write config");
        path
    }

    /// Member `id` as a ZooKeeper dynamic configuration line
    /// (`server.N=host:peer:peer:participant;host:client`).
    pub fn server_line(&self, id: u64, role: &str) -> String {
        let ports = &self.members[id as usize - 1].ports;
        format!("server.{id}={}:{}:{role};{}", ports.peer, ports.peer.port(), ports.client)
    }

    /// SIGKILLs member `id` (by its PID) and waits for it to exit.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.member(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs member `id` and waits (bounded) for a clean exit; returns its exit status.
    pub fn terminate(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let mut child = self.member(id).child.take()?;
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    /// Restarts a killed member.
    pub fn restart(&mut self, id: u64) {
        self.kill(id);
        self.spawn(id);
    }

    /// Asks one member for its status over the admin API.
    pub async fn status(&self, id: u64) -> Option<zabkeeper_proto::admin::StatusReply> {
        let addr = self.members[id as usize - 1].ports.admin;
        let scheme = if self.admin_tls.is_some() { "https" } else { "http" };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}")).ok()?;
        if let Some(tls) = &self.admin_tls {
            endpoint = endpoint.tls_config(tls.tonic_config()).ok()?;
        }
        let channel = tokio::time::timeout(Duration::from_secs(2), endpoint.connect()).await.ok()?.ok()?;
        let mut client = AdminClient::new(channel);
        let mut request = tonic::Request::new(StatusRequest {});
        if let Some(token) = &self.admin_token {
            request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().ok()?);
        }
        let reply = tokio::time::timeout(Duration::from_secs(2), client.status(request)).await.ok()?.ok()?;
        Some(reply.into_inner())
    }

    /// Waits (bounded) until the given members serve with one leader among them.
    pub fn wait_serving(&self, ids: Vec<u64>, limit: Duration) -> u64 {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(self.wait_serving_async(&ids, limit))
    }

    /// Async form of [`Ensemble::wait_serving`]; returns the leader's id.
    pub async fn wait_serving_async(&self, ids: &[u64], limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        loop {
            let mut leader = None;
            let mut serving = 0;
            for &id in ids {
                if let Some(s) = self.status(id).await {
                    if s.serving {
                        serving += 1;
                        if s.role == "leader" || s.role == "standalone" {
                            leader = Some(id);
                        }
                    }
                }
            }
            if let (Some(leader), true) = (leader, serving == ids.len()) {
                return leader;
            }
            assert!(Instant::now() < deadline, "members {ids:?} not serving within {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The current leader among running members (bounded wait).
    pub async fn leader(&self, limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        loop {
            for m in &self.members {
                if let Some(s) = self.status(m.id).await {
                    if s.serving && (s.role == "leader" || s.role == "standalone") {
                        return m.id;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The member's log file (for failure messages).
    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("zk{id}.log"))).unwrap_or_default()
    }

    /// Lines of member logs that report a panic (a server must never panic
    /// on client input; tests assert this is empty at their end).
    pub fn panics(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.members {
            for line in self.log(m.id).lines().filter(|l| l.contains("panicked")) {
                out.push(format!("member {}: {line}", m.id));
            }
        }
        out
    }

    /// The admin address of member `id`.
    pub fn admin(&self, id: u64) -> String {
        self.members[id as usize - 1].ports.admin.to_string()
    }

    /// Runs `zkctl --admin <member id's admin port> ARGS` (bounded by its own timeouts).
    pub fn zkctl(&self, id: u64, args: &[&str]) -> std::process::Output {
        Command::new(cli_binary())
            .arg("--admin")
            .arg(self.admin(id))
            .arg("--timeout-ms")
            .arg("5000")
            .args(args)
            .env_remove("ZKCTL_ADMIN_TOKEN")
            .output()
            .expect("run zkctl")
    }

    /// The config path.
    pub fn config_path(&self) -> &Path {
        &self.config
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            self.keep_logs();
        }
    }
}

impl Ensemble {
    /// Copies every member's log out of the temporary directory (removed on
    /// drop) so that a failed test can be understood; prints where.
    fn keep_logs(&self) {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let keep = std::env::temp_dir().join(format!("zabkeeper-failed-{}-{stamp}", std::process::id()));
        if std::fs::create_dir_all(&keep).is_err() {
            return;
        }
        for m in &self.members {
            let name = format!("zk{}.log", m.id);
            let _ = std::fs::copy(self.dir.path().join(&name), keep.join(&name));
        }
        eprintln!("logs of the failed ensemble kept in {}", keep.display());
    }
}

/// Runs `command` (a member: the server binary, or a wrapper that execs it),
/// its stderr appended to `log`, and waits (bounded) for its "ready" line.
pub fn start_member(mut command: Command, id: impl std::fmt::Display, log: &Path) -> Child {
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    let mut child = command
        // ZABKEEPER_TEST_LOG (e.g. "debug") lets a person investigating see more.
        .env("ZABKEEPER_LOG", std::env::var("ZABKEEPER_TEST_LOG").unwrap_or_else(|_| "info".into()))
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start zabkeeper");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("ready") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("member {id} did not start; log:\n{}", std::fs::read_to_string(log).unwrap_or_default());
    }
    child
}

/// One ensemble at a time per test binary: the tests share two cores with
/// each other (and with builds), and the ensembles' timeouts are counted in
/// 50 ms ticks. A test that failed while holding the lock leaves nothing
/// behind that the next one depends on: its ensemble was dropped with it.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Generous limits: the session outlives any failover a test causes, and a
/// request never waits longer than the request timeout.
pub fn options() -> zabkeeper_client::ClientOptions {
    zabkeeper_client::ClientOptions::default()
        .with_session_timeout(Duration::from_secs(20))
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(10))
}

/// A session with [`options`], or a panic naming the address.
pub async fn connect(address: &str) -> zabkeeper_client::Client {
    zabkeeper_client::Client::connect(address, options()).await.unwrap_or_else(|e| panic!("connect to {address}: {e}"))
}

/// Raw ZooKeeper frames, for tests that must misbehave as a client library never would.
pub mod zk_wire {
    /// One ZooKeeper frame: a 4-byte big-endian length, then `payload`.
    pub fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    /// A ConnectRequest: a new session for `session` 0, else a reattach with
    /// a password it does not have.
    pub fn connect_frame(session: i64) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
        p.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen
        p.extend_from_slice(&10_000i32.to_be_bytes()); // timeOut
        p.extend_from_slice(&session.to_be_bytes());
        p.extend_from_slice(&16i32.to_be_bytes());
        p.extend_from_slice(&[7u8; 16]);
        p.push(0); // readOnly
        frame(&p)
    }

    /// A create request (persistent, world:anyone:cdrwa) for `path`; `None`
    /// data is ZooKeeper's null buffer (length -1).
    pub fn create_frame(xid: i32, path: &str, data: Option<&[u8]>) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&xid.to_be_bytes());
        p.extend_from_slice(&1i32.to_be_bytes()); // OpCode.create
        p.extend_from_slice(&(path.len() as i32).to_be_bytes());
        p.extend_from_slice(path.as_bytes());
        match data {
            Some(data) => {
                p.extend_from_slice(&(data.len() as i32).to_be_bytes());
                p.extend_from_slice(data);
            }
            None => p.extend_from_slice(&(-1i32).to_be_bytes()),
        }
        p.extend_from_slice(&1i32.to_be_bytes()); // one ACL entry
        p.extend_from_slice(&31i32.to_be_bytes()); // perms: all
        for part in ["world", "anyone"] {
            p.extend_from_slice(&(part.len() as i32).to_be_bytes());
            p.extend_from_slice(part.as_bytes());
        }
        p.extend_from_slice(&0i32.to_be_bytes()); // flags: persistent
        frame(&p)
    }

    /// A getData request for `path` (no watch) with the given xid.
    pub fn get_data_frame(xid: i32, path: &str) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&xid.to_be_bytes());
        p.extend_from_slice(&4i32.to_be_bytes()); // OpCode.getData
        p.extend_from_slice(&(path.len() as i32).to_be_bytes());
        p.extend_from_slice(path.as_bytes());
        p.push(0); // no watch
        frame(&p)
    }
}

/// The resident memory of process `pid`, bytes (from /proc).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A two-thread runtime for a test's async part.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime")
}

// Each test binary uses some of these; not every binary uses all.
#[allow(unused_imports)]
pub use zabkeeper::testing::{eventually, free_port, within, within_for};
