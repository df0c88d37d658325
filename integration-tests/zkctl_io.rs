//! zkctl as an operator's shell, against a real `zabkeeper` process: node
//! data from files and stdin kept byte for byte (NUL and 0xFF included) and
//! shown with `--hex` / `--base64`; `multi --file` applying all of a file of
//! operations or none; `ls --watch` printing the event another client
//! causes; and, in a pseudo-terminal, the shell's `removewatches` with
//! watch events printed above the prompt. Every wait is bounded.

use crate::support::{serial, Ensemble};
use base64::Engine;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// zkctl against `server` with a 5 s timeout (add `--json` in `args` for JSON).
fn zkctl_command(server: &str, args: &[&str]) -> Command {
    let mut command = Command::new(crate::support::cli_binary());
    command.args(["--server", server, "--timeout-ms", "5000"]).args(args).env_remove("ZKCTL_SERVER");
    command
}

/// Runs zkctl to its end with `input` on stdin (none: stdin is empty).
fn zkctl_with(server: &str, args: &[&str], input: &[u8]) -> Output {
    let mut child = zkctl_command(server, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zkctl");
    let mut stdin = child.stdin.take().expect("piped stdin");
    // zkctl reads all of stdin before it connects; a closed pipe (it did not
    // want any) is not this helper's failure.
    let _ = stdin.write_all(input);
    drop(stdin);
    finish(child, 20)
}

/// Runs zkctl to its end with an empty stdin.
fn zkctl(server: &str, args: &[&str]) -> Output {
    zkctl_with(server, args, b"")
}

/// Waits (bounded) for a zkctl; kills it by PID and fails if it runs on.
fn finish(mut child: Child, secs: u64) -> Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("collect zkctl's output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("collect zkctl's output");
    panic!("zkctl still running after {secs}s; stderr: {}", String::from_utf8_lossy(&out.stderr));
}

/// Succeeded: its stdout.
fn ok(out: &Output) -> Vec<u8> {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout.clone()
}

/// Succeeded: every stdout line as JSON.
fn ok_docs(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&ok(out))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

/// The JSON error document on stderr.
fn error_doc(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("stderr not JSON: {text:?}: {e}"));
    doc["error"].clone()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn base64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The node's data as zkctl shows it with --base64, decoded.
fn data_of(server: &str, path: &str) -> Vec<u8> {
    let doc = &ok_docs(&zkctl(server, &["--json", "get", "--base64", path]))[0];
    assert_eq!(doc["encoding"], "base64");
    base64::engine::general_purpose::STANDARD.decode(doc["data"].as_str().expect("data")).expect("base64")
}

/// Whether a node exists (zkctl stat: 0 yes, NoNode no; anything else fails).
fn exists(server: &str, path: &str) -> bool {
    let out = zkctl(server, &["--json", "stat", path]);
    match out.status.code() {
        Some(0) => true,
        Some(1) if error_doc(&out)["code"] == -101 => false,
        _ => panic!("stat {path}: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

#[test]
fn data_from_files_and_stdin_round_trips_every_byte_through_hex_and_base64() {
    let _one_at_a_time = serial();
    let ensemble = Ensemble::start(1);
    let s = ensemble.grpc_all();
    let s = s.as_str();
    let dir = tempfile::tempdir().expect("temp dir");
    // NUL, 0xFF, a newline, invalid UTF-8, then every byte value.
    let mut blob = vec![0u8, 0xff, b'\n', 0xc3, 0x28, 0];
    blob.extend(0..=255u8);
    let file = dir.path().join("blob");
    std::fs::write(&file, &blob).expect("write the blob");
    let file_arg = file.to_str().expect("a UTF-8 temp path");

    // create --file: exact bytes, shown in text as hex, base64 and raw.
    assert_eq!(ok(&zkctl(s, &["create", "/f", "--file", file_arg])), b"/f\n");
    assert_eq!(String::from_utf8(ok(&zkctl(s, &["get", "--hex", "/f"]))).unwrap(), format!("{}\n", hex(&blob)));
    assert_eq!(String::from_utf8(ok(&zkctl(s, &["get", "--base64", "/f"]))).unwrap(), format!("{}\n", base64(&blob)));
    let mut raw = blob.clone();
    raw.push(b'\n');
    assert_eq!(ok(&zkctl(s, &["get", "/f"])), raw, "default output stays the bytes as they are");
    // In JSON: the encoded bytes in `data`, named by `encoding`, with the Stat.
    let doc = &ok_docs(&zkctl(s, &["--json", "get", "-s", "--hex", "/f"]))[0];
    assert_eq!((doc["data"].as_str(), doc["encoding"].as_str()), (Some(hex(&blob).as_str()), Some("hex")));
    assert_eq!(doc["stat"]["dataLength"], blob.len());
    let doc = &ok_docs(&zkctl(s, &["--json", "get", "/f"]))[0];
    assert_eq!((doc["data"].clone(), doc["data_base64"].as_str()), (Value::Null, Some(base64(&blob).as_str())));
    assert!(zkctl(s, &["get", "--hex", "--base64", "/f"]).status.code() == Some(2), "one encoding at a time");

    // create PATH - and set PATH - read stdin; set --file - too.
    let from_stdin = [0xffu8, 0, 0, 0xfe, b'-'];
    ok(&zkctl_with(s, &["create", "/s", "-"], &from_stdin));
    assert_eq!(data_of(s, "/s"), from_stdin);
    ok(&zkctl_with(s, &["set", "/s", "-"], b"\0second\xff"));
    assert_eq!(data_of(s, "/s"), b"\0second\xff");
    let set = ok_docs(&zkctl_with(s, &["--json", "set", "-v", "1", "/s", "--file", "-"], &[0, 1, 2]));
    assert_eq!(set[0]["stat"]["version"], 2);
    assert_eq!(data_of(s, "/s"), [0, 1, 2]);
    // set --file replaces with the file's bytes; an empty stdin is empty data.
    ok(&zkctl(s, &["set", "/s", "--file", file_arg]));
    assert_eq!(data_of(s, "/s"), blob);
    ok(&zkctl(s, &["create", "/empty", "-"]));
    assert_eq!(data_of(s, "/empty"), b"");
    // Inline data is unchanged.
    ok(&zkctl(s, &["create", "/t", "hello"]));
    assert_eq!(ok(&zkctl(s, &["get", "/t"])), b"hello\n");
    assert_eq!(ok(&zkctl(s, &["get", "--hex", "/t"])), b"68656c6c6f\n");

    // A missing file is a usage error naming it, and nothing is created.
    let missing = dir.path().join("no-such-file");
    let out = zkctl(s, &["create", "/x", "--file", missing.to_str().expect("UTF-8")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing.to_str().expect("UTF-8")), "{stderr}");
    assert!(!exists(s, "/x"));
    let out = zkctl(s, &["--json", "set", "/t", "--file", dir.path().to_str().expect("UTF-8")]);
    assert_eq!((out.status.code(), error_doc(&out)["code"].as_i64()), (Some(2), Some(-8)), "a directory is no file");
    assert_eq!(data_of(s, "/t"), b"hello");
    assert_eq!(zkctl(s, &["create", "/x", "data", "--file", file_arg]).status.code(), Some(2), "not both");
    assert_eq!(zkctl(s, &["set", "/t"]).status.code(), Some(2), "set needs data");

    // elect --leader shows the leader's value encoded too.
    let candidate = zkctl_command(s, &["elect", "/e", "leader-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a candidate");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = zkctl(s, &["elect", "--leader", "--hex", "/e"]);
        if out.stdout == format!("{}\n", hex(b"leader-1")).as_bytes() {
            break;
        }
        assert!(Instant::now() < deadline, "no leader shown: {}", String::from_utf8_lossy(&out.stdout));
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill").arg("-TERM").arg(candidate.id().to_string()).status();
    assert_eq!(finish(candidate, 10).status.code(), Some(0));
}

#[test]
fn multi_from_a_file_applies_every_operation_or_none() {
    let _one_at_a_time = serial();
    let ensemble = Ensemble::start(1);
    let s = ensemble.grpc_all();
    let s = s.as_str();
    let dir = tempfile::tempdir().expect("temp dir");
    let blob = dir.path().join("blob");
    std::fs::write(&blob, [0u8, 0xff, 0]).expect("write");
    let ops = dir.path().join("ops");
    let write_ops = |text: &str| std::fs::write(&ops, text).expect("write the ops");
    let ops_arg = ops.to_str().expect("UTF-8").to_string();

    write_ops(&format!(
        "# set up /m\n\ncreate /m 'hello world'\n  create /m/child --file '{}'\nset /m new -v 0\ncheck /m -v 1\ncreate -s /m/seq-\n",
        blob.display()
    ));
    let results = ok_docs(&zkctl(s, &["--json", "multi", "--file", &ops_arg]));
    let summary: Vec<(i64, &str, &str)> = results
        .iter()
        .map(|r| (r["line"].as_i64().unwrap(), r["op"].as_str().unwrap(), r["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (3, "create", "/m"),
            (4, "create", "/m/child"),
            (5, "set", "/m"),
            (6, "check", "/m"),
            // The sequence number is the parent's cversion: /m/child came first.
            (7, "create", "/m/seq-0000000001"),
        ]
    );
    assert_eq!(results[2]["stat"]["version"], 1);
    assert_eq!(data_of(s, "/m"), b"new");
    assert_eq!(data_of(s, "/m/child"), [0, 0xff, 0]);
    let children = &ok_docs(&zkctl(s, &["--json", "ls", "/m"]))[0]["children"];
    assert_eq!(children, &json!(["child", "seq-0000000001"]));

    // A failing op in the middle: nothing before or after it is applied,
    // and the error names its line.
    write_ops("create /n1 x\n# stale version:\nset /m zzz -v 0\ndelete /m/child\n");
    let out = zkctl(s, &["--json", "multi", "--file", &ops_arg]);
    assert_eq!(out.status.code(), Some(1));
    let error = error_doc(&out);
    assert_eq!((error["code"].as_i64(), error["line"].as_i64(), error["op"].as_i64()), (Some(-103), Some(3), Some(1)));
    assert_eq!(error["path"], "/m");
    assert!(out.stdout.is_empty(), "no op result is printed for a multi not applied");
    assert!(!exists(s, "/n1"), "the create before the failing op was not applied");
    assert!(exists(s, "/m/child"), "the delete after it was not applied");
    assert_eq!(data_of(s, "/m"), b"new");
    // The same in text: the line and the code.
    let out = zkctl(s, &["multi", "--file", &ops_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("line 3 (set /m)") && stderr.contains("BadVersion (-103)"), "{stderr}");

    // A failing last op (a check) undoes the writes before it.
    write_ops("create /n2 x\ndelete /m/child\ncheck /m -v 99\n");
    let out = zkctl(s, &["--json", "multi", "--file", &ops_arg]);
    assert_eq!((out.status.code(), error_doc(&out)["line"].as_i64()), (Some(1), Some(3)));
    assert!(!exists(s, "/n2") && exists(s, "/m/child"));

    // A malformed line is refused with its number before anything is sent.
    write_ops("create /ok\ncreate /ok2\nfrobnicate /x\n");
    let out = zkctl(s, &["multi", "--file", &ops_arg]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3") && stderr.contains("frobnicate"), "{stderr}");
    write_ops("create /ok\nls /\n");
    let stderr = String::from_utf8_lossy(&zkctl(s, &["multi", "--file", &ops_arg]).stderr).to_string();
    assert!(stderr.contains("line 2") && stderr.contains("cannot be part of a multi"), "{stderr}");
    assert!(!exists(s, "/ok"), "nothing was sent for a malformed file");
    let out = zkctl(s, &["multi", "--file", dir.path().join("none").to_str().expect("UTF-8")]);
    assert_eq!(out.status.code(), Some(2), "a missing ops file is a usage error");

    // From stdin, with text output: one line per op.
    let out = zkctl_with(s, &["multi", "--file", "-"], b"delete /m/child\nset /m done\ncreate -e /eph\n");
    assert_eq!(String::from_utf8(ok(&out)).unwrap(), "deleted /m/child\nset /m (version 2)\ncreated /eph\n");
    assert_eq!(data_of(s, "/m"), b"done");
    assert!(!exists(s, "/eph"), "the ephemeral lived as long as the invocation");
}

/// A zkctl running in the background, its stdout read line by line.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    /// Starts zkctl and returns once it printed its first line (which `ls -w`
    /// and `get -w` print after the server set the watch), with that line.
    fn start(server: &str, args: &[&str]) -> (Running, String) {
        let mut child = zkctl_command(server, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zkctl");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        // Ends at zkctl's end of output.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let running = Running { child, lines };
        match running.lines.recv_timeout(Duration::from_secs(15)) {
            Ok(first) => (running, first),
            Err(_) => {
                let out = finish(running.child, 1);
                panic!("zkctl printed nothing; stderr: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }

    /// Waits (bounded) for its end: the exit status, stderr and the lines after the first.
    fn finish(self) -> (Output, Vec<String>) {
        let out = finish(self.child, 15);
        let rest = self.lines.iter().collect();
        (out, rest)
    }
}

#[test]
fn ls_and_get_watch_print_the_event_another_client_causes() {
    let _one_at_a_time = serial();
    let ensemble = Ensemble::start(1);
    let s = ensemble.grpc_all();
    let s = s.as_str();
    ok(&zkctl(s, &["create", "/lw", "v0"]));

    // ls --watch: the children, then (once another client adds one) the event.
    let (lister, first) = Running::start(s, &["--json", "ls", "--watch", "/lw"]);
    assert_eq!(serde_json::from_str::<Value>(&first).expect("JSON"), json!({ "path": "/lw", "children": [] }));
    ok(&zkctl(s, &["create", "/lw/kid"]));
    let (out, rest) = lister.finish();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(rest.len(), 1, "{rest:?}");
    let event: Value = serde_json::from_str(&rest[0]).expect("a JSON event");
    assert_eq!(event["event"]["type"], "NodeChildrenChanged");
    assert_eq!(event["event"]["path"], "/lw");

    // In text, as zkCli prints it; a data change does not fire a child watch.
    let (lister, first) = Running::start(s, &["ls", "-w", "-s", "/lw"]);
    assert_eq!(first, "kid");
    ok(&zkctl(s, &["set", "/lw", "v1"]));
    ok(&zkctl(s, &["delete", "/lw/kid"]));
    let (out, rest) = lister.finish();
    assert_eq!(out.status.code(), Some(0));
    assert!(rest.iter().any(|l| l == "numChildren = 1"), "-s prints the Stat: {rest:?}");
    let last = rest.last().expect("the event");
    assert!(last.starts_with("WatchedEvent state:SyncConnected type:NodeChildrenChanged path:/lw zxid:0x"), "{rest:?}");

    // get --watch with an encoding: the data encoded, then the data's event.
    let (getter, first) = Running::start(s, &["get", "--watch", "--base64", "/lw"]);
    assert_eq!(first, base64(b"v1"));
    ok(&zkctl(s, &["set", "/lw", "v2"]));
    let (out, rest) = getter.finish();
    assert_eq!(out.status.code(), Some(0));
    assert!(rest.len() == 1 && rest[0].contains("type:NodeDataChanged path:/lw"), "{rest:?}");

    // A watch on a missing node is no watch: NoNode, at once.
    let out = zkctl(s, &["--json", "ls", "-w", "/missing"]);
    assert_eq!((out.status.code(), error_doc(&out)["code"].as_i64()), (Some(1), Some(-101)));
}

/// Types `line` at the shell, expects each of `needles` in order, then the
/// prompt (so the next line is typed only once the shell waits for it: keys
/// typed ahead may be dropped by the line editor as it starts).
fn type_line(shell: &mut rexpect::session::PtySession, prompt: &str, line: &str, needles: &[&str]) -> String {
    shell.send_line(line).expect("type");
    let mut seen = String::new();
    for needle in needles {
        seen += &shell.exp_string(needle).unwrap_or_else(|e| panic!("{line:?}: expected {needle:?}: {e}"));
        seen += needle;
    }
    seen += &shell.exp_string(prompt).unwrap_or_else(|e| panic!("{line:?}: no prompt after it: {e}"));
    seen
}

/// In the shell `get -w` and `ls -w` return at once and their events are
/// printed when they fire (over the idle prompt, as zkCli does), so watches
/// can be left and removed: `removewatches` with each kind, NoWatcher when
/// none is left; driven in a pseudo-terminal as a person types.
#[test]
fn the_shell_leaves_watches_prints_their_events_and_removes_them() {
    let _one_at_a_time = serial();
    let ensemble = Ensemble::start(1);
    let server = ensemble.grpc(&[1]);
    let s = server.as_str();
    ok(&zkctl(s, &["create", "/rw", "v0"]));
    // A child to list, so every command below prints something to wait for.
    ok(&zkctl(s, &["create", "/rw/first"]));
    let history = tempfile::tempdir().expect("temp dir");
    let mut command = Command::new(crate::support::cli_binary());
    command.args(["--server", s]).env_remove("ZKCTL_SERVER").env("ZKCTL_HISTORY", history.path().join("history"));
    let mut shell = rexpect::session::spawn_command(command, Some(15_000)).expect("start zkctl in a pty");
    let prompt = format!("[zkctl: {s}] ");
    let p = prompt.as_str();
    shell.exp_string(p).expect("the prompt");

    // A data watch: the prompt comes back at once; removing it fires
    // DataWatchRemoved; removing again finds none.
    type_line(&mut shell, p, "get -w /rw", &["v0"]);
    type_line(&mut shell, p, "removewatches /rw -d", &["type:DataWatchRemoved path:/rw"]);
    let no_data_watch = "NoWatcher (-121) for /rw: this session has no data watch on the node";
    type_line(&mut shell, p, "removewatches /rw -d", &[no_data_watch]);

    // A child watch fires while the shell waits for input: the event is
    // printed over the idle prompt, which is drawn again below it.
    type_line(&mut shell, p, "ls -w /rw", &["first"]);
    ok(&zkctl(s, &["create", "/rw/kid"]));
    shell.exp_string("type:NodeChildrenChanged path:/rw").expect("the event over the prompt");
    shell.exp_string(p).expect("the prompt again");
    let no_watch = "NoWatcher (-121) for /rw: this session has no watch on the node";
    type_line(&mut shell, p, "removewatches /rw", &[no_watch]);

    // -c removes only the child watch, -a then the data watch.
    type_line(&mut shell, p, "get -w /rw", &["v0"]);
    type_line(&mut shell, p, "ls -w /rw", &["kid"]);
    type_line(&mut shell, p, "removewatches -c /rw", &["type:ChildWatchRemoved path:/rw"]);
    type_line(&mut shell, p, "removewatches -a /rw", &["type:DataWatchRemoved path:/rw"]);
    // Nothing is left to fire: a change prints nothing before the next command's output.
    ok(&zkctl(s, &["set", "/rw", "v1"]));
    let seen = type_line(&mut shell, p, "get --hex /rw", &["7631"]);
    assert!(!seen.contains("NodeDataChanged"), "a removed watch fired: {seen:?}");

    // Stdin is the terminal: `-` is refused; --file works.
    type_line(&mut shell, p, "set /rw -", &["not available in the shell"]);
    let file = history.path().join("data");
    std::fs::write(&file, [0u8, 0xff]).expect("write");
    type_line(&mut shell, p, &format!("set /rw --file {}", file.display()), &["dataVersion = 2"]);
    type_line(&mut shell, p, "get --base64 /rw", &["AP8="]);
    shell.send_line("quit").expect("type");
    shell.exp_eof().expect("the shell ends");
    assert_eq!(data_of(s, "/rw"), [0, 0xff]);
}
