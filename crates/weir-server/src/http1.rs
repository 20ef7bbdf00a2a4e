//! weir's HTTP/1.x server: every HTTP/1.0 and HTTP/1.1 request on a
//! connection is served here, from its head to its answer: any method and
//! request-target form, request bodies (Content-Length and chunked, with
//! trailers) streamed to the handler, `Expect: 100-continue`, pipelining,
//! upgrades (a `101` hands the connection to the handler through
//! `weir_http::upgrade`), and the answers to malformed heads. A connection
//! that opens with the HTTP/2 preface goes back to `server::conn` for
//! hyper's HTTP/2 server; nothing else leaves this loop.
//!
//! Why by hand: hyper's HTTP/1 connection owns a 16 KiB read buffer and an
//! 8 KiB head buffer for as long as the connection lives, and cannot be
//! told to give them back while it is idle. Here a connection owns no
//! buffer while it waits: bytes are read into one buffer per thread and
//! only what a request needs is kept; response heads are written from a
//! per-thread buffer too. A request without a body allocates nothing of
//! its own beyond its header map (taken from the thread's stock).
//!
//! The path of a request, top to bottom in [`serve`]:
//! 1. read whatever the client sent (through the timeouts of `server::io`);
//! 2. [`parse`] the head (`weir_http::h1::parse::parse_request`, the one
//!    head parser of both roles) with httparse, hyper's own parser, by hyper's
//!    rules (`hyper::proto::h1::role::Server::parse`): keep-alive, body
//!    framing, `Expect`, `Upgrade`; and by the strict reading of framing
//!    (`weir_http::h1::framing`): a smuggling shape is answered 400, logged,
//!    and closes the connection, as is a chunked body that breaks it; a
//!    malformed head is answered 400, an oversized one 431 or 414, as hyper
//!    answers them;
//! 3. call `pipeline::Listener::handle` with the body as a
//!    `weir_http::h1::Incoming`, fed from the connection only when the
//!    handler asks for more (the first ask sends `100 Continue` if the
//!    client expects it); meanwhile pipelined bytes are read ahead and a
//!    client that closes cancels the request;
//! 4. encode the response head by hyper's rules
//!    (`weir_http::h1::head::encode_response_head`: status line, header
//!    order, implicit `content-length`, chunked for unknown lengths, no body
//!    for `HEAD`/204/304, HTTP/1.0 answers, `connection: close` when
//!    closing, a cached `date`), so a client cannot tell this loop from
//!    hyper's; `conn::differential` compares the two byte for byte;
//! 5. write head and body with one vectored write (large cached files still
//!    go out with `sendfile` through `server::zero_copy`); a body the
//!    handler left unread is discarded if it is already here, else the
//!    connection closes (hyper's rule).
//!

use std::cell::{Cell, RefCell};
use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::drain::Signal;
use super::io::ConnState;
use super::zero_copy::{FileRegion, Regions};
use crate::pipeline::{Current, Listener};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::h1::framing::{self, Violation};
use weir_http::h1::head::{
    BodyLength, Framing, ResponseKind as Kind, encode_response_head as encode_head, has_token,
};
use weir_http::h1::parse::{self, HeadError, MAX_HEADERS};
pub use weir_http::h1::parse::{Head, HeadLimits};
use weir_http::h1::{Chunk, Decoded, Decoder, Feed, Incoming, IncomingError, Sender};
use weir_http::upgrade;

/// The per-thread read buffer: one read takes a typical head, or several
/// pipelined ones, whole.
const READ_BUF_LEN: usize = 16 * 1024;

/// The largest head buffer a thread keeps for the next response; a body
/// that fits in it with its head is copied behind the head and the two go
/// out in one plain write.
const HEAD_BUF_KEPT: usize = 4096;

/// A body the handler left unread is discarded up to this many bytes to
/// keep the connection; past it the connection closes.
const DISCARD_MAX: usize = 64 * 1024;

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The length of the preface's first line, `PRI * HTTP/2.0\r\n`.
const H2_PREFACE_LINE: usize = 16;

thread_local! {
    static READ_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_BUF_LEN].into_boxed_slice());
    /// A spare head buffer: taken while a response is written, put back
    /// after, so the steady state allocates none.
    static HEAD_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    /// The block request heads are copied into from `READ_BUF` (see
    /// [`HEAD_BLOCK`]).
    static HEADS: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Request heads are copied out of the thread's read buffer into blocks of
