//! zabkeeper: a replicated coordination service in the family of Apache ZooKeeper.
//!
//! # Layout
//! This crate is the server: the runtime around the pure core. The
//! workspace's other crates, from the bottom up:
//! - `zabkeeper-core` (`crates/core`): everything a client can observe,
//!   decided by deterministic state machines with no I/O, clock or ambient
//!   randomness: [`ids`], [`error`], [`op`], [`data`], [`acl`], [`tree`],
//!   [`txn`], [`members`], [`zab`], [`session`], [`replica`], [`wire`] (ZooKeeper's jute
//!   codec) and the [`storage`] trait with its in-memory store. Re-exported
//!   here under the same names.
//! - `zabkeeper-proto` (`crates/proto`): the code generated from `proto/`
//!   ([`proto`]).
//! - `zabkeeper-sim` (`crates/sim`): whole ensembles of the core in one
//!   process with seeded faults.
//! - `zabkeeper-client` (`crates/client`): the Rust client library and the
//!   recipes; it depends on the core and the protocol, never on this crate.
//! - `zkctl` (`crates/zkctl`): the command line.
//!
//! The runtime, in this crate:
//! - [`config`]: the ensemble's TOML configuration.
//! - [`clock`], [`tls`], [`stats`]: the wall clock, TLS settings and request
//!   statistics, leaves the rest shares.
//! - [`handle`]: the narrow [`handle::Handle`] everything outside the owner task holds.
//! - [`handover`]: leadership transfer as the admin API and shutdown use it.
//! - [`reconfig`]: membership changes as the admin API asks them.
//! - [`server`]: the composition root: the owner task, the storage worker, startup and shutdown.
//! - [`frontend`]: the client ports' shared session plumbing and the ZooKeeper port.
//! - [`rpc`]: gRPC: the client session service, admin, the peer transport, protobuf conversions.
//! - [`storage::sled_store`]: the durable log, epochs and snapshots on sled.
//! - [`admin`]: what operators see of durable state (log queries, snapshots, offline copies).
//! - [`metrics`]: Prometheus metrics.
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

pub use zabkeeper_core::{acl, data, error, ids, members, op, replica, session, tree, txn, wire, zab, zookeeper_files};
pub use zabkeeper_proto as proto;

pub mod admin;
pub mod clock;
pub mod config;
pub mod dial;
pub mod frontend;
pub mod handle;
pub mod handover;
pub mod load;
pub mod metrics;
pub mod reconfig;
pub mod rpc;
pub mod server;
pub mod stats;
pub mod storage;
#[doc(hidden)]
pub mod testing;
pub mod tls;
