//! Zab traffic between members over gRPC (`proto/peer.proto`), both
//! directions of every link in one place:
//!
//! * Election notifications go through one small task per peer that calls the
//!   unary `Notify` RPC; a newer notification supersedes one not yet sent.
//! * A follower opens one `Follow` stream to its leader and sends everything
//!   for the leader on it; what the leader answers arrives on the same call.
//! * A leader keeps the streams its followers opened ([`PeerService`]), one
//!   per follower, and writes to each through a bounded queue drained by its
//!   own task ([`Transport`]).
//!
//! Sends never block the owner task: queues are bounded and a full queue
//! drops the stream (the follower then resynchronizes), as etcd's transport
//! does. A broken stream is reported as `PeerDisconnected` at once, so a
//! follower does not wait for a timeout to notice its leader died. A message
//! that does not decode closes that stream only.
//!
//! Who may speak: any server id, as in ZooKeeper, whose leader syncs a
//! server outside its configuration as a non-voting learner (a member about
//! to be added; one removed, which keeps following); Zab counts members only.
//! Addresses come from the configuration file and, as the ensemble is
//! reconfigured, from the replicated configuration ([`Transport::learn`]).
//! Under `[tls] peer = true` every link is mutual TLS ([`PeerTls`]): a
//! caller whose certificate does not name the member (of the configuration
//! file) its messages claim to come from is refused, and logged.
//!
//! Every call states the peer protocol's version in its metadata, and the
//! answer states the version the call speaks ([`protocol`]); a
//! peer that speaks none this build does is refused with both versions named.

pub mod convert;
pub mod protocol;

use self::convert::{self as peer_convert, follower_from_pb, notification_from_pb, LeaderStreamDecoder};
use self::protocol::{self as peer_protocol, Refusals};
use crate::runtime::handle::Handle;
use crate::runtime::Links;
use crate::security::tls::PeerTls;
use rustls_pki_types::CertificateDer;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tonic::{Request, Response, Streaming};
use zabkeeper_config::{HostPort, ServerConfig};
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::replica::Input;
use zabkeeper_core::zab::{Link, Message, Role, Status};
use zabkeeper_proto::peer as pb;

/// Where this member first reaches the others: the config file's members,
/// and, for a member joining, where the member it asked said the rest are.
pub fn addresses(config: &ServerConfig) -> HashMap<ServerId, HostPort> {
    let mut addrs: HashMap<ServerId, HostPort> = config.members.iter().map(|m| (m.id, m.peer_addr.clone())).collect();
    for m in config.joined.iter().flat_map(|j| j.members()) {
        if let Some(addr) = HostPort::peer_of(m) {
            addrs.entry(m.id).or_insert(addr);
        }
    }
    addrs
}

/// Both halves of this member's links: the sending side for the owner task,
/// the gRPC service for other members to call.
/// With `tls`, every link is mutual TLS.
pub fn links(
    id: ServerId,
    addrs: HashMap<ServerId, HostPort>,
    handle: Handle,
    tls: Option<Arc<PeerTls>>,
) -> (Transport, PeerService) {
    let inbound = Inbound::default();
    let heard = Heard::default();
    let refusals = Arc::new(Refusals::default());
    let service = PeerService {
        handle: handle.clone(),
        inbound: inbound.clone(),
        deliveries: Deliveries::default(),
        next_stream: AtomicU64::new(1),
        tls: tls.clone(),
        heard: heard.clone(),
        endpoints: Mutex::default(),
        refusals: refusals.clone(),
    };
    let own = addrs.get(&id).map(ToString::to_string).unwrap_or_default();
    let own_endpoints = handle.config.me().endpoints().text();
    let transport = Transport {
        id,
        own,
        own_endpoints,
        addrs,
        heard,
        handle,
        notifiers: HashMap::new(),
        follow: None,
        inbound,
        tls,
        refusals,
    };
    (transport, service)
}

/// Most messages queued toward one peer before the stream is dropped.
const QUEUE: usize = 8192;
/// Largest peer message accepted (a proposal batch or a snapshot chunk).
pub const MAX_PEER_MESSAGE: usize = 64 * 1024 * 1024;

/// A follower's stream as the leader holds it.
struct InboundStream {
    /// Tells this stream apart from a newer one from the same follower.
    stream_id: u64,
    /// Batches of messages for the follower.
    tx: mpsc::Sender<Vec<pb::LeaderMessage>>,
    /// Cleared when the stream stops speaking for the follower: a newer one
    /// registered, or the leader dropped it.
    current: Arc<AtomicBool>,
    /// The follower's delivery turn (see [`Deliveries`]).
    turn: DeliveryTurn,
    /// The peer protocol the stream speaks.
    version: u32,
}

