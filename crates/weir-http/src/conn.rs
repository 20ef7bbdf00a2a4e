//! What a handler may know of the connection a request came on. Plain data:
//! never holds the connection itself.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::worker::Worker;

/// What a handler may need to know about the connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client (after the PROXY protocol, when a listener accepts it).
    pub peer: SocketAddr,
    /// The local address the connection was accepted on.
    pub local: SocketAddr,
    /// Whether the client connection is TLS (HTTPS, HTTP/3).
    pub tls: bool,
    /// What the TLS handshake settled, kept only on listeners where a
    /// site's access log writes it (`None` otherwise, and on plain TCP).
    pub tls_info: Option<Arc<TlsInfo>>,
    /// The worker the connection runs on: the slot of per-worker state
    /// (upstream pools, balancers) its requests use.
    pub worker: Worker,
}

/// What a TLS handshake settled, taken once per connection for the access
/// log's `tls_*` variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// `TLSv1.2`, `TLSv1.3`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS_AES_128_GCM_SHA256`); empty when
    /// the TLS stack does not say (QUIC).
    pub cipher: &'static str,
    /// The name the client asked for (SNI), if it sent one.
    pub server_name: Option<Box<str>>,
    /// The protocol ALPN chose (`h2`, `http/1.1`, `h3`), if any.
    pub alpn: Option<&'static str>,
}

impl TlsInfo {
    /// An ALPN protocol as one of the names weir offers (`None` for any
    /// other: weir offers no other).
    pub fn alpn_name(p: &[u8]) -> Option<&'static str> {
        match p {
            b"h2" => Some("h2"),
            b"http/1.1" => Some("http/1.1"),
            b"h3" => Some("h3"),
            b"acme-tls/1" => Some("acme-tls/1"),
            _ => None,
        }
    }
}
