//! What the other members call ([`PeerService`]): their election
//! notifications, and the `Follow` streams of the members that follow this
//! one. Each call's peer protocol is agreed before anything in it is read,
//! and under peer TLS a caller must hold the certificate of the member it
//! claims to be. A follower's newer stream supersedes its older one, in its
//! delivery turn, so nothing of the older reaches the owner after the newer.

use super::convert::{follower_from_pb, notification_from_pb};
use super::protocol::{self as peer_protocol, Refusals};
use super::{lock_map, Deliveries, DeliveryTurn, Heard, Inbound, InboundStream};
use crate::runtime::handle::Handle;
use crate::security::tls::PeerTls;
use rustls_pki_types::CertificateDer;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Streaming};
use zabkeeper_config::HostPort;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::replica::Input;
use zabkeeper_core::zab::Link;
use zabkeeper_proto::peer as pb;

/// Accepts traffic from the other members.
pub struct PeerService {
    handle: Handle,
    inbound: Inbound,
    deliveries: Deliveries,
    next_stream: AtomicU64,
    tls: Option<Arc<PeerTls>>,
    heard: Heard,
    /// The endpoints each member last said it has (told to the replica on a change).
    endpoints: Mutex<HashMap<ServerId, String>>,
    /// Peer protocol refusals already warned of (shared with the transport).
    refusals: Arc<Refusals>,
}

/// The certificates a caller showed, with where it called from.
struct Caller {
    certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    remote: Option<std::net::SocketAddr>,
}

impl Caller {
    fn of<T>(request: &Request<T>) -> Caller {
        Caller { certs: request.peer_certs(), remote: request.remote_addr() }
    }

    /// Under peer TLS, whether the caller's certificate names `from`, the
    /// member it claims to be; a refusal is logged.
    fn authenticate(&self, tls: Option<&PeerTls>, from: ServerId) -> Result<(), String> {
        let Some(tls) = tls else { return Ok(()) };
        tls.check(from, self.certs.as_deref().map(Vec::as_slice)).inspect_err(|reason| {
            tracing::warn!(claimed = from, remote = ?self.remote, %reason, "peer refused");
        })
    }
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn notify(&self, request: Request<pb::Notification>) -> Result<Response<pb::NotifyAck>, tonic::Status> {
        // Before the message is decoded (only its sender's id is read, to
        // name it in a refusal): a version not spoken here may give it
        // another meaning.
        let version = self.agree(&request, Some(request.get_ref().from))?;
        let (from, msg) =
            notification_from_pb(request.get_ref()).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        if !zabkeeper_core::members::is_server_id(from) {
            // No member has such an id: nothing kept or answered for it.
            return Err(tonic::Status::invalid_argument(format!("server id {from} is not within 1..=254")));
        }
        let claimed = HostPort::parse(&request.get_ref().peer_addr).ok();
        Caller::of(&request)
            .authenticate(self.tls.as_deref(), from)
            .map_err(|reason| tonic::Status::unauthenticated(format!("refused as member {from}: {reason}")))?;
        if let Some(addr) = claimed {
            // The latest claim: a member removed may come back on another host.
            lock_map(&self.heard).insert(from, addr);
        }
        let said = &request.get_ref().endpoints;
        // A few hundred bytes for each of at most 254 ids: what a stranger
        // says cannot grow this map without bound.
        let told = said.len() <= 1024;
        let changed = told && lock_map(&self.endpoints).get(&from) != Some(said);
        if changed {
            if let Ok(endpoints) = zabkeeper_core::members::Endpoints::parse(said) {
                lock_map(&self.endpoints).insert(from, said.clone());
                let peer = request.get_ref().peer_addr.clone();
                self.handle.input(Input::PeerEndpoints { from, peer, endpoints }).await;
            }
        }
        self.handle.input(Input::Peer { from, msg }).await;
        let mut answer = Response::new(pb::NotifyAck {});
        peer_protocol::answer(answer.metadata_mut(), version);
        Ok(answer)
    }

    type FollowStream = ReceiverStream<Result<pb::LeaderMessage, tonic::Status>>;

