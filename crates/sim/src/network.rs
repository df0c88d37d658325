//! The simulated network between replicas: every message waits a random
//! number of steps (so messages reorder), may be lost or duplicated, and
//! links can be cut by partitions that heal later. All randomness comes from
//! the simulation's seeded generator, so a seed replays exactly.

use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::zab::Message;

/// Fault rates for one phase of a run.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// Chance a message is lost.
    pub loss: f64,
    /// Chance a message is delivered twice.
    pub duplicate: f64,
    /// Most steps a message may wait.
    pub max_delay: u64,
}

impl Faults {
    /// A perfect network: no loss, no duplicates, delay of one step (FIFO).
    pub fn none() -> Faults {
        Faults { loss: 0.0, duplicate: 0.0, max_delay: 1 }
    }
}

/// A message in flight.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// Sender.
    pub from: ServerId,
    /// Receiver.
    pub to: ServerId,
    /// The message.
    pub msg: Message,
}

/// Messages in flight, ordered by delivery step then send order.
#[derive(Default)]
pub struct Network {
    queue: BTreeMap<(u64, u64), InFlight>,
    sent: u64,
    /// Cut links, both directions listed.
    cut: BTreeSet<(ServerId, ServerId)>,
    /// Per link, the step before which nothing sent later may arrive: set by
    /// messages on slow links, so a link that slows down or speeds up again
    /// keeps its order (TCP's) rather than letting fast messages overtake.
    floor: BTreeMap<(ServerId, ServerId), u64>,
    /// Counters.
    pub delivered: u64,
    /// Counters.
    pub dropped: u64,
}

impl Network {
    /// Sends `msg` at step `now`.
    pub fn send(&mut self, rng: &mut StdRng, faults: Faults, now: u64, from: ServerId, to: ServerId, msg: Message) {
        self.send_slowed(rng, faults, None, now, from, to, msg);
    }

    /// Sends `msg` at step `now`; on a slow link (`slow`: how many times
    /// longer it takes) the delay is stretched and the link keeps its order.
    #[allow(clippy::too_many_arguments)]
    pub fn send_slowed(
        &mut self,
        rng: &mut StdRng,
        faults: Faults,
        slow: Option<u64>,
        now: u64,
        from: ServerId,
        to: ServerId,
        msg: Message,
    ) {
        if self.cut.contains(&(from, to)) || rng.random_bool(faults.loss) {
            self.dropped += 1;
            return;
        }
        let copies = if rng.random_bool(faults.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = if faults.max_delay <= 1 { 1 } else { rng.random_range(1..=faults.max_delay) };
            let mut due = now + delay * slow.unwrap_or(1);
            if let Some(&floor) = self.floor.get(&(from, to)) {
                due = due.max(floor);
            }
            if slow.is_some() {
                self.floor.insert((from, to), due);
            }
            self.sent += 1;
            self.queue.insert((due, self.sent), InFlight { from, to, msg: msg.clone() });
        }
    }

    /// Takes every message due by step `now`.
    pub fn due(&mut self, now: u64) -> Vec<InFlight> {
        let later = self.queue.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut self.queue, later);
        let out: Vec<InFlight> = due.into_values().filter(|m| !self.cut.contains(&(m.from, m.to))).collect();
        self.delivered += out.len() as u64;
        out
    }

    /// Puts a due message back, to arrive at step `due` (its receiver is
    /// paused). Messages put back keep their order among themselves.
    pub fn delay(&mut self, msg: InFlight, due: u64) {
        self.sent += 1;
        self.queue.insert((due, self.sent), msg);
    }

    /// Cuts every link between the two groups.
    pub fn partition(&mut self, side: &[ServerId], others: &[ServerId]) {
        for &a in side {
            for &b in others {
                self.cut.insert((a, b));
                self.cut.insert((b, a));
            }
        }
    }

    /// Whether any link is cut.
    pub fn is_partitioned(&self) -> bool {
        !self.cut.is_empty()
    }

    /// Whether the link from `a` to `b` is cut.
    pub fn is_cut(&self, a: ServerId, b: ServerId) -> bool {
        self.cut.contains(&(a, b))
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Drops everything in flight to or from `node` (it crashed: its
    /// connections are gone).
    pub fn forget(&mut self, node: ServerId) {
        self.queue.retain(|_, m| m.from != node && m.to != node);
    }
}
