//! Conversions between Zab's messages and the peer protobufs. A message from
//! another replica that does not convert is dropped by the caller with a log
//! line naming the field; it never reaches the consensus core.

use super::protocol::PROBES_ON_MESSAGES;
use bytes::Bytes;
use std::sync::Arc;
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::members::Configuration;
use zabkeeper_core::txn::{codec, Entry};
use zabkeeper_core::zab::message::{EpochRange, LogSummary};
use zabkeeper_core::zab::{Message, PeerState, Vote};
use zabkeeper_proto::peer as pb;

/// Why a peer protobuf does not convert.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A required field is missing.
    #[error("missing field {0}")]
    Missing(&'static str),
    /// An entry's transaction bytes are corrupt.
    #[error("entry {zxid:?}: {source}")]
    Entry {
        /// The entry.
        zxid: Zxid,
        /// What is wrong.
        source: codec::CodecError,
    },
    /// The configuration a SNAP or NEWLEADER carries is corrupt.
    #[error("configuration at {zxid:?}: {source}")]
    Configuration {
        /// The snapshot's zxid.
        zxid: Zxid,
        /// What is wrong.
        source: codec::CodecError,
    },
    /// The message belongs on the other channel.
    #[error("{0} cannot be sent this way")]
    WrongChannel(&'static str),
}

/// A configuration as SNAP and NEWLEADER carry it (empty: none sent).
fn configuration_from_pb(zxid: Zxid, bytes: &[u8]) -> Result<Option<Configuration>, ConvertError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let decoded = codec::decode_value(bytes).map_err(|source| ConvertError::Configuration { zxid, source })?;
    Ok(Some(decoded))
}

fn vote_to_pb(v: Vote) -> pb::Vote {
    pb::Vote { leader: v.leader, zxid: v.zxid.0, epoch: v.epoch, nominated: v.nominated }
}

/// A notification to protobuf; `None` if `msg` is not a notification.
pub fn notification_to_pb(from: ServerId, msg: &Message) -> Option<pb::Notification> {
    let Message::Notification { round, vote, state, configuration } = msg else { return None };
    let state = match state {
        PeerState::Looking => pb::PeerState::Looking,
        PeerState::Following => pb::PeerState::Following,
        PeerState::Leading => pb::PeerState::Leading,
    };
    Some(pb::Notification {
        from,
        vote: Some(vote_to_pb(*vote)),
        round: *round,
        state: state as i32,
        accepted_epoch: 0,
        configuration: configuration.as_ref().map(codec::encode_value).unwrap_or_default(),
        // Filled in by the transport, which knows them.
        peer_addr: String::new(),
        endpoints: String::new(),
    })
}

/// A notification from protobuf.
pub fn notification_from_pb(n: &pb::Notification) -> Result<(ServerId, Message), ConvertError> {
    let v = n.vote.as_ref().ok_or(ConvertError::Missing("Notification.vote"))?;
    let state = match pb::PeerState::try_from(n.state).unwrap_or(pb::PeerState::Looking) {
        pb::PeerState::Looking => PeerState::Looking,
        pb::PeerState::Following => PeerState::Following,
        pb::PeerState::Leading => PeerState::Leading,
    };
    let vote = Vote { epoch: v.epoch, zxid: Zxid(v.zxid), nominated: v.nominated, leader: v.leader };
    // A configuration that does not decode is left out: the vote still counts.
    let configuration = configuration_from_pb(vote.zxid, &n.configuration).ok().flatten();
    Ok((n.from, Message::Notification { round: n.round, vote, state, configuration }))
}

fn entries_to_pb(entries: &[Entry]) -> Vec<pb::Entry> {
    entries.iter().map(|e| pb::Entry { zxid: e.zxid.0, txn: codec::encode(&e.txn) }).collect()
}

fn entries_from_pb(entries: &[pb::Entry]) -> Result<Vec<Entry>, ConvertError> {
    entries
        .iter()
        .map(|e| {
            let zxid = Zxid(e.zxid);
            let txn = codec::decode(&e.txn).map_err(|source| ConvertError::Entry { zxid, source })?;
            Ok(Entry { zxid, txn: Arc::new(txn) })
        })
        .collect()
}

/// What a peer speaking protocol `version` (0: not yet known) needs beside
/// `msg` to read the leadership probe on a REPLY, or the echo on a REQUEST:
/// the PING of its own that versions before [`PROBES_ON_MESSAGES`] read
/// (the leader's with no commit point: a follower takes only a higher one).
/// None where the message itself will do.
pub fn probe_apart(version: u32, msg: &Message) -> Option<Message> {
    if version >= PROBES_ON_MESSAGES {
        return None;
    }
    match *msg {
        Message::Reply { epoch, probe, .. } if probe > 0 => Some(Message::Ping { epoch, committed: Zxid::ZERO, probe }),
        Message::Forward { epoch, probe, .. } if probe > 0 => Some(Message::FollowerPing { epoch, probe }),
        _ => None,
    }
}

