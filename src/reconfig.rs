//! Changing the membership of a running ensemble, as an operator asks it
//! (admin RPC `Reconfigure`, `zkctl admin member`): the leader proposes the
//! joint configuration (see `members`), and the answer comes once the new
//! members decide alone.

use crate::handle::{Event, Handle, Query};
use crate::ids::Zxid;
use crate::members::Configuration;
use crate::replica::{self, reconfig::MemberChange};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How often a reconfiguration under way is looked at.
const POLL: Duration = Duration::from_millis(5);

/// Why a reconfiguration was not made, or not seen complete.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigError {
    /// The leader refused it.
    #[error(transparent)]
    Refused(#[from] replica::reconfig::ReconfigError),
    /// The replica stopped.
    #[error("this member is stopping")]
    Stopped,
    /// Proposed, but the new configuration did not take over within the wait.
    #[error("proposed at {0}, not complete within {1:?}")]
    TimedOut(Zxid, Duration),
}

/// A reconfiguration made.
#[derive(Clone, Debug)]
pub struct Reconfigured {
    /// The configuration now in force.
    pub configuration: Configuration,
    /// From the request until it was complete.
    pub took: Duration,
}

/// Asks the leader behind `handle` to change the membership and waits up to
/// `wait` for the new members to decide alone.
pub async fn reconfigure(handle: &Handle, change: MemberChange, wait: Duration) -> Result<Reconfigured, ReconfigError> {
    let started = Instant::now();
    let (reply, answer) = oneshot::channel();
    handle.events.send(Event::Query(Query::Reconfigure { change, reply })).await.map_err(|_| ReconfigError::Stopped)?;
    let version = answer.await.map_err(|_| ReconfigError::Stopped)??;
    loop {
        let committed = configuration(handle).await?;
        if committed.version >= version && !committed.is_joint() {
            tracing::info!(version = %version, ms = started.elapsed().as_millis() as u64, "reconfigured");
            return Ok(Reconfigured { configuration: committed, took: started.elapsed() });
        }
        if started.elapsed() > wait {
            return Err(ReconfigError::TimedOut(version, wait));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The committed configuration, as the member's tree holds it.
pub async fn configuration(handle: &Handle) -> Result<Configuration, ReconfigError> {
    let (reply, answer) = oneshot::channel();
    handle.events.send(Event::Query(Query::Configuration(reply))).await.map_err(|_| ReconfigError::Stopped)?;
    answer.await.map_err(|_| ReconfigError::Stopped)
}