/// this size, shared by the heads read one after another on the thread. A
/// head, and the slices of it that its request keeps (the target, the field
/// values), then cost no allocation of their own. A block is freed when
/// the last request read into it is done, so a request in progress keeps at
/// most one block (4 KiB) alive, less than the 8 KiB hyper's HTTP/1 buffer
/// keeps per connection; an idle connection keeps none.
const HEAD_BLOCK: usize = 4096;

/// `bytes` copied into the thread's current head block (a new one when it
/// is full), as a buffer of their own.
fn in_head_block(bytes: &[u8]) -> BytesMut {
    HEADS.with_borrow_mut(|block| {
        if block.capacity() < bytes.len() {
            *block = BytesMut::with_capacity(HEAD_BLOCK.max(bytes.len()));
        }
        block.extend_from_slice(bytes);
        block.split()
    })
}

/// What answers the requests [`serve`] reads, one at a time in order:
/// the pipeline's sites ([`Sites`]), or any function from a request to its
/// answer (the admin API's, through `serve_one`).
pub trait Service {
    fn call(
        &mut self,
        req: Request<Incoming>,
        info: &ConnInfo,
    ) -> impl Future<Output = http::Response<Body>>;
}

/// The pipeline: each request takes the current sites (one load; a
/// reload's apply from the next request on).
pub struct Sites<'a>(arc_swap::Cache<&'a Current, Arc<Listener>>);

impl<'a> Sites<'a> {
    pub fn new(listener: &'a Current) -> Self {
        Sites(arc_swap::Cache::new(listener))
    }
}

impl Service for Sites<'_> {
    fn call(
        &mut self,
        req: Request<Incoming>,
        info: &ConnInfo,
    ) -> impl Future<Output = http::Response<Body>> {
        self.0.load().handle(req, info)
    }
}

impl<F, Fut> Service for F
where
    F: FnMut(Request<Incoming>) -> Fut,
    Fut: Future<Output = http::Response<Body>>,
{
    fn call(
        &mut self,
        req: Request<Incoming>,
        _: &ConnInfo,
    ) -> impl Future<Output = http::Response<Body>> {
        self(req)
    }
}

/// What one connection's requests share.
pub struct Shared<'a> {
    pub info: &'a ConnInfo,
    pub state: &'a Arc<ConnState>,
    pub regions: Option<&'a Arc<Regions>>,
    pub limits: HeadLimits,
}

/// How [`serve`] left the connection.
pub enum Outcome {
    /// It has ended.
    Closed,
    /// It opened with the HTTP/2 preface: the bytes read so far, for
    /// hyper's HTTP/2 server.
    H2(Bytes),
    /// A request switched protocols and its answer has gone out: the
    /// connection, with the bytes read past that request, goes to the
    /// handler through this.
    Upgrade(upgrade::Pending, Bytes),
}

/// What one request's exchange leaves of the connection.
enum Next {
    KeepAlive,
    Close,
    Upgrade(upgrade::Pending),
}

