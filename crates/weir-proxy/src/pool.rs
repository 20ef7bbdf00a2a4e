//! Upstream connections: opening them (TCP or Unix socket, PROXY protocol
//! header, TLS with SNI, HTTP/1.1 or HTTP/2 handshake) and keeping idle
//! HTTP/1.1 ones for reuse. Every HTTP/1.1 connection is weir's own
//! (`h1_client`: requests, streamed bodies, upgrades, health checks);
//! HTTP/2 upstreams are hyper's.
//!
//! The pools are per worker (a `Pools` in each of the proxy's per-worker
//! slots), so workers never contend for them: with the per-core runtime a
//! connection never leaves the worker that opened it. Idle connections are kept most-recent first, at most
//! `max_idle` per upstream, and dropped once idle longer than `idle_timeout`
//! (checked when the pool is touched; a connection the upstream closed is
//! noticed at checkout and skipped). Never decides which upstream to use.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::ProxyError;
use super::h1_client::Conn;
use super::proxy_protocol;
use weir_config::proxy::{ProxyProtocolVersion, UpstreamConfig, UpstreamTarget};
use weir_http::body::Body;

/// A ready-to-use request sender on one upstream connection.
pub enum Sender {
    H2(http2::SendRequest<Body>),
    /// weir's own HTTP/1.1 client, driven by the request's task.
    Own(Conn),
}

struct Idle {
    since: Instant,
    /// Always `Own`.
    tx: Sender,
}

/// One worker's idle connections to each upstream of one proxy, indexed
/// like the proxy's upstreams (no hashing on the request path).
pub struct Pools {
    ups: Vec<UpstreamPool>,
}

#[derive(Default)]
struct UpstreamPool {
    /// Oldest at the front.
    h1: VecDeque<Idle>,
    h2: Option<http2::SendRequest<Body>>,
}

impl Pools {
    pub fn new(upstreams: usize) -> Pools {
        Pools {
            ups: (0..upstreams).map(|_| UpstreamPool::default()).collect(),
        }
    }

    /// A pooled connection to upstream `idx` to reuse, if one is alive.
    pub fn checkout(&mut self, idx: usize, idle_timeout: Duration) -> Option<Sender> {
        let p = self.ups.get_mut(idx)?;
        if let Some(tx) = &p.h2 {
            if !tx.is_closed() {
                return Some(Sender::H2(tx.clone()));
            }
            p.h2 = None;
        }
        let q = &mut p.h1;
        let now = weir_http::clock::now();
        while q
            .front()
            .is_some_and(|i| now.duration_since(i.since) >= idle_timeout)
        {
            q.pop_front();
        }
        while let Some(mut i) = q.pop_back() {
            let open = match &mut i.tx {
                Sender::Own(c) => c.is_idle_and_open(),
                Sender::H2(_) => false,
            };
            if open {
                return Some(i.tx);
            }
        }
        None
    }

    /// Takes back an HTTP/1.1 connection to upstream `idx` whose response
    /// is complete; the oldest goes past `max_idle`.
    pub fn checkin(&mut self, idx: usize, tx: Sender, max_idle: usize) {
        let open = matches!(tx, Sender::Own(_));
        let Some(p) = self.ups.get_mut(idx) else {
            return;
        };
        if max_idle == 0 || !open {
            return;
        }
        p.h1.push_back(Idle {
            since: weir_http::clock::now(),
            tx,
        });
        while p.h1.len() > max_idle {
            p.h1.pop_front();
        }
    }

    /// Shares an HTTP/2 connection to upstream `idx` with later requests.
    pub fn share_h2(&mut self, idx: usize, tx: &http2::SendRequest<Body>) {
        if let Some(p) = self.ups.get_mut(idx) {
            p.h2 = Some(tx.clone());
        }
    }

    /// Moves the idle connections held for upstream `from` of `other` into
    /// this pool's upstream `to` (a reloaded proxy keeps the connections of
    /// an unchanged upstream).
    pub fn adopt(&mut self, to: usize, other: &mut Pools, from: usize) {
        if let (Some(mine), Some(theirs)) = (self.ups.get_mut(to), other.ups.get_mut(from)) {
            *mine = std::mem::take(theirs);
        }
    }

    /// Idle HTTP/1.1 connections held for upstream `idx` (for tests and metrics).
    pub fn idle_count(&self, idx: usize) -> usize {
        self.ups.get(idx).map_or(0, |p| p.h1.len())
    }
}

/// What opening a connection needs besides the upstream.
pub struct ConnectOpts<'a> {
    pub timeout: Duration,
    pub dns_ttl: Duration,
    /// The DNS answers of the worker opening the connection.
    pub dns: &'a super::dns::Resolver,
    pub proxy_protocol: Option<ProxyProtocolVersion>,
    /// The client connection's addresses, for the PROXY header.
    pub client: (SocketAddr, SocketAddr),
    pub tls: Option<&'a tokio_rustls::TlsConnector>,
    pub sni: Option<&'a str>,
}

