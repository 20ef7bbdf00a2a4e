//! FastCGI over a connection: the connections to each upstream (PHP-FPM),
//! one request at a time on each, closed after each request unless
//! `keep_conn` keeps them open (`FCGI_KEEP_CONN`), and one request's
//! exchange: the CGI variables and the body streamed out as records, the
//! response head read and its body streamed back, the application's stderr
//! written to the log.
//!
//! Every connection holds one of the upstream's `max_conns` slots, and a
//! request waits (bounded by `queue` and `queue_timeout`) for an idle
//! connection or a free slot. A PHP-FPM child serves one connection for as
//! long as it stays open: with `keep_conn`, an idle connection holds a
//! child, so a connection past `pm.max_children` would wait in PHP-FPM's
//! backlog for a child no request frees; without it (the default) the
//! child is free again when its request ends. Idle connections are shared
//! by every worker. Never buffers more than one record of either body.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body::Frame;
use std::future::Future;

use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use weir_http::body::{Body, BodyError};
use weir_http::worker::Worker;
use weir_proxy::stream::{Lease, Stream};
use weir_proxy::{Proxy, ProxyError};

use crate::head::parse_head;
use crate::proto::{self, Decoder, Event};

/// The request id of every request: one request per connection at a time.
const ID: u16 = 1;
/// The largest CGI response head read.
const MAX_HEAD: usize = 64 * 1024;

/// Why a FastCGI request failed.
#[derive(Debug, thiserror::Error)]
pub enum FcgiError {
    #[error(transparent)]
    Upstream(#[from] ProxyError),
    #[error("writing to the application: {0}")]
    Send(std::io::Error),
    #[error("no progress writing to the application within {0:?}")]
    SendTimeout(Duration),
    #[error("reading from the application: {0}")]
    Read(std::io::Error),
    #[error("no response from the application within {0:?}")]
    ReadTimeout(Duration),
    #[error("the application closed the connection before answering")]
    Closed,
    #[error("FastCGI: {0}")]
    Proto(#[from] proto::ProtoError),
    #[error("bad response head: {0}")]
    Head(#[from] crate::head::HeadError),
    #[error("reading the request body: {0}")]
    ClientBody(BodyError),
}

impl FcgiError {
    /// The client's status.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            FcgiError::Upstream(e) => e.status(),
            FcgiError::SendTimeout(_) | FcgiError::ReadTimeout(_) => S::GATEWAY_TIMEOUT,
            FcgiError::ClientBody(e) if weir_proxy::too_large(e) => S::PAYLOAD_TOO_LARGE,
            FcgiError::ClientBody(e) if weir_proxy::timed_out(e) => S::REQUEST_TIMEOUT,
            FcgiError::ClientBody(_) => S::BAD_REQUEST,
            _ => S::BAD_GATEWAY,
        }
    }

    /// The upstream is to blame (passive health counts it).
    fn upstreams_fault(&self) -> bool {
        !matches!(self, FcgiError::ClientBody(_))
    }
}

/// What a request waiting for a connection is given: a connection
/// another request finished with, or a slot to open one in.
enum Handoff {
    Conn(Conn),
    Slot(Option<OwnedSemaphorePermit>),
}

/// One upstream's idle connections and the requests waiting, first come
/// first served (a connection checked in goes to the oldest waiter, never
/// to a request that arrived after it).
#[derive(Default)]
struct Queues {
    idle: VecDeque<Conn>,
    waiting: VecDeque<oneshot::Sender<Handoff>>,
}

type Shared = Arc<Mutex<Queues>>;

fn lock(q: &Shared) -> std::sync::MutexGuard<'_, Queues> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's slot: when the connection closes, it passes to the
/// oldest waiter, else back to the upstream's `max_conns`.
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    queues: Shared,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = Handoff::Slot(self.permit.take());
        let mut q = lock(&self.queues);
        while let Some(tx) = q.waiting.pop_front() {
            match tx.send(h) {
                Ok(()) => return,
                Err(back) => h = back,
            }
        }
        drop(q);
        drop(h);
    }
}

/// An open connection to one upstream, and what was read past the last
/// response.
struct Conn {
    io: Stream,
    buf: BytesMut,
    idx: usize,
    since: Instant,
    reused: bool,
    _slot: Slot,
}

/// A FastCGI application's connections.
pub struct Pool {
    pub proxy: Arc<Proxy>,
    ups: Vec<Shared>,
    /// Connections stay open between requests (`FCGI_KEEP_CONN`).
    keep_conn: bool,
}