/// Serves requests with `service` until the connection ends, switches
/// protocols or turns out to be HTTP/2.
pub async fn serve<IO, S>(io: &mut IO, sh: Shared<'_>, mut service: S, signal: &Signal) -> Outcome
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Service,
{
    // Owned clone for the idle wait, so `signal` stays free.
    let mut drained = pin!({
        let mut s = signal.clone();
        async move { s.signaled().await }
    });
    // The waker `drained` was last polled with.
    let mut drain_waker: Option<Waker> = None;
    let mut pending = BytesMut::new();
    let mut first = true;
    loop {
        // Every complete request already read, in order (pipelining).
        while !pending.is_empty() {
            let (req, head) = match parse(&mut pending, sh.limits) {
                Parsed::NeedMore => break,
                // Prior knowledge is only at the start (as hyper's auto
                // server detects it); later it is a head hyper cannot
                // parse either, and it closes without an answer.
                Parsed::H2 if first => return Outcome::H2(pending.freeze()),
                Parsed::H2 => return Outcome::Closed,
                Parsed::BadPreface => {
                    tracing::debug!("connection from {}: invalid HTTP/2 preface", sh.info.peer);
                    return Outcome::Closed;
                }
                Parsed::Refused(status) => {
                    refuse(io, status, &mut pending, sh.info).await;
                    return Outcome::Closed;
                }
                Parsed::Smuggling(v) => {
                    tracing::warn!("request from {} refused: {v}", sh.info.peer);
                    refuse(io, StatusCode::BAD_REQUEST, &mut pending, sh.info).await;
                    return Outcome::Closed;
                }
                Parsed::Request(req, head) => (req, head),
            };
            first = false;
            match exchange(io, &sh, &mut service, signal, &mut pending, req, head).await {
                Next::KeepAlive => {}
                Next::Close => return Outcome::Closed,
                Next::Upgrade(p) => return Outcome::Upgrade(p, pending.freeze()),
            }
        }
        // Wait for more bytes; while idle, for the drain signal too. A
        // connection that has not sent its first request yet is not idle:
        // its client has just connected to send one (closing it would
        // reset a request in flight, as one accepted just before a binary
        // upgrade or a shutdown is); the header timeout and the grace
        // period bound the wait.
        let idle = pending.is_empty() && !first;
        let n = if idle {
            // The drain future is polled again only once shutdown has begun
            // or the task's waker has changed; in between it stays
            // registered (polling the watch channel at every idle wait
            // costs its lock and version check per request).
            let read = poll_fn(|cx| {
                if let Poll::Ready(r) = poll_read_into(io, cx, &mut pending) {
                    return Poll::Ready(Some(r));
                }
                let registered = drain_waker
                    .as_ref()
                    .is_some_and(|w: &Waker| w.will_wake(cx.waker()));
                if !registered || signal.is_signaled() {
                    if drained.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(None);
                    }
                    drain_waker = Some(cx.waker().clone());
                }
                Poll::Pending
            });
            match read.await {
                Some(r) => r,
                // Draining: boxed, as this path is rare and its timer
                // would otherwise sit in every connection's future.
                None => match Box::pin(last_call(io, &mut pending)).await {
                    Some(r) => r,
                    None => return Outcome::Closed,
                },
            }
        } else {
            poll_fn(|cx| poll_read_into(io, cx, &mut pending)).await
        };
        match n {
            Ok(0) => return Outcome::Closed,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("connection from {}: {e}", sh.info.peer);
                return Outcome::Closed;
            }
        }
    }
}

/// How long an idle keep-alive connection is kept open once the drain has
/// begun, for a request its client may be sending at that very moment.
const LAST_CALL: Duration = Duration::from_secs(1);

/// How long a connection closed under a client that meant to go on reads
/// and drops what still arrives (nginx's `lingering_close`).
const LINGER: Duration = Duration::from_secs(2);

/// The drain has begun while the connection is idle in keep-alive. A
/// closed-loop client sends its next request the moment an answer
/// arrives: closing now would cross that request in the network and reset
/// it. So the connection waits [`LAST_CALL`] for it (the request that
/// comes is served with `Connection: close`); only a connection that stayed
/// quiet that long is closed, and closed gently. `Some`: what the read
/// got; `None`: the connection is closed.
async fn last_call<IO>(io: &mut IO, pending: &mut BytesMut) -> Option<io::Result<usize>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let read = poll_fn(|cx| poll_read_into(io, cx, pending));
    match tokio::time::timeout(LAST_CALL, read).await {
        Ok(r) => Some(r),
        Err(_) => {
            close_gently(io).await;
            None
        }
    }
}

/// Closes a connection whose client may still be sending (RFC 9112
/// §9.6): the FIN goes first, then whatever arrives is read and dropped
/// until the client closes too, for at most [`LINGER`]. Closing a socket
/// with unread bytes makes the kernel send a reset, which can destroy the
/// last answer before the client has read it, and turns a request that
/// crossed the FIN into a reset instead of a clean close.
async fn close_gently<IO>(io: &mut IO)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    if io.shutdown().await.is_err() {
        return;
    }
    let drop_all = poll_fn(|cx| {
        READ_BUF.with_borrow_mut(|buf| {
            let mut budget = DISCARD_MAX;
            loop {
                let mut rb = ReadBuf::new(buf);
                match ready!(Pin::new(&mut *io).poll_read(cx, &mut rb)) {
                    Ok(()) if !rb.filled().is_empty() && rb.filled().len() < budget => {
                        budget -= rb.filled().len();
                    }
                    _ => return Poll::Ready(()),
                }
            }
        })
    });
    let _ = tokio::time::timeout(LINGER, drop_all).await;
}

/// Answers a request the connection cannot go on after, and closes.
async fn refuse<IO>(io: &mut IO, status: StatusCode, pending: &mut BytesMut, info: &ConnInfo)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let resp = http::Response::builder()
        .status(status)
        .body(Body::Empty)
        .unwrap_or_default();
    let r = write_response(io, resp, Kind::default(), true, None, pending).await;
    let _ = after_write(io, r, info).await;
}

