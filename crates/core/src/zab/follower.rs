//! The follower's side of discovery, synchronization and broadcast.
//!
//! A follower promises the leader's new epoch only after making it durable,
//! takes the leader's history (truncating what the leader never had, or
//! replacing everything with a snapshot), and acknowledges NEWLEADER only
//! once every synced entry and the new currentEpoch are durable
//! (ZOOKEEPER-1282, -3911, -4643, -4646). It rejects a proposal that does not
//! continue its log (ZOOKEEPER-4925) and never truncates a committed entry
//! (ZOOKEEPER-1154/1156): either would mean it lost part of the stream, and it
//! goes back to election to be synced afresh.

use super::log::Log;
use super::StorageOp;
use super::{Action, Message, Role, State, Status, Zab};
use crate::ids::{Epoch, ServerId, Zxid};
use crate::members::Configuration;
use crate::txn::Entry;
use bytes::Bytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// FOLLOWERINFO sent; waiting for LEADERINFO.
    Discovery,
    /// ACKEPOCH sent (or about to be); waiting for DIFF or SNAP.
    AwaitingSync,
    /// Receiving the leader's history.
    Syncing,
    /// NEWLEADER acknowledged (or about to be); waiting for UPTODATE.
    AwaitingUpToDate,
    /// Serving.
    Broadcast,
}

/// The state of a following replica.
pub(super) struct Follower {
    pub(super) leader: ServerId,
    /// The leader's new epoch, once LEADERINFO arrived.
    pub(super) epoch: Epoch,
    stage: Stage,
    last_heard: u64,
    /// When the current stage of discovery or synchronization began: each
    /// must end within initLimit of it, however often the leader pings (as
    /// ZooKeeper's learner gives each read of the sync initLimit). The
    /// stages are few, so the whole stays bounded.
    since: u64,
    /// The leader's commit point as last heard.
    leader_committed: Zxid,
    /// A SNAP sync in progress: the snapshot and the entries after it, held
    /// until NEWLEADER so the switch to the leader's history is all or nothing.
    snapshot: Option<PendingSnapshot>,
    /// The highest leadership probe this leader sent us (echoed in pings).
    pub(super) probe: u64,
    /// The highest probe echoed to it (in a PING or on a REQUEST).
    pub(super) echoed: u64,
}

/// A leader's snapshot and the entries that follow it, not yet installed.
struct PendingSnapshot {
    zxid: Zxid,
    chunks: Vec<Bytes>,
    /// The configuration at `zxid` (None from a leader that did not send one).
    configuration: Option<Configuration>,
    entries: Vec<Entry>,
}

impl PendingSnapshot {
    fn last_zxid(&self) -> Zxid {
        self.entries.last().map_or(self.zxid, |e| e.zxid)
    }
}

impl Follower {
    /// Whether a probe received is not yet echoed.
    pub(super) fn echo_due(&self) -> bool {
        self.probe > self.echoed && self.stage != Stage::Discovery
    }

    pub(super) fn new(leader: ServerId, now: u64) -> Follower {
        Follower {
            leader,
            epoch: 0,
            stage: Stage::Discovery,
            last_heard: now,
            since: now,
            leader_committed: Zxid::ZERO,
            snapshot: None,
            probe: 0,
            echoed: 0,
        }
    }
}

impl Zab {
    pub(super) fn follower(&mut self) -> Option<&mut Follower> {
        match &mut self.state {
            State::Following(f) => Some(f),
            _ => None,
        }
    }

    pub(super) fn follower_start(&mut self) {
        let accepted_epoch = self.accepted_epoch;
        if let Some(f) = self.follower() {
            let leader = f.leader;
            self.send(leader, Message::FollowerInfo { accepted_epoch });
        }
    }

    /// Our leader announced that it leads. If we are still waiting for its
    /// LEADERINFO, our FOLLOWERINFO may have reached it while it was still
    /// looking (a leader ignores those): present ourselves again now rather
    /// than at our next tick. A duplicate is harmless: the leader answers a
    /// re-sent FOLLOWERINFO again and keeps its state.
    pub(super) fn follower_on_leader_announced(&mut self, from: ServerId) {
        let accepted_epoch = self.accepted_epoch;
        let Some(f) = self.follower() else { return };
        if f.leader == from && f.stage == Stage::Discovery {
            self.send(from, Message::FollowerInfo { accepted_epoch });
        }
    }

    /// In discovery, the member we chose as leader says, in this election
    /// round or a later one, that it follows another: it will never answer
    /// our FOLLOWERINFO (ZooKeeper's learner would find its port closed), so
    /// look again now rather than wait out initLimit. Without this a member
    /// that picked a loser in a close race could keep picking it each round
    /// while the real leader's quorum has no room for a slow member.
    pub(super) fn follower_on_leader_following(&mut self, from: ServerId, round: u64, leader: ServerId) {
        let our_round = self.round;
        let Some(f) = self.follower() else { return };
        if f.leader == from && f.stage == Stage::Discovery && leader != from && round >= our_round {
            self.become_looking("the member we chose as leader follows another");
        }
    }

