//! zabkeeper's wire contracts as Rust: the protobuf messages and the gRPC
//! services generated from the workspace's `proto/` (client sessions, the
//! replica-to-replica Zab stream, the operator API). Generated code only:
//! the client library and the server each convert to and from their own types.

/// The client session API (`proto/client.proto`).
pub mod client {
    tonic::include_proto!("zabkeeper.client.v1");
}

/// Replica-to-replica Zab traffic (`proto/peer.proto`).
pub mod peer {
    tonic::include_proto!("zabkeeper.peer.v1");
}

/// The operator API (`proto/admin.proto`).
pub mod admin {
    tonic::include_proto!("zabkeeper.admin.v1");
}
