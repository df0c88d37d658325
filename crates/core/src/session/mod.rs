//! The session layer, pure like the replica that composes it: what a session
//! is on this replica, from its connect to its last reply.
//!
//! - [`admission`]: whether a connect may attach now, wait, or is refused
//!   (new sessions, resumed ones, a follower revalidating with the leader).
//! - [`connections`]: the connections here and the session each is attached to.
//! - [`queue`]: one connection's requests in order, which gives a session
//!   ZooKeeper's ordering guarantees (FIFO replies, reads after own writes).
//! - [`tracker`]: liveness on the leader: timeouts in ticks, expiry.

pub mod admission;
pub mod connections;
pub mod queue;
pub mod tracker;

pub use admission::{Admission, ConnectRequest, Facts, Revalidation, NOT_SERVING};
pub use connections::{Conn, ConnState, Connections};
pub use queue::{Answered, RequestQueue, Start, Starting};
pub use tracker::{timeout_ticks, SessionTracker};

/// A client connection on this replica (a gRPC stream or a wire socket).
pub type ConnId = u64;
