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
//! Shutdown (`stop` turns true): the endpoint stops taking connections,
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

use crate::pipeline::{Listener, Site};
use weir_config::Config;
use weir_http::body::BodyError;
use weir_http::conn::ConnInfo;
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
    server: quinn::ServerConfig,
    listener: Arc<Listener>,
    addr: SocketAddr,
    worker: Worker,
}

/// Binds a UDP socket for every TLS listener and serves HTTP/3 on a thread
/// of its own until `stop` turns true. `None` when there is nothing to serve.
pub fn start(
    cfg: &Config,
    sites: &[Arc<Site>],
    certs: &CertManager,
    stop: watch::Receiver<bool>,
    grace: Duration,
) -> Result<Option<std::thread::JoinHandle<()>>, H3Error> {
    let mut eps = Vec::new();
    for l in cfg.listeners.iter().filter(|l| l.tls) {
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
        let sock = bind_udp(l.addr).map_err(|source| H3Error::Bind {
            addr: l.addr,
            source,
        })?;
        let mut listener =
            Listener::new(sites, &l.sites, l.default_site, cfg.server.limits.clone());
        listener.set_alt_svc(l.addr.port());
        eps.push(Endpoint {
            sock,
            server,
            listener: Arc::new(listener),
            addr: l.addr,
            worker: crate::http3_worker(cfg),
        });
    }
    if eps.is_empty() {
        return Ok(None);
    }
    let early = cfg.tls.early_data;
    let h = std::thread::Builder::new()
        .name("weir-h3".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for ep in eps {
                    tasks.push(tokio::spawn(serve_endpoint(ep, early, stop.clone(), grace)));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        })
        .map_err(H3Error::Thread)?;
    Ok(Some(h))
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

async fn serve_endpoint(
    ep: Endpoint,
    early: bool,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let endpoint = match quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(ep.server),
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
            inc = endpoint.accept() => match inc {
                Some(inc) => {
                    let listener = ep.listener.clone();
                    let local = ep.addr;
                    let worker = ep.worker;
                    let stop = stop.clone();
                    conns.spawn(async move {
                        if let Err(e) = serve_conn(inc, listener, local, worker, early, stop).await {
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
    listener: Arc<Listener>,
    local: SocketAddr,
    worker: Worker,
    early: bool,
    mut stop: watch::Receiver<bool>,
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
                    let listener = listener.clone();
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
