//! The strict reading of HTTP/1.1 request framing, weir's defence against
//! request smuggling. The rules are here once: [`RequestFraming`] (the
//! framing fields of a head), [`check_line_endings`], the field-line check,
//! and the chunk-line rules the body decoder (`h1::Decoder`) applies.
//! weir's HTTP/1 server applies them while it parses (its strict mode);
//! [`Guard`] applies the same rules on the raw byte stream in front of
//! hyper, for the `server.http1 = "hyper"` reference engine only.
//!
//! Refused, with a 400 and the connection closed: both Content-Length and
//! Transfer-Encoding, a Transfer-Encoding other than one exact `chunked`
//! (spaces, tabs, case, lists, duplicates), several or malformed
//! Content-Length values, Transfer-Encoding on HTTP/1.0, bad chunk sizes or
//! extensions, bare LF or CR line endings, obsolete line folding, invalid
//! header names. hyper tolerates several of these (it silently drops
//! Content-Length next to Transfer-Encoding, accepts `Chunked`, equal
//! duplicate lengths and bare LF); a proxy must not, since the server behind
//! it may read them differently.
//!
//! [`Framing`] is a pure state machine over bytes (fuzzed with the PROXY
//! protocol parser); [`Guard`] is the I/O wrapper. Body bytes pass through
//! without a copy, bounded by the framing so the next head is always seen
//! here first. After an Upgrade, CONNECT or the HTTP/2 preface the stream is
//! passed through untouched. Never allocates per body byte; never buffers
//! more than one head.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("bare LF or CR line ending")]
    BareLineEnding,
    #[error("obsolete header line folding")]
    ObsFold,
    #[error("invalid header name")]
    BadHeaderName,
    #[error("both Content-Length and Transfer-Encoding")]
    BothLengths,
    #[error("Transfer-Encoding other than one exact `chunked`")]
    BadTransferEncoding,
    #[error("several or malformed Content-Length values")]
    BadContentLength,
    #[error("Transfer-Encoding on HTTP/1.0")]
    TransferEncodingOnHttp10,
    #[error("bad chunk size or extension")]
    BadChunk,
    #[error("line too long")]
    TooLong,
}

/// The longest chunk-size line (with extensions) accepted.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    ChunkLine,
    ChunkData(u64),
    ChunkCrlf,
    Trailers,
    Passthrough,
}

/// What [`Framing::advance`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many bytes from the front are checked and may go to hyper.
    Release(usize),
    /// Nothing can be released until more bytes arrive.
    NeedMore,
}

/// The HTTP/1.1 request framing as this side reads it.
#[derive(Debug, Clone)]
pub struct Framing {
    state: State,
    /// Heads longer than this are handed to hyper unchecked-by-us (it answers 431).
    max_head: usize,
}

impl Framing {
    pub fn new(max_head: usize) -> Self {
        Framing {
            state: State::Head,
            max_head,
        }
    }

    /// Whether the next byte starts a request head.
    pub fn at_head(&self) -> bool {
        matches!(self.state, State::Head)
    }

    /// Whether body bytes can be read straight through, and how many.
    pub fn passthrough_limit(&self) -> Option<u64> {
        match self.state {
            State::Body(n) | State::ChunkData(n) => Some(n),
            State::Passthrough => Some(u64::MAX),
            _ => None,
        }
    }

