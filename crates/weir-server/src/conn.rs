//! One client connection: connection limit, TCP options, the relay of a
//! `[tcp]` listener or of a name passed through by SNI (`layer4`), the TLS
//! handshake and ALPN, then weir's HTTP/1 server (`server::http1`, every HTTP/1.0 and
//! HTTP/1.1 request, upgrades included) or hyper's HTTP/2 server (ALPN `h2`,
//! or the HTTP/2 preface on a plain listener), over a [`TimedIo`] that
//! enforces the timeouts. hyper serves HTTP/2 only. At the hyper service
//! boundary a hyper upgrade (HTTP/2 extended CONNECT) becomes weir's
//! (`weir_http::upgrade::OnUpgrade`), so handlers know one type.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::drain::{Drain, Signal};
use super::http1;
use super::io::{self as tio, ConnState, TimedIo};
use super::layer4;
use super::zero_copy::{FileRegion, Regions, ZeroCopy};
use crate::pipeline::Current;
use weir_config::Limits;
use weir_http::conn::ConnInfo;
use weir_http::metrics::{ConnCounts, Proto};
use weir_http::upgrade;
use weir_http::worker::Worker;
use weir_tls::turns::Turns;

/// What every connection on one listening address shares.
pub struct ConnCtx {
    /// The sites, as the latest reload left them (shared with the
    /// address's other contexts, old and new).
    listener: Arc<Current>,
    tls: Option<weir_tls::Acceptor>,
    limits: Limits,
    timeouts: tio::Limits,
    /// Open connections across the whole process.
    open: Arc<AtomicUsize>,
    /// Connections by protocol and TLS handshakes, for the metrics.
    counts: Arc<ConnCounts>,
    /// PROXY protocol header expected from trusted sources.
    accept_pp: Option<weir_config::proxy::AcceptProxyProtocol>,
    /// HTTP/2: ALPN `h2` on TLS listeners, the preface on plain ones.
    h2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// A `[tcp]` listener: connections are relayed, not served.
    layer4: bool,
}

impl ConnCtx {
    pub fn new(
        listener: Arc<Current>,
        tls: Option<weir_tls::Acceptor>,
        limits: Limits,
        timeouts: tio::Limits,
        open: Arc<AtomicUsize>,
        counts: Arc<ConnCounts>,
    ) -> Self {
        // Extended CONNECT (RFC 8441): WebSockets over HTTP/2, tunnelled by
        // the proxy (`proxy::upgrade::serve_connect`).
        let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        h2.enable_connect_protocol()
            .max_concurrent_streams(limits.h2_streams)
            .max_header_list_size(limits.header_size as u32)
            .max_pending_accept_reset_streams(Some(100))
            .max_local_error_reset_streams(Some(1024));

        ConnCtx {
            listener,
            tls,
            limits,
            timeouts,
            open,
            counts,
            h2,
            accept_pp: None,
            layer4: false,
        }
    }

    /// Expect a PROXY protocol header (v1 or v2) on every connection.
    pub fn accept_proxy_protocol(
        mut self,
        pp: Option<weir_config::proxy::AcceptProxyProtocol>,
    ) -> Self {
        self.accept_pp = pp;
        self
    }

