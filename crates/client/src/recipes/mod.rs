//! The classic ZooKeeper recipes, built on the [`Client`]
//! alone (no server support beyond the data model), after the recipes in
//! ZooKeeper's documentation:
//!
//! - [`Lock`]: a fair mutual-exclusion lock; each waiter watches only its
//!   predecessor, so a release wakes exactly one client (no herd effect).
//! - [`Election`]: leader election on the same queue of ephemeral sequential
//!   nodes; the lowest is the leader, and a [`Leadership`] can await its loss.
//! - [`Barrier`] (hold everyone until removed) and [`DoubleBarrier`] (start
//!   together once `n` have entered, finish together once all have left).
//! - [`Queue`]: a distributed FIFO queue; each item is taken by exactly one
//!   consumer.
//! - [`Counter`]: an atomic counter by version-conditional writes.
//!
//! Nodes a recipe waits on are ephemeral, so a crashed client's place is freed
//! when its session expires. Sequential nodes are created "protected" (a
//! random token in the name, as Curator and kazoo do): if the connection
//! breaks before the answer arrives, the recipe finds its node by the token
//! instead of leaving an orphan that would block everyone behind it.
//!
//! ```no_run
//! # async fn example() -> Result<(), zabkeeper_client::recipes::RecipeError> {
//! use zabkeeper_client::{Client, ClientOptions};
//! use zabkeeper_client::recipes::Lock;
//! let client = Client::connect("127.0.0.1:3181", ClientOptions::default()).await?;
//! let guard = Lock::new(&client, "/locks/report").acquire().await?;
//! // ... the critical section ...
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod barrier;
mod counter;
mod election;
mod lock;
mod queue;
#[doc(hidden)]
pub mod ticket;

pub use barrier::{Barrier, DoubleBarrier, DoubleBarrierMember};
pub use counter::Counter;
pub use election::{Election, Leadership};
pub use lock::{Lock, LockGuard};
pub use queue::Queue;

use crate::acl::Acl;
use crate::tree::stat::CreateMode;
use crate::{Client, ClientError, ConnectionState, OneshotWatcher, WatchedEvent};
use zabkeeper_core::error::ErrorCode;

/// Why a recipe failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RecipeError {
    /// A client call failed (connection loss, expiry, a server error code).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The recipe's own node vanished while it was waiting: the session
    /// expired or another client deleted it. The lock or candidacy is gone.
    #[error("{path}: our node was deleted while waiting (session expired or removed by another client)")]
    NodeLost {
        /// The node that vanished.
        path: String,
    },
    /// A counter node holds something that is not a decimal integer.
    #[error("{path}: holds {text:?}, which is not a counter value")]
    NotACounter {
        /// The counter's node.
        path: String,
        /// What it holds (lossily decoded).
        text: String,
    },
}

/// How many times a recipe repeats a call that failed with ConnectionLoss
/// before it gives the error to the caller. Each attempt already waits up to
/// the client's request timeout for a server to take the session.
const CONNECTION_LOSS_RETRIES: usize = 8;

/// Creates `path` and any missing ancestors as empty persistent nodes; existing ones are left as they are.
async fn ensure_path(client: &Client, path: &str, acl: &[Acl]) -> Result<(), RecipeError> {
    if client.exists(path).await?.is_some() {
        return Ok(());
    }
    let mut prefix = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        match client.create(&prefix, b"", CreateMode::Persistent, acl).await {
            Ok(_) => {}
            Err(e) if e.is_server_code(ErrorCode::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits for a one-shot watch to fire; a session that ends first is an error.
async fn fired(watcher: OneshotWatcher) -> Result<(), RecipeError> {
    match watcher.await {
        WatchedEvent::Node(_) | WatchedEvent::Overflowed => Ok(()),
        WatchedEvent::State(ConnectionState::Expired) => Err(ClientError::SessionExpired.into()),
        WatchedEvent::State(_) => Err(ClientError::Closed.into()),
    }
}

/// The sequence number ZooKeeper appended to a sequential node's name (its last 10 characters).
fn sequence_of(name: &str) -> Option<i64> {
    let start = name.len().checked_sub(10)?;
    name.get(start..)?.parse().ok()
}

/// `dir/name`, without doubling the slash under the root.
fn child_path(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contenders_sort_by_sequence_not_by_name() {
        let names =
            ["_c_ff-lock-0000000003", "_c_00-lock-0000000010", "other", "_c_aa-n_0000000001", "_c_11-lock-0000000001"];
        let queue = ticket::contenders(names.iter().map(|s| s.to_string()).collect(), "lock-");
        assert_eq!(queue, ["_c_11-lock-0000000001", "_c_ff-lock-0000000003", "_c_00-lock-0000000010"]);
        assert_eq!(sequence_of("x-0000000042"), Some(42));
        assert_eq!(sequence_of("short"), None);
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/d", "a"), "/d/a");
    }
}
