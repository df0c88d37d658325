//! The leader's side of discovery, synchronization and broadcast.
//!
//! Discovery: once a quorum (the leader included) has sent FOLLOWERINFO, the
//! new epoch is max(acceptedEpoch) + 1 (or above a later promise a follower
//! reported to an earlier reign of ours); the leader makes it durable before
//! telling anyone (ZOOKEEPER-1291), then waits for a quorum of ACKEPOCH and
//! aborts if a follower's history is more recent than its own.
//!
//! Synchronization: each follower gets DIFF, TRUNC+DIFF or SNAP (see
//! `log::plan_sync`) and then NEWLEADER; from that point it also receives
//! every new proposal (forwarding starts with the sync, so nothing falls in
//! between). A quorum of NEWLEADER acknowledgements (the leader's own once its
//! currentEpoch is durable) establishes the leader: its whole history is
//! committed and synced followers get UPTODATE.
//!
//! Broadcast: a proposal is committed once a quorum holds it durably, in zxid
//! order; commits are cumulative, so one COMMIT covers many proposals.
//!
//! The leader's two other duties have files of their own: the probes that
//! prove it still leads before it answers a sync (`leadership_probes`), and
//! handing the lead to another member (`leadership_transfer`).

mod leadership_probes;
mod leadership_transfer;

use super::log::{plan_sync, SyncPlan};
use super::message::LogSummary;
use super::{proposals, Action, Io, Message, Role, State, Status, Zab};
use crate::ids::{Epoch, ServerId, Zxid};
use leadership_transfer::Transfer;
pub use leadership_transfer::TransferError;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Discovery,
    Synchronization,
    Broadcast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// FOLLOWERINFO received; LEADERINFO sent or about to be.
    AwaitingAckEpoch,
    /// ACKEPOCH received before the epoch quorum; sync comes after it.
    AwaitingSync,
    /// DIFF/SNAP and NEWLEADER sent; proposals are forwarded.
    Syncing,
    /// NEWLEADER acknowledged: its acks count toward quorums.
    Synced,
}

struct Tracked {
    stage: Stage,
    /// Highest zxid this follower holds durably (valid once synced).
    acked: Zxid,
    /// The history NEWLEADER told it to hold; its ACK must name exactly this.
    newleader: Option<Zxid>,
    last_heard: u64,
    /// What it told us in ACKEPOCH, kept until it is synced.
    position: Option<(Zxid, LogSummary)>,
    /// The sequence number of the last forward taken from it.
    forwarded: u64,
    /// The highest leadership probe it echoed.
    echoed: u64,
    /// The newest leadership probe sent to it (in a PING or on a REPLY).
    probed: u64,
}

impl Tracked {
    /// Whether it receives proposals: being synced, or synced.
    fn gets_proposals(&self) -> bool {
        matches!(self.stage, Stage::Syncing | Stage::Synced)
    }
}

/// The state of a leading replica.
pub(super) struct Leader {
    /// The new epoch (0 until discovery picks it).
    pub(super) epoch: Epoch,
    phase: Phase,
    phase_started: u64,
    /// acceptedEpoch of every replica that presented itself during discovery.
    infos: BTreeMap<ServerId, Epoch>,
    /// Storage sequence of our acceptedEpoch write, once the epoch is chosen.
    accepted_seq: Option<u64>,
    /// Storage sequence of our currentEpoch write, once the epoch quorum is in.
    current_seq: Option<u64>,
    epoch_acks: BTreeSet<ServerId>,
    followers: BTreeMap<ServerId, Tracked>,
    /// Our history's end when synchronization started (committed at establishment).
    newleader_zxid: Zxid,
    /// The newest leadership probe asked for, the newest sent to any
    /// follower, and the newest a quorum confirmed.
    probe_wanted: u64,
    probe_sent: u64,
    probe_confirmed: u64,
    /// A leadership transfer under way: no new proposals meanwhile.
    transfer: Option<Transfer>,
}

impl Leader {
    pub(super) fn new(now: u64) -> Leader {
        Leader {
            epoch: 0,
            phase: Phase::Discovery,
            phase_started: now,
            infos: BTreeMap::new(),
            accepted_seq: None,
            current_seq: None,
            epoch_acks: BTreeSet::new(),
            followers: BTreeMap::new(),
            newleader_zxid: Zxid::ZERO,
            probe_wanted: 0,
            probe_sent: 0,
            probe_confirmed: 0,
            transfer: None,
        }
    }