    /// Relay every connection to the listener's `[tcp]` stream.
    pub fn layer4(mut self, on: bool) -> Self {
        self.layer4 = on;
        self
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// Counts the connection open until it ends: in the connection limit, and
/// in the metrics once its protocol is known.
struct OpenGuard {
    ctx: Arc<ConnCtx>,
    worker: Worker,
    proto: Option<Proto>,
}

impl OpenGuard {
    /// The connection speaks `p` from now on.
    fn speaks(&mut self, p: Proto) {
        if let Some(old) = self.proto.replace(p) {
            self.ctx.counts.closed(self.worker, old);
        }
        self.ctx.counts.opened(self.worker, p);
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.ctx.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(p) = self.proto {
            self.ctx.counts.closed(self.worker, p);
        }
    }
}

/// Counts a request in flight for [`TimedIo`], also when it is cancelled.
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// Takes over an accepted connection on the listening address `bound`.
pub fn spawn(
    stream: TcpStream,
    peer: SocketAddr,
    bound: SocketAddr,
    ctx: Arc<ConnCtx>,
    worker: Worker,
    drain: &Drain,
    turns: &Turns,
) {
    if ctx.open.fetch_add(1, Ordering::Relaxed) >= ctx.limits.connections {
        ctx.open.fetch_sub(1, Ordering::Relaxed);
        tracing::warn!(
            "connection from {peer} refused: {} connections open (server.limits.connections)",
            ctx.limits.connections
        );
        return;
    }
    let guard = OpenGuard {
        ctx: ctx.clone(),
        worker,
        proto: None,
    };
    // TCP_NODELAY is inherited from the listening socket (listen.rs).
    // The local address is the bound one unless that is a wildcard: no
    // getsockname per connection.
    let local = if bound.ip().is_unspecified() || bound.port() == 0 {
        stream.local_addr().unwrap_or(bound)
    } else {
        bound
    };
    let signal = drain.signal();
    // Only a TLS connection takes turns (its handshake).
    let turns = ctx.tls.is_some().then(|| turns.clone());
    let info = ConnInfo {
        peer,
        local,
        tls: ctx.tls.is_some(),
        tls_info: None,
        worker,
    };
    tokio::spawn(serve(stream, info, ctx, signal, guard, turns));
}

async fn serve(
    mut stream: TcpStream,
    mut info: ConnInfo,
    ctx: Arc<ConnCtx>,
    signal: Signal,
    mut open: OpenGuard,
    turns: Option<Turns>,
) {
    let peer = info.peer;
    if let Some(pp) = &ctx.accept_pp {
        // Boxed: its buffer would otherwise stay in every connection's task.
        let read = Box::pin(weir_proxy::proxy_protocol::read_header(
            &mut stream,
            pp,
            peer,
        ));
        match tokio::time::timeout(ctx.timeouts.header, read).await {
            Ok(Ok(Some((src, dst)))) => {
                info.peer = src;
                info.local = dst;
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
            Ok(Err(e)) => {
                tracing::warn!("connection from {peer} refused: PROXY protocol: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!("connection from {peer}: no PROXY protocol header in time");
                return;
            }
        }
    }
    let peer = info.peer;
    if ctx.layer4 {
        if let Some(relay) = ctx.listener.load().stream() {
            Box::pin(layer4::relay(stream, bytes::Bytes::new(), info, relay)).await;
        }
        drop(signal);
        return;
    }
    let (Some(acceptor), Some(turns)) = (&ctx.tls, turns) else {
        serve_plain(stream, info, ctx, signal, open).await;
        return;
    };
    // A listener where a site passes TLS through reads the ClientHello
    // first: a name passed through goes to its upstream untouched, any
    // other to weir's own handshake with the bytes read replayed.
    let passes_through = ctx.listener.load().passes_through();
    let stream = if passes_through {
        let mut stream = stream;
        let hello = tokio::time::timeout(
            ctx.timeouts.header,
            Box::pin(layer4::read_hello(&mut stream)),
        );
        match hello.await {
            Ok(Ok(h)) => {
                if let Some(relay) = ctx.listener.load().relay_for(h.sni.as_deref(), &h.alpn) {
                    Box::pin(layer4::relay(stream, h.bytes, info, relay)).await;
                    drop(signal);
                    return;
                }
                layer4::Rewind::new(h.bytes, stream)
            }
            Ok(Err(e)) => {
                ctx.counts.handshake(info.worker, false);
                tracing::debug!("TLS from {peer}: {e}");
                return;
            }
            Err(_) => {
                ctx.counts.handshake(info.worker, false);
                tracing::debug!("TLS from {peer}: no ClientHello in time");
                return;
            }
        }
    } else {
        layer4::Rewind::new(bytes::Bytes::new(), stream)
    };

    // The handshake must finish within the header timeout: a client that
    // opens TCP and sends nothing must not hold the slot.
    // Boxed, as are the hyper connections below: a task's memory is its
    // largest state, and an idle keep-alive connection should pay only for
    // the state it is in.
    let handshake = Box::pin(acceptor.accept(tio::SliceWrites(stream), &turns));
    let handshake = tokio::time::timeout(ctx.timeouts.header, handshake);
    // The connection's future is built in a block that ends before it runs,
    // so the TLS stream (about 1.4 KiB) is not also kept in this task.
    let conn: Pin<Box<dyn Future<Output = ()> + Send + '_>> = {
        let tls = match handshake.await {
            Ok(Ok(Some(s))) => {
                ctx.counts.handshake(info.worker, true);
                s
            }
            // An ACME TLS-ALPN-01 validation: answered during the handshake.
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                ctx.counts.handshake(info.worker, false);
                tracing::debug!("TLS handshake with {peer} failed: {e}");
                return;
            }
            Err(_) => {
                ctx.counts.handshake(info.worker, false);
                tracing::debug!("TLS handshake with {peer} timed out");
                return;
            }
        };
        if ctx.listener.load().logs_tls() {
            info.tls_info = Some(Arc::new(tls_info(tls.get_ref().1)));
        }
        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
            open.speaks(Proto::Http2);
            let state = Arc::new(ConnState::default());
            let svc = service(ctx.clone(), state.clone(), None, info);
            let io = TimedIo::new(tls, state, ctx.timeouts, false);
            let conn = signal.watch(ctx.h2.serve_connection(TokioIo::new(io), svc));
            Box::pin(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("connection from {peer}: {e}");
                }
                drop(open);
            })
        } else {
            serve_h1(tls, info, ctx.clone(), None, signal, open)
        }
    };
    conn.await;
}

