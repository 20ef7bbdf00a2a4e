//! weir's own HTTP/1.1 connection loop for the common request, a `GET` or
//! `HEAD` with no body; everything else on the connection is handed to
//! hyper.
//!
//! Why by hand (the performance issue allows it where the profile shows it
//! pays): hyper's HTTP/1 connection owns a 16 KiB read buffer and an 8 KiB
//! head buffer for as long as the connection lives, and cannot be told to
//! give them back while it is idle. They were 24 of the 29.9 KiB weir held
//! per idle keep-alive TLS connection, against nginx's 16.6 KiB
//! (BENCHMARKS.md §6). Here a connection owns no buffer while it waits:
//! bytes are read into one buffer per thread and only what a request needs
//! is kept; response heads are written from a per-thread buffer too.
//!
//! The path of a request, top to bottom in [`serve`]:
//! 1. read whatever the client sent (through the smuggling [`Guard`] and the
//!    timeouts of `server::io`, exactly as hyper would have);
//! 2. [`parse`] the head with httparse, hyper's own parser. Only a complete
//!    HTTP/1.1 `GET`/`HEAD` in origin form, without Content-Length,
//!    Transfer-Encoding, Upgrade or Expect and with a plain `Connection`
//!    value, is served here. Anything else (a body, an upgrade, HTTP/1.0,
//!    h2c, a malformed or oversized head) goes to hyper with the bytes read
//!    so far, and hyper serves the rest of the connection: its answers to
//!    bad input (400, 414, 431) and its body handling stay the only ones;
//! 3. call the same `pipeline::Listener::handle` hyper's service calls;
//! 4. [`encode_head`] the response by hyper's rules (status line, header
//!    order, implicit `content-length`, chunked for unknown lengths, no body
//!    for `HEAD`/204/304, `connection: close` when closing, a cached `date`),
//!    so a client cannot tell which of the two served it; `tests/http1.rs`
//!    compares the two byte for byte;
//! 5. write head and body with one vectored write (large cached files still
//!    go out with `sendfile` through `server::zero_copy`).
//!
//! [`Guard`]: weir_http::smuggling::Guard

use std::cell::{Cell, RefCell};
use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Version};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::drain::Signal;
use super::io::ConnState;
use super::zero_copy::{FileRegion, Regions};
use crate::pipeline::Listener;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

/// hyper's request-target limit (`MAX_URI_LEN`); longer targets go to hyper,
/// which answers 414.
const MAX_URI_LEN: usize = (u16::MAX - 1) as usize;

/// Header lines parsed here at most (hyper's default); more go to hyper.
const MAX_HEADERS: usize = 100;

/// The per-thread read buffer: large enough for any head the smuggling
/// guard releases in one piece.
const READ_BUF_LEN: usize = 16 * 1024;

/// The largest head buffer a thread keeps for the next response; a body
/// that fits in it with its head is copied behind the head and the two go
/// out in one plain write.
const HEAD_BUF_KEPT: usize = 4096;

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
/// values), then cost no allocation of their own: copying each head into a
/// buffer of its own, and the first slice of it making that buffer shared,
/// were two allocations and two frees per request, about 600 instructions
/// (callgrind, BENCHMARKS.md §6 "The guard's scan"). A block is freed when
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

