//! zabkeeper's pure core: everything a client can observe is decided here,
//! as deterministic state machines. No I/O, no clock, no ambient randomness:
//! this crate's manifest has no tokio, tonic, sled or rand, and `make
//! check-purity` checks what a manifest cannot (std's randomly seeded
//! `HashMap` iteration, the environment, wall-clock reads).
//!
//! - [`ids`]: newtypes: server ids, epochs, zxids, session ids.
//! - [`error`]: ZooKeeper's error codes, the data of a failed request.
//! - [`members`]: the membership as replicated state; joint configurations.
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
//! - [`zookeeper_files`]: Apache ZooKeeper's snapshots and transaction logs,
//!   read and recovered as ZooKeeper would (`zkctl import`).
//! - `reuse`: the vectors taken every turn, handed back for the next.
//! - [`storage`]: what a replica keeps durable, as a trait, the rules every
//!   store shares (recovery), and a store in memory with crash semantics
//!   (the simulation's and tests'; the server's sled store implements the
//!   same trait).

pub mod acl;
pub mod data;
pub mod error;
pub mod ids;
pub mod members;
pub mod op;
pub mod panics;
pub mod replica;
mod reuse;
pub mod session;
pub mod storage;
pub mod tree;
pub mod txn;
pub mod wire;
pub mod zab;
pub mod zookeeper_files;
