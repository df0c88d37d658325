//! Loading a whole tree into a running ensemble's empty one, as an operator
//! asks it (admin RPC `LoadTree`, AdminServer `restore`, `zkctl import
//! --load`, `zkctl admin snapshot load`): the leader proposes it, every
//! member applies it, and the answer comes once the ensemble serves again
//! in an epoch above the loaded history's (see `replica::load`).

use crate::runtime::handle::{Handle, Query};
use bytes::Bytes;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use zabkeeper_core::ids::{Epoch, ServerId, Zxid};
use zabkeeper_core::replica::load::{LoadError, PEER_PROTOCOL as LOAD};
use zabkeeper_core::zab::Role;

/// How often a load under way is looked at.
const POLL: Duration = Duration::from_millis(5);

/// Why a load was not made, or not seen complete.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadTreeError {
    /// The leader refused it.
    #[error(transparent)]
    Refused(#[from] LoadError),
    /// Committed, but applying it changed nothing (the tree was no longer
    /// empty when its turn came).
    #[error("the load at {zxid} was committed but changed nothing: {code}")]
    NotApplied {
        /// Its zxid.
        zxid: Zxid,
        /// Why.
        code: zabkeeper_core::error::ErrorCode,
    },
    /// A member may not read the load's log record (see `replica::load::PEER_PROTOCOL`).
    #[error(
        "member {member} {why}: a load needs every member on a release that reads it (peer protocol {LOAD} or \
         later); upgrade it first, or import into a data directory instead"
    )]
    MemberCannotLoad {
        /// The member.
        member: ServerId,
        /// What is known of it.
        why: String,
    },
    /// The replica stopped.
    #[error("this member is stopping")]
    Stopped,
    /// Proposed, but not seen applied and serving within the wait.
    #[error("proposed at {0}, not applied and serving again within {1:?}")]
    TimedOut(Zxid, Duration),
}

/// A load made.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The zxid of its entry.
    pub zxid: Zxid,
    /// The nodes the tree holds now.
    pub nodes: usize,
    /// The epoch this member serves in now.
    pub epoch: Epoch,
    /// From the request until the ensemble served again.
    pub took: Duration,
}

async fn ask<T>(handle: &Handle, query: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, LoadTreeError> {
    handle.ask(query).await.ok_or(LoadTreeError::Stopped)
}

/// Refuses a load unless this member leads and every other member of the
/// configuration followed it speaking a peer protocol that carries a load.
async fn every_member_reads_a_load(handle: &Handle) -> Result<(), LoadTreeError> {
    let me = handle.config.id;
    let (status, _) = ask(handle, Query::Role).await?;
    if status.role != Role::Leading || !status.serving {
        return Err(LoadError::NotLeader { me, leader: status.leader }.into());
    }
    let configuration = ask(handle, Query::Configuration).await?;
    let versions = handle.peer_versions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    for member in configuration.members().map(|m| m.id).filter(|id| *id != me) {
        let why = match versions.get(&member) {
            Some(v) if *v >= LOAD => continue,
            Some(v) => format!("speaks peer protocol {v}"),
            None => "has not followed this member".to_string(),
        };
        return Err(LoadTreeError::MemberCannotLoad { member, why });
    }
    Ok(())
}

/// Asks the leader behind `handle` to load `chunks` (a `tree::snapshot`)
/// into the empty tree, and waits up to `wait` for it to be applied and for
/// this member to serve again, in an epoch above the loaded history's.
pub async fn load_tree(
    handle: &Handle,
    chunks: Vec<Bytes>,
    epoch: Epoch,
    wait: Duration,
) -> Result<Loaded, LoadTreeError> {
    let started = Instant::now();
    every_member_reads_a_load(handle).await?;
    let (zxid, floor) = ask(handle, |reply| Query::LoadTree { chunks, epoch, reply }).await??;
    let nodes = loop {
        match ask(handle, |reply| Query::LoadOutcome(zxid, reply)).await? {
            Some(Ok(nodes)) => break nodes,
            Some(Err(code)) => return Err(LoadTreeError::NotApplied { zxid, code }),
            None if started.elapsed() > wait => return Err(LoadTreeError::TimedOut(zxid, wait)),
            None => tokio::time::sleep(POLL).await,
        }
    };
    // Serving again, in an epoch above the loaded history's when it
    // reached ours (the leader moves to one, see `zab`).
    loop {
        let (status, _) = ask(handle, Query::Role).await?;
        if status.serving && status.role != Role::Looking && (status.epoch > floor || floor < zxid.epoch()) {
            tracing::info!(%zxid, nodes, epoch = status.epoch, ms = started.elapsed().as_millis() as u64, "tree loaded");
            return Ok(Loaded { zxid, nodes, epoch: status.epoch, took: started.elapsed() });
        }
        if started.elapsed() > wait {
            return Err(LoadTreeError::TimedOut(zxid, wait));
        }
        tokio::time::sleep(POLL).await;
    }
}
