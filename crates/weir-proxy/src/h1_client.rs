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
//! with httparse from the connection's buffer, and a body that has already
//! arrived is handed on as one `Bytes` without a copy.
//!
//! Owns: request encoding (the head, and a streamed body written as it
//! arrives while the response is read, so an early answer such as a 413
//! ends the upload), response head parsing, response framing (RFC 9112
//! §6.3: no body, Content-Length, chunked with trailers through
//! `weir_http::h1::Decoder`, or until close), whether the connection can be
//! reused, and reading the body. Never decides which upstream to use, never
//! retries, never touches the pool: it says how far a failed exchange got
//! (nothing written, the body untouched), and `proxy` decides.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use weir_http::body::{Body, BodyError};
use weir_http::h1::{Decoded, Decoder};

use crate::forward::Present;

/// Any byte stream an upstream connection runs on (TCP, Unix, TLS).
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The largest response head accepted (hyper's client allows about 400 KiB;
/// nginx's default proxy_buffer_size is 4–8 KiB and fails above it).
pub const MAX_HEAD: usize = 64 * 1024;
/// Header fields accepted in a response head (hyper's default).
const MAX_HEADERS: usize = 100;
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
    #[error("malformed response head: {0}")]
    BadHead(httparse::Error),
    #[error("malformed response header field")]
    BadField,
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("unexpected 101 Switching Protocols")]
    UnexpectedSwitch,
    #[error("invalid Content-Length in the response")]
    BadLength,
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

/// How the response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// HEAD, 204, 304: nothing follows the head.
    None,
    Length(u64),
    Chunked,
    /// Everything until the upstream closes.
    Close,
}

/// One HTTP/1.1 connection to an upstream.
pub struct Conn {
    io: Box<dyn Io>,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// It has served a request before (it came from the pool).
    reused: bool,
    /// The response timer, made at the first exchange and kept for the next.
    timer: Option<Deadline>,
}

/// A response timeout that lives as long as the upstream connection.
///
/// Why not `tokio::time::timeout`: that makes a timer per request, and
/// registering it in the runtime's timer wheel and taking it out again is
/// paid by every request. This one is armed once; a later request only moves its
/// deadline in a field, and the timer, when it fires before that deadline,
/// is re-armed to it: one wheel operation per timeout period, not per
/// request (the same scheme as `server::io::TimedIo`).
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
pub struct Deadline(Pin<Box<Timer>>);