/// A message a follower sends, to protobuf.
pub fn follower_to_pb(from: ServerId, msg: &Message) -> Result<pb::FollowerMessage, ConvertError> {
    use pb::follower_message::Kind;
    let (epoch, kind) = match msg {
        Message::FollowerInfo { accepted_epoch } => {
            (0, Kind::FollowerInfo(pb::FollowerInfo { accepted_epoch: *accepted_epoch }))
        }
        Message::AckEpoch { epoch, acked, current_epoch, last_zxid, summary } => (
            *epoch,
            Kind::AckEpoch(pb::AckEpoch {
                acked: *acked,
                current_epoch: *current_epoch,
                last_zxid: last_zxid.0,
                summary: Some(pb::LogSummary {
                    base_zxid: summary.base.0,
                    epochs: summary
                        .epochs
                        .iter()
                        .map(|r| pb::EpochRange { epoch: r.epoch, first_zxid: r.first.0, last_zxid: r.last.0 })
                        .collect(),
                }),
            }),
        ),
        Message::AckNewLeader { epoch, zxid } => (*epoch, Kind::AckNewLeader(pb::AckNewLeader { zxid: zxid.0 })),
        Message::Ack { epoch, zxid } => (*epoch, Kind::Ack(pb::Ack { zxid: zxid.0 })),
        Message::FollowerPing { epoch, probe } => (*epoch, Kind::Ping(pb::FollowerPing { probe: *probe })),
        Message::Forward { epoch, seq, payload, probe } => {
            (*epoch, Kind::Forward(pb::Forward { payload: payload.to_vec(), seq: *seq, probe: *probe }))
        }
        other => return Err(ConvertError::WrongChannel(other.kind())),
    };
    Ok(pb::FollowerMessage { from, epoch, kind: Some(kind) })
}

/// A follower's message from protobuf.
pub fn follower_from_pb(m: pb::FollowerMessage) -> Result<(ServerId, Message), ConvertError> {
    use pb::follower_message::Kind;
    let epoch = m.epoch;
    let msg = match m.kind.ok_or(ConvertError::Missing("FollowerMessage.kind"))? {
        Kind::FollowerInfo(i) => Message::FollowerInfo { accepted_epoch: i.accepted_epoch },
        Kind::AckEpoch(a) => {
            let s = a.summary.ok_or(ConvertError::Missing("AckEpoch.summary"))?;
            Message::AckEpoch {
                epoch,
                acked: a.acked,
                current_epoch: a.current_epoch,
                last_zxid: Zxid(a.last_zxid),
                summary: LogSummary {
                    base: Zxid(s.base_zxid),
                    epochs: s
                        .epochs
                        .iter()
                        .map(|r| EpochRange { epoch: r.epoch, first: Zxid(r.first_zxid), last: Zxid(r.last_zxid) })
                        .collect(),
                },
            }
        }
        Kind::AckNewLeader(a) => Message::AckNewLeader { epoch, zxid: Zxid(a.zxid) },
        Kind::Ack(a) => Message::Ack { epoch, zxid: Zxid(a.zxid) },
        Kind::Ping(p) => Message::FollowerPing { epoch, probe: p.probe },
        Kind::Forward(f) => Message::Forward { epoch, seq: f.seq, payload: Bytes::from(f.payload), probe: f.probe },
    };
    Ok((m.from, msg))
}