    pub(super) fn follower_on_tick(&mut self) {
        let now = self.now;
        let (sync_limit, init_limit) = (self.config.sync_limit_ticks, self.config.init_limit_ticks);
        let accepted_epoch = self.accepted_epoch;
        let Some(f) = self.follower() else { return };
        let syncing_too_long = f.stage != Stage::Broadcast && now.saturating_sub(f.since) > init_limit;
        let limit = if f.stage == Stage::Broadcast { sync_limit } else { init_limit };
        if syncing_too_long || now.saturating_sub(f.last_heard) > limit {
            let reason = if f.stage == Stage::Broadcast {
                "no word from the leader within syncLimit"
            } else {
                "synchronization did not finish within initLimit"
            };
            self.become_looking(reason);
            return;
        }
        let (leader, epoch, stage, probe) = (f.leader, f.epoch, f.stage, f.probe);
        if stage != Stage::Discovery {
            f.echoed = probe;
        }
        match stage {
            // The leader may not have been ready for us yet: present ourselves again.
            Stage::Discovery => self.send(leader, Message::FollowerInfo { accepted_epoch }),
            _ => self.send(leader, Message::FollowerPing { epoch, probe }),
        }
    }

    pub(super) fn follower_on_message(&mut self, from: ServerId, msg: Message) {
        let Some(f) = self.follower() else { return };
        let (leader, stage) = (f.leader, f.stage);
        self.follower_take_message(from, msg);
        let now = self.now;
        if let Some(f) = self.follower().filter(|f| f.leader == leader && f.stage != stage) {
            f.since = now;
        }
    }

    fn follower_take_message(&mut self, from: ServerId, msg: Message) {
        let now = self.now;
        let Some(f) = self.follower() else { return };
        if from != f.leader || !msg.is_from_leader() {
            return;
        }
        if let Message::LeaderInfo { epoch } = msg {
            if f.stage == Stage::Discovery {
                f.last_heard = now;
                self.on_leader_info(epoch);
            }
            return;
        }
        if f.stage == Stage::Discovery || msg.epoch() != Some(f.epoch) {
            return;
        }
        f.last_heard = now;
        match msg {
            Message::Diff { truncate_to, from, committed, .. } => self.on_diff(truncate_to, from, committed),
            Message::Snap { zxid, chunks, configuration, .. } => self.on_snap(zxid, chunks, configuration),
            Message::Proposal { prev, entries, .. } => self.on_proposal(prev, entries),
            Message::NewLeader { zxid, configuration, .. } => self.on_new_leader(zxid, configuration),
            Message::UpToDate { committed, .. } => self.on_up_to_date(committed),
            Message::Commit { zxid, .. } => self.on_leader_commit(zxid),
            Message::Ping { committed, probe, .. } => {
                // A new probe: the leader waits on a quorum of echoes to answer a
                // sync, so it is echoed at the end of this turn (`end_turn`)
                // rather than at our next tick.
                f.probe = f.probe.max(probe);
                self.on_leader_commit(committed);
            }
            Message::Reply { payload, probe, .. } => {
                f.probe = f.probe.max(probe);
                self.on_reply(payload)
            }
            Message::StepDown { to, .. } => {
                if to == self.config.id {
                    self.become_looking_nominating(to, "the leader handed leadership to us");
                } else {
                    self.become_looking("the leader stepped down for another member");
                }
            }
            _ => {}
        }
    }

    fn on_leader_info(&mut self, epoch: Epoch) {
        let (current_epoch, last_zxid, summary) = (self.current_epoch, self.log.last_zxid(), self.log.summary());
        if epoch < self.accepted_epoch {
            let reason = format!("leader proposed epoch {epoch} below our accepted epoch {}", self.accepted_epoch);
            self.become_looking(&reason);
            return;
        }
        let acked = epoch > self.accepted_epoch;
        let Some(f) = self.follower() else { return };
        f.epoch = epoch;
        f.stage = Stage::AwaitingSync;
        let leader = f.leader;
        let reply = Message::AckEpoch { epoch, acked, current_epoch, last_zxid, summary };
        if acked {
            // Promise the epoch durably before saying so.
            let seq = self.set_accepted_epoch(epoch);
            self.after_durable(seq, leader, reply);
        } else {
            self.send(leader, reply);
        }
    }

