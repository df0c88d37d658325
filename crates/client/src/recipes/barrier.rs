//! Barriers (ZooKeeper's "Barriers" and "Double Barriers" recipes).
//!
//! A [`Barrier`] holds everyone who waits on it while its node exists. A
//! [`DoubleBarrier`] of size `n` lets members start a computation together
//! once `n` have entered, and finish together: nobody's `leave` returns
//! before every member has begun to leave.

use super::ticket::{delete_if_present, Ticket};
use super::{child_path, ensure_path, fired, RecipeError};
use crate::acl::Acl;
use crate::tree::stat::CreateMode;
use crate::Client;
use std::time::Duration;
use zabkeeper_core::error::ErrorCode;

/// A barrier: the node at `path` exists while it is up.
#[derive(Clone)]
pub struct Barrier {
    client: Client,
    path: String,
    acl: Vec<Acl>,
}

impl Barrier {
    /// A barrier at `path`, with a node readable and writable by anyone.
    pub fn new(client: &Client, path: &str) -> Barrier {
        Barrier { client: client.clone(), path: path.to_string(), acl: Acl::open_unsafe() }
    }

    /// Uses `acl` for the barrier's node (and missing ancestors).
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Barrier {
        self.acl = acl;
        self
    }

    /// Puts the barrier up (already up is fine).
    pub async fn set(&self) -> Result<(), RecipeError> {
        ensure_path(&self.client, &self.path, &self.acl).await
    }

    /// Takes the barrier down, releasing every waiter (already down is fine).
    pub async fn remove(&self) -> Result<(), RecipeError> {
        delete_if_present(&self.client, &self.path).await
    }

    /// Waits while the barrier is up.
    pub async fn wait(&self) -> Result<(), RecipeError> {
        loop {
            let (stat, watcher) = self.client.exists_and_watch(&self.path).await?;
            if stat.is_none() {
                return Ok(());
            }
            fired(watcher).await?;
        }
    }

    /// Waits at most `limit` while the barrier is up; true if it came down.
    pub async fn wait_for(&self, limit: Duration) -> Result<bool, RecipeError> {
        match tokio::time::timeout(limit, self.wait()).await {
            Ok(result) => result.map(|()| true),
            Err(_) => Ok(false),
        }
    }
}

const MEMBER: &str = "member-";
const READY: &str = "ready";

/// A double barrier of `size` members under a directory node (created if missing).
#[derive(Clone)]
pub struct DoubleBarrier {
    client: Client,
    dir: String,
    size: usize,
    acl: Vec<Acl>,
}

/// A member that has entered a [`DoubleBarrier`]; [`DoubleBarrierMember::leave`] when done.
#[must_use = "a member that is dropped leaves in the background without waiting for the others"]
pub struct DoubleBarrierMember {
    ticket: Ticket,
}

impl DoubleBarrier {
    /// A double barrier for `size` members in `dir`, with nodes open to anyone.
    pub fn new(client: &Client, dir: &str, size: usize) -> DoubleBarrier {
        DoubleBarrier { client: client.clone(), dir: dir.to_string(), size, acl: Acl::open_unsafe() }
    }

    /// Uses `acl` for the nodes the barrier creates.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> DoubleBarrier {
        self.acl = acl;
        self
    }

    /// Enters, and waits until `size` members have entered.
    pub async fn enter(&self) -> Result<DoubleBarrierMember, RecipeError> {
        ensure_path(&self.client, &self.dir, &self.acl).await?;
        let ready = child_path(&self.dir, READY);
        // Watch for "ready" before joining: whoever completes the count
        // creates it after seeing our node, so the event cannot be missed.
        let (open, watcher) = self.client.exists_and_watch(&ready).await?;
        let ticket = Ticket::take(&self.client, &self.dir, MEMBER, b"", &self.acl).await?;
        let member = DoubleBarrierMember { ticket };
        if open.is_some() {
            return Ok(member);
        }
        if member.ticket.queue().await?.len() < self.size {
            fired(watcher).await?;
        } else {
            match self.client.create(&ready, b"", CreateMode::Persistent, &self.acl).await {
                Ok(_) => {}
                Err(e) if e.is_server_code(ErrorCode::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(member)
    }
}

impl DoubleBarrierMember {
    /// Leaves, and waits until every member has begun to leave.
    pub async fn leave(mut self) -> Result<(), RecipeError> {
        // Everyone has entered: close the round so the next one starts shut.
        delete_if_present(&self.ticket.client, &child_path(&self.ticket.dir, READY)).await?;
        loop {
            let members = self.ticket.queue().await?;
            let Some(lowest) = members.first() else {
                return Ok(());
            };
            let ours = self.ticket.name.as_str();
            if members.len() == 1 && lowest == ours {
                return self.ticket.leave().await;
            }
            // The lowest member leaves last and waits on the highest; the
            // others leave at once and wait for the lowest.
            let waited = if lowest == ours {
                members.last().unwrap_or(lowest)
            } else {
                self.ticket.leave().await?;
                lowest
            };
            let (stat, watcher) = self.ticket.client.exists_and_watch(&child_path(&self.ticket.dir, waited)).await?;
            if stat.is_some() {
                fired(watcher).await?;
            }
        }
    }
}