    /// Records `n` body bytes read straight through.
    pub fn consumed(&mut self, n: usize) {
        match &mut self.state {
            State::Body(left) => {
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::Head;
                }
            }
            State::ChunkData(left) => {
                *left -= n as u64;
                if *left == 0 {
                    self.state = State::ChunkCrlf;
                }
            }
            _ => {}
        }
    }

    /// Looks at unreleased bytes `buf` (starting where the last release ended).
    pub fn advance(&mut self, buf: &[u8]) -> Result<Step, Violation> {
        match self.state {
            State::Passthrough => Ok(if buf.is_empty() {
                Step::NeedMore
            } else {
                Step::Release(buf.len())
            }),
            State::Body(n) | State::ChunkData(n) => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let k = (buf.len() as u64).min(n) as usize;
                self.consumed(k);
                Ok(Step::Release(k))
            }
            State::ChunkCrlf => {
                if buf.len() < 2 {
                    return Ok(Step::NeedMore);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(Violation::BadChunk);
                }
                self.state = State::ChunkLine;
                Ok(Step::Release(2))
            }
            State::ChunkLine => {
                let Some(end) = line_end(buf, MAX_CHUNK_LINE)? else {
                    return Ok(Step::NeedMore);
                };
                let size = crate::h1::chunk_size(&buf[..end])?;
                self.state = if size == 0 {
                    State::Trailers
                } else {
                    State::ChunkData(size)
                };
                Ok(Step::Release(end + 2))
            }
            State::Trailers => {
                let Some(end) = line_end(buf, self.max_head)? else {
                    return Ok(Step::NeedMore);
                };
                if end == 0 {
                    self.state = State::Head;
                } else {
                    check_field_line(&buf[..end])?;
                }
                Ok(Step::Release(end + 2))
            }
            State::Head => self.head(buf),
        }
    }

    fn head(&mut self, buf: &[u8]) -> Result<Step, Violation> {
        // Empty lines before a request line are allowed (RFC 9112 2.2).
        if buf.starts_with(b"\r\n") {
            return Ok(Step::Release(2));
        }
        if buf.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(buf) && !buf.is_empty() {
            return Ok(Step::NeedMore);
        }
        if buf.starts_with(H2_PREFACE) {
            self.state = State::Passthrough;
            return Ok(Step::Release(buf.len()));
        }
        // One pass over the bytes (this runs on every HTTP/1 request): the
        // scan jumps from one CR or LF to the next with `memchr2`, so the
        // bytes between them cost a vector compare, not a branch each.
        // Line endings are checked as they come, each field line as its CRLF arrives. A bare
        // line ending wins over a field's fault, as if the whole head had
        // been checked for line endings first.
        let mut fields = HeadFields::default();
        let mut field_fault: Option<Violation> = None;
        let mut late_bare = false;
        let mut line_start = 0;
        let mut at = 0;
        let mut end = None;
        while let Some(k) = memchr::memchr2(b'\r', b'\n', &buf[at..]) {
            let i = at + k;
            // A CR at the very end waits for the next read.
            if buf[i] == b'\r' && i + 1 == buf.len() {
                break;
            }
            // A LF found here has no CR before it (a CRLF is taken whole).
            if buf[i] == b'\n' || buf[i + 1] != b'\n' {
                // Within the limit it is fatal at once; past it, only if
                // the head turns out complete (else hyper answers 431).
                if i < self.max_head {
                    return Err(Violation::BareLineEnding);
                }
                late_bare = true;
                at = i + 1;
                continue;
            }
            let line = &buf[line_start..i];
            if line_start == 0 {
                fields.request_line(line);
            } else if line.is_empty() {
                end = Some(i + 2);
                break;
            } else if field_fault.is_none()
                && let Err(v) = fields.field_line(line)
            {
                field_fault = Some(v);
            }
            line_start = i + 2;
            at = i + 2;
        }
        let Some(end) = end else {
            if buf.len() > self.max_head {
                // Too large: hyper answers 431; nothing after it is read.
                self.state = State::Passthrough;
                return Ok(Step::Release(buf.len()));
            }
            return Ok(Step::NeedMore);
        };
        if late_bare {
            return Err(Violation::BareLineEnding);
        }
        if let Some(v) = field_fault {
            return Err(v);
        }
        self.state = fields.framing()?;
        Ok(Step::Release(end))
    }
}

/// The strict reading of a request's framing fields, fed each
/// `Transfer-Encoding` and `Content-Length` value as its line is read: the
/// one set of rules weir's HTTP/1 server applies while it parses a head
/// (`weir_server::http1`) and the [`Guard`] applies in front of hyper.
#[derive(Debug, Default)]
pub struct RequestFraming {
    te: usize,
    te_chunked: bool,
    cl: Option<u64>,
    cl_count: usize,
}

/// How a request's body follows its head, once its framing is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no framing field, or a length of zero).
    None,
    Length(u64),
    Chunked,
}

impl RequestFraming {
    /// A `Transfer-Encoding` value (trimmed): only one exact `chunked` is
    /// accepted, and only once.
    pub fn transfer_encoding(&mut self, value: &[u8]) {
        self.te += 1;
        self.te_chunked = value == b"chunked";
    }

