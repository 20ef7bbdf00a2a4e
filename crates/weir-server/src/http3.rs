//! HTTP/3: a QUIC endpoint (quinn) on the UDP port of every TLS listener,
//! serving requests through the same [`pipeline::Listener::handle`] as HTTP/1.1
//! and HTTP/2, so status, headers and bodies are the same.
//!
//! Runs on its own thread and current-thread runtime (`weir-h3`); the TCP
//! workers are not touched. 0-RTT is off unless `tls.early_data` is on, and
//! then a request that arrives before the handshake completes is served only
//! for safe methods (GET, HEAD, OPTIONS); others get 425 Too Early, because
//! early data can be replayed. Never sends connection-specific headers
//! (RFC 9114 §4.2).
//!
//! A reload gives an endpoint new sites (read per request, like TCP's),
//! new certificates for the connections to come, or stops it.
//!
//! Shutdown: the endpoint stops taking connections,
//! every connection sends GOAWAY, answers the requests it already accepted
//! and closes with H3_NO_ERROR, then the endpoint closes. An idle client
//! therefore does not hold the process; only requests in flight do, and
//! never longer than the grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::watch;

use std::collections::HashMap;

use crate::pipeline::{Current, Listener};
use weir_config::{Config, ListenerConfig};
use weir_http::body::BodyError;
use weir_http::conn::ConnInfo;
use weir_http::metrics::{ConnCounts, Proto};
use weir_http::worker::Worker;
use weir_tls::CertManager;

#[derive(Debug, thiserror::Error)]
pub enum H3Error {
    #[error("HTTP/3 on udp {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP/3 TLS: {0}")]
    Tls(String),
    #[error("cannot start the HTTP/3 thread: {0}")]
    Thread(std::io::Error),
}

struct Endpoint {
    sock: std::net::UdpSocket,
    server: watch::Receiver<quinn::ServerConfig>,
    listener: Arc<Current>,
    addr: SocketAddr,
    worker: Worker,
    stop: watch::Receiver<bool>,
}

/// What the running server keeps of one HTTP/3 address.
struct EndpointCtl {
    /// A duplicate of the UDP socket, for a binary upgrade to hand over.
    socket: Option<std::net::UdpSocket>,
    server: watch::Sender<quinn::ServerConfig>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// HTTP/3 on its thread: endpoints are added, given new certificates and
/// removed as the config is reloaded.
pub struct H3 {
    thread: Option<std::thread::JoinHandle<()>>,
    rt: tokio::runtime::Handle,
    /// Ends the thread's runtime once every endpoint has finished.
    exit: Option<tokio::sync::oneshot::Sender<()>>,
    endpoints: HashMap<SocketAddr, EndpointCtl>,
    early: bool,
    grace: Duration,
    counts: Arc<ConnCounts>,
}

/// The QUIC server config of the TLS listener `l`.
pub fn server_config(
    cfg: &Config,
    l: &ListenerConfig,
    certs: &CertManager,
) -> Result<quinn::ServerConfig, H3Error> {
    let rustls_cfg = weir_tls::quic_server_config(certs.resolver(cfg, l), cfg.tls.early_data)
        .map_err(|e| H3Error::Tls(e.to_string()))?;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(rustls_cfg)
        .map_err(|e| H3Error::Tls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(cfg.server.limits.h2_streams.into())
        .max_idle_timeout(quinn::IdleTimeout::try_from(cfg.server.timeouts.keepalive).ok());
    server.transport_config(Arc::new(transport));
    Ok(server)
}

impl H3 {
    /// Starts the HTTP/3 thread, with no endpoint yet.
    pub fn start(early: bool, grace: Duration, counts: Arc<ConnCounts>) -> Result<H3, H3Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (exit, exit_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weir-h3".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                let _ = tx.send(rt.handle().clone());
                rt.block_on(async move {
                    let _ = exit_rx.await;
                });
            })
            .map_err(H3Error::Thread)?;
        let rt = rx
            .recv()
            .map_err(|_| H3Error::Thread(std::io::Error::other("the HTTP/3 thread ended")))?;
        Ok(H3 {
            thread: Some(thread),
            rt,
            exit: Some(exit),
            endpoints: HashMap::new(),
            early,
            grace,
            counts,
        })
    }

