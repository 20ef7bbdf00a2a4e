//! Graceful shutdown of one worker's connections: the signal that tells
//! them to finish the request in hand and close, and the wait for them.
//!
//! hyper-util's `GracefulShutdown` does the same for hyper's connection
//! types only (its trait is sealed), and weir's own HTTP/1 loop
//! (`server::http1`) must hear the signal too; so both kinds watch a
//! [`Signal`] from here. A worker has its own [`Drain`], so the signal is
//! never shared across threads on the hot path.

use std::pin::pin;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::watch;

/// The sending side, one per worker.
pub struct Drain {
    tx: watch::Sender<bool>,
}

/// What a connection holds: drain waits until every `Signal` is dropped.
#[derive(Clone)]
pub struct Signal {
    rx: watch::Receiver<bool>,
}

impl Drain {
    pub fn new() -> Self {
        Drain {
            tx: watch::channel(false).0,
        }
    }

    pub fn signal(&self) -> Signal {
        Signal {
            rx: self.tx.subscribe(),
        }
    }

    /// Tells every connection to finish, then waits until all have.
    pub async fn drain(self) {
        let _ = self.tx.send(true);
        self.tx.closed().await;
    }
}

impl Signal {
    /// Resolves once shutdown has begun.
    pub async fn signaled(&mut self) {
        let _ = self.rx.wait_for(|s| *s).await;
    }

    /// Whether shutdown has begun: one atomic load, for the hot path.
    pub fn is_signaled(&self) -> bool {
        // The version moves only when shutdown is sent; an error means the
        // worker is gone, which is shutdown too.
        self.rx.has_changed().unwrap_or(true)
    }

    /// Runs a hyper connection, asking it to finish gracefully once the
    /// signal comes; the signal is held until the connection has ended.
    pub async fn watch<C: GracefulConnection>(mut self, conn: C) -> C::Output {
        let mut conn = pin!(conn);
        tokio::select! {
            r = conn.as_mut() => return r,
            _ = self.signaled() => conn.as_mut().graceful_shutdown(),
        }
        conn.await
    }
}
