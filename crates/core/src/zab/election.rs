//! Phase 0: fast leader election, after ZooKeeper's `FastLeaderElection`.
//!
//! Each looking replica votes for the best (epoch, zxid, id) it has heard of,
//! re-broadcasting whenever its vote changes. Once a vote has a quorum the
//! replica waits `finalize_wait_ticks` for a better one, then follows (or
//! becomes) that leader. A replica that joins late learns the established
//! leader from the notifications that followers and the leader send back.
//! Lost notifications are made good by re-sending with a backoff in ticks.

use super::{Follower, Leader, Message, PeerState, Role, State, Status, Vote, Zab};
use crate::ids::{ServerId, Zxid};
use crate::members::Configuration;
use std::collections::BTreeMap;

/// The state of a looking replica.
pub(super) struct Election {
    /// Our current vote.
    vote: Vote,
    /// Votes of this round, ours included.
    received: BTreeMap<ServerId, Vote>,
    /// What replicas outside the election (following or leading) told us,
    /// and the round they gave with it.
    out_of_election: BTreeMap<ServerId, (Vote, PeerState, u64)>,
    /// When our vote reached a quorum.
    quorum_since: Option<u64>,
    /// When to re-send our notification, and the current interval.
    resend_at: u64,
    resend_interval: u64,
    /// When this round started: joining an established leader waits a little,
    /// so a replica that just gave up on a sync does not retry in a tight loop.
    started: u64,
    /// The newest configuration a notification carried, when newer than
    /// the one our log holds: whom to follow is decided by it.
    newest: Option<Configuration>,
}

/// Orders configurations along a history: by version, a completed one after
/// the joint one of the same change.
fn recency(c: &Configuration) -> (Zxid, bool) {
    (c.version, !c.is_joint())
}

impl Election {
    /// The newest configuration a notification carried, if newer than our log's.
    pub(super) fn newest_heard(&self) -> Option<&Configuration> {
        self.newest.as_ref()
    }

    /// An inert election, replaced at once in `Zab::new`.
    pub(super) fn placeholder() -> Election {
        Election {
            vote: Vote::new(0, crate::ids::Zxid::ZERO, 0),
            received: BTreeMap::new(),
            out_of_election: BTreeMap::new(),
            quorum_since: None,
            resend_at: 0,
            resend_interval: 1,
            started: 0,
            newest: None,
        }
    }

    /// A new round voting for ourselves (an observer's vote is not counted:
    /// it only listens).
    pub(super) fn new(own: Vote, id: ServerId, votes: bool, now: u64) -> Election {
        let mut received = BTreeMap::new();
        if votes {
            received.insert(id, own);
        }
        Election {
            vote: own,
            received,
            out_of_election: BTreeMap::new(),
            quorum_since: None,
            resend_at: now + 1,
            resend_interval: 1,
            started: now,
            newest: None,
        }
    }
}

impl Zab {
    fn my_peer_state(&self) -> PeerState {
        match self.status.role {
            Role::Looking => PeerState::Looking,
            Role::Following => PeerState::Following,
            Role::Leading => PeerState::Leading,
        }
    }

    fn current_vote(&self) -> Vote {
        match &self.state {
            State::Looking(e) => e.vote,
            _ => self.decided.unwrap_or_else(|| self.own_vote()),
        }
    }

    fn notification(&self) -> Message {
        // The configuration at our commit point: one only our log holds may
        // be a tail a new leader truncates, and a member that took it for
        // the ensemble's would follow by members that are none.
        let configuration = Some(self.log.configuration_at(self.committed).clone());
        Message::Notification {
            round: self.round,
            vote: self.current_vote(),
            state: self.my_peer_state(),
            configuration,
        }
    }

    pub(super) fn broadcast_notification(&mut self) {
        let msg = self.notification();
        self.broadcast_to_members(msg);
    }

    fn notify(&mut self, to: ServerId) {
        let msg = self.notification();
        self.send(to, msg);
    }

