//! Layer-4 proxying: a `[tcp]` listener's connections and the TLS
//! connections a site passes through by SNI, relayed as bytes to an
//! upstream chosen by the site's [`weir_proxy::Proxy`] (its balancing,
//! health and `max_conns`). Owns reading the ClientHello ahead of the
//! handshake (`read_hello`), the per-client connection limit, the byte
//! relay with its idle timeout, and the counts and log line of each stream.
//! Never terminates TLS nor looks at the bytes after the ClientHello.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use weir_config::stream::StreamConfig;
use weir_http::conn::ConnInfo;
use weir_http::metrics::Counts;
use weir_proxy::Proxy;

/// Per-relay counters (`Relay::counts`).
pub mod counter {
    pub const CONNECTIONS: usize = 0;
    /// Refused by `max_conns_per_client`, or no upstream could be reached.
    pub const REFUSED: usize = 1;
    /// Client → upstream.
    pub const BYTES_UP: usize = 2;
    /// Upstream → client.
    pub const BYTES_DOWN: usize = 3;
    pub const N: usize = 4;
}

/// The largest ClientHello read before giving up (one TLS handshake
/// message is at most 64 KiB; post-quantum key shares make it about 2).
pub const MAX_HELLO: usize = 64 * 1024;

/// A stream config at run time.
pub struct Relay {
    pub cfg: Arc<StreamConfig>,
    pub proxy: Arc<Proxy>,
    /// Connections open per client address (only with `per_client`); a
    /// connection-rate structure, off the request path.
    clients: Mutex<HashMap<IpAddr, u32>>,
    pub counts: Counts<{ counter::N }>,
}

impl Relay {
    pub fn new(cfg: Arc<StreamConfig>, proxy: Arc<Proxy>, workers: usize) -> Relay {
        Relay {
            cfg,
            proxy,
            clients: Mutex::new(HashMap::new()),
            counts: Counts::new(workers),
        }
    }

    /// Whether a passthrough site takes a ClientHello offering `alpn`.
    pub fn takes_alpn<'a>(&self, mut alpn: impl Iterator<Item = &'a [u8]>) -> bool {
        self.cfg.alpn.is_empty() || alpn.any(|p| self.cfg.alpn.iter().any(|a| a == p))
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        if self.cfg.per_client == 0 {
            return Some(ClientSlot(None));
        }
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n as usize >= self.cfg.per_client {
            return None;
        }
        *n += 1;
        Some(ClientSlot(Some((self.clone(), ip))))
    }
}

/// One client connection counted in `max_conns_per_client` until dropped.
struct ClientSlot(Option<(Arc<Relay>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((r, ip)) = self.0.take() {
            let mut m = r.clients.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = m.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&ip);
                }
            }
        }
    }
}

/// What the client's ClientHello says, with the bytes read to learn it.
pub struct Hello {
    pub bytes: Bytes,
    pub sni: Option<String>,
    pub alpn: Vec<Vec<u8>>,
}

/// Reads the client's first flight until its whole ClientHello is in
/// (across as many TCP segments and TLS records as it takes), at most
/// [`MAX_HELLO`] bytes. rustls parses it; the bytes are kept to replay to
/// the upstream or to weir's own handshake.
pub async fn read_hello<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Hello> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut buf = BytesMut::with_capacity(2048);
    loop {
        if buf.len() >= MAX_HELLO {
            return Err(std::io::Error::other("ClientHello larger than 64 KiB"));
        }
        let start = buf.len();
        if s.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut fresh = &buf[start..];
        while !fresh.is_empty() {
            acceptor.read_tls(&mut fresh)?;
        }
        match acceptor.accept() {
            Ok(None) => continue,
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                return Ok(Hello {
                    sni: hello.server_name().map(str::to_ascii_lowercase),
                    alpn: hello
                        .alpn()
                        .map(|a| a.map(<[u8]>::to_vec).collect())
                        .unwrap_or_default(),
                    bytes: buf.freeze(),
                });
            }
            Err((e, _)) => {
                return Err(std::io::Error::other(format!("not a TLS ClientHello: {e}")));
            }
        }
    }
}

