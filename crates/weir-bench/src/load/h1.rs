//! The lean HTTP/1.1 client: one loop per connection.
//!
//! The request is serialised once per run; each connection owns one reusable
//! read buffer; response heads are parsed in place with `httparse` and bodies
//! (Content-Length, chunked, or until close) are skipped: over cleartext TCP
//! a body of known length never reaches user space (`Discard`). Never
//! allocates per request.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::{
    Claim, Conn, ErrorKind, LoadConfig, Schedule, Target, ThreadCtx, classify_io, connect,
    until_end,
};

/// Size of each connection's read buffer.
const BUF_SIZE: usize = 64 * 1024;

/// Serialises the request once: request line, Host, user headers, body.
pub fn serialize_request(cfg: &LoadConfig, target: &Target) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + cfg.body.len());
    out.extend_from_slice(cfg.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let has = |n: &str| cfg.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(target.authority.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (k, v) in &cfg.headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !cfg.body.is_empty() && !has("content-length") {
        out.extend_from_slice(format!("Content-Length: {}\r\n", cfg.body.len()).as_bytes());
    }
    if !cfg.keepalive && !has("connection") {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&cfg.body);
    out
}

/// A reusable receive buffer: `buf[start..end]` holds unread bytes.
pub struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for RecvBuf {
    fn default() -> Self {
        RecvBuf {
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
        }
    }
}

impl RecvBuf {
    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Reads more bytes; returns how many (0 at EOF).
    async fn fill<S: AsyncRead + Unpin>(&mut self, s: &mut S) -> std::io::Result<usize> {
        if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "response head too large",
                ));
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = s.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }
}

/// The parts of a response the generator needs.
#[derive(Debug, Clone, Copy)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Bytes received (head + body, chunk framing included).
    pub bytes: u64,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// Why reading a response failed.
#[derive(Debug)]
pub enum ReadError {
    /// I/O error (classified later).
    Io(std::io::Error),
    /// The connection closed before the response was complete.
    Closed,
    /// The response is not valid HTTP/1.1.
    Protocol,
}

impl ReadError {
    fn kind(&self) -> ErrorKind {
        match self {
            ReadError::Io(e) => classify_io(e, ErrorKind::Protocol),
            ReadError::Closed => ErrorKind::Reset,
            ReadError::Protocol => ErrorKind::Protocol,
        }
    }
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::InvalidData
            && !e.get_ref().is_some_and(|i| i.is::<rustls::Error>())
        {
            return ReadError::Protocol;
        }
        ReadError::Io(e)
    }
}

async fn fill_or_closed<S: AsyncRead + Unpin>(
    s: &mut S,
    rb: &mut RecvBuf,
) -> Result<(), ReadError> {
    match rb.fill(s).await? {
        0 => Err(ReadError::Closed),
        _ => Ok(()),
    }
}

/// A stream a body of known length can be dropped from.
///
/// Why by hand: copying a 1 MiB body out of the socket made the generator the
/// limit at large sizes (one thread copying 4.5–7 GB/s), so its share of the
/// two cores, not the server, set the rate. Linux's `recv` with `MSG_TRUNC`
/// on a TCP socket drops the bytes without copying them (tcp(7)); no crate
/// wraps that, and tokio's readiness (`try_io`) is all it needs.
pub(crate) trait Discard: AsyncRead + Unpin + Sized {
    /// Removes up to `max` of the stream's next bytes and returns how many
    /// (0: the stream ended). This default reads them into `rb`, which is
    /// empty on entry, and consumes them there; bytes past `max` (the next
    /// response) stay in `rb`.
    async fn discard(&mut self, rb: &mut RecvBuf, max: u64) -> std::io::Result<u64> {
        let got = rb.fill(self).await? as u64;
        let take = got.min(max);
        rb.consume(take as usize);
        Ok(take)
    }
}

impl Discard for tokio_rustls::client::TlsStream<TcpStream> {}

/// The most one `recv(MSG_TRUNC)` drops.
const DISCARD_MAX: usize = 1024 * 1024;

thread_local! {
    /// The buffer `recv` is given for `MSG_TRUNC`: reserved, never written
    /// (the kernel copies nothing), so its pages are never touched.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(DISCARD_MAX));
}

