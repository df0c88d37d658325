//! Leader election (ZooKeeper's "Leader Election" recipe): candidates queue as
//! ephemeral sequential nodes holding their value; the lowest leads; each
//! candidate watches only its predecessor, so a leader's exit wakes one client.

use super::ticket::{contenders, Ticket};
use super::{child_path, RecipeError};
use crate::acl::Acl;
use crate::Client;
use zabkeeper_core::error::ErrorCode;

const PREFIX: &str = "n_";

/// An election named by a directory node (created if missing).
#[derive(Clone)]
pub struct Election {
    client: Client,
    dir: String,
    acl: Vec<Acl>,
}

/// Being the leader. Give it up with [`Leadership::resign`]; dropping it
/// resigns in the background, and it also ends with the session.
#[must_use = "leadership is given up when this is dropped"]
pub struct Leadership {
    ticket: Ticket,
}

impl Election {
    /// An election in `dir`, with nodes readable and writable by anyone.
    pub fn new(client: &Client, dir: &str) -> Election {
        Election { client: client.clone(), dir: dir.to_string(), acl: Acl::open_unsafe() }
    }

    /// Uses `acl` for the nodes the election creates.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> Election {
        self.acl = acl;
        self
    }

    /// Stands as a candidate with `value` (what others see as the leader's
    /// identity) and waits until elected.
    pub async fn campaign(&self, value: &[u8]) -> Result<Leadership, RecipeError> {
        let ticket = Ticket::take(&self.client, &self.dir, PREFIX, value, &self.acl).await?;
        ticket.wait_first(None).await?;
        Ok(Leadership { ticket })
    }

    /// The current leader's value, or `None` if there is no candidate.
    pub async fn leader(&self) -> Result<Option<Vec<u8>>, RecipeError> {
        loop {
            let children = match self.client.get_children(&self.dir).await {
                Ok(c) => c,
                Err(e) if e.is_server_code(ErrorCode::NoNode) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let Some(first) = contenders(children, PREFIX).into_iter().next() else {
                return Ok(None);
            };
            match self.client.get_data(&child_path(&self.dir, &first)).await {
                Ok((data, _)) => return Ok(Some(data)),
                // The leader left between the two reads: look again.
                Err(e) if e.is_server_code(ErrorCode::NoNode) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Leadership {
    /// The node that represents this candidacy.
    pub fn path(&self) -> &str {
        &self.ticket.path
    }

    /// Replaces the value others see for this leader.
    pub async fn proclaim(&self, value: &[u8]) -> Result<(), RecipeError> {
        match self.ticket.client.set_data(&self.ticket.path, value, -1).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_server_code(ErrorCode::NoNode) => {
                Err(RecipeError::NodeLost { path: self.ticket.path.clone() })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Steps down; the next candidate is elected.
    pub async fn resign(mut self) -> Result<(), RecipeError> {
        self.ticket.leave().await
    }

    /// Resolves when leadership is lost without resigning: the node was
    /// deleted by someone else, or the session ended.
    pub async fn lost(&self) -> Result<(), RecipeError> {
        self.ticket.gone().await
    }
}
