//! Per-connection timeouts on the byte stream: idle keep-alive, request head,
//! and write stalls, and the 408 for a slow head.
//!
//! Written by hand because hyper 1 has a single `header_read_timeout` that
//! starts when it begins waiting for a head, so it cannot tell an idle
//! keep-alive connection (nginx: keepalive_timeout 75s) from a slow one
//! dribbling a head (client_header_timeout 60s, the slowloris defence), and it
//! closes without a 408. This wrapper sees every read and write and is told by
//! the service when a request is in flight ([`ConnState`]); it keeps one timer
//! per connection and re-arms it only when a deadline moves earlier, so the
//! steady keep-alive path does not touch the timer wheel per request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// What the service tells the byte stream about the requests on it.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Requests being handled right now.
    pub in_flight: AtomicU32,
    /// Requests started on this connection so far.
    pub started: AtomicU64,
}

impl ConnState {
    pub fn request_started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub fn request_done(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header: Duration,
    pub keepalive: Duration,
    pub write: Duration,
}

const RESPONSE_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

pub struct TimedIo<T> {
    inner: T,
    state: Arc<ConnState>,
    limits: Limits,
    /// Whether a canned HTTP/1.1 408 may be written when a head is too slow.
    h1: bool,
    timer: Pin<Box<Sleep>>,
    armed: Instant,
    last_activity: Instant,
    /// When the first byte of the current head arrived, and the request count then.
    head_started: Option<(Instant, u64)>,
    write_waiting_since: Option<Instant>,
    /// Whether any byte has been read yet (to spot the HTTP/2 preface).
    seen_bytes: bool,
}

impl<T> TimedIo<T> {
    pub fn new(inner: T, state: Arc<ConnState>, limits: Limits, h1: bool) -> Self {
        let now = Instant::now();
        let armed = now + limits.keepalive.min(limits.header);
        TimedIo {
            inner,
            state,
            limits,
            h1,
            timer: Box::pin(tokio::time::sleep_until(armed)),
            armed,
            last_activity: now,
            head_started: None,
            write_waiting_since: None,
            seen_bytes: false,
        }
    }

    /// Polls the timer against `deadline`; true once it has passed.
    fn expired(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        if deadline < self.armed {
            self.armed = deadline;
            self.timer.as_mut().reset(deadline);
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            // The armed deadline passed; the real one may have moved later.
            if Instant::now() >= deadline {
                return true;
            }
            self.armed = deadline;
            self.timer.as_mut().reset(deadline);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Head,
    Busy,
}

impl<T: AsyncRead + AsyncWrite + Unpin> TimedIo<T> {
    fn phase(&mut self) -> Phase {
        if self.state.in_flight.load(Ordering::Relaxed) > 0 {
            return Phase::Busy;
        }
        match self.head_started {
            Some((_, n)) if n == self.state.started.load(Ordering::Relaxed) => Phase::Head,
            _ => {
                self.head_started = None;
                Phase::Idle
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    if !this.seen_bytes {
                        this.seen_bytes = true;
                        // h2c with prior knowledge: never answer it with an HTTP/1 408.
                        if buf.filled()[before..].starts_with(b"PRI * HTTP/2") {
                            this.h1 = false;
                        }
                    }
                    let now = Instant::now();
                    this.last_activity = now;
                    if this.phase() == Phase::Idle {
                        this.head_started = Some((now, this.state.started.load(Ordering::Relaxed)));
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let phase = this.phase();
                let deadline = match phase {
                    Phase::Idle => this.last_activity + this.limits.keepalive,
                    Phase::Head => {
                        this.head_started
                            .map(|(t, _)| t)
                            .unwrap_or(this.last_activity)
                            + this.limits.header
                    }
                    // hyper also polls reads while a request runs (to notice a
                    // close or a pipelined request): that is not a stall, and
                    // slow request bodies are timed where they are read. But
                    // this may be the last read poll before the connection
                    // goes idle, so keep a timer armed to come back and
                    // re-evaluate: the idle deadline is then at most one
                    // keep-alive period later, with no wake-up per request.
                    Phase::Busy => {
                        let _ = this.expired(Instant::now() + this.limits.keepalive, cx);
                        return Poll::Pending;
                    }
                };
                if !this.expired(deadline, cx) {
                    return Poll::Pending;
                }
                let what = match phase {
                    Phase::Idle => "keep-alive idle timeout",
                    _ => "request head timeout",
                };
                tracing::debug!("closing connection: {what}");
                if phase != Phase::Idle && this.h1 {
                    // Best effort, like nginx: the client may not be reading.
                    let _ = Pin::new(&mut this.inner).poll_write(cx, RESPONSE_408);
                    let _ = Pin::new(&mut this.inner).poll_flush(cx);
                }
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> TimedIo<T> {
    /// `progress`: whether the write moved bytes (a flush with nothing to
    /// flush must not count as activity, or an idle connection never ends).
    fn on_write<R>(
        &mut self,
        r: Poll<io::Result<R>>,
        progress: impl FnOnce(&R) -> bool,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match r {
            Poll::Ready(Ok(v)) => {
                if progress(&v) {
                    self.last_activity = Instant::now();
                }
                self.write_waiting_since = None;
                Poll::Ready(Ok(v))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let since = *self.write_waiting_since.get_or_insert_with(Instant::now);
                if self.expired(since + self.limits.write, cx) {
                    tracing::debug!("closing connection: write timeout");
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "write timeout",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.on_write(r, |n| *n > 0, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.on_write(r, |n| *n > 0, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.on_write(r, |_| false, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
        Poll::Ready(Ok(()))
    }
}
