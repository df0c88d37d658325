//! The peer links' tests over loopback gRPC: probes riding on replies by
//! protocol version, a follower's newer stream superseding its older one,
//! and the version agreement of every call.

use super::convert::{self as peer_convert, LeaderStreamDecoder};
use super::protocol as peer_protocol;
use super::*;
use crate::runtime::handle::Event;
use crate::runtime::Links;
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response};
use zabkeeper_config::ServerConfig;
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::replica::Input;
use zabkeeper_core::storage::mem_store::MemStorage;
use zabkeeper_core::zab::{Link, Message};

/// The leader's side of the peer service on a loopback port, and the
/// inbox its owner task would read.
async fn leader_service() -> (String, mpsc::Receiver<Event>) {
    let (_transport, url, inbox) = leader_service_and_transport().await;
    (url, inbox)
}

/// [`leader_service`], and the transport its owner task would send with.
async fn leader_service_and_transport() -> (Transport, String, mpsc::Receiver<Event>) {
    let text = "data_dir = \"unused\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\n\
                [[server]]\nid = 2\npeer_addr = \"127.0.0.1:3\"\ngrpc_addr = \"127.0.0.1:4\"\n";
    let config = Arc::new(ServerConfig::parse(text, Some(1)).expect("config"));
    let (events_tx, events_rx) = mpsc::channel(64);
    let (_applied_tx, applied_rx) = watch::channel(Zxid::ZERO);
    let handle = Handle::new(events_tx, config, Arc::new(MemStorage::new()), applied_rx);
    let addrs =
        [(1, HostPort::parse("127.0.0.1:1").expect("addr")), (2, HostPort::parse("127.0.0.1:3").expect("addr"))];
    let (transport, service) = links(1, addrs.into_iter().collect(), handle, None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::peer_server::PeerServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (transport, format!("http://{addr}"), events_rx)
}

/// A `Follow` stream from member 2; what is sent on the returned
/// channel reaches the leader.
async fn open_stream(url: &str) -> (mpsc::Sender<pb::FollowerMessage>, tonic::Streaming<pb::LeaderMessage>) {
    let mut client = pb::peer_client::PeerClient::connect(url.to_string()).await.expect("connect");
    let (tx, rx) = mpsc::channel(16);
    let answers = client.follow(ReceiverStream::new(rx)).await.expect("follow").into_inner();
    (tx, answers)
}

fn ping(probe: u64) -> pb::FollowerMessage {
    peer_convert::follower_to_pb(2, &Message::FollowerPing { epoch: 1, probe }).expect("encode")
}

/// The next input the owner task gets, waiting at most `secs`.
async fn next_input(inbox: &mut mpsc::Receiver<Event>, secs: u64) -> Option<Input> {
    match tokio::time::timeout(Duration::from_secs(secs), inbox.recv()).await {
        Ok(Some(Event::Input(input))) => Some(input),
        Ok(_) | Err(_) => None,
    }
}

fn probe_of(input: Option<Input>) -> Option<u64> {
    match input {
        Some(Input::Peer { from: 2, msg: Message::FollowerPing { probe, .. } }) => Some(probe),
        _ => None,
    }
}

/// A follower of protocol 3 or older reads a leadership probe only in a
/// PING: a probe on a REPLY goes to it in one of its own as well. One of
/// this build reads it on the REPLY alone.
#[tokio::test]
async fn a_probe_on_a_reply_goes_in_a_ping_too_only_to_a_follower_before_protocol_4() {
    let reply = |probe| Message::Reply { epoch: 1, payload: Bytes::from_static(b"r"), probe };
    for (offered, apart) in [(None, true), (Some("3"), true), (Some("4"), false)] {
        let (mut transport, url, mut inbox) = leader_service_and_transport().await;
        let mut client = pb::peer_client::PeerClient::connect(url).await.expect("connect");
        let (tx, rx) = mpsc::channel(16);
        let mut request = Request::new(ReceiverStream::new(rx));
        if let Some(v) = offered {
            request.metadata_mut().insert(peer_protocol::VERSION_HEADER, v.parse().expect("ascii"));
        }
        let mut answers = client.follow(request).await.expect("follow").into_inner();
        tx.send(ping(1)).await.expect("send");
        assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(1), "the stream is registered");
        transport.send(2, reply(7));
        // A reply with no probe ends what this test reads.
        transport.send(2, reply(0));
        let mut decoder = LeaderStreamDecoder::default();
        let mut got = Vec::new();
        while !got.contains(&reply(0)) {
            let m = tokio::time::timeout(Duration::from_secs(10), answers.message()).await;
            let m = m.expect("in time").expect("a stream").expect("a message");
            got.extend(decoder.decode(m).expect("decodes").map(|(_, msg)| msg));
        }
        let mut expected = vec![reply(7)];
        if apart {
            expected.push(Message::Ping { epoch: 1, committed: Zxid::ZERO, probe: 7 });
        }
        expected.push(reply(0));
        assert_eq!(got, expected, "to a follower offering {offered:?}");
    }
}

