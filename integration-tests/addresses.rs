//! Addresses as deployments write them, on real processes: members reached
//! by host name and bound with `bind_host`, the member id and keys from the
//! environment. (Separate hosts in network namespaces are for the multi-host
//! suite; these run on loopback.)

use crate::support::{runtime, within, Ensemble, Settings};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::CreateMode;

/// An ensemble whose members reach each other by the name `localhost`,
/// each listener bound to 127.0.0.1 through `bind_host`: names resolve on
/// every connect, and where a listener binds is not where it is reached.
#[test]
fn members_reached_by_host_name_and_bound_by_bind_host_replicate() {
    let mut ensemble = Ensemble::configure(Settings { size: 3, ..Settings::default() });
    let text = std::fs::read_to_string(&ensemble.config).expect("read config");
    let mut named = String::from("bind_host = \"127.0.0.1\"\n");
    for line in text.lines() {
        let is_reached_by_name = ["peer_addr", "grpc_addr", "client_addr"].iter().any(|k| line.starts_with(k));
        named.push_str(&if is_reached_by_name { line.replace("127.0.0.1", "localhost") } else { line.to_string() });
        named.push('\n');
    }
    std::fs::write(&ensemble.config, named).expect("write config");
    ensemble.start_all();

    let rt = runtime();
    rt.block_on(within(60, async {
        let writer = crate::support::connect(&ensemble.grpc(&[1])).await;
        writer.create("/by-name", b"v", CreateMode::Persistent, &Acl::open_unsafe()).await.expect("create");
        let reader = crate::support::connect(&ensemble.grpc(&[3])).await;
        reader.sync("/by-name").await.expect("sync");
        assert_eq!(reader.get_data("/by-name").await.expect("replicated").0, b"v".to_vec());
    }));
    let conf = four_letter(&ensemble.zookeeper(&[2]), "conf");
    assert!(conf.contains("server.1=localhost:"), "conf names members as configured:\n{conf}");
    assert_eq!(ensemble.panics(), Vec::<String>::new(), "a member panicked");
}

/// `ZABKEEPER_ID` picks the member, `ZABKEEPER_<KEY>` and
/// `ZABKEEPER_SERVER_<ID>_<KEY>` override the file, and a bad override is
/// refused at start naming the variable.
#[test]
fn the_environment_picks_the_member_and_overrides_keys() {
    let ensemble = Ensemble::configure(Settings { size: 3, ..Settings::default() });
    let run = |env: &[(&str, &str)]| {
        let mut command = Command::new(crate::support::server_binary());
        command.arg("--config").arg(&ensemble.config).arg("--print-connect-strings");
        for (key, value) in env {
            command.env(key, value);
        }
        let out = command.stdout(Stdio::piped()).stderr(Stdio::piped()).output().expect("run zabkeeper");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = run(&[]);
    assert_eq!(code, Some(2), "three members and no id: {err}");
    assert!(err.contains("--id or ZABKEEPER_ID"), "{err}");

    let (code, out, err) = run(&[("ZABKEEPER_ID", "2"), ("ZABKEEPER_SERVER_3_GRPC_ADDR", "zk-2.example:3181")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("zk-2.example:3181"), "the override is what clients are told:\n{out}");

    let (code, _, err) = run(&[("ZABKEEPER_ID", "2"), ("ZABKEEPER_SERVER_9_GRPC_ADDR", "x:1")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("ZABKEEPER_SERVER_9_GRPC_ADDR") && err.contains("no [[server]] with id 9"), "{err}");
    let (code, _, err) = run(&[("ZABKEEPER_ID", "2"), ("ZABKEEPER_TICK_MS", "never")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tick_ms") && err.contains("ZABKEEPER_TICK_MS"), "{err}");
}

/// The answer to a four-letter word (bounded by a read timeout).
fn four_letter(addr: &str, word: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(word.as_bytes()).expect("send");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
