//! What a client call can fail with: a server's ZooKeeper error code, or a
//! client-side condition (connection loss, expiry, closing, time limits).

use super::multi::MultiResult;
use std::time::Duration;
use zabkeeper_core::error::{ErrorCode, ZkError};

/// Why a client operation failed.
///
/// `Display` always names the ZooKeeper code where one applies, e.g.
/// `NoNode (-101) for /x` or `ConnectionLoss (-4): ...`.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error code (the path and reason it gave are kept).
    #[error(transparent)]
    Server(#[from] ZkError),
    /// A `multi` was not applied: `error` is the first failing op's error (as
    /// the Java client throws it) and `results` has every op's outcome.
    #[error("multi op #{index} failed: {error}")]
    MultiFailed {
        /// Index of the first failing op.
        index: usize,
        /// Its error, with the op's path.
        error: ZkError,
        /// Every op's outcome (ops after the failing one carry RuntimeInconsistency).
        results: Vec<MultiResult>,
    },
    /// The connection broke before the answer arrived; a write may or may not have been applied.
    #[error("ConnectionLoss (-4): {0}")]
    ConnectionLoss(String),
    /// The session expired: its ephemerals and watches are gone and this client is unusable.
    #[error("SessionExpired (-112): the session expired")]
    SessionExpired,
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// A time limit passed before the operation finished.
    #[error("OperationTimeout (-7): {what} did not finish within {after:?}")]
    Timeout {
        /// What timed out.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The connect string is malformed.
    #[error("invalid connect string {input:?}: {reason}")]
    InvalidConnectString {
        /// The string given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No server could be reached at the transport level (TCP, HTTP/2) to start a session.
    #[error("ConnectionLoss (-4): {reason}")]
    Transport {
        /// The last server tried.
        server: String,
        /// What happened, with the transport's message.
        reason: String,
    },
    /// The server sent something the protocol does not allow; the connection was dropped.
    #[error("MarshallingError (-5): protocol violation by the server: {0}")]
    Protocol(String),
    /// An argument was rejected before anything was sent.
    #[error("BadArguments (-8): {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// The ZooKeeper code this error corresponds to, if any (`Closed` has none).
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            ClientError::Server(e) => e.code,
            ClientError::MultiFailed { error, .. } => error.code,
            ClientError::ConnectionLoss(_) | ClientError::Transport { .. } => ErrorCode::ConnectionLoss,
            ClientError::SessionExpired => ErrorCode::SessionExpired,
            ClientError::Timeout { .. } => ErrorCode::OperationTimeout,
            ClientError::Protocol(_) => ErrorCode::MarshallingError,
            ClientError::InvalidConnectString { .. } | ClientError::InvalidArgument(_) => ErrorCode::BadArguments,
            ClientError::Closed => return None,
        })
    }

    /// Whether the server answered with exactly this code.
    pub fn is_server_code(&self, code: ErrorCode) -> bool {
        matches!(self, ClientError::Server(e) if e.code == code)
    }

    /// Whether the error is about reaching the ensemble rather than about the request
    /// (connection loss, transport, timeout, expiry, closed).
    pub fn is_connection_problem(&self) -> bool {
        matches!(
            self,
            ClientError::ConnectionLoss(_)
                | ClientError::Transport { .. }
                | ClientError::Timeout { .. }
                | ClientError::SessionExpired
                | ClientError::Closed
                | ClientError::InvalidConnectString { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_zookeeper_code() {
        let e = ClientError::from(ZkError::new(ErrorCode::NoNode, "/x"));
        assert_eq!(e.to_string(), "NoNode (-101) for /x");
        assert_eq!(e.code(), Some(ErrorCode::NoNode));
        assert!(e.is_server_code(ErrorCode::NoNode));
        assert!(!e.is_connection_problem());
        let loss = ClientError::ConnectionLoss("stream ended".into());
        assert_eq!(loss.to_string(), "ConnectionLoss (-4): stream ended");
        assert!(loss.is_connection_problem());
        assert_eq!(ClientError::SessionExpired.code(), Some(ErrorCode::SessionExpired));
        assert_eq!(ClientError::Closed.code(), None);
    }

    #[test]
    fn multi_failure_shows_the_first_failing_op() {
        let e = ClientError::MultiFailed {
            index: 1,
            error: ZkError::new(ErrorCode::BadVersion, "/b"),
            results: vec![MultiResult::Error(ErrorCode::Ok), MultiResult::Error(ErrorCode::BadVersion)],
        };
        assert_eq!(e.to_string(), "multi op #1 failed: BadVersion (-103) for /b");
        assert_eq!(e.code(), Some(ErrorCode::BadVersion));
    }
}