impl Discard for TcpStream {
    async fn discard(&mut self, _rb: &mut RecvBuf, max: u64) -> std::io::Result<u64> {
        let me: &TcpStream = self;
        let flags = nix::sys::socket::MsgFlags::MSG_TRUNC.bits();
        loop {
            me.readable().await?;
            let dropped = me.try_io(Interest::READABLE, || {
                SCRATCH.with_borrow_mut(|v| {
                    let len = usize::try_from(max).unwrap_or(usize::MAX).min(v.capacity());
                    let buf: &mut [MaybeUninit<u8>] = &mut v.spare_capacity_mut()[..len];
                    socket2::SockRef::from(me).recv_with_flags(buf, flags)
                })
            });
            match dropped {
                Ok(n) => return Ok(n as u64),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Skips `n` body bytes: those already in `rb`, then the rest from `s`,
/// dropped where it can (`Discard`) unless `copy`.
async fn skip<S: Discard>(
    s: &mut S,
    rb: &mut RecvBuf,
    mut n: u64,
    copy: bool,
) -> Result<(), ReadError> {
    loop {
        let take = (rb.len() as u64).min(n);
        rb.consume(take as usize);
        n -= take;
        if n == 0 {
            return Ok(());
        }
        rb.clear();
        if copy {
            fill_or_closed(s, rb).await?;
        } else {
            match s.discard(rb, n).await? {
                0 => return Err(ReadError::Closed),
                d => n -= d,
            }
        }
    }
}

/// Reads one response from `s`; `head_request` means the body is absent;
/// `copy`: read the body's bytes rather than drop them (`Discard`).
pub(crate) async fn read_response<S: Discard>(
    s: &mut S,
    rb: &mut RecvBuf,
    head_request: bool,
    copy: bool,
) -> Result<Response, ReadError> {
    let mut bytes = 0u64;
    let (status, body, close) = loop {
        if rb.len() > 0 {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(rb.data()) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    let mut length = None;
                    let mut chunked = false;
                    let mut close = resp.version == Some(0);
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let v = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse::<u64>().ok());
                            length = Some(v.ok_or(ReadError::Protocol)?);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = h
                                .value
                                .windows(7)
                                .any(|w| w.eq_ignore_ascii_case(b"chunked"));
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            if h.value.windows(5).any(|w| w.eq_ignore_ascii_case(b"close")) {
                                close = true;
                            } else if h
                                .value
                                .windows(10)
                                .any(|w| w.eq_ignore_ascii_case(b"keep-alive"))
                            {
                                close = false;
                            }
                        }
                    }
                    rb.consume(n);
                    bytes += n as u64;
                    if (100..200).contains(&status) {
                        continue; // 100 Continue and friends: the real response follows.
                    }
                    let body = if head_request || status == 204 || status == 304 {
                        Body::None
                    } else if chunked {
                        Body::Chunked
                    } else if let Some(l) = length {
                        Body::Length(l)
                    } else {
                        Body::UntilClose
                    };
                    break (status, body, close);
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Err(ReadError::Protocol),
            }
        }
        fill_or_closed(s, rb).await?;
    };
    match body {
        Body::None => {}
        Body::Length(n) => {
            skip(s, rb, n, copy).await?;
            bytes += n;
        }
        Body::Chunked => bytes += skip_chunked(s, rb, copy).await?,
        Body::UntilClose => {
            bytes += rb.len() as u64;
            rb.clear();
            while rb.fill(s).await? > 0 {
                bytes += rb.len() as u64;
                rb.clear();
            }
            return Ok(Response {
                status,
                bytes,
                close: true,
            });
        }
    }
    Ok(Response {
        status,
        bytes,
        close,
    })
}

enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Skips a chunked body (and trailers); returns the bytes it spanned. Each
/// chunk's data is skipped like a body of known length (`copy`: read).
async fn skip_chunked<S: Discard>(
    s: &mut S,
    rb: &mut RecvBuf,
    copy: bool,
) -> Result<u64, ReadError> {
    let mut bytes = 0u64;
    loop {
        let size = loop {
            match httparse::parse_chunk_size(rb.data()) {
                Ok(httparse::Status::Complete((n, size))) => {
                    rb.consume(n);
                    bytes += n as u64;
                    break size;
                }
                Ok(httparse::Status::Partial) => fill_or_closed(s, rb).await?,
                Err(_) => return Err(ReadError::Protocol),
            }
        };
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                match rb.data().windows(2).position(|w| w == b"\r\n") {
                    Some(0) => {
                        rb.consume(2);
                        return Ok(bytes + 2);
                    }
                    Some(p) => {
                        rb.consume(p + 2);
                        bytes += p as u64 + 2;
                    }
                    None => fill_or_closed(s, rb).await?,
                }
            }
        }
        skip(s, rb, size, copy).await?;
        bytes += size;
        while rb.len() < 2 {
            fill_or_closed(s, rb).await?;
        }
        if &rb.data()[..2] != b"\r\n" {
            return Err(ReadError::Protocol);
        }
        rb.consume(2);
        bytes += 2;
    }
}

/// Writes a whole request and flushes it (see the note in `requests`).
pub async fn send_request<S: AsyncWrite + Unpin>(s: &mut S, request: &[u8]) -> std::io::Result<()> {
    s.write_all(request).await?;
    s.flush().await
}

/// One closed- or open-loop HTTP/1.1 connection, reconnecting as needed,
/// until the run ends.
pub async fn connection(ctx: &ThreadCtx, index: usize, total: usize) {
    let mut sched = Schedule::new(&ctx.plan, index, total);
    let mut rb = RecvBuf::default();
    // The first request of each connection is claimed before connecting:
    // checking the budget only when sending would let two connections race
    // for the last request, one of them opened for nothing (with `-n` and no
    // keep-alive, one connection too many per race).
    while let Some(first) = ctx.claim(Instant::now()) {
        // Still opening at the end: its first request waited.
        let Some(conn) = until_end(ctx, 1, connect(ctx)).await else {
            ctx.release(first);
            continue;
        };
        rb.clear();
        match conn {
            Conn::Plain(mut s) => requests(ctx, &mut s, &mut rb, &mut sched, first).await,
            Conn::Tls(mut s) => requests(ctx, &mut *s, &mut rb, &mut sched, first).await,
        }
    }
}

/// Sends requests on one open connection until it must be closed.
async fn requests<S: Discard + AsyncWrite>(
    ctx: &ThreadCtx,
    s: &mut S,
    rb: &mut RecvBuf,
    sched: &mut Schedule,
    first: Claim,
) {
    let plan = &*ctx.plan;
    let mut first = Some(first);
    loop {
        let intended = sched.next().await;
        let sending = match first.take() {
            Some(claim) => ctx.spend(claim, intended),
            None => ctx.take(intended),
        };
        if !sending {
            return;
        }
        let sent = Instant::now();
        // The flush matters over TLS: when the socket refuses part of a write
        // (WouldBlock, or tokio's cooperative budget running out, which many
        // connections on one thread hit all the time), tokio-rustls reports
        // the plaintext as written but keeps the encrypted records queued, and
        // only a flush (not a read) sends them. Without it the request never
        // reaches the server and the connection stalls until its timeout.
        if let Err(e) = send_request(s, &plan.h1_request).await {
            ctx.error(classify_io(&e, ErrorKind::Reset), intended);
            return;
        }
        let deadline = sent + plan.cfg.timeout;
        // In duration mode a response still in flight at the end is neither
        // a success nor an error; its wait so far goes into the latency.
        let cutoff = plan.end.map_or(deadline, |e| e.max(intended).min(deadline));
        match tokio::time::timeout_at(
            cutoff.into(),
            read_response(s, rb, plan.head, plan.cfg.copy_bodies),
        )
        .await
        {
            Err(_) => {
                if cutoff == deadline {
                    ctx.error(ErrorKind::Timeout, intended);
                } else {
                    ctx.unanswered(intended, cutoff);
                }
                return;
            }
            Ok(Err(e)) => {
                ctx.error(e.kind(), intended);
                return;
            }
            Ok(Ok(resp)) => {
                ctx.response(resp.status, resp.bytes, intended, sent, Instant::now());
                if resp.close || !plan.cfg.keepalive {
                    return;
                }
            }
        }
    }
}
