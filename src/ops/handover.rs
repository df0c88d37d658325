//! Leadership hand-over as operators and shutdown use it: start a transfer
//! on this member (the leader) and wait until the nominee leads, so the
//! caller learns how it went rather than that it began.

use crate::runtime::handle::{Handle, Query};
use std::time::{Duration, Instant};
use zabkeeper_core::ids::{Epoch, ServerId};
use zabkeeper_core::zab::{Role, Status, TransferError};

/// How often the wait looks at the replica's role.
const POLL: Duration = Duration::from_millis(5);

/// A completed hand-over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The member that led.
    pub from: ServerId,
    /// The member that leads now.
    pub to: ServerId,
    /// How long from the request until this member followed the new leader.
    pub took: Duration,
}

/// Why a hand-over did not happen.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The transfer could not start (not the leader, no synced follower, ...).
    #[error("{0}")]
    Refused(#[from] TransferError),
    /// This member is not the leader; `leader` is, if one is known.
    #[error("member {me} does not lead{}", leader.map_or(String::new(), |l| format!(" (member {l} does)")))]
    NotLeader {
        /// This member.
        me: ServerId,
        /// The leader it knows of.
        leader: Option<ServerId>,
    },
    /// The leader gave the transfer up: the nominee did not catch up within initLimit.
    #[error("the transfer to member {0} was abandoned: it did not catch up in time")]
    Abandoned(ServerId),
    /// No new leader within the wait.
    #[error("no leader was established within {0:?} of the hand-over to member {1}")]
    TimedOut(Duration, ServerId),
    /// The replica stopped.
    #[error("the replica stopped")]
    Stopped,
}

/// Hands leadership from this member to `to` (or the follower it finds most
/// caught up) and waits up to `wait` for a new leader to be established.
pub async fn hand_over(handle: &Handle, to: Option<ServerId>, wait: Duration) -> Result<Handover, HandoverError> {
    let started = Instant::now();
    let me = handle.config.id;
    let before = role(handle).await?.0;
    if before.role != Role::Leading {
        return Err(HandoverError::NotLeader { me, leader: before.leader });
    }
    let nominee = handle.ask(|reply| Query::TransferLeadership { to, reply }).await.ok_or(HandoverError::Stopped)??;
    let epoch: Epoch = before.epoch;
    loop {
        tokio::time::sleep(POLL).await;
        let (status, transferring_to) = role(handle).await?;
        if status.role == Role::Leading && status.epoch == epoch && transferring_to.is_none() {
            return Err(HandoverError::Abandoned(nominee));
        }
        if status.role == Role::Following && status.serving {
            let to = status.leader.unwrap_or(nominee);
            tracing::info!(from = me, to, ms = started.elapsed().as_millis() as u64, "leadership handed over");
            return Ok(Handover { from: me, to, took: started.elapsed() });
        }
        if started.elapsed() > wait {
            return Err(HandoverError::TimedOut(wait, nominee));
        }
    }
}

/// The replica's role and the member it is handing over to, if any.
async fn role(handle: &Handle) -> Result<(Status, Option<ServerId>), HandoverError> {
    handle.ask(Query::Role).await.ok_or(HandoverError::Stopped)
}
