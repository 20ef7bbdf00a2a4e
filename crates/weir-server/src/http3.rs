//! HTTP/3: QUIC endpoints (quinn) on the UDP port of every TLS listener,
//! serving requests through the same [`pipeline::Listener::handle`] as HTTP/1.1
//! and HTTP/2, so status, headers and bodies are the same.
//!
//! Every worker serves HTTP/3 as it serves TCP: one UDP socket per worker
//! in the address's SO_REUSEPORT group, and one endpoint per socket, driven
//! on the worker's runtime with its connections. A connection stays on the
//! worker that took it even when its datagrams reach another worker's
//! socket (the client moved to a new address or port): connection IDs name
//! their worker and the sockets pass datagrams on ([`route`]). 0-RTT is off
//! unless `tls.early_data` is on, and then a request that arrives before
//! the handshake completes is served only for safe methods (GET, HEAD,
//! OPTIONS); others get 425 Too Early, because early data can be replayed.
//! Never sends connection-specific headers (RFC 9114 §4.2).
//!
//! A reload gives an address new sites (read per request, like TCP's),
//! new certificates for the connections to come, or stops it.
//!
//! Shutdown: the endpoints stop taking connections,
//! every connection sends GOAWAY, answers the requests it already accepted
//! and closes with H3_NO_ERROR, then the endpoints close. An idle client
//! therefore does not hold the process; only requests in flight do, and
//! never longer than the grace period.
//!
//! [`pipeline::Listener::handle`]: crate::pipeline::Listener::handle

mod route;

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
use route::{CidKey, Inbox, RoutedSocket, Routes, WorkerCids};
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
}

/// One worker's endpoint of an address.
struct Endpoint {
    sock: std::net::UdpSocket,
    routes: Arc<Routes>,
    inbox: Inbox,
    key: CidKey,
    server: watch::Receiver<quinn::ServerConfig>,
    listener: Arc<Current>,
    addr: SocketAddr,
    worker: Worker,
    stop: watch::Receiver<bool>,
}

/// What the running server keeps of one HTTP/3 address.
struct EndpointCtl {
    /// Duplicates of the workers' UDP sockets, for a binary upgrade to hand over.
    sockets: Vec<std::net::UdpSocket>,
    server: watch::Sender<quinn::ServerConfig>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// HTTP/3 on the workers: addresses are added, given new certificates and
/// removed as the config is reloaded.
pub struct H3 {
    /// Where each worker's endpoints run: its own runtime (per-core), or
    /// the shared one.
    workers: Vec<tokio::runtime::Handle>,
    endpoints: HashMap<SocketAddr, EndpointCtl>,
    /// Masks and signs the connection IDs of every endpoint of the process.
    key: CidKey,
    early: bool,
    grace: Duration,
    counts: Arc<ConnCounts>,
    /// Turns true once every endpoint has finished: a worker's runtime
    /// (and its endpoints with it) ends only then.
    done: watch::Sender<bool>,
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
    /// HTTP/3 on `workers` (one runtime handle per worker), with no
    /// address yet. `done` turns true when [`H3::shutdown`] has finished.
    pub fn new(
        workers: Vec<tokio::runtime::Handle>,
        early: bool,
        grace: Duration,
        counts: Arc<ConnCounts>,
        done: watch::Sender<bool>,
    ) -> H3 {
        H3 {
            workers,
            endpoints: HashMap::new(),
            key: CidKey::new(),
            early,
            grace,
            counts,
            done,
        }
    }

    /// Binds `addr` (UDP), one socket per worker in a SO_REUSEPORT group,
    /// without serving it yet: a reload binds every new address before it
    /// changes anything.
    pub fn bind(addr: SocketAddr, workers: usize) -> Result<Vec<std::net::UdpSocket>, H3Error> {
        let err = |source| H3Error::Bind { addr, source };
        udp_unbound(addr).map_err(err)?;
        (0..workers.max(1))
            .map(|_| bind_udp(addr).map_err(err))
            .collect()
    }

    /// The sockets handed over by the previous process (made non-blocking,
    /// as quinn needs), one per worker, or new ones. A process that had
    /// fewer workers leaves sockets to add to its group; one whose sockets
    /// cannot have company (bound without SO_REUSEPORT) has them shared:
    /// the workers reading one socket pass each other's datagrams on.
    pub fn bind_or_take(
        addr: SocketAddr,
        inherited: Vec<std::net::UdpSocket>,
        workers: usize,
    ) -> Result<Vec<std::net::UdpSocket>, H3Error> {
        let err = |source| H3Error::Bind { addr, source };
        if inherited.is_empty() {
            return Self::bind(addr, workers);
        }
        let workers = workers.max(1);
        let mut socks = inherited;
        for s in &socks {
            s.set_nonblocking(true).map_err(err)?;
        }
        if socks.len() > workers {
            tracing::info!(
                "HTTP/3 on {addr}: {} sockets handed over for {workers} workers; the rest closed",
                socks.len()
            );
            socks.truncate(workers);
        }
        let mut i = 0;
        while socks.len() < workers {
            let s = match bind_udp(addr) {
                Ok(s) => s,
                Err(_) => socks[i % socks.len()].try_clone().map_err(err)?,
            };
            socks.push(s);
            i += 1;
        }
        Ok(socks)
    }

