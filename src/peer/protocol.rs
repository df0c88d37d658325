//! The version of the peer protocol, agreed on each call.
//!
//! The caller of `Notify` and `Follow` says in its request metadata which
//! versions it speaks ([`VERSION_HEADER`], the newest, and [`OLDEST_HEADER`])
//! and who it is ([`MEMBER_HEADER`]); the server answers with the version the
//! call speaks, the newest both sides know, in its response metadata, or
//! refuses the call with `FailedPrecondition` and a message that names both
//! sides' versions. A caller that says nothing is a build from before
//! versions were stated, and speaks version 1, which is the same wire as
//! version 2: nothing but these headers came with version 2. Version 3 is
//! the same wire again, from a build that reads the `load` transaction: a
//! leader loads a tree only once every member speaks it
//! (`replica::load::PEER_PROTOCOL`). Version 4 reads a leadership probe on a
//! REPLY and its echo on a REQUEST ([`PROBES_ON_MESSAGES`]); to an older peer
//! they also go in PINGs of their own, which is how it reads them.
//!
//! Why metadata and not a protobuf field: the version belongs to the call,
//! not to one of its messages, so it is read before any message is decoded
//! (a later version may change what a message means), `Follow` is refused
//! before its stream is registered with anything, and the deterministic core
//! (`crates/core/src/zab`) never sees it. A caller offers a range rather than
//! one version so that a rolling upgrade works both ways: a build of version
//! N+1 that still speaks N is answered N by a build of version N.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Mutex;
use tonic::metadata::{MetadataMap, MetadataValue};
use zabkeeper_core::ids::ServerId;

/// The newest peer protocol this build speaks, and the one it offers.
pub const SPEAKS: u32 = 4;
/// The first version that reads leadership probes and echoes carried on
/// REPLY and REQUEST messages (`Reply.probe`, `Forward.probe`).
pub const PROBES_ON_MESSAGES: u32 = 4;
/// The oldest peer protocol this build still speaks: the previous release's.
pub const OLDEST: u32 = 1;
/// Request metadata: the newest version the caller speaks; response
/// metadata: the version the call speaks.
pub const VERSION_HEADER: &str = "zabkeeper-peer-protocol";
/// Request metadata: the oldest version the caller still speaks (absent: only
/// the one in [`VERSION_HEADER`]).
pub const OLDEST_HEADER: &str = "zabkeeper-peer-protocol-oldest";
/// Request metadata: the caller's server id, so that a refusal of a `Follow`
/// (whose first message names the sender) can say whom it refused. Only
/// named in messages: what is authenticated is the sender its messages name.
pub const MEMBER_HEADER: &str = "zabkeeper-peer-id";

/// The versions one side speaks, oldest to newest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versions {
    /// The oldest.
    pub oldest: u32,
    /// The newest.
    pub newest: u32,
}

impl Versions {
    /// What this build speaks.
    pub const HERE: Versions = Versions { oldest: OLDEST, newest: SPEAKS };
    /// What a build from before versions were stated speaks.
    pub const UNSTATED: Versions = Versions { oldest: 1, newest: 1 };

    /// One version only.
    pub fn just(version: u32) -> Versions {
        Versions { oldest: version, newest: version }
    }

    /// The version a call between `self` and `other` speaks: the newest both
    /// know, if they share one.
    pub fn agree(self, other: Versions) -> Option<u32> {
        let newest = self.newest.min(other.newest);
        (newest >= self.oldest.max(other.oldest)).then_some(newest)
    }
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.oldest == self.newest {
            write!(f, "{}", self.newest)
        } else {
            write!(f, "{} to {}", self.oldest, self.newest)
        }
    }
}

/// Why a call's peer protocol is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtocolError {
    /// A version header that is not a version number, or a range upside down.
    #[error("peer protocol header {header} from {who} is not understood: {value:?}")]
    Unreadable {
        /// The header.
        header: &'static str,
        /// What it held.
        value: String,
        /// Who sent it.
        who: String,
    },
    /// The other side speaks no version this build speaks.
    #[error("peer protocol {theirs} from {who} is not understood here (this build speaks {here})", here = Versions::HERE)]
    NotUnderstood {
        /// What the other side speaks.
        theirs: Versions,
        /// Who the other side is.
        who: String,
    },
}

