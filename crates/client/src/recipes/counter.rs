//! An atomic counter: a node holding a decimal integer, changed by
//! version-conditional writes retried on BadVersion (compare-and-set), as
//! Curator's `DistributedAtomicLong` does.

use super::RecipeError;
use crate::acl::Acl;
use crate::tree::stat::CreateMode;
use crate::{Client, ClientError};
use zabkeeper_core::error::ErrorCode;

/// A counter at `path`; a missing node counts as 0.
#[derive(Clone)]
pub struct Counter {
    client: Client,
    path: String,
    acl: Vec<Acl>,
}

impl Counter {
    /// A counter at `path` (its parent must exist), readable and writable by anyone.
    pub fn new(client: &Client, path: &str) -> Counter {
        Counter { client: client.clone(), path: path.to_string(), acl: Acl::open_unsafe() }
    }

    /// Uses `acl` if the counter's node has to be created.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Counter {
        self.acl = acl;
        self
    }

    /// The current value and the node's version (-1 if there is no node).
    async fn read(&self) -> Result<(i64, Option<i32>), RecipeError> {
        match self.client.get_data(&self.path).await {
            Ok((data, stat)) => Ok((self.parse(&data)?, Some(stat.version))),
            Err(e) if e.is_server_code(ErrorCode::NoNode) => Ok((0, None)),
            Err(e) => Err(e.into()),
        }
    }

    fn parse(&self, data: &[u8]) -> Result<i64, RecipeError> {
        let text = String::from_utf8_lossy(data);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Ok(0);
        }
        trimmed.parse().map_err(|_| RecipeError::NotACounter { path: self.path.clone(), text: text.into_owned() })
    }

    /// The current value.
    pub async fn get(&self) -> Result<i64, RecipeError> {
        Ok(self.read().await?.0)
    }

    /// Adds `delta` atomically and returns the new value.
    pub async fn add(&self, delta: i64) -> Result<i64, RecipeError> {
        loop {
            let (value, version) = self.read().await?;
            let next = value.checked_add(delta).ok_or_else(|| {
                ClientError::InvalidArgument(format!("{}: {value} + {delta} overflows a 64-bit counter", self.path))
            })?;
            let text = next.to_string();
            let outcome = match version {
                Some(v) => self.client.set_data(&self.path, text.as_bytes(), v).await.map(|_| ()),
                None => {
                    self.client.create(&self.path, text.as_bytes(), CreateMode::Persistent, &self.acl).await.map(|_| ())
                }
            };
            match outcome {
                Ok(()) => return Ok(next),
                // Someone else changed it first: read again.
                Err(e) if e.is_server_code(ErrorCode::BadVersion) || e.is_server_code(ErrorCode::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Adds one and returns the new value.
    pub async fn increment(&self) -> Result<i64, RecipeError> {
        self.add(1).await
    }
}