/// What the handshake of `c` settled, for the access log.
fn tls_info(c: &rustls::ServerConnection) -> weir_http::conn::TlsInfo {
    use rustls::ProtocolVersion as V;
    weir_http::conn::TlsInfo {
        version: match c.protocol_version() {
            Some(V::TLSv1_3) => "TLSv1.3",
            Some(V::TLSv1_2) => "TLSv1.2",
            _ => "",
        },
        cipher: c
            .negotiated_cipher_suite()
            .map_or("", |s| iana_suite(s.suite())),
        server_name: c.server_name().map(Box::from),
        alpn: c
            .alpn_protocol()
            .and_then(weir_http::conn::TlsInfo::alpn_name),
    }
}

/// A suite's IANA name: rustls names the TLS 1.3 ones `TLS13_…` where the
/// registry (and OpenSSL's TLS 1.3 names) say `TLS_…`.
fn iana_suite(s: rustls::CipherSuite) -> &'static str {
    let name = s.as_str().unwrap_or("");
    match name {
        "TLS13_AES_128_GCM_SHA256" => "TLS_AES_128_GCM_SHA256",
        "TLS13_AES_256_GCM_SHA384" => "TLS_AES_256_GCM_SHA384",
        "TLS13_CHACHA20_POLY1305_SHA256" => "TLS_CHACHA20_POLY1305_SHA256",
        n => n,
    }
}

/// A plain TCP connection: HTTP/1.1 (or h2c), large cached files with sendfile.
fn serve_plain(
    stream: TcpStream,
    info: ConnInfo,
    ctx: Arc<ConnCtx>,
    signal: Signal,
    open: OpenGuard,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let regions = Arc::new(Regions::default());
    let stream = ZeroCopy::new(stream, regions.clone());
    serve_h1(stream, info, ctx, Some(regions), signal, open)
}

/// hyper's HTTP/2 service for the connection: every request to the listener.
/// `regions`: where a response's file region is recorded for sendfile
/// (plain TCP only).
fn service(
    ctx: Arc<ConnCtx>,
    state: Arc<ConnState>,
    regions: Option<Arc<Regions>>,
    info: ConnInfo,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = hyper::Response<weir_http::body::Body>,
    Error = Infallible,
    Future: Send + 'static,
> + Send
+ 'static {
    hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let ctx = ctx.clone();
        state.request_started();
        let in_flight = InFlight(state.clone());
        let regions = regions.clone();
        // An atomic increment at most (the TLS facts, when kept).
        let info = info.clone();
        let version = req.version();
        let req = weir_upgrade(req).map(|b| ReadOn::new(b, version));
        async move {
            // The sites as they are now; a reload during the request does
            // not change them under it.
            let sites = ctx.listener.load_full();
            let mut resp = sites.handle(req, &info).await;
            if let Some(r) = resp.extensions_mut().remove::<FileRegion>()
                && let Some(regions) = &regions
            {
                regions.push(r);
            }
            drop(in_flight);
            Ok::<_, Infallible>(resp)
        }
    })
}

