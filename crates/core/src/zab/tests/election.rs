//! Elections: when a looking member leads on its followers' word.

use super::*;

/// Peer 1 of three, looking in round `round` (raised to it by a looker's
/// notification), its actions taken.
fn looking_in(round: u64) -> Zab {
    let mut peer = Zab::new(config(1, 3), Durable::default());
    hear(&mut peer, 3, round, Vote::new(0, Zxid::ZERO, 0), PeerState::Looking);
    assert_eq!((peer.status().role, peer.round), (Role::Looking, round));
    peer.take_actions();
    peer
}

/// Found by a soak seed (1 599 900 195 of `membership_changes_...`):
/// followers decided for this member in one round; members that had
/// followed a loser looked again in the next, which took this member past
/// the followers' round before it could count them, every round. A
/// follower's word counts whatever its round, unless we led in it or later.
#[test]
fn a_member_followed_from_an_earlier_round_leads() {
    let mut peer = looking_in(3);
    hear(&mut peer, 2, 2, Vote::new(0, Zxid::ZERO, 1), PeerState::Following);
    assert_eq!(peer.status().role, Role::Leading, "{{1, 2}} is a majority of three");
}

#[test]
fn a_leader_that_stepped_down_is_not_followed_back_on_words_left_from_its_leadership() {
    let mut peer = looking_in(1);
    let for_1 = Vote::new(0, Zxid::ZERO, 1);
    hear(&mut peer, 2, 1, for_1, PeerState::Looking);
    assert_eq!(peer.status().role, Role::Leading, "elected in round 1");
    // No follower comes: discovery gives up after initLimit.
    for _ in 0..=peer.config.init_limit_ticks {
        peer.handle(Input::Tick);
    }
    assert_eq!((peer.status().role, peer.round), (Role::Looking, 2));
    hear(&mut peer, 2, 1, for_1, PeerState::Following);
    hear(&mut peer, 3, 1, for_1, PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking, "words from round 1, in which it led, are stale");
    // Round 3 begins (a looker's word), so round 2's is only a follower's.
    hear(&mut peer, 3, 3, Vote::new(0, Zxid::ZERO, 0), PeerState::Looking);
    hear(&mut peer, 2, 2, for_1, PeerState::Following);
    assert_eq!(peer.status().role, Role::Leading, "a word from round 2 is not");
}

/// A word naming us with a history other than ours now is left from a
/// leadership that moved our epoch on (a follower that rejoined in a later
/// round than the one we led in still names that leadership).
#[test]
fn a_word_naming_another_history_of_ours_is_not_counted() {
    let mut peer = looking_in(3);
    hear(&mut peer, 2, 2, Vote::new(1, Zxid::ZERO, 1), PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking);
}

/// A leader handing over votes for its nominee: its followers' words that
/// they follow it (one rejoining misses the STEPDOWN) do not take the
/// leadership back from the nominee.
#[test]
fn a_member_handing_over_does_not_lead_on_its_followers_word() {
    let mut peer = looking_in(3);
    peer.become_looking_nominating(2, "handing over");
    let round = peer.round;
    hear(&mut peer, 3, round, Vote::new(0, Zxid::ZERO, 1), PeerState::Following);
    assert_eq!(peer.status().role, Role::Looking, "2 is the nominee");
}
