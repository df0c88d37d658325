//! A reconfiguration asked of the leader by an operator (the admin API):
//! the change checked against the configuration in force and proposed as
//! the first step of joint consensus (see [`crate::members`]).

use super::Replica;
use crate::ids::{ServerId, SessionId, Zxid};
use crate::members::{Change, Configuration, Member, Membership, MembershipError, Told};
use crate::txn::{Txn, TxnBody};
use crate::zab::{ProposeError, Role};

/// A change to the membership, incremental as ZooKeeper's `reconfig -add/-remove`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberChange {
    /// Members to add, or to change (same id: a new address or role).
    pub joining: Vec<Member>,
    /// Members to remove.
    pub leaving: Vec<ServerId>,
    /// Observers to make voters.
    pub promoted: Vec<ServerId>,
    /// The whole new membership instead (ZooKeeper's non-incremental
    /// `newMembers`); the three lists above are then empty.
    pub members: Option<Vec<Member>>,
    /// The configuration version it is based on (ZooKeeper's curConfigId);
    /// None: whatever is current.
    pub expected_version: Option<Zxid>,
}

impl MemberChange {
    /// Whether it asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.joining.is_empty() && self.leaving.is_empty() && self.promoted.is_empty() && self.members.is_none()
    }

    /// The first step of this change from `conf`, the configuration in
    /// force: the checks both the admin API and ZooKeeper's `reconfig` make
    /// before the leader proposes it. New lines without endpoints take
    /// those the member had at the same address, else what it `reported`.
    pub fn plan(&self, conf: &Configuration, told: &Told) -> Result<Change, ReconfigError> {
        if self.is_empty() {
            return Err(ReconfigError::Empty);
        }
        if conf.is_joint() {
            return Err(ReconfigError::InProgress);
        }
        if let Some(expected) = self.expected_version.filter(|v| *v != conf.version) {
            return Err(ReconfigError::BadVersion { expected: expected.0, current: conf.version.0 });
        }
        let next = match &self.members {
            Some(all) => Membership::new(all.clone())?,
            None => conf.current().changed(&self.joining, &self.leaving, &self.promoted)?,
        };
        let next = next.with_endpoints(conf.current(), told);
        Ok(conf.enter(next))
    }
}

/// Why a reconfiguration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigError {
    /// Only the established leader reconfigures.
    #[error("member {me} does not lead (leader: {leader:?}); ask the leader")]
    NotLeader {
        /// This member.
        me: ServerId,
        /// Who leads, if known.
        leader: Option<ServerId>,
    },
    /// The change names nothing to do.
    #[error("the change adds, removes and promotes nothing")]
    Empty,
    /// The members it would leave are not a configuration.
    #[error("{0}")]
    Invalid(#[from] MembershipError),
    /// It was based on another configuration version.
    #[error("the configuration is at version {current:x}, not {expected:x}")]
    BadVersion {
        /// The version asked for.
        expected: u64,
        /// The current one.
        current: u64,
    },
    /// Another reconfiguration is under way.
    #[error("another reconfiguration is in progress")]
    InProgress,
    /// A majority of the new voters is not connected and caught up.
    #[error("a majority of the new voters is not connected to the leader and caught up")]
    NoQuorum,
    /// The leader cannot propose now (handing over, or too busy).
    #[error("the leader cannot propose now: {0}")]
    Refused(ProposeError),
}

impl From<ProposeError> for ReconfigError {
    fn from(e: ProposeError) -> ReconfigError {
        match e {
            ProposeError::ReconfigInProgress => ReconfigError::InProgress,
            ProposeError::NewConfigNoQuorum => ReconfigError::NoQuorum,
            other => ReconfigError::Refused(other),
        }
    }
}

impl Replica {
    /// Changes the membership (the established leader only): checked
    /// against the configuration in force and proposed; answered with the
    /// zxid of the joint configuration's entry. The change is complete once
    /// the tree's configuration is at that version and no longer joint.
    pub fn reconfigure(&mut self, change: &MemberChange) -> Result<Zxid, ReconfigError> {
        let status = self.status();
        if status.role != Role::Leading || !status.serving {
            return Err(ReconfigError::NotLeader { me: self.me(), leader: status.leader });
        }
        let step = change.plan(self.zab.configuration(), &self.peer_endpoints)?;
        self.propose_step(step)
    }

    /// Proposes the joint configuration toward `next` (an established leader only).
    pub fn propose_membership(&mut self, next: Membership) -> Result<Zxid, ReconfigError> {
        let step = self.zab.configuration().enter(next);
        self.propose_step(step)
    }

    /// A member added with a ZooKeeper line, which has no place for its
    /// other addresses, that has since told them (its notifications): the
    /// leader records them with a reconfiguration to the same members, when
    /// no other is under way, so every member and tool can reach it.
    pub(super) fn record_endpoints(&mut self) {
        let conf = self.zab.configuration();
        if conf.is_joint() {
            return;
        }
        let Some(next) = conf.current().told(&self.peer_endpoints) else { return };
        match self.propose_membership(next) {
            Ok(zxid) => tracing::info!(zxid = %zxid, "recording the addresses members told of themselves"),
            Err(e) => tracing::debug!(error = %e, "the addresses members told wait"),
        }
    }

    fn propose_step(&mut self, step: Change) -> Result<Zxid, ReconfigError> {
        let time_ms = self.clock.now_ms;
        let body = TxnBody::Reconfig(step);
        let txn = Txn { session: SessionId::NONE, cxid: 0, time_ms, body };
        let zxid = self.zab.propose(txn)?;
        self.drain_zab();
        Ok(zxid)
    }
}
