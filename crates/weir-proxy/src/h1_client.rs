//! weir's own HTTP/1.1 client for upstream connections: every HTTP/1.1
//! request the proxy sends (a body in memory, a streamed body of known
//! length or chunked with trailers, an Upgrade whose 101 hands the
//! connection to a tunnel) and every HTTP/1.1 health check. HTTP/2
//! upstreams go through hyper's client.
//!
//! Why by hand: hyper's client runs each upstream connection as a task of its
//! own and passes every request, response and body chunk across channels (an
//! mpsc send, a oneshot for the answer, a body channel), with a wake-up of
//! the other task at each step. The profile of proxying a 164-byte response
//! put that hand-off, its allocations and the extra `HeaderMap`s at most of
//! weir's own user time. Here the client connection's task drives the upstream
//! connection itself: the request head is encoded into a reused per-thread
//! buffer and written with the body in one call, the response head is parsed
//! from the connection's buffer (`weir_http::h1::parse::parse_response`, the
//! one head parser of both roles), and a body that has already
//! arrived is handed on as one `Bytes` without a copy.
//!
//! Owns: request encoding (the head, and a streamed body written as it
//! arrives while the response is read, so an early answer such as a 413
//! ends the upload), reading the response as its head frames it (no body,
//! Content-Length, chunked with trailers through `weir_http::h1::Decoder`,
//! or until close), whether the connection can be reused, and reading the
//! body. Never decides which upstream to use, never
//! retries, never touches the pool: it says how far a failed exchange got
//! (nothing written, the body untouched), and `proxy` decides.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName};

use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use weir_http::body::{Body, BodyError};
use weir_http::deadline::Deadline;
use weir_http::h1::parse::{self, HeadError, Response as Parsed, parse_response};
pub use weir_http::h1::parse::{ResponseFraming as Framing, ResponseHead as Head};
use weir_http::h1::{Chunk, Decoded, Decoder};

/// Any byte stream an upstream connection runs on (TCP, Unix, TLS).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The largest response head accepted.
pub const MAX_HEAD: usize = parse::MAX_RESPONSE_HEAD;
/// How much is read from the upstream at a time.
const READ_CHUNK: usize = 16 * 1024;

/// Why an exchange with the upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("writing the request: {0}")]
    Write(std::io::Error),
    #[error("reading the response: {0}")]
    Read(std::io::Error),
    #[error("the upstream closed the connection without a response")]
    Closed,
    #[error("the upstream closed the connection in the middle of the response head")]
    ClosedInHead,
    #[error("response head: {0}")]
    Head(#[from] HeadError),
    #[error("malformed response body: {0}")]
    BadChunk(#[from] weir_http::h1::DecodeError),
    #[error("the upstream closed the connection in the middle of the body")]
    Truncated,
    #[error("the request body failed while the response was read: {0}")]
    RequestBody(BodyError),
}

impl ClientError {
    /// The connection was gone before any byte of a response: on a reused
    /// connection, the upstream closed it as the request went out.
    pub fn is_closed_before_response(&self) -> bool {
        use std::io::ErrorKind as K;
        match self {
            ClientError::Closed | ClientError::Write(_) => true,
            ClientError::Read(e) => matches!(
                e.kind(),
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
            ),
            _ => false,
        }
    }
}

/// One HTTP/1.1 connection to an upstream.
pub struct Conn {
    io: Box<dyn Io>,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// It has served a request before (it came from the pool).
    reused: bool,
    /// The response timer, made at the first exchange and kept for the next.
    timer: Option<ResponseTimer>,
}

/// A response timeout that lives as long as the upstream connection: the
/// one re-armed timer (`weir_http::deadline`), armed once and moved in a
/// field per request rather than made per request.
///
/// The timer is registered with the connection's own [`Relay`] waker, not
/// with a request's: a request only puts its waker in the relay and takes
/// it out again. Polling the timer with each request's waker, and then
/// with a no-op one so an idle connection keeps no task alive, was two
/// timer polls per request.
///
/// All of it sits behind one pointer: the request future that holds it is
/// boxed per request, and every byte it grows by counts against glibc's
/// per-thread cache of small blocks (see `Proxy::serve`).
pub struct ResponseTimer(Box<Timer>);

struct Timer {
    deadline: Deadline,
    relay: Arc<Relay>,
    relay_waker: Waker,
}

/// Passes the timer's wake-up on to the request waiting on the connection.
struct Relay(futures_util::task::AtomicWaker);

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.0.wake();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake();
    }
}