    pub(super) fn is_established(&self) -> bool {
        self.phase == Phase::Broadcast
    }

    pub(super) fn is_tracking(&self, id: ServerId) -> bool {
        self.followers.contains_key(&id)
    }

    /// Whether follower `id` is synced (through NEWLEADER).
    pub(super) fn is_synced(&self, id: ServerId) -> bool {
        self.followers.get(&id).is_some_and(|t| t.stage == Stage::Synced)
    }

    pub(super) fn synced_followers(&self) -> Vec<ServerId> {
        self.followers.iter().filter(|(_, t)| t.stage == Stage::Synced).map(|(id, _)| *id).collect()
    }

    /// Every follower known to this leader: whether synced, and its acked zxid.
    pub(super) fn progress(&self) -> Vec<(ServerId, bool, Zxid)> {
        self.followers.iter().map(|(id, t)| (*id, t.stage == Stage::Synced, t.acked)).collect()
    }

    /// Followers that receive proposals: those being synced and those synced.
    pub(super) fn broadcast_targets(&self) -> Vec<ServerId> {
        self.followers.iter().filter(|(_, t)| t.gets_proposals()).map(|(id, _)| *id).collect()
    }

    pub(super) fn drop_follower(&mut self, id: ServerId) {
        if self.followers.remove(&id).is_some() {
            tracing::info!(follower = id, epoch = self.epoch, "dropped follower");
        }
    }
}

