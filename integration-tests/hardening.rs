//! Hostile and careless clients against a real member, while a well-behaved
//! client on the same member keeps reading and writing:
//!
//! * a flood of idle sockets from one address: the per-address cap refuses
//!   the excess at once, and the connect deadline closes the rest;
//! * a client that sends its connect request one byte at a time;
//! * a client that pipelines big reads and never reads the replies: closed
//!   once its queued replies pass the byte cap, its session left alone;
//! * a multi of 100 000 ops: refused with the limit's name;
//! * a frame over jute.maxbuffer on the ZooKeeper port closes only that
//!   connection, and the session lives on (as ZooKeeper does);
//! * the superuser of `super_digest` passes every ACL check.
//!
//! Every wait is bounded; the harness stops the member by PID.

use crate::support::{connect, rss_bytes, runtime, serial, zk_wire, Ensemble, Settings};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use zabkeeper_client::{ClientError, MultiOp};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;

/// A TCP connection to `to` from the loopback address `from`.
async fn from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{from}:0").parse().expect("an address")).expect("bind a loopback source");
    socket.connect(to).await.expect("connect")
}

/// Whether the server closed `s` within `limit` (reads until EOF or error).
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn is_bad_arguments(e: &ClientError, needle: &str) -> bool {
    matches!(e, ClientError::Server(z) if z.code == ErrorCode::BadArguments && z.reason.contains(needle))
}

