//! ZooKeeper clients of other kinds in the client host, each holding one
//! session over TLS while the test changes the ensemble: kazoo
//! (`kazoo_session.py`) and Curator (`CuratorSession.java`). Both print
//! `READY` once their session holds an ephemeral node, then read and write
//! through their client's retry until their stdin closes, and print a verdict
//! line: `OK <session> <operations> <disconnections>` or `FAIL <why>`.

use super::hosts::Hosts;
use super::support::java;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One client's session, run as a process in the client host.
pub struct ClientSession {
    /// Which client it is.
    client: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Where the Java program was compiled (kept until it ends).
    _classes: Option<tempfile::TempDir>,
}

impl ClientSession {
    /// A kazoo session on `servers`, or why it cannot run (no Python with
    /// kazoo: `ZABKEEPER_TEST_PYTHON`, which `make test-multi-host` sets).
    pub fn kazoo(hosts: &Hosts, servers: &[String]) -> Result<ClientSession, String> {
        let python = std::env::var("ZABKEEPER_TEST_PYTHON")
            .map_err(|_| "ZABKEEPER_TEST_PYTHON is not set (make test-multi-host sets it)".to_string())?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/integration-tests/multi_host/kazoo_session.py");
        let mut command = Command::new(python);
        command.arg(script).arg(servers.join(",")).arg(hosts.ca()).arg("kazoo");
        ClientSession::start("kazoo", hosts, command, None)
    }

    /// A Curator session on `servers`, or why it cannot run (no JDK or
    /// Debian's Curator: `make java-clients`, which `make test-multi-host` runs).
    pub fn curator(hosts: &Hosts, servers: &[String]) -> Result<ClientSession, String> {
        let classpath = java::classpath(&java::NETTY_JARS)?;
        let classes = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        java::compile(&classpath, "integration-tests/multi_host/CuratorSession.java", classes.path());
        let mut command = Command::new("java");
        command
            .arg("-cp")
            .arg(format!("{}:{classpath}", classes.path().display()))
            .arg("CuratorSession")
            .arg(servers.join(","))
            .arg(hosts.ca())
            .arg("curator");
        ClientSession::start("Curator", hosts, command, Some(classes))
    }

    /// Runs `command` in the client host and waits for its `READY`.
    fn start(
        client: &'static str,
        hosts: &Hosts,
        command: Command,
        classes: Option<tempfile::TempDir>,
    ) -> Result<ClientSession, String> {
        let program = command.get_program().to_owned();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &hosts.net.client_ns()])
            .arg(program)
            .args(command.get_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the {client} session: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let session = ClientSession { client, child, lines, _classes: classes };
        match session.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == "READY" => Ok(session),
            other => panic!("the {client} session did not start: {other:?}"),
        }
    }

    /// Ends it: which client it was, and its verdict line.
    pub fn finish(mut self) -> (&'static str, String) {
        drop(self.child.stdin.take());
        let verdict =
            self.lines.recv_timeout(Duration::from_secs(90)).unwrap_or_else(|e| format!("FAIL no verdict: {e}"));
        (self.client, verdict)
    }
}

impl Drop for ClientSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