/// One request: the handler, its body, its answer.
async fn exchange<IO, S: Service>(
    io: &mut IO,
    sh: &Shared<'_>,
    service: &mut S,
    signal: &Signal,
    pending: &mut BytesMut,
    mut req: Request<Incoming>,
    head: Head,
) -> Next
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let kind = Kind {
        is_head: req.method() == Method::HEAD,
        connect: req.method() == Method::CONNECT,
        http10: head.http10,
        upgrade: head.upgrade,
        trailers: req
            .headers()
            .get_all(header::TE)
            .iter()
            .any(|v| has_token(v.as_bytes(), b"trailers")),
    };
    let mut inbound = head.body.map(|decoder| {
        // As hyper: the first piece is read at once (so bad framing ends
        // the request before the handler acts on it), unless the client
        // waits for a `100 Continue`.
        let eager = !head.expect_continue || head.http10;
        let (tx, body) = weir_http::h1::channel(decoder.remaining(), eager);
        *req.body_mut() = body;
        Inbound {
            tx,
            decoder,
            cont: if head.expect_continue && !head.http10 {
                Continue::Owed(0)
            } else {
                Continue::No
            },
            end: None,
        }
    });
    let switch = head.upgrade.then(|| {
        let (p, on) = upgrade::pending();
        req.extensions_mut().insert(on);
        p
    });
    sh.state.request_started();
    // Pinned here and lent to `handle_reading`: passed by value, the
    // handler's future would be stored twice in this connection's state.
    let handled = {
        let handler = pin!(service.call(req, sh.info));
        handle_reading(handler, io, pending, sh.limits.max_buf, inbound.as_mut()).await
    };
    sh.state.request_done();
    // The client closed (or the stream failed) mid-request: drop the
    // handler, as hyper does without half-close.
    let Some(mut resp) = handled else {
        if let Some(Inbound {
            end: Some(BodyEnd::Refused(e)),
            ..
        }) = inbound
        {
            // The body's framing broke the strict reading before an answer.
            tracing::warn!("request from {} refused: {e}", sh.info.peer);
            refuse(io, StatusCode::BAD_REQUEST, pending, sh.info).await;
        } else {
            let _ = io.shutdown().await;
        }
        return Next::Close;
    };
    if let Some(r) = resp.extensions_mut().remove::<FileRegion>()
        && let Some(regions) = sh.regions
    {
        regions.push(r);
    }
    let status = resp.status();
    let mut close = !head.keep_alive;
    if let Some(p) = switch {
        if status == StatusCode::SWITCHING_PROTOCOLS || (kind.connect && status.is_success()) {
            let r = write_response(io, resp, kind, false, None, pending).await;
            return match r {
                Ok(_) => Next::Upgrade(p),
                Err(e) => {
                    tracing::debug!("connection from {}: {e}", sh.info.peer);
                    Next::Close
                }
            };
        }
        // Not switched: the client may already be sending the protocol it
        // asked for, so no request may follow it (hyper's rule).
        close = true;
    }
    if let Some(inb) = &mut inbound
        && inb.end.is_none()
        && inb.tx_dropped()
        && !poll_fn(|cx| Poll::Ready(inb.discard(io, cx, pending))).await
    {
        close = true;
    }
    // Draining: this is the connection's last answer, unless the client
    // has already sent more (pipelined, or the next head begun), which is
    // answered too.
    if signal.is_signaled() && pending.is_empty() {
        close = true;
    }
    let r = write_response(io, resp, kind, close, inbound.as_mut(), pending).await;
    let r = match (r, inbound) {
        (Ok(true), Some(mut inb)) if inb.end != Some(BodyEnd::Done) => {
            // The answer is out and the body is not read to its end: drop
            // what is already here, else close (hyper's
            // `poll_drain_or_close_read`).
            let done =
                inb.end.is_none() && poll_fn(|cx| Poll::Ready(inb.discard(io, cx, pending))).await;
            Ok(done)
        }
        (r, _) => r,
    };
    // A client that meant to go on may be sending its next request now.
    if head.keep_alive && matches!(r, Ok(false)) {
        // Boxed: its timer would otherwise sit in every connection's future.
        Box::pin(close_gently(io)).await;
        return Next::Close;
    }
    match after_write(io, r, sh.info).await {
        Some(_) => Next::Close,
        None => Next::KeepAlive,
    }
}

