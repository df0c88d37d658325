//! Which server to try next and how long to wait: round robin over the
//! connect string, every server once per round without delay (fast failover),
//! then a capped, jittered exponential backoff between rounds, and never past
//! a deadline (the session timeout after a disconnect, the connect timeout at
//! first). Pure: the caller passes the time and the randomness.

use std::time::{Duration, Instant};

/// The next step of a reconnect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Try server `host` (an index into the connect string) for at most `timeout`.
    Attempt {
        /// Index of the server.
        host: usize,
        /// Time allowed for this attempt.
        timeout: Duration,
    },
    /// The deadline passed: give up (the session is considered expired).
    GiveUp,
}

/// Backoff bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Wait after the first failed round.
    pub min: Duration,
    /// Largest wait between rounds.
    pub max: Duration,
}

/// One reconnect effort.
#[derive(Clone, Debug)]
pub(crate) struct ReconnectPlan {
    hosts: usize,
    next: usize,
    tried_in_round: usize,
    rounds_failed: u32,
    deadline: Instant,
    attempt_timeout: Duration,
    backoff: Backoff,
}

impl ReconnectPlan {
    /// Starts at server `start`; gives up at `deadline`.
    pub(crate) fn new(
        hosts: usize,
        start: usize,
        deadline: Instant,
        attempt_timeout: Duration,
        backoff: Backoff,
    ) -> ReconnectPlan {
        let hosts = hosts.max(1);
        ReconnectPlan {
            hosts,
            next: start % hosts,
            tried_in_round: 0,
            rounds_failed: 0,
            deadline,
            attempt_timeout,
            backoff,
        }
    }

    /// What to do at `now`.
    pub(crate) fn next(&mut self, now: Instant) -> Step {
        if now >= self.deadline {
            return Step::GiveUp;
        }
        let host = self.next;
        self.next = (self.next + 1) % self.hosts;
        let timeout = self.attempt_timeout.min(self.deadline - now);
        Step::Attempt { host, timeout }
    }

    /// An attempt failed at `now`: how long to wait before the next one.
    /// `jitter` in `[0, 1)` spreads clients apart (the wait is 50–100 % of the backoff).
    pub(crate) fn failed(&mut self, now: Instant, jitter: f64) -> Duration {
        self.tried_in_round += 1;
        if self.tried_in_round < self.hosts {
            return Duration::ZERO;
        }
        self.tried_in_round = 0;
        self.rounds_failed = self.rounds_failed.saturating_add(1);
        let exponent = self.rounds_failed.saturating_sub(1).min(16);
        let base = self.backoff.min.saturating_mul(1u32 << exponent).min(self.backoff.max);
        let wait = base.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0));
        wait.min(self.deadline.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Backoff = Backoff { min: Duration::from_millis(100), max: Duration::from_millis(400) };

    #[test]
    fn tries_every_server_once_per_round_then_backs_off_exponentially_up_to_the_cap() {
        let t0 = Instant::now();
        let mut plan = ReconnectPlan::new(3, 1, t0 + Duration::from_secs(60), Duration::from_secs(2), BACKOFF);
        let mut hosts = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..12 {
            match plan.next(t0) {
                Step::Attempt { host, timeout } => {
                    assert_eq!(timeout, Duration::from_secs(2));
                    hosts.push(host);
                }
                Step::GiveUp => panic!("deadline not reached"),
            }
            waits.push(plan.failed(t0, 1.0).as_millis());
        }
        assert_eq!(hosts, vec![1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(waits, vec![0, 0, 100, 0, 0, 200, 0, 0, 400, 0, 0, 400]);
    }

    #[test]
    fn jitter_halves_at_most() {
        let t0 = Instant::now();
        let mut plan = ReconnectPlan::new(1, 0, t0 + Duration::from_secs(60), Duration::from_secs(1), BACKOFF);
        assert!(matches!(plan.next(t0), Step::Attempt { host: 0, .. }));
        assert_eq!(plan.failed(t0, 0.0), Duration::from_millis(50));
    }

    #[test]
    fn never_waits_or_tries_past_the_deadline() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(150);
        let mut plan = ReconnectPlan::new(1, 0, deadline, Duration::from_secs(1), BACKOFF);
        assert_eq!(plan.next(t0), Step::Attempt { host: 0, timeout: Duration::from_millis(150) });
        assert_eq!(plan.failed(t0 + Duration::from_millis(120), 1.0), Duration::from_millis(30));
        assert_eq!(plan.next(deadline), Step::GiveUp);
    }

    #[test]
    fn an_empty_host_list_is_treated_as_one_server() {
        let t0 = Instant::now();
        let mut plan = ReconnectPlan::new(0, 5, t0 + Duration::from_secs(1), Duration::from_secs(1), BACKOFF);
        assert!(matches!(plan.next(t0), Step::Attempt { host: 0, .. }));
    }
}
