//! Admission of client connections: a cap on all of a port's connections
//! and one per client address (ZooKeeper's `maxClientCnxns`), so idle or
//! hostile sockets from one host cannot take every slot.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The connection caps of one port.
#[derive(Debug)]
pub struct ConnectionLimits {
    total: usize,
    per_address: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The port holds its maximum of connections.
    #[error("the port already holds its maximum of {limit} connections (max_client_connections)")]
    Full {
        /// The cap.
        limit: usize,
    },
    /// This address holds its maximum.
    #[error(
        "{address} already holds {limit} connections, the most one address may (max_client_connections_per_address)"
    )]
    PerAddress {
        /// The client's address.
        address: IpAddr,
        /// The cap.
        limit: usize,
    },
}

/// A slot held by one admitted connection; dropping it frees the slot.
#[derive(Debug)]
pub struct Admitted {
    limits: Arc<ConnectionLimits>,
    address: IpAddr,
}

impl ConnectionLimits {
    /// Caps of `total` connections and `per_address` from one address (0: no per-address cap).
    pub fn new(total: usize, per_address: usize) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits { total, per_address, open: Mutex::default() })
    }

    /// Admits a connection from `address`, or says which cap refuses it.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, Refused> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.total {
            return Err(Refused::Full { limit: self.total });
        }
        let from_here = open.by_address.entry(address).or_default();
        if self.per_address > 0 && *from_here >= self.per_address {
            return Err(Refused::PerAddress { address, limit: self.per_address });
        }
        *from_here += 1;
        open.total += 1;
        Ok(Admitted { limits: self.clone(), address })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).total
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_address.get_mut(&self.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}

/// An accepted TCP connection holding its slot until it closes.
pub struct LimitedStream {
    stream: tokio::net::TcpStream,
    _slot: Admitted,
}

impl tokio::io::AsyncRead for LimitedStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for LimitedStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// The connections `listener` accepts within `limits`, for a gRPC server:
/// one over a cap is closed at once, with a log line naming the cap.
pub fn limited_incoming(
    listener: tokio::net::TcpListener,
    limits: Arc<ConnectionLimits>,
) -> impl futures::Stream<Item = std::io::Result<LimitedStream>> {
    futures::stream::unfold((listener, limits), |(listener, limits)| async move {
        loop {
            match listener.accept().await {
                Ok((stream, client_addr)) => match limits.admit(client_addr.ip()) {
                    Ok(slot) => {
                        let _ = stream.set_nodelay(true);
                        return Some((Ok(LimitedStream { stream, _slot: slot }), (listener, limits)));
                    }
                    Err(refused) => tracing::warn!(%client_addr, %refused, "gRPC connection refused"),
                },
                Err(e) => {
                    // Out of file descriptors and the like: pause, then go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_address_and_total_caps_hold_and_free_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let first = limits.admit(a).expect("first");
        let _second = limits.admit(a).expect("second");
        assert_eq!(limits.admit(a).unwrap_err(), Refused::PerAddress { address: a, limit: 2 });
        let _other = limits.admit(b).expect("another address");
        assert_eq!(limits.admit(b).unwrap_err(), Refused::Full { limit: 3 });
        drop(first);
        assert_eq!(limits.open(), 2);
        assert!(limits.admit(a).is_ok(), "a freed slot is taken again");
        let unlimited = ConnectionLimits::new(100, 0);
        let held: Vec<_> = (0..50).map(|_| unlimited.admit(a).expect("no per-address cap")).collect();
        assert_eq!(unlimited.open(), held.len());
    }
}
