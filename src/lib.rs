//! zabkeeper: a replicated coordination service in the family of Apache ZooKeeper.
//!
//! # Layout
//! This crate is the server: the runtime around the pure core. Every path
//! names the crate it is in; nothing of another crate is re-exported here.
//! The workspace's other crates, from the bottom up:
//! - `zabkeeper-core` (`crates/core`): everything a client can observe,
//!   decided by deterministic state machines with no I/O, clock or ambient
//!   randomness: ids, errors, ops, the tree, transactions, membership, Zab,
//!   sessions, the replica, ZooKeeper's jute codec and the storage trait with
//!   its in-memory store.
//! - `zabkeeper-proto` (`crates/proto`): the code generated from `proto/`.
//! - `zabkeeper-config` (`crates/config`): the ensemble's TOML configuration.
//! - `zabkeeper-store` (`crates/store`): the durable log, epochs and
//!   snapshots on sled, and the wall clock.
//! - `zabkeeper-datadir` (`crates/datadir`): a data directory as operators
//!   handle it: log queries, offline reads, backups and restore, import from
//!   and export to ZooKeeper. `zkctl` uses it without this crate.
//! - `zabkeeper-sim` (`crates/sim`): whole ensembles of the core in one
//!   process with seeded faults.
//! - `zabkeeper-client` (`crates/client`): the Rust client library and the
//!   recipes.
//! - `zkctl` (`crates/zkctl`): the command line.
//!
//! This crate, one folder per role, from the bottom up:
//! - [`telemetry`]: what is counted where it happens: Prometheus metrics and
//!   ZooKeeper's request statistics.
//! - [`security`]: TLS on the listeners and between members.
//! - [`runtime`]: the owner task that alone holds the replica, the
//!   [`runtime::handle::Handle`] everything else reaches it through, the
//!   storage worker (group commit) and the disk watch.
//! - [`peer`]: replication between members: the gRPC service other members
//!   call, the links this member dials, their protobuf forms and protocol
//!   versions.
//! - [`ports`]: where clients connect: the ZooKeeper port and the gRPC
//!   session service side by side, with the connection plumbing and limits
//!   they share.
//! - [`ops`]: what operators use: the admin gRPC service, ZooKeeper's
//!   four-letter words and AdminServer, the web console (a client of the
//!   ports' [`ports::Connection`]), `/metrics`, and the procedures they ask
//!   (leadership hand-over, membership changes, loading a tree), all
//!   rendering the same facts.
//! - [`serve`]: the composition root: a whole member started, until shutdown.
//!
//! # Start reading here: the path of one write
//! A ZooKeeper `setData` sent to a follower F, whose leader is L:
//! 1. F, [`ports::zookeeper`]: `serve` reads the frame,
//!    `zabkeeper_core::wire::codec::decode_request` makes an `Op` and a reply
//!    shape; [`ports::Connection::request`] puts an `Input::Request` in the
//!    owner's inbox.
//! 2. F, [`runtime`]: the owner task hands it to `Replica::handle`: `on_request`
//!    queues it (`session::RequestQueue`), `advance` starts it, `submit` forwards it
//!    to the leader through Zab's `forward`; the resulting `Io::Send` leaves as
//!    `Output::Zab` through the [`peer::Transport`].
//! 3. L: [`peer::PeerService`] feeds the message to Zab, which hands it back as
//!    `Forwarded`; `Replica::on_forwarded` queues it in `replica::prep::Prep`, whose
//!    `run` checks it against the tree and pending changes and proposes it. Zab
//!    persists the batch and sends PROPOSALs.
//! 4. Every member: [`runtime::storage_worker`] appends and fsyncs through
//!    `zabkeeper_store::SledStorage`, reports `Persisted`; followers ACK; the
//!    leader commits once a quorum holds it durably and sends COMMIT; each
//!    member's Zab emits `Action::Commit`.
//! 5. F: `Replica::apply_entries` applies it to the tree (watch events first), completes
//!    the queued request and sends the reply (`ClientMessage::Reply`), which
//!    [`ports::Outbox`] hands to the connection's writer, encoded with the shape it carried.

pub mod ops;
pub mod peer;
pub mod ports;
pub mod runtime;
pub mod security;
pub mod serve;
pub mod telemetry;
#[doc(hidden)]
pub mod testing;