    /// Binds `addr` (UDP) without serving it yet: a reload binds every new
    /// address before it changes anything.
    pub fn bind(addr: SocketAddr) -> Result<std::net::UdpSocket, H3Error> {
        bind_udp(addr).map_err(|source| H3Error::Bind { addr, source })
    }

    /// A socket handed over by the previous process (made non-blocking, as
    /// quinn needs), or a new one.
    pub fn bind_or_take(
        addr: SocketAddr,
        inherited: Option<std::net::UdpSocket>,
    ) -> Result<std::net::UdpSocket, H3Error> {
        match inherited {
            Some(s) => {
                s.set_nonblocking(true)
                    .map_err(|source| H3Error::Bind { addr, source })?;
                Ok(s)
            }
            None => Self::bind(addr),
        }
    }

    /// Serves HTTP/3 on `sock` (bound to `addr`) with the sites in `listener`.
    pub fn serve(
        &mut self,
        addr: SocketAddr,
        sock: std::net::UdpSocket,
        server: quinn::ServerConfig,
        listener: Arc<Current>,
        worker: Worker,
    ) {
        let socket = sock.try_clone().ok();
        let (server_tx, server_rx) = watch::channel(server);
        let (stop_tx, stop_rx) = watch::channel(false);
        let ep = Endpoint {
            sock,
            server: server_rx,
            listener,
            addr,
            worker,
            stop: stop_rx,
        };
        let task = self.rt.spawn(serve_endpoint(
            ep,
            self.early,
            self.grace,
            self.counts.clone(),
        ));
        self.endpoints.insert(
            addr,
            EndpointCtl {
                socket,
                server: server_tx,
                stop: stop_tx,
                task,
            },
        );
    }

    /// The addresses served.
    pub fn addrs(&self) -> impl Iterator<Item = &SocketAddr> {
        self.endpoints.keys()
    }

    /// The UDP socket of every address, for a binary upgrade.
    pub fn sockets(&self) -> impl Iterator<Item = (SocketAddr, &std::net::UdpSocket)> {
        self.endpoints
            .iter()
            .filter_map(|(a, e)| e.socket.as_ref().map(|s| (*a, s)))
    }

    /// New connections to `addr` get `server` (its certificates) from now on.
    pub fn update(&self, addr: SocketAddr, server: quinn::ServerConfig) {
        if let Some(ep) = self.endpoints.get(&addr) {
            let _ = ep.server.send(server);
        }
    }

    /// Stops serving `addr`: its connections finish their requests (within
    /// the grace period) in the background.
    pub fn remove(&mut self, addr: SocketAddr) {
        if let Some(ep) = self.endpoints.remove(&addr) {
            let _ = ep.stop.send(true);
        }
    }

