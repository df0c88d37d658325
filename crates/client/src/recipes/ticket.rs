//! A place in a queue of contenders: an ephemeral sequential node under a
//! directory, first when its sequence number is the lowest. [`Lock`](super::Lock),
//! [`Election`](super::Election) and the [`DoubleBarrier`](super::DoubleBarrier)
//! members are all tickets.

use super::{child_path, ensure_path, fired, sequence_of, RecipeError, CONNECTION_LOSS_RETRIES};
use crate::acl::Acl;
use crate::tree::stat::CreateMode;
use crate::{Client, ClientError};
use tokio::time::Instant;
use zabkeeper_core::error::ErrorCode;

/// Whether a failed call may still have been applied by the ensemble.
pub(super) fn in_doubt(e: &ClientError) -> bool {
    matches!(e, ClientError::ConnectionLoss(_) | ClientError::Timeout { .. })
}

/// Our node in `dir`. Dropped without `Ticket::leave`, it deletes its node
/// in the background (when a tokio runtime is at hand), so a cancelled wait
/// does not block the contenders behind it until the session ends.
pub struct Ticket {
    pub(super) client: Client,
    pub(super) dir: String,
    prefix: String,
    /// The random part of the name that lets us recognise our own node.
    token: String,
    /// Our node's name (last component).
    pub name: String,
    /// Our node's full path.
    pub(super) path: String,
    left: bool,
}

/// The contenders of `prefix` in `children`, lowest sequence number first.
pub fn contenders(children: Vec<String>, prefix: &str) -> Vec<String> {
    let mut queue: Vec<(i64, String)> = children
        .into_iter()
        .filter_map(|name| {
            let head = name.len().checked_sub(10)?;
            if !name.get(..head)?.ends_with(prefix) {
                return None;
            }
            Some((sequence_of(&name)?, name))
        })
        .collect();
    queue.sort();
    queue.into_iter().map(|(_, name)| name).collect()
}

impl Ticket {
    /// Joins the queue in `dir` (created if missing) with a protected
    /// ephemeral sequential node `_c_<token>-<prefix>NNNNNNNNNN` holding `data`.
    pub async fn take(
        client: &Client,
        dir: &str,
        prefix: &str,
        data: &[u8],
        acl: &[Acl],
    ) -> Result<Ticket, RecipeError> {
        ensure_path(client, dir, acl).await?;
        let token = format!("_c_{:032x}-", rand::random::<u128>());
        let base = child_path(dir, &format!("{token}{prefix}"));
        let mut attempts = 0;
        loop {
            let error = match client.create(&base, data, CreateMode::EphemeralSequential, acl).await {
                Ok(path) => {
                    let name = path.rsplit('/').next().unwrap_or(&path).to_string();
                    return Ok(Ticket::new(client, dir, prefix, token, name));
                }
                Err(e) if in_doubt(&e) && attempts < CONNECTION_LOSS_RETRIES => e,
                Err(e) => return Err(e.into()),
            };
            attempts += 1;
            tracing::debug!(dir, %error, attempts, "recipe create in doubt; looking for our node");
            // The create may have been applied: find it by its token.
            match client.get_children(dir).await {
                Ok(children) => {
                    if let Some(name) = children.into_iter().find(|c| c.starts_with(&token)) {
                        return Ok(Ticket::new(client, dir, prefix, token, name));
                    }
                }
                Err(e) if in_doubt(&e) && attempts < CONNECTION_LOSS_RETRIES => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn new(client: &Client, dir: &str, prefix: &str, token: String, name: String) -> Ticket {
        Ticket {
            client: client.clone(),
            dir: dir.to_string(),
            prefix: prefix.to_string(),
            token,
            path: child_path(dir, &name),
            name,
            left: false,
        }
    }

    /// The contenders now in the queue, lowest first; orphans of ours (a
    /// create retried after ConnectionLoss that was applied twice) are deleted.
    pub(super) async fn queue(&self) -> Result<Vec<String>, RecipeError> {
        let children = match self.client.get_children(&self.dir).await {
            Ok(c) => c,
            Err(e) if e.is_server_code(ErrorCode::NoNode) => return Err(self.lost()),
            Err(e) => return Err(e.into()),
        };
        let mut queue = contenders(children, &self.prefix);
        for orphan in queue.iter().filter(|n| n.starts_with(&self.token) && **n != self.name) {
            delete_if_present(&self.client, &child_path(&self.dir, orphan)).await?;
        }
        queue.retain(|n| !n.starts_with(&self.token) || *n == self.name);
        Ok(queue)
    }

    /// Waits until we are first in the queue, watching only our predecessor
    /// (no herd effect). Returns false if `deadline` passes first.
    pub async fn wait_first(&self, deadline: Option<Instant>) -> Result<bool, RecipeError> {
        loop {
            let queue = self.queue().await?;
            let position = queue.iter().position(|n| *n == self.name).ok_or_else(|| self.lost())?;
            if position == 0 {
                return Ok(true);
            }
            let predecessor = child_path(&self.dir, &queue[position - 1]);
            let (stat, watcher) = self.client.exists_and_watch(&predecessor).await?;
            if stat.is_none() {
                continue;
            }
            match deadline {
                None => fired(watcher).await?,
                Some(at) => match tokio::time::timeout_at(at, fired(watcher)).await {
                    Ok(result) => result?,
                    Err(_) => return Ok(false),
                },
            }
        }
    }

    /// Resolves once our node is gone (deleted, or its session ended).
    pub(super) async fn gone(&self) -> Result<(), RecipeError> {
        loop {
            let watcher = match self.client.exists_and_watch(&self.path).await {
                Ok((None, _)) => return Ok(()),
                Ok((Some(_), watcher)) => watcher,
                Err(ClientError::SessionExpired | ClientError::Closed) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            match fired(watcher).await {
                Ok(()) => continue,
                Err(RecipeError::Client(ClientError::SessionExpired | ClientError::Closed)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes our node (already gone is fine).
    pub(super) async fn leave(&mut self) -> Result<(), RecipeError> {
        delete_if_present(&self.client, &self.path).await?;
        self.left = true;
        Ok(())
    }

    fn lost(&self) -> RecipeError {
        RecipeError::NodeLost { path: self.path.clone() }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, path) = (self.client.clone(), self.path.clone());
            runtime.spawn(async move {
                if let Err(e) = delete_if_present(&client, &path).await {
                    tracing::debug!(path, %e, "could not delete an abandoned recipe node; it goes with the session");
                }
            });
        }
    }
}

/// Deletes `path` whatever its version; NoNode is success. A delete lost to a
/// broken connection is repeated (deleting twice is harmless).
pub(super) async fn delete_if_present(client: &Client, path: &str) -> Result<(), RecipeError> {
    let mut attempts = 0;
    loop {
        match client.delete(path, -1).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_server_code(ErrorCode::NoNode) => return Ok(()),
            Err(e) if in_doubt(&e) && attempts < CONNECTION_LOSS_RETRIES => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    }
}
