//! One real server process: what it does with bad input on the gRPC port
//! (garbage bytes, a malformed message, a truncated frame, an oversized
//! message) while other sessions keep working; that a SIGKILL under a write
//! load loses no acknowledged write; that SIGTERM stops it cleanly; and that
//! a bad config or a damaged data directory stops it at start with a clear
//! message instead of an empty tree. Every wait is bounded.

use crate::support::{runtime, within, Ensemble};
use bytes::{Buf, BufMut, Bytes};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zabkeeper_client::{Client, ClientError, ClientOptions};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_proto::client as pb;

fn options() -> ClientOptions {
    ClientOptions::default()
        .with_session_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(10))
        .with_request_timeout(Duration::from_secs(10))
}

/// A protobuf "message" whose bytes are written as given: lets the test put
/// anything on a well-formed gRPC stream.
#[derive(Debug, Default, Clone)]
struct Raw(Vec<u8>);

impl prost::Message for Raw {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Raw is only ever sent; should it be read, its fields are skipped.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

fn connect_message() -> Vec<u8> {
    use prost::Message;
    pb::ClientMessage {
        kind: Some(pb::client_message::Kind::Connect(pb::Connect { timeout_ms: 5000, ..Default::default() })),
    }
    .encode_to_vec()
}

/// Opens a session stream and sends `messages` as raw bytes; returns what came back
/// (the messages decoded, then the error that ended the stream, if any), stopping
/// early once `enough` messages arrived.
async fn raw_session(
    addr: &str,
    messages: Vec<Vec<u8>>,
    enough: usize,
) -> (Vec<pb::ServerMessage>, Option<tonic::Status>) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(usize::MAX);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Raw, pb::ServerMessage>::default();
    let path = http::uri::PathAndQuery::from_static("/zabkeeper.client.v1.ZabKeeper/Session");
    // Like a real client, keep the request stream open after the last message.
    use futures::StreamExt;
    let outgoing = tokio_stream::iter(messages.into_iter().map(Raw)).chain(futures::stream::pending());
    let mut received = Vec::new();
    let response = match grpc.streaming(tonic::Request::new(outgoing), path, codec).await {
        Ok(r) => r,
        Err(status) => return (received, Some(status)),
    };
    let mut stream = response.into_inner();
    loop {
        if received.len() >= enough {
            return (received, None);
        }
        match stream.message().await {
            Ok(Some(m)) => received.push(m),
            Ok(None) => return (received, None),
            Err(status) => return (received, Some(status)),
        }
    }
}