#[tokio::test]
async fn a_followers_older_stream_delivers_nothing_once_a_newer_one_opens() {
    // A restarted follower's old stream may still hold messages of its
    // previous life; delivered after the new life's sync, a write it
    // carried could be proposed late and its commit taken for a new
    // request that reused its tag.
    let (url, mut inbox) = leader_service().await;
    let (old_tx, _old_answers) = open_stream(&url).await;
    old_tx.send(ping(1)).await.expect("send on the old stream");
    assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(1));
    let (new_tx, _new_answers) = open_stream(&url).await;
    new_tx.send(ping(2)).await.expect("send on the new stream");
    assert!(
        matches!(next_input(&mut inbox, 10).await, Some(Input::PeerDisconnected { peer: 2, link: Link::FromFollower })),
        "the reconnect ends what the follower did on its old stream, before its first new message"
    );
    assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(2));
    old_tx.send(ping(3)).await.expect("send on the old stream");
    drop(old_tx);
    new_tx.send(ping(4)).await.expect("send on the new stream");
    // Neither what the old stream still carried nor its end reaches the
    // owner, and the newer stream goes on.
    assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(4));
    assert!(next_input(&mut inbox, 1).await.is_none(), "nothing more from member 2");
    drop(new_tx);
    assert!(
        matches!(next_input(&mut inbox, 10).await, Some(Input::PeerDisconnected { peer: 2, link: Link::FromFollower })),
        "the end of the current stream is reported"
    );
}

/// A notification from member 2, whose request metadata says `version`
/// (`None`: nothing, as a build from before versions).
fn notification_saying(version: Option<&str>) -> Request<pb::Notification> {
    let mut request = Request::new(pb::Notification {
        from: 2,
        vote: Some(pb::Vote { leader: 2, zxid: 0, epoch: 0, nominated: false }),
        round: 1,
        state: pb::PeerState::Looking as i32,
        accepted_epoch: 0,
        configuration: Vec::new(),
        peer_addr: "127.0.0.1:3".into(),
        endpoints: String::new(),
    });
    if let Some(v) = version {
        request.metadata_mut().insert(peer_protocol::VERSION_HEADER, v.parse().expect("ascii"));
    }
    request
}

/// Whether member 2's notification reaches the owner within `secs`
/// (after its endpoints, told with its first notification).
async fn notification_arrives(inbox: &mut mpsc::Receiver<Event>, secs: u64) -> bool {
    loop {
        match next_input(inbox, secs).await {
            Some(Input::PeerEndpoints { from: 2, .. }) => continue,
            Some(Input::Peer { from: 2, msg: Message::Notification { .. } }) => return true,
            _ => return false,
        }
    }
}

