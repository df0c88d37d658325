//! The ZooKeeper client port: an accept loop (within the connection caps of
//! [`limits`](super::limits)), and per connection a reader that turns frames
//! into requests for the replica and a writer that turns the replica's
//! messages into frames. A connection must send its connect request within
//! `connect_timeout_ms`, and a frame longer than `max_frame_bytes`
//! (jute.maxbuffer) closes it, as ZooKeeper closes it; its session lives on.
//!
//! Each request carries its reply shape (and arrival time) to the replica in
//! an [`Echo`], which comes back with the reply, so the writer encodes each
//! reply from what it carries. Watch events travel on the same ordered
//! channel as replies, which is what lets a client see an event before any
//! later read that observes its change. A frame over the limit or a header
//! that cannot be read closes this connection only, with a log line; every
//! other connection carries on.

use super::limits::ConnectionLimits;
use super::{Connection, Outbox};
use crate::runtime::handle::{stopped, Handle};
use crate::security::tls::ServerTls;
use crate::security::x509;
use crate::telemetry::trace_mask;
use bytes::{Buf, BytesMut};
use futures::future::BoxFuture;
use futures::future::{FusedFuture, FutureExt};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use zabkeeper_core::acl::Id;
use zabkeeper_core::error::{ErrorCode, ZkError};
use zabkeeper_core::op::{Op, OpLabel};
use zabkeeper_core::replica::{ClientMessage, ConnectRequest, Echo};
use zabkeeper_core::wire::codec::{self, Decoded};
use zabkeeper_core::wire::four_letter::four_letter_word;
use zabkeeper_core::wire::four_letter::FourLetterWord;
use zabkeeper_core::wire::frame::{check_frame, FrameStatus, LEN_PREFIX};
use zabkeeper_core::wire::opcode::OpCode;
use zabkeeper_core::wire::records::{self, ConnectResponse};

/// How the port answers a four-letter word (with the mask `stmk` carries):
/// with the operations surface's figures, handed in by the composition root,
/// so the port knows the words but not what they show.
pub type Words = fn(FourLetterWord, Option<i64>, Handle) -> BoxFuture<'static, String>;