/// The followers' streams: the service registers them, the transport writes to them.
type Inbound = Arc<Mutex<HashMap<ServerId, InboundStream>>>;

/// Peer addresses senders in no configuration here gave with their
/// notifications: the service notes them, the transport answers there.
type Heard = Arc<Mutex<HashMap<ServerId, HostPort>>>;

/// One follower's turn to hand the owner task its messages and their end.
/// A stream checks it still speaks for the follower and delivers under the
/// turn, and a newer stream registers under it, so no message of a stream
/// reaches the owner after the first of a newer one.
type DeliveryTurn = Arc<tokio::sync::Mutex<()>>;

/// The delivery turn of each follower that ever opened a stream.
type Deliveries = Arc<Mutex<HashMap<ServerId, DeliveryTurn>>>;

struct FollowStream {
    leader: ServerId,
    tx: mpsc::Sender<pb::FollowerMessage>,
    task: JoinHandle<()>,
    /// The peer protocol the leader answered (0 until it has).
    version: Arc<AtomicU32>,
}

/// The sending side of replica-to-replica traffic.
pub struct Transport {
    id: ServerId,
    /// Our own peer address, told with each notification.
    own: String,
    /// Where else we serve, told with each notification.
    own_endpoints: String,
    addrs: HashMap<ServerId, HostPort>,
    heard: Heard,
    handle: Handle,
    /// A task per member notifications go to, with the address it dials.
    notifiers: HashMap<ServerId, (HostPort, mpsc::Sender<pb::Notification>)>,
    follow: Option<FollowStream>,
    inbound: Inbound,
    tls: Option<Arc<PeerTls>>,
    /// Peer protocol refusals already warned of (shared with the service).
    refusals: Arc<Refusals>,
}

/// How to reach member `to` at `addr`: over TLS with `tls`, whose current
/// certificates are read at each connect (a reload reaches new links).
fn endpoint(to: ServerId, addr: &HostPort, tls: Option<&PeerTls>) -> Result<Endpoint, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| format!("{addr} does not form a URI: {e}"))?
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5));
    match tls {
        Some(tls) => endpoint.tls_config(tls.dial(to)).map_err(|e| format!("TLS to member {to}: {e}")),
        None => Ok(endpoint),
    }
}

impl Links for Transport {
    fn send(&mut self, to: ServerId, msg: Message) {
        Transport::send(self, to, msg);
    }
    fn learn(&mut self, addrs: Vec<(ServerId, HostPort)>) {
        Transport::learn(self, addrs);
    }
    fn on_status(&mut self, status: Status) {
        Transport::on_status(self, status);
    }
    fn shut_down(&mut self) {
        Transport::shut_down(self);
    }
}

impl Transport {
    /// Sends a message (lossy; never blocks).
    pub fn send(&mut self, to: ServerId, msg: Message) {
        if let Some(mut n) = peer_convert::notification_to_pb(self.id, &msg) {
            n.peer_addr.clone_from(&self.own);
            n.endpoints.clone_from(&self.own_endpoints);
            self.notify(to, n);
        } else if msg.is_from_leader() {
            self.send_to_follower(to, &msg);
        } else {
            self.send_to_leader(to, &msg);
        }
    }

    /// Learns where members are reached, from a configuration: a member
    /// added, or one whose address changed (its notifier reconnects there).
    pub fn learn(&mut self, addrs: Vec<(ServerId, HostPort)>) {
        if let Some(tls) = &self.tls {
            tls.learn(addrs.iter().map(|(id, addr)| (*id, addr.host())));
        }
        // A member no longer in the configuration is reached, if at all,
        // where it last said it is (it may come back on another host).
        let kept: std::collections::HashSet<ServerId> = addrs.iter().map(|(id, _)| *id).collect();
        self.addrs.retain(|id, _| *id == self.id || kept.contains(id));
        for (id, addr) in addrs {
            if id == self.id || self.addrs.get(&id) == Some(&addr) {
                continue;
            }
            tracing::info!(member = id, %addr, "member address learned from the configuration");
            self.addrs.insert(id, addr);
        }
    }

    /// Adjusts streams to a role change.
    pub fn on_status(&mut self, status: Status) {
        let keep =
            status.role == Role::Following && self.follow.as_ref().map(|f| Some(f.leader)) == Some(status.leader);
        if !keep {
            if let Some(f) = self.follow.take() {
                f.task.abort();
            }
        }
        if status.role != Role::Leading {
            // Followers of a leader that stepped down learn it at once.
            lock_map(&self.inbound).clear();
        }
    }