impl From<ProtocolError> for tonic::Status {
    fn from(e: ProtocolError) -> tonic::Status {
        tonic::Status::failed_precondition(e.to_string())
    }
}

/// Names the other side of a call for messages: its member id if known, else
/// where it called from.
pub fn who(member: Option<ServerId>, remote: Option<SocketAddr>) -> String {
    match (member, remote) {
        (Some(id), _) => format!("member {id}"),
        (None, Some(addr)) => format!("the peer at {addr}"),
        (None, None) => "an unnamed peer".into(),
    }
}

/// The member id a caller put in its request metadata, if any.
pub fn claimed_member(metadata: &MetadataMap) -> Option<ServerId> {
    metadata.get(MEMBER_HEADER)?.to_str().ok()?.parse().ok()
}

/// A version header's number, if the header is there.
fn number(metadata: &MetadataMap, header: &'static str, who: &str) -> Result<Option<u32>, ProtocolError> {
    let Some(value) = metadata.get(header) else { return Ok(None) };
    let unreadable = || ProtocolError::Unreadable {
        header,
        value: String::from_utf8_lossy(value.as_encoded_bytes()).into_owned(),
        who: who.to_string(),
    };
    let text = value.to_str().map_err(|_| unreadable())?;
    text.trim().parse::<u32>().map(Some).map_err(|_| unreadable())
}

/// What the caller of a request offers (unstated: version 1).
pub fn offered(metadata: &MetadataMap, who: &str) -> Result<Versions, ProtocolError> {
    let Some(newest) = number(metadata, VERSION_HEADER, who)? else { return Ok(Versions::UNSTATED) };
    let oldest = number(metadata, OLDEST_HEADER, who)?.unwrap_or(newest);
    if oldest > newest {
        return Err(ProtocolError::Unreadable {
            header: OLDEST_HEADER,
            value: format!("{oldest}, above the newest {newest}"),
            who: who.to_string(),
        });
    }
    Ok(Versions { oldest, newest })
}

/// The server's side: the version a call with this request metadata speaks,
/// or why it is refused.
pub fn accept(metadata: &MetadataMap, who: &str) -> Result<u32, ProtocolError> {
    let theirs = offered(metadata, who)?;
    Versions::HERE.agree(theirs).ok_or_else(|| ProtocolError::NotUnderstood { theirs, who: who.to_string() })
}

/// The caller's side: the version the server answered with (unstated: a
/// build before versions, speaking 1), or why this build cannot go on.
pub fn answered(metadata: &MetadataMap, who: &str) -> Result<u32, ProtocolError> {
    let Some(version) = number(metadata, VERSION_HEADER, who)? else { return Ok(1) };
    let theirs = Versions::just(version);
    Versions::HERE.agree(theirs).ok_or_else(|| ProtocolError::NotUnderstood { theirs, who: who.to_string() })
}

/// Puts what this build offers, and who calls, in a request's metadata.
pub fn offer(metadata: &mut MetadataMap, from: ServerId) {
    metadata.insert(VERSION_HEADER, MetadataValue::from(SPEAKS));
    metadata.insert(OLDEST_HEADER, MetadataValue::from(OLDEST));
    metadata.insert(MEMBER_HEADER, MetadataValue::from(from));
}

/// Puts the version a call speaks in its response metadata.
pub fn answer(metadata: &mut MetadataMap, version: u32) {
    metadata.insert(VERSION_HEADER, MetadataValue::from(version));
}

/// Whether the status is a refusal of the peer protocol (or a caller that
/// refuses as this build does): such a call will fail the same way again.
pub fn is_refusal(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::FailedPrecondition && status.message().contains("peer protocol")
}

