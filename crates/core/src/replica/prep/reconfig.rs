//! The leader's preparation of ZooKeeper's `reconfig` (opcode 16): the
//! checks and errors ZooKeeper makes, then the first step of joint
//! consensus (see [`crate::members`]).

use crate::acl::{self, perms, Id};
use crate::error::ErrorCode;
use crate::ids::ServerId;
use crate::members::{Member, Membership};
use crate::op::Op;
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
    let conf = zab.configuration();
    if conf.is_joint() {
        return Err(ErrorCode::ReconfigInProgress);
    }
    if *expected_version != -1 && *expected_version != conf.version.as_i64() {
        return Err(ErrorCode::BadVersion);
    }
    let next = if new_members.trim().is_empty() {
        let joining = lines(joining)?;
        let leaving = ids(leaving)?;
        if joining.is_empty() && leaving.is_empty() {
            return Err(ErrorCode::BadArguments);
        }
        conf.current().changed(&joining, &leaving, &[]).map_err(|_| ErrorCode::BadArguments)?
    } else {
        Membership::new(lines(new_members)?).map_err(|_| ErrorCode::BadArguments)?
    };
    let change = conf.enter(next);
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