impl ResponseTimer {
    fn new() -> ResponseTimer {
        let relay = Arc::new(Relay(futures_util::task::AtomicWaker::new()));
        ResponseTimer(Box::new(Timer {
            deadline: Deadline::new(),
            relay_waker: Waker::from(relay.clone()),
            relay,
        }))
    }

    /// Runs `fut` for at most `limit`; `None` if the time ran out first.
    ///
    /// `fut` comes pinned by the caller, not by value: an `async fn` keeps
    /// a by-value argument in its state and then its pinned copy too, which
    /// pushes the request's future past glibc's per-thread cache of small
    /// blocks.
    pub async fn within<F: Future>(
        &mut self,
        limit: std::time::Duration,
        mut fut: Pin<&mut F>,
    ) -> Option<F::Output> {
        let deadline = weir_http::tokio_now!() + limit;
        let t = &mut *self.0;
        // However this ends (even dropped mid-way), an idle connection
        // keeps no request's task alive.
        let _clear = ClearOnDrop(&t.relay);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            // First the waker, then the check: a timer that fires after
            // the check wakes this task through the relay.
            t.relay.0.register(cx.waker());
            let mut relayed = Context::from_waker(&t.relay_waker);
            if t.deadline.expired(deadline, &mut relayed) {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

struct ClearOnDrop<'a>(&'a Relay);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        drop(self.0.0.take());
    }
}