    /// Closes every stream (the replica is stopping).
    pub fn shut_down(&mut self) {
        if let Some(f) = self.follow.take() {
            f.task.abort();
        }
        lock_map(&self.inbound).clear();
        self.notifiers.clear();
    }

    /// Where member `to` is reached: as the configuration says, or for one
    /// in no configuration (joining, or removed), where it last said it is.
    fn address_of(&self, to: ServerId) -> Option<HostPort> {
        self.addrs.get(&to).cloned().or_else(|| lock_map(&self.heard).get(&to).cloned())
    }

    fn notify(&mut self, to: ServerId, n: pb::Notification) {
        let Some(addr) = self.address_of(to) else { return };
        if self.notifiers.get(&to).is_some_and(|(at, _)| *at != addr) {
            self.notifiers.remove(&to);
        }
        let tls = self.tls.clone();
        let (from, refusals) = (self.id, self.refusals.clone());
        let (_, tx) = self.notifiers.entry(to).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(64);
            tokio::spawn(notifier(from, to, addr.clone(), tls, refusals, rx));
            (addr, tx)
        });
        let _ = tx.try_send(n);
    }

    fn send_to_leader(&mut self, to: ServerId, msg: &Message) {
        let pb = match peer_convert::follower_to_pb(self.id, msg) {
            Ok(pb) => pb,
            Err(e) => {
                tracing::warn!(to, error = %e, "cannot send to leader");
                return;
            }
        };
        // Before the leader answers, its version is unknown (0): a second
        // echo is harmless (the leader takes only a higher one), a lost one is not.
        let version = self.follow.as_ref().filter(|f| f.leader == to).map_or(0, |f| f.version.load(Ordering::Relaxed));
        let echo =
            peer_convert::probe_apart(version, msg).and_then(|ping| peer_convert::follower_to_pb(self.id, &ping).ok());
        let reusable = self.follow.as_ref().is_some_and(|f| f.leader == to && !f.tx.is_closed());
        if !reusable {
            if let Some(old) = self.follow.take() {
                old.task.abort();
            }
            let Some(addr) = self.address_of(to) else { return };
            let (tx, rx) = mpsc::channel(QUEUE);
            let version = Arc::new(AtomicU32::new(0));
            let task = tokio::spawn(follow(
                (self.id, to),
                addr,
                rx,
                self.handle.clone(),
                self.tls.clone(),
                self.refusals.clone(),
                version.clone(),
            ));
            self.follow = Some(FollowStream { leader: to, tx, task, version });
        }
        if let Some(f) = &self.follow {
            if f.tx.try_send(pb).is_err() || echo.is_some_and(|ping| f.tx.try_send(ping).is_err()) {
                tracing::warn!(leader = to, "queue to the leader is full; dropping the stream");
                if let Some(f) = self.follow.take() {
                    f.task.abort();
                }
            }
        }
    }

    fn send_to_follower(&mut self, to: ServerId, msg: &Message) {
        let mut batch = match peer_convert::leader_to_pb(self.id, msg) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(to, error = %e, "cannot send to follower");
                return;
            }
        };
        let mut inbound = lock_map(&self.inbound);
        let Some(stream) = inbound.get(&to) else { return };
        if let Some(ping) = peer_convert::probe_apart(stream.version, msg) {
            batch.extend(peer_convert::leader_to_pb(self.id, &ping).unwrap_or_default());
        }
        if stream.tx.try_send(batch).is_err() {
            tracing::warn!(follower = to, "queue to the follower is full or closed; dropping its stream");
            if let Some(dropped) = inbound.remove(&to) {
                // Its reader delivers nothing more and does not report its
                // end; the drop is reported here, in its turn, so after what
                // the reader already handed over and before a newer stream.
                dropped.current.store(false, Ordering::Relaxed);
                let handle = self.handle.clone();
                tokio::spawn(async move {
                    let _turn = dropped.turn.lock().await;
                    handle.input(Input::PeerDisconnected { peer: to, link: Link::FromFollower }).await;
                });
            }
        }
    }
}

