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
//! reconfigured, from the replicated configuration ([`crate::runtime::Links::learn`]).
//! Under `[tls] peer = true` every link is mutual TLS ([`PeerTls`]): a
//! caller whose certificate does not name the member (of the configuration
//! file) its messages claim to come from is refused, and logged.
//!
//! Every call states the peer protocol's version in its metadata, and the
//! answer states the version the call speaks ([`protocol`]); a
//! peer that speaks none this build does is refused with both versions named.
//!
//! This file wires the two halves together and holds what they share (the
//! followers' streams, the addresses heard, the refusals warned of); the
//! links this member dials are in `transport`, what others call in `service`.

pub mod convert;
pub mod protocol;
mod service;
mod transport;

use self::protocol::Refusals;
use crate::runtime::handle::Handle;
use crate::security::tls::PeerTls;
pub use service::PeerService;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
pub use transport::Transport;
use zabkeeper_config::{HostPort, ServerConfig};
use zabkeeper_core::ids::ServerId;
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
    let service = PeerService::new(handle.clone(), inbound.clone(), tls.clone(), heard.clone(), refusals.clone());
    let transport = Transport::new(id, addrs, handle, inbound, heard, tls, refusals);
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

/// Locks one of the service's maps. Each critical section leaves its map
/// whole at every step, so a panic elsewhere under the lock spoils nothing.
fn lock_map<T>(map: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
