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
//!
//! Also the one rule every stream below it writes by ([`poll_write_slices`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use weir_http::deadline::Deadline;

/// Writes `bufs` to a socket: a single slice (nearly always: a whole small
/// response, or one sealed TLS record) with a plain `send`, several with
/// `writev`. The kernel's vectored path costs more for one slice.
pub fn poll_write_slices<W: AsyncWrite + ?Sized>(
    w: Pin<&mut W>,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    match bufs {
        [one] => w.poll_write(cx, one),
        _ => w.poll_write_vectored(cx, bufs),
    }
}

/// A socket under TLS, writing by [`poll_write_slices`]: rustls hands over
/// what it has sealed as a list of records, nearly always one, and a
/// `TcpStream` alone would `writev` it.
pub struct SliceWrites<T>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for SliceWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SliceWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        poll_write_slices(Pin::new(&mut self.0), cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

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

/// The timeouts a connection's I/O enforces (`server.timeouts`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header: Duration,
    pub keepalive: Duration,
    pub write: Duration,
}

impl From<&weir_config::Timeouts> for Limits {
    fn from(t: &weir_config::Timeouts) -> Self {
        Limits {
            header: t.header,
            keepalive: t.keepalive,
            write: t.write,
        }
    }
}

const RESPONSE_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

pub struct TimedIo<T> {
    inner: T,
    state: Arc<ConnState>,
    limits: Limits,
    /// Whether a canned HTTP/1.1 408 may be written when a head is too slow.
    h1: bool,
    /// The one timer of every deadline below, re-armed lazily.
    timer: Deadline,
    last_activity: Instant,
    /// When the first byte of the current head arrived, and the request count then.
    head_started: Option<(Instant, u64)>,
    write_waiting_since: Option<Instant>,
    /// Whether any byte has been read yet (to spot the HTTP/2 preface).
    seen_bytes: bool,
}

impl<T> TimedIo<T> {
    /// The stream, without its timers (they belong to this worker's runtime).
    pub fn into_inner(self) -> T {
        self.inner
    }

    pub fn new(inner: T, state: Arc<ConnState>, limits: Limits, h1: bool) -> Self {
        TimedIo {
            inner,
            state,
            limits,
            h1,
            timer: Deadline::new(),
            last_activity: Instant::now(),
            head_started: None,
            write_waiting_since: None,
            seen_bytes: false,
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
                    let now = weir_http::tokio_now!();
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
                        // Armed no later than one keep-alive period from
                        // now, and set to wake this task: nothing to do.
                        if this
                            .timer
                            .armed()
                            .is_some_and(|a| a <= this.last_activity + this.limits.keepalive)
                            && this.timer.will_wake(cx)
                        {
                            return Poll::Pending;
                        }
                        let _ = this
                            .timer
                            .expired(Instant::now() + this.limits.keepalive, cx);
                        return Poll::Pending;
                    }
                };
                if !this.timer.expired(deadline, cx) {
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
                    self.last_activity = weir_http::tokio_now!();
                }
                self.write_waiting_since = None;
                Poll::Ready(Ok(v))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let since = *self.write_waiting_since.get_or_insert_with(Instant::now);
                if self.timer.expired(since + self.limits.write, cx) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: Limits = Limits {
        header: Duration::from_secs(1),
        keepalive: Duration::from_secs(2),
        write: Duration::from_secs(10),
    };

    /// Runs `body` in a spawned task, as connections run: a task's waker
    /// is the same at every poll (`block_on`'s is not), which is what lets
    /// a read skip polling a timer that is already registered.
    /// A timer that does not wake the task would hang it: fail instead.
    async fn in_task(body: impl Future<Output = ()> + Send + 'static) {
        tokio::time::timeout(Duration::from_secs(60), tokio::spawn(body))
            .await
            .expect("the connection's timer did not wake it")
            .unwrap();
    }

    /// Records which write a caller used.
    #[derive(Default)]
    struct Calls {
        plain: Vec<usize>,
        vectored: Vec<usize>,
    }

