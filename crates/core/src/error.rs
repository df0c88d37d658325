//! ZooKeeper's client-visible error codes (`KeeperException.Code`), as data.
//!
//! A code is produced deterministically while a request is prepared or a
//! transaction applied, travels inside replicated transactions, and is encoded
//! unchanged into the jute `ReplyHeader.err` or the gRPC `Response.error`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One ZooKeeper error code; the discriminant is the wire number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i32)]
pub enum ErrorCode {
    /// Everything is fine.
    Ok = 0,
    /// An unexpected server-side failure.
    SystemError = -1,
    /// A state inconsistency (also: ops after a failed one inside a multi).
    RuntimeInconsistency = -2,
    /// Data inconsistency found.
    DataInconsistency = -3,
    /// The connection to the server was lost (client-side).
    ConnectionLoss = -4,
    /// A request or response could not be (de)serialized.
    MarshallingError = -5,
    /// The operation is not implemented by this server.
    Unimplemented = -6,
    /// The operation timed out (client-side).
    OperationTimeout = -7,
    /// Invalid arguments.
    BadArguments = -8,
    /// The session is unknown to the server.
    UnknownSession = -12,
    /// No quorum of the new config is connected.
    NewConfigNoQuorum = -13,
    /// Another reconfiguration is in progress.
    ReconfigInProgress = -14,
    /// A generic API error.
    ApiError = -100,
    /// The node does not exist.
    NoNode = -101,
    /// Not authorized by the node's ACL.
    NoAuth = -102,
    /// The expected version does not match.
    BadVersion = -103,
    /// Ephemeral nodes may not have children.
    NoChildrenForEphemerals = -108,
    /// The node already exists.
    NodeExists = -110,
    /// The node has children.
    NotEmpty = -111,
    /// The session has expired.
    SessionExpired = -112,
    /// An invalid callback was given.
    InvalidCallback = -113,
    /// The ACL is invalid.
    InvalidAcl = -114,
    /// Client authentication failed.
    AuthFailed = -115,
    /// The session moved to another server.
    SessionMoved = -118,
    /// A state-changing request was sent to a read-only server.
    NotReadOnly = -119,
    /// Ephemerals cannot be created on a local session.
    EphemeralOnLocalSession = -120,
    /// The watcher to remove or check does not exist.
    NoWatcher = -121,
    /// The request timed out waiting for a quorum.
    RequestTimeout = -122,
    /// Reconfiguration is disabled.
    ReconfigDisabled = -123,
    /// The session was closed because SASL authentication is required.
    SessionClosedRequireSaslAuth = -124,
    /// A quota was exceeded.
    QuotaExceeded = -125,
    /// The operation was throttled; retry later.
    ThrottledOp = -127,
}

impl ErrorCode {
    /// The wire number.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code for a wire number, `None` for numbers ZooKeeper does not define.
    pub fn from_code(code: i32) -> Option<ErrorCode> {
        use ErrorCode::*;
        Some(match code {
            0 => Ok,
            -1 => SystemError,
            -2 => RuntimeInconsistency,
            -3 => DataInconsistency,
            -4 => ConnectionLoss,
            -5 => MarshallingError,
            -6 => Unimplemented,
            -7 => OperationTimeout,
            -8 => BadArguments,
            -12 => UnknownSession,
            -13 => NewConfigNoQuorum,
            -14 => ReconfigInProgress,
            -100 => ApiError,
            -101 => NoNode,
            -102 => NoAuth,
            -103 => BadVersion,
            -108 => NoChildrenForEphemerals,
            -110 => NodeExists,
            -111 => NotEmpty,
            -112 => SessionExpired,
            -113 => InvalidCallback,
            -114 => InvalidAcl,
            -115 => AuthFailed,
            -118 => SessionMoved,
            -119 => NotReadOnly,
            -120 => EphemeralOnLocalSession,
            -121 => NoWatcher,
            -122 => RequestTimeout,
            -123 => ReconfigDisabled,
            -124 => SessionClosedRequireSaslAuth,
            -125 => QuotaExceeded,
            -127 => ThrottledOp,
            _ => return None,
        })
    }

    /// ZooKeeper's name for the code, as `KeeperException` prints it.
    pub fn name(self) -> &'static str {
        use ErrorCode::*;
        match self {
            Ok => "OK",
            SystemError => "SystemError",
            RuntimeInconsistency => "RuntimeInconsistency",
            DataInconsistency => "DataInconsistency",
            ConnectionLoss => "ConnectionLoss",
            MarshallingError => "MarshallingError",
            Unimplemented => "Unimplemented",
            OperationTimeout => "OperationTimeout",
            BadArguments => "BadArguments",
            UnknownSession => "UnknownSession",
            NewConfigNoQuorum => "NewConfigNoQuorum",
            ReconfigInProgress => "ReconfigInProgress",
            ApiError => "APIError",
            NoNode => "NoNode",
            NoAuth => "NoAuth",
            BadVersion => "BadVersion",
            NoChildrenForEphemerals => "NoChildrenForEphemerals",
            NodeExists => "NodeExists",
            NotEmpty => "NotEmpty",
            SessionExpired => "SessionExpired",
            InvalidCallback => "InvalidCallback",
            InvalidAcl => "InvalidACL",
            AuthFailed => "AuthFailed",
            SessionMoved => "SessionMoved",
            NotReadOnly => "NotReadOnly",
            EphemeralOnLocalSession => "EphemeralOnLocalSession",
            NoWatcher => "NoWatcher",
            RequestTimeout => "RequestTimeout",
            ReconfigDisabled => "ReconfigDisabled",
            SessionClosedRequireSaslAuth => "SessionClosedRequireSaslAuth",
            QuotaExceeded => "QuotaExceeded",
            ThrottledOp => "ThrottledOp",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// An error of one request: the code, the path it concerns and, where the code
/// alone does not say it, a reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}{}{}", path_suffix(.path), reason_suffix(.reason))]
pub struct ZkError {
    /// The ZooKeeper code.
    pub code: ErrorCode,
    /// The path the error concerns, empty when none.
    pub path: String,
    /// A human-readable reason, empty when the code says it all.
    pub reason: String,
}

fn path_suffix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" for {path}")
    }
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

impl ZkError {
    /// An error with a code and path.
    pub fn new(code: ErrorCode, path: impl Into<String>) -> ZkError {
        ZkError { code, path: path.into(), reason: String::new() }
    }

    /// An error with a code, path and reason.
    pub fn with_reason(code: ErrorCode, path: impl Into<String>, reason: impl Into<String>) -> ZkError {
        ZkError { code, path: path.into(), reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_number() {
        for n in -200..=10 {
            if let Some(code) = ErrorCode::from_code(n) {
                assert_eq!(code.code(), n);
            }
        }
        assert_eq!(ErrorCode::from_code(-101), Some(ErrorCode::NoNode));
        assert_eq!(ErrorCode::from_code(-9), None);
    }

    #[test]
    fn error_message_names_code_path_and_reason() {
        let e = ZkError::with_reason(ErrorCode::BadArguments, "/a/", "trailing slash");
        assert_eq!(e.to_string(), "BadArguments (-8) for /a/: trailing slash");
    }
}