/// The refusals already logged as warnings. A refused peer tries again on
/// every election tick; its first refusal is a warning, the repeats are
/// debug lines.
#[derive(Default)]
pub struct Refusals(Mutex<HashSet<String>>);

/// Distinct refusals remembered: a stranger cannot grow the set without bound.
const REMEMBERED: usize = 256;

impl Refusals {
    /// Logs `what` (a refusal, and the side that saw it) as a warning the
    /// first time, as a debug line after.
    pub fn log(&self, what: &str, reason: &str) {
        let line = format!("{what}: {reason}");
        let first = {
            let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.len() >= REMEMBERED {
                seen.clear();
            }
            seen.insert(line)
        };
        if first {
            tracing::warn!(%reason, "{what}");
        } else {
            tracing::debug!(%reason, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().expect("ascii"));
        }
        m
    }

    #[test]
    fn an_unstated_version_is_version_1_and_this_build_offers_1_to_4() {
        assert_eq!(accept(&MetadataMap::new(), "member 3"), Ok(1));
        let mut ours = MetadataMap::new();
        offer(&mut ours, 3);
        assert_eq!(accept(&ours, "member 3"), Ok(4));
        assert_eq!(claimed_member(&ours), Some(3));
        assert_eq!(accept(&metadata(&[(VERSION_HEADER, "1")]), "member 3"), Ok(1));
    }

    #[test]
    fn a_rolling_upgrade_agrees_on_the_newest_version_both_speak() {
        // The next release (5, still speaking 4) and this one meet at 4;
        // the previous one (1 to 3) and this one at 3.
        assert_eq!(accept(&metadata(&[(VERSION_HEADER, "5"), (OLDEST_HEADER, "4")]), "member 2"), Ok(4));
        assert_eq!(Versions { oldest: 1, newest: 3 }.agree(Versions::HERE), Some(3));
        assert_eq!(Versions { oldest: 5, newest: 6 }.agree(Versions::HERE), None);
    }

    #[test]
    fn a_version_outside_this_builds_is_refused_naming_both() {
        let refused = accept(&metadata(&[(VERSION_HEADER, "7")]), "member 3").expect_err("7");
        assert_eq!(
            refused.to_string(),
            "peer protocol 7 from member 3 is not understood here (this build speaks 1 to 4)"
        );
        let range = accept(&metadata(&[(VERSION_HEADER, "7"), (OLDEST_HEADER, "5")]), "member 3").expect_err("5..7");
        assert!(range.to_string().starts_with("peer protocol 5 to 7 from member 3"), "{range}");
        let status = tonic::Status::from(refused);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(is_refusal(&status));
        // A server's answer outside this build's versions is refused too.
        assert!(answered(&metadata(&[(VERSION_HEADER, "0")]), "member 1").is_err());
        assert_eq!(answered(&MetadataMap::new(), "member 1"), Ok(1));
    }

    #[test]
    fn headers_that_are_not_versions_are_refused() {
        for pairs in [
            vec![(VERSION_HEADER, "two")],
            vec![(VERSION_HEADER, "-1")],
            vec![(VERSION_HEADER, "2"), (OLDEST_HEADER, "3")],
        ] {
            let e = accept(&metadata(&pairs), "the peer at 127.0.0.1:9").expect_err("unreadable");
            assert!(matches!(e, ProtocolError::Unreadable { .. }), "{e}");
        }
        assert_eq!(who(None, Some(SocketAddr::from(([127, 0, 0, 1], 9)))), "the peer at 127.0.0.1:9");
    }
}

/// The caller's side against a server of a later build that refuses it.
#[cfg(test)]
mod caller_tests {
    use crate::runtime::handle::{Event, Handle};
    use crate::runtime::Links;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::{mpsc, watch};
    use tokio_stream::wrappers::ReceiverStream;
    use tonic::{Request, Response, Streaming};
    use zabkeeper_config::{HostPort, ServerConfig};
    use zabkeeper_core::ids::Zxid;
    use zabkeeper_core::replica::Input;
    use zabkeeper_core::storage::mem_store::MemStorage;
    use zabkeeper_core::zab::{Link, Message};
    use zabkeeper_proto::peer as pb;

