//! Zab, ZooKeeper's atomic broadcast, as a deterministic state machine.
//!
//! A [`Zab`] takes [`Input`]s (a tick, a message from another replica, "storage
//! operations up to sequence number N are durable", a lost connection) and
//! produces [`Action`]s (messages to send, storage operations to perform,
//! committed entries to apply, role changes). It never awaits, never reads a
//! clock and draws no randomness: time is counted in ticks, and the runtime
//! (`server`) or the simulation (`sim`) moves the actions. That split is what
//! lets a seeded simulation run thousands of crash and partition schedules.
//!
//! The phases follow ZooKeeper (names in brackets are its packet types):
//! 1. election \[FLE\]: votes (epoch, zxid, id) compared in that order;
//! 2. discovery: \[FOLLOWERINFO\] → \[LEADERINFO\] new epoch → \[ACKEPOCH\];
//! 3. synchronization: \[DIFF\]/\[TRUNC\]/\[SNAP\], then \[NEWLEADER\], acknowledged by
//!    a quorum only once everything and the new epoch are durable → \[UPTODATE\];
//! 4. broadcast: \[PROPOSAL\] → durable → \[ACK\] → quorum → \[COMMIT\], pipelined.
//!
//! Durability gates every acknowledgement: a message that promises something
//! durable (ACKEPOCH, ACK of NEWLEADER, ACK, and the leader's own LEADERINFO)
//! is held back until an `Input::Persisted` covers the storage operation it
//! depends on.
//!
//! This file is the machine itself, its state and the entry points a host
//! calls; the words it speaks with its host are in `vocab`, and each phase's
//! rules in a file of its own.

mod election;
mod follower;
mod leader;
pub mod log;
pub mod message;
mod persist;
mod reconfig;
mod validate;
mod vocab;

/// What a runtime sends for [`Io::SendStored`], read from `stored` (a test
/// harness's durable log); panics when it lacks an entry asked for.
#[cfg(test)]
pub(crate) fn stored_proposals(stored: &[Entry], io: &Io) -> (ServerId, Vec<Message>) {
    let Io::SendStored { to, epoch, after, ranges, batch } = io else { panic!("not a SendStored: {io:?}") };
    let held = |z: Zxid| ranges.iter().any(|r| r.first <= z && z <= r.last);
    let span: Vec<Entry> = stored.iter().filter(|e| held(e.zxid)).cloned().collect();
    let wanted: usize = ranges.iter().map(|r| (r.last.counter() - r.first.counter()) as usize + 1).sum();
    assert_eq!(span.len(), wanted, "asked for stored entries it lacks");
    (*to, proposals(*epoch, *after, &span, *batch))
}

#[cfg(test)]
mod tests;

use crate::ids::{Epoch, ServerId, Zxid};
use crate::members::{Change, Configuration};
use crate::txn::{Entry, Txn, TxnBody};
use bytes::Bytes;
use election::Election;
use follower::Follower;
use leader::Leader;
pub use leader::TransferError;
use log::Log;
pub use message::{proposals, EpochRange, Message, PeerState, Vote};
use std::collections::VecDeque;
pub(crate) use validate::check as validate_check;
pub use validate::Broken;
pub use vocab::{
    Action, Config, Durable, FollowerProgress, Input, Io, Link, ProposeError, Role, Status, StorageOp,
    RESIDENT_LOG_ENTRIES,
};

enum State {
    Looking(Election),
    Following(Follower),
    Leading(Leader),
}

/// One member's Zab: the state machine of election, discovery, synchronization and broadcast.
pub struct Zab {
    config: Config,
    accepted_epoch: Epoch,
    current_epoch: Epoch,
    log: Log,
    /// Every entry up to here is committed and was handed out for applying.
    committed: Zxid,
    /// Logical time.
    now: u64,
    /// FLE's logical clock.
    round: u64,
    /// The vote that ended the last election (what we tell lookers).
    decided: Option<Vote>,
    /// The last round in which we decided to lead: a member's word that it
    /// follows us, given in that round or before, may be left from then.
    led_round: Option<u64>,
    next_seq: u64,
    durable_seq: u64,
    /// Appends not yet durable: (sequence number, last zxid of the batch).
    appends_in_flight: VecDeque<(u64, Zxid)>,
    /// The highest zxid known durable in the local log.
    durable_zxid: Zxid,
    /// Messages waiting for a storage operation to be durable.
    deferred: VecDeque<(u64, ServerId, Message)>,
    /// Proposals not yet handed to storage and followers (batched per turn).
    batch: Vec<Entry>,
    state: State,
    status: Status,
    outbox: Vec<Action>,
    /// Forwards sent by this process, numbered so the leader can drop one
    /// that arrives late or twice (its channel need not be FIFO for that).
    forwarded: u64,
    /// The highest acceptedEpoch a follower reported that was above
    /// the epoch we led: the next epoch we propose goes above it, so that
    /// follower (which promised never to go back) can join. A loaded tree
    /// ([`TxnBody::Load`]) raises it too, to the epoch its history reached.
    epoch_floor: Epoch,
}

