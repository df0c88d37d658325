//! An ensemble on the test's hosts: members by id, each on a host of its
//! own (`zk-N`), binding 0.0.0.0 and advertising their host names, TLS on
//! every port (mutual between members), the admin API reachable from the
//! other hosts (with a token) so that a member can `--join` through it.

use super::netns::{run, Network};
use super::support;
use super::workers::{Worker, Writer};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// One tick of the ensemble, and syncLimit in ticks.
pub const TICK_MS: u64 = 50;
/// A follower gives up on a silent leader after this many ticks.
pub const SYNC_LIMIT_TICKS: u64 = 20;
/// The admin API's token (it is reachable from the other hosts).
const TOKEN: &str = "multi-host-admin-token";

/// A member process and where it runs.
struct Member {
    id: u8,
    host: u8,
    config: PathBuf,
    /// `--join` through this admin address, when it was started so.
    join: Option<String>,
    child: Option<Child>,
    log: PathBuf,
}

/// The ensemble on the test's hosts.
pub struct Hosts {
    /// The network it runs on.
    pub net: Network,
    /// Configs, certificates, data and logs.
    pub dir: tempfile::TempDir,
    /// The test function workers run as.
    test: &'static str,
    members: Vec<Member>,
}

impl Hosts {
    /// Starts members 1..=`first` on hosts 1..=`first`, from one config file
    /// that lists them; `test` is the calling test's name (for its workers).
    pub fn start(net: Network, first: u8, test: &'static str) -> Hosts {
        let dir = tempfile::tempdir().expect("temp dir");
        write_certificates(dir.path(), net.hosts);
        let mut hosts = Hosts { net, dir, test, members: Vec::new() };
        let d = hosts.dir.path().display().to_string();
        let mut toml = hosts.settings();
        for id in 1..=first {
            toml.push_str(&server_table(id, id, &format!("{d}/data-{id}")));
        }
        toml.push_str(&tls_table(&d, "{id}"));
        let config = hosts.dir.path().join("ensemble.toml");
        std::fs::write(&config, toml).expect("write config");
        for id in 1..=first {
            let log = hosts.dir.path().join(format!("zk{id}.log"));
            hosts.members.push(Member { id, host: id, config: config.clone(), join: None, child: None, log });
            hosts.spawn(id);
        }
        hosts
    }

    /// What every member's file says before its `[[server]]` tables.
    fn settings(&self) -> String {
        let d = self.dir.path().display();
        format!(
            "tick_ms = {TICK_MS}\ninit_limit_ticks = 40\nsync_limit_ticks = {SYNC_LIMIT_TICKS}\n\
             min_session_timeout_ms = 1000\nmax_session_timeout_ms = 60000\nsnapshot_every = 500\n\
             four_letter_words = [\"*\"]\nbind_host = \"0.0.0.0\"\ndata_dir = \"{d}/data-{{id}}\"\n\
             admin_allow_remote = true\nadmin_token = \"{TOKEN}\"\n"
        )
    }

    /// Starts member `id` on host `host` with a config file that lists only
    /// itself and `--join` through the admin API of host `via`'s member: it
    /// follows without a vote until it is added. Its data starts empty.
    pub fn join(&mut self, id: u8, host: u8, via: u8) {
        let d = self.dir.path().display().to_string();
        let mut toml = self.settings();
        toml.push_str(&server_table(id, host, &format!("{d}/data-{id}-on-{host}")));
        toml.push_str(&tls_table(&d, &host.to_string()));
        let config = self.dir.path().join(format!("member-{id}-on-{host}.toml"));
        std::fs::write(&config, toml).expect("write config");
        let log = self.dir.path().join(format!("zk{id}-on-{host}.log"));
        self.members.retain(|m| m.id != id || m.child.is_some());
        assert!(self.members.iter().all(|m| m.id != id), "member {id} still runs");
        let join = Some(format!("zk-{via}:4181"));
        self.members.push(Member { id, host, config, join, child: None, log });
        self.spawn(id);
    }

    fn member(&self, id: u8) -> &Member {
        self.members.iter().find(|m| m.id == id).unwrap_or_else(|| panic!("no member {id}"))
    }

    fn member_mut(&mut self, id: u8) -> &mut Member {
        self.members.iter_mut().find(|m| m.id == id).unwrap_or_else(|| panic!("no member {id}"))
    }

    /// The host member `id` runs on.
    pub fn host(&self, id: u8) -> u8 {
        self.member(id).host
    }

    /// (Re)starts member `id` as it was configured.
    pub fn spawn(&mut self, id: u8) {
        self.spawn_with_env(id, &[]);
    }

