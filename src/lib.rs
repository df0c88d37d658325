//! zabkeeper: a replicated coordination service in the family of Apache ZooKeeper.
//!
//! # Layout
//! - [`tree`]: the data tree (znodes, ACLs, watches) and the leader's
//!   request-to-transaction step. Pure.
//! - [`txn`]: transactions, the unit Zab replicates, and their byte form.
//! - [`op`]: the client operation model both front ends share.
//! - [`storage`]: the durable log, epochs and snapshots (sled; in-memory for tests).
//! - [`wire`]: ZooKeeper's client protocol (jute), so ZooKeeper's clients work unchanged.
//! - [`client`]: the async Rust client library (gRPC session API).
//! - [`recipes`]: locks, leader election, barriers, queues and counters on the client.

pub mod client;
pub mod config;
pub mod error;
pub mod frontend;
pub mod handle;
pub mod ids;
pub mod op;
pub mod recipes;
pub mod replica;
pub mod rpc;
pub mod server;
pub mod session;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod storage;
#[doc(hidden)]
pub mod testing;
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