/// A failed request: why, and the upstream it failed on, if any was tried.
#[derive(Debug)]
pub struct Failure {
    pub error: FcgiError,
    pub upstream: Option<usize>,
}

/// One request as the application is to see it.
pub struct Request<'a> {
    pub params: &'a [(Vec<u8>, Vec<u8>)],
    pub send_timeout: Duration,
    pub client: (std::net::SocketAddr, std::net::SocketAddr),
    pub worker: Worker,
    /// What to call the application in the log.
    pub script: &'a str,
}

impl Pool {
    pub fn new(proxy: Arc<Proxy>, keep_conn: bool) -> Pool {
        let ups = (0..proxy.upstreams().len())
            .map(|_| Shared::default())
            .collect();
        Pool {
            proxy,
            ups,
            keep_conn,
        }
    }

    /// Idle connections to upstream `idx`.
    pub fn idle(&self, idx: usize) -> usize {
        lock(&self.ups[idx]).idle.len()
    }

    /// Runs one request: an upstream chosen, a connection (idle, new, or
    /// waited for), the exchange. On a connection that failed before the
    /// application answered anything, a request without a body goes again
    /// (an idle connection PHP-FPM closed; another upstream when connecting
    /// fails).
    pub async fn run(
        self: &Arc<Self>,
        req: Request<'_>,
        mut body: Body,
    ) -> Result<Response<Body>, Failure> {
        let key = self.proxy.client_key(req.client.0.ip());
        let mut tried: Vec<usize> = Vec::new();
        let mut attempt = 0u32;
        let bodiless = http_body::Body::is_end_stream(&body);
        // The connect failure that sent this request on to another
        // upstream: when none is left, the client and the log get it (a
        // 502 naming the socket and the OS error), as the proxy does.
        let mut last: Option<(usize, ProxyError)> = None;
        let fail = |error: FcgiError, idx: usize| Failure {
            error,
            upstream: Some(idx),
        };
        loop {
            let Some(idx) = self.proxy.choose(req.worker, key, &tried) else {
                return Err(match last {
                    Some((i, e)) => fail(e.into(), i),
                    None => Failure {
                        error: ProxyError::NoneAvailable.into(),
                        upstream: None,
                    },
                });
            };
            self.proxy.count_attempt(req.worker, idx, attempt > 0);
            let lease = self.proxy.lease(idx, None);
            let conn = match self.checkout(idx, &req).await {
                Ok(c) => c,
                Err(e) => {
                    if matches!(
                        e,
                        ProxyError::Connect(_)
                            | ProxyError::ConnectTimeout(_)
                            | ProxyError::Resolve(_)
                    ) {
                        self.proxy.upstream_failed(req.worker, idx, &e);
                        tried.push(idx);
                        if attempt < self.proxy.cfg.retries {
                            tracing::info!(
                                "FastCGI: {}: {e}; trying another upstream",
                                self.proxy.upstreams()[idx].cfg.name
                            );
                            attempt += 1;
                            last = Some((idx, e));
                            continue;
                        }
                    }
                    return Err(fail(e.into(), idx));
                }
            };
            let reused = conn.reused;
            let body = std::mem::take(&mut body);
            match self.exchange(conn, &req, body, lease).await {
                Ok(r) => {
                    self.proxy.upstream_succeeded(idx);
                    return Ok(r);
                }
                Err((e, untouched)) => {
                    if reused && untouched && bodiless && attempt < self.proxy.cfg.retries + 1 {
                        // A kept-alive connection the application had closed.
                        attempt += 1;
                        continue;
                    }
                    if e.upstreams_fault()
                        && let FcgiError::Upstream(pe) = &e
                    {
                        self.proxy.upstream_failed(req.worker, idx, pe);
                    }
                    return Err(fail(e, idx));
                }
            }
        }
    }