    /// Starts member `id` with `ZABKEEPER_*` overrides in its environment.
    pub fn spawn_with_env(&mut self, id: u8, env: &[(&str, String)]) {
        let m = self.member(id);
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.net.host_ns(m.host)]).arg(support::server_binary());
        command.arg("--config").arg(&m.config).args(["--id", &id.to_string()]);
        if let Some(via) = &m.join {
            command.args(["--join", via]);
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let child = support::start_member(command, id, &m.log);
        self.member_mut(id).child = Some(child);
    }

    /// Stops member `id` with SIGTERM (by PID), as a rolling restart does.
    pub fn terminate(&mut self, id: u8) {
        let Some(mut child) = self.member_mut(id).child.take() else { return };
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

    /// Kills member `id` (SIGKILL by PID): a host that died.
    pub fn kill(&mut self, id: u8) {
        if let Some(mut child) = self.member_mut(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Member `id`'s log.
    pub fn log(&self, id: u8) -> String {
        std::fs::read_to_string(&self.member(id).log).unwrap_or_default()
    }

    /// The ensemble's CA.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `zkctl` against the admin API of member `id`, run on its host.
    pub fn admin(&self, id: u8, args: &[&str]) -> Result<String, String> {
        let zkctl = support::cli_binary().display().to_string();
        let ns = self.net.host_ns(self.host(id));
        let (admin, ca) = (format!("zk-{}:4181", self.host(id)), self.ca().display().to_string());
        let common = ["netns", "exec", &ns, &zkctl, "--admin", &admin, "--cacert", &ca, "--admin-token", TOKEN];
        run("ip", &[&common[..], &["--timeout-ms", "2000", "--json", "admin"], args].concat())
    }

    /// `zkctl admin status` of member `id`.
    pub fn status(&self, id: u8) -> Option<serde_json::Value> {
        let out = self.admin(id, &["status"]).ok()?;
        serde_json::from_str(out.trim()).ok()
    }

    /// Waits until every member in `ids` answers and serves, exactly one of
    /// them leads, and it counts every other as a synced follower (with
    /// `quiet`, once writes have stopped: also all have applied the same
    /// zxid); returns the leader.
    pub fn converged(&self, ids: &[u8], quiet: bool, within: Duration) -> u8 {
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
    pub fn agreed(ids: &[u8], statuses: &[Option<serde_json::Value>], quiet: bool) -> Option<u8> {
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

    /// Running members that say they lead and serve.
    pub fn serving_leaders(&self) -> Vec<u8> {
        let running: Vec<u8> = self.members.iter().filter(|m| m.child.is_some()).map(|m| m.id).collect();
        running
            .into_iter()
            .filter(|&id| self.status(id).is_some_and(|s| s["role"] == "leader" && s["serving"] == true))
            .collect()
    }

    /// The children of `path` on member `id` after a `sync` in the same
    /// session (zkctl's shell over TLS, from the client host): everything
    /// the ensemble had committed when it was asked.
    pub fn children(&self, id: u8, path: &str) -> BTreeSet<String> {
        use std::io::Write;
        let zkctl = support::cli_binary().display().to_string();
        let (ca, server) = (self.ca().display().to_string(), format!("zk-{}:3181", self.host(id)));
        let ns = self.net.client_ns();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns, &zkctl, "--server", &server, "--cacert", &ca])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start zkctl");
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(format!("sync {path}\nls {path}\n").as_bytes()).expect("write to zkctl");
        drop(stdin);
        let out = child.wait_with_output().expect("zkctl's output");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(path), "sync {path} on member {id}: {}", String::from_utf8_lossy(&out.stderr));
        lines.map(str::to_string).collect()
    }

    /// Starts a worker in namespace `ns` (see `workers`).
    pub fn worker(&self, ns: &str, spec: &str, log: PathBuf) -> Worker {
        Worker::start(ns, self.test, spec, log)
    }

    /// Starts a writer in the client host, with a session on members `ids`,
    /// creating `/mh/<label>/<n>` one after another.
    pub fn writer(&self, label: &str, ids: &[u8]) -> Writer {
        let connect: Vec<String> = ids.iter().map(|&id| format!("zk-{}:2281", self.host(id))).collect();
        let spec = format!("writer;{label};{};{}", connect.join(","), self.ca().display());
        let log = self.dir.path().join(format!("writer-{label}.log"));
        let worker = self.worker(&self.net.client_ns(), &spec, log);
        let writer = Writer { label: label.to_string(), worker };
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
                    let _ = std::fs::copy(&m.log, keep.join(format!("zk{}-on-{}.log", m.id, m.host)));
                }
                eprintln!("member logs kept in {}", keep.display());
            }
        }
    }
}

/// Member `id` on host `host`, as a `[[server]]` table.
fn server_table(id: u8, host: u8, data_dir: &str) -> String {
    format!(
        "\n[[server]]\nid = {id}\npeer_addr = \"zk-{host}:2888\"\ngrpc_addr = \"zk-{host}:3181\"\n\
         secure_client_addr = \"zk-{host}:2281\"\nadmin_addr = \"zk-{host}:4181\"\ndata_dir = \"{data_dir}\"\n"
    )
}

/// TLS on every port with host `host`'s certificate (`{id}` in the shared file).
fn tls_table(dir: &str, host: &str) -> String {
    format!(
        "\n[tls]\ncert_file = \"{dir}/host-{host}.pem\"\nkey_file = \"{dir}/host-{host}-key.pem\"\n\
         ca_file = \"{dir}/ca.pem\"\ngrpc = true\npeer = true\nadmin = true\n"
    )
}

/// The ensemble's CA, and a certificate for each host's name.
fn write_certificates(dir: &std::path::Path, hosts: u8) {
    let key = rcgen::KeyPair::generate().expect("CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // Names of their own: OpenSSL (kazoo's) takes a certificate whose
    // subject is its issuer's for a self-signed one, and rcgen's default
    // name is the same for all.
    let named = |name: &str| {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, name);
        dn
    };
    params.distinguished_name = named("zabkeeper multi-host test CA");
    let ca = params.self_signed(&key).expect("CA");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write CA");
    let issuer = rcgen::Issuer::new(params, key);
    for host in 1..=hosts {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec![format!("zk-{host}")]).expect("params");
        params.distinguished_name = named(&format!("zk-{host}"));
        let cert = params.signed_by(&key, &issuer).expect("sign");
        std::fs::write(dir.join(format!("host-{host}.pem")), cert.pem()).expect("write certificate");
        std::fs::write(dir.join(format!("host-{host}-key.pem")), key.serialize_pem()).expect("write key");
    }
}