/// What a written response leaves of the connection: `None`, it goes on;
/// else it has ended (closed after the response, or failed).
async fn after_write<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    written: io::Result<bool>,
    info: &ConnInfo,
) -> Option<()> {
    match written {
        Ok(true) => None,
        Ok(false) => {
            let _ = io.shutdown().await;
            Some(())
        }
        Err(e) => {
            tracing::debug!("connection from {}: {e}", info.peer);
            Some(())
        }
    }
}

/// Reads what the stream has into `pending` through the thread's buffer,
/// so an idle connection owns no read buffer. `Ok(0)`: end of stream.
fn poll_read_into<IO: AsyncRead + Unpin>(
    io: &mut IO,
    cx: &mut Context<'_>,
    pending: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    READ_BUF.with_borrow_mut(|buf| {
        let mut rb = ReadBuf::new(buf);
        ready!(Pin::new(io).poll_read(cx, &mut rb))?;
        let got = rb.filled();
        if pending.is_empty() && !got.is_empty() {
            *pending = in_head_block(got);
        } else {
            pending.extend_from_slice(got);
        }
        Poll::Ready(Ok(got.len()))
    })
}

/// The `100 Continue` a client that sent `Expect: 100-continue` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Continue {
    /// Not asked for, already sent, or too late (the answer has begun).
    No,
    /// Owed, with this many of its bytes written.
    Owed(usize),
}

/// How a request body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyEnd {
    /// Read to its end: the next request may follow.
    Done,
    /// Broken off (the client went away): the connection ends.
    Broken,
    /// Refused by the strict reading (bad chunk line or trailer): answered
    /// 400 if no answer has begun, and the connection ends.
    Refused(weir_http::h1::DecodeError),
}

/// A request body being read from the connection for its handler.
struct Inbound {
    tx: Sender,
    decoder: Decoder,
    cont: Continue,
    end: Option<BodyEnd>,
}

impl Inbound {
    fn tx_dropped(&self) -> bool {
        let waker = Waker::noop();
        matches!(
            self.tx.poll_want(&mut Context::from_waker(waker)),
            Poll::Ready(Feed::Dropped)
        )
    }

    /// Feeds the body what it asks for, reading from `io` only then:
    /// `Ready` once the body has ended, one way or the other.
    fn poll_feed<IO>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
        pending: &mut BytesMut,
    ) -> Poll<()>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            if self.end.is_some() {
                return Poll::Ready(());
            }
            match ready!(self.tx.poll_want(cx)) {
                // Discarded, or the connection closed, after the answer.
                Feed::Dropped => return Poll::Pending,
                Feed::Frame => {}
            }
            // hyper's rule: the first ask for the body, before any answer,
            // tells a waiting client to send it.
            while let Continue::Owed(sent) = &mut self.cont {
                match ready!(Pin::new(&mut *io).poll_write(cx, &CONTINUE[*sent..])) {
                    Ok(n) if n > 0 => {
                        *sent += n;
                        if *sent == CONTINUE.len() {
                            self.cont = Continue::No;
                            if ready!(Pin::new(&mut *io).poll_flush(cx)).is_err() {
                                return self.broken(IncomingError::Closed);
                            }
                        }
                    }
                    _ => return self.broken(IncomingError::Closed),
                }
            }
            match self.decoder.decode(pending) {
                Ok(Decoded::Data(data)) => {
                    self.tx.data(data, self.decoder.remaining());
                    if self.decoder.is_done() {
                        self.tx.end();
                        self.end = Some(BodyEnd::Done);
                    }
                }
                Ok(Decoded::Trailers(map)) => {
                    self.tx.trailers(map);
                    self.end = Some(BodyEnd::Done);
                }
                Ok(Decoded::End) => {
                    self.tx.end();
                    self.end = Some(BodyEnd::Done);
                }
                Ok(Decoded::NeedMore) => match ready!(poll_read_into(io, cx, pending)) {
                    Ok(0) | Err(_) => return self.broken(IncomingError::Closed),
                    Ok(_) => {}
                },
                Err(e) => {
                    self.tx.fail(e.into());
                    self.end = Some(BodyEnd::Refused(e));
                    return Poll::Ready(());
                }
            }
        }
    }

    fn broken(&mut self, e: IncomingError) -> Poll<()> {
        self.tx.fail(e);
        self.end = Some(BodyEnd::Broken);
        Poll::Ready(())
    }

    /// Drops the rest of a body nobody reads, as far as it is already here
    /// (never waiting for the client, never past [`DISCARD_MAX`]): whether
    /// it reached its end.
    fn discard<IO: AsyncRead + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
        pending: &mut BytesMut,
    ) -> bool {
        let mut budget = DISCARD_MAX;
        loop {
            match self.decoder.decode(pending) {
                Ok(Decoded::Data(d)) if d.len() < budget => budget -= d.len(),
                Ok(Decoded::Trailers(_) | Decoded::End) => {
                    self.end = Some(BodyEnd::Done);
                    return true;
                }
                Ok(Decoded::NeedMore) => match poll_read_into(io, cx, pending) {
                    Poll::Ready(Ok(n)) if n > 0 => {}
                    _ => return false,
                },
                Ok(Decoded::Data(_)) | Err(_) => return false,
            }
        }
    }
}