/// A message a leader sends, to protobufs (a snapshot becomes several chunks).
pub fn leader_to_pb(from: ServerId, msg: &Message) -> Result<Vec<pb::LeaderMessage>, ConvertError> {
    use pb::leader_message::Kind;
    let one = |epoch, kind| Ok(vec![pb::LeaderMessage { from, epoch, kind: Some(kind) }]);
    match msg {
        Message::LeaderInfo { epoch } => one(*epoch, Kind::LeaderInfo(pb::LeaderInfo { new_epoch: *epoch })),
        Message::Diff { epoch, truncate_to, from, committed } => one(
            *epoch,
            Kind::Diff(pb::Diff {
                truncate: truncate_to.is_some(),
                truncate_to: truncate_to.map_or(0, |z| z.0),
                committed: committed.0,
                from_zxid: from.0,
            }),
        ),
        Message::Snap { epoch, zxid, chunks, configuration } => {
            let mut out = Vec::with_capacity(chunks.len().max(1));
            let count = chunks.len().max(1);
            let encoded = configuration.as_ref().map(codec::encode_value).unwrap_or_default();
            for i in 0..count {
                let last = i + 1 == count;
                let data = chunks.get(i).map(|c| c.to_vec()).unwrap_or_default();
                let configuration = if last { encoded.clone() } else { Vec::new() };
                let kind = Kind::Snap(pb::SnapChunk { zxid: zxid.0, data, last, configuration });
                out.push(pb::LeaderMessage { from, epoch: *epoch, kind: Some(kind) });
            }
            Ok(out)
        }
        Message::NewLeader { epoch, zxid, configuration } => {
            let configuration = configuration.as_ref().map(codec::encode_value).unwrap_or_default();
            one(*epoch, Kind::NewLeader(pb::NewLeader { zxid: zxid.0, configuration }))
        }
        Message::UpToDate { epoch, committed } => one(*epoch, Kind::UpToDate(pb::UpToDate { committed: committed.0 })),
        Message::Proposal { epoch, prev, entries } => {
            one(*epoch, Kind::Proposal(pb::Proposal { entries: entries_to_pb(entries), prev_zxid: prev.0 }))
        }
        Message::Commit { epoch, zxid } => one(*epoch, Kind::Commit(pb::Commit { zxid: zxid.0 })),
        Message::Ping { epoch, committed, probe } => {
            one(*epoch, Kind::Ping(pb::LeaderPing { committed: committed.0, probe: *probe }))
        }
        Message::Reply { epoch, payload, probe } => {
            one(*epoch, Kind::Reply(pb::Reply { payload: payload.to_vec(), probe: *probe }))
        }
        Message::StepDown { epoch, to } => one(*epoch, Kind::StepDown(pb::StepDown { to: *to })),
        other => Err(ConvertError::WrongChannel(other.kind())),
    }
}

/// Reassembles leader messages (snapshot chunks) into Zab messages.
#[derive(Default)]
pub struct LeaderStreamDecoder {
    snap: Vec<Bytes>,
}