#[test]
fn bad_input_on_the_grpc_port_leaves_other_sessions_running() {
    let ensemble = Ensemble::start(1);
    let addr = ensemble.grpc_all();
    runtime().block_on(async {
        let bystander = Client::connect(&addr, options()).await.expect("connect");
        bystander.create("/kept", b"v", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();

        // 1. Garbage bytes instead of HTTP/2.
        let mut raw = std::net::TcpStream::connect(&addr).unwrap();
        raw.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = raw.write_all(&[0xde; 4096]);
        drop(raw);

        // 2. A session, then a stream resuming it that sends bytes that are not
        // a protobuf message: that stream ends with a reason, the session survives.
        let (got, _) = within(10, raw_session(&addr, vec![connect_message()], 1)).await;
        let Some(pb::server_message::Kind::Connected(session)) = got.first().and_then(|m| m.kind.clone()) else {
            panic!("no session: {got:?}");
        };
        let resume = {
            use prost::Message;
            pb::ClientMessage {
                kind: Some(pb::client_message::Kind::Connect(pb::Connect {
                    timeout_ms: 5000,
                    session_id: session.session_id,
                    password: session.password.clone(),
                    last_zxid_seen: session.zxid,
                })),
            }
            .encode_to_vec()
        };
        let (got, _) = within(10, raw_session(&addr, vec![resume.clone(), vec![0xff; 64]], usize::MAX)).await;
        let kinds: Vec<_> = got.iter().filter_map(|m| m.kind.clone()).collect();
        assert!(matches!(kinds.first(), Some(pb::server_message::Kind::Connected(_))), "{kinds:?}");
        let closing = kinds.iter().find_map(|k| match k {
            pb::server_message::Kind::Closing(c) => Some(c.clone()),
            _ => None,
        });
        let closing = closing.expect("a Closing message says why the stream ends");
        assert_eq!(closing.error, ErrorCode::MarshallingError.code(), "{closing:?}");
        let (got, _) = within(10, raw_session(&addr, vec![resume.clone()], 1)).await;
        match got.first().and_then(|m| m.kind.as_ref()) {
            Some(pb::server_message::Kind::Connected(again)) => assert_eq!(again.session_id, session.session_id),
            other => panic!("the session did not survive its broken stream: {other:?}"),
        }

        // 3. A gRPC message cut short: its 5-byte prefix promises more than arrives.
        within(10, truncated_grpc_frame(&addr)).await;

        // 4. A message over the server's decoding limit (3 MiB with the default data limit) on a resumed session.
        let huge = vec![0u8; 65 * 1024 * 1024];
        let (got, _) = within(30, raw_session(&addr, vec![resume.clone(), huge], usize::MAX)).await;
        let closing = got.iter().find_map(|m| match &m.kind {
            Some(pb::server_message::Kind::Closing(c)) => Some(c.clone()),
            _ => None,
        });
        let closing = closing.expect("the oversized message ends that stream with a reason");
        assert_eq!(closing.error, ErrorCode::MarshallingError.code(), "{closing:?}");
        assert!(
            closing.message.contains("message length too large") || closing.message.contains("large"),
            "{closing:?}"
        );

        // 5. Data over the node limit but under the message limit: an error for that request only.
        let big = vec![7u8; 2 * 1024 * 1024];
        match bystander.set_data("/kept", &big, -1).await {
            Err(ClientError::Server(e)) => {
                assert_eq!(e.code, ErrorCode::BadArguments);
                assert!(e.reason.contains("over the limit"), "{e}");
            }
            other => panic!("expected BadArguments, got {other:?}"),
        }

        // The bystander's session is untouched, and new sessions work.
        let (data, _) = bystander.get_data("/kept").await.expect("bystander still served");
        assert_eq!(data, b"v");
        let fresh = Client::connect(&addr, options()).await.expect("a new session");
        assert!(fresh.exists("/kept").await.unwrap().is_some());
    });
}

async fn truncated_grpc_frame(addr: &str) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/zabkeeper.client.v1.ZabKeeper/Session"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // Prefix: uncompressed, 1000 bytes; only 10 follow, then the stream ends.
    let mut frame = vec![0u8];
    frame.extend_from_slice(&1000u32.to_be_bytes());
    frame.extend_from_slice(&[0u8; 10]);
    body.send_data(Bytes::from(frame), true).unwrap();
    // The server answers with an error status (in headers or trailers), not a hang.
    let response = response.await.expect("a response");
    let grpc_status = response.headers().get("grpc-status").map(|v| v.to_str().unwrap_or("").to_string());
    let status = match grpc_status {
        Some(s) => s,
        None => {
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                let _ = chunk;
            }
            let trailers = body.trailers().await.ok().flatten().expect("trailers with a status");
            trailers.get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
        }
    };
    assert_ne!(status, "0", "a truncated message must not end well");
}