impl Zab {
    fn leader(&mut self) -> Option<&mut Leader> {
        match &mut self.state {
            State::Leading(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn leader_start(&mut self) {
        let (id, accepted) = (self.config.id, self.accepted_epoch);
        if let Some(l) = self.leader() {
            l.infos.insert(id, accepted);
        }
        self.maybe_choose_epoch();
    }

    fn maybe_choose_epoch(&mut self) {
        let floor = self.epoch_floor;
        let conf = self.log.configuration();
        let State::Leading(l) = &mut self.state else { return };
        // Observers' epochs raise the new one (so they can follow it) but do not make the quorum.
        if l.accepted_seq.is_some() || !conf.is_quorum(|id| l.infos.contains_key(&id)) {
            return;
        }
        let epoch = l.infos.values().copied().max().unwrap_or(0).max(floor) + 1;
        l.epoch = epoch;
        let seq = self.set_accepted_epoch(epoch);
        if let Some(l) = self.leader() {
            l.accepted_seq = Some(seq);
        }
        tracing::info!(id = self.config.id, epoch, "proposing new epoch");
        let status = Status { role: Role::Leading, epoch, leader: Some(self.config.id), serving: false };
        self.set_status(status);
        // LEADERINFO goes out once our acceptedEpoch is durable.
        self.leader_on_persisted();
    }

    fn epoch_durable(&self) -> bool {
        match &self.state {
            State::Leading(l) => l.accepted_seq.is_some_and(|s| s <= self.durable_seq),
            _ => false,
        }
    }

    pub(super) fn leader_on_persisted(&mut self) {
        let durable = self.durable_seq;
        let epoch_durable = self.epoch_durable();
        let id = self.config.id;
        let Some(l) = self.leader() else { return };
        if l.phase == Phase::Discovery && epoch_durable {
            let epoch = l.epoch;
            let waiting: Vec<ServerId> =
                l.followers.iter().filter(|(_, t)| t.stage == Stage::AwaitingAckEpoch).map(|(id, _)| *id).collect();
            // The leader acknowledges its own epoch.
            l.epoch_acks.insert(id);
            for to in waiting {
                self.send(to, Message::LeaderInfo { epoch });
            }
            self.maybe_finish_discovery();
        }
        let Some(l) = self.leader() else { return };
        if l.phase == Phase::Synchronization && l.current_seq.is_some_and(|s| s <= durable) {
            self.maybe_establish();
        }
        if self.leader().is_some_and(|l| l.phase == Phase::Broadcast) {
            self.try_commit();
            self.check_transfer();
        }
    }

    pub(super) fn leader_on_tick(&mut self) {
        let now = self.now;
        let sync_limit = self.config.sync_limit_ticks;
        let init_limit = self.config.init_limit_ticks;
        let (committed, id) = (self.committed, self.config.id);
        let conf = self.log.configuration();
        let State::Leading(l) = &mut self.state else { return };
        let limit = if l.phase == Phase::Broadcast { sync_limit } else { init_limit };
        let stale: Vec<ServerId> =
            l.followers.iter().filter(|(_, t)| now.saturating_sub(t.last_heard) > limit).map(|(id, _)| *id).collect();
        for id in stale {
            l.drop_follower(id);
        }
        let has_quorum = conf.is_quorum(|f| f == id || l.is_synced(f));
        if l.phase != Phase::Broadcast {
            if now.saturating_sub(l.phase_started) > init_limit {
                self.become_looking("no quorum synced within initLimit");
            } else {
                self.ping_followers(committed);
            }
            return;
        }
        if !has_quorum {
            self.become_looking("lost the quorum of synced followers");
            return;
        }
        self.ping_followers(committed);
        self.check_transfer();
        self.reconfiguration_on_commit();
    }

    fn ping_followers(&mut self, committed: Zxid) {
        let Some(l) = self.leader() else { return };
        let epoch = l.epoch;
        if epoch == 0 {
            return;
        }
        // Only followers that get our proposals: one we have started over (a
        // late FOLLOWERINFO) may believe itself synced, and pings would keep
        // it content while it falls behind for good. Without them it rejoins
        // after syncLimit.
        // The newest probe asked for, so that a follower a probe could not
        // reach at the end of a turn (see `end_turn_probes`) gets it here.
        let probe = l.probe_wanted;
        let targets = l.broadcast_targets();
        for &to in &targets {
            l.probe_sent_to(to, probe);
        }
        for to in targets {
            self.send(to, Message::Ping { epoch, committed, probe });
        }
    }

    /// Whether this peer leads, established (in broadcast).
    pub fn is_established_leader(&self) -> bool {
        matches!(&self.state, State::Leading(l) if l.is_established())
    }

    pub(super) fn leader_on_message(&mut self, from: ServerId, msg: Message) {
        let now = self.now;
        let Some(l) = self.leader() else { return };
        if let Message::FollowerInfo { accepted_epoch } = msg {
            self.on_follower_info(from, accepted_epoch);
            return;
        }
        if msg.epoch() != Some(l.epoch) || l.epoch == 0 {
            return;
        }
        let Some(tracked) = l.followers.get_mut(&from) else { return };
        tracked.last_heard = now;
        match msg {
            Message::AckEpoch { acked, current_epoch, last_zxid, summary, .. } => {
                self.on_ack_epoch(from, acked, current_epoch, last_zxid, summary)
            }
            Message::AckNewLeader { zxid, .. } => self.on_ack_new_leader(from, zxid),
            Message::Ack { zxid, .. } if tracked.stage == Stage::Synced && zxid > tracked.acked => {
                tracked.acked = zxid;
                self.try_commit();
                // The target's acknowledgement is what a transfer waits for.
                self.check_transfer();
            }
            // An echo counts for no probe not yet sent to its sender: one
            // claiming more is taken for what was sent, or a later probe
            // would be confirmed by it before it reached anyone.
            Message::FollowerPing { probe, .. } if tracked.stage == Stage::Synced && probe > tracked.echoed => {
                tracked.echoed = probe.min(tracked.probed);
                self.check_probes();
            }
            // A forward at or below the last one taken came late (or twice):
            // taking it would reorder the follower's requests. Its echo holds
            // either way: the follower sent it in this epoch.
            Message::Forward { seq, payload, probe, .. } if tracked.stage == Stage::Synced => {
                let echo = probe > tracked.echoed;
                if echo {
                    tracked.echoed = probe.min(tracked.probed);
                }
                if seq > tracked.forwarded {
                    tracked.forwarded = seq;
                    self.outbox.push(Action::Forwarded { from, payload });
                }
                if echo {
                    self.check_probes();
                }
            }
            _ => {}
        }
    }

    fn on_follower_info(&mut self, from: ServerId, accepted_epoch: Epoch) {
        let now = self.now;
        let epoch_durable = self.epoch_durable();
        let Some(l) = self.leader() else { return };
        if let Some(t) = l.followers.get(&from) {
            if t.stage == Stage::AwaitingAckEpoch {
                // A re-sent FOLLOWERINFO: answer again, keep the state.
                if epoch_durable {
                    let epoch = l.epoch;
                    self.send(from, Message::LeaderInfo { epoch });
                }
                return;
            }
        }
        // A new connection from this follower: start it over.
        l.followers.insert(
            from,
            Tracked {
                stage: Stage::AwaitingAckEpoch,
                acked: Zxid::ZERO,
                newleader: None,
                last_heard: now,
                position: None,
                forwarded: 0,
                echoed: 0,
                probed: 0,
            },
        );
        if l.accepted_seq.is_none() {
            l.infos.insert(from, accepted_epoch);
            self.maybe_choose_epoch();
        } else if accepted_epoch > l.epoch {
            // The follower promised a later epoch (to a would-be leader that
            // never won) and can never follow ours: without a new epoch above
            // its promise it would stay out for good, and the ensemble would
            // run one failure from unavailability. ZooKeeper leaves it out.
            let reason = format!(
                "follower {from} has accepted epoch {accepted_epoch}, above our epoch {}: \
                 starting an epoch above it so it can rejoin",
                l.epoch
            );
            self.epoch_floor = self.epoch_floor.max(accepted_epoch);
            self.become_looking(&reason);
        } else if epoch_durable {
            let epoch = l.epoch;
            self.send(from, Message::LeaderInfo { epoch });
        }
    }

    fn on_ack_epoch(
        &mut self,
        from: ServerId,
        acked: bool,
        current_epoch: Epoch,
        last_zxid: Zxid,
        summary: LogSummary,
    ) {
        let ours = (self.current_epoch, self.log.last_zxid());
        let voter = self.log.configuration().is_voter(from);
        let Some(l) = self.leader() else { return };
        let Some(t) = l.followers.get_mut(&from) else { return };
        if t.stage != Stage::AwaitingAckEpoch {
            return;
        }
        // An observer may hold proposals no voter kept (never committed): it
        // is truncated to our history, as a follower of a later epoch would be.
        if voter && l.phase == Phase::Discovery && (current_epoch, last_zxid) > ours {
            // The election picked us on stale information (ZooKeeper aborts too).
            let reason = format!("follower {from} is ahead of the leader");
            self.become_looking(&reason);
            return;
        }
        t.position = Some((last_zxid, summary));
        t.stage = Stage::AwaitingSync;
        if acked {
            l.epoch_acks.insert(from);
        }
        if l.phase == Phase::Discovery {
            self.maybe_finish_discovery();
        } else {
            self.sync_follower(from);
        }
    }

    fn maybe_finish_discovery(&mut self) {
        let epoch_durable = self.epoch_durable();
        let conf = self.log.configuration();
        let State::Leading(l) = &mut self.state else { return };
        if l.phase != Phase::Discovery || !epoch_durable || !conf.is_quorum(|id| l.epoch_acks.contains(&id)) {
            return;
        }
        let epoch = l.epoch;
        l.phase = Phase::Synchronization;
        let last = self.log.last_zxid();
        if let Some(l) = self.leader() {
            l.newleader_zxid = last;
        }
        let seq = self.set_current_epoch(epoch);
        let waiting: Vec<ServerId> = match self.leader() {
            Some(l) => {
                l.current_seq = Some(seq);
                l.followers.iter().filter(|(_, t)| t.stage == Stage::AwaitingSync).map(|(id, _)| *id).collect()
            }
            None => return,
        };
        tracing::info!(id = self.config.id, epoch, zxid = %last, "epoch quorum reached, synchronizing");
        for id in waiting {
            self.sync_follower(id);
        }
        self.maybe_establish();
    }

    /// Sends one follower what it misses (DIFF, TRUNC+DIFF or SNAP) and
    /// NEWLEADER, and starts forwarding proposals to it.
    fn sync_follower(&mut self, id: ServerId) {
        // Proposals made earlier in this turn must be in the log we diff from
        // and must not be sent twice.
        self.flush_batch();
        let committed = self.committed;
        let last = self.log.last_zxid();
        let batch = self.config.max_batch_entries.max(1);
        let Some(l) = self.leader() else { return };
        let epoch = l.epoch;
        let Some(t) = l.followers.get_mut(&id) else { return };
        let Some((follower_last, summary)) = t.position.take() else { return };
        t.newleader = Some(last);
        t.stage = Stage::Syncing;
        let plan = plan_sync(&self.log, &summary, follower_last);
        let from = match plan {
            SyncPlan::Snap => {
                tracing::info!(follower = id, epoch, zxid = %committed, "SNAP sync");
                let configuration = self.log.configuration_at(committed).clone();
                self.outbox.push(Action::SendSnapshot { to: id, epoch, zxid: committed, configuration });
                committed
            }
            SyncPlan::Diff { from, truncate } => {
                tracing::info!(follower = id, epoch, from = %from, truncate, "DIFF sync");
                let truncate_to = truncate.then_some(from);
                self.send(id, Message::Diff { epoch, truncate_to, from, committed });
                from
            }
        };
        // What lies beyond the held entries comes back from storage first.
        let ranges = self.log.stored_ranges_after(from);
        let from = match ranges.last() {
            Some(stored) => {
                let up_to = stored.last;
                self.outbox.push(Action::Io(Io::SendStored { to: id, epoch, after: from, ranges, batch }));
                up_to
            }
            None => from,
        };
        for msg in proposals(epoch, from, &self.log.range(from, last), batch) {
            self.send(id, msg);
        }
        let configuration = Some(self.log.configuration().clone());
        self.send(id, Message::NewLeader { epoch, zxid: last, configuration });
    }

    fn on_ack_new_leader(&mut self, from: ServerId, zxid: Zxid) {
        let committed = self.committed;
        let Some(l) = self.leader() else { return };
        let epoch = l.epoch;
        let phase = l.phase;
        let Some(t) = l.followers.get_mut(&from) else { return };
        if t.stage != Stage::Syncing {
            return;
        }
        if t.newleader != Some(zxid) {
            // It acknowledges a history other than the one we sent: counting
            // it could commit what it does not hold. Sync it again.
            tracing::warn!(follower = from, acked = %zxid, sent = ?t.newleader, "ACK of NEWLEADER for another history; dropping the follower");
            l.drop_follower(from);
            return;
        }
        t.stage = Stage::Synced;
        t.acked = zxid;
        match phase {
            Phase::Synchronization => self.maybe_establish(),
            Phase::Broadcast => {
                self.send(from, Message::UpToDate { epoch, committed });
                self.try_commit();
            }
            Phase::Discovery => {}
        }
    }

    fn maybe_establish(&mut self) {
        let durable = self.durable_seq;
        let id = self.config.id;
        let conf = self.log.configuration();
        let State::Leading(l) = &mut self.state else { return };
        if l.phase != Phase::Synchronization {
            return;
        }
        let self_acked = l.current_seq.is_some_and(|s| s <= durable);
        if !conf.is_quorum(|f| if f == id { self_acked } else { l.is_synced(f) }) {
            return;
        }
        l.phase = Phase::Broadcast;
        let epoch = l.epoch;
        let upto = l.newleader_zxid;
        let targets = l.synced_followers();
        tracing::info!(id, epoch, zxid = %upto, followers = ?targets, "leader established");
        // Our whole history is now on a quorum: commit it. (try_commit's point
        // is the quorum's durable zxid by construction; this one rests on the
        // followers' ACKs of NEWLEADER, so it is checked.)
        let durable = self.quorum_durable();
        assert!(upto <= durable, "committing {upto} past what a quorum holds durably ({durable})");
        self.commit_to(upto);
        let committed = self.committed;
        for to in targets {
            self.send(to, Message::UpToDate { epoch, committed });
        }
        self.set_status(Status { role: Role::Leading, epoch, leader: Some(id), serving: true });
        self.try_commit();
        self.reconfiguration_on_commit();
    }

    /// The highest zxid a quorum (this leader included) holds durably, as
    /// far as their acknowledgements tell; zero when no quorum is synced.
    pub(super) fn quorum_durable(&self) -> Zxid {
        let State::Leading(l) = &self.state else { return Zxid::ZERO };
        let id = self.config.id;
        let acked = |f: ServerId| match l.followers.get(&f) {
            _ if f == id => Some(self.durable_zxid),
            Some(t) if t.stage == Stage::Synced => Some(t.acked),
            _ => None,
        };
        self.log.configuration().quorum_point(acked).unwrap_or(Zxid::ZERO)
    }

    /// Commits the highest zxid of this epoch that a quorum holds durably.
    fn try_commit(&mut self) {
        let point = self.quorum_durable();
        let Some(l) = self.leader() else { return };
        if l.phase != Phase::Broadcast {
            return;
        }
        let epoch = l.epoch;
        if point <= self.committed || point.epoch() != epoch {
            return;
        }
        self.commit_to(point);
        let committed = self.committed;
        let targets = self.leader().map(|l| l.broadcast_targets()).unwrap_or_default();
        for to in targets {
            self.send(to, Message::Commit { epoch, zxid: committed });
        }
        self.reconfiguration_on_commit();
    }
}
