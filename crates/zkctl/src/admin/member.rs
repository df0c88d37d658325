//! `zkctl admin member add|remove|promote|list`: the ensemble's membership,
//! changed through the leader (found through any member) by joint consensus.

use super::leader::leader_admin_addr;
use super::show::table;
use super::{rpc_error, Dialer};
use crate::output::{Exit, Printer};
use serde_json::json;
use zabkeeper_client::ClientError;
use zabkeeper_proto::admin as pb;

/// What to do with the membership.
#[derive(clap::Subcommand, Debug)]
pub enum MemberCommand {
    /// The current configuration: every member with its role and addresses.
    List,
    /// Add members, or change a member's address or role, given as
    /// ZooKeeper's dynamic configuration lines
    /// (`server.N=host:peerPort:peerPort:participant|observer;clientPort`).
    /// The new members must be running and following the leader.
    Add {
        /// One line per member.
        #[arg(required = true)]
        lines: Vec<String>,
        #[command(flatten)]
        options: ChangeOptions,
    },
    /// Remove members by id. A removed member keeps following without a vote
    /// until it is stopped.
    Remove {
        /// The members' ids.
        #[arg(required = true)]
        ids: Vec<u64>,
        #[command(flatten)]
        options: ChangeOptions,
    },
    /// Make observers voters (refused until they are caught up).
    Promote {
        /// The observers' ids.
        #[arg(required = true)]
        ids: Vec<u64>,
        #[command(flatten)]
        options: ChangeOptions,
    },
}

/// What every change takes.
#[derive(clap::Args, Debug)]
pub struct ChangeOptions {
    /// Refuse unless the configuration is still at this version (hex, as `list` shows it).
    #[arg(long)]
    expect_version: Option<String>,
    /// How long to wait for the change to complete, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u32,
}

pub(super) async fn member_command(
    server: &str,
    dialer: &Dialer,
    command: MemberCommand,
    out: &Printer,
) -> Result<Exit, ClientError> {
    let (mut request, options) = match command {
        MemberCommand::List => {
            let mut admin = dialer.connect(server).await?;
            let reply = admin.get_configuration(pb::GetConfigurationRequest {}).await;
            let reply = reply.map_err(|e| rpc_error(server, "member list", e))?.into_inner();
            print_configuration(&reply, out);
            return Ok(Exit::Ok);
        }
        MemberCommand::Add { lines, options } => (pb::ReconfigureRequest { add: lines, ..Default::default() }, options),
        MemberCommand::Remove { ids, options } => {
            (pb::ReconfigureRequest { remove: ids, ..Default::default() }, options)
        }
        MemberCommand::Promote { ids, options } => {
            (pb::ReconfigureRequest { promote: ids, ..Default::default() }, options)
        }
    };
    request.wait_ms = options.wait_ms;
    if let Some(text) = options.expect_version {
        let hex = text.trim_start_matches("0x");
        let version = u64::from_str_radix(hex, 16)
            .map_err(|_| ClientError::InvalidArgument(format!("--expect-version {text:?} is not a hex version")))?;
        request.expected_version = Some(version);
    }
    let leader = leader_admin_addr(server, dialer).await?;
    let mut admin = dialer.connect(&leader).await?;
    let reply = admin.reconfigure(request).await.map_err(|e| rpc_error(&leader, "reconfigure", e))?.into_inner();
    if !out.json {
        out.line(&format!("reconfigured to version {:x} in {} ms", reply.version, reply.took_ms));
    }
    print_configuration(&reply, out);
    Ok(Exit::Ok)
}

const HEADER: [&str; 5] = ["ID", "ROLE", "PEER", "CLIENT", "ENDPOINTS"];

fn print_configuration(c: &pb::ConfigurationReply, out: &Printer) {
    let member_json = |m: &pb::ConfigMember| json!({ "id": m.id, "role": m.role, "peer_address": m.peer_address, "client_address": m.client_address, "endpoints": m.endpoints });
    if out.json {
        out.doc(json!({
            "version": format!("{:x}", c.version),
            "joint": c.joint,
            "members": c.members.iter().map(member_json).collect::<Vec<_>>(),
            "previous": c.previous.iter().map(member_json).collect::<Vec<_>>(),
            "took_ms": c.took_ms,
        }));
        return;
    }
    let rows = |ms: &[pb::ConfigMember]| -> Vec<Vec<String>> {
        ms.iter()
            .map(|m| {
                let endpoints = if m.endpoints.is_empty() { "-".to_string() } else { m.endpoints.clone() };
                vec![m.id.to_string(), m.role.clone(), m.peer_address.clone(), m.client_address.clone(), endpoints]
            })
            .collect()
    };
    out.line(&format!("version {:x}{}", c.version, if c.joint { " (reconfiguration under way)" } else { "" }));
    out.line(&table(&HEADER, &rows(&c.members)));
    if c.joint {
        out.line("moving from:");
        out.line(&table(&HEADER, &rows(&c.previous)));
    }
}
