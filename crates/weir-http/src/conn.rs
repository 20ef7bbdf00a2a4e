//! What a handler may know of the connection a request came on. Plain data:
//! never holds the connection itself.

use std::net::SocketAddr;

use crate::worker::Worker;

/// What a handler may need to know about the connection a request came on.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The client (after the PROXY protocol, when a listener accepts it).
    pub peer: SocketAddr,
    /// The local address the connection was accepted on.
    pub local: SocketAddr,
    /// Whether the client connection is TLS (HTTPS, HTTP/3).
    pub tls: bool,
    /// The worker the connection runs on: the slot of per-worker state
    /// (upstream pools, balancers) its requests use.
    pub worker: Worker,
}
