//! `weir-bench relay`: the floor for any proxy on this machine. Each client
//! connection gets its own upstream connection and bytes are copied both
//! ways, with no HTTP at all: no parsing, no fields added, no pool, no
//! timeouts. A real proxy does all of that and more, so against the same
//! backend and generator its requests per second should not be higher; the
//! relay's rate says how much of a proxy benchmark is the machine (the
//! generator, the backend and the kernel's loopback TCP) and how much is
//! left for the proxy to win or lose (BENCHMARKS.md §6).
//!
//! The same shape as weir and `backend`: one current-thread runtime per
//! thread, each with its own `SO_REUSEPORT` listener.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use crate::backend::StartError;

/// Relay settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Where every connection is relayed to.
    pub to: SocketAddr,
    /// Threads (each with its own listener socket).
    pub threads: usize,
}

/// Starts the relay on background threads; returns the bound address once
/// it listens.
pub fn start(cfg: &RelayConfig) -> Result<SocketAddr, StartError> {
    let to = cfg.to;
    crate::backend::serve_on_threads(cfg.listen, cfg.threads, "relay", move |c| relay(c, to))
}

/// Copies one client connection to a new upstream connection and back
/// until either side closes.
async fn relay(mut client: TcpStream, to: SocketAddr) {
    let Ok(mut upstream) = TcpStream::connect(to).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
