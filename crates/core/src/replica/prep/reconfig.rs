//! The leader's preparation of ZooKeeper's `reconfig` (opcode 16): the
//! checks and errors ZooKeeper makes, then the first step of joint
//! consensus (see [`crate::members`]).

use crate::acl::{self, perms, Id};
use crate::error::ErrorCode;
use crate::ids::{ServerId, Zxid};
use crate::members::{Endpoints, Member, Told};
use crate::op::Op;
use crate::replica::reconfig::{MemberChange, ReconfigError};
use crate::tree::{TreeState, CONFIG_PATH};
use crate::txn::TxnBody;
use crate::zab::{ProposeError, Zab};

/// The transaction a `reconfig` request becomes: the joint configuration,
/// or the error ZooKeeper answers (the caller logs it as `TxnBody::Error`).
/// Only the super user of `super_digest`, or one the ACL of
/// `/zookeeper/config` grants WRITE (read-only to the world by default),
/// may reconfigure, and only with `reconfig_enabled`.
pub fn prepare(
    zab: &Zab,
    tree: &TreeState,
    identities: &[Id],
    op: &Op,
    enabled: bool,
    told: &Told,
) -> Result<TxnBody, ErrorCode> {
    let Op::Reconfig { joining, leaving, new_members, expected_version } = op else {
        return Err(ErrorCode::BadArguments);
    };
    if !enabled {
        return Err(ErrorCode::ReconfigDisabled);
    }
    let acl = tree.node(CONFIG_PATH).map(|n| n.acl().to_vec()).unwrap_or_default();
    if !acl::permits(&acl, perms::WRITE, identities) {
        return Err(ErrorCode::NoAuth);
    }
    let whole = !new_members.trim().is_empty();
    let asked = MemberChange {
        joining: if whole { Vec::new() } else { lines(joining)? },
        leaving: if whole { Vec::new() } else { ids(leaving)? },
        promoted: Vec::new(),
        members: if whole { Some(lines(new_members)?) } else { None },
        expected_version: (*expected_version != -1).then_some(Zxid(*expected_version as u64)),
    };
    let change = asked.plan(zab.configuration(), told).map_err(|e| match e {
        ReconfigError::InProgress => ErrorCode::ReconfigInProgress,
        ReconfigError::BadVersion { .. } => ErrorCode::BadVersion,
        _ => ErrorCode::BadArguments,
    })?;
    zab.check_reconfiguration(&change).map_err(|e| match e {
        ProposeError::NewConfigNoQuorum => ErrorCode::NewConfigNoQuorum,
        ProposeError::ReconfigInProgress => ErrorCode::ReconfigInProgress,
        _ => ErrorCode::ConnectionLoss,
    })?;
    Ok(TxnBody::Reconfig(change))
}

/// Server lines separated by commas or new lines, as `/zookeeper/config`
/// holds them: its `zabkeeper.N=` lines give those members' endpoints,
/// its `version=` line is skipped.
fn lines(text: &str) -> Result<Vec<Member>, ErrorCode> {
    let mut members = Vec::new();
    let mut endpoints = Vec::new();
    for line in text.split([',', '\n']).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("version=")) {
        match Endpoints::parse_line(line) {
            Some(parsed) => endpoints.push(parsed.map_err(|_| ErrorCode::BadArguments)?),
            None => members.push(Member::parse(line).map_err(|_| ErrorCode::BadArguments)?),
        }
    }
    for (id, found) in endpoints {
        let member = members.iter_mut().find(|m| m.id == id).ok_or(ErrorCode::BadArguments)?;
        member.endpoints = found;
    }
    Ok(members)
}

/// Server ids separated by commas.
fn ids(text: &str) -> Result<Vec<ServerId>, ErrorCode> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| ErrorCode::BadArguments))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_of_zookeeper_config_reads_back_as_its_members() {
        let text = "server.1=h:1:1:participant;2\nserver.2=g:1:1:observer;2\nzabkeeper.1=grpc=h:3181;admin=h:4181\nversion=100000002";
        let members = lines(text).expect("the whole text");
        assert_eq!(members.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(members[0].endpoints.admin, "h:4181");
        assert!(members[1].endpoints.is_empty());
        assert_eq!(lines("server.1=h:1:1,server.2=g:1:1").map(|m| m.len()), Ok(2), "kazoo's commas");
        // Endpoints of no listed member, or a field we do not know: refused.
        assert_eq!(lines("server.1=h:1:1\nzabkeeper.3=admin=h:1").unwrap_err(), ErrorCode::BadArguments);
        assert_eq!(lines("server.1=h:1:1\nzabkeeper.1=web=h:1").unwrap_err(), ErrorCode::BadArguments);
    }
}
