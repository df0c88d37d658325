//! gRPC services and the conversions between protobufs and domain types; no
//! other module sees a generated type.

pub mod admin;
pub mod client;
pub mod client_convert;
pub mod peer;
pub mod peer_convert;
pub mod peer_protocol;