thread_local! {
    /// The request head being encoded; taken out across the write and put
    /// back after, so a worker keeps one buffer, not one per connection.
    static REQ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Conn {
    pub fn new(io: Box<dyn Io>) -> Conn {
        Conn {
            io,
            buf: BytesMut::new(),
            reused: false,
            timer: None,
        }
    }

    /// The connection's response timer, to run an exchange [`ResponseTimer::within`]
    /// its timeout; give it back with [`Conn::put_timer`].
    pub fn take_timer(&mut self) -> ResponseTimer {
        self.timer.take().unwrap_or_else(ResponseTimer::new)
    }

    pub fn put_timer(&mut self, t: ResponseTimer) {
        self.timer = Some(t);
    }

    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Marks the connection as going back to the pool.
    pub fn set_reused(&mut self) {
        self.reused = true;
    }

    /// Whether an idle connection can take a request: no byte and no close
    /// is waiting on it. (An upstream that closed an idle connection makes it
    /// readable at once; reading it would only find the end.)
    pub fn is_idle_and_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        let mut b = [0u8; 1];
        let mut rb = ReadBuf::new(&mut b);
        matches!(
            Pin::new(&mut *self.io).poll_read(&mut cx, &mut rb),
            Poll::Pending
        )
    }

    /// The connection after a 101: the stream, with the bytes the upstream
    /// sent past the 101's head put back in front.
    pub fn into_upgraded(self) -> weir_http::upgrade::Upgraded {
        weir_http::upgrade::Upgraded::boxed(self.io, self.buf.freeze())
    }

    /// Writes the request. On failure, says whether nothing at all went out
    /// (the upstream then saw no request and any request may be retried).
    pub async fn send(&mut self, req: Encoded<'_>) -> Result<(), (ClientError, bool)> {
        let Encoded { out, body } = req;
        let r = write_all(&mut *self.io, &out, body).await;
        if out.capacity() <= 64 * 1024 {
            REQ_BUF.with(|b| *b.borrow_mut() = out);
        }
        r.map_err(|(e, written)| (ClientError::Write(e), written == 0))
    }

    /// Reads the final response head (1xx interim responses are skipped, as
    /// hyper's client does). `head_request`: the request was HEAD.
    pub async fn read_head(&mut self, head_request: bool) -> Result<Head, ClientError> {
        self.read_final(head_request, false).await
    }

    /// Reads the answer to an Upgrade request: a 101 (then the connection
    /// is the tunnel's, [`Conn::into_upgraded`]) or any final response.
    pub async fn read_upgrade_head(&mut self) -> Result<Head, ClientError> {
        self.read_final(false, true).await
    }

    async fn read_final(&mut self, head_request: bool, upgrade: bool) -> Result<Head, ClientError> {
        loop {
            if !self.buf.is_empty() {
                match parse_response(&mut self.buf, head_request, upgrade)? {
                    Some(Parsed::Interim) => continue,
                    Some(Parsed::Final(head)) => return Ok(head),
                    None => {}
                }
            }
            let n = std::future::poll_fn(|cx| self.poll_fill(cx))
                .await
                .map_err(ClientError::Read)?;
            if n == 0 {
                return Err(if self.buf.is_empty() {
                    ClientError::Closed
                } else {
                    ClientError::ClosedInHead
                });
            }
        }
    }

    /// Takes a body that has fully arrived already.
    pub fn take_buffered(&mut self, framing: Framing) -> Option<Bytes> {
        match framing {
            Framing::None => Some(Bytes::new()),
            Framing::Length(n) if self.buf.len() as u64 >= n => {
                Some(self.buf.split_to(n as usize).freeze())
            }
            _ => None,
        }
    }

    /// Whether the connection is clean after a complete response (nothing
    /// the upstream sent beyond it).
    pub fn is_clean(&self) -> bool {
        self.buf.is_empty()
    }

    /// Reads more from the upstream into the buffer; `Ok(0)` at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        self.buf.reserve(READ_CHUNK);
        tokio_util::io::poll_read_buf(Pin::new(&mut *self.io), cx, &mut self.buf)
    }
}

/// Why a streamed exchange failed.
#[derive(Debug)]
pub enum StreamError {
    /// The client's request body failed (aborted, malformed): its fault.
    Body(BodyError),
    /// The upstream exchange failed. `nothing_sent`: no byte went out;
    /// `body_untouched`: no frame was taken from the request body, which
    /// can still be sent elsewhere.
    Upstream {
        error: ClientError,
        nothing_sent: bool,
        body_untouched: bool,
    },
}

/// One write of what is left of `c`, in a single vectored call.
fn poll_write_chunk(
    c: &mut Chunk,
    io: &mut dyn Io,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    let n = std::task::ready!(Pin::new(io).poll_write_vectored(cx, &c.slices()))?;
    if n == 0 {
        return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
    }
    c.advance(n);
    Poll::Ready(Ok(()))
}

/// What the request makes of its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Response,
    /// A HEAD request: no body follows any head.
    HeadRequest,
    /// An Upgrade: a 101 is a final answer.
    Upgrade,
}

/// Where the upload of a streamed request body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upload {
    /// Taking frames from the body and writing them.
    Body,
    /// The body has ended: writing what ends it (the last chunk).
    Last,
    /// Flushing what was written.
    Flush,
    Done,
    /// The upstream stopped reading (a reset or a broken pipe): nothing
    /// more is written, and its answer, if one comes, is still read.
    Gone,
}

