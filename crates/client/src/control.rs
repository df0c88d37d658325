//! The messages that reach a session's task out of band: a dropped
//! persistent watcher and a close, sent by watchers and the application.

use super::error::ClientError;
use crate::tree::watch::AddWatchMode;
use tokio::sync::oneshot;

/// Messages that must reach the task even while it does not take requests
/// (disconnected, or at the in-flight limit). Their number is bounded by the
/// number of watchers and close calls.
pub(crate) enum Control {
    /// A persistent watcher was dropped or removed.
    DropPersistent {
        mode: AddWatchMode,
        path: String,
        id: u64,
        reply: Option<oneshot::Sender<Result<(), ClientError>>>,
    },
    /// Close the session.
    Close { reply: oneshot::Sender<Result<(), ClientError>> },
}
