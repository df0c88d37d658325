//! Changing the membership of a running ensemble, as an operator asks it
//! (admin RPC `Reconfigure`, `zkctl admin member`): the leader proposes the
//! joint configuration (see `members`), and the answer comes once the new
//! members decide alone. And the other side of it: a member started with
//! `--join` asks a running one for the membership it joins.

use crate::runtime::handle::{Handle, Query};
use std::time::{Duration, Instant};
use zabkeeper_core::ids::Zxid;
use zabkeeper_core::members::{Configuration, Member, Membership, Participation};
use zabkeeper_core::replica::{self, reconfig::MemberChange};

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
    let version = handle.ask(|reply| Query::Reconfigure { change, reply }).await.ok_or(ReconfigError::Stopped)??;
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
    handle.ask(Query::Configuration).await.ok_or(ReconfigError::Stopped)
}

/// The ensemble's current membership, asked of the member whose admin API
/// is at `admin_addr` (`--join`; with `token` when that API demands one,
/// over TLS when `tls` says the admin ports speak it: this member's own
/// certificate and the ensemble's CA).
pub async fn fetch_membership(
    admin_addr: &str,
    token: Option<&str>,
    tls: Option<&zabkeeper_config::TlsConfig>,
) -> Result<Membership, String> {
    use zabkeeper_proto::admin as pb;
    let mut admin = crate::ops::dial::dial(admin_addr, tls, Duration::from_secs(10)).await?;
    let request = crate::ops::dial::with_token(tonic::Request::new(pb::GetConfigurationRequest {}), token)?;
    let reply = admin.get_configuration(request).await.map_err(|e| format!("{admin_addr}: {}", e.message()))?;
    let members = reply
        .into_inner()
        .members
        .into_iter()
        .map(|m| Member {
            id: m.id,
            participation: if m.role == "observer" { Participation::Observer } else { Participation::Participant },
            peer_address: m.peer_address,
            client_address: m.client_address,
            endpoints: zabkeeper_core::members::Endpoints::parse(&m.endpoints).unwrap_or_default(),
        })
        .collect();
    Membership::new(members).map_err(|e| format!("{admin_addr} answered no configuration: {e}"))
}