async fn notifier(
    from: ServerId,
    to: ServerId,
    addr: HostPort,
    tls: Option<Arc<PeerTls>>,
    refusals: Arc<Refusals>,
    mut rx: mpsc::Receiver<pb::Notification>,
) {
    let connect = || match endpoint(to, &addr, tls.as_deref()) {
        Ok(endpoint) => Some(pb::peer_client::PeerClient::new(endpoint.timeout(Duration::from_secs(1)).connect_lazy())),
        Err(e) => {
            tracing::warn!(to, error = %e, "cannot reach this member");
            None
        }
    };
    let mut client = None;
    while let Some(mut n) = rx.recv().await {
        // Only our latest state matters.
        while let Ok(newer) = rx.try_recv() {
            n = newer;
        }
        if client.is_none() {
            client = connect();
        }
        if let Some(c) = client.as_mut() {
            let mut request = Request::new(n);
            peer_protocol::offer(request.metadata_mut(), from);
            match c.notify(request).await {
                Ok(answer) => {
                    let member = peer_protocol::who(Some(to), None);
                    if let Err(e) = peer_protocol::answered(answer.metadata(), &member) {
                        refusals.log("member answered in a peer protocol this build does not speak", &e.to_string());
                    }
                }
                Err(status) if peer_protocol::is_refusal(&status) => {
                    refusals.log("member refused this build's peer protocol", status.message());
                }
                Err(status) => {
                    tracing::debug!(to, error = %status, "notification not delivered");
                    // A fresh channel next time, with the certificates current then.
                    client = None;
                }
            }
        }
    }
}

/// Follows `leader` (`ends`: this member, the leader) on one stream until it ends.
async fn follow(
    ends: (ServerId, ServerId),
    addr: HostPort,
    rx: mpsc::Receiver<pb::FollowerMessage>,
    handle: Handle,
    tls: Option<Arc<PeerTls>>,
    refusals: Arc<Refusals>,
    version: Arc<AtomicU32>,
) {
    let (me, leader) = ends;
    let outcome: Result<(), String> = async {
        let channel = endpoint(leader, &addr, tls.as_deref())?.connect().await.map_err(|e| e.to_string())?;
        let mut client = pb::peer_client::PeerClient::new(channel)
            .max_decoding_message_size(MAX_PEER_MESSAGE)
            .max_encoding_message_size(MAX_PEER_MESSAGE);
        let mut request = Request::new(ReceiverStream::new(rx));
        peer_protocol::offer(request.metadata_mut(), me);
        let answer = client.follow(request).await.map_err(|status| {
            if peer_protocol::is_refusal(&status) {
                refusals.log("leader refused this build's peer protocol", status.message());
            }
            status.to_string()
        })?;
        match peer_protocol::answered(answer.metadata(), &peer_protocol::who(Some(leader), None)) {
            Ok(agreed) => version.store(agreed, Ordering::Relaxed),
            Err(e) => {
                refusals.log("leader answered in a peer protocol this build does not speak", &e.to_string());
                return Err(e.to_string());
            }
        }
        let mut inbound = answer.into_inner();
        let mut decoder = LeaderStreamDecoder::default();
        while let Some(m) = inbound.message().await.map_err(|e| e.to_string())? {
            match decoder.decode(m) {
                Ok(Some((_, msg))) => {
                    if !handle.input(Input::Peer { from: leader, msg }).await {
                        return Ok(());
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad message from leader: {e}")),
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = outcome {
        tracing::debug!(leader, error = %e, "stream to leader ended");
    }
    handle.input(Input::PeerDisconnected { peer: leader, link: Link::ToLeader }).await;
}

/// Locks one of the service's maps. Each critical section leaves its map
/// whole at every step, so a panic elsewhere under the lock spoils nothing.
fn lock_map<T>(map: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

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
    /// The peer protocol version a call speaks, or its refusal (logged).
    fn agree<T>(&self, request: &Request<T>, claimed: Option<ServerId>) -> Result<u32, tonic::Status> {
        let who = peer_protocol::who(claimed, request.remote_addr());
        peer_protocol::accept(request.metadata(), &who).map_err(|e| {
            self.refusals.log("refused a peer's call", &e.to_string());
            tonic::Status::from(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::handle::Event;
    use bytes::Bytes;
    use tokio::sync::watch;
    use zabkeeper_config::ServerConfig;
    use zabkeeper_core::ids::Zxid;
    use zabkeeper_core::storage::mem_store::MemStorage;

    /// The leader's side of the peer service on a loopback port, and the
    /// inbox its owner task would read.
    async fn leader_service() -> (String, mpsc::Receiver<Event>) {
        let (_transport, url, inbox) = leader_service_and_transport().await;
        (url, inbox)
    }

    /// [`leader_service`], and the transport its owner task would send with.
    async fn leader_service_and_transport() -> (Transport, String, mpsc::Receiver<Event>) {
        let text =
            "data_dir = \"unused\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\n\
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
            matches!(
                next_input(&mut inbox, 10).await,
                Some(Input::PeerDisconnected { peer: 2, link: Link::FromFollower })
            ),
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
            matches!(
                next_input(&mut inbox, 10).await,
                Some(Input::PeerDisconnected { peer: 2, link: Link::FromFollower })
            ),
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
        assert_eq!(
            refused.message(),
            "peer protocol 7 from member 2 is not understood here (this build speaks 1 to 4)"
        );
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
}