/// The errors that mean "the upstream stopped reading", not "the
/// connection broke": its answer may already be on the way.
fn stopped_reading(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// A request body being sent: taken from the client's body frame by frame
/// and written, in chunks when `chunked`. It outlives the response head
/// when the upstream answers before the body is all sent (an echo streams
/// its answer while it reads; a 413 does not wait for it): the response
/// body then goes on writing it ([`ResponseBody::new`]).
pub struct Uploading {
    body: Body,
    out: Chunk,
    state: Upload,
    chunked: bool,
    /// The trailer fields the request's `Trailer` declared (hyper's client
    /// sends only those).
    trailers: Vec<HeaderName>,
    /// A frame was taken from the body: it cannot be sent elsewhere.
    touched: bool,
}

impl Uploading {
    pub fn new(body: Body, chunked: bool, trailers: Vec<HeaderName>) -> Self {
        let state = if http_body::Body::is_end_stream(&body) {
            Upload::Last
        } else {
            Upload::Body
        };
        Uploading {
            body,
            out: Chunk::default(),
            state,
            chunked,
            trailers,
            touched: false,
        }
    }

    /// The whole body went out (else the connection cannot be reused).
    pub fn is_sent(&self) -> bool {
        self.state == Upload::Done
    }

    /// The body, when no frame has been taken from it.
    pub fn into_untouched(self) -> Option<Body> {
        (!self.touched).then_some(self.body)
    }

    /// Writes what it can: `Ready(Ok)` once there is nothing more to write
    /// (sent, or the upstream stopped reading), `Pending` when the body or
    /// the connection must be waited for. `Err(Err)`: the client's body
    /// failed.
    fn poll_send(
        &mut self,
        io: &mut dyn Io,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Result<ClientError, BodyError>>> {
        loop {
            let written = match self.state {
                Upload::Done | Upload::Gone => return Poll::Ready(Ok(())),
                Upload::Body | Upload::Last if !self.out.is_empty() => {
                    std::task::ready!(poll_write_chunk(&mut self.out, io, cx))
                }
                Upload::Last => {
                    self.state = Upload::Flush;
                    Ok(())
                }
                Upload::Flush => {
                    let r = std::task::ready!(Pin::new(&mut *io).poll_flush(cx));
                    self.state = Upload::Done;
                    r
                }
                Upload::Body => {
                    let frame = std::task::ready!(http_body::Body::poll_frame(
                        Pin::new(&mut self.body),
                        cx
                    ));
                    self.touched = true;
                    match frame {
                        None => {
                            if self.chunked {
                                self.out = Chunk::plain(Bytes::from_static(b"0\r\n\r\n"));
                            }
                            self.state = Upload::Last;
                        }
                        Some(Err(e)) => return Poll::Ready(Err(Err(e))),
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) if data.is_empty() => {}
                            Ok(data) if self.chunked => self.out = Chunk::framed(data),
                            Ok(data) => self.out = Chunk::plain(data),
                            Err(frame) => {
                                // The trailer section ends a chunked body; a
                                // body of known length has nowhere to put it.
                                if let Ok(t) = frame.into_trailers()
                                    && self.chunked
                                {
                                    self.out = Chunk::plain(trailer_section(&t, &self.trailers));
                                    self.state = Upload::Last;
                                }
                            }
                        },
                    }
                    Ok(())
                }
            };
            if let Err(e) = written {
                if !stopped_reading(&e) {
                    return Poll::Ready(Err(Ok(ClientError::Write(e))));
                }
                tracing::debug!(
                    "upstream stopped reading the request ({e}); waiting for its answer"
                );
                self.state = Upload::Gone;
            }
        }
    }
}

impl Conn {
    /// Writes the head, then the body as it arrives, reading the response
    /// all along; returns at the final response head, which may come
    /// before the body is all sent (see [`Uploading`]).
    ///
    /// A write the upstream refused by closing (RFC 9112 §9.5) only stops
    /// the upload, so an answer it sent first is still read.
    pub async fn send_streamed(
        &mut self,
        req: Encoded<'_>,
        upload: &mut Uploading,
        expect: Expect,
    ) -> Result<Head, StreamError> {
        self.send(req)
            .await
            .map_err(|(error, nothing_sent)| StreamError::Upstream {
                error,
                nothing_sent,
                body_untouched: true,
            })?;
        let r = std::future::poll_fn(|cx| self.poll_streamed(cx, upload, expect)).await;
        r.map_err(|e| match e {
            Ok(error) => StreamError::Upstream {
                error,
                nothing_sent: false,
                body_untouched: !upload.touched,
            },
            Err(e) => StreamError::Body(e),
        })
    }