    fn on_diff(&mut self, truncate_to: Option<Zxid>, from: Zxid, committed: Zxid) {
        let Some(f) = self.follower() else { return };
        if f.stage != Stage::AwaitingSync {
            return;
        }
        f.stage = Stage::Syncing;
        f.leader_committed = f.leader_committed.max(committed);
        if let Some(point) = truncate_to {
            if point < self.committed {
                let reason =
                    format!("leader asked to truncate to {point:?}, below our commit point {:?}", self.committed);
                self.become_looking(&reason);
                return;
            }
            if self.log.truncate_after(point) > 0 {
                self.durable_zxid = self.durable_zxid.min(point);
                self.appends_in_flight.retain(|(_, z)| *z <= point);
                self.persist(StorageOp::TruncateAfter(point));
            }
        }
        if self.log.last_zxid() != from {
            // The leader planned from a log we no longer have (a message of an
            // earlier attempt, or one lost): appending would graft its history
            // onto entries it never had.
            let reason = format!("DIFF continues from {from:?} but our log ends at {:?}", self.log.last_zxid());
            self.become_looking(&reason);
        }
    }

    fn on_snap(&mut self, zxid: Zxid, chunks: Vec<Bytes>, configuration: Option<Configuration>) {
        let Some(f) = self.follower() else { return };
        if f.stage != Stage::AwaitingSync {
            return;
        }
        f.stage = Stage::Syncing;
        f.leader_committed = f.leader_committed.max(zxid);
        // Nothing changes yet, in memory or on disk: if this sync breaks off,
        // we must still hold every entry we had, committed ones among them.
        f.snapshot = Some(PendingSnapshot { zxid, chunks, configuration, entries: Vec::new() });
    }

    /// Entries that follow a pending snapshot are held with it.
    fn hold_after_snapshot(&mut self, prev: Zxid, entries: Vec<Entry>) {
        let Some(f) = self.follower() else { return };
        let Some(pending) = f.snapshot.as_mut() else { return };
        if let Some(reason) = gap_before(prev, &entries, pending.last_zxid()) {
            self.become_looking(&reason);
            return;
        }
        for entry in entries {
            let last = pending.last_zxid();
            if entry.zxid <= last {
                continue;
            }
            if !Log::follows(last, entry.zxid) {
                let reason =
                    format!("lost part of the leader's stream: entry {:?} does not follow {last:?}", entry.zxid);
                self.become_looking(&reason);
                return;
            }
            pending.entries.push(entry);
        }
    }

    /// At NEWLEADER: replaces tree, log and storage with the snapshot and the
    /// entries after it, in one storage batch.
    fn install_pending_snapshot(&mut self, pending: PendingSnapshot) {
        let PendingSnapshot { zxid, chunks, configuration, entries } = pending;
        let configuration = configuration.unwrap_or_else(|| self.log.configuration().clone());
        self.log.reset(zxid, configuration);
        self.committed = zxid;
        self.durable_zxid = zxid;
        self.appends_in_flight.clear();
        self.outbox.push(Action::InstallSnapshot { zxid, chunks: chunks.clone() });
        self.persist(StorageOp::InstallSnapshot { zxid, chunks });
        for entry in &entries {
            if let Err(e) = self.log.append(entry.clone()) {
                // Checked as they arrived; a leader that still breaks the
                // order is refused, never a reason to abort.
                self.become_looking(&format!("the leader's entries after its snapshot do not follow it: {e}"));
                return;
            }
        }
        if !entries.is_empty() {
            self.persist(StorageOp::Append(entries));
        }
    }

    fn on_proposal(&mut self, prev: Zxid, entries: Vec<Entry>) {
        let Some(f) = self.follower() else { return };
        if f.stage == Stage::AwaitingSync {
            self.become_looking("a proposal arrived before DIFF or SNAP");
            return;
        }
        if f.snapshot.is_some() {
            self.hold_after_snapshot(prev, entries);
            return;
        }
        let (leader, epoch, stage) = (f.leader, f.epoch, f.stage);
        if let Some(reason) = gap_before(prev, &entries, self.log.last_zxid()) {
            self.become_looking(&reason);
            return;
        }
        let mut fresh = Vec::with_capacity(entries.len());
        for entry in entries {
            if entry.zxid <= self.log.last_zxid() {
                // A duplicate is harmless if we already hold exactly it.
                if self.log.has(entry.zxid) || entry.zxid <= self.log.base() {
                    continue;
                }
                self.become_looking("a proposal conflicts with our log");
                return;
            }
            if let Err(e) = self.log.append(entry.clone()) {
                let reason = format!("lost part of the leader's stream: {e}");
                self.become_looking(&reason);
                return;
            }
            fresh.push(entry);
        }
        let Some(last) = fresh.last().map(|e| e.zxid) else { return };
        let seq = self.persist(StorageOp::Append(fresh));
        // During synchronization the whole history is acknowledged by ACK(NEWLEADER).
        if matches!(stage, Stage::AwaitingUpToDate | Stage::Broadcast) {
            self.after_durable(seq, leader, Message::Ack { epoch, zxid: last });
        }
        self.apply_leader_commits();
    }