    /// An idle connection to `idx`, else a new one in a free slot, else
    /// the first of those to come within `queue_timeout`, in turn.
    async fn checkout(&self, idx: usize, req: &Request<'_>) -> Result<Conn, ProxyError> {
        let queues = &self.ups[idx];
        let cfg = &self.proxy.cfg;
        let idle_timeout = cfg.idle_timeout;
        // Connections idle too long close outside the lock (their slots
        // go to whoever waits).
        let expired: Vec<Conn> = {
            let mut q = lock(queues);
            let n = q
                .idle
                .iter()
                .take_while(|c| c.since.elapsed() >= idle_timeout)
                .count();
            q.idle.drain(..n).collect()
        };
        drop(expired);
        enum Next {
            Open(Option<OwnedSemaphorePermit>),
            Wait(oneshot::Receiver<Handoff>),
        }
        let next = {
            let mut q = lock(queues);
            if let Some(mut c) = q.idle.pop_back() {
                c.reused = true;
                return Ok(c);
            }
            let permit = match self.proxy.upstreams()[idx].slots() {
                Some(s) => s.clone().try_acquire_owned().ok().map(Some),
                None => Some(None),
            };
            match permit {
                Some(p) => Next::Open(p),
                None => {
                    if q.waiting.len() >= cfg.queue {
                        q.waiting.retain(|tx| !tx.is_closed());
                        if q.waiting.len() >= cfg.queue {
                            return Err(ProxyError::QueueFull);
                        }
                    }
                    let (tx, rx) = oneshot::channel();
                    q.waiting.push_back(tx);
                    Next::Wait(rx)
                }
            }
        };
        let rx = match next {
            Next::Open(p) => return self.open(idx, req, p).await,
            Next::Wait(rx) => rx,
        };
        match tokio::time::timeout(cfg.queue_timeout, rx).await {
            Ok(Ok(Handoff::Conn(mut c))) => {
                c.reused = true;
                Ok(c)
            }
            Ok(Ok(Handoff::Slot(permit))) => self.open(idx, req, permit).await,
            _ => Err(ProxyError::QueueTimeout(cfg.queue_timeout)),
        }
    }

    /// A new connection to `idx` in `permit`'s slot.
    async fn open(
        &self,
        idx: usize,
        req: &Request<'_>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Conn, ProxyError> {
        let slot = Slot {
            permit,
            queues: self.ups[idx].clone(),
        };
        let io = self
            .proxy
            .connect_stream(req.worker, idx, req.client)
            .await?;
        Ok(Conn {
            io,
            buf: BytesMut::with_capacity(16 * 1024),
            idx,
            since: Instant::now(),
            reused: false,
            _slot: slot,
        })
    }

    /// A connection whose response has ended cleanly: to the oldest
    /// waiter, else idle; closed when connections are not kept (its slot
    /// then goes to the oldest waiter).
    fn checkin(&self, mut c: Conn) {
        if !self.keep_conn {
            return;
        }
        c.since = Instant::now();
        let mut q = lock(&self.ups[c.idx]);
        let mut h = Handoff::Conn(c);
        while let Some(tx) = q.waiting.pop_front() {
            match tx.send(h) {
                Ok(()) => return,
                Err(back) => h = back,
            }
        }
        if let Handoff::Conn(c) = h {
            q.idle.push_back(c);
        }
    }

    /// Sends the request and reads the response head. The error says
    /// whether the application had answered nothing yet.
    async fn exchange(
        self: &Arc<Self>,
        mut c: Conn,
        req: &Request<'_>,
        mut body: Body,
        lease: Lease,
    ) -> Result<Response<Body>, (FcgiError, bool)> {
        let send_timeout = req.send_timeout;
        let mut out = BytesMut::with_capacity(1024);
        proto::begin_request(&mut out, ID, self.keep_conn);
        proto::params(
            &mut out,
            ID,
            req.params.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
        );
        let has_body = !http_body::Body::is_end_stream(&body);
        if !has_body {
            proto::stdin_end(&mut out, ID);
        }
        write(&mut c.io, &out, send_timeout)
            .await
            .map_err(|e| (e, true))?;
        if has_body {
            use http_body_util::BodyExt;
            loop {
                let frame = match body.frame().await {
                    None => break,
                    Some(Ok(f)) => f,
                    Some(Err(e)) => return Err((FcgiError::ClientBody(e), false)),
                };
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    out.clear();
                    proto::stdin(&mut out, ID, &data);
                    write(&mut c.io, &out, send_timeout)
                        .await
                        .map_err(|e| (e, false))?;
                }
            }
            out.clear();
            proto::stdin_end(&mut out, ID);
            write(&mut c.io, &out, send_timeout)
                .await
                .map_err(|e| (e, false))?;
        }