    fn poll_streamed(
        &mut self,
        cx: &mut Context<'_>,
        upload: &mut Uploading,
        expect: Expect,
    ) -> Poll<Result<Head, Result<ClientError, BodyError>>> {
        let (head_request, upgrade) = (expect == Expect::HeadRequest, expect == Expect::Upgrade);
        loop {
            // The response first: an answer ends the wait.
            if !self.buf.is_empty() {
                match parse_response(&mut self.buf, head_request, upgrade) {
                    Ok(Some(Parsed::Interim)) => continue,
                    Ok(Some(Parsed::Final(head))) => return Poll::Ready(Ok(head)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(Ok(e.into()))),
                }
            }
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    let e = if self.buf.is_empty() {
                        ClientError::Closed
                    } else {
                        ClientError::ClosedInHead
                    };
                    return Poll::Ready(Err(Ok(e)));
                }
                Poll::Ready(Ok(_)) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Ok(ClientError::Read(e)))),
                Poll::Pending => {}
            }
            // Then the body, until it is written or something must wait.
            std::task::ready!(upload.poll_send(&mut *self.io, cx))?;
            return Poll::Pending;
        }
    }
}

/// The last chunk with the trailer fields the request declared in
/// `Trailer` and may carry.
fn trailer_section(t: &HeaderMap, allowed: &[HeaderName]) -> Bytes {
    let mut out = Vec::new();
    weir_http::h1::encode_last_chunk(t, |name| allowed.contains(name), &mut out);
    Bytes::from(out)
}

async fn write_all(
    io: &mut dyn Io,
    head: &[u8],
    body: Option<&Bytes>,
) -> Result<(), (std::io::Error, usize)> {
    let mut written = 0usize;
    let mut io = Pin::new(io);
    for part in [head, body.map_or(&[][..], |b| &b[..])] {
        let mut rest = part;
        while !rest.is_empty() {
            match io.write(rest).await {
                Ok(0) => {
                    return Err((std::io::ErrorKind::WriteZero.into(), written));
                }
                Ok(n) => {
                    written += n;
                    rest = &rest[n..];
                }
                Err(e) => return Err((e, written)),
            }
        }
    }
    Ok(())
}

pub use weir_http::h1::head::{BodyLen, RequestHead};

/// A request ready to write: the head encoded into the worker's reused
/// buffer, a small body appended to it. Encoding happens here, before any
/// await, so the request's future holds these bytes and not the fields.
pub struct Encoded<'a> {
    out: Vec<u8>,
    /// A body too large to copy behind the head.
    body: Option<&'a Bytes>,
}

impl<'a> Encoded<'a> {
    pub fn new<'f, F>(req: RequestHead<'_, F>, body: Option<&'a Bytes>) -> Self
    where
        F: Iterator<Item = (&'f HeaderName, &'f [u8])>,
    {
        let mut out = REQ_BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
        out.clear();
        req.encode(&mut out, body.map(Bytes::len));
        // A small body goes out with the head in one write.
        let body = match body {
            Some(b) if b.len() <= READ_CHUNK => {
                out.extend_from_slice(b);
                None
            }
            b => b,
        };
        Encoded { out, body }
    }
}

impl Encoded<'static> {
    /// A request whose body is streamed after the head ([`Conn::send_streamed`]):
    /// with the body's length when it is known, else chunked. The second
    /// value says whether it is chunked.
    pub fn streamed<'f, F>(req: RequestHead<'_, F>, body: &Body) -> (Self, bool)
    where
        F: Iterator<Item = (&'f HeaderName, &'f [u8])>,
    {
        let mut out = REQ_BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
        out.clear();
        let len = if http_body::Body::is_end_stream(body) {
            BodyLen::None
        } else {
            match http_body::Body::size_hint(body).exact() {
                Some(n) => BodyLen::Known(n),
                None => BodyLen::Unknown,
            }
        };
        let chunked = req.encode_for(&mut out, len);
        (Encoded { out, body: None }, chunked)
    }
}