    /// The next input the owner task gets, waiting at most `secs`.
    async fn next_input(inbox: &mut mpsc::Receiver<Event>, secs: u64) -> Option<Input> {
        match tokio::time::timeout(Duration::from_secs(secs), inbox.recv()).await {
            Ok(Some(Event::Input(input))) => Some(input),
            Ok(_) | Err(_) => None,
        }
    }

    /// A leader of a later build that speaks none of this build's versions.
    struct Refuser;

    const REFUSAL: &str = "peer protocol 1 to 2 from member 2 is not understood here (this build speaks 4 to 5)";

    #[tonic::async_trait]
    impl pb::peer_server::Peer for Refuser {
        async fn notify(&self, _: Request<pb::Notification>) -> Result<Response<pb::NotifyAck>, tonic::Status> {
            Err(tonic::Status::failed_precondition(REFUSAL))
        }

        type FollowStream = ReceiverStream<Result<pb::LeaderMessage, tonic::Status>>;

        async fn follow(
            &self,
            _: Request<Streaming<pb::FollowerMessage>>,
        ) -> Result<Response<Self::FollowStream>, tonic::Status> {
            Err(tonic::Status::failed_precondition(REFUSAL))
        }
    }

    #[tokio::test]
    async fn a_follower_refused_by_its_leaders_peer_protocol_is_told_its_stream_ended() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let leader_addr = listener.local_addr().expect("its address");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::peer_server::PeerServer::new(Refuser))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let text = format!(
            "data_dir = \"unused\"\n[[server]]\nid = 1\npeer_addr = \"{leader_addr}\"\ngrpc_addr = \"127.0.0.1:2\"\n\
                 [[server]]\nid = 2\npeer_addr = \"127.0.0.1:3\"\ngrpc_addr = \"127.0.0.1:4\"\n"
        );
        let config = Arc::new(ServerConfig::parse(&text, Some(2)).expect("config"));
        let (events_tx, mut inbox) = mpsc::channel(64);
        let (_applied_tx, applied_rx) = watch::channel(Zxid::ZERO);
        let handle = Handle::new(events_tx, config, Arc::new(MemStorage::new()), applied_rx);
        let leader = HostPort::parse(&leader_addr.to_string()).expect("addr");
        let addrs = [(1, leader), (2, HostPort::parse("127.0.0.1:3").expect("addr"))];
        let (mut transport, _service) = crate::peer::links(2, addrs.into_iter().collect(), handle, None);
        // This test's thread runs every task (a current-thread runtime), so
        // what they log is captured here.
        let logged = Captured::default();
        let _log = tracing::subscriber::set_default(
            tracing_subscriber::fmt().with_writer(logged.clone()).with_ansi(false).finish(),
        );
        // Refused, a notification changes nothing; a stream to the leader ends
        // as a broken one does, so the follower looks for a leader again.
        transport.send(
            1,
            Message::Notification {
                round: 1,
                vote: zabkeeper_core::zab::Vote { leader: 1, zxid: Zxid::ZERO, epoch: 0, nominated: false },
                state: zabkeeper_core::zab::PeerState::Looking,
                configuration: None,
            },
        );
        transport.send(1, Message::FollowerPing { epoch: 1, probe: 1 });
        assert!(matches!(
            next_input(&mut inbox, 10).await,
            Some(Input::PeerDisconnected { peer: 1, link: Link::ToLeader })
        ));
        // Both refusals are warnings that quote the leader's words.
        for what in ["member refused this build's peer protocol", "leader refused this build's peer protocol"] {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !logged.text().lines().any(|l| l.contains("WARN") && l.contains(what) && l.contains(REFUSAL)) {
                assert!(tokio::time::Instant::now() < deadline, "no warning {what:?} in:\n{}", logged.text());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        transport.shut_down();
    }

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).into_owned()
        }
    }

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }
}
