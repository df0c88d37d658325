//! The runtime of one member: the pure [`Replica`](zabkeeper_core::replica::Replica)
//! driven by tokio, with storage on its own thread.
//!
//! One owner task ([`start`]) holds the replica and is the only one that
//! touches it. Everything else talks to it through one bounded inbox of
//! [`Event`](handle::Event)s, held as a [`Handle`]: the client ports, the
//! operations surface, the peer transport, the storage worker (group commit
//! on its own thread) and the snapshot writer. Each turn of the owner takes
//! every event already waiting, then carries out the replica's outputs in
//! order: one storage batch per turn, one flush for many transactions.
//!
//! The runtime names no network: the links to other members are a [`Links`]
//! the composition root hands in, made by the peer transport.

pub mod crash;
pub mod disk;
mod effects;
pub mod handle;
mod owner;
mod rounds;
pub mod storage_worker;

#[cfg(test)]
mod tests;

use crate::security::tls;
use handle::Handle;
use zabkeeper_core::ids::ServerId;
use zabkeeper_core::zab::{Message, Status};

pub use owner::start;

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Storage failed at start or while running.
    #[error("storage: {0}")]
    Storage(String),
    /// A TLS certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A listener could not bind.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The address.
        addr: zabkeeper_config::HostPort,
        /// Which port.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A thread could not start.
    #[error("cannot start the storage thread: {0}")]
    Thread(std::io::Error),
    /// A task that holds the replica or its durability panicked: the member
    /// stops (crash-stop) and its supervisor sees a failure, not a clean exit.
    #[error("the {task} panicked: {message}")]
    Panicked {
        /// Which task.
        task: &'static str,
        /// The panic's message.
        message: String,
    },
}

impl ServerError {
    /// What a task's join handle says, as the member's result: a panic or a
    /// cancellation is a failure of the member, never a clean stop.
    pub fn joined(
        task: &'static str,
        joined: Result<Result<(), ServerError>, tokio::task::JoinError>,
    ) -> Result<(), ServerError> {
        match joined {
            Ok(result) => result,
            Err(e) if e.is_panic() => {
                Err(ServerError::Panicked { task, message: zabkeeper_core::panics::message(e.into_panic().as_ref()) })
            }
            Err(_) => Err(ServerError::Panicked { task, message: "cancelled before it stopped".into() }),
        }
    }
}

/// A started replica: the handle front ends use and the owner's join handle.
pub struct Started {
    /// For the front ends.
    pub handle: Handle,
    /// Finishes when the owner task stops (after `shutdown` fires).
    pub owner: tokio::task::JoinHandle<Result<(), ServerError>>,
}

/// What the owner asks of the links to other members. The peer transport
/// supplies it; every call returns at once (a send is lossy and queued).
pub trait Links: Send + 'static {
    /// Sends `msg` to member `to`, dropping it if the link is down or full.
    fn send(&mut self, to: ServerId, msg: Message);
    /// Where the members of the configuration in force are reached.
    fn learn(&mut self, addrs: Vec<(ServerId, zabkeeper_config::HostPort)>);
    /// The replica's role, epoch or leader changed: follow the new leader.
    fn on_status(&mut self, status: Status);
    /// Ends every link, so the peer listener's graceful stop need not wait.
    fn shut_down(&mut self);
}