    /// Stops every endpoint gracefully and ends the thread.
    pub fn shutdown(mut self) {
        let tasks: Vec<_> = self
            .endpoints
            .drain()
            .map(|(_, ep)| {
                let _ = ep.stop.send(true);
                ep.task
            })
            .collect();
        self.rt.block_on(async move {
            for t in tasks {
                let _ = t.await;
            }
        });
        if let Some(exit) = self.exit.take() {
            let _ = exit.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

async fn serve_endpoint(ep: Endpoint, early: bool, grace: Duration, counts: Arc<ConnCounts>) {
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let mut stop = ep.stop.clone();
    let mut server = ep.server.clone();
    let endpoint = match quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server.borrow_and_update().clone()),
        ep.sock,
        runtime,
    ) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("HTTP/3 on {}: {e}", ep.addr);
            return;
        }
    };
    tracing::info!("listening on https://{} (HTTP/3, udp)", ep.addr);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            // Reap finished connections so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            // A reload's certificates, for the connections to come.
            Ok(()) = server.changed() => {
                endpoint.set_server_config(Some(server.borrow_and_update().clone()));
            }
            inc = endpoint.accept() => match inc {
                Some(inc) => {
                    let listener = ep.listener.clone();
                    let local = ep.addr;
                    let worker = ep.worker;
                    let stop = stop.clone();
                    let counts = counts.clone();
                    conns.spawn(async move {
                        if let Err(e) =
                            serve_conn(inc, listener, local, worker, early, stop, &counts).await
                        {
                            tracing::debug!("HTTP/3 connection: {e}");
                        }
                    });
                }
                None => break,
            }
        }
    }
    // Graceful: refuse new connections (quinn answers them with a refusal),
    // let every open one send GOAWAY and finish its requests (they watch
    // `stop` too), then close whatever is left when the grace period is over.
    let deadline = tokio::time::Instant::now() + grace;
    endpoint.set_server_config(None);
    let drained = tokio::time::timeout_at(deadline, async {
        while conns.join_next().await.is_some() {}
    })
    .await
    .is_ok();
    if !drained {
        tracing::warn!(
            "HTTP/3 on {}: grace period over, closing {} connections still open",
            ep.addr,
            endpoint.open_connections()
        );
    }
    conns.abort_all();
    endpoint.close(H3_NO_ERROR, b"shutting down");
    // Lets the CONNECTION_CLOSE frames go out; never beyond the grace period
    // (plus a moment, for a peer that sends nothing back).
    let _ = tokio::time::timeout_at(
        deadline.max(tokio::time::Instant::now() + Duration::from_millis(100)),
        endpoint.wait_idle(),
    )
    .await;
}

/// Resolves once `stop` is true (at once if it already is); holds no borrow
/// of the channel afterwards.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// H3_NO_ERROR (RFC 9114 §8.1): a graceful close.
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

/// Serves one QUIC connection until the peer closes it or, once `stop` turns
/// true, until the requests it had already accepted are answered: then it
/// sends GOAWAY (so the client opens no more requests here), waits for those
/// requests and closes the connection.
async fn serve_conn(
    inc: quinn::Incoming,
    listener: Arc<Current>,
    local: SocketAddr,
    worker: Worker,
    early: bool,
    mut stop: watch::Receiver<bool>,
    counts: &ConnCounts,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let connecting = inc.accept()?;
    // `in_early` is true while requests may still be 0-RTT data.
    let in_early = Arc::new(AtomicBool::new(false));
    let conn = if early {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                in_early.store(true, Ordering::Release);
                let flag = in_early.clone();
                tokio::spawn(async move {
                    accepted.await;
                    flag.store(false, Ordering::Release);
                });
                conn
            }
            Err(connecting) => connecting.await?,
        }
    } else {
        connecting.await?
    };
    counts.handshake(worker, true);
    let _open = Open::new(counts, worker);
    let quic = conn.clone();
    let info = ConnInfo {
        peer: conn.remote_address(),
        local,
        tls: true,
        worker,
    };
    let mut h3: h3::server::Connection<h3_quinn::Connection, Bytes> =
        h3::server::Connection::new(h3_quinn::Connection::new(conn)).await?;
    let mut requests = tokio::task::JoinSet::new();
    let mut stopping = false;
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut stop), if !stopping => {
                stopping = true;
                // GOAWAY naming the last request accepted: later ones are
                // refused with H3_REQUEST_REJECTED, safe for the client to retry.
                if let Err(e) = h3.shutdown(0).await {
                    tracing::debug!("HTTP/3 GOAWAY to {}: {e}", info.peer);
                    break;
                }
                if requests.is_empty() {
                    break;
                }
            }
            Some(_) = requests.join_next(), if !requests.is_empty() => {
                if stopping && requests.is_empty() {
                    break;
                }
            }
            r = h3.accept() => match r {
                Ok(Some(resolver)) => {
                    // The sites as they are now (a reload applies from the
                    // next request on).
                    let listener = listener.load_full();
                    let is_early = in_early.load(Ordering::Acquire);
                    requests.spawn(async move {
                        match resolver.resolve_request().await {
                            Ok((req, stream)) => {
                                if let Err(e) =
                                    serve_request(req, stream, &listener, &info, is_early).await
                                {
                                    tracing::debug!("HTTP/3 request from {}: {e}", info.peer);
                                }
                            }
                            Err(e) => tracing::debug!("HTTP/3 request from {}: {e}", info.peer),
                        }
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("HTTP/3 connection from {}: {e}", info.peer);
                    break;
                }
            }
        }
    }
    // Requests still running (the peer may have sent GOAWAY first) finish
    // before the connection goes.
    while requests.join_next().await.is_some() {}
    if stopping {
        // The last response may still be unacknowledged: closing now could
        // make the peer drop it. Give it a few round trips, or until the
        // peer closes first.
        let linger = (quic.rtt() * 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let _ = tokio::time::timeout(linger, quic.closed()).await;
        quic.close(H3_NO_ERROR, b"shutting down");
    }
    drop(h3);
    Ok(())
}

