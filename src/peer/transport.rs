//! The links this member dials: a notifier task per member for election
//! notifications, the one `Follow` stream to the leader it follows, and
//! writes to the streams its followers opened. Every send is lossy and
//! never blocks the owner task: a full queue drops the stream, and Zab
//! resynchronizes.

use super::convert::{self as peer_convert, LeaderStreamDecoder};
use super::protocol::{self as peer_protocol, Refusals};
use super::{lock_map, Heard, Inbound, MAX_PEER_MESSAGE, QUEUE};
use crate::runtime::handle::Handle;
use crate::runtime::Links;
use crate::security::tls::PeerTls;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tonic::Request;
use zabkeeper_config::HostPort;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::replica::Input;
use zabkeeper_core::zab::{Link, Message, Role, Status};
use zabkeeper_proto::peer as pb;

/// This member's stream to the leader it follows.
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

impl Transport {
    /// The sending side of member `id`, which reaches the others at `addrs`
    /// and shares `inbound`, `heard` and `refusals` with its service.
    pub(super) fn new(
        id: ServerId,
        addrs: HashMap<ServerId, HostPort>,
        handle: Handle,
        inbound: Inbound,
        heard: Heard,
        tls: Option<Arc<PeerTls>>,
        refusals: Arc<Refusals>,
    ) -> Transport {
        let own = addrs.get(&id).map(ToString::to_string).unwrap_or_default();
        let own_endpoints = handle.config.me().endpoints().text();
        Transport {
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
        }
    }
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
    /// Sends a message (lossy; never blocks).
    fn send(&mut self, to: ServerId, msg: Message) {
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
    fn learn(&mut self, addrs: Vec<(ServerId, HostPort)>) {
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
    fn on_status(&mut self, status: Status) {
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
    fn shut_down(&mut self) {
        if let Some(f) = self.follow.take() {
            f.task.abort();
        }
        lock_map(&self.inbound).clear();
        self.notifiers.clear();
    }
}

impl Transport {
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
        if let Message::Proposal { .. } = msg {
            // A proposal goes to each follower alike: last, min and max are
            // the same however many times one is counted.
            for proposal in batch.iter().filter_map(|m| match &m.kind {
                Some(pb::leader_message::Kind::Proposal(p)) => Some(p),
                _ => None,
            }) {
                for entry in &proposal.entries {
                    self.handle.stats.proposals.record(entry.txn.len());
                }
            }
        }
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