    /// The configuration an election decides whom to follow by: the newest
    /// of our log's and those the notifications carried. (Whether to lead
    /// is decided by our log's alone: it is the one we would lead with.)
    fn election_configuration(&self) -> Configuration {
        let own = self.log.configuration();
        match &self.state {
            State::Looking(Election { newest: Some(newest), .. }) if recency(newest) > recency(own) => newest.clone(),
            _ => own.clone(),
        }
    }

    /// Whether our vote counts in this election: we vote by our log's
    /// configuration, or by a newer one we heard of.
    fn counts_in_election(&self, conf: &Configuration) -> bool {
        self.votes() || conf.is_voter(self.config.id)
    }

    pub(super) fn on_notification(
        &mut self,
        from: ServerId,
        round: u64,
        vote: Vote,
        state: PeerState,
        configuration: Option<Configuration>,
    ) {
        let State::Looking(_) = &self.state else {
            match state {
                // Following or leading: a looker learns from us who leads.
                PeerState::Looking => self.notify(from),
                PeerState::Leading if vote.leader == from => self.follower_on_leader_announced(from),
                PeerState::Following => self.follower_on_leader_following(from, round, vote.leader),
                PeerState::Leading => {}
            }
            return;
        };
        let own = recency(self.log.configuration());
        if let (State::Looking(e), Some(heard)) = (&mut self.state, configuration) {
            if recency(&heard) > own && e.newest.as_ref().is_none_or(|n| recency(&heard) > recency(n)) {
                e.newest = Some(heard);
            }
        }
        let conf = self.election_configuration();
        let from_voter = conf.is_voter(from) || self.log.configuration().is_voter(from);
        let counts = self.counts_in_election(&conf);
        match state {
            // An observer (or a member joining or removed) looking for the
            // leader: a voter tells it its vote (observers do not answer
            // each other); nothing is counted.
            PeerState::Looking if !from_voter => {
                if counts {
                    self.notify(from);
                }
            }
            PeerState::Looking if !counts => self.observer_on_looking_notification(from, round, vote),
            PeerState::Looking => self.on_looking_notification(from, round, vote),
            // Anyone settled may say who leads (a leader outside our
            // configuration among them); only voters' words are counted.
            PeerState::Following | PeerState::Leading => self.on_settled_notification(from, round, vote, state),
        }
    }

    /// An observer hears a voter's vote: it keeps the voters' votes of the
    /// newest round and follows the one a quorum of them agrees on. Its own
    /// vote (never counted by itself) follows the best it hears, as a
    /// voter's does: to a member whose log is behind a reconfiguration it
    /// may still be a voter, and a stale vote of its own there splits the
    /// election for ever (a schedule of the simulation did).
    fn observer_on_looking_notification(&mut self, from: ServerId, round: u64, vote: Vote) {
        let own = self.own_vote();
        let State::Looking(e) = &mut self.state else { return };
        e.out_of_election.remove(&from);
        let mut changed = false;
        if round > self.round {
            self.round = round;
            e.received.clear();
            e.vote = own.max(vote);
            changed = true;
        } else if round < self.round {
            return;
        } else if vote > e.vote {
            e.vote = vote;
            changed = true;
        }
        e.received.insert(from, vote);
        if changed {
            self.broadcast_notification();
        }
        self.check_election_done();
    }

    fn on_looking_notification(&mut self, from: ServerId, round: u64, vote: Vote) {
        let own = self.own_vote();
        let id = self.config.id;
        let State::Looking(e) = &mut self.state else { return };
        e.out_of_election.remove(&from);
        let mut changed = false;
        if round > self.round {
            self.round = round;
            e.received.clear();
            // A nomination (a hand-over) is kept into the later round: it
            // names a member holding our whole history, and started over
            // from our own vote the highest id would win instead.
            let base = if e.vote.nominated { e.vote.max(own) } else { own };
            e.vote = base.max(vote);
            e.received.insert(id, e.vote);
            e.quorum_since = None;
            changed = true;
        } else if round < self.round {
            // The sender is behind: tell it where we are.
            self.notify(from);
            return;
        } else if vote > e.vote {
            e.vote = vote;
            e.received.insert(id, vote);
            e.quorum_since = None;
            changed = true;
        }
        // The sender votes for something worse than we do: it may never have
        // heard our vote (it was still following when we broadcast it, and a
        // settled replica only answers with its old leader). Tell it now, not
        // at our next re-send tick; it adopts ours, so the exchange ends.
        let tell_sender = !changed && vote < e.vote;
        e.received.insert(from, vote);
        if changed {
            self.broadcast_notification();
        } else if tell_sender {
            self.notify(from);
        }
        self.check_election_done();
    }

