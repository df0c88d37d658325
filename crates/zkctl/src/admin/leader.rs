//! `zkctl admin leader transfer`: hands leadership to another member, found
//! through any member (the call goes to whoever leads).

use super::{rpc_error, Dialer};
use crate::output::{Exit, Printer};
use serde_json::json;
use zabkeeper_client::ClientError;
use zabkeeper_proto::admin as pb;

/// What to do with leadership.
#[derive(clap::Subcommand, Debug)]
pub enum LeaderCommand {
    /// Hand leadership to a caught-up member without waiting for an election
    /// timeout: the leader stops proposing, brings it up to date and steps
    /// down for it. Answers once the new leader is established.
    Transfer {
        /// The member to lead next (by default the leader picks the follower
        /// most caught up).
        #[arg(long)]
        to: Option<u64>,
        /// How long to wait for the new leader, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        wait_ms: u32,
    },
}

pub(super) async fn leader_command(
    server: &str,
    dialer: &Dialer,
    command: LeaderCommand,
    out: &Printer,
) -> Result<Exit, ClientError> {
    let LeaderCommand::Transfer { to, wait_ms } = command;
    if to == Some(0) {
        return Err(ClientError::InvalidArgument("--to names a member id (1 or more)".into()));
    }
    let leader = leader_admin_addr(server, dialer).await?;
    let mut admin = dialer.connect(&leader).await?;
    let request = pb::TransferLeadershipRequest { to: to.unwrap_or(0), wait_ms };
    let reply = admin.transfer_leadership(request).await.map_err(|e| rpc_error(&leader, "leader transfer", e))?;
    let r = reply.into_inner();
    if out.json {
        out.doc(json!({ "from": r.from, "to": r.to, "took_ms": r.took_ms }));
    } else {
        out.line(&format!("leadership moved from member {} to member {} in {} ms", r.from, r.to, r.took_ms));
    }
    Ok(Exit::Ok)
}

/// The admin address of the member that leads, as `server` knows it.
pub(super) async fn leader_admin_addr(server: &str, dialer: &Dialer) -> Result<String, ClientError> {
    let s = dialer.status(server).await?;
    if s.role == "leader" {
        return Ok(server.to_string());
    }
    if s.leader_id == 0 {
        return Err(ClientError::InvalidArgument(format!(
            "member {} knows no leader now (it is {}): try again once one is elected",
            s.server_id, s.role
        )));
    }
    let member = s.members.iter().find(|m| m.id == s.leader_id);
    match member.map(|m| m.admin_addr.as_str()) {
        Some(addr) if !addr.is_empty() => Ok(addr.to_string()),
        _ => Err(ClientError::InvalidArgument(format!(
            "member {} leads, but its admin address is known neither to the configuration nor to the asked member's file: run this against its admin port",
            s.leader_id
        ))),
    }
}
