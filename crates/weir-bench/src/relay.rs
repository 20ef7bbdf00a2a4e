//! `weir-bench relay`: the floor for any proxy on this machine. Each client
//! connection gets its own upstream connection and bytes are copied both
//! ways, with no HTTP at all: no parsing, no fields added, no pool, no
//! timeouts. A real proxy does all of that and more, so its requests per
//! second against the same backend and generator can only be lower; the
//! relay's rate says how much of a proxy benchmark is the machine (the
//! generator, the backend and the kernel's loopback TCP) and how much is
//! left for the proxy to win or lose (BENCHMARKS.md §6).
//!
//! The same shape as weir and `backend`: one current-thread runtime per
//! thread, each with its own `SO_REUSEPORT` listener.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// Errors starting the relay.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Binding the listen address failed.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// A thread or runtime could not be started.
    #[error("cannot start relay thread: {0}")]
    Thread(std::io::Error),
}

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
pub fn start(cfg: &RelayConfig) -> Result<SocketAddr, RelayError> {
    let first = crate::backend::bind(cfg.listen).map_err(|e| RelayError::Bind(cfg.listen, e))?;
    let addr = first
        .local_addr()
        .map_err(|e| RelayError::Bind(cfg.listen, e))?;
    let mut listeners = vec![first];
    for _ in 1..cfg.threads.max(1) {
        listeners.push(crate::backend::bind(addr).map_err(|e| RelayError::Bind(addr, e))?);
    }
    for (i, l) in listeners.into_iter().enumerate() {
        let to = cfg.to;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RelayError::Thread)?;
        std::thread::Builder::new()
            .name(format!("relay-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(l) = TcpListener::from_std(l) else {
                        return;
                    };
                    loop {
                        let Ok((c, _)) = l.accept().await else {
                            continue;
                        };
                        tokio::spawn(relay(c, to));
                    }
                })
            })
            .map_err(RelayError::Thread)?;
    }
    Ok(addr)
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