/// Runs the handler, and meanwhile feeds its body and reads on: pipelined
/// requests are kept (up to `max` bytes) and a client that goes away
/// cancels the request. `None`: the client closed or the stream failed.
async fn handle_reading<F, IO>(
    mut handler: Pin<&mut F>,
    io: &mut IO,
    pending: &mut BytesMut,
    max: usize,
    mut inbound: Option<&mut Inbound>,
) -> Option<F::Output>
where
    F: Future,
    IO: AsyncRead + AsyncWrite + Unpin,
{
    poll_fn(|cx| {
        // The body first: a body that breaks off (bad framing, the client
        // gone) ends the request before the handler acts on it, as hyper
        // ends the connection.
        if let Some(inb) = inbound.as_deref_mut()
            && inb.end.is_none()
            && inb.poll_feed(io, cx, pending).is_ready()
            && matches!(inb.end, Some(BodyEnd::Broken | BodyEnd::Refused(_)))
        {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = handler.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        if inbound.as_deref().is_some_and(|inb| inb.end.is_none()) {
            // Reading on here would take body bytes the body has not
            // asked for.
            return Poll::Pending;
        }
        while pending.len() < max {
            match poll_read_into(io, cx, pending) {
                Poll::Pending => break,
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => {}
            }
        }
        Poll::Pending
    })
    .await
}

// Returned by value once per request and matched at once: boxing the large
// variant would cost an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    /// A request to serve.
    Request(Request<Incoming>, Head),
    /// The head is not complete yet.
    NeedMore,
    /// A head refused with this status (400, 414, 431); the connection closes.
    Refused(StatusCode),
    /// A head whose framing the strict reading refuses (a smuggling
    /// shape): 400, logged, and the connection closes.
    Smuggling(Violation),
    /// The HTTP/2 connection preface.
    H2,
    /// The preface's first line followed by anything but its rest.
    BadPreface,
}

/// Parses the head at the start of `pending` and, if it is a request,
/// takes it out of `pending`; otherwise `pending` is left as it was.
pub fn parse(pending: &mut BytesMut, limits: HeadLimits) -> Parsed {
    if pending.starts_with(H2_PREFACE) {
        return Parsed::H2;
    }
    if pending.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(pending) {
        return Parsed::NeedMore;
    }
    // The preface's first line, then anything but the rest of it: no
    // HTTP/1.1 request (httparse would take it for one of version 2.0 and
    // have it answered 400), but a broken HTTP/2 preface, which closes the
    // connection (RFC 9113 §3.4).
    if pending.starts_with(&H2_PREFACE[..H2_PREFACE_LINE]) {
        return Parsed::BadPreface;
    }
    let parsed = match parse::parse_request(pending, limits) {
        Ok(Some((req, head))) => Parsed::Request(req, head),
        Ok(None) => Parsed::NeedMore,
        Err(HeadError::Framing(v)) => Parsed::Smuggling(v),
        Err(e) => Parsed::Refused(e.status()),
    };
    // Usually nothing is left and `pending` holds no memory; a pipelined
    // remainder, or a head not taken, is copied out so the block the head
    // was read into can go (a stalled client does not hold it alive).
    *pending = if pending.is_empty() {
        BytesMut::new()
    } else {
        BytesMut::from(&pending[..])
    };
    parsed
}

/// The worker's spare head buffer, empty (a new one if it is lent out).
pub(crate) fn take_head_buf() -> Vec<u8> {
    let mut head = HEAD_BUF.take();
    head.clear();
    head
}