/// How much of an HTTP/2 request body [`ReadOn`] reads after its handler
/// let go of it, and for how long at most.
const READ_ON_BYTES: usize = 64 * 1024;
const READ_ON_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// A request body that, once its handler drops it before its end, is read
/// on to that end in a task of its own (at most [`READ_ON_BYTES`], for at
/// most [`READ_ON_TIME`]), its data dropped.
///
/// h2 holds a request to HTTP/2's framing (RFC 9113 §8.1.1: a
/// `content-length` the DATA frames contradict, a second HEADERS frame
/// without END_STREAM, a pseudo-header field in trailers; §6.9.1: a
/// WINDOW_UPDATE past 2^31-1) only while
/// someone holds its stream. A handler that answers without reading the
/// body (a 405, a redirect, a static file) lets go of it, h2 resets the
/// stream with NO_ERROR once the answer is out, and then ignores every
/// frame that follows, violations included. Read on, the stream stays
/// open until the client ends it, and h2's own checks answer a violation
/// with the stream error the RFC asks for. Past the budget it is dropped
/// and h2 resets it as before: a large upload nobody reads is not taken
/// whole. Only HTTP/2 bodies: weir's HTTP/1 server reads an unread body
/// on by itself (`http1::serve`).
struct ReadOn {
    inner: Option<Incoming>,
    read_on: bool,
}

impl ReadOn {
    fn new(body: Incoming, version: http::Version) -> Self {
        ReadOn {
            inner: Some(body),
            read_on: version == http::Version::HTTP_2,
        }
    }
}

impl Drop for ReadOn {
    fn drop(&mut self) {
        if let Some(body) = self.inner.take()
            && self.read_on
            && !http_body::Body::is_end_stream(&body)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(read_on(body));
        }
    }
}

/// Reads `body` to its end within [`ReadOn`]'s budget, dropping its data.
async fn read_on(mut body: Incoming) {
    use http_body_util::BodyExt;
    let read = async {
        let mut left = READ_ON_BYTES;
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, bytes::Bytes::len);
            if n > left {
                break;
            }
            left -= n;
        }
    };
    let _ = tokio::time::timeout(READ_ON_TIME, read).await;
}

impl http_body::Body for ReadOn {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match &mut self.get_mut().inner {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}

/// hyper's connection hand-over (HTTP/2 extended CONNECT) as weir's, which
/// the proxy takes. Only requests hyper marked as upgradable pay for the
/// conversion.
fn weir_upgrade(mut req: hyper::Request<Incoming>) -> hyper::Request<Incoming> {
    if let Some(on) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() {
        req.extensions_mut()
            .insert(upgrade::OnUpgrade::from_future(async move {
                match on.await {
                    Ok(u) => Ok(upgrade::Upgraded::boxed(
                        TokioIo::new(u),
                        bytes::Bytes::new(),
                    )),
                    Err(e) => Err(upgrade::UpgradeError::Failed(Box::new(e))),
                }
            }));
    }
    req
}

/// HTTP/1.1 over `transport`, behind the timeouts; weir's HTTP/1 server
/// reads heads and bodies strictly itself. Built outside the boxed future, so only the future, not the moved-from
/// layers (about 1.5 KiB each), is kept across its awaits. The box holds
/// `serve_http1`'s future itself: an async block around it would keep its
/// own copy of every value it passes in (the TLS stream among them) for the
/// connection's whole life.
fn serve_h1<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    transport: T,
    info: ConnInfo,
    ctx: Arc<ConnCtx>,
    regions: Option<Arc<Regions>>,
    signal: Signal,
    mut open: OpenGuard,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    open.speaks(Proto::Http1);
    let state = Arc::new(ConnState::default());
    let io = TimedIo::new(transport, state.clone(), ctx.timeouts, true);
    Box::pin(serve_http1(io, ctx, info, state, regions, signal, open))
}

/// HTTP/1 (or h2c by prior knowledge): weir's server for every request,
/// hyper's HTTP/2 server for a connection that opens with the preface; an
/// upgraded connection goes to the handler that switched it.
///
/// A function returning an async block rather than an `async fn`: an
/// `async fn` moves its arguments from where it captured them into locals
/// and its future keeps room for both, so the stream (1.5 KiB over TLS)
/// would be stored twice in every connection.
// The layout above is the point, so not `async fn`.
#[allow(clippy::manual_async_fn)]
fn serve_http1<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut io: TimedIo<T>,
    ctx: Arc<ConnCtx>,
    info: ConnInfo,
    state: Arc<ConnState>,
    regions: Option<Arc<Regions>>,
    signal: Signal,
    mut open: OpenGuard,
) -> impl Future<Output = ()> + Send {
    async move {
        let shared = http1::Shared {
            info: &info,
            state: &state,
            regions: regions.as_ref(),
            limits: http1::HeadLimits::new(ctx.limits.header_size, ctx.limits.headers),
        };
        match http1::serve(&mut io, shared, http1::Sites::new(&ctx.listener), &signal).await {
            http1::Outcome::Closed => {}
            http1::Outcome::H2(read) => {
                open.speaks(Proto::Http2);
                let peer = info.peer;
                // Boxed: rare here, and hyper's connection is large.
                let svc = service(ctx.clone(), state, regions, info);
                let io = TokioIo::new(upgrade::Rewind::new(io, read));
                let conn = Box::pin(signal.watch(ctx.h2.serve_connection(io, svc)));
                if let Err(e) = conn.await {
                    tracing::debug!("connection from {peer}: {e}");
                }
            }
            http1::Outcome::Upgrade(to, read) => to.fulfil(upgrade::Upgraded::boxed(io, read)),
        }
        drop(open);
    }
}