impl Zab {
    /// A peer that starts looking for a leader. The caller's tree must already
    /// reflect everything up to `durable.snapshot_zxid`; entries after it are
    /// applied only once a leader commits them.
    pub fn new(config: Config, durable: Durable) -> Zab {
        // The replicated configuration wins over the file's once there is one.
        let base_config = durable.configuration.unwrap_or_else(|| config.initial_configuration());
        let loaded = durable.entries.iter().filter_map(|e| e.txn.body.loaded_epoch()).max().unwrap_or(0);
        let log = Log::new(durable.snapshot_zxid, base_config, durable.entries);
        let last = log.last_zxid();
        let status = Status { role: Role::Looking, epoch: 0, leader: None, serving: false };
        let mut peer = Zab {
            accepted_epoch: durable.accepted_epoch,
            current_epoch: durable.current_epoch,
            committed: durable.snapshot_zxid,
            now: 0,
            round: 0,
            decided: None,
            led_round: None,
            next_seq: 1,
            durable_seq: 0,
            appends_in_flight: VecDeque::new(),
            durable_zxid: last,
            deferred: VecDeque::new(),
            batch: Vec::new(),
            state: State::Looking(Election::placeholder()),
            status,
            outbox: Vec::new(),
            forwarded: 0,
            epoch_floor: durable.epoch_floor.max(loaded),
            log,
            config,
        };
        peer.become_looking("start");
        peer
    }