    /// A `Content-Length` value (trimmed): digits only, at most 19.
    pub fn content_length(&mut self, value: &[u8]) -> Result<(), Violation> {
        self.cl_count += 1;
        if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
            return Err(Violation::BadContentLength);
        }
        self.cl = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
        Ok(())
    }

    /// The body's framing once every field line is in; `http10`: the
    /// request line says HTTP/1.0.
    pub fn finish(&self, http10: bool) -> Result<BodyFraming, Violation> {
        if self.te > 0 && self.cl_count > 0 {
            return Err(Violation::BothLengths);
        }
        if self.te > 1 || (self.te == 1 && !self.te_chunked) {
            return Err(Violation::BadTransferEncoding);
        }
        if self.te > 0 && http10 {
            return Err(Violation::TransferEncodingOnHttp10);
        }
        if self.cl_count > 1 {
            return Err(Violation::BadContentLength);
        }
        Ok(match self.cl {
            _ if self.te == 1 => BodyFraming::Chunked,
            Some(n) if n > 0 => BodyFraming::Length(n),
            _ => BodyFraming::None,
        })
    }
}

/// Every line of a complete head ends with CRLF: no bare LF, no bare CR.
/// One pass that jumps from one CR or LF to the next.
pub fn check_line_endings(head: &[u8]) -> Result<(), Violation> {
    let mut at = 0;
    while let Some(k) = memchr::memchr2(b'\r', b'\n', &head[at..]) {
        let i = at + k;
        if head[i] == b'\n' || head.get(i + 1) != Some(&b'\n') {
            return Err(Violation::BareLineEnding);
        }
        at = i + 2;
    }
    Ok(())
}

/// What a request head says of its framing, gathered line by line.
#[derive(Default)]
struct HeadFields {
    http10: bool,
    connect: bool,
    upgrade: bool,
    framing: RequestFraming,
}

impl HeadFields {
    fn request_line(&mut self, line: &[u8]) {
        self.http10 = line.ends_with(b"HTTP/1.0");
        self.connect = line.starts_with(b"CONNECT ");
    }

    /// The framing of what follows the head, once every line is in.
    fn framing(self) -> Result<State, Violation> {
        let body = self.framing.finish(self.http10)?;
        Ok(if self.upgrade || self.connect {
            State::Passthrough
        } else {
            match body {
                BodyFraming::Chunked => State::ChunkLine,
                BodyFraming::Length(n) => State::Body(n),
                BodyFraming::None => State::Head,
            }
        })
    }

    fn field_line(&mut self, line: &[u8]) -> Result<(), Violation> {
        let (name, value) = check_field_line(line)?;
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.framing.transfer_encoding(value);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            self.framing.content_length(value)?;
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            self.upgrade = true;
        }
        Ok(())
    }
}

/// The end of the line (index of its CR) once a CRLF has arrived.
pub(crate) fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, Violation> {
    let scan = &buf[..buf.len().min(max + 2)];
    match scan.iter().position(|&b| b == b'\n' || b == b'\r') {
        Some(i) if scan[i] == b'\n' => Err(Violation::BareLineEnding),
        Some(i) if i + 1 < scan.len() => {
            if scan[i + 1] == b'\n' {
                Ok(Some(i))
            } else {
                Err(Violation::BareLineEnding)
            }
        }
        Some(_) => Ok(None),
        None if buf.len() > max => Err(Violation::TooLong),
        None => Ok(None),
    }
}

/// RFC 9110 `tchar`, by table: it is asked of every byte of every field name.
const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// One `name: value` line: returns the name and the trimmed value.
pub(crate) fn check_field_line(line: &[u8]) -> Result<(&[u8], &[u8]), Violation> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(Violation::ObsFold);
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(Violation::BadHeaderName)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(Violation::BadHeaderName);
    }
    let value = trim_ows(&line[colon + 1..]);
    if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(Violation::BadHeaderName);
    }
    Ok((name, value))
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// What hyper is fed instead of a refused request: a request line it cannot
/// parse, so it ends the connection once any earlier pipelined response is
/// written (it reads heads one at a time); the 400 then goes out from
/// `Drop`, after everything hyper wrote.
const POISON: &[u8] = b"\x00 / HTTP/1.1\r\n\r\n";

