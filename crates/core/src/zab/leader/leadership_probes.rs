//! Leadership probes, the leader's half: the proof that this member still
//! leads, asked for before it answers a sync.
//!
//! A leader paused past syncLimit (SIGSTOP, a stalled VM) still believes it
//! leads when it resumes, while the others may have elected a leader and
//! committed writes. Before it answers a sync it asks for proof: a probe
//! number in a PING, echoed by the followers. Once a quorum (itself
//! included) has echoed a probe sent after the sync arrived, no later epoch
//! can have committed anything before it (a member that accepted a later
//! epoch never answers this one), so its log holds every committed write.
//! ZooKeeper answers a sync without this (ZOOKEEPER-1675).
//!
//! A probe needs no PING of its own when the leader sends the follower a
//! REPLY (application traffic) in the turn that asked for it: it rides on
//! that REPLY, which leaves after the question arrived, and the follower's
//! echo rides on the next REQUEST it sends in its own turn. A follower gets
//! a PING for a new probe only when no REPLY carries it and it owes no echo
//! of an earlier one (its echo comes first, and the next turn's messages
//! carry the new probe); the heartbeat carries the newest probe too, so a
//! lost one is sent again. See [`Zab::end_turn`].

use super::{Leader, Stage};
use crate::ids::ServerId;
use crate::zab::{Action, Message, State, Zab};

impl Leader {
    /// Whether a follower that gets our proposals has not been sent the
    /// newest probe asked for.
    pub(in crate::zab) fn probe_due(&self) -> bool {
        self.followers.values().any(|t| t.gets_proposals() && t.probed < self.probe_wanted)
    }

    /// Records that `probe` went to follower `to`, in a PING or on a REPLY.
    pub(super) fn probe_sent_to(&mut self, to: ServerId, probe: u64) {
        if let Some(t) = self.followers.get_mut(&to) {
            t.probed = t.probed.max(probe);
        }
        self.probe_sent = self.probe_sent.max(probe);
    }
}

impl Zab {
    /// Leader: asks the followers to confirm this peer still leads. Returns
    /// the probe to wait for: [`Action::LeadershipConfirmed`] names it (or a
    /// later one) once a quorum echoed it. Probes asked for between two
    /// [`Zab::take_actions`] share one PING. None unless this peer is an established leader.
    pub fn confirm_leadership(&mut self) -> Option<u64> {
        let l = self.leader().filter(|l| l.is_established())?;
        // A question must wait for a probe sent after it arrived, and one not
        // yet confirmed: a leader that is a quorum alone confirms its probes
        // as it asks, and sends them to no one.
        if l.probe_wanted == l.probe_sent || l.probe_wanted <= l.probe_confirmed {
            l.probe_wanted += 1;
        }
        let probe = l.probe_wanted;
        self.check_probes();
        Some(probe)
    }

    /// Leader: whether this established leader and its synced follower
    /// `follower` are by themselves a quorum of the configuration in force
    /// (two of three voters). A message of this epoch from that follower then
    /// proves what a probe's echo does: when it was sent, no later epoch could
    /// have committed anything, for its quorum would need one of the two.
    pub fn is_quorum_with(&self, follower: ServerId) -> bool {
        let id = self.config.id;
        let State::Leading(l) = &self.state else { return false };
        l.is_established() && l.is_synced(follower) && self.log.configuration().is_quorum(|m| m == id || m == follower)
    }

    /// End of the host's turn: the newest probe asked for goes to each
    /// follower on the last REPLY this turn sends it (it leaves after every
    /// question of the turn arrived), or else in a PING of its own, unless
    /// an earlier probe to it is still unechoed: its echo comes first, and the
    /// next turn's messages carry the new one. So under load the probes ride
    /// on the replies the followers' read-index rounds get, and cost no
    /// message of their own.
    pub(in crate::zab) fn end_turn_probes(&mut self, sends: &mut [(ServerId, &mut Message)]) {
        let committed = self.committed;
        let Some(l) = self.leader().filter(|l| l.probe_due()) else { return };
        let (epoch, wanted) = (l.epoch, l.probe_wanted);
        for (to, msg) in sends.iter_mut().rev() {
            if l.followers.get(to).is_none_or(|t| t.probed >= wanted) || msg.epoch() != Some(epoch) {
                continue;
            }
            if let Some(probe) = msg.probe_mut() {
                *probe = wanted;
                l.probe_sent_to(*to, wanted);
            }
        }
        let pings: Vec<ServerId> = l
            .followers
            .iter()
            .filter(|(_, t)| t.gets_proposals() && t.probed < wanted && t.echoed >= t.probed)
            .map(|(id, _)| *id)
            .collect();
        for &to in &pings {
            l.probe_sent_to(to, wanted);
        }
        for to in pings {
            self.send(to, Message::Ping { epoch, committed, probe: wanted });
        }
    }

    /// Confirms the newest probe that a quorum has echoed, the leader's own
    /// echo being every probe it asked for.
    pub(super) fn check_probes(&mut self) {
        let id = self.config.id;
        let conf = self.log.configuration();
        let State::Leading(l) = &mut self.state else { return };
        let echo = |f: ServerId| match l.followers.get(&f) {
            _ if f == id => Some(l.probe_wanted),
            Some(t) if t.stage == Stage::Synced => Some(t.echoed),
            _ => None,
        };
        let Some(confirmed) = conf.quorum_point(echo) else { return };
        if confirmed > l.probe_confirmed {
            l.probe_confirmed = confirmed;
            self.outbox.push(Action::LeadershipConfirmed { probe: confirmed });
        }
    }
}
