//! What a client's session task is set up with: the settings the
//! application chose, and the room its outbound queue keeps for the task's own
//! messages.

use super::reconnect::Backoff;
use std::time::Duration;

/// Room in the outbound queue beyond the application's requests, for pings,
/// SetWatches chunks, re-auth and watch removals.
pub(crate) const OUTBOUND_SLACK: usize = 4096;

/// The settings the session task needs, and the dialing of each server.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Session timeout asked for.
    pub session_timeout: Duration,
    /// Limit for the first connect, and for each reconnect attempt.
    pub connect_timeout: Duration,
    /// Most requests in flight.
    pub max_pending: usize,
    /// Largest message sent or received.
    pub max_message_bytes: usize,
    /// Waits between reconnect rounds.
    pub backoff: Backoff,
    /// TLS, when the servers speak it.
    pub tls: Option<super::tls::ClientTls>,
}
