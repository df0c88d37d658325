//! What operators see of a replica's durable state, shared by the admin gRPC
//! service (`zabkeeper::ops::admin_grpc`) and the offline reader (`zkctl admin --data-dir`):
//! log queries with filters and a byte budget ([`log`]), the protobuf form of
//! transactions and snapshot nodes ([`convert`]), and read-only access to a
//! stopped member's data directory ([`offline`]), and a member's data
//! directory made from Apache ZooKeeper's ([`zookeeper_import`]) and back ([`zookeeper_export`]),
//! and point-in-time backups with their restore ([`backup`]).

pub mod backup;
pub mod convert;
pub mod log;
pub mod offline;
pub mod snapshots;
pub mod zookeeper_export;
pub mod zookeeper_import;