impl LeaderStreamDecoder {
    /// Decodes the next message; `Ok(None)` while a snapshot is still arriving.
    pub fn decode(&mut self, m: pb::LeaderMessage) -> Result<Option<(ServerId, Message)>, ConvertError> {
        use pb::leader_message::Kind;
        let epoch = m.epoch;
        let msg = match m.kind.ok_or(ConvertError::Missing("LeaderMessage.kind"))? {
            Kind::LeaderInfo(i) => Message::LeaderInfo { epoch: i.new_epoch },
            Kind::Diff(d) => Message::Diff {
                epoch,
                truncate_to: d.truncate.then_some(Zxid(d.truncate_to)),
                from: Zxid(d.from_zxid),
                committed: Zxid(d.committed),
            },
            Kind::Snap(chunk) => {
                if !chunk.data.is_empty() {
                    self.snap.push(Bytes::from(chunk.data));
                }
                if !chunk.last {
                    return Ok(None);
                }
                let configuration = configuration_from_pb(Zxid(chunk.zxid), &chunk.configuration)?;
                Message::Snap { epoch, zxid: Zxid(chunk.zxid), chunks: std::mem::take(&mut self.snap), configuration }
            }
            Kind::NewLeader(n) => {
                let zxid = Zxid(n.zxid);
                Message::NewLeader { epoch, zxid, configuration: configuration_from_pb(zxid, &n.configuration)? }
            }
            Kind::UpToDate(u) => Message::UpToDate { epoch, committed: Zxid(u.committed) },
            Kind::Proposal(p) => {
                Message::Proposal { epoch, prev: Zxid(p.prev_zxid), entries: entries_from_pb(&p.entries)? }
            }
            Kind::Commit(c) => Message::Commit { epoch, zxid: Zxid(c.zxid) },
            Kind::Ping(p) => Message::Ping { epoch, committed: Zxid(p.committed), probe: p.probe },
            Kind::Reply(r) => Message::Reply { epoch, payload: Bytes::from(r.payload), probe: r.probe },
            Kind::StepDown(s) => Message::StepDown { epoch, to: s.to },
        };
        Ok(Some((m.from, msg)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::ids::SessionId;
    use zabkeeper_core::members::Membership;
    use zabkeeper_core::txn::{Txn, TxnBody};

    fn round_trip_leader(msg: Message) -> Message {
        let mut dec = LeaderStreamDecoder::default();
        let mut out = None;
        for m in leader_to_pb(3, &msg).unwrap() {
            out = dec.decode(m).unwrap();
        }
        out.unwrap().1
    }

    #[test]
    fn leader_messages_round_trip() {
        let entry = Entry::new(
            Zxid::new(2, 1),
            Txn { session: SessionId(5), cxid: 1, time_ms: 9, body: TxnBody::Delete { path: "/a".into() } },
        );
        for msg in [
            Message::LeaderInfo { epoch: 4 },
            Message::Diff {
                epoch: 4,
                truncate_to: Some(Zxid::new(3, 2)),
                from: Zxid::new(3, 2),
                committed: Zxid::new(3, 1),
            },
            Message::Diff { epoch: 4, truncate_to: None, from: Zxid::ZERO, committed: Zxid::ZERO },
            Message::Proposal { epoch: 4, prev: Zxid::new(4, 6), entries: vec![entry] },
            Message::Snap {
                epoch: 4,
                zxid: Zxid::new(3, 3),
                chunks: vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")],
                configuration: Some(Configuration::initial(Membership::of_ids(&[1, 2, 3], &[4]))),
            },
            Message::Snap { epoch: 4, zxid: Zxid::new(3, 3), chunks: vec![], configuration: None },
            Message::NewLeader { epoch: 4, zxid: Zxid::new(3, 3), configuration: None },
            Message::NewLeader {
                epoch: 4,
                zxid: Zxid::new(3, 3),
                configuration: Some(Configuration::initial(Membership::of_ids(&[1, 2], &[]))),
            },
            Message::Commit { epoch: 4, zxid: Zxid::new(4, 7) },
            Message::Ping { epoch: 4, committed: Zxid::new(4, 7), probe: 9 },
            Message::Reply { epoch: 4, payload: Bytes::from_static(b"done"), probe: 9 },
            Message::Reply { epoch: 4, payload: Bytes::from_static(b"done"), probe: 0 },
            Message::StepDown { epoch: 4, to: 2 },
        ] {
            assert_eq!(round_trip_leader(msg.clone()), msg);
        }
    }

    #[test]
    fn a_nominated_vote_keeps_its_nomination() {
        for nominated in [false, true] {
            let vote = Vote { epoch: 3, zxid: Zxid::new(3, 9), nominated, leader: 2 };
            let configuration = Some(Configuration::initial(Membership::of_ids(&[1, 2, 3], &[])));
            let msg = Message::Notification { round: 7, vote, state: PeerState::Looking, configuration };
            let pb = notification_to_pb(1, &msg).expect("a notification");
            assert_eq!(notification_from_pb(&pb).expect("decodes"), (1, msg));
        }
    }

    #[test]
    fn follower_messages_round_trip() {
        let summary = LogSummary {
            base: Zxid::new(1, 5),
            epochs: vec![EpochRange { epoch: 2, first: Zxid::new(2, 1), last: Zxid::new(2, 9) }],
        };
        for msg in [
            Message::FollowerInfo { accepted_epoch: 3 },
            Message::AckEpoch { epoch: 4, acked: true, current_epoch: 3, last_zxid: Zxid::new(2, 9), summary },
            Message::Ack { epoch: 4, zxid: Zxid::new(4, 1) },
            Message::Forward { epoch: 4, seq: 7, payload: Bytes::from_static(b"x"), probe: 3 },
        ] {
            let (from, back) = follower_from_pb(follower_to_pb(2, &msg).unwrap()).unwrap();
            assert_eq!(from, 2);
            let expected = match msg {
                Message::FollowerInfo { accepted_epoch } => Message::FollowerInfo { accepted_epoch },
                other => other,
            };
            assert_eq!(back, expected);
        }
    }

    #[test]
    fn a_probe_or_echo_goes_apart_in_a_ping_only_to_a_peer_that_cannot_read_it_on_the_message() {
        let reply = |probe| Message::Reply { epoch: 3, payload: Bytes::from_static(b"r"), probe };
        let request = |probe| Message::Forward { epoch: 3, seq: 1, payload: Bytes::from_static(b"q"), probe };
        for version in [0, 1, 3] {
            assert_eq!(
                probe_apart(version, &reply(7)),
                Some(Message::Ping { epoch: 3, committed: Zxid::ZERO, probe: 7 }),
                "to version {version}"
            );
            assert_eq!(probe_apart(version, &request(7)), Some(Message::FollowerPing { epoch: 3, probe: 7 }));
            assert_eq!(probe_apart(version, &reply(0)), None, "no probe: nothing to read");
            assert_eq!(probe_apart(version, &request(0)), None);
        }
        assert_eq!(probe_apart(PROBES_ON_MESSAGES, &reply(7)), None);
        assert_eq!(probe_apart(PROBES_ON_MESSAGES, &request(7)), None);
    }

    #[test]
    fn corrupt_entries_are_rejected() {
        let bad = pb::LeaderMessage {
            from: 1,
            epoch: 1,
            kind: Some(pb::leader_message::Kind::Proposal(pb::Proposal {
                entries: vec![pb::Entry { zxid: 1, txn: vec![1, 2, 3] }],
                prev_zxid: 0,
            })),
        };
        assert!(LeaderStreamDecoder::default().decode(bad).is_err());
    }
}
