//! The leader's preparation of ZooKeeper's `reconfig` (opcode 16): the
//! checks and errors ZooKeeper makes, then the first step of joint
//! consensus (see [`crate::members`]).

use crate::acl::{self, perms, Id};
use crate::error::ErrorCode;
use crate::ids::{ServerId, Zxid};
use crate::members::Member;
use crate::op::Op;
use crate::replica::reconfig::{MemberChange, ReconfigError};
use crate::tree::{TreeState, CONFIG_PATH};
use crate::txn::TxnBody;
use crate::zab::{Peer, ProposeError};

/// The transaction a `reconfig` request becomes: the joint configuration,
/// or the error ZooKeeper answers. Only the super user of `super_digest`,
/// or one the ACL of `/zookeeper/config` grants WRITE (read-only to the
/// world by default), may reconfigure, and only with `reconfig_enabled`.
pub fn prepare(zab: &Peer, tree: &TreeState, identities: &[Id], op: &Op, enabled: bool) -> TxnBody {
    match prepare_change(zab, tree, identities, op, enabled) {
        Ok(body) => body,
        Err(code) => TxnBody::Error(code),
    }
}

fn prepare_change(
    zab: &Peer,
    tree: &TreeState,
    identities: &[Id],
    op: &Op,
    enabled: bool,
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
    let change = asked.plan(zab.configuration()).map_err(|e| match e {
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

/// Server lines separated by commas or new lines (`version=` lines, as
/// `/zookeeper/config` holds them, are skipped).
fn lines(text: &str) -> Result<Vec<Member>, ErrorCode> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("version="))
        .map(|l| Member::parse(l).map_err(|_| ErrorCode::BadArguments))
        .collect()
}

/// Server ids separated by commas.
fn ids(text: &str) -> Result<Vec<ServerId>, ErrorCode> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| ErrorCode::BadArguments))
        .collect()
}