/// Gives a head buffer back for the next response.
pub(crate) fn give_head_buf(mut head: Vec<u8>) {
    head.clear();
    if head.capacity() <= HEAD_BUF_KEPT {
        HEAD_BUF.set(head);
    }
}

/// Writes one response; `Ok(false)` when the connection must close after it.
async fn write_response<IO>(
    io: &mut IO,
    resp: http::Response<Body>,
    kind: Kind,
    mut close: bool,
    mut inbound: Option<&mut Inbound>,
    pending: &mut BytesMut,
) -> io::Result<bool>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    if let Some(inb) = inbound.as_deref_mut() {
        // The answer has begun: too late to ask for the body.
        inb.cont = Continue::No;
    }
    let (mut parts, mut body) = resp.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::Empty
    } else {
        match body.size_hint().exact() {
            Some(n) => BodyLength::Known(n),
            None => BodyLength::Unknown,
        }
    };
    // The fields a chunked answer may send as trailers (hyper's rule: named
    // in `Trailer`, to a client that accepts them).
    let allowed: Vec<HeaderValue> = if kind.trailers && !kind.http10 {
        parts
            .headers
            .get_all(header::TRAILER)
            .iter()
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut head = take_head_buf();
    let framing = encode_head(&mut parts, length, kind, &mut close, &mut head);
    // The fields are in `head` now: the map's table serves a later message.
    weir_http::header_maps::give(std::mem::take(&mut parts.headers));
    let r = write_body(
        io, &mut head, &mut body, framing, &allowed, inbound, pending,
    )
    .await;
    give_head_buf(head);
    match r {
        Ok(true) => Ok(!close),
        // The body did not end as its head announced: the client cannot
        // find the next response, so the connection ends.
        Ok(false) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends `head` and the body after it; `Ok(false)` if the body broke off or
/// did not match its length.
async fn write_body<IO>(
    io: &mut IO,
    head: &mut Vec<u8>,
    body: &mut Body,
    framing: Framing,
    allowed: &[HeaderValue],
    mut inbound: Option<&mut Inbound>,
    pending: &mut BytesMut,
) -> io::Result<bool>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut body = Pin::new(body);
    // `0\r\n`, the trailer fields, `\r\n`: the end of a chunked body.
    let mut last_chunk: Vec<u8> = Vec::new();
    if framing == Framing::Length(0) {
        write_all(io, &mut [IoSlice::new(head)]).await?;
        flush(io).await?;
        return Ok(true);
    }
    let mut left = match framing {
        Framing::Length(n) => n,
        Framing::Chunked | Framing::Close => u64::MAX,
    };
    // `head` is emptied once it has gone out (a head is never empty).
    let mut ok = true;
    loop {
        // The answer may wait on the request body (a proxied upload the
        // upstream echoes): feed it while waiting for the next frame.
        let frame = poll_fn(|cx| {
            if let Some(inb) = inbound.as_deref_mut()
                && inb.end.is_none()
            {
                let _ = inb.poll_feed(io, cx, pending);
            }
            body.as_mut().poll_frame(cx)
        })
        .await;
        let data = match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(f) => {
                    if let Ok(t) = f.into_trailers()
                        && framing == Framing::Chunked
                    {
                        last_chunk.clear();
                        weir_http::h1::encode_last_chunk(
                            &t,
                            |name| {
                                allowed
                                    .iter()
                                    .any(|v| has_token(v.as_bytes(), name.as_str().as_bytes()))
                            },
                            &mut last_chunk,
                        );
                    }
                    continue;
                }
            },
            Some(Err(e)) => {
                tracing::debug!("response body failed: {e}");
                ok = false;
                break;
            }
            None => break,
        };
        if data.is_empty() {
            continue;
        }
        match framing {
            Framing::Length(_) => {
                let n = (data.len() as u64).min(left) as usize;
                match &mut *head {
                    // A small body goes out copied behind its head, in one
                    // `send`: the kernel's layers above TCP cost about twice
                    // as much for a `writev` as for a `send`; a copy of a few
                    // hundred bytes costs far less.
                    h if !h.is_empty() && h.len() + n <= HEAD_BUF_KEPT => {
                        h.extend_from_slice(&data[..n]);
                        write_all(io, &mut [IoSlice::new(h)]).await?;
                    }
                    h => {
                        write_all(io, &mut [IoSlice::new(h), IoSlice::new(&data[..n])]).await?;
                    }
                }
                head.clear();
                left -= n as u64;
                if n < data.len() {
                    ok = false;
                    break;
                }
            }
            Framing::Close => {
                write_all(io, &mut [IoSlice::new(head), IoSlice::new(&data)]).await?;
                head.clear();
            }
            Framing::Chunked => {
                let chunk = Chunk::framed(data);
                let [size, data, crlf] = chunk.slices();
                write_all(io, &mut [IoSlice::new(head), size, data, crlf]).await?;
                head.clear();
            }
        }
        flush(io).await?;
    }
    let h = &head[..];
    match framing {
        Framing::Length(n) => {
            if !h.is_empty() {
                write_all(io, &mut [IoSlice::new(h)]).await?;
            }
            ok &= left == 0 || n == 0;
        }
        Framing::Chunked if ok => {
            let end: &[u8] = if last_chunk.is_empty() {
                b"0\r\n\r\n"
            } else {
                &last_chunk
            };
            write_all(io, &mut [IoSlice::new(h), IoSlice::new(end)]).await?;
        }
        Framing::Chunked | Framing::Close => {
            if !h.is_empty() {
                write_all(io, &mut [IoSlice::new(h)]).await?;
            }
            // The end of a close-delimited body is the end of the connection.
            ok &= framing != Framing::Close;
        }
    }
    flush(io).await?;
    Ok(ok)
}