    fn on_settled_notification(&mut self, from: ServerId, round: u64, vote: Vote, state: PeerState) {
        let State::Looking(e) = &mut self.state else { return };
        if round == self.round {
            e.received.insert(from, vote);
        }
        e.out_of_election.insert(from, (vote, state, round));
        // A leader outside our configuration (we are behind a
        // reconfiguration, or not yet a member) never writes to us: ask it,
        // it answers a looker with its own word that it leads.
        let unheard = vote.leader != self.config.id && !e.out_of_election.contains_key(&vote.leader);
        if unheard && !self.log.configuration().is_member(vote.leader) {
            self.notify(vote.leader);
        }
        if self.check_join() {
            self.round = self.round.max(round);
            return;
        }
        self.check_election_done();
    }

    /// Joins an established leader when a quorum outside the election agrees
    /// on it and the leader itself says it leads (ZooKeeper's checkLeader).
    fn check_join(&mut self) -> bool {
        let (now, wait, id) = (self.now, self.config.finalize_wait_ticks, self.config.id);
        let conf = self.election_configuration();
        let own = self.log.configuration();
        let State::Looking(e) = &self.state else { return false };
        if now < e.started + wait {
            return false;
        }
        let found = e.out_of_election.iter().find_map(|(&sender, &(vote, state, _))| {
            let leader = vote.leader;
            let leads = sender == leader && state == PeerState::Leading;
            // Only voters vouch for a leader (an observer only follows one).
            let vouch = |voter| e.out_of_election.get(&voter).is_some_and(|(v, _, _)| v.leader == leader);
            // Following is safe on any configuration's word; the newest heard
            // may name members that never write to us.
            let vouched = conf.is_quorum_of_either(vouch) || own.is_quorum_of_either(vouch);
            (leads && leader != id && vouched).then_some(vote)
        });
        if let Some(vote) = found {
            self.decide(vote);
            return true;
        }
        self.check_followed()
    }

    /// Leads when a quorum of our own configuration follows us though we
    /// still look: our vote moved on to a candidate no more recent than us
    /// (one they do not count), or our round moved past theirs. Not on a
    /// word left from a leadership of ours, nor while handing over, nor
    /// while the candidate we vote for leads. ZooKeeper's checkLeader does
    /// this for itself within one round; why across rounds, and the soak
    /// seeds behind each condition: internals/zab.md, "Elections across a
    /// change". Safe on any evidence: discovery counts its own quorums.
    fn check_followed(&mut self) -> bool {
        if !self.votes() {
            return false;
        }
        let (id, own_vote, own, led) = (self.config.id, self.own_vote(), self.log.configuration(), self.led_round);
        let State::Looking(e) = &self.state else { return false };
        // A history no longer than ours, by last zxid. (A later currentEpoch
        // alone is a promise, not a history: a member that promised an epoch
        // in which nothing could commit may hold it.)
        let as_recent = e.vote.zxid <= own_vote.zxid;
        let handing_over = e.vote.nominated && e.vote.leader != id;
        // The candidate we vote for says it leads: ours is the second
        // leadership, and would split the followers between the two (a soak
        // seed did, round after round). `check_join` follows it once a
        // quorum vouches for it; until then its followers come back looking.
        let candidate_leads = e.vote.leader != id
            && e.out_of_election
                .get(&e.vote.leader)
                .is_some_and(|(v, s, _)| v.leader == e.vote.leader && *s == PeerState::Leading);
        // Fresh: not a word left from a leadership of ours (given in a round
        // we led in or before, or naming a history other than ours now).
        let fresh = |v: &Vote, round: u64| {
            led.is_none_or(|led| round > led) && (v.epoch, v.zxid) == (own_vote.epoch, own_vote.zxid)
        };
        let follows_us = |voter| {
            voter == id
                || e.out_of_election
                    .get(&voter)
                    .is_some_and(|(v, s, r)| v.leader == id && *s == PeerState::Following && fresh(v, *r))
        };
        if !as_recent || handing_over || candidate_leads || !own.is_quorum(follows_us) {
            return false;
        }
        self.decide(own_vote);
        true
    }

