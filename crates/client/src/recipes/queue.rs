//! A distributed FIFO queue (ZooKeeper's "Queues" recipe): producers add
//! persistent sequential nodes; a consumer takes the lowest by deleting it,
//! and only the consumer whose delete succeeds gets the item.

use super::ticket::{contenders, in_doubt};
use super::{child_path, ensure_path, fired, RecipeError};
use crate::acl::Acl;
use crate::tree::stat::CreateMode;
use crate::Client;
use std::time::Duration;
use zabkeeper_core::error::ErrorCode;

const PREFIX: &str = "item-";

/// A queue under a directory node (created if missing).
///
/// Each item is taken by at most one consumer, and by exactly one unless a
/// consumer's delete is cut off by a broken connection after the ensemble
/// applied it (then [`Queue::take`] reports `ConnectionLoss` and the item is
/// gone): the at-most-once delivery of ZooKeeper's recipe.
#[derive(Clone)]
pub struct Queue {
    client: Client,
    dir: String,
    acl: Vec<Acl>,
}

impl Queue {
    /// A queue in `dir`, with nodes readable and writable by anyone.
    pub fn new(client: &Client, dir: &str) -> Queue {
        Queue { client: client.clone(), dir: dir.to_string(), acl: Acl::open_unsafe() }
    }

    /// Uses `acl` for the nodes the queue creates.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Queue {
        self.acl = acl;
        self
    }

    /// Appends an item; returns its node's path.
    pub async fn put(&self, data: &[u8]) -> Result<String, RecipeError> {
        let base = child_path(&self.dir, PREFIX);
        match self.client.create(&base, data, CreateMode::PersistentSequential, &self.acl).await {
            Err(e) if e.is_server_code(ErrorCode::NoNode) => {
                ensure_path(&self.client, &self.dir, &self.acl).await?;
                Ok(self.client.create(&base, data, CreateMode::PersistentSequential, &self.acl).await?)
            }
            other => Ok(other?),
        }
    }

    /// The items waiting, oldest first (node names).
    async fn items(&self) -> Result<Vec<String>, RecipeError> {
        match self.client.get_children(&self.dir).await {
            Ok(children) => Ok(contenders(children, PREFIX)),
            Err(e) if e.is_server_code(ErrorCode::NoNode) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// How many items are waiting.
    pub async fn len(&self) -> Result<usize, RecipeError> {
        Ok(self.items().await?.len())
    }

    /// Whether no item is waiting.
    pub async fn is_empty(&self) -> Result<bool, RecipeError> {
        Ok(self.items().await?.is_empty())
    }

    /// Takes the oldest item if there is one, without waiting.
    pub async fn poll(&self) -> Result<Option<Vec<u8>>, RecipeError> {
        for name in self.items().await? {
            let path = child_path(&self.dir, &name);
            let data = match self.client.get_data(&path).await {
                Ok((data, _)) => data,
                Err(e) if e.is_server_code(ErrorCode::NoNode) => continue,
                Err(e) => return Err(e.into()),
            };
            match self.client.delete(&path, -1).await {
                Ok(()) => return Ok(Some(data)),
                // Another consumer took it first.
                Err(e) if e.is_server_code(ErrorCode::NoNode) => continue,
                Err(e) => {
                    if in_doubt(&e) {
                        tracing::warn!(path, %e, "queue item delete in doubt: the item may be lost");
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(None)
    }

    /// Takes the oldest item, waiting for one if the queue is empty.
    pub async fn take(&self) -> Result<Vec<u8>, RecipeError> {
        loop {
            if let Some(data) = self.poll().await? {
                return Ok(data);
            }
            let watcher = match self.client.get_children_and_watch(&self.dir).await {
                Ok((children, watcher)) => {
                    if !contenders(children, PREFIX).is_empty() {
                        continue;
                    }
                    watcher
                }
                Err(e) if e.is_server_code(ErrorCode::NoNode) => {
                    ensure_path(&self.client, &self.dir, &self.acl).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            fired(watcher).await?;
        }
    }

    /// Takes the oldest item, waiting at most `limit` for one.
    pub async fn take_for(&self, limit: Duration) -> Result<Option<Vec<u8>>, RecipeError> {
        match tokio::time::timeout(limit, self.take()).await {
            Ok(result) => result.map(Some),
            Err(_) => Ok(None),
        }
    }
}
