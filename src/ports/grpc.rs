//! The gRPC session API (`proto/client.proto`): one bidirectional stream per
//! client session, served by the same replica pipeline as the wire port.

use super::grpc_convert::{client_message_to_pb, op_from_pb};
use crate::ports::{Connection, Outbox};
use crate::runtime::handle::Handle;
use crate::security::x509;
use bytes::Bytes;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use zabkeeper_core::acl::Id;
use zabkeeper_core::error::{ErrorCode, ZkError};
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::op::OpLabel;
use zabkeeper_core::replica::{ConnectRequest, Echo};
use zabkeeper_proto::client as pb;

/// Largest client message accepted; bigger data is refused by the replica
/// with BadArguments naming the limit, not by killing the stream.
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024 * 1024;

/// Serves client sessions.
pub struct ClientService {
    handle: Handle,
}

impl ClientService {
    /// A service in front of `handle`'s replica.
    pub fn new(handle: Handle) -> ClientService {
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
        let client_addr = request.remote_addr();
        let mut identities: Vec<Id> = client_addr.map(|a| Id::new("ip", a.ip().to_string())).into_iter().collect();
        // The certificate the TLS handshake verified, as on the ZooKeeper port.
        let superuser = self.handle.config.x509_superuser.as_deref();
        identities.extend(x509::identities(request.peer_certs().as_deref().map(Vec::as_slice), superuser));
        let incoming = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel(64);
        tokio::spawn(serve(self.handle.clone(), incoming, out_tx, identities, client_addr));
        Ok(Response::new(ReceiverStream::new(out_rx)))
    }
}

async fn serve(
    handle: Handle,
    mut incoming: Streaming<pb::ClientMessage>,
    out: Outgoing,
    identities: Vec<Id>,
    client_addr: Option<std::net::SocketAddr>,
) {
    let deadline = std::time::Duration::from_millis(handle.config.limits.connect_timeout_ms);
    let Ok(first) = tokio::time::timeout(deadline, incoming.message()).await else {
        let _ = out.send(Err(Status::deadline_exceeded(format!("no Connect within {deadline:?}")))).await;
        return;
    };
    let connect = match first {
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
    let request = ConnectRequest {
        session_id: connect.session_id,
        password: Bytes::from(connect.password),
        timeout_ms: connect.timeout_ms,
        last_zxid_seen: connect.last_zxid_seen,
    };
    let Some((connection, outbox)) = Connection::open(&handle, request, identities, client_addr).await else { return };
    let mut writer = tokio::spawn(write_loop(outbox, out.clone(), handle.config.id));
    let mut broken: Option<String> = None;
    loop {
        // Too many requests unanswered: stop reading until replies go out.
        let reserved = tokio::select! {
            reserved = connection.reserve() => reserved,
            _ = &mut writer => break,
        };
        if !reserved {
            break;
        }
        let next = tokio::select! {
            next = incoming.message() => next,
            // The server ended the session (closed, expired, shutting down).
            _ = &mut writer => break,
        };
        let echo = Echo { shape: None, arrived: Some(Instant::now()), op: OpLabel::default() };
        let delivered = match next {
            Ok(Some(pb::ClientMessage { kind: Some(pb::client_message::Kind::Request(r)) })) => {
                let linearizable = r.consistency == pb::Consistency::Linearizable as i32;
                match op_from_pb(r.op) {
                    Ok(op) => connection.request(r.xid, echo, op, linearizable).await,
                    Err(error) => connection.bad_request(r.xid, echo, error).await,
                }
            }
            Ok(Some(_)) => {
                let error = ZkError::with_reason(ErrorCode::BadArguments, "", "Connect may only be the first message");
                connection.bad_request(0, echo, error).await
            }
            Ok(None) => break,
            Err(status) => {
                // An undecodable or oversized message: gRPC cannot go on with
                // this stream, but the session lives on for the client to resume.
                tracing::debug!(conn = connection.conn(), error = %status, "client stream failed");
                broken = Some(status.message().to_string());
                break;
            }
        };
        if !delivered {
            break;
        }
    }
    connection.close().await;
    if let Some(reason) = broken {
        // Let everything already answered go out first, then say why the stream ends.
        if !writer.is_finished() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut writer).await;
        }
        let message = format!("malformed request, the stream ends (the session can be resumed): {reason}");
        let _ = out.send(Ok(closing(ErrorCode::MarshallingError, &message))).await;
    }
}

/// The replica's messages, in order, until it closes the session.
async fn write_loop(mut outbox: Outbox, out: Outgoing, server_id: ServerId) {
    while let Some(msg) = outbox.recv().await {
        let last = msg.is_last();
        if out.send(Ok(client_message_to_pb(server_id, msg))).await.is_err() || last {
            break;
        }
    }
}