#[test]
fn hostile_clients_are_bounded_while_a_good_client_carries_on() {
    let _serial = serial();
    let settings = Settings {
        size: 1,
        extra: "connect_timeout_ms = 1000\nmax_queued_reply_bytes = 8388608\nmax_multi_ops = 1000".into(),
        ..Settings::default()
    };
    let mut ensemble = Ensemble::start_with(settings);
    let pid = ensemble.member(1).pid().expect("running");
    let zk_port: SocketAddr = ensemble.zookeeper(&[1]).parse().expect("one address");
    let rt = runtime();
    rt.block_on(async {
        let acl = Acl::open_unsafe();
        let good = connect(&ensemble.grpc(&[1])).await;
        good.create("/big", &vec![7u8; 512 * 1024], CreateMode::Persistent, &acl).await.expect("create /big");
        good.create("/c", b"0", CreateMode::Persistent, &acl).await.expect("create /c");
        let rss_before = rss_bytes(pid);

        // 100 idle sockets from one address: 60 held (the per-address cap), 40 closed at once.
        let mut idle = Vec::new();
        for _ in 0..100 {
            idle.push(from("127.0.0.2", zk_port).await);
        }
        // All at once, well inside the 1 s connect deadline.
        let quick = futures::future::join_all(idle.iter_mut().map(|s| closed_within(s, Duration::from_millis(300))));
        let refused = quick.await.into_iter().filter(|closed| *closed).count();
        assert_eq!(refused, 40, "the per-address cap (60) refuses the rest at once");

        // A connect request one byte at a time, and a client that never reads.
        let mut slow = from("127.0.0.3", zk_port).await;
        let slow_writer = tokio::spawn(async move {
            for byte in zk_wire::connect_frame(0) {
                if slow.write_all(&[byte]).await.is_err() {
                    return (slow, true);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (slow, false)
        });
        let mut deaf = from("127.0.0.4", zk_port).await;
        let mut bytes = zk_wire::connect_frame(0);
        for xid in 1..=200 {
            bytes.extend_from_slice(&zk_wire::get_data_frame(xid, "/big"));
        }
        // The server stops reading once replies pile up, so this may block: bounded.
        let _ = tokio::time::timeout(Duration::from_secs(10), deaf.write_all(&bytes)).await;

        // Meanwhile the good client reads and writes.
        let mut slowest = Duration::ZERO;
        for i in 0..50 {
            let started = Instant::now();
            good.set_data("/c", format!("{i}").as_bytes(), -1).await.expect("set");
            assert_eq!(good.get_data("/c").await.expect("get").0, format!("{i}").as_bytes());
            slowest = slowest.max(started.elapsed());
        }
        let multi: Vec<MultiOp> = (0..100_000).map(|_| MultiOp::check("/c", -1)).collect();
        let err = good.multi(&multi).await.expect_err("a multi of 100 000 ops is refused");
        assert!(is_bad_arguments(&err, "max_multi_ops"), "{err}");

        let all = futures::future::join_all(idle.iter_mut().map(|s| closed_within(s, Duration::from_secs(5))));
        assert!(all.await.into_iter().all(|closed| closed), "an idle socket outlived the connect deadline");
        let (mut slow, cut) = tokio::time::timeout(Duration::from_secs(15), slow_writer)
            .await
            .expect("bounded")
            .expect("the writer task");
        assert!(cut || closed_within(&mut slow, Duration::from_secs(5)).await, "the slow connect is cut off");
        assert!(closed_within(&mut deaf, Duration::from_secs(10)).await, "the client that never reads is closed");
        let rss_after = rss_bytes(pid);
        let grown = rss_after.saturating_sub(rss_before);
        println!(
            "good client's slowest set+get {slowest:?}; member RSS {} -> {} MiB (+{} MiB)",
            rss_before >> 20,
            rss_after >> 20,
            grown >> 20
        );
        // 200 replies of 512 KiB were asked for (100 MiB) in one burst: they
        // exist at once before delivery drops what passes the 8 MiB cap, so
        // the bound is the requests in flight (max_outstanding_per_session)
        // times the reply size, not the cap alone.
        assert!(grown < 128 << 20, "memory stayed bounded: grew {grown} bytes");
        good.set_data("/c", b"after", -1).await.expect("still served");
    });
    assert!(ensemble.log(1).contains("not reading its replies"), "the close is logged");
    assert_eq!(ensemble.panics(), Vec::<String>::new());
}

#[test]
fn a_frame_over_jute_maxbuffer_closes_only_that_connection_and_the_session_lives_on() {
    use zookeeper_client as zk;
    let _serial = serial();
    let ensemble = Ensemble::start(1);
    let rt = runtime();
    rt.block_on(async {
        let hosts = ensemble.zookeeper(&[1]);
        let client = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&hosts)
            .await
            .expect("connect");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/x", b"small", &open).await.expect("create /x");
        let session = client.session_id();
        // 1 MiB of data makes a frame over jute.maxbuffer (1 048 575 bytes).
        let err = client.set_data("/x", &vec![1u8; 1 << 20], None).await.expect_err("the frame is too long");
        // Usually ConnectionLoss; on a loaded machine the client may time
        // out first, or still be writing the frame when the server closes
        // (broken pipe, reset). Either way it got no answer, and nothing was applied.
        let closed_while_writing = ["BrokenPipe", "ConnectionReset"].iter().any(|k| format!("{err:?}").contains(k));
        assert!(matches!(err, zk::Error::ConnectionLoss | zk::Error::Timeout) || closed_while_writing, "{err:?}");
        let mut data = None;
        for _ in 0..50 {
            match client.get_data("/x").await {
                Ok((d, _)) => {
                    data = Some(d);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        assert_eq!(data.as_deref(), Some(&b"small"[..]), "the write was not applied, and the client reconnected");
        assert_eq!(client.session_id(), session, "the session lived on");

        // On gRPC the data limit stays a clear error.
        let grpc = connect(&ensemble.grpc(&[1])).await;
        let err = grpc.set_data("/x", &vec![1u8; (1 << 20) + 1], -1).await.expect_err("over max_data_bytes");
        assert!(matches!(&err, ClientError::Server(z) if z.code == ErrorCode::BadArguments), "{err}");
    });
}

#[test]
fn the_superuser_passes_every_acl_check() {
    let _serial = serial();
    // super_digest is DigestAuthenticationProvider.generateDigest("super:test").
    let settings = Settings {
        size: 1,
        extra: "super_digest = \"super:D/InIHSb7yEEbrWz8b9l71RjZJU=\"".into(),
        ..Settings::default()
    };
    let ensemble = Ensemble::start_with(settings);
    let rt = runtime();
    rt.block_on(async {
        let alice = connect(&ensemble.grpc(&[1])).await;
        alice.add_auth("digest", b"alice:secret").await.expect("auth");
        alice.create("/locked", b"mine", CreateMode::Persistent, &Acl::creator_all()).await.expect("create");
        let stranger = connect(&ensemble.grpc(&[1])).await;
        let err = stranger.get_data("/locked").await.expect_err("locked out");
        assert!(matches!(&err, ClientError::Server(z) if z.code == ErrorCode::NoAuth), "{err}");
        stranger.add_auth("digest", b"super:wrong").await.expect("any digest authenticates");
        assert!(stranger.get_data("/locked").await.is_err(), "a wrong super password is no superuser");
        let admin = connect(&ensemble.grpc(&[1])).await;
        admin.add_auth("digest", b"super:test").await.expect("auth");
        assert_eq!(admin.get_data("/locked").await.expect("super reads").0, b"mine");
        admin.set_acl("/locked", &Acl::open_unsafe(), -1).await.expect("super unlocks");
        assert_eq!(stranger.get_data("/locked").await.expect("open now").0, b"mine");
    });
}

/// A client that sets a recursive watch and never reads while another
/// client's writes fire it: the events pile up in its outbox until the byte
/// cap closes its connection; the writer is unaffected and the member's
/// memory stays bounded.
#[test]
fn a_client_that_never_reads_while_its_watches_fire_is_closed_at_the_byte_cap() {
    let _serial = serial();
    let settings = Settings { size: 1, extra: "max_queued_reply_bytes = 1048576".into(), ..Settings::default() };
    let mut ensemble = Ensemble::start_with(settings);
    let pid = ensemble.member(1).pid().expect("running");
    let zk_port: SocketAddr = ensemble.zookeeper(&[1]).parse().expect("one address");
    let rt = runtime();
    rt.block_on(async {
        let good = connect(&ensemble.grpc(&[1])).await;
        let rss_before = rss_bytes(pid);
        // A small receive buffer, so the events back up on the server soon.
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("a small receive buffer");
        let mut deaf = socket.connect(zk_port).await.expect("connect");
        deaf.write_all(&zk_wire::connect_frame(0)).await.expect("send connect");
        let mut len = [0u8; 4];
        deaf.read_exact(&mut len).await.expect("a ConnectResponse");
        let mut response = vec![0u8; i32::from_be_bytes(len) as usize];
        deaf.read_exact(&mut response).await.expect("a ConnectResponse");
        // addWatch("/", PERSISTENT_RECURSIVE); its reply and every event stay unread.
        let mut add_watch = 1i32.to_be_bytes().to_vec();
        add_watch.extend_from_slice(&106i32.to_be_bytes());
        add_watch.extend_from_slice(&1i32.to_be_bytes());
        add_watch.extend_from_slice(b"/");
        add_watch.extend_from_slice(&1i32.to_be_bytes());
        deaf.write_all(&zk_wire::frame(&add_watch)).await.expect("send addWatch");

        // Each event names an 800-byte path: 12 000 of them are ~10 MB.
        let name = "n".repeat(800);
        let acl = Acl::open_unsafe();
        let mut slowest = Duration::ZERO;
        let writers = (0..8).map(|w| {
            let (good, name, acl) = (good.clone(), name.clone(), acl.clone());
            async move {
                let mut slowest = Duration::ZERO;
                for i in 0..1500 {
                    let started = Instant::now();
                    let path = format!("/{name}-{w}-{i}");
                    good.create(&path, b"", CreateMode::Persistent, &acl).await.expect("the writer is served");
                    slowest = slowest.max(started.elapsed());
                }
                slowest
            }
        });
        for s in futures::future::join_all(writers).await {
            slowest = slowest.max(s);
        }
        assert!(closed_within(&mut deaf, Duration::from_secs(20)).await, "the client that never reads is closed");
        let grown = rss_bytes(pid).saturating_sub(rss_before);
        println!("slowest create {slowest:?}; member RSS grew {} MiB", grown >> 20);
        assert!(grown < 256 << 20, "memory stayed bounded: grew {grown} bytes");
        let root = good.exists("/").await.expect("still served").expect("the root");
        assert_eq!(root.num_children, 12_001, "12 000 nodes and /zookeeper");
    });
    assert!(ensemble.log(1).contains("not reading its replies"), "the close is logged");
    assert_eq!(ensemble.panics(), Vec::<String>::new());
}