    fn on_new_leader(&mut self, zxid: Zxid, configuration: Option<Configuration>) {
        let Some(f) = self.follower() else { return };
        match f.stage {
            Stage::Syncing => {}
            Stage::AwaitingSync => {
                // The DIFF or SNAP before it was lost: this sync cannot complete.
                self.become_looking("NEWLEADER arrived before the history it closes");
                return;
            }
            _ => return,
        }
        let (leader, epoch) = (f.leader, f.epoch);
        let pending = f.snapshot.take();
        let last = pending.as_ref().map_or(self.log.last_zxid(), PendingSnapshot::last_zxid);
        if last != zxid {
            let reason = format!("NEWLEADER at {zxid:?} but our history ends at {last:?}");
            self.become_looking(&reason);
            return;
        }
        if let Some(pending) = pending {
            self.install_pending_snapshot(pending);
        }
        // Our history is now the leader's: so is its configuration, even when
        // ours came from another configuration file (a member joining, or one
        // restarted with an old file) and no reconfiguration entry says so.
        if let Some(configuration) = configuration {
            if self.log.adopt_configuration(configuration.clone()) {
                tracing::info!(id = self.config.id, version = %configuration.version, "took the leader's configuration");
                self.outbox.push(Action::ConfigurationAdopted(configuration));
            }
        }
        if let Some(f) = self.follower() {
            f.stage = Stage::AwaitingUpToDate;
        }
        let seq = self.set_current_epoch(epoch);
        self.after_durable(seq, leader, Message::AckNewLeader { epoch, zxid });
    }

    fn on_up_to_date(&mut self, committed: Zxid) {
        let id = self.config.id;
        let Some(f) = self.follower() else { return };
        match f.stage {
            Stage::AwaitingUpToDate => {}
            Stage::AwaitingSync | Stage::Syncing => {
                self.become_looking("UPTODATE arrived before NEWLEADER");
                return;
            }
            _ => return,
        }
        f.stage = Stage::Broadcast;
        f.leader_committed = f.leader_committed.max(committed);
        let (leader, epoch) = (f.leader, f.epoch);
        tracing::info!(id, leader, epoch, zxid = %self.log.last_zxid(), "synced with leader, serving");
        self.apply_leader_commits();
        self.set_status(Status { role: Role::Following, epoch, leader: Some(leader), serving: true });
    }

    /// End of the host's turn: a probe received and not yet echoed rides on
    /// the last REQUEST this turn sends the leader (sent after it arrived, in
    /// its epoch), or else goes back in a PING of its own.
    pub(super) fn end_turn_echo(&mut self, sends: &mut [(ServerId, &mut Message)]) {
        let Some(f) = self.follower().filter(|f| f.echo_due()) else { return };
        let (leader, epoch, probe) = (f.leader, f.epoch, f.probe);
        f.echoed = probe;
        let request = sends
            .iter_mut()
            .rev()
            .filter(|(to, msg)| *to == leader && msg.epoch() == Some(epoch))
            .find_map(|(_, msg)| msg.probe_mut());
        match request {
            Some(echo) => *echo = probe,
            None => self.send(leader, Message::FollowerPing { epoch, probe }),
        }
    }

    fn on_leader_commit(&mut self, zxid: Zxid) {
        let Some(f) = self.follower() else { return };
        f.leader_committed = f.leader_committed.max(zxid);
        self.apply_leader_commits();
    }

    fn apply_leader_commits(&mut self) {
        let Some(f) = self.follower() else { return };
        if !matches!(f.stage, Stage::AwaitingUpToDate | Stage::Broadcast) {
            return;
        }
        let point = f.leader_committed;
        self.commit_to(point);
    }

    fn on_reply(&mut self, payload: Bytes) {
        self.outbox.push(Action::Replied { payload });
    }
}

/// Why entries the leader says follow `prev` cannot continue a log ending at
/// `last`: they are new to it, but `prev` is not its end (the messages
/// between were lost). A new epoch's first entry follows any zxid of an
/// older epoch, so this is the only check that sees a lost epoch end.
fn gap_before(prev: Zxid, entries: &[Entry], last: Zxid) -> Option<String> {
    let first = entries.first()?.zxid;
    let unchecked = prev == Zxid::ZERO;
    (!unchecked && first > last && prev != last).then(|| {
        format!("lost part of the leader's stream: entry {first:?} follows {prev:?}, our log ends at {last:?}")
    })
}