pin_project_lite::pin_project! {
    struct Timer {
        #[pin]
        sleep: tokio::time::Sleep,
        // When the timer is set to fire.
        armed: tokio::time::Instant,
        // The sleep was polled with `relay_waker` since it was last armed.
        registered: bool,
        relay: Arc<Relay>,
        relay_waker: Waker,
    }
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

impl Deadline {
    fn new() -> Deadline {
        // Far off: the first `within` brings it forward.
        let armed = tokio::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365);
        let relay = Arc::new(Relay(futures_util::task::AtomicWaker::new()));
        Deadline(Box::pin(Timer {
            sleep: tokio::time::sleep_until(armed),
            armed,
            registered: false,
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
        let mut t = self.0.as_mut().project();
        if deadline < *t.armed {
            *t.armed = deadline;
            t.sleep.as_mut().reset(deadline);
            *t.registered = false;
        }
        // However this ends (even dropped mid-way), an idle connection
        // keeps no request's task alive.
        let _clear = ClearOnDrop(t.relay);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            // First the waker, then the check: a timer that fires after
            // the check wakes this task through the relay.
            t.relay.0.register(cx.waker());
            loop {
                if *t.registered && !t.sleep.is_elapsed() {
                    return Poll::Pending;
                }
                if t.sleep
                    .as_mut()
                    .poll(&mut Context::from_waker(t.relay_waker))
                    .is_pending()
                {
                    *t.registered = true;
                    return Poll::Pending;
                }
                *t.registered = false;
                if tokio::time::Instant::now() >= deadline {
                    return Poll::Ready(None);
                }
                // Fired for an earlier request's deadline: move it on.
                *t.armed = deadline;
                t.sleep.as_mut().reset(deadline);
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

    /// The connection's response timer, to run an exchange [`Deadline::within`]
    /// its timeout; give it back with [`Conn::put_timer`].
    pub fn take_timer(&mut self) -> Deadline {
        self.timer.take().unwrap_or_else(Deadline::new)
    }

    pub fn put_timer(&mut self, t: Deadline) {
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
                if self.buf.len() > MAX_HEAD {
                    return Err(ClientError::HeadTooLarge);
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

/// The part of the request body being written: a chunk-size line, data, and
/// what ends the chunk (all empty for a Content-Length body but the data).
struct Out {
    line: [u8; 18],
    /// Where the unwritten part of `line` starts (18: nothing left).
    line_at: usize,
    data: Bytes,
    end: &'static [u8],
}

impl Out {
    fn new() -> Self {
        Out {
            line: [0; 18],
            line_at: 18,
            data: Bytes::new(),
            end: b"",
        }
    }

    fn is_empty(&self) -> bool {
        self.line_at == 18 && self.data.is_empty() && self.end.is_empty()
    }

    fn set(&mut self, data: Bytes, chunked: bool) {
        if chunked {
            let n = weir_http::h1::chunk_size_line(data.len(), &mut self.line).len();
            self.line_at = 18 - n;
            self.end = b"\r\n";
        }
        self.data = data;
    }

    /// One write of what is left, in a single vectored call.
    fn poll_write(&mut self, io: &mut dyn Io, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let parts = [
            std::io::IoSlice::new(&self.line[self.line_at..]),
            std::io::IoSlice::new(&self.data),
            std::io::IoSlice::new(self.end),
        ];
        let mut n = std::task::ready!(Pin::new(io).poll_write_vectored(cx, &parts))?;
        if n == 0 {
            return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
        }
        let k = n.min(18 - self.line_at);
        self.line_at += k;
        n -= k;
        let k = n.min(self.data.len());
        self.data.advance(k);
        n -= k;
        self.end = &self.end[n..];
        Poll::Ready(Ok(()))
    }
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
    out: Out,
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
            out: Out::new(),
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
                    std::task::ready!(self.out.poll_write(io, cx))
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
                                self.out.set(Bytes::from_static(b"0\r\n\r\n"), false);
                            }
                            self.state = Upload::Last;
                        }
                        Some(Err(e)) => return Poll::Ready(Err(Err(e))),
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) if data.is_empty() => {}
                            Ok(data) => self.out.set(data, self.chunked),
                            Err(frame) => {
                                // The trailer section ends a chunked body; a
                                // body of known length has nowhere to put it.
                                if let Ok(t) = frame.into_trailers()
                                    && self.chunked
                                {
                                    self.out.set(trailer_section(&t, &self.trailers), false);
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
                    Ok(None) if self.buf.len() > MAX_HEAD => {
                        return Poll::Ready(Err(Ok(ClientError::HeadTooLarge)));
                    }
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(Ok(e))),
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

/// A final response head, read.
#[derive(Debug)]
pub struct Head {
    pub parts: http::response::Parts,
    pub framing: Framing,
    /// The connection can take another request once the body is read.
    pub keep_alive: bool,
    /// A hop-by-hop field is among `parts.headers` (rarely: the proxy
    /// strips them only then).
    pub hop_by_hop: bool,
}

thread_local! {
    static NAMES: RefCell<Names> = const { RefCell::new(Names { known: Vec::new(), next: 0 }) };
}

/// The field names met in upstream response heads, as they were spelled,
/// each with the `HeaderName` made of it (its `Present` class is taken by
/// `Present::add_raw`, a switch on the length, for every head).
///
/// Why by hand: `HeaderName::from_bytes` lowercases a name into a scratch
/// buffer and matches it against http's standard names for every field;
/// an upstream spells the same few names the
/// same way in every response, and comparing their bytes is a few dozen.
/// At most [`NAMES_KEPT`] per worker, replaced in turn, so an upstream
/// that sends ever new names costs a miss each, never memory.
struct Names {
    known: Vec<(Box<[u8]>, HeaderName)>,
    /// The entry a new name replaces once `known` is full.
    next: usize,
}

const NAMES_KEPT: usize = 32;

impl Names {
    /// `raw`: a field name as httparse found it (a token, any case).
    fn get(&mut self, raw: &[u8]) -> Result<HeaderName, ClientError> {
        if let Some((_, name)) = self.known.iter().find(|(k, _)| **k == *raw) {
            return Ok(name.clone());
        }
        let name = HeaderName::from_bytes(raw).map_err(|_| ClientError::BadField)?;
        let entry = (Box::from(raw), name.clone());
        if self.known.len() < NAMES_KEPT {
            self.known.push(entry);
        } else {
            self.known[self.next] = entry;
            self.next = (self.next + 1) % NAMES_KEPT;
        }
        Ok(name)
    }
}

enum Parsed {
    Interim,
    Final(Head),
}

fn raw_fields<'h>(
    head: &'h [u8],
    spans: &'h [(u32, u32, u32, u32)],
) -> impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone + 'h {
    spans.iter().map(move |&(na, nl, va, vl)| {
        let (na, nl, va, vl) = (na as usize, nl as usize, va as usize, vl as usize);
        (&head[na..na + nl], &head[va..va + vl])
    })
}

/// Parses one response head off the front of `buf`. `None`: incomplete.
fn parse_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<Parsed>, ClientError> {
    parse_response(buf, head_request, false)
}

/// [`parse_head`]; `upgrade`: the request asked to switch protocols, so a
/// 101 is its final answer (and nothing after it is HTTP).
fn parse_response(
    buf: &mut BytesMut,
    head_request: bool,
    upgrade: bool,
) -> Result<Option<Parsed>, ClientError> {
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        &buf[..],
        &mut fields,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(ClientError::BadHead(e)),
    };
    let code = resp.code.unwrap_or(0);
    let switched = code == 101 && upgrade;
    if (100..200).contains(&code) && !switched {
        if code == 101 {
            return Err(ClientError::UnexpectedSwitch);
        }
        buf.advance(len);
        return Ok(Some(Parsed::Interim));
    }
    let status = StatusCode::from_u16(code).map_err(|_| ClientError::BadField)?;
    let version = if resp.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Offsets into the head, so names and values can share its bytes. An
    // empty slice may not point into the buffer at all (httparse returns a
    // static one for an empty reason): it is (0, 0).
    let base = buf.as_ptr() as usize;
    // u32 offsets (a head is far below 4 GiB): half the array to clear per
    // response.
    let offset = |s: &[u8]| -> (u32, u32) {
        if s.is_empty() {
            (0, 0)
        } else {
            ((s.as_ptr() as usize - base) as u32, s.len() as u32)
        }
    };
    let reason = resp.reason.map(|r| offset(r.as_bytes()));
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_HEADERS];
    let n = resp.headers.len();
    for (s, h) in spans.iter_mut().zip(resp.headers.iter()) {
        let (name_at, name_len) = offset(h.name.as_bytes());
        let (value_at, value_len) = offset(h.value);
        *s = (name_at, name_len, value_at, value_len);
    }
    let spans = &spans[..n];
    let mut present = Present::default();
    for (name, _) in raw_fields(&buf[..len], spans) {
        present.add_raw(name);
    }
    let fields = || raw_fields(&buf[..len], spans);
    let (framing, mut keep_alive) = if switched {
        (Framing::None, false)
    } else {
        framing(fields(), present, status, head_request)?
    };
    // Only `Connection` can end a keep-alive HTTP/1.1 response's connection.
    if version == Version::HTTP_10 || present.has(Present::CONNECTION) {
        let connection = fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .map(|(_, v)| v);
        keep_alive &= weir_http::h1::keeps_alive(version == Version::HTTP_10, connection);
    }
    let head = buf.split_to(len).freeze();

    // Room for the two fields the proxy adds on the way out (Server, Via):
    // a full map grows by reallocating and rehashing, about 1,000
    // instructions, on every response.
    let mut headers = weir_http::header_maps::take(n + 2);
    NAMES.with_borrow_mut(|names| {
        for &(name_at, name_len, value_at, value_len) in spans {
            let (name_at, name_len) = (name_at as usize, name_len as usize);
            let (value_at, value_len) = (value_at as usize, value_len as usize);
            let name = names.get(&head[name_at..name_at + name_len])?;
            let value = HeaderValue::from_maybe_shared(head.slice(value_at..value_at + value_len))
                .map_err(|_| ClientError::BadField)?;
            headers.append(name, value);
        }
        Ok::<_, ClientError>(())
    })?;

    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = version;
    if let Some((at, len)) = reason.map(|(a, l)| (a as usize, l as usize)) {
        let r = &head[at..at + len];
        if status.canonical_reason().map(str::as_bytes) != Some(r)
            && let Some(p) = weir_http::h1::ReasonPhrase::new(head.slice(at..at + len))
        {
            parts.extensions.insert(p);
        }
    }
    parts.headers = headers;
    Ok(Some(Parsed::Final(Head {
        parts,
        framing,
        keep_alive,
        hop_by_hop: present.has(Present::HOP_BY_HOP),
    })))
}

/// The body's framing, and whether it leaves the connection reusable.
/// `fields`: the head's fields as sent (names in any case).
fn framing<'h>(
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
    present: Present,
    status: StatusCode,
    head_request: bool,
) -> Result<(Framing, bool), ClientError> {
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((Framing::None, true));
    }
    if present.has(Present::TRANSFER_ENCODING) {
        // The last coding decides; with a Content-Length too, the message
        // is suspect and the connection is not reused (RFC 9112 §6.3). A
        // value that is not visible ASCII names no coding weir knows.
        let last = fields
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding"))
            .last()
            .map(|(_, v)| v)
            .filter(|v| crate::forward::is_text(v))
            .and_then(|v| v.rsplit(|&b| b == b',').next())
            .map(<[u8]>::trim_ascii);
        let reuse = !present.has(Present::CONTENT_LENGTH);
        return Ok(match last {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => (Framing::Chunked, reuse),
            _ => (Framing::Close, false),
        });
    }
    let mut len: Option<u64> = None;
    // Without a Content-Length the walk stops at once.
    let lengths = fields
        .take_while(|_| present.has(Present::CONTENT_LENGTH))
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
        .map(|(_, v)| v);
    for v in lengths {
        for part in v.split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) || part.len() > 19 {
                return Err(ClientError::BadLength);
            }
            let n: u64 = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(ClientError::BadLength)?;
            if len.is_some_and(|l| l != n) {
                return Err(ClientError::BadLength);
            }
            len = Some(n);
        }
    }
    Ok(match len {
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
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
        match parse_head(&mut buf, false) {
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