    /// Ends the election when our vote has a quorum and either every voter
    /// agrees or no better vote came within the finalize wait.
    pub(super) fn check_election_done(&mut self) {
        let now = self.now;
        let wait = self.config.finalize_wait_ticks;
        let conf = self.election_configuration();
        let observes = !self.counts_in_election(&conf);
        let may_lead = self.votes();
        let own = self.log.configuration();
        let State::Looking(e) = &mut self.state else { return };
        // Leading needs a majority of every membership in force; following
        // one of either. A member whose log stops inside a joint
        // configuration may hear too little of the old members, who have
        // moved on, to find a majority of them: following on the new ones'
        // word is safe (the leader counts its own quorums), and without it
        // such a member's vote can make two would-be leaders that neither
        // gets it to follow (a schedule of the simulation did).
        let id = self.config.id;
        let agree_on = |vote: &Vote| {
            let agrees = |voter| e.received.get(&voter).is_some_and(|v| v.leader == vote.leader);
            if vote.leader == id {
                may_lead && own.is_quorum(agrees)
            } else {
                conf.is_quorum_of_either(agrees) || own.is_quorum_of_either(agrees)
            }
        };
        if observes {
            // An observer has no vote of its own: it follows what a quorum of
            // voters agreed on, once they have (never itself).
            let agreed = e.received.values().find(|v| agree_on(v)).copied();
            if let Some(vote) = agreed.filter(|v| v.leader != self.config.id) {
                self.decide(vote);
            }
            return;
        }
        if !agree_on(&e.vote) {
            e.quorum_since = None;
            return;
        }
        let all_agree = conf.voters().iter().all(|id| e.received.get(id) == Some(&e.vote));
        let since = *e.quorum_since.get_or_insert(now);
        if all_agree || now >= since + wait {
            let vote = e.vote;
            self.decide(vote);
        }
    }

    pub(super) fn election_on_tick(&mut self) {
        let now = self.now;
        let max = self.config.max_notification_interval_ticks.max(1);
        let resend = {
            let State::Looking(e) = &mut self.state else { return };
            if now >= e.resend_at {
                e.resend_interval = (e.resend_interval * 2).min(max);
                e.resend_at = now + e.resend_interval;
                true
            } else {
                false
            }
        };
        if resend {
            self.broadcast_notification();
        }
        if !self.check_join() {
            self.check_election_done();
        }
    }

    fn decide(&mut self, vote: Vote) {
        self.decided = Some(vote);
        if vote.leader == self.config.id {
            tracing::info!(id = self.config.id, round = self.round, zxid = %vote.zxid, "elected leader");
            self.led_round = Some(self.round);
            self.state = State::Leading(Leader::new(self.now));
            self.set_status(Status { role: Role::Leading, epoch: 0, leader: Some(self.config.id), serving: false });
            self.leader_start();
        } else {
            tracing::info!(id = self.config.id, round = self.round, leader = vote.leader, "following");
            self.state = State::Following(Follower::new(vote.leader, self.now));
            self.set_status(Status { role: Role::Following, epoch: 0, leader: Some(vote.leader), serving: false });
            self.follower_start();
        }
        // Tell everyone still looking what we decided.
        self.broadcast_notification();
    }
}
