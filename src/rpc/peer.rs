//! The gRPC service other replicas call: election notifications, and the
//! `Follow` streams followers open to their leader.

use super::peer_convert::{follower_from_pb, notification_from_pb};
use crate::ids::ServerId;
use crate::proto::peer as pb;
use crate::server::transport::{InboundRegistry, InboundStream};
use crate::server::Event;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Accepts traffic from the other members.
pub struct PeerService {
    events: mpsc::Sender<Event>,
    inbound: InboundRegistry,
    members: Arc<HashSet<ServerId>>,
    next_stream: AtomicU64,
}

impl PeerService {
    /// A service feeding `events`, registering follower streams in `inbound`.
    pub fn new(events: mpsc::Sender<Event>, inbound: InboundRegistry, members: HashSet<ServerId>) -> PeerService {
        PeerService { events, inbound, members: Arc::new(members), next_stream: AtomicU64::new(1) }
    }
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn notify(&self, request: Request<pb::Notification>) -> Result<Response<pb::NotifyAck>, Status> {
        let (from, msg) =
            notification_from_pb(request.get_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if !self.members.contains(&from) {
            return Err(Status::permission_denied(format!("server {from} is not a member of this ensemble")));
        }
        let _ = self.events.send(Event::Peer { from, msg }).await;
        Ok(Response::new(pb::NotifyAck {}))
    }

    type FollowStream = ReceiverStream<Result<pb::LeaderMessage, Status>>;

    async fn follow(
        &self,
        request: Request<Streaming<pb::FollowerMessage>>,
    ) -> Result<Response<Self::FollowStream>, Status> {
        let mut incoming = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel::<Result<pb::LeaderMessage, Status>>(64);
        let (batch_tx, mut batch_rx) = mpsc::channel::<Vec<pb::LeaderMessage>>(8192);
        // Writer: batches from the owner task, in order, into the response stream.
        tokio::spawn(async move {
            while let Some(batch) = batch_rx.recv().await {
                for m in batch {
                    if out_tx.send(Ok(m)).await.is_err() {
                        return;
                    }
                }
            }
        });
        let stream_id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let events = self.events.clone();
        let inbound = self.inbound.clone();
        let members = self.members.clone();
        tokio::spawn(async move {
            let mut follower: Option<ServerId> = None;
            let mut batch_tx = Some(batch_tx);
            while let Ok(Some(m)) = incoming.message().await {
                let (from, msg) = match follower_from_pb(m) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "malformed message from a follower; closing its stream");
                        break;
                    }
                };
                if !members.contains(&from) || follower.is_some_and(|f| f != from) {
                    tracing::warn!(from, "stream from a non-member or a changed sender; closing it");
                    break;
                }
                if follower.is_none() {
                    follower = Some(from);
                    if let (Some(tx), Ok(mut registry)) = (batch_tx.take(), inbound.lock()) {
                        registry.insert(from, InboundStream { stream_id, tx });
                    }
                }
                if events.send(Event::Peer { from, msg }).await.is_err() {
                    break;
                }
            }
            if let Some(f) = follower {
                if let Ok(mut registry) = inbound.lock() {
                    if registry.get(&f).is_some_and(|s| s.stream_id == stream_id) {
                        registry.remove(&f);
                    }
                }
                let _ = events.send(Event::PeerDisconnected { peer: f }).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(out_rx)))
    }
}