/// The rest of a connection hyper must serve: the bytes [`serve`] had
/// read, then the stream.
pub struct Handoff<IO> {
    pub io: IO,
    pub read: Bytes,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Handoff<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let n = this.read.len().min(buf.remaining());
        buf.put_slice(&this.read.split_to(n));
        if this.read.is_empty() {
            // An empty slice still holds its buffer, which may be a shared
            // head block (`HEAD_BLOCK`): let it go for the connection's life.
            this.read = Bytes::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Handoff<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What one connection's requests share.
pub struct Shared<'a> {
    pub listener: &'a Listener,
    pub info: &'a ConnInfo,
    pub state: &'a Arc<ConnState>,
    pub regions: Option<&'a Arc<Regions>>,
    /// `limits.header_size`: a head still incomplete past this goes to hyper.
    pub max_head: usize,
}

/// How [`serve`] left the connection.
pub enum Outcome {
    /// It has ended.
    Closed,
    /// A request needs hyper: the bytes read from that request on, for a
    /// [`Handoff`].
    Hyper(Bytes),
}

/// Serves requests until the connection ends or a request needs hyper.
pub async fn serve<IO>(io: &mut IO, sh: Shared<'_>, signal: &Signal) -> Outcome
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    // Owned clone for the idle wait, so `signal` stays free for the hand-off.
    let mut drained = pin!({
        let mut s = signal.clone();
        async move { s.signaled().await }
    });
    // The waker `drained` was last polled with.
    let mut drain_waker: Option<Waker> = None;
    let mut pending = BytesMut::new();
    loop {
        // Every complete request already read, in order (pipelining).
        while !pending.is_empty() {
            let (mut resp, is_head, keep_alive) = match parse(&mut pending, sh.max_head) {
                Parsed::NeedMore => break,
                Parsed::Hyper => return Outcome::Hyper(pending.freeze()),
                Parsed::Request(req, keep_alive) => {
                    let is_head = req.method() == Method::HEAD;
                    sh.state.request_started();
                    // Pinned here and lent to `handle_reading`: passed by value, the
                    // handler's future (about 1.2 KiB) would be stored twice in this
                    // connection's state.
                    let handled = {
                        let handler = pin!(sh.listener.handle(req, sh.info));
                        handle_reading(handler, io, &mut pending, sh.max_head).await
                    };
                    sh.state.request_done();
                    // The client closed (or the stream failed) mid-request: drop the
                    // handler, as hyper does without half-close.
                    let Some(resp) = handled else {
                        return Outcome::Closed;
                    };
                    (resp, is_head, keep_alive)
                }
            };
            if let Some(r) = resp.extensions_mut().remove::<FileRegion>()
                && let Some(regions) = sh.regions
            {
                regions.push(r);
            }
            let close = !keep_alive || signal.is_signaled();
            let r = write_response(io, resp, is_head, close).await;
            if let Some(end) = after_write(io, r, sh.info).await {
                return end;
            }
        }
        // Wait for more bytes; while idle, for the drain signal too.
        let idle = pending.is_empty();
        let n = if idle {
            // The drain future is polled again only once shutdown has begun
            // or the task's waker has changed; in between it stays
            // registered. Polled at every idle wait, it was about 220
            // instructions a request (the watch channel's lock and version,
            // callgrind, BENCHMARKS.md §6).
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
                None => {
                    // Shutting down: an idle connection closes at once.
                    let _ = io.shutdown().await;
                    return Outcome::Closed;
                }
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

/// What a written response leaves of the connection: `None`, it goes on;
/// else it has ended (closed after the response, or failed).
async fn after_write<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    written: io::Result<bool>,
    info: &ConnInfo,
) -> Option<Outcome> {
    match written {
        Ok(true) => None,
        Ok(false) => {
            let _ = io.shutdown().await;
            Some(Outcome::Closed)
        }
        Err(e) => {
            tracing::debug!("connection from {}: {e}", info.peer);
            Some(Outcome::Closed)
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

/// Runs the handler, and meanwhile reads on: pipelined requests are kept
/// (up to `max` bytes) and a client that goes away cancels the request.
/// `None`: the client closed or the stream failed.
async fn handle_reading<F, IO>(
    mut handler: Pin<&mut F>,
    io: &mut IO,
    pending: &mut BytesMut,
    max: usize,
) -> Option<F::Output>
where
    F: Future,
    IO: AsyncRead + Unpin,
{
    poll_fn(|cx| {
        if let Poll::Ready(r) = handler.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
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
    /// A request to serve here, and whether the connection stays open after it.
    Request(Request<Body>, bool),
    /// The head is not complete yet.
    NeedMore,
    /// Not for this loop: hyper takes the connection from this request on.
    Hyper,
}

/// Parses the head at the start of `pending` and, if it is one this loop
/// serves, takes it out of `pending`; otherwise `pending` is left as it was.
pub fn parse(pending: &mut BytesMut, max_head: usize) -> Parsed {
    let buf = std::mem::take(pending).freeze();
    let (parsed, used) = parse_head(&buf, max_head);
    *pending = match parsed {
        // Usually nothing is left and `pending` holds no memory; a pipelined
        // remainder is copied out so the served head's memory can go.
        Parsed::Request(..) if used == buf.len() => BytesMut::new(),
        Parsed::Request(..) => BytesMut::from(&buf[used..]),
        _ => BytesMut::from(buf),
    };
    parsed
}

/// The request at the start of `buf` and the length of its head.
fn parse_head(buf: &Bytes, max_head: usize) -> (Parsed, usize) {
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < max_head => return (Parsed::NeedMore, 0),
        // Too large, too many headers, malformed: hyper answers it.
        _ => return (Parsed::Hyper, 0),
    };
    let method = match req.method {
        Some("GET") => Method::GET,
        Some("HEAD") => Method::HEAD,
        _ => return (Parsed::Hyper, 0),
    };
    let Some(path) = req.path else {
        return (Parsed::Hyper, 0);
    };
    if req.version != Some(1) || !path.starts_with('/') || path.len() > MAX_URI_LEN {
        return (Parsed::Hyper, 0);
    }
    let Ok(uri) = http::Uri::from_maybe_shared(buf.slice_ref(path.as_bytes())) else {
        return (Parsed::Hyper, 0);
    };
    let mut keep_alive = true;
    let mut map = weir_http::header_maps::take(req.headers.len());
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return (Parsed::Hyper, 0);
        };
        match name {
            header::CONTENT_LENGTH
            | header::TRANSFER_ENCODING
            | header::UPGRADE
            | header::EXPECT => return (Parsed::Hyper, 0),
            header::CONNECTION => match connection_keeps_alive(h.value) {
                Some(k) => keep_alive &= k,
                None => return (Parsed::Hyper, 0),
            },
            _ => {}
        }
        let Ok(value) = HeaderValue::from_maybe_shared(buf.slice_ref(h.value)) else {
            return (Parsed::Hyper, 0);
        };
        map.append(name, value);
    }
    let mut r = Request::new(Body::Empty);
    *r.method_mut() = method;
    *r.uri_mut() = uri;
    *r.version_mut() = Version::HTTP_11;
    *r.headers_mut() = map;
    (Parsed::Request(r, keep_alive), len)
}

/// A request's `Connection` value: `Some(false)` for `close`; `None` if it
/// names anything but `close` or `keep-alive` (hyper serves that).
fn connection_keeps_alive(value: &[u8]) -> Option<bool> {
    let mut keep_alive = true;
    for token in value.split(|&b| b == b',') {
        let token = token.trim_ascii();
        if token.eq_ignore_ascii_case(b"close") {
            keep_alive = false;
        } else if !token.is_empty() && !token.eq_ignore_ascii_case(b"keep-alive") {
            return None;
        }
    }
    Some(keep_alive)
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

/// How the body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
}

/// What the body says of its length, as hyper's dispatcher sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyLength {
    /// Already at its end (hyper's `None`).
    Empty,
    Known(u64),
    Unknown,
}

/// Writes one response; `Ok(false)` when the connection must close after it.
async fn write_response<IO>(
    io: &mut IO,
    resp: http::Response<Body>,
    is_head: bool,
    mut close: bool,
) -> io::Result<bool>
where
    IO: AsyncWrite + Unpin,
{
    let (mut parts, mut body) = resp.into_parts();
    let length = if body.is_end_stream() {
        BodyLength::Empty
    } else {
        match body.size_hint().exact() {
            Some(n) => BodyLength::Known(n),
            None => BodyLength::Unknown,
        }
    };
    let mut head = take_head_buf();
    let framing = encode_head(&mut parts, length, is_head, &mut close, &mut head);
    // The fields are in `head` now: the map's table serves a later message.
    weir_http::header_maps::give(std::mem::take(&mut parts.headers));
    let r = write_body(io, &mut head, &mut body, framing).await;
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
) -> io::Result<bool>
where
    IO: AsyncWrite + Unpin,
{
    let mut body = Pin::new(body);
    if framing == Framing::Length(0) {
        write_all(io, &mut [IoSlice::new(head)]).await?;
        flush(io).await?;
        return Ok(true);
    }
    let mut left = match framing {
        Framing::Length(n) => n,
        Framing::Chunked => u64::MAX,
    };
    // `head` is emptied once it has gone out (a head is never empty).
    let mut ok = true;
    loop {
        let frame = poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
        let data = match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue, // trailers: not sent (nor by hyper without a Trailer header)
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
                    // `send`: the system call's layers above TCP took 2.0 %
                    // of the proxy's samples for a `writev` and 0.8-1.0 %
                    // for a `send` (164-byte response, perf, BENCHMARKS.md
                    // §6); a copy of a few hundred bytes costs far less.
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
            Framing::Chunked => {
                let mut size = [0u8; 18];
                let size = chunk_size_line(data.len(), &mut size);
                write_all(
                    io,
                    &mut [
                        IoSlice::new(head),
                        IoSlice::new(size),
                        IoSlice::new(&data),
                        IoSlice::new(b"\r\n"),
                    ],
                )
                .await?;
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
            write_all(io, &mut [IoSlice::new(h), IoSlice::new(b"0\r\n\r\n")]).await?;
        }
        Framing::Chunked => {
            if !h.is_empty() {
                write_all(io, &mut [IoSlice::new(h)]).await?;
            }
        }
    }
    flush(io).await?;
    Ok(ok)
}

/// `{len:X}\r\n` into `buf`.
fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut i = 16;
    let mut n = len;
    loop {
        i -= 1;
        buf[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf[16] = b'\r';
    buf[17] = b'\n';
    &buf[i..]
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

fn extend(dst: &mut Vec<u8>, b: &[u8]) {
    dst.extend_from_slice(b);
}

/// `HEAD`, 1xx, 204 and 304 never have a body.
pub(crate) fn can_have_body(is_head: bool, status: StatusCode) -> bool {
    !is_head
        && !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

pub(crate) fn can_have_content_length(status: StatusCode) -> bool {
    !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

/// Writes the status line and headers into `dst` by hyper's rules
/// (`hyper::proto::h1::role::Server::encode`), and returns how the body
/// follows. `close` comes in as "the connection closes after this" and
/// goes out including a `Connection: close` the handler set.
fn encode_head(
    parts: &mut http::response::Parts,
    length: BodyLength,
    is_head: bool,
    close: &mut bool,
    dst: &mut Vec<u8>,
) -> Framing {
    let mut status = parts.status;
    if status.is_informational() {
        // Never produced for a request served here (upgrades go to hyper);
        // hyper answers 500 in their place too.
        status = StatusCode::INTERNAL_SERVER_ERROR;
        parts.headers.clear();
    }
    // A reason phrase the proxy kept from its upstream goes out as it came,
    // as hyper writes it.
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if status == StatusCode::OK && reason.is_none() {
        extend(dst, b"HTTP/1.1 200 OK\r\n");
    } else {
        extend(dst, b"HTTP/1.1 ");
        extend(dst, status.as_str().as_bytes());
        extend(dst, b" ");
        match reason {
            Some(r) => extend(dst, r.as_bytes()),
            None => extend(
                dst,
                status.canonical_reason().unwrap_or("<none>").as_bytes(),
            ),
        }
        extend(dst, b"\r\n");
    }
    if *close {
        // As hyper: `close` joins the handler's Connection values, or is a
        // header of its own at the end.
        match parts.headers.entry(header::CONNECTION) {
            header::Entry::Occupied(mut e) => {
                if !e.iter().any(|v| has_token(v.as_bytes(), b"close")) {
                    e.append(HeaderValue::from_static("close"));
                }
            }
            header::Entry::Vacant(e) => {
                e.insert(HeaderValue::from_static("close"));
            }
        }
    }

    let chunkable = can_have_body(is_head, status);
    let mut framing = None;
    let mut wrote_date = false;
    let mut last: Option<HeaderName> = None;
    // `drain` keeps the map's table, which `write_response` hands back to
    // `header_maps` for a later message.
    for (name, value) in parts.headers.drain() {
        // `None`: one more value of the previous name.
        let repeat = name.is_none();
        if let Some(n) = name {
            last = Some(n);
        }
        let Some(name) = last.as_ref() else { continue };
        match *name {
            header::CONTENT_LENGTH => {
                let len = match length {
                    BodyLength::Known(n) => Some(n),
                    BodyLength::Unknown => value.to_str().ok().and_then(|s| s.parse::<u64>().ok()),
                    BodyLength::Empty if is_head => Some(0),
                    // No body: the header is dropped for the implicit one below.
                    BodyLength::Empty => None,
                };
                if repeat || framing.is_some() {
                    continue;
                }
                let Some(len) = len else { continue };
                framing = Some(Framing::Length(len));
            }
            header::TRANSFER_ENCODING => {
                if !chunkable || repeat || framing.is_some() {
                    continue;
                }
                framing = Some(Framing::Chunked);
                extend(dst, b"transfer-encoding: ");
                extend(dst, value.as_bytes());
                if !has_token(value.as_bytes(), b"chunked") {
                    extend(dst, b", chunked");
                }
                extend(dst, b"\r\n");
                continue;
            }
            header::CONNECTION => {
                if has_token(value.as_bytes(), b"close") {
                    *close = true;
                }
                if repeat {
                    // hyper joins them onto one line.
                    dst.truncate(dst.len() - 2);
                    extend(dst, b", ");
                } else {
                    extend(dst, b"connection: ");
                }
                extend(dst, value.as_bytes());
                extend(dst, b"\r\n");
                continue;
            }
            header::DATE => wrote_date = true,
            header::TRAILER if !chunkable => continue,
            _ => {}
        }
        extend(dst, name.as_str().as_bytes());
        extend(dst, b": ");
        extend(dst, value.as_bytes());
        extend(dst, b"\r\n");
    }
    let framing = match framing {
        Some(f) => f,
        None => match length {
            BodyLength::Unknown if chunkable => {
                extend(dst, b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
            // Not chunkable means no body at all.
            BodyLength::Unknown => Framing::Length(0),
            BodyLength::Empty | BodyLength::Known(0) => {
                if can_have_content_length(status) && !is_head {
                    extend(dst, b"content-length: 0\r\n");
                }
                Framing::Length(0)
            }
            BodyLength::Known(n) => {
                if can_have_content_length(status) {
                    extend(dst, b"content-length: ");
                    extend(dst, itoa::Buffer::new().format(n).as_bytes());
                    extend(dst, b"\r\n");
                    Framing::Length(n)
                } else {
                    Framing::Length(0)
                }
            }
        },
    };
    if !wrote_date {
        extend(dst, b"date: ");
        date::extend(dst);
        extend(dst, b"\r\n");
    }
    extend(dst, b"\r\n");
    if chunkable {
        framing
    } else {
        Framing::Length(0)
    }
}

/// Whether the comma-separated `value` holds `token` (case-insensitive).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The `Date` header value, formatted once a second per thread.
pub(crate) mod date {
    use std::cell::RefCell;

    struct Cached {
        second: u64,
        value: [u8; 29],
    }

    thread_local! {
        static DATE: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, value: [0; 29] }) };
    }

    /// The second comes from the coarse clock (`weir_http::clock`): it turns
    /// at most one kernel tick late.
    pub fn extend(dst: &mut Vec<u8>) {
        let second = weir_http::clock::unix_secs();
        DATE.with_borrow_mut(|c| {
            if c.second != second {
                let s = httpdate::fmt_http_date(weir_http::clock::system_time(second));
                if s.len() == c.value.len() {
                    c.value.copy_from_slice(s.as_bytes());
                    c.second = second;
                }
            }
            dst.extend_from_slice(&c.value);
        });
    }
}

/// The property the fuzzers check (`h1_parse` under cargo-fuzz, and the
/// seeded mutation test): panics if [`parse`] breaks it.
#[doc(hidden)]
pub fn check_parse(input: &[u8], max_head: usize) {
    let mut b = BytesMut::from(input);
    let general = parse(&mut b, max_head);
    match general {
        Parsed::Request(r, _) => {
            let used = input.len() - b.len();
            assert_eq!(&input[used..], &b[..], "the rest is left as it was");
            let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut hs);
            assert_eq!(
                req.parse(&input[..used]),
                Ok(httparse::Status::Complete(used)),
                "exactly one complete head is taken"
            );
            assert!(r.method() == Method::GET || r.method() == Method::HEAD);
            assert!(r.uri().path().starts_with('/'));
            for h in [
                header::CONTENT_LENGTH,
                header::TRANSFER_ENCODING,
                header::UPGRADE,
                header::EXPECT,
            ] {
                assert!(!r.headers().contains_key(&h), "{h} must go to hyper");
            }
            assert_eq!(r.headers().len(), req.headers.len());
        }
        Parsed::NeedMore | Parsed::Hyper => assert_eq!(&b[..], input),
    }
}

#[cfg(test)]
mod tests;