const RESPONSE_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 16\r\n\r\n400 Bad Request\n";

/// The byte stream of one HTTP/1.1 client connection, checked by [`Framing`].
pub struct Guard<T> {
    /// `None` only once [`Guard::into_inner`] has taken it.
    inner: Option<T>,
    framing: Framing,
    /// Read but not yet handed to hyper; the first `ready` bytes are checked.
    buf: BytesMut,
    ready: usize,
    /// After a violation: only the poison, then nothing.
    poisoned: bool,
    on_drop: Option<fn(&mut T)>,
    /// Bytes of the 400 written from `poll_shutdown`.
    sent: usize,
    /// hyper wrote its own answer after the poison: ours must not follow it
    /// (the client would see two responses).
    answered: bool,
    peer: std::net::SocketAddr,
}

/// Writes the 400 with a no-op waker: it either fits the send buffer now or
/// is lost, and the connection is closed either way.
fn write_400<T: AsyncWrite + Unpin>(io: &mut T) {
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut pin = Pin::new(io);
    let _ = pin.as_mut().poll_write(&mut cx, RESPONSE_400);
    let _ = pin.as_mut().poll_flush(&mut cx);
    let _ = pin.as_mut().poll_shutdown(&mut cx);
}

impl<T: AsyncWrite + Unpin> Guard<T> {
    pub fn new(inner: T, max_head: usize, peer: std::net::SocketAddr) -> Self {
        Guard {
            inner: Some(inner),
            framing: Framing::new(max_head),
            buf: BytesMut::new(),
            ready: 0,
            poisoned: false,
            on_drop: Some(write_400::<T>),
            sent: 0,
            answered: false,
            peer,
        }
    }
}

impl<T> Guard<T> {
    /// Between two messages, with nothing read and not yet handed on: the
    /// stream can continue under another guard (`server::balance`).
    pub fn at_rest(&self) -> bool {
        self.buf.is_empty() && self.ready == 0 && !self.poisoned && self.framing.at_head()
    }

    /// The stream, for a guard [`at_rest`](Guard::at_rest).
    pub fn into_inner(mut self) -> T {
        self.inner.take().expect("a guard's stream is taken once")
    }
}

