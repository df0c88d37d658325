//! The test's hosts: Linux network namespaces on a bridge, each reaching the
//! others by host name (`zk-1`.. and `client`, in each namespace's
//! /etc/hosts, which `ip netns exec` puts in place).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a command, returning its stdout, or why it failed.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
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

/// A switch namespace holding a bridge, one namespace per server host
/// (`zk-N`, 10.213.0.N) and one for clients, each with a veth into the bridge.
pub struct Network {
    prefix: String,
    names: Vec<String>,
    /// Server hosts: `zk-1` ..= `zk-{hosts}`.
    pub hosts: u8,
}

impl Network {
    /// Server host `host`'s namespace.
    pub fn host_ns(&self, host: u8) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// The clients' namespace.
    pub fn client_ns(&self) -> String {
        format!("{}-c", self.prefix)
    }

    fn address(host: u8) -> String {
        format!("10.213.0.{host}")
    }

    /// Creates `hosts` server hosts and the client host (`tag` keeps two
    /// tests of one process apart), or says why it cannot (not root, no iproute2).
    pub fn create(tag: &str, hosts: u8) -> Result<Network, String> {
        if run("id", &["-u"]).map(|uid| uid.trim() != "0").unwrap_or(true) {
            return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        run("ip", &["-V"]).map_err(|e| format!("iproute2 missing ({e})"))?;
        let prefix = format!("zk{tag}{}", std::process::id() % 100_000);
        let mut net = Network { prefix, names: Vec::new(), hosts };
        let switch = format!("{}-sw", net.prefix);
        run("ip", &["netns", "add", &switch]).map_err(|e| format!("cannot create a network namespace: {e}"))?;
        net.names.push(switch.clone());
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        let mut names = String::from("127.0.0.1 localhost\n");
        for host in 1..=hosts {
            names.push_str(&format!("{} zk-{host}\n", Network::address(host)));
        }
        names.push_str("10.213.0.100 client\n");
        let hosts_of = |ns: &str| PathBuf::from("/etc/netns").join(ns);
        let mut all: Vec<(String, String)> = (1..=hosts).map(|h| (net.host_ns(h), Network::address(h))).collect();
        all.push((net.client_ns(), "10.213.0.100".into()));
        for (n, (ns, addr)) in all.iter().enumerate() {
            ip(&["netns", "add", ns]);
            net.names.push(ns.clone());
            let port = format!("p{n}");
            ip(&["link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", &port, "netns", &switch]);
            ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            std::fs::create_dir_all(hosts_of(ns)).expect("create /etc/netns entry");
            std::fs::write(hosts_of(ns).join("hosts"), &names).expect("write hosts");
        }
        Ok(net)
    }

    /// [`Network::create`], or None after saying why the test is skipped.
    pub fn create_or_skip(tag: &str, hosts: u8) -> Option<Network> {
        Network::create(tag, hosts).map_err(|why| eprintln!("skipped: {why}")).ok()
    }

    /// Cuts host `host` off (its link down) or brings it back.
    pub fn link(&self, host: u8, up: bool) {
        ip(&["-n", &self.host_ns(host), "link", "set", "eth0", if up { "up" } else { "down" }]);
    }

    /// Drops every packet between hosts `a` and `b` (both ways), or lets them through again.
    pub fn partition(&self, a: u8, b: u8, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        for (from, to) in [(a, b), (b, a)] {
            ip(&["-n", &self.host_ns(from), "route", verb, "blackhole", &format!("{}/32", Network::address(to))]);
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