/// Writes every slice; one slice goes out with a plain write (`send`), not
/// a vectored one.
async fn write_all<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    mut bufs: &mut [IoSlice<'_>],
) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = if let [one] = bufs {
            poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, one)).await?
        } else {
            poll_fn(|cx| Pin::new(&mut *io).poll_write_vectored(cx, bufs)).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

async fn flush<IO: AsyncWrite + Unpin>(io: &mut IO) -> io::Result<()> {
    poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx)).await
}

/// The property the fuzzers check (`h1_parse` under cargo-fuzz, and the
/// seeded mutation test): panics if [`parse`] breaks it.
#[doc(hidden)]
pub fn check_parse(input: &[u8], max_head: usize) {
    let limits = HeadLimits {
        max_buf: max_head,
        max_headers: MAX_HEADERS,
        max_trailers: max_head,
    };
    let mut b = BytesMut::from(input);
    match parse(&mut b, limits) {
        Parsed::Request(r, head) => {
            let used = input.len() - b.len();
            assert_eq!(&input[used..], &b[..], "the rest is left as it was");
            let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut hs);
            assert_eq!(
                req.parse(&input[..used]),
                Ok(httparse::Status::Complete(used)),
                "exactly one complete head is taken"
            );
            assert_eq!(r.method().as_str(), req.method.unwrap());
            assert_eq!(head.http10, req.version == Some(0));
            assert!(!head.http10 || !head.upgrade || r.method() == Method::CONNECT);
            let te = r.headers().contains_key(header::TRANSFER_ENCODING);
            assert!(!te || head.body.is_some(), "a chunked request has a body");
            assert!(!(te && head.http10), "HTTP/1.0 has no chunked bodies");
            if head.body.is_none() {
                assert!(!te);
                assert!(
                    r.headers()
                        .get(header::CONTENT_LENGTH)
                        .is_none_or(|v| v.as_bytes().iter().all(|&c| c == b'0'))
                );
            }
            assert!(
                head.keep_alive.then_some(()).is_none()
                    || !r
                        .headers()
                        .get_all(header::CONNECTION)
                        .iter()
                        .any(|v| has_token(v.as_bytes(), b"close"))
            );
            assert!(r.headers().len() <= req.headers.len());
            // The strict reading: one framing field at most, exactly
            // `chunked`, and CRLF line endings only.
            let cls = r.headers().get_all(header::CONTENT_LENGTH).iter().count();
            let tes: Vec<_> = r
                .headers()
                .get_all(header::TRANSFER_ENCODING)
                .iter()
                .collect();
            assert!(cls + tes.len() <= 1, "one framing field at most");
            assert!(tes.iter().all(|v| v.as_bytes().trim_ascii() == b"chunked"));
            assert!(framing::check_line_endings(&input[..used]).is_ok());
        }
        Parsed::NeedMore
        | Parsed::Refused(_)
        | Parsed::Smuggling(_)
        | Parsed::H2
        | Parsed::BadPreface => {
            assert_eq!(&b[..], input)
        }
    }
}

#[cfg(test)]
mod tests;