/// Accepts connections until `stop` turns true; with `tls`, each speaks
/// TLS (ZooKeeper's secureClientPort) and its handshake must finish within
/// the connect deadline.
pub async fn run(
    listener: TcpListener,
    handle: Handle,
    mut stop: watch::Receiver<bool>,
    tls: Option<Arc<ServerTls>>,
    words: Words,
) -> Result<(), String> {
    let limits = handle.config.limits;
    let slots = ConnectionLimits::new(limits.max_connections, limits.max_connections_per_address);
    let mut backoff = Duration::from_millis(10);
    let connection_stop = stop.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((socket, client_addr)) => {
                    backoff = Duration::from_millis(10);
                    let permit = match slots.admit(client_addr.ip()) {
                        Ok(permit) => permit,
                        Err(refused) => {
                            tracing::warn!(%client_addr, %refused, "connection refused");
                            continue;
                        }
                    };
                    let handle = handle.clone();
                    let stop = connection_stop.clone();
                    let acceptor = tls.as_ref().map(|tls| tls.acceptor());
                    tokio::spawn(async move {
                        match acceptor {
                            None => serve(socket, client_addr, handle, stop, words).await,
                            Some(acceptor) => {
                                let _ = socket.set_nodelay(true);
                                let deadline = Duration::from_millis(handle.config.limits.connect_timeout_ms);
                                match tokio::time::timeout(deadline, acceptor.accept(socket)).await {
                                    Ok(Ok(stream)) => {
                                        let superuser = handle.config.x509_superuser.as_deref();
                                        let certified = x509::identities(stream.get_ref().1.peer_certificates(), superuser);
                                        let (reader, writer) = tokio::io::split(stream);
                                        let who = Who { client_addr, certified };
                                        serve_halves(reader, writer, who, handle, stop, words).await;
                                    }
                                    Ok(Err(e)) => tracing::info!(%client_addr, error = %e, "TLS handshake failed"),
                                    Err(_) => tracing::info!(%client_addr, ?deadline, "no TLS handshake in time; closing"),
                                }
                            }
                        }
                        drop(permit);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait before trying again.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// Serves one accepted socket until either side closes it.
pub async fn serve(
    socket: TcpStream,
    client_addr: SocketAddr,
    handle: Handle,
    stop: watch::Receiver<bool>,
    words: Words,
) {
    let _ = socket.set_nodelay(true);
    let (reader, writer) = socket.into_split();
    serve_halves(reader, writer, Who { client_addr, certified: Vec::new() }, handle, stop, words).await;
}

/// Who a connection is before it says anything: its address, and the
/// identities its verified TLS certificate gives it (`x509`, perhaps `super`).
struct Who {
    client_addr: SocketAddr,
    certified: Vec<Id>,
}

/// Serves a connection's two halves (a plain socket's, or a TLS stream's).
async fn serve_halves<R, W>(
    mut reader: R,
    mut writer: W,
    who: Who,
    handle: Handle,
    mut stop: watch::Receiver<bool>,
    words: Words,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let client_addr = who.client_addr;
    let max_frame = handle.config.limits.max_frame_bytes;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let deadline = Duration::from_millis(handle.config.limits.connect_timeout_ms);
    let opening = tokio::time::timeout(deadline, async {
        // The first four bytes are either a length prefix or a four-letter word.
        while buf.len() < LEN_PREFIX {
            match reader.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        let first: [u8; 4] = [buf[0], buf[1], buf[2], buf[3]];
        if let Some(word) = four_letter_word(first) {
            if word != FourLetterWord::Stmk {
                return Some(Opening::Word(word, None));
            }
            // `stmk` carries the new mask: 8 bytes, big-endian, after the word.
            while buf.len() < LEN_PREFIX + 8 {
                match reader.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
            let mask: [u8; 8] = buf[LEN_PREFIX..LEN_PREFIX + 8].try_into().ok()?;
            return Some(Opening::Word(word, Some(i64::from_be_bytes(mask))));
        }
        read_connect(&mut reader, &mut buf, max_frame, client_addr).await.map(Opening::Connect)
    });
    let connect = match opening.await {
        Ok(Some(Opening::Connect(connect))) => connect,
        Ok(Some(Opening::Word(word, mask))) => {
            let text = words(word, mask, handle).await;
            let _ = writer.write_all(text.as_bytes()).await;
            let _ = writer.shutdown().await;
            return;
        }
        Ok(None) => return,
        Err(_) => {
            tracing::info!(%client_addr, ?deadline, "no connect request in time; closing");
            return;
        }
    };

    let request = ConnectRequest {
        session_id: connect.session_id,
        password: connect.passwd.clone(),
        timeout_ms: connect.timeout_ms,
        last_zxid_seen: connect.last_zxid_seen,
    };
    let mut identities = vec![Id::new("ip", client_addr.ip().to_string())];
    identities.extend(who.certified);
    let Some((connection, outbox)) = Connection::open(&handle, request, identities, Some(client_addr)).await else {
        return;
    };
    // Fused: the reader waits on the writer from several places, and a
    // finished JoinHandle polled again makes tokio panic.
    let mut writer_task = tokio::spawn(write_loop(writer, outbox, connect)).fuse();

    'read: loop {
        // Serve every whole frame already buffered (clients pipeline).
        loop {
            match check_frame(&buf, max_frame) {
                FrameStatus::Frame { payload, consumed } => {
                    // Too many requests unanswered: stop reading until replies go out.
                    let reserved = tokio::select! {
                        reserved = connection.reserve() => reserved,
                        _ = &mut writer_task => break 'read,
                    };
                    if !reserved {
                        break 'read;
                    }
                    let decoded = codec::decode_request(payload);
                    buf.advance(consumed);
                    let arrived = Some(Instant::now());
                    // No shape: the reply is header-only.
                    let header_only = Echo { shape: None, arrived, op: OpLabel::default() };
                    let delivered = match decoded {
                        Ok(Decoded::Request(r)) => {
                            trace_request(&handle, client_addr, r.xid, &r.op);
                            let echo = Echo { shape: Some(r.shape), arrived, op: OpLabel::default() };
                            connection.request(r.xid, echo, r.op, false).await
                        }
                        Ok(Decoded::Rejected { xid, code, error, .. }) => {
                            tracing::debug!(%client_addr, xid, error = %error, "rejected request");
                            let error = ZkError::with_reason(code, "", error.to_string());
                            connection.bad_request(xid, header_only, error).await
                        }
                        Ok(Decoded::Unsupported { xid, opcode, code }) => {
                            tracing::debug!(%client_addr, xid, opcode, "unsupported opcode");
                            let delivered = connection.bad_request(xid, header_only, ZkError::new(code, "")).await;
                            // As ZooKeeper's UnimplementedRequestProcessor: answer,
                            // then close the connection (the session lives on).
                            // SASL has its own path there and keeps the connection.
                            let sasl = opcode == OpCode::Sasl.code();
                            if delivered && code == ErrorCode::Unimplemented && !sasl {
                                let answered = connection.answered();
                                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), answered).await;
                                tracing::info!(%client_addr, xid, opcode, "unimplemented opcode answered; closing this connection");
                                break 'read;
                            }
                            delivered
                        }
                        Err(e) => {
                            tracing::info!(%client_addr, error = %e, "unreadable request header; closing this connection");
                            break 'read;
                        }
                    };
                    if !delivered {
                        break 'read;
                    }
                }
                FrameStatus::Incomplete { .. } => break,
                FrameStatus::TooLarge(len) | FrameStatus::Negative(len) => {
                    tracing::warn!(%client_addr, len, max_frame, "frame length out of range; closing this connection");
                    break 'read;
                }
            }
        }
        tokio::select! {
            read = reader.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = &mut writer_task => break,
            _ = stopped(&mut stop) => break,
        }
    }
    connection.close().await;
    // The writer ends once the owner drops this connection's sender.
    if !writer_task.is_terminated() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer_task).await;
    }
}

/// Logs a request at TRACE when the trace mask asks for its kind.
fn trace_request(handle: &Handle, client_addr: SocketAddr, xid: i32, op: &Op) {
    let bit = if matches!(op, Op::Ping) { trace_mask::CLIENT_PING } else { trace_mask::CLIENT_REQUEST };
    if handle.trace_mask.traces(bit) {
        tracing::trace!(%client_addr, xid, op = op.name(), path = op.path().unwrap_or(""), "request");
    }
}

/// How a connection opens: a four-letter word or a session's connect request.
enum Opening {
    /// A word, with the mask when it is `stmk`.
    Word(FourLetterWord, Option<i64>),
    Connect(records::ConnectRequest),
}

/// Reads the connect request (the first frame); None when the connection
/// ends first or sends something that is not one.
async fn read_connect(
    reader: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    max_frame: usize,
    client_addr: SocketAddr,
) -> Option<records::ConnectRequest> {
    loop {
        match check_frame(buf, max_frame) {
            FrameStatus::Frame { payload, consumed } => {
                let decoded = codec::decode_connect(payload);
                buf.advance(consumed);
                return match decoded {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::info!(%client_addr, error = %e, "malformed ConnectRequest; closing");
                        None
                    }
                };
            }
            FrameStatus::Incomplete { .. } => match reader.read_buf(buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            },
            FrameStatus::TooLarge(len) | FrameStatus::Negative(len) => {
                tracing::info!(%client_addr, len, "ConnectRequest length out of range; closing");
                return None;
            }
        }
    }
}