        // The head: STDOUT until the blank line.
        let read_timeout = self.proxy.cfg.response_timeout;
        let mut decoder = Decoder::new(ID);
        let mut head = BytesMut::new();
        let mut answered = false;
        loop {
            let ev = match decoder.decode(&mut c.buf) {
                Ok(Some(ev)) => ev,
                Ok(None) => {
                    let n = tokio::time::timeout(read_timeout, read_more(&mut c))
                        .await
                        .map_err(|_| (FcgiError::ReadTimeout(read_timeout), false))?
                        .map_err(|e| (FcgiError::Read(e), !answered))?;
                    if n == 0 {
                        return Err((FcgiError::Closed, !answered));
                    }
                    answered = true;
                    continue;
                }
                Err(e) => return Err((e.into(), false)),
            };
            match ev {
                Event::Stderr(b) => log_stderr(req.script, &b),
                Event::Stdout(b) => {
                    head.extend_from_slice(&b);
                    if let Some((parts, used)) =
                        parse_head(&head, MAX_HEAD).map_err(|e| (e.into(), false))?
                    {
                        let mut rest = head.split_off(used);
                        // What has arrived already: a response that is
                        // complete goes out whole, with its length.
                        loop {
                            match decoder.decode(&mut c.buf) {
                                Ok(Some(Event::Stdout(b))) => rest.extend_from_slice(&b),
                                Ok(Some(Event::Stderr(b))) => log_stderr(req.script, &b),
                                Ok(Some(Event::End { .. })) => {
                                    if c.buf.is_empty() {
                                        self.checkin(c);
                                    }
                                    return Ok(Response::from_parts(
                                        parts,
                                        Body::full(rest.freeze()),
                                    ));
                                }
                                Ok(None) => break,
                                Err(e) => return Err((e.into(), false)),
                            }
                        }
                        let rest = rest.freeze();
                        let body = ResponseBody {
                            pool: self.clone(),
                            conn: Some(c),
                            decoder,
                            pending: (!rest.is_empty()).then_some(rest),
                            read_timeout,
                            timer: None,
                            script: req.script.to_string(),
                            _lease: lease,
                        };
                        return Ok(Response::from_parts(parts, Body::stream(body)));
                    }
                }
                Event::End { .. } => {
                    // Ended with no head at all: PHP printed nothing.
                    let (parts, _) = parse_head(b"\r\n", MAX_HEAD)
                        .ok()
                        .flatten()
                        .ok_or((FcgiError::Closed, false))?;
                    if head.is_empty() {
                        self.checkin(c);
                    }
                    return Ok(Response::from_parts(parts, Body::empty()));
                }
            }
        }
    }
}

async fn write(io: &mut Stream, bytes: &[u8], timeout: Duration) -> Result<(), FcgiError> {
    match tokio::time::timeout(timeout, io.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(FcgiError::Send(e)),
        Err(_) => Err(FcgiError::SendTimeout(timeout)),
    }
}

async fn read_more(c: &mut Conn) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    if c.buf.capacity() - c.buf.len() < 4096 {
        c.buf.reserve(16 * 1024);
    }
    c.io.read_buf(&mut c.buf).await
}

fn log_stderr(script: &str, b: &[u8]) {
    for line in String::from_utf8_lossy(b).lines() {
        if !line.trim().is_empty() {
            tracing::warn!("FastCGI stderr ({script}): {line}");
        }
    }
}

/// The response body after the head: STDOUT records streamed as they come;
/// at END_REQUEST the connection goes back to the pool.
struct ResponseBody {
    pool: Arc<Pool>,
    conn: Option<Conn>,
    decoder: Decoder,
    /// Body bytes that came with the head.
    pending: Option<Bytes>,
    read_timeout: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    script: String,
    _lease: Lease,
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(b) = this.pending.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        loop {
            let Some(c) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut c.buf) {
                Ok(Some(Event::Stdout(b))) => {
                    this.timer = None;
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Ok(Some(Event::Stderr(b))) => log_stderr(&this.script, &b),
                Ok(Some(Event::End { .. })) => {
                    let c = this.conn.take().expect("connection present");
                    if c.buf.is_empty() {
                        this.pool.checkin(c);
                    }
                    return Poll::Ready(None);
                }
                Ok(None) => {
                    if c.buf.capacity() - c.buf.len() < 4096 {
                        c.buf.reserve(16 * 1024);
                    }
                    match tokio_util::io::poll_read_buf(Pin::new(&mut c.io), cx, &mut c.buf) {
                        Poll::Ready(Ok(n)) => {
                            if n == 0 {
                                this.conn = None;
                                return Poll::Ready(Some(Err(FcgiError::Closed.into())));
                            }
                            this.timer = None;
                        }
                        Poll::Ready(Err(e)) => {
                            this.conn = None;
                            return Poll::Ready(Some(Err(FcgiError::Read(e).into())));
                        }
                        Poll::Pending => {
                            let t = this.read_timeout;
                            let timer = this
                                .timer
                                .get_or_insert_with(|| Box::pin(tokio::time::sleep(t)));
                            ready!(timer.as_mut().poll(cx));
                            this.conn = None;
                            return Poll::Ready(Some(Err(FcgiError::ReadTimeout(t).into())));
                        }
                    }
                }
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(FcgiError::Proto(e).into())));
                }
            }
        }
    }
}