/// Serves the HTTP/1 requests of one connection with `handler`, a service
/// beside the pipeline (the admin API): weir's HTTP/1 loop with its framing
/// rules, head limits and timeouts at their defaults (`server.limits`,
/// `server.timeouts`). An HTTP/2 preface or an upgrade ends the connection.
pub async fn serve_one<T, F, Fut>(transport: T, info: ConnInfo, handler: F)
where
    T: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(http::Request<weir_http::h1::Incoming>) -> Fut,
    Fut: Future<Output = http::Response<weir_http::body::Body>>,
{
    let (limits, timeouts) = (Limits::default(), weir_config::Timeouts::default());
    let state = Arc::new(ConnState::default());
    let mut io = TimedIo::new(transport, state.clone(), tio::Limits::from(&timeouts), true);
    // Never drained: it lives as long as the connection (a dropped one
    // reads as shutdown).
    let drain = Drain::new();
    let shared = http1::Shared {
        info: &info,
        state: &state,
        regions: None,
        limits: http1::HeadLimits::new(limits.header_size, limits.headers),
    };
    if let http1::Outcome::H2(_) = http1::serve(&mut io, shared, handler, &drain.signal()).await {
        tracing::debug!("connection from {}: HTTP/2 is not served here", info.peer);
    }
}

#[cfg(test)]
mod differential;

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle keep-alive connection's memory is mostly its boxed future:
    /// it must hold the stream and weir's loop once, plus the few small values the
    /// connection keeps, not a second copy of the stream beside them.
    #[tokio::test]
    async fn a_connection_future_holds_its_stream_once() {
        let cfg = weir_config::Config::builtin_welcome();
        let sites = crate::pipeline::build_sites(
            &cfg,
            &[],
            &crate::pipeline::Registry::new(1),
            &weir_cache::Store::new(&Default::default(), 1),
        )
        .unwrap();
        let listener = Arc::new(Current::from_pointee(crate::pipeline::Listener::new(
            &sites,
            &[0],
            0,
            &cfg.server,
        )));
        let timeouts = tio::Limits::from(&cfg.server.timeouts);
        let open = Arc::new(AtomicUsize::new(1));
        let ctx = Arc::new(ConnCtx::new(
            listener,
            None,
            cfg.server.limits.clone(),
            timeouts,
            open.clone(),
            Arc::new(ConnCounts::new(1)),
        ));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, peer) = tcp.accept().await.unwrap();
        let info = ConnInfo {
            peer,
            local: addr,
            tls: false,
            tls_info: None,
            worker: Default::default(),
        };
        let drain = Drain::new();

        // The loop's own future, over a stream of the same type.
        let regions = Arc::new(Regions::default());
        let state = Arc::new(ConnState::default());
        let mut io = TimedIo::new(
            ZeroCopy::new(client, regions.clone()),
            state.clone(),
            ctx.timeouts,
            true,
        );
        let signal = drain.signal();
        let shared = http1::Shared {
            info: &info,
            state: &state,
            regions: Some(&regions),
            limits: http1::HeadLimits::new(ctx.limits.header_size, ctx.limits.headers),
        };
        let stream = std::mem::size_of_val(&io);
        let inner = std::mem::size_of_val(&http1::serve(
            &mut io,
            shared,
            http1::Sites::new(&ctx.listener),
            &signal,
        ));

        let conn = serve_plain(
            server,
            info,
            ctx.clone(),
            drain.signal(),
            OpenGuard {
                ctx: ctx.clone(),
                worker: Worker::default(),
                proto: None,
            },
        );
        let whole = std::mem::size_of_val(&*conn);
        // ctx, info, state, regions, signal, open: 128 bytes; the rest is
        // alignment.
        assert!(
            whole <= stream + inner + 256,
            "connection future {whole} bytes: stream {stream} + loop {inner} + 256 at most"
        );
    }
}
