//! A fair distributed lock (ZooKeeper's "Locks" recipe): contenders queue as
//! ephemeral sequential nodes; the lowest holds the lock; each waiter watches
//! only the node just below its own, so a release wakes one client.

use super::ticket::Ticket;
use super::RecipeError;
use crate::acl::Acl;
use crate::Client;
use std::time::Duration;
use tokio::time::Instant;

const PREFIX: &str = "lock-";

/// A lock named by a directory node (created if missing).
#[derive(Clone)]
pub struct Lock {
    client: Client,
    dir: String,
    acl: Vec<Acl>,
}

/// A held lock. Release it with [`LockGuard::release`]; dropping it releases
/// in the background, and the lock is also freed if the session ends.
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard {
    ticket: Ticket,
}

impl Lock {
    /// A lock on `dir`, with nodes readable and writable by anyone.
    pub fn new(client: &Client, dir: &str) -> Lock {
        Lock { client: client.clone(), dir: dir.to_string(), acl: Acl::open_unsafe() }
    }

    /// Uses `acl` for the nodes the lock creates.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Lock {
        self.acl = acl;
        self
    }

    /// Waits until the lock is ours.
    pub async fn acquire(&self) -> Result<LockGuard, RecipeError> {
        let ticket = Ticket::take(&self.client, &self.dir, PREFIX, b"", &self.acl).await?;
        ticket.wait_first(None).await?;
        Ok(LockGuard { ticket })
    }

    /// Waits at most `wait` for the lock; `None` if another client still holds it then.
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<LockGuard>, RecipeError> {
        let deadline = Instant::now() + wait;
        let mut ticket = Ticket::take(&self.client, &self.dir, PREFIX, b"", &self.acl).await?;
        if ticket.wait_first(Some(deadline)).await? {
            return Ok(Some(LockGuard { ticket }));
        }
        ticket.leave().await?;
        Ok(None)
    }
}

impl LockGuard {
    /// The node that represents this hold.
    pub fn path(&self) -> &str {
        &self.ticket.path
    }

    /// Releases the lock and waits until the ensemble has applied it.
    pub async fn release(mut self) -> Result<(), RecipeError> {
        self.ticket.leave().await
    }

    /// Resolves when the lock is lost without a release: the node was deleted
    /// by someone else, or the session ended. Pair it with the critical
    /// section (`tokio::select!`) to stop work the lock no longer protects.
    pub async fn lost(&self) -> Result<(), RecipeError> {
        self.ticket.gone().await
    }
}
