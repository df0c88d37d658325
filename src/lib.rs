//! zabkeeper: a replicated coordination service in the family of Apache ZooKeeper.
//!
//! # Layout
//! The pure core (no I/O, no clock, no ambient randomness; `make check-purity`):
//! - [`ids`]: newtypes: server ids, epochs, zxids, session ids.
//! - [`error`]: ZooKeeper's error codes, the data of a failed request.
//! - [`op`]: the client operation model both front ends share.
//! - [`data`]: a znode's data, bytes or ZooKeeper's null.
//! - [`acl`]: ACLs, identities and the auth schemes.
//! - [`tree`]: the data tree: znodes, watches, snapshots, applying transactions.
//! - [`txn`]: transactions, the unit Zab replicates, and their byte form.
//! - [`zab`]: Zab as a state machine: inputs in, [`zab::Action`]s out.
//! - [`session`]: the session layer: admission of connects, each connection's
//!   request queue, the leader's session tracker.
//! - [`replica`]: one replica composed of the above: [`replica::Input`]s in,
//!   [`replica::Output`]s out; the leader's preparation of writes is [`replica::prep`].
//! - [`wire`]: ZooKeeper's client protocol (jute), bytes to records and back.
//!
//! The runtime around it:
//! - [`config`]: the ensemble's TOML configuration.
//! - [`handle`]: the narrow [`handle::Handle`] everything outside the owner task holds.
//! - [`server`]: the composition root: the owner task, the storage worker, startup and shutdown.
//! - [`frontend`]: the client ports' shared session plumbing and the ZooKeeper port.
//! - [`rpc`]: gRPC: the client session service, admin, the peer transport, protobuf conversions.
//! - [`storage`]: the durable log, epochs and snapshots (sled; in memory for tests).
//! - [`client`]: the async Rust client library (gRPC session API), and [`recipes`] on it.
//! - `sim` (tests and the `sim` feature): whole ensembles in one process, seeded faults.
//!
//! # Start reading here: the path of one write
//! A ZooKeeper `setData` sent to a follower F, whose leader is L:
//! 1. F, [`frontend::zookeeper`]: `serve` reads the frame, [`wire::codec::decode_request`]
//!    makes an [`op::Op`] and a reply shape; [`frontend::Session::request`] puts an
//!    [`replica::Input::Request`] in the owner's inbox.
//! 2. F, [`server`]: the owner task hands it to [`replica::Replica::handle`]: `on_request`
//!    queues it ([`session::RequestQueue`]), `advance` starts it, `submit` forwards it
//!    to the leader through [`zab::Peer::forward`]; the resulting [`zab::Io::Send`]
//!    leaves as [`replica::Output::Zab`] through [`rpc::peer::Transport`].
//! 3. L: [`rpc::peer::PeerService`] feeds the message to Zab, which hands it back as
//!    `Forwarded`; `Replica::on_forwarded` queues it in [`replica::prep::Prep`], whose
//!    `run` checks it against the tree and pending changes ([`replica::prep::check`]) and
//!    calls [`zab::Peer::propose`]. Zab persists the batch and sends PROPOSALs.
//! 4. Every member: [`server::storage_worker`] appends and fsyncs, reports
//!    `Persisted`; followers ACK; the leader commits once a quorum holds it durably
//!    and sends COMMIT; each member's Zab emits [`zab::Action::Commit`].
//! 5. F: `Replica::apply_entries` applies it to the tree (watch events first), completes
//!    the queued request and sends the reply ([`replica::ClientMessage::Reply`]), which
//!    [`frontend::Outbox`] hands to the connection's writer, encoded with the shape it carried.

pub mod acl;
pub mod admin;
pub mod client;
pub mod clock;
pub mod config;
pub mod data;
pub mod error;
pub mod frontend;
pub mod handle;
pub mod ids;
pub mod metrics;
pub mod op;
pub mod recipes;
pub mod replica;
pub mod rpc;
pub mod server;
pub mod session;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod stats;
pub mod storage;
#[doc(hidden)]
pub mod testing;
pub mod tls;
pub mod tree;
pub mod txn;
pub mod wire;
pub mod zab;

/// Generated protobuf and gRPC code.
pub mod proto {
    /// The client session API.
    pub mod client {
        tonic::include_proto!("zabkeeper.client.v1");
    }
    /// Replica-to-replica Zab traffic.
    pub mod peer {
        tonic::include_proto!("zabkeeper.peer.v1");
    }
    /// The operator API.
    pub mod admin {
        tonic::include_proto!("zabkeeper.admin.v1");
    }
}
