//! The leader's part in a reconfiguration (see [`crate::members`]): what it
//! refuses before proposing one, how it completes the joint configuration
//! once that is committed, and how it leaves when the new members do not
//! include it as a voter.

use super::{ProposeError, State, Zab};
use crate::ids::{ServerId, SessionId};
use crate::members::Change;
use crate::txn::{Txn, TxnBody};

impl Zab {
    /// Leader: whether `next` may be proposed now. One reconfiguration at a
    /// time (a joint configuration, or a completion not yet committed, is
    /// one under way), and a majority of the new voters must be synced
    /// followers (through NEWLEADER, so holding our history and taking every
    /// proposal), or the new configuration could not commit anything
    /// (ZooKeeper's NewConfigNoQuorum). Not "acknowledged everything
    /// committed": under load a synced follower is always a few behind.
    pub(super) fn check_reconfig(&self, change: &Change) -> Result<(), ProposeError> {
        let conf = self.log.configuration();
        let Change::Enter { active, next } = change else { return Err(ProposeError::ReconfigInProgress) };
        // Built from another configuration than the one in force: one
        // changed under it.
        if conf.is_joint() || self.log.reconfiguring_after(self.committed) || *active != conf.active {
            return Err(ProposeError::ReconfigInProgress);
        }
        let State::Leading(l) = &self.state else { return Err(ProposeError::NotLeader) };
        let id = self.config.id;
        let synced = |f: ServerId| f == id || l.is_synced(f);
        if !next.is_majority(synced) {
            return Err(ProposeError::NewConfigNoQuorum);
        }
        Ok(())
    }

    /// Leader, whenever its commit point may have moved: once the joint
    /// configuration is committed, proposes its completion; once a
    /// configuration without this member as a voter is committed, hands
    /// leadership to one of the new voters (or, with none synced, steps
    /// down to an election).
    pub(super) fn reconfiguration_on_commit(&mut self) {
        let State::Leading(l) = &self.state else { return };
        if !l.is_established() || l.transferring_to().is_some() {
            return;
        }
        let conf = self.log.configuration();
        if conf.is_joint() {
            if conf.version <= self.committed {
                let time_ms = self.log.get(conf.version).map_or(0, |e| e.txn.time_ms);
                let body = TxnBody::Reconfig(conf.complete());
                let done = Txn { session: SessionId::NONE, cxid: 0, time_ms, body };
                // Refused only while busy: the next commit or tick tries again.
                if let Ok(zxid) = self.propose(done) {
                    tracing::info!(id = self.config.id, %zxid, "joint configuration committed; completing it");
                }
            }
            return;
        }
        if conf.is_voter(self.config.id) || self.log.reconfiguring_after(self.committed) {
            return;
        }
        tracing::info!(id = self.config.id, version = %conf.version, "no longer a voter: leaving the lead");
        if self.transfer_leadership(None).is_err() {
            self.become_looking("removed from the voters");
        }
    }
}
