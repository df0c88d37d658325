//! The ZooKeeper client port: accepts connections (at most
//! [`MAX_CONNECTIONS`] at once) and serves each on its own task until shutdown.

use super::connection;
use crate::server::ServerHandle;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Most client connections served at once on this port.
pub const MAX_CONNECTIONS: usize = 10_000;

/// Accepts connections until `stop` turns true.
pub async fn run(listener: TcpListener, handle: ServerHandle, mut stop: watch::Receiver<bool>) -> Result<(), String> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::from_millis(10);
    let connection_stop = stop.clone();
    loop {
        tokio::select! {
            _ = crate::server::stopped(&mut stop) => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    backoff = Duration::from_millis(10);
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "too many connections; refusing");
                        continue;
                    };
                    let handle = handle.clone();
                    let stop = connection_stop.clone();
                    tokio::spawn(async move {
                        connection::serve(socket, peer, handle, stop).await;
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