fn inner_mut<T>(inner: &mut Option<T>) -> &mut T {
    inner
        .as_mut()
        .expect("a guard's stream is used until it is taken")
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.ready.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                this.ready -= n;
                if this.buf.is_empty() {
                    // Give the memory back: an idle keep-alive connection
                    // must not keep 8 KiB here.
                    this.buf = BytesMut::new();
                }
                return Poll::Ready(Ok(()));
            }
            if this.poisoned {
                // Nothing more is read: hyper answers the poison with 400 and
                // closes. (End of stream here would make it drop that answer.)
                return Poll::Pending;
            }
            if !this.buf.is_empty() {
                match this.framing.advance(&this.buf) {
                    Ok(Step::Release(n)) => {
                        this.ready = n;
                        continue;
                    }
                    Ok(Step::NeedMore) => {}
                    Err(v) => {
                        tracing::warn!("request from {} refused: {v}", this.peer);
                        this.buf.clear();
                        this.buf.extend_from_slice(POISON);
                        this.ready = POISON.len();
                        this.poisoned = true;
                        continue;
                    }
                }
            } else if let Some(limit) = this.framing.passthrough_limit() {
                // Body bytes straight into hyper's buffer, never past the body's end.
                let want = (out.remaining() as u64).min(limit) as usize;
                let mut sub = ReadBuf::new(out.initialize_unfilled_to(want));
                ready!(Pin::new(inner_mut(&mut this.inner)).poll_read(cx, &mut sub))?;
                let n = sub.filled().len();
                out.advance(n);
                this.framing.consumed(n);
                return Poll::Ready(Ok(()));
            }
            // Need more bytes for a head or a chunk line.
            if this.buf.is_empty() && out.remaining() >= 1024 {
                // The common case, a whole head in one read: read it straight
                // into hyper's buffer and check it there, with no copy and
                // no zeroing of a buffer of ours (both showed in the profile
                // of small static requests).
                let before = out.filled().len();
                ready!(Pin::new(inner_mut(&mut this.inner)).poll_read(cx, out))?;
                let n = out.filled().len() - before;
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                let mut checked = 0;
                let mut refused = None;
                while checked < n {
                    match this.framing.advance(&out.filled()[before + checked..]) {
                        Ok(Step::Release(k)) => checked += k,
                        Ok(Step::NeedMore) => break,
                        Err(v) => {
                            refused = Some(v);
                            break;
                        }
                    }
                }
                if let Some(v) = refused {
                    // What was checked before the refused request stays
                    // (earlier pipelined requests); the poison follows it.
                    out.set_filled(before + checked);
                    tracing::warn!("request from {} refused: {v}", this.peer);
                    this.buf.extend_from_slice(POISON);
                    this.ready = POISON.len();
                    this.poisoned = true;
                } else if checked < n {
                    // An incomplete head or chunk line: held back here.
                    this.buf
                        .extend_from_slice(&out.filled()[before + checked..]);
                    out.set_filled(before + checked);
                }
                if checked > 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let before = this.buf.len();
            this.buf.resize(before + 8192, 0);
            let mut rb = ReadBuf::new(&mut this.buf[before..]);
            let r = Pin::new(inner_mut(&mut this.inner)).poll_read(cx, &mut rb);
            let n = rb.filled().len();
            this.buf.truncate(before + n);
            ready!(r)?;
            if n == 0 {
                // EOF: whatever is left goes to hyper, which reports it incomplete.
                this.ready = this.buf.len();
                if this.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
        }
    }
}

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.poisoned || self.answered {
            return;
        }
        // One non-blocking attempt: a 16-byte body fits any socket buffer.
        // `Drop` cannot be generic over `AsyncWrite`, so the write goes
        // through the hook set by `Guard::new`.
        if let Some(write) = self.on_drop.take()
            && let Some(inner) = &mut self.inner
        {
            write(inner);
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(inner_mut(&mut this.inner)).poll_write(cx, buf);
        if this.poisoned && matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.answered = true;
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(inner_mut(&mut this.inner)).poll_write_vectored(cx, bufs);
        if this.poisoned && matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.answered = true;
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(T::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(inner_mut(&mut self.get_mut().inner)).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper closes after failing on the poison: the 400 goes out first.
        if this.poisoned && !this.answered && this.on_drop.is_some() {
            while this.sent < RESPONSE_400.len() {
                match ready!(
                    Pin::new(inner_mut(&mut this.inner)).poll_write(cx, &RESPONSE_400[this.sent..])
                ) {
                    Ok(n) if n > 0 => this.sent += n,
                    _ => break,
                }
            }
            this.on_drop = None;
            let _ = ready!(Pin::new(inner_mut(&mut this.inner)).poll_flush(cx));
        }
        Pin::new(inner_mut(&mut this.inner)).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a whole byte string through the framing, one byte at a time
    /// when `trickle`, and returns what was released or the violation.
    fn run(input: &[u8], trickle: bool) -> Result<Vec<u8>, Violation> {
        let mut f = Framing::new(8192);
        let mut pending: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        let step = if trickle { 1 } else { input.len().max(1) };
        for piece in input.chunks(step) {
            pending.extend_from_slice(piece);
            while let Step::Release(n) = f.advance(&pending)? {
                out.extend_from_slice(&pending[..n]);
                pending.drain(..n);
            }
        }
        Ok(out)
    }

    #[test]
    fn clean_requests_pass_whole_and_in_pieces() {
        let reqs: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n\x81\x05hello\n\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04",
        ];
        for r in reqs {
            assert_eq!(
                run(r, false).as_deref(),
                Ok(*r),
                "{}",
                String::from_utf8_lossy(r)
            );
            assert_eq!(
                run(r, true).as_deref(),
                Ok(*r),
                "{}",
                String::from_utf8_lossy(r)
            );
        }
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        use Violation as V;
        let cases: &[(&[u8], Violation)] = &[
            (b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", V::BothLengths),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", V::BothLengths),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", V::BadTransferEncoding),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", V::BadTransferEncoding),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", V::BadTransferEncoding),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: \tchunked, identity\r\n\r\n", V::BadTransferEncoding),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", V::BadHeaderName),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding:\x0bchunked\r\n\r\n", V::BadTransferEncoding),
            (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", V::BadContentLength),
            (b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", V::BadContentLength),
            (b"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", V::BadContentLength),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", V::TransferEncodingOnHttp10),
            (b"GET / HTTP/1.1\nHost: a\n\n", V::BareLineEnding),
            (b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", V::BareLineEnding),
            (b"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", V::ObsFold),
            (b"GET / HTTP/1.1\r\nX A: a\r\n\r\n", V::BadHeaderName),
            (b"GET / HTTP/1.1\r\n: a\r\n\r\n", V::BadHeaderName),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", V::BadChunk),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 ;x\r\n", V::BadChunk),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n", V::BadChunk),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n", V::BadChunk),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", V::BadChunk),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello", V::BareLineEnding),
        ];
        for (req, want) in cases {
            for trickle in [false, true] {
                assert_eq!(
                    run(req, trickle).map(|_| ()),
                    Err(*want),
                    "{} (trickle {trickle})",
                    String::from_utf8_lossy(req)
                );
            }
        }
    }

    /// The head check as it was written before it became one pass: find the
    /// blank line, check every line ending, then each field line in order
    /// (the rules per field and for the framing, `HeadFields`, are shared).
    fn reference_head(buf: &[u8], max_head: usize) -> Result<Option<(usize, State)>, Violation> {
        fn bare(b: &[u8]) -> Result<(), Violation> {
            for (i, &c) in b.iter().enumerate() {
                let bad = match c {
                    b'\n' => i == 0 || b[i - 1] != b'\r',
                    b'\r' => i + 1 < b.len() && b[i + 1] != b'\n',
                    _ => false,
                };
                if bad {
                    return Err(Violation::BareLineEnding);
                }
            }
            Ok(())
        }
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            bare(&buf[..buf.len().min(max_head)])?;
            return Ok(None);
        };
        let head = &buf[..end + 2];
        bare(head)?;
        let mut lines = head
            .split(|&b| b == b'\n')
            .map(|l| &l[..l.len().saturating_sub(1)]);
        let mut f = HeadFields::default();
        f.request_line(lines.next().unwrap_or_default());
        for line in lines.filter(|l| !l.is_empty()) {
            f.field_line(line)?;
        }
        let state = f.framing()?;
        Ok(Some((end + 4, state)))
    }

    #[test]
    fn one_pass_head_check_agrees_with_the_plain_one() {
        let seeds: &[&[u8]] = &[
            b"GET /a HTTP/1.1\r\nHost: a\r\nUser-Agent: x\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\nhello",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n5\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\n",
        ];
        let alphabet = b"\r\n\r\n\r\n:: \t\x00,;=0123456789aAzZ-.";
        let mut rng = fastrand::Rng::with_seed(0x5eed_4ead);
        for _ in 0..60_000 {
            let input = crate::test_support::mutated(&mut rng, seeds, alphabet);
            if input.starts_with(b"\r\n") || input.is_empty() {
                continue;
            }
            for max_head in [8192, 24] {
                let mut f = Framing::new(max_head);
                let got = f.head(&input).map(|step| match step {
                    Step::Release(n) => Some((n, f.state)),
                    Step::NeedMore => None,
                });
                // An incomplete head past the limit goes to hyper unchecked
                // (it answers 431).
                let too_large = Ok(Some((input.len(), State::Passthrough)));
                let want = match reference_head(&input, max_head) {
                    Ok(None) if input.len() > max_head => too_large,
                    w => w,
                };
                // Past the limit a bare line ending may make one refuse with
                // 400 where the other leaves the 431 to hyper: both refuse.
                if input.len() > max_head
                    && (got.is_err() || got == too_large)
                    && (want.is_err() || want == too_large)
                {
                    continue;
                }
                assert_eq!(
                    got,
                    want,
                    "{:?} (max_head {max_head})",
                    String::from_utf8_lossy(&input)
                );
            }
        }
    }

    #[test]
    fn a_smuggled_request_after_a_good_body_is_checked_as_a_head() {
        let r = b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(run(r, false), Err(Violation::BadContentLength));
    }
}
