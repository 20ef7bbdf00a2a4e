//! A proxy's upstreams used for byte streams rather than HTTP requests:
//! the layer-4 proxy (`[tcp]`, TLS passthrough) and FastCGI. Choosing an
//! upstream (balancer, health, admin state), its connection slots
//! (`max_conns`), opening a TCP or Unix stream with the PROXY header
//! written, and reporting failures to passive health are the HTTP proxy's
//! own steps, reached here; what flows over the stream is the caller's.
//! Never reads or writes a byte after the PROXY header.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use weir_config::proxy::{Balance, ProxyProtocolVersion, UpstreamTarget};
use weir_http::worker::Worker;

use crate::balance::hash_parts;
use crate::{ActiveGuard, Proxy, ProxyError, Upstream, counter, proxy_protocol};

/// A connected upstream byte stream.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }
}

/// An upstream in use by one stream: counted in flight (least_conn) and
/// holding one of its `max_conns` slots, both released on drop.
pub struct Lease {
    pub idx: usize,
    _active: ActiveGuard,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Lease {
    pub fn upstream(&self) -> &Arc<Upstream> {
        &self._active.0
    }
}

/// Why no stream was opened, and the upstream that failed last.
pub struct OpenError {
    pub upstream: Option<String>,
    pub error: ProxyError,
}

impl Upstream {
    /// Its `max_conns` slots, when it has a limit.
    pub fn slots(&self) -> Option<&Arc<Semaphore>> {
        self.limit.as_ref()
    }
}

impl Proxy {
    /// The balancer's key for a client address (`ip_hash`), else none.
    pub fn client_key(&self, client: IpAddr) -> Option<u64> {
        match self.cfg.balance {
            Balance::IpHash => Some(match client {
                IpAddr::V4(a) => hash_parts(&[&a.octets()]),
                IpAddr::V6(a) => hash_parts(&[&a.octets()]),
            }),
            _ => None,
        }
    }

    /// An upstream for the next stream, among the healthy ones in rotation
    /// not in `tried`.
    pub fn choose(&self, worker: Worker, key: Option<u64>, tried: &[usize]) -> Option<usize> {
        self.pick(worker, key, None, tried)
    }

    /// Counts an attempt on upstream `idx` (a retry when it follows a failure).
    pub fn count_attempt(&self, worker: Worker, idx: usize, retry: bool) {
        let up = &self.ups[idx];
        up.counts.add(worker, counter::REQUESTS, 1);
        if retry {
            up.counts.add(worker, counter::RETRIES, 1);
        }
    }

    /// A failure that is upstream `idx`'s fault: counted, and towards its
    /// passive health.
    pub fn upstream_failed(&self, worker: Worker, idx: usize, e: &ProxyError) {
        let up = &self.ups[idx];
        up.count_error(worker, e);
        self.passive_failure(up, e);
    }

    /// Upstream `idx` answered: see passive health (`Proxy::passive_success`).
    pub fn upstream_succeeded(&self, idx: usize) {
        self.passive_success(&self.ups[idx]);
    }

    /// Counts the stream in flight on `idx` until the lease drops.
    pub fn lease(&self, idx: usize, permit: Option<OwnedSemaphorePermit>) -> Lease {
        Lease {
            idx,
            _active: ActiveGuard::new(self.ups[idx].clone()),
            _permit: permit,
        }
    }

    /// Opens a stream to upstream `idx` within `connect_timeout`, with the
    /// PROXY header for `client` (peer, local) when configured.
    pub async fn connect_stream(
        &self,
        worker: Worker,
        idx: usize,
        client: (SocketAddr, SocketAddr),
    ) -> Result<Stream, ProxyError> {
        let up = &self.ups[idx];
        let timeout = self.cfg.connect_timeout;
        let open = async {
            let mut s = match &up.cfg.target {
                UpstreamTarget::Tcp { host, port } => {
                    let addrs = self
                        .local(worker)
                        .dns
                        .resolve(host, *port, self.cfg.dns_ttl)
                        .await
                        .map_err(ProxyError::Resolve)?;
                    let mut last = None;
                    let mut found = None;
                    for a in addrs {
                        match TcpStream::connect(a).await {
                            Ok(s) => {
                                let _ = s.set_nodelay(true);
                                found = Some(s);
                                break;
                            }
                            Err(e) => last = Some(e),
                        }
                    }
                    match found {
                        Some(s) => Stream::Tcp(s),
                        None => {
                            return Err(ProxyError::Connect(last.unwrap_or_else(|| {
                                io::Error::new(io::ErrorKind::NotFound, "no addresses")
                            })));
                        }
                    }
                }
                UpstreamTarget::Unix(path) => Stream::Unix(
                    UnixStream::connect(path)
                        .await
                        .map_err(ProxyError::Connect)?,
                ),
            };
            if let Some(v) = self.cfg.send_proxy_protocol {
                let (src, dst) = client;
                let hdr = match v {
                    ProxyProtocolVersion::V1 => proxy_protocol::write_v1(src, dst),
                    ProxyProtocolVersion::V2 => proxy_protocol::write_v2(src, dst),
                };
                s.write_all(&hdr).await.map_err(ProxyError::Connect)?;
            }
            Ok(s)
        };
        match tokio::time::timeout(timeout, open).await {
            Ok(r) => r,
            Err(_) => Err(ProxyError::ConnectTimeout(timeout)),
        }
    }

    /// A stream for a client: an upstream chosen, a slot taken (or waited
    /// for in the queue), a connection opened; when connecting fails the
    /// next upstream is tried, up to `retries` more times (nothing has been
    /// sent, so a retry is always safe).
    pub async fn open_stream(
        &self,
        worker: Worker,
        client: (SocketAddr, SocketAddr),
    ) -> Result<(Stream, Lease), OpenError> {
        let key = self.client_key(client.0.ip());
        let mut tried: Vec<usize> = Vec::new();
        let mut last: Option<(usize, ProxyError)> = None;
        for attempt in 0..=self.cfg.retries {
            let Some(idx) = self.choose(worker, key, &tried) else {
                break;
            };
            self.count_attempt(worker, idx, attempt > 0);
            let up = &self.ups[idx];
            let permit = match self.admit(up).await {
                Ok(p) => p,
                Err(e) => {
                    up.count_error(worker, &e);
                    return Err(OpenError {
                        upstream: Some(up.cfg.name.clone()),
                        error: e,
                    });
                }
            };
            let lease = self.lease(idx, permit);
            match self.connect_stream(worker, idx, client).await {
                Ok(s) => {
                    // For a byte stream, a connection is all an upstream can answer.
                    self.passive_success(up);
                    return Ok((s, lease));
                }
                Err(e) => {
                    self.upstream_failed(worker, idx, &e);
                    tracing::info!("stream to {}: {e}", up.cfg.name);
                    tried.push(idx);
                    last = Some((idx, e));
                }
            }
        }
        Err(match last {
            Some((i, e)) => OpenError {
                upstream: Some(self.ups[i].cfg.name.clone()),
                error: e,
            },
            None => OpenError {
                upstream: None,
                error: ProxyError::NoneAvailable,
            },
        })
    }

    /// Streams open through upstream `idx` now.
    pub fn streams_open(&self, idx: usize) -> u32 {
        self.ups[idx].active.load(Ordering::Relaxed)
    }
}