/// A stream that gives back `pre` before reading from `inner` (the
/// ClientHello read ahead).
pub struct Rewind<S> {
    pre: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(pre: Bytes, inner: S) -> Self {
        Rewind { pre, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(buf.remaining());
            buf.put_slice(&self.pre[..n]);
            self.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Bytes moved one way, and when any last moved either way.
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// One side of the relay, counting what is read from it.
struct Counted<'a, S> {
    inner: S,
    act: &'a Activity,
    /// Reads from the client count as up, from the upstream as down.
    up: bool,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            let c = if self.up {
                &self.act.up
            } else {
                &self.act.down
            };
            c.fetch_add(n, Ordering::Relaxed);
            self.act.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Relays `client` (after `pre`, the bytes already read from it) to an
/// upstream of `relay` until either side closes, or nothing moves for the
/// idle timeout; then logs the stream.
pub async fn relay<S>(client: S, pre: Bytes, info: ConnInfo, relay: Arc<Relay>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = &relay.cfg.name;
    let w = info.worker;
    let peer = info.peer;
    let Some(_slot) = relay.admit(peer.ip()) else {
        relay.counts.add(w, counter::REFUSED, 1);
        tracing::warn!(
            "{name}: connection from {peer} refused: {} open from that address (max_conns_per_client)",
            relay.cfg.per_client
        );
        return;
    };
    relay.counts.add(w, counter::CONNECTIONS, 1);
    let (mut up, lease) = match relay.proxy.open_stream(w, (peer, info.local)).await {
        Ok(s) => s,
        Err(e) => {
            relay.counts.add(w, counter::REFUSED, 1);
            tracing::warn!(
                upstream = e.upstream.as_deref().unwrap_or("-"),
                "{name}: connection from {peer} closed: {}",
                e.error
            );
            return;
        }
    };
    let upstream = lease.upstream().cfg.name.clone();
    let act = Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
        up: AtomicU64::new(pre.len() as u64),
        down: AtomicU64::new(0),
    };
    let idle = relay.proxy.cfg.idle_timeout;
    let outcome = if !pre.is_empty() && up.write_all(&pre).await.is_err() {
        "upstream closed"
    } else {
        let mut a = Counted {
            inner: client,
            act: &act,
            up: true,
        };
        let mut b = Counted {
            inner: up,
            act: &act,
            up: false,
        };
        let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
        let mut copy = std::pin::pin!(copy);
        loop {
            let since = Duration::from_millis(act.last.load(Ordering::Relaxed));
            let deadline = tokio::time::Instant::from_std(act.start + since + idle);
            tokio::select! {
                r = copy.as_mut() => break match r {
                    Ok(_) => "closed",
                    Err(_) => "reset",
                },
                _ = tokio::time::sleep_until(deadline) => {
                    if act.start.elapsed() >= Duration::from_millis(act.last.load(Ordering::Relaxed)) + idle {
                        break "idle timeout";
                    }
                }
            }
        }
    };
    drop(lease);
    let (n_up, n_down) = (
        act.up.load(Ordering::Relaxed),
        act.down.load(Ordering::Relaxed),
    );
    relay.counts.add(w, counter::BYTES_UP, n_up);
    relay.counts.add(w, counter::BYTES_DOWN, n_down);
    tracing::info!(
        upstream = upstream.as_str(),
        "{name}: {peer} → {upstream}: {n_up} bytes up, {n_down} bytes down, {:.3}s, {outcome}",
        act.start.elapsed().as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A real ClientHello for `sni` offering `alpn`.
    fn client_hello(sni: &str, alpn: &[&[u8]]) -> Vec<u8> {
        // Post-quantum first, as browsers send it: the hello spans segments.
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.kx_groups = vec![
            rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768,
            rustls::crypto::aws_lc_rs::kx_group::X25519,
        ];
        let provider = Arc::new(provider);
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
        let mut c = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    #[tokio::test]
    async fn a_client_hello_sent_a_few_bytes_at_a_time_is_read_whole() {
        let hello = client_hello("a.test", &[b"h2", b"http/1.1"]);
        assert!(hello.len() > 1200, "a post-quantum hello spans segments");
        let (mut client, mut server) = tokio::io::duplex(64);
        let sent = hello.clone();
        tokio::spawn(async move {
            for piece in sent.chunks(7) {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            // Keep the stream open: read_hello must not wait for EOF.
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let h = read_hello(&mut server).await.unwrap();
        assert_eq!(h.sni.as_deref(), Some("a.test"));
        assert_eq!(h.alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(&h.bytes[..], &hello[..], "every byte kept to replay");
    }

    #[tokio::test]
    async fn what_is_not_a_client_hello_is_refused() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .await
            .unwrap();
        assert!(read_hello(&mut server).await.is_err());

        // A handshake that never ends stops at the bound, not at memory's end.
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            // Records of 16 KiB each, announcing a 16 MiB handshake message.
            let mut first = vec![22, 3, 1, 0x40, 0x00, 1, 0xff, 0xff, 0xff];
            first.resize(5 + 0x4000, 0);
            let _ = client.write_all(&first).await;
            let mut more = vec![22, 3, 1, 0x40, 0x00];
            more.resize(5 + 0x4000, 0);
            for _ in 0..16 {
                if client.write_all(&more).await.is_err() {
                    break;
                }
            }
        });
        assert!(read_hello(&mut server).await.is_err());
    }

    #[tokio::test]
    async fn rewind_replays_the_bytes_read_then_the_stream() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut r = Rewind::new(Bytes::from_static(b"hello"), server);
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