#[test]
fn sigkill_under_write_load_loses_no_acknowledged_write() {
    let mut ensemble = Ensemble::start(1);
    let addr = ensemble.grpc_all();
    let rt = runtime();
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let addr = addr.clone();
            let acked = acked.clone();
            rt.spawn(async move {
                let client = Client::connect(&addr, options()).await.expect("connect");
                // Bounded: at most 2000 writes or 20 s per writer.
                let deadline = Instant::now() + Duration::from_secs(20);
                for i in 0..2000 {
                    if Instant::now() > deadline {
                        break;
                    }
                    let path = format!("/w{w}-{i}");
                    match client.create(&path, b"x", CreateMode::Persistent, &Acl::open_unsafe()).await {
                        Ok(_) => acked.lock().unwrap().push(path),
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    // Let the load build up, then kill the server mid-flight.
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < 300 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    ensemble.kill(1);
    rt.block_on(async {
        for w in writers {
            let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
        }
    });
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 300, "the load did not get going ({} writes)", acked.len());
    ensemble.spawn(1);
    ensemble.wait_serving(vec![1], Duration::from_secs(30));
    rt.block_on(async {
        let client = Client::connect(&addr, options()).await.expect("reconnect");
        let children = client.get_children("/").await.unwrap();
        let missing: Vec<&String> = acked.iter().filter(|p| !children.contains(&p[1..].to_string())).collect();
        assert!(
            missing.is_empty(),
            "{} acknowledged writes lost, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    });
}

#[test]
fn sigterm_stops_cleanly_and_keeps_everything() {
    let mut ensemble = Ensemble::start(1);
    let addr = ensemble.grpc_all();
    let rt = runtime();
    let client = rt.block_on(async {
        let client = Client::connect(&addr, options()).await.expect("connect");
        for i in 0..50 {
            client.create(&format!("/t{i}"), b"x", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        }
        client
    });
    let status = ensemble.terminate(1).expect("the server exits");
    assert!(status.success(), "exit status {status:?}\n{}", ensemble.log(1));
    let log = ensemble.log(1);
    assert!(log.contains("shutting down"), "{log}");
    drop(client);
    ensemble.spawn(1);
    ensemble.wait_serving(vec![1], Duration::from_secs(30));
    rt.block_on(async {
        let client = Client::connect(&addr, options()).await.expect("reconnect");
        assert_eq!(client.get_children("/").await.unwrap().iter().filter(|c| c.starts_with('t')).count(), 50);
    });
}

fn start_failing(config: &std::path::Path, id: &str) -> (Option<i32>, String) {
    let mut child = Command::new(crate::support::server_binary())
        .arg("--config")
        .arg(config)
        .arg("--id")
        .arg(id)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server kept running on input that should stop it");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_config_fails_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let member = "[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\ndata_dir = \"d\"\n";
    let cases = [
        ("tick_ms = 50\nsync_limit_ticks = 0\n".to_string() + member, "sync_limit_ticks"),
        ("tick_ms = 50\n".to_string() + &member.replace("127.0.0.1:1", "nowhere"), "server[id=1].peer_addr"),
        // The async runtime is sized from the file too, before it starts.
        ("worker_threads = 0\n".to_string() + member, "`worker_threads`: must be within 1..=256, got 0"),
    ];
    for (config, named) in cases {
        std::fs::write(&path, &config).unwrap();
        let (code, err) = start_failing(&path, "1");
        assert_eq!(code, Some(2), "{config}: {err}");
        assert!(err.contains(named), "{config}: {err}");
    }
}

#[test]
fn damaged_data_dir_fails_at_start_instead_of_serving_an_empty_tree() {
    let mut ensemble = Ensemble::start(1);
    let addr = ensemble.grpc_all();
    runtime().block_on(async {
        let client = Client::connect(&addr, options()).await.expect("connect");
        for i in 0..20 {
            client.create(&format!("/d{i}"), b"x", CreateMode::Persistent, &Acl::open_unsafe()).await.unwrap();
        }
    });
    ensemble.kill(1);
    // Destroy the database file sled keeps its data in.
    let data = ensemble.data_dir(1);
    let db = data.join("db");
    assert!(db.exists(), "expected sled's db file in {}", data.display());
    std::fs::write(&db, vec![0x5a; 4096]).unwrap();
    let (code, err) = start_failing(ensemble.config_path(), "1");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot open storage") || err.contains("storage"), "{err}");
}