/// Writes the replica's messages as frames, batching whatever is ready.
async fn write_loop(mut socket: impl AsyncWrite + Unpin, mut outbox: Outbox, connect: records::ConnectRequest) {
    let mut out = Vec::with_capacity(8 * 1024);
    while let Some(first) = outbox.recv().await {
        let mut close = encode(first, &mut out, &connect, &outbox);
        while !close {
            match outbox.try_recv() {
                Some(msg) => close = encode(msg, &mut out, &connect, &outbox),
                None => break,
            }
        }
        if !out.is_empty() && socket.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
        if close {
            let _ = socket.shutdown().await;
            return;
        }
    }
    let _ = socket.shutdown().await;
}

/// Appends the frame(s) for one message; true when the connection must close after them.
fn encode(msg: ClientMessage, out: &mut Vec<u8>, connect: &records::ConnectRequest, outbox: &Outbox) -> bool {
    match msg {
        ClientMessage::Connected { session, password, timeout_ms, .. } => {
            let response = ConnectResponse::accept(connect, timeout_ms, session.0, password, false);
            out.extend_from_slice(&codec::encode_connect_response(&response));
            false
        }
        ClientMessage::ConnectFailed { error, reason } => {
            if error == ErrorCode::SessionExpired {
                // ZooKeeper answers an unknown session with timeout 0; the client reports Expired.
                out.extend_from_slice(&codec::encode_connect_response(&ConnectResponse::expired(connect, false)));
            } else {
                tracing::debug!(error = %error, reason, "refusing connection");
            }
            true
        }
        ClientMessage::Reply { xid, echo, zxid, reply } => {
            let start = out.len();
            let close = match echo.shape {
                Some(shape) => {
                    let auth_failed = shape.opcode == OpCode::Auth && reply.is_err();
                    codec::encode_reply_into(out, xid, zxid.as_i64(), &shape, &reply);
                    // ZooKeeper closes the connection after a failed auth.
                    auth_failed
                }
                None => {
                    let code = reply.err().map_or(ErrorCode::Ok, |e| e.code);
                    out.extend_from_slice(&codec::encode_error_reply(xid, zxid.as_i64(), code));
                    false
                }
            };
            // ZooKeeper counts a reply's bytes without its length prefix.
            outbox.replied(out.len().saturating_sub(start + LEN_PREFIX));
            close
        }
        ClientMessage::Event(event) => {
            codec::encode_notification_into(out, &event);
            false
        }
        ClientMessage::Close { error, reason } => {
            tracing::debug!(error = %error, reason, "server closes the connection");
            true
        }
    }
}
