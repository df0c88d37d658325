//! The gRPC session API (`proto/client.proto`): one bidirectional stream per
//! client session, served by the same replica pipeline as the wire port.

use super::client_convert::{client_message_to_pb, op_from_pb};
use crate::error::{ErrorCode, ZkError};
use crate::proto::client as pb;
use crate::replica::{ClientMessage, ConnectRequest, Echo};
use crate::server::{Event, ServerHandle, CLIENT_QUEUE, MAX_IN_FLIGHT_PER_CONNECTION};
use crate::tree::acl::Id;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Largest client message accepted; bigger data is refused by the replica
/// with BadArguments naming the limit, not by killing the stream.
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024 * 1024;

/// Serves client sessions.
pub struct ClientService {
    handle: ServerHandle,
}

impl ClientService {
    /// A service in front of `handle`'s replica.
    pub fn new(handle: ServerHandle) -> ClientService {
        ClientService { handle }
    }
}

type Outgoing = mpsc::Sender<Result<pb::ServerMessage, Status>>;

fn closing(error: ErrorCode, message: &str) -> pb::ServerMessage {
    pb::ServerMessage {
        kind: Some(pb::server_message::Kind::Closing(pb::Closing { error: error.code(), message: message.into() })),
    }
}

#[tonic::async_trait]
impl pb::zab_keeper_server::ZabKeeper for ClientService {
    type SessionStream = ReceiverStream<Result<pb::ServerMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<pb::ClientMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let identities: Vec<Id> =
            request.remote_addr().map(|a| Id::new("ip", a.ip().to_string())).into_iter().collect();
        let incoming = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel(64);
        tokio::spawn(serve(self.handle.clone(), incoming, out_tx, identities));
        Ok(Response::new(ReceiverStream::new(out_rx)))
    }
}

async fn serve(handle: ServerHandle, mut incoming: Streaming<pb::ClientMessage>, out: Outgoing, identities: Vec<Id>) {
    let connect = match incoming.message().await {
        Ok(Some(pb::ClientMessage { kind: Some(pb::client_message::Kind::Connect(c)) })) => c,
        Ok(Some(_)) => {
            let _ = out.send(Ok(closing(ErrorCode::BadArguments, "the first message must be Connect"))).await;
            return;
        }
        Ok(None) => return,
        Err(status) => {
            let message = format!("malformed Connect: {}", status.message());
            let _ = out.send(Err(Status::invalid_argument(message))).await;
            return;
        }
    };
    let conn = handle.next_conn();
    let server_id = handle.config.id;
    let (tx, mut rx) = mpsc::channel::<ClientMessage>(CLIENT_QUEUE);
    // One permit per request in flight: the writer gives it back with the reply.
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let replied = in_flight.clone();
    // Writer: the replica's messages, in order, until it closes the session.
    let writer_out = out.clone();
    let stats = handle.stats.clone();
    let mut writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            stats.sent();
            if let ClientMessage::Reply { echo, .. } = &msg {
                replied.add_permits(1);
                if let Some(arrived) = echo.arrived {
                    stats.latency(arrived.elapsed());
                }
            }
            let last = matches!(msg, ClientMessage::Close { .. } | ClientMessage::ConnectFailed { .. });
            if writer_out.send(Ok(client_message_to_pb(server_id, msg))).await.is_err() || last {
                break;
            }
        }
    });
    let request = ConnectRequest {
        session_id: connect.session_id,
        password: Bytes::from(connect.password),
        timeout_ms: connect.timeout_ms,
        last_zxid_seen: connect.last_zxid_seen,
    };
    if handle.events.send(Event::Connect { conn, request, identities, tx }).await.is_err() {
        return;
    }
    let mut broken: Option<String> = None;
    loop {
        // Too many requests unanswered: stop reading until replies go out.
        let permit = tokio::select! {
            permit = in_flight.clone().acquire_owned() => permit,
            _ = &mut writer => break,
        };
        match permit {
            Ok(p) => p.forget(),
            Err(_) => break,
        }
        let next = tokio::select! {
            next = incoming.message() => next,
            // The server ended the session (closed, expired, shutting down).
            _ = &mut writer => break,
        };
        let event = match next {
            Ok(Some(pb::ClientMessage { kind: Some(pb::client_message::Kind::Request(r)) })) => {
                match op_from_pb(r.op) {
                    Ok(op) => Event::Request { conn, xid: r.xid, echo: arrived_now(), op },
                    Err(error) => Event::BadRequest { conn, xid: r.xid, echo: arrived_now(), error },
                }
            }
            Ok(Some(_)) => Event::BadRequest {
                conn,
                xid: 0,
                echo: Echo::default(),
                error: ZkError::with_reason(ErrorCode::BadArguments, "", "Connect may only be the first message"),
            },
            Ok(None) => break,
            Err(status) => {
                // An undecodable or oversized message: gRPC cannot go on with
                // this stream, but the session lives on for the client to resume.
                tracing::debug!(conn, error = %status, "client stream failed");
                broken = Some(status.message().to_string());
                break;
            }
        };
        handle.stats.received();
        if handle.events.send(event).await.is_err() {
            break;
        }
    }
    let _ = handle.events.send(Event::Disconnect { conn }).await;
    if let Some(reason) = broken {
        // Let everything already answered go out first, then say why the stream ends.
        if !writer.is_finished() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut writer).await;
        }
        let message = format!("malformed request, the stream ends (the session can be resumed): {reason}");
        let _ = out.send(Ok(closing(ErrorCode::MarshallingError, &message))).await;
    }
}

/// A gRPC reply needs nothing back but the arrival time (latency statistics).
fn arrived_now() -> Echo {
    Echo { shape: None, arrived: Some(Instant::now()) }
}