/// Counts an HTTP/3 connection open until it ends, however it ends.
struct Open<'a>(&'a ConnCounts, Worker);

impl<'a> Open<'a> {
    fn new(counts: &'a ConnCounts, w: Worker) -> Self {
        counts.opened(w, Proto::Http3);
        Open(counts, w)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.closed(self.1, Proto::Http3);
    }
}

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

async fn serve_request(
    req: Request<()>,
    stream: Stream,
    listener: &Listener,
    info: &ConnInfo,
    is_early: bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (mut send, recv) = stream.split();
    let (parts, ()) = req.into_parts();
    let head_req = parts.method == Method::HEAD;
    let resp = if is_early && !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS)
    {
        let mut r = weir_http::response::error(StatusCode::BAD_REQUEST);
        *r.status_mut() = StatusCode::TOO_EARLY;
        r
    } else {
        let req = Request::from_parts(parts, RecvBody { recv, done: false });
        listener.handle(req, info).await
    };
    let (mut head, mut body) = resp.into_parts();
    for h in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ] {
        head.headers.remove(h);
    }
    // As hyper does for HTTP/1.1 and HTTP/2: a body of known size gets its
    // content-length, so the three protocols show the same headers.
    if !head_req
        && !head.headers.contains_key(header::CONTENT_LENGTH)
        && !matches!(head.status.as_u16(), 100..=199 | 204 | 304)
        && let Some(n) = http_body::Body::size_hint(&body).exact()
    {
        head.headers.insert(header::CONTENT_LENGTH, n.into());
    }
    send.send_response(Response::from_parts(head, ())).await?;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(data) => send.send_data(data).await?,
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    send.send_trailers(trailers).await?;
                }
            }
        }
    }
    send.finish().await?;
    Ok(())
}

/// An HTTP/3 request body as an `http_body::Body`.
struct RecvBody {
    recv: h3::server::RequestStream<h3_quinn::RecvStream, Bytes>,
    done: bool,
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        // The response may be sent before the request is read to its end
        // (a GET's handler never reads it). RFC 9114 §4.1.1 asks for
        // H3_NO_ERROR when the rest is refused; quinn's own drop would send
        // code 0, which clients may take for an error.
        if !self.done {
            self.recv.stop_sending(h3::error::Code::H3_NO_ERROR);
        }
    }
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.recv.poll_recv_data(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(Ok(Some(mut buf))) => {
                let b = buf.copy_to_bytes(buf.remaining());
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            Poll::Ready(Ok(None)) => {}
        }
        match self.recv.poll_recv_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(Ok(t)) => {
                self.done = true;
                Poll::Ready(t.map(|t| Ok(Frame::trailers(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