    /// Feeds one input.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::Tick => self.on_tick(),
            Input::Message { from, msg } => self.on_message(from, msg),
            Input::Persisted { seq } => self.on_persisted(seq),
            Input::Disconnected { peer, link } => self.on_disconnected(peer, link),
        }
        self.maybe_move_epoch();
        self.maybe_spill();
    }

    /// Leader: once a loaded tree whose history reached our epoch or beyond
    /// is committed (and with it everything logged: nothing is proposed
    /// after a load), steps down to an election nominating itself, whose
    /// new epoch goes above the loaded one, so no zxid written after the
    /// load is older than one it brought.
    fn maybe_move_epoch(&mut self) {
        let State::Leading(l) = &self.state else { return };
        if !l.is_established() || self.epoch_floor < l.epoch || self.committed < self.log.last_zxid() {
            return;
        }
        let (epoch, id) = (l.epoch, self.config.id);
        for to in l.broadcast_targets() {
            self.send(to, Message::StepDown { epoch, to: id });
        }
        let reason = format!("a loaded history reached epoch {}: moving to an epoch above it", self.epoch_floor);
        self.become_looking_nominating(id, &reason);
    }

    /// Stops holding committed, durable entries beyond the newest
    /// [`Config::resident_log_entries`] (in steps, so the check is all most
    /// inputs cost).
    fn maybe_spill(&mut self) {
        let keep = self.config.resident_log_entries;
        if self.log.len() > keep.saturating_mul(2) {
            self.log.spill(self.committed.min(self.durable_zxid), keep);
        }
    }

    /// What to do next, in order. Proposals made since the last call go out
    /// as one storage append and one message per follower (batching).
    pub fn take_actions(&mut self) -> Vec<Action> {
        self.flush_batch();
        std::mem::take(&mut self.outbox)
    }

    /// Hands back a vector [`Zab::take_actions`] returned, emptied, for the
    /// next actions: a host's every turn takes some, and this spares each
    /// turn growing a new one.
    pub fn recycle_actions(&mut self, used: Vec<Action>) {
        crate::reuse::hand_back(&mut self.outbox, used);
    }

    /// The end of the host's turn, once every input of the turn is handled
    /// and before `sends` (this turn's messages, in order) leave: leadership
    /// probes asked for in the turn and echoes of probes received in it ride
    /// on those messages where they can, or go in PINGs of their own, which
    /// [`Zab::take_actions`] then returns. A host that never calls it
    /// still works, probes and echoes going out at its ticks.
    pub fn end_turn(&mut self, sends: &mut [(ServerId, &mut Message)]) {
        self.end_turn_probes(sends);
        self.end_turn_echo(sends);
    }

    /// Whether [`Zab::end_turn`] has anything to do: a probe not yet sent
    /// to every follower, or one received and not yet echoed. Lets a host
    /// skip gathering its sends on most turns.
    pub fn probes_due(&self) -> bool {
        match &self.state {
            State::Leading(l) => l.probe_due(),
            State::Following(f) => f.echo_due(),
            _ => false,
        }
    }

    /// This replica's id.
    pub fn id(&self) -> ServerId {
        self.config.id
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Role, epoch, leader, serving.
    pub fn status(&self) -> Status {
        self.status
    }

    /// acceptedEpoch.
    pub fn accepted_epoch(&self) -> Epoch {
        self.accepted_epoch
    }

    /// currentEpoch.
    pub fn current_epoch(&self) -> Epoch {
        self.current_epoch
    }

    /// The last logged zxid (durable or not).
    pub fn last_logged(&self) -> Zxid {
        self.log.last_zxid()
    }

    /// The highest zxid the local log holds durably.
    pub fn durable_zxid(&self) -> Zxid {
        self.durable_zxid
    }

    /// The commit point: every entry up to it was handed out for applying.
    pub fn last_committed(&self) -> Zxid {
        self.committed
    }

    /// The configuration in force: the newest the log holds, committed or
    /// not (see [`crate::members`]).
    pub fn configuration(&self) -> &Configuration {
        self.log.configuration()
    }

    /// Whether this member votes (and may lead): in the configuration in
    /// force, or in the one at its commit point. A member whose log holds a
    /// change removing it, not yet committed, keeps standing: it may hold
    /// the newest history, which another leader would find ahead of its own
    /// and abort on (a schedule of the simulation did, for ever). As in
    /// Raft, a leader the change removes leaves once the change commits.
    fn votes(&self) -> bool {
        let id = self.config.id;
        self.log.configuration().is_voter(id) || self.log.configuration_at(self.committed).is_voter(id)
    }

    /// The log: entries held in memory, and the ranges of stored ones.
    pub fn log(&self) -> &log::Log {
        &self.log
    }

    /// The member a leader is handing leadership to, while it does.
    pub fn transferring_to(&self) -> Option<ServerId> {
        match &self.state {
            State::Leading(l) => l.transferring_to(),
            _ => None,
        }
    }

    /// Followers a leader currently counts as synced (empty otherwise).
    pub fn synced_followers(&self) -> Vec<ServerId> {
        match &self.state {
            State::Leading(l) => l.synced_followers(),
            _ => Vec::new(),
        }
    }

    /// A leader's view of its followers (empty otherwise).
    pub fn follower_progress(&self) -> Vec<FollowerProgress> {
        let State::Leading(l) = &self.state else { return Vec::new() };
        l.progress()
            .into_iter()
            .map(|(id, synced, acked)| FollowerProgress {
                id,
                synced,
                acked,
                lag: u64::try_from(self.log.count_after(acked)).unwrap_or(u64::MAX),
            })
            .collect()
    }

    /// The zxid the next proposal will get, if this peer may propose now.
    pub fn next_zxid(&self) -> Result<Zxid, ProposeError> {
        let State::Leading(leader) = &self.state else { return Err(ProposeError::NotLeader) };
        if !leader.is_established() {
            return Err(ProposeError::NotLeader);
        }
        // A handover, or the new epoch a load needs (see `maybe_move_epoch`).
        if leader.transferring_to().is_some() || self.epoch_floor >= leader.epoch {
            return Err(ProposeError::Transferring);
        }
        let last = self.last_logged();
        if last.epoch() == leader.epoch && last.counter() == u32::MAX - 1 {
            // The counter is exhausted: a new epoch is needed (ZOOKEEPER-1277).
            return Err(ProposeError::NotLeader);
        }
        if last.0.saturating_sub(self.committed.0) >= self.config.max_inflight && last.epoch() == self.committed.epoch()
        {
            return Err(ProposeError::Busy);
        }
        Ok(if last.epoch() == leader.epoch {
            Zxid::new(leader.epoch, last.counter() + 1)
        } else {
            Zxid::new(leader.epoch, 1)
        })
    }

    /// Leader: whether the reconfiguration step `change` may be proposed now
    /// (see [`ProposeError::ReconfigInProgress`] and [`ProposeError::NewConfigNoQuorum`]).
    pub fn check_reconfiguration(&self, change: &Change) -> Result<(), ProposeError> {
        self.check_reconfig(change)
    }

    /// Proposes a transaction (leader only); returns its zxid. It reaches
    /// storage and followers at the next [`Zab::take_actions`].
    pub fn propose(&mut self, txn: Txn) -> Result<Zxid, ProposeError> {
        let zxid = self.next_zxid()?;
        if let TxnBody::Reconfig(change @ Change::Enter { .. }) = &txn.body {
            self.check_reconfig(change)?;
        }
        if let Some(epoch) = txn.body.loaded_epoch() {
            self.epoch_floor = self.epoch_floor.max(epoch);
        }
        let entry = Entry::new(zxid, txn);
        if let Err(e) = self.log.append(entry.clone()) {
            unreachable!("next_zxid yields the entry that follows the log: {e}");
        }
        self.batch.push(entry);
        Ok(zxid)
    }

    /// Sends application traffic to the leader (follower only, while serving).
    pub fn forward(&mut self, payload: Bytes) -> bool {
        let Some((leader, epoch)) = self.forwarding_to() else { return false };
        self.forwarded += 1;
        let seq = self.forwarded;
        // Every request echoes the newest probe received: it is sent after it.
        let probe = self.follower().map_or(0, |f| {
            f.echoed = f.probe;
            f.probe
        });
        self.send(leader, Message::Forward { epoch, seq, payload, probe });
        true
    }

    /// Whether [`Zab::forward`] would send: following, and serving.
    pub fn can_forward(&self) -> bool {
        self.forwarding_to().is_some()
    }

    /// The leader and epoch forwarded traffic goes to, if it may go now
    /// (following, and serving): the one rule of `forward` and `can_forward`.
    fn forwarding_to(&self) -> Option<(ServerId, Epoch)> {
        match &self.state {
            State::Following(f) if self.status.serving => Some((f.leader, f.epoch)),
            _ => None,
        }
    }

    /// Sends application traffic to one follower, after every proposal made
    /// so far (leader only).
    pub fn reply(&mut self, to: ServerId, payload: Bytes) -> bool {
        self.flush_batch();
        let State::Leading(l) = &self.state else { return false };
        let epoch = l.epoch;
        if !l.is_tracking(to) {
            return false;
        }
        // A probe is put on it at the end of the turn if one is asked for.
        self.send(to, Message::Reply { epoch, payload, probe: 0 });
        true
    }

    /// Forgets log entries up to `zxid`: a durable snapshot covers them and
    /// storage may drop them. A leader syncs followers by DIFF from what
    /// remains, so call it with a point some distance behind the newest
    /// snapshot, and no later than storage still holds.
    pub fn compact(&mut self, zxid: Zxid) {
        self.log.compact(zxid.min(self.committed));
    }

    fn send(&mut self, to: ServerId, msg: Message) {
        if to == self.config.id {
            return;
        }
        self.outbox.push(Action::Io(Io::Send { to, msg }));
    }

    /// Sends `msg` to every other member of the configuration in force (of
    /// both while joint), observers included (they learn who leads from the
    /// voters' notifications).
    fn broadcast_to_members(&mut self, msg: Message) {
        // A newer configuration an election heard of names members too.
        let heard = match &self.state {
            State::Looking(e) => e.newest_heard(),
            _ => None,
        };
        let mut others: Vec<ServerId> = std::iter::once(self.log.configuration())
            .chain(heard)
            .flat_map(Configuration::members)
            .map(|m| m.id)
            .filter(|v| *v != self.config.id)
            .collect();
        others.sort_unstable();
        others.dedup();
        for to in others {
            self.send(to, msg.clone());
        }
    }

    fn flush_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let entries = std::mem::take(&mut self.batch);
        self.persist(StorageOp::Append(entries.clone()));
        if let State::Leading(l) = &self.state {
            let epoch = l.epoch;
            let receivers = l.broadcast_targets();
            // Not empty (checked above), and appended to the log already.
            let prev = entries.first().map_or(self.log.last_zxid(), |e| self.log.before(e.zxid));
            for msg in proposals(epoch, prev, &entries, self.config.max_batch_entries.max(1)) {
                for &to in &receivers {
                    self.send(to, msg.clone());
                }
            }
        }
    }

    fn on_tick(&mut self) {
        self.now += 1;
        match &self.state {
            State::Looking(_) => self.election_on_tick(),
            State::Following(_) => self.follower_on_tick(),
            State::Leading(_) => self.leader_on_tick(),
        }
    }

    fn on_message(&mut self, from: ServerId, msg: Message) {
        // Anyone may speak: a member joining is not in the configuration yet,
        // and one removed keeps following. What counts is decided per message.
        if from == self.config.id {
            return;
        }
        if let Message::Notification { round, vote, state, configuration } = msg {
            self.on_notification(from, round, vote, state, configuration);
            return;
        }
        match &self.state {
            State::Looking(_) => {}
            State::Following(_) => self.follower_on_message(from, msg),
            State::Leading(_) => self.leader_on_message(from, msg),
        }
    }

    fn on_disconnected(&mut self, peer: ServerId, link: Link) {
        match (&mut self.state, link) {
            (State::Following(f), Link::ToLeader) if f.leader == peer => {
                self.become_looking("lost the connection to the leader")
            }
            (State::Leading(l), Link::FromFollower) => l.drop_follower(peer),
            _ => {}
        }
    }

    /// Hands committed entries `(self.committed, up_to]` out for applying.
    fn commit_to(&mut self, up_to: Zxid) {
        let up_to = up_to.min(self.log.last_zxid());
        if up_to <= self.committed {
            return;
        }
        let entries = self.log.range(self.committed, up_to);
        self.committed = up_to;
        if let Some(epoch) = entries.iter().filter_map(|e| e.txn.body.loaded_epoch()).max() {
            self.epoch_floor = self.epoch_floor.max(epoch);
            // Promised durably, as a NEWEPOCH that never won would be: no
            // epoch at or below the loaded one is ever joined again, after a
            // restart too (the snapshot may cover the load before the move).
            if epoch > self.accepted_epoch {
                self.set_accepted_epoch(epoch);
            }
        }
        if !entries.is_empty() {
            self.outbox.push(Action::Commit { entries });
        }
    }

    fn set_status(&mut self, status: Status) {
        if status != self.status {
            self.status = status;
            self.outbox.push(Action::RoleChanged(status));
        }
    }

    fn own_vote(&self) -> Vote {
        Vote::new(self.current_epoch, self.log.last_zxid(), self.config.id)
    }

    /// Leaves any role for election. Unsent proposals are dropped from memory
    /// only if never handed to storage; logged ones stay (a later leader decides).
    fn become_looking(&mut self, why: &str) {
        self.start_election(None, why);
    }

    /// Leaves any role for election, voting for `nominee` with a nomination
    /// (see [`Vote::nominated`]): a leader handing over to a member that holds
    /// its whole log, or that member itself. Its history is as recent as ours.
    pub(super) fn become_looking_nominating(&mut self, nominee: ServerId, why: &str) {
        self.start_election(Some(nominee), why);
    }

    fn start_election(&mut self, nominee: Option<ServerId>, why: &str) {
        tracing::info!(
            id = self.config.id,
            epoch = self.current_epoch,
            zxid = %self.log.last_zxid(),
            reason = why,
            "looking for a leader"
        );
        // Proposals still in the batch were never sent: flush them to storage
        // so the in-memory log and the durable one stay the same history.
        if !self.batch.is_empty() {
            let entries = std::mem::take(&mut self.batch);
            self.persist(StorageOp::Append(entries));
        }
        // Deferred messages belonged to the old role.
        self.deferred.clear();
        self.round += 1;
        self.decided = None;
        let own = self.own_vote();
        let vote = match nominee {
            Some(leader) => Vote { nominated: true, leader, ..own },
            None => own,
        };
        let election = Election::new(vote, self.config.id, self.votes(), self.now);
        self.state = State::Looking(election);
        self.set_status(Status { role: Role::Looking, epoch: 0, leader: None, serving: false });
        self.broadcast_notification();
        self.check_election_done();
    }
}

impl Zab {
    /// Abandons the current role and starts an election (e.g. the runtime
    /// could not install a snapshot the leader sent).
    pub fn restart_election(&mut self, reason: &str) {
        self.become_looking(reason);
    }
}