/// Told once when a streamed response body is over: with the connection if
/// it can be reused, `None` if it must be closed.
pub trait Finish {
    fn finish(self, conn: Option<Conn>);
}

enum BodyState {
    Length(u64),
    /// weir's one chunked decoder (`weir_http::h1`), lenient about padded
    /// chunk sizes as hyper's client is.
    Chunked(Decoder),
    Close,
}

/// The decoder of a chunked response body; its trailers may be as large as
/// a head.
fn dechunk() -> Decoder {
    Decoder::chunked(MAX_HEAD).lenient()
}

/// A response body still arriving on its connection; gives the connection
/// back through `F` at a clean end. Dropped early (the client went away),
/// the connection is closed: its state is unknown.
pub struct ResponseBody<F: Finish> {
    conn: Option<Conn>,
    state: BodyState,
    keep_alive: bool,
    done: Option<F>,
    /// A request body still going out, written as the response is read.
    upload: Option<Box<Uploading>>,
}

impl<F: Finish> ResponseBody<F> {
    pub fn new(conn: Conn, framing: Framing, keep_alive: bool, done: F) -> Self {
        let state = match framing {
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(dechunk()),
            Framing::None => BodyState::Length(0),
            Framing::Close => BodyState::Close,
        };
        ResponseBody {
            conn: Some(conn),
            state,
            keep_alive: keep_alive && framing != Framing::Close,
            done: Some(done),
            upload: None,
        }
    }

    /// Goes on sending `upload` while the response is read (an upstream
    /// that answers as it reads, such as an echo). The upload stops when
    /// the response ends, and the connection is then reused only if it
    /// had finished.
    pub fn sending(mut self, upload: Option<Box<Uploading>>) -> Self {
        self.upload = upload.filter(|u| !u.is_sent());
        self
    }

    fn end(&mut self, clean: bool) {
        let conn = self.conn.take();
        let sent = self.upload.take().is_none_or(|u| u.is_sent());
        if let Some(d) = self.done.take() {
            let reuse =
                clean && sent && self.keep_alive && conn.as_ref().is_some_and(Conn::is_clean);
            d.finish(if reuse { conn } else { None });
        }
    }
}

