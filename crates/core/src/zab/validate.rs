//! Zab's own invariants, checked on its state where they could first
//! break: after every input in debug builds (see `Replica::handle`) and
//! in every simulated schedule. Each check is O(1) or bounded by what is
//! in flight, so a check per input costs little beside the input.
//!
//! These are this member's promises about itself. What a peer sends is
//! never asserted: a peer that breaks the protocol is refused where its
//! message is read.

use super::{Role, State, Zab};

/// An invariant of this member's state that does not hold: a bug here,
/// never a peer's fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invariant broken: {what} ({detail})")]
pub struct Broken {
    /// The invariant, as a rule.
    pub what: &'static str,
    /// The values that break it.
    pub detail: String,
}

/// `Err(Broken)` unless `holds`.
pub(crate) fn check(holds: bool, what: &'static str, detail: impl FnOnce() -> String) -> Result<(), Broken> {
    if holds {
        Ok(())
    } else {
        Err(Broken { what, detail: detail() })
    }
}

impl Zab {
    /// Checks Zab's invariants on its current state.
    pub fn validate(&self) -> Result<(), Broken> {
        let (accepted, current) = (self.accepted_epoch, self.current_epoch);
        check(current <= accepted, "currentEpoch never passes acceptedEpoch", || {
            format!("current {current}, accepted {accepted}")
        })?;
        let (base, last) = (self.log.base(), self.log.last_zxid());
        check(base <= last, "the log ends at or after its base (the snapshot)", || {
            format!("base {base}, last {last}")
        })?;
        let committed = self.committed;
        check(committed <= last, "only what the log holds is committed", || {
            format!("committed {committed}, last logged {last}")
        })?;
        let durable = self.durable_zxid;
        check(durable <= last, "only what the log holds is durable", || {
            format!("durable {durable}, last logged {last}")
        })?;
        let (durable_seq, next_seq) = (self.durable_seq, self.next_seq);
        check(durable_seq < next_seq, "storage answers only operations it was given", || {
            format!("durable seq {durable_seq}, next seq {next_seq}")
        })?;
        let mut previous = (durable_seq, durable);
        for &(seq, zxid) in &self.appends_in_flight {
            check(
                seq > previous.0 && seq < next_seq,
                "appends in flight are in sequence, after the durable one",
                || format!("seq {seq} after {} (next {next_seq})", previous.0),
            )?;
            check(zxid >= previous.1 && zxid <= last, "appends in flight are in log order, inside the log", || {
                format!("zxid {zxid} after {}, last logged {last}", previous.1)
            })?;
            previous = (seq, zxid);
        }
        if let Some(&(seq, _, _)) = self.deferred.back() {
            check(seq < next_seq, "messages wait only for operations storage was given", || {
                format!("waits for seq {seq}, next seq {next_seq}")
            })?;
        }
        let role = self.status.role;
        let state_role = match &self.state {
            State::Looking(_) => Role::Looking,
            State::Following(_) => Role::Following,
            State::Leading(_) => Role::Leading,
        };
        check(role == state_role, "the status names the role the state machine is in", || {
            format!("status {role:?}, state {state_role:?}")
        })?;
        if self.status.serving {
            let epoch = self.status.epoch;
            check(role != Role::Looking, "a looking member does not serve", || format!("serving in epoch {epoch}"))?;
            check(epoch == current, "a member serves in its currentEpoch", || {
                format!("serving in {epoch}, current {current}")
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Durable, Input};
    use super::*;
    use crate::ids::Zxid;

    fn lone() -> Zab {
        Zab::new(Config::new(1, vec![1]), Durable::default())
    }

    #[test]
    fn a_member_that_starts_and_leads_alone_holds_every_invariant() {
        let mut zab = lone();
        assert_eq!(zab.validate(), Ok(()));
        // Ticks until it leads, answering every storage operation at once.
        for _ in 0..100 {
            zab.handle(Input::Tick);
            zab.validate().expect("after a tick");
            let seqs: Vec<u64> = zab
                .take_actions()
                .into_iter()
                .filter_map(|a| match a {
                    super::super::Action::Io(super::super::Io::Persist { seq, .. }) => Some(seq),
                    _ => None,
                })
                .collect();
            for seq in seqs {
                zab.handle(Input::Persisted { seq });
                zab.validate().expect("after a durable notice");
            }
        }
        assert!(zab.status().serving, "a lone member leads");
    }

    #[test]
    fn an_epoch_past_the_accepted_one_is_caught() {
        let mut zab = lone();
        zab.current_epoch = zab.accepted_epoch + 1;
        let broken = zab.validate().expect_err("caught");
        assert_eq!(broken.what, "currentEpoch never passes acceptedEpoch");
    }

    #[test]
    fn a_commit_past_the_log_is_caught() {
        let mut zab = lone();
        zab.committed = Zxid::new(1, 5);
        assert_eq!(zab.validate().expect_err("caught").what, "only what the log holds is committed");
    }

    #[test]
    fn an_answer_storage_was_never_asked_for_is_caught() {
        let mut zab = lone();
        zab.durable_seq = zab.next_seq;
        assert_eq!(zab.validate().expect_err("caught").what, "storage answers only operations it was given");
    }

    #[test]
    fn a_durable_point_past_the_log_is_caught() {
        let mut zab = lone();
        zab.durable_zxid = Zxid::new(1, 5);
        assert_eq!(zab.validate().expect_err("caught").what, "only what the log holds is durable");
    }

    #[test]
    fn an_append_in_flight_out_of_sequence_is_caught() {
        let mut zab = lone();
        zab.appends_in_flight.push_back((zab.durable_seq, Zxid::ZERO));
        assert_eq!(
            zab.validate().expect_err("caught").what,
            "appends in flight are in sequence, after the durable one"
        );
    }

    #[test]
    fn an_append_in_flight_past_the_log_is_caught() {
        let mut zab = lone();
        let seq = zab.next_seq;
        zab.next_seq += 1;
        zab.appends_in_flight.push_back((seq, Zxid::new(1, 9)));
        assert_eq!(zab.validate().expect_err("caught").what, "appends in flight are in log order, inside the log");
    }

    #[test]
    fn a_message_waiting_for_an_operation_never_given_is_caught() {
        let mut zab = lone();
        let seq = zab.next_seq;
        zab.deferred.push_back((seq, 2, crate::zab::Message::FollowerPing { epoch: 0, probe: 0 }));
        assert_eq!(zab.validate().expect_err("caught").what, "messages wait only for operations storage was given");
    }

    #[test]
    fn a_looking_member_that_serves_is_caught() {
        // One of three starts looking.
        let mut zab = Zab::new(Config::new(1, vec![1, 2, 3]), Durable::default());
        assert_eq!(zab.validate(), Ok(()));
        zab.status.serving = true;
        assert_eq!(zab.validate().expect_err("caught").what, "a looking member does not serve");
    }

    #[test]
    fn serving_in_an_epoch_not_current_is_caught() {
        let mut zab = lone();
        zab.status.serving = true;
        zab.status.epoch = zab.current_epoch + 1;
        zab.accepted_epoch = zab.accepted_epoch.max(zab.current_epoch);
        assert_eq!(zab.validate().expect_err("caught").what, "a member serves in its currentEpoch");
    }

    #[test]
    fn a_status_that_disagrees_with_the_state_is_caught() {
        let mut zab = lone();
        zab.status.role = Role::Following;
        assert_eq!(zab.validate().expect_err("caught").what, "the status names the role the state machine is in");
    }
}
