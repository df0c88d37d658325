//! What operators use, each surface rendering the same [`facts`]:
//! - [`admin_grpc`]: the admin gRPC service (`zkctl admin`).
//! - [`four_letter`]: ZooKeeper's four-letter words on the client port.
//! - [`http`]: the HTTP listener: `/metrics`, ZooKeeper's AdminServer
//!   ([`admin_http`]), health endpoints and the web [`console`].
//! - The procedures they ask and wait for: leadership [`handover`],
//!   membership changes ([`membership_change`]), loading a whole tree ([`tree_load`]), and
//!   [`dial`]ing another member's admin API.

pub mod admin_grpc;
pub mod admin_http;
pub mod console;
pub mod dial;
pub mod facts;
pub mod four_letter;
pub mod handover;
pub mod http;
pub mod membership_change;
pub mod tree_load;