fn answered_version<T>(answer: &Response<T>) -> Option<&str> {
    answer.metadata().get(peer_protocol::VERSION_HEADER).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn notify_accepts_peer_protocols_1_and_2_and_an_unstated_one_and_refuses_others_naming_both() {
    let (url, mut inbox) = leader_service().await;
    let mut client = pb::peer_client::PeerClient::connect(url).await.expect("connect");
    for (said, agreed) in [(None, "1"), (Some("1"), "1"), (Some("2"), "2"), (Some("3"), "3"), (Some("4"), "4")] {
        let answer = client.notify(notification_saying(said)).await.expect("a version spoken here");
        assert_eq!(answered_version(&answer), Some(agreed), "for {said:?}");
        assert!(notification_arrives(&mut inbox, 5).await, "for {said:?}");
    }
    let refused = client.notify(notification_saying(Some("7"))).await.expect_err("version 7");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert_eq!(refused.message(), "peer protocol 7 from member 2 is not understood here (this build speaks 1 to 4)");
    assert!(next_input(&mut inbox, 1).await.is_none(), "a refused notification reaches nothing");
    // The refusal closed nothing: the same channel goes on.
    client.notify(notification_saying(Some("2"))).await.expect("version 2 after a refusal");
    assert!(notification_arrives(&mut inbox, 5).await);
}

#[tokio::test]
async fn follow_refuses_an_unknown_peer_protocol_before_any_message_and_answers_its_own() {
    let (url, mut inbox) = leader_service().await;
    let mut client = pb::peer_client::PeerClient::connect(url.clone()).await.expect("connect");
    let (_tx, rx) = mpsc::channel::<pb::FollowerMessage>(1);
    let mut request = Request::new(ReceiverStream::new(rx));
    request.metadata_mut().insert(peer_protocol::VERSION_HEADER, "9".parse().expect("ascii"));
    request.metadata_mut().insert(peer_protocol::OLDEST_HEADER, "5".parse().expect("ascii"));
    request.metadata_mut().insert(peer_protocol::MEMBER_HEADER, "2".parse().expect("ascii"));
    let refused = client.follow(request).await.expect_err("versions 5 to 9");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        refused.message(),
        "peer protocol 5 to 9 from member 2 is not understood here (this build speaks 1 to 4)"
    );
    // This build's own offer is answered with version 4, and the stream works.
    let (tx, rx) = mpsc::channel(16);
    let mut request = Request::new(ReceiverStream::new(rx));
    peer_protocol::offer(request.metadata_mut(), 2);
    let answer = client.follow(request).await.expect("this build's versions");
    assert_eq!(answered_version(&answer), Some("4"));
    tx.send(ping(5)).await.expect("send");
    assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(5));
    // A stream from a build before versions (no header) is version 1.
    let (old_tx, _answers) = open_stream(&url).await;
    old_tx.send(ping(6)).await.expect("send");
    assert!(matches!(
        next_input(&mut inbox, 10).await,
        Some(Input::PeerDisconnected { peer: 2, link: Link::FromFollower })
    ));
    assert_eq!(probe_of(next_input(&mut inbox, 10).await), Some(6));
}

#[tokio::test]
async fn a_notification_from_an_id_no_member_can_have_is_refused_and_endpoints_are_told_once() {
    let (url, mut inbox) = leader_service().await;
    let mut client = pb::peer_client::PeerClient::connect(url).await.expect("connect");
    let vote = Some(pb::Vote { leader: 2, zxid: 0, epoch: 0, nominated: false });
    let notification = |from: u64, endpoints: &str| pb::Notification {
        from,
        vote,
        round: 1,
        state: pb::PeerState::Looking as i32,
        accepted_epoch: 0,
        configuration: Vec::new(),
        peer_addr: "127.0.0.1:3".into(),
        endpoints: endpoints.into(),
    };
    let refused = client.notify(notification(300, "")).await.expect_err("id 300");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    client.notify(notification(2, "admin=127.0.0.1:9")).await.expect("member 2 notifies");
    match next_input(&mut inbox, 5).await {
        Some(Input::PeerEndpoints { from: 2, peer, endpoints }) => {
            assert_eq!((peer.as_str(), endpoints.admin.as_str()), ("127.0.0.1:3", "127.0.0.1:9"));
        }
        other => panic!("expected member 2's endpoints first, got {other:?}"),
    }
    assert!(matches!(next_input(&mut inbox, 5).await, Some(Input::Peer { from: 2, .. })));
    client.notify(notification(2, "admin=127.0.0.1:9")).await.expect("again");
    assert!(matches!(next_input(&mut inbox, 5).await, Some(Input::Peer { from: 2, .. })), "told once");
    // Endpoints that are not host:port are not passed on; the vote is.
    client.notify(notification(2, "admin=bad host\nserver.9=x:1:1")).await.expect("still a notification");
    assert!(matches!(next_input(&mut inbox, 5).await, Some(Input::Peer { from: 2, .. })));
}