    impl AsyncWrite for Calls {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().plain.push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let n = bufs.iter().map(|b| b.len()).sum();
            self.get_mut().vectored.push(bufs.len());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn one_slice_is_a_plain_send_and_several_a_writev() {
        let mut w = Calls::default();
        let mut cx = Context::from_waker(Waker::noop());
        let one = [io::IoSlice::new(b"HTTP/1.1 200 OK\r\n\r\n")];
        let two = [io::IoSlice::new(b"head"), io::IoSlice::new(b"body")];
        assert!(matches!(
            poll_write_slices(Pin::new(&mut w), &mut cx, &one),
            Poll::Ready(Ok(19))
        ));
        assert!(matches!(
            poll_write_slices(Pin::new(&mut w), &mut cx, &two),
            Poll::Ready(Ok(8))
        ));
        assert_eq!(w.plain, [19]);
        assert_eq!(w.vectored, [2]);
    }

    fn conn() -> (
        tokio::io::DuplexStream,
        TimedIo<tokio::io::DuplexStream>,
        Arc<ConnState>,
    ) {
        let (client, server) = tokio::io::duplex(1024);
        let state = Arc::new(ConnState::default());
        (
            client,
            TimedIo::new(server, state.clone(), LIMITS, true),
            state,
        )
    }

    /// A request that runs past the keep-alive period (the loop polls the
    /// read all the while) does not end the connection, and once it is
    /// answered the idle deadline counts from the answer.
    #[tokio::test(start_paused = true)]
    async fn the_idle_deadline_counts_from_the_answer_after_a_long_request() {
        in_task(async move {
            let (mut client, mut io, state) = conn();
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let mut buf = [0u8; 64];
            assert!(io.read(&mut buf).await.unwrap() > 0);
            state.request_started();
            let busy = tokio::time::timeout(Duration::from_secs(5), io.read(&mut buf)).await;
            assert!(
                busy.is_err(),
                "a busy connection is not timed out: {busy:?}"
            );
            state.request_done();
            io.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .unwrap();
            let answered = Instant::now();
            let err = io.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert_eq!(answered.elapsed(), LIMITS.keepalive);
        })
        .await;
    }

    /// The task polls the read again and again (other work wakes it): the
    /// timer, registered once, still ends the idle connection on time.
    #[tokio::test(start_paused = true)]
    async fn an_idle_read_polled_often_still_times_out_on_time() {
        in_task(async move {
            let (_client, mut io, _state) = conn();
            let start = Instant::now();
            let mut buf = [0u8; 64];
            let mut wakes = 0;
            let err = loop {
                tokio::select! {
                    r = io.read(&mut buf) => break r.unwrap_err(),
                    _ = tokio::time::sleep(Duration::from_millis(70)) => wakes += 1,
                }
            };
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert_eq!(start.elapsed(), LIMITS.keepalive);
            assert!(wakes > 10, "{wakes}");
        })
        .await;
    }

    /// A head that starts arriving is timed by the head timeout, even when
    /// the timer was registered for the (later) idle deadline.
    #[tokio::test(start_paused = true)]
    async fn a_slow_head_gets_a_408_at_the_head_timeout() {
        in_task(async move {
            let (mut client, mut io, state) = conn();
            let mut buf = [0u8; 64];
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            assert!(io.read(&mut buf).await.unwrap() > 0);
            state.request_started();
            state.request_done();
            // Idle: the timer is registered for the keep-alive deadline.
            let idle = tokio::time::timeout(Duration::from_millis(500), io.read(&mut buf)).await;
            assert!(idle.is_err());
            // A second request: its first bytes, then nothing.
            client.write_all(b"GET /slow HT").await.unwrap();
            assert!(io.read(&mut buf).await.unwrap() > 0);
            let started = Instant::now();
            let err = io.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert_eq!(started.elapsed(), LIMITS.header);
            let mut answer = vec![0u8; 128];
            let n = client.read(&mut answer).await.unwrap();
            assert!(
                answer[..n].starts_with(b"HTTP/1.1 408"),
                "{:?}",
                &answer[..n]
            );
        })
        .await;
    }
}