    async fn follow(
        &self,
        request: Request<Streaming<pb::FollowerMessage>>,
    ) -> Result<Response<Self::FollowStream>, tonic::Status> {
        let version = self.agree(&request, peer_protocol::claimed_member(request.metadata()))?;
        // The claim arrives with the first message; the certificate with the
        // connection, so keep it to hold the two together.
        let tls = self.tls.clone();
        let caller = Caller::of(&request);
        let mut incoming = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel::<Result<pb::LeaderMessage, tonic::Status>>(64);
        let (batch_tx, mut batch_rx) = mpsc::channel::<Vec<pb::LeaderMessage>>(8192);
        // Writer: batches from the owner task, in order, into the response stream.
        tokio::spawn(async move {
            while let Some(batch) = batch_rx.recv().await {
                for m in batch {
                    if out_tx.send(Ok(m)).await.is_err() {
                        return;
                    }
                }
            }
        });
        let stream_id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let handle = self.handle.clone();
        let inbound = self.inbound.clone();
        let deliveries = self.deliveries.clone();
        tokio::spawn(async move {
            let mut follower: Option<(ServerId, DeliveryTurn)> = None;
            let mut batch_tx = Some(batch_tx);
            let current = Arc::new(AtomicBool::new(true));
            while let Ok(Some(m)) = incoming.message().await {
                let (from, msg) = match follower_from_pb(m) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "malformed message from a follower; closing its stream");
                        break;
                    }
                };
                if follower.as_ref().is_some_and(|(f, _)| *f != from) {
                    tracing::warn!(from, "stream whose sender changed; closing it");
                    break;
                }
                let turn = match &follower {
                    Some((_, turn)) => turn.clone(),
                    None => {
                        if !zabkeeper_core::members::is_server_id(from)
                            || caller.authenticate(tls.as_deref(), from).is_err()
                        {
                            break;
                        }
                        let turn = lock_map(&deliveries).entry(from).or_default().clone();
                        lock_map(&handle.peer_versions).insert(from, version);
                        follower = Some((from, turn.clone()));
                        turn
                    }
                };
                let _turn = turn.lock().await;
                if let Some(tx) = batch_tx.take() {
                    let newer = InboundStream { stream_id, tx, current: current.clone(), turn: turn.clone(), version };
                    let older = lock_map(&inbound).insert(from, newer);
                    if let Some(older) = older {
                        // The follower reconnected (a restart, a new sync):
                        // what it did on its older stream is over, as if that
                        // stream had ended, and what that stream still carries
                        // is from before. Delivered after this one's first
                        // message, a write of a restarted member's previous
                        // life could be proposed late, and its commit taken
                        // for a new request that reused its tag.
                        older.current.store(false, Ordering::Relaxed);
                        if !handle.input(Input::PeerDisconnected { peer: from, link: Link::FromFollower }).await {
                            break;
                        }
                    }
                } else if !current.load(Ordering::Relaxed) {
                    tracing::debug!(follower = from, "stream superseded or dropped; closing it");
                    break;
                }
                if !handle.input(Input::Peer { from, msg }).await {
                    break;
                }
            }
            if let Some((f, turn)) = follower {
                let _turn = turn.lock().await;
                // A stream superseded or dropped had its end told already.
                if current.load(Ordering::Relaxed) {
                    {
                        let mut registry = lock_map(&inbound);
                        if registry.get(&f).is_some_and(|s| s.stream_id == stream_id) {
                            registry.remove(&f);
                            // Not following now: what it speaks is unknown until it comes back.
                            lock_map(&handle.peer_versions).remove(&f);
                        }
                    }
                    handle.input(Input::PeerDisconnected { peer: f, link: Link::FromFollower }).await;
                }
            }
        });
        let mut answer = Response::new(ReceiverStream::new(out_rx));
        peer_protocol::answer(answer.metadata_mut(), version);
        Ok(answer)
    }
}

impl PeerService {
    /// The service of a member, sharing `inbound`, `heard` and `refusals`
    /// with its transport.
    pub(super) fn new(
        handle: Handle,
        inbound: Inbound,
        tls: Option<Arc<PeerTls>>,
        heard: Heard,
        refusals: Arc<Refusals>,
    ) -> PeerService {
        PeerService {
            handle,
            inbound,
            deliveries: Deliveries::default(),
            next_stream: AtomicU64::new(1),
            tls,
            heard,
            endpoints: Mutex::default(),
            refusals,
        }
    }

    /// The peer protocol version a call speaks, or its refusal (logged).
    fn agree<T>(&self, request: &Request<T>, claimed: Option<ServerId>) -> Result<u32, tonic::Status> {
        let who = peer_protocol::who(claimed, request.remote_addr());
        peer_protocol::accept(request.metadata(), &who).map_err(|e| {
            self.refusals.log("refused a peer's call", &e.to_string());
            tonic::Status::from(e)
        })
    }
}