impl<F: Finish + Unpin> http_body::Body for ResponseBody<F> {
    type Data = Bytes;
    type Error = ClientError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if let Some(u) = this.upload.as_mut()
                && let Poll::Ready(Err(e)) = u.poll_send(&mut *conn.io, cx)
            {
                this.end(false);
                let e = e.unwrap_or_else(ClientError::RequestBody);
                return Poll::Ready(Some(Err(e)));
            }
            // First whatever is buffered.
            match &mut this.state {
                BodyState::Length(0) => {
                    this.end(true);
                    return Poll::Ready(None);
                }
                BodyState::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = (*left).min(conn.buf.len() as u64) as usize;
                        *left -= n as u64;
                        let data = conn.buf.split_to(n).freeze();
                        if *left == 0 {
                            this.end(true);
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                BodyState::Chunked(d) => match d.decode(&mut conn.buf) {
                    Ok(Decoded::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                    Ok(Decoded::Trailers(t)) => {
                        this.end(true);
                        return Poll::Ready(Some(Ok(Frame::trailers(t))));
                    }
                    Ok(Decoded::End) => {
                        this.end(true);
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(e) => {
                        this.end(false);
                        return Poll::Ready(Some(Err(e.into())));
                    }
                },
                BodyState::Close => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            // Then more from the upstream.
            match std::task::ready!(conn.poll_fill(cx)) {
                Ok(0) => {
                    let complete = matches!(this.state, BodyState::Close);
                    this.end(false);
                    return Poll::Ready(if complete {
                        None
                    } else {
                        Some(Err(ClientError::Truncated))
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    this.end(false);
                    return Poll::Ready(Some(Err(ClientError::Read(e))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || matches!(self.state, BodyState::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyState::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

impl<F: Finish> Drop for ResponseBody<F> {
    fn drop(&mut self) {
        if self.done.is_some() {
            self.end(false);
        }
    }
}

/// What decoding one upstream response came to, for [`check_response`].
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The head never completed.
    Incomplete,
    HeadError,
    Response {
        status: u16,
        fields: usize,
        framing: Framing,
        keep_alive: bool,
        body: Vec<u8>,
        trailers: usize,
        /// `None`: the body wants more bytes; `Some(false)`: malformed.
        ended: Option<bool>,
    },
}

/// Decodes `input` as an upstream's response to a GET, fed `step` bytes at
/// a time, the way [`Conn::read_head`] and [`ResponseBody`] read it.
fn decode_in_steps(input: &[u8], step: usize) -> Outcome {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut feed = |buf: &mut BytesMut| -> bool {
        if fed >= input.len() {
            return false;
        }
        let end = (fed + step).min(input.len());
        buf.extend_from_slice(&input[fed..end]);
        fed = end;
        true
    };
    let (parts, framing, keep_alive) = loop {
        match parse_response(&mut buf, false, false) {
            Ok(Some(Parsed::Final(h))) => break (h.parts, h.framing, h.keep_alive),
            Ok(Some(Parsed::Interim)) => continue,
            Ok(None) => {
                if !feed(&mut buf) {
                    return Outcome::Incomplete;
                }
            }
            Err(_) => return Outcome::HeadError,
        }
    };
    let mut body = Vec::new();
    let mut trailers = 0;
    let ended = match framing {
        Framing::None => Some(true),
        Framing::Length(n) => loop {
            let take = (n as usize - body.len()).min(buf.len());
            body.extend_from_slice(&buf.split_to(take));
            if body.len() as u64 == n {
                break Some(true);
            }
            if !feed(&mut buf) {
                break None;
            }
        },
        Framing::Close => {
            while feed(&mut buf) {}
            body.extend_from_slice(&buf.split());
            Some(true)
        }
        Framing::Chunked => {
            let mut d = dechunk();
            loop {
                match d.decode(&mut buf) {
                    Ok(Decoded::Data(b)) => body.extend_from_slice(&b),
                    Ok(Decoded::Trailers(t)) => trailers = t.len(),
                    Ok(Decoded::End) => break Some(true),
                    Ok(Decoded::NeedMore) => {
                        if !feed(&mut buf) {
                            break None;
                        }
                    }
                    Err(_) => break Some(false),
                }
            }
        }
    };
    Outcome::Response {
        status: parts.status.as_u16(),
        fields: parts.headers.len(),
        framing,
        keep_alive,
        body,
        trailers,
        ended,
    }
}

/// The property the fuzzers check (`h1_response` under cargo-fuzz, and the
/// seeded mutation test): decoding an upstream's bytes never panics, never
/// yields more body than was sent or than Content-Length says, and comes to
/// the same result however the bytes are split across reads.
#[doc(hidden)]
pub fn check_response(input: &[u8], step: usize) {
    let whole = decode_in_steps(input, input.len().max(1));
    let split = decode_in_steps(input, step.max(1));
    assert_eq!(
        whole, split,
        "the result depends on how the reads are split"
    );
    if let Outcome::Response { framing, body, .. } = &whole {
        assert!(body.len() <= input.len());
        if let Framing::Length(n) = framing {
            assert!(body.len() as u64 <= *n);
        }
    }
}

pub mod one_shot;

#[cfg(test)]
mod differential;
#[cfg(test)]
mod tests;