/// Opens a new connection to `up` and hands back its sender; the connection
/// itself is driven by a task on the current runtime.
pub async fn connect(up: &UpstreamConfig, o: &ConnectOpts<'_>) -> Result<Sender, ProxyError> {
    match tokio::time::timeout(o.timeout, connect_inner(up, o)).await {
        Ok(r) => r,
        Err(_) => Err(ProxyError::ConnectTimeout(o.timeout)),
    }
}

async fn connect_inner(up: &UpstreamConfig, o: &ConnectOpts<'_>) -> Result<Sender, ProxyError> {
    match &up.target {
        UpstreamTarget::Tcp { host, port } => {
            let addrs = o
                .dns
                .resolve(host, *port, o.dns_ttl)
                .await
                .map_err(ProxyError::Resolve)?;
            let mut last = None;
            for a in addrs {
                match tokio::net::TcpStream::connect(a).await {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        return finish(s, up, o, host).await;
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(ProxyError::Connect(last.unwrap_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "no addresses")
            })))
        }
        UpstreamTarget::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path)
                .await
                .map_err(ProxyError::Connect)?;
            finish(s, up, o, "localhost").await
        }
    }
}

async fn finish<S>(
    mut s: S,
    up: &UpstreamConfig,
    o: &ConnectOpts<'_>,
    host: &str,
) -> Result<Sender, ProxyError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if let Some(v) = o.proxy_protocol {
        let (src, dst) = o.client;
        let hdr = match v {
            ProxyProtocolVersion::V1 => proxy_protocol::write_v1(src, dst),
            ProxyProtocolVersion::V2 => proxy_protocol::write_v2(src, dst),
        };
        s.write_all(&hdr).await.map_err(ProxyError::Connect)?;
    }
    if up.scheme.is_tls() {
        let Some(tls) = o.tls else {
            return Err(ProxyError::Tls(std::io::Error::other(
                "no TLS client config",
            )));
        };
        let name = o.sni.unwrap_or(host).to_string();
        let server_name = rustls_pki_types::ServerName::try_from(name)
            .map_err(|e| ProxyError::Tls(std::io::Error::other(e)))?;
        let t = tls.connect(server_name, s).await.map_err(ProxyError::Tls)?;
        return handshake(t, up.scheme.is_h2()).await;
    }
    handshake(s, up.scheme.is_h2()).await
}

async fn handshake<S>(s: S, h2: bool) -> Result<Sender, ProxyError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !h2 {
        return Ok(Sender::Own(Conn::new(Box::new(s))));
    }
    let (tx, conn) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(s))
        .await
        .map_err(ProxyError::Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream h2 connection: {e}");
        }
    });
    Ok(Sender::H2(tx))
}

/// The TLS client config for upstreams: system roots, or no verification
/// when the user opted out.
pub fn tls_connector(verify: bool, h2: bool) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions");
    let mut cfg = if verify {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for c in native.certs {
            let _ = roots.add(c);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    };
    cfg.alpn_protocols = if h2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// `tls_verify = false`: accepts any certificate, still checks handshake signatures.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_conn() -> (Sender, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(64);
        (Sender::Own(Conn::new(Box::new(ours))), theirs)
    }

    #[tokio::test]
    async fn keeps_the_newest_per_upstream_and_skips_closed_ones() {
        let mut p = Pools::new(2);
        let (a, _a) = idle_conn();
        let (b, b_peer) = idle_conn();
        let (c, _c) = idle_conn();
        p.checkin(0, a, 2);
        p.checkin(0, b, 2);
        // Past max_idle the oldest (a) goes.
        p.checkin(0, c, 2);
        assert_eq!((p.idle_count(0), p.idle_count(1)), (2, 0));
        // Upstream 1 has its own queue; an index past the upstreams is ignored.
        let (d, _d) = idle_conn();
        p.checkin(7, d, 2);
        assert!(p.checkout(1, Duration::from_secs(60)).is_none());
        // Newest first (c); then b, whose upstream closed it, is skipped.
        assert!(p.checkout(0, Duration::from_secs(60)).is_some());
        drop(b_peer);
        assert!(p.checkout(0, Duration::from_secs(60)).is_none());
        assert_eq!(p.idle_count(0), 0);
    }

    #[tokio::test]
    async fn drops_connections_idle_past_the_timeout() {
        let mut p = Pools::new(1);
        let (a, _a) = idle_conn();
        p.checkin(0, a, 4);
        assert!(p.checkout(0, Duration::ZERO).is_none());
        let (b, _b) = idle_conn();
        p.checkin(0, b, 0);
        assert_eq!(p.idle_count(0), 0, "max_idle 0 keeps none");
    }
}
