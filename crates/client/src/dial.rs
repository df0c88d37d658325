//! Connecting to one server: a gRPC `Session` stream, the `Connect`, and the
//! `Connected` checked before it is trusted; and the error a client sees when
//! no server accepted a session in time.

use super::connect_string::ServerAddr;
use super::error::ClientError;
use super::settings::{Settings, OUTBOUND_SLACK};
use crate::proto::client as pb;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use zabkeeper_core::error::ErrorCode;

/// One established stream.
pub(super) struct Link {
    pub(super) out: mpsc::Sender<pb::ClientMessage>,
    pub(super) incoming: tonic::Streaming<pb::ServerMessage>,
    pub(super) server: String,
    pub(super) last_send: Instant,
}

/// Why one connect attempt failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum AttemptError {
    #[error("{server} refused the session: {code} {message}")]
    Refused { server: String, code: ErrorCode, message: String },
    #[error("cannot reach {server}: {reason}")]
    Transport { server: String, reason: String },
    #[error("{server} broke the protocol: {reason}")]
    Protocol { server: String, reason: String },
    #[error("{server} did not answer within {after:?}")]
    Timeout { server: String, after: Duration },
}

/// An error and its sources, joined: tonic's top-level messages alone say
/// little. A source that only repeats the text so far is left out (tonic's
/// connect errors wrap one that says the same: "tcp connect error: tcp
/// connect error: ...").
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

pub(super) fn code_name(code: i32) -> String {
    ErrorCode::from_code(code).map_or_else(|| format!("unknown code {code}"), |c| c.to_string())
}

/// Opens a gRPC stream to `server`, sends `connect`, and waits for `Connected`.
pub(super) async fn attempt(
    server: ServerAddr,
    connect: pb::Connect,
    timeout: Duration,
    settings: Settings,
) -> Result<(Link, pb::Connected), AttemptError> {
    let name = server.to_string();
    let work = async {
        let transport = |e: &(dyn std::error::Error + 'static)| AttemptError::Transport {
            server: name.clone(),
            reason: error_chain(e),
        };
        let uri = match &settings.tls {
            Some(_) => format!("https://{server}"),
            None => server.uri(),
        };
        let mut endpoint = tonic::transport::Endpoint::from_shared(uri)
            .map_err(|e| transport(&e))?
            .connect_timeout(timeout)
            .tcp_nodelay(true);
        if let Some(tls) = &settings.tls {
            endpoint = endpoint.tls_config(tls.tonic_config()).map_err(|e| transport(&e))?;
        }
        let channel = endpoint.connect().await.map_err(|e| transport(&e))?;
        let mut grpc = pb::zab_keeper_client::ZabKeeperClient::new(channel)
            .max_decoding_message_size(settings.max_message_bytes)
            .max_encoding_message_size(settings.max_message_bytes);
        let (out, rx) = mpsc::channel(settings.max_pending + OUTBOUND_SLACK);
        let hello = pb::ClientMessage { kind: Some(pb::client_message::Kind::Connect(connect)) };
        out.try_send(hello).map_err(|_| AttemptError::Transport {
            server: name.clone(),
            reason: "the new outbound queue refused the Connect".into(),
        })?;
        let mut incoming = grpc.session(ReceiverStream::new(rx)).await.map_err(|s| transport(&s))?.into_inner();
        use pb::server_message::Kind;
        match incoming.message().await {
            Ok(Some(pb::ServerMessage { kind: Some(Kind::Connected(c)) })) => {
                Ok((Link { out, incoming, server: name.clone(), last_send: Instant::now() }, c))
            }
            Ok(Some(pb::ServerMessage { kind: Some(Kind::Closing(c)) })) => Err(AttemptError::Refused {
                server: name.clone(),
                code: ErrorCode::from_code(c.error).unwrap_or(ErrorCode::SystemError),
                message: c.message,
            }),
            Ok(Some(other)) => Err(AttemptError::Protocol {
                server: name.clone(),
                reason: format!("the first message was not Connected but {:?}", other.kind),
            }),
            Ok(None) => Err(AttemptError::Transport {
                server: name.clone(),
                reason: "the stream ended before Connected".into(),
            }),
            Err(status) => Err(transport(&status)),
        }
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(AttemptError::Timeout { server: name, after: timeout }),
    }
}

/// Checks a `Connected` before trusting it: a usable timeout, and the session
/// asked for when resuming.
pub(super) fn check_connected(c: &pb::Connected, resuming: i64, server: &str) -> Result<(), AttemptError> {
    let reason = if c.timeout_ms <= 0 {
        format!("negotiated a non-positive session timeout {} ms", c.timeout_ms)
    } else if c.session_id == 0 {
        "gave session id 0".to_string()
    } else if resuming != 0 && c.session_id != resuming {
        format!("resumed session {:#x} as {:#x}", resuming, c.session_id)
    } else {
        return Ok(());
    };
    Err(AttemptError::Protocol { server: server.to_string(), reason })
}

/// The error of a first connect that ran out of time: `Transport` when the
/// servers could not be reached at all, `ConnectionLoss` when they refused or
/// did not answer in time.
pub(super) fn give_up(hosts: &[ServerAddr], limit: Duration, last: Option<AttemptError>) -> ClientError {
    let names: Vec<String> = hosts.iter().map(ToString::to_string).collect();
    let summary = format!("no server of {} accepted a session within {limit:?}", names.join(","));
    match last {
        Some(AttemptError::Transport { server, reason }) => {
            ClientError::Transport { reason: format!("{summary}; {server}: {reason}"), server }
        }
        Some(other) => ClientError::ConnectionLoss(format!("{summary}; last error: {other}")),
        None => ClientError::ConnectionLoss(summary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn std::error::Error + 'static))
        }
    }

    #[test]
    fn error_chains_join_sources_without_repeating_them() {
        let refused = Layer("Connection refused", None);
        let inner = Layer("tcp connect error", Some(Box::new(refused)));
        let outer = Layer("tcp connect error", Some(Box::new(inner)));
        let top = Layer("transport error", Some(Box::new(outer)));
        assert_eq!(error_chain(&top), "transport error: tcp connect error: Connection refused");
    }

    #[test]
    fn connected_is_checked_before_it_is_trusted() {
        let good = pb::Connected { session_id: 5, timeout_ms: 3000, ..Default::default() };
        assert!(check_connected(&good, 0, "s").is_ok());
        assert!(check_connected(&good, 5, "s").is_ok());
        assert!(check_connected(&good, 6, "s").unwrap_err().to_string().contains("resumed session"));
        let zero = pb::Connected { timeout_ms: 0, ..good.clone() };
        assert!(check_connected(&zero, 0, "s").is_err());
        let no_id = pb::Connected { session_id: 0, ..good };
        assert!(check_connected(&no_id, 0, "s").is_err());
    }
}