    /// Serves HTTP/3 on `socks` (bound to `addr`, one per worker) with the
    /// sites in `listener`.
    pub fn serve(
        &mut self,
        addr: SocketAddr,
        socks: Vec<std::net::UdpSocket>,
        server: quinn::ServerConfig,
        listener: Arc<Current>,
    ) {
        let sockets = socks.iter().filter_map(|s| s.try_clone().ok()).collect();
        let (server_tx, server_rx) = watch::channel(server);
        let (stop_tx, stop_rx) = watch::channel(false);
        let (routes, inboxes) = route::routes(socks.len());
        let n = socks.len();
        let tasks = socks
            .into_iter()
            .zip(inboxes)
            .enumerate()
            .map(|(i, (sock, inbox))| {
                let ep = Endpoint {
                    sock,
                    routes: routes.clone(),
                    inbox,
                    key: self.key.clone(),
                    server: server_rx.clone(),
                    listener: listener.clone(),
                    addr,
                    worker: Worker::new(i),
                    stop: stop_rx.clone(),
                };
                self.workers[i % self.workers.len()].spawn(serve_endpoint(
                    ep,
                    self.early,
                    self.grace,
                    self.counts.clone(),
                ))
            })
            .collect();
        tracing::info!("listening on https://{addr} (HTTP/3, udp, {n} workers)");
        self.endpoints.insert(
            addr,
            EndpointCtl {
                sockets,
                server: server_tx,
                stop: stop_tx,
                tasks,
            },
        );
    }

    /// The addresses served.
    pub fn addrs(&self) -> impl Iterator<Item = &SocketAddr> {
        self.endpoints.keys()
    }

    /// The UDP sockets of every address, for a binary upgrade.
    pub fn sockets(&self) -> impl Iterator<Item = (SocketAddr, &std::net::UdpSocket)> {
        self.endpoints
            .iter()
            .flat_map(|(a, e)| e.sockets.iter().map(|s| (*a, s)))
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

    /// Stops every endpoint gracefully and waits for them (they run on the
    /// workers, which wait for this). Never call it on a runtime's thread.
    pub fn shutdown(mut self) {
        let tasks: Vec<_> = self
            .endpoints
            .drain()
            .flat_map(|(_, ep)| {
                let _ = ep.stop.send(true);
                ep.tasks
            })
            .collect();
        match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt.block_on(async move {
                for t in tasks {
                    let _ = t.await;
                }
            }),
            Err(e) => tracing::warn!("HTTP/3 shutdown: {e}; not waiting for the endpoints"),
        }
        let _ = self.done.send(true);
    }
}

/// Fails with `AddrInUse` if a UDP socket is bound to `addr` already:
/// SO_REUSEPORT would otherwise let the group join another process's.
fn udp_unbound(addr: SocketAddr) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())
}

fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_port(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

async fn serve_endpoint(ep: Endpoint, early: bool, grace: Duration, counts: Arc<ConnCounts>) {
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let mut stop = ep.stop.clone();
    let mut server = ep.server.clone();
    let index = ep.worker.index();
    let endpoint = match runtime.wrap_udp_socket(ep.sock).and_then(|inner| {
        let socket = RoutedSocket::new(inner, index, ep.key.clone(), ep.routes, ep.inbox);
        let mut config = quinn::EndpointConfig::default();
        let key = ep.key;
        config.cid_generator(move || Box::new(WorkerCids::new(key.clone(), index)));
        quinn::Endpoint::new_with_abstract_socket(
            config,
            Some(server.borrow_and_update().clone()),
            Arc::new(socket),
            runtime,
        )
    }) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("HTTP/3 on {} (worker {index}): {e}", ep.addr);
            return;
        }
    };
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
            "HTTP/3 on {} (worker {index}): grace period over, closing {} connections still open",
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

/// What the QUIC handshake settled, for the access log: quinn tells the
/// name and ALPN but not the cipher suite.
fn tls_info(conn: &quinn::Connection) -> weir_http::conn::TlsInfo {
    let hd = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok());
    weir_http::conn::TlsInfo {
        version: "TLSv1.3",
        cipher: "",
        server_name: hd
            .as_ref()
            .and_then(|h| h.server_name.as_deref().map(Box::from)),
        alpn: hd
            .as_ref()
            .and_then(|h| h.protocol.as_deref())
            .and_then(weir_http::conn::TlsInfo::alpn_name),
    }
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
    tracing::debug!(
        "HTTP/3 connection served by worker {} (from {})",
        worker.index(),
        conn.remote_address()
    );
    let _open = Open::new(counts, worker);
    let quic = conn.clone();
    let info = ConnInfo {
        peer: conn.remote_address(),
        local,
        tls: true,
        tls_info: listener
            .load()
            .logs_tls()
            .then(|| Arc::new(tls_info(&conn))),
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
                    let info = info.clone();
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
