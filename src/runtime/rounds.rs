//! The timing of a follower's read-index rounds, for the metrics.

/// Times a follower's (or observer's) read-index rounds from the end of the
/// turn that asks one to the end of the turn that takes its answer: the
/// replica keeps no clock, so it reports only which round is out and how
/// many were answered. Good to a turn, which is short unless the member is
/// swamped.
#[derive(Debug, Default)]
pub(super) struct RoundTimer {
    /// The round out, and since when.
    out: Option<(u64, std::time::Instant)>,
    /// Rounds answered when last looked.
    answered: u64,
}

impl RoundTimer {
    /// Looks at the replica's rounds after a turn; returns how long the
    /// round that was out took, if the leader answered it this turn.
    pub(super) fn after_turn(&mut self, (in_flight, answered): (Option<u64>, u64)) -> Option<std::time::Duration> {
        let mut took = None;
        if let Some((number, since)) = self.out {
            if in_flight != Some(number) {
                // Gone: answered, or dropped as the member stopped following
                // (then no answer came, and it is not timed).
                if answered > self.answered {
                    took = Some(since.elapsed());
                }
                self.out = None;
            }
        }
        if self.out.is_none() {
            self.out = in_flight.map(|number| (number, std::time::Instant::now()));
        }
        self.answered = answered;
        took
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_timed_when_answered_and_not_when_dropped() {
        let mut timer = RoundTimer::default();
        assert_eq!(timer.after_turn((None, 0)), None, "no round yet");
        assert_eq!(timer.after_turn((Some(1), 0)), None, "round 1 asked");
        assert_eq!(timer.after_turn((Some(1), 0)), None, "still out");
        // Answered, and the next asked in the same turn: round 1 is timed, 2 starts.
        assert!(timer.after_turn((Some(2), 1)).is_some(), "round 1 answered");
        // The member stops following: round 2 goes with no answer, untimed.
        assert_eq!(timer.after_turn((None, 1)), None, "round 2 dropped, not answered");
        assert_eq!(timer.after_turn((Some(3), 1)), None, "round 3 asked");
        assert!(timer.after_turn((None, 2)).is_some(), "round 3 answered");
    }
}
