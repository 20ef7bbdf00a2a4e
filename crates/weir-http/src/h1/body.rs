//! The request body a handler receives from weir's HTTP/1.1 loop, and the
//! loop's end of it. One frame at most is in flight: the loop reads body
//! bytes from the client only when the body asks for the next frame, so a
//! slow consumer holds the client back (backpressure) and a request never
//! buffers more than one read. The body is `Send`: a handler may move it to
//! another task (the proxy's hyper client); asking for a frame wakes the
//! connection's task.
//!
//! Never allocates for a request without a body ([`Incoming::empty`]);
//! never holds the lock across anything but a few field updates.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};

use super::DecodeError;
use crate::body::BodyError;

/// Why a request body broke off.
#[derive(Debug, thiserror::Error)]
pub enum IncomingError {
    #[error("the client closed the connection before the end of the request body")]
    Closed,
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// What the two ends share.
#[derive(Default)]
struct Slot {
    frame: Option<Result<Frame<Bytes>, IncomingError>>,
    /// The body asked for a frame and has none yet.
    wanted: bool,
    /// Nothing more will come (after `frame`, if any).
    ended: bool,
    /// The handler dropped the body.
    dropped: bool,
    /// Bytes still to come when the framing says (Content-Length).
    remaining: Option<u64>,
    body: Option<Waker>,
    conn: Option<Waker>,
}

type Shared = Arc<Mutex<Slot>>;

fn lock(s: &Shared) -> MutexGuard<'_, Slot> {
    // A panic while holding this lock leaves plain fields behind: go on.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request body, as the handler sees it.
pub struct Incoming {
    chan: Option<Shared>,
}

/// The connection loop's end of an [`Incoming`].
pub struct Sender {
    chan: Shared,
}

/// What the body asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// The next frame.
    Frame,
    /// Nothing: the handler let go of the body (what is left may be discarded).
    Dropped,
}

/// A body fed by the returned [`Sender`]; `remaining`: its announced
/// length; `eager`: the first frame may be read before the body asks.
pub fn channel(remaining: Option<u64>, eager: bool) -> (Sender, Incoming) {
    let chan = Arc::new(Mutex::new(Slot {
        remaining,
        wanted: eager,
        ..Slot::default()
    }));
    (Sender { chan: chan.clone() }, Incoming { chan: Some(chan) })
}

impl Incoming {
    /// A request without a body.
    pub fn empty() -> Self {
        Incoming { chan: None }
    }
}

impl Default for Incoming {
    fn default() -> Self {
        Incoming::empty()
    }
}

impl Sender {
    /// Ready when the body wants a frame or was dropped; else the task is
    /// woken when that changes.
    pub fn poll_want(&self, cx: &mut Context<'_>) -> Poll<Feed> {
        let mut s = lock(&self.chan);
        if s.dropped {
            return Poll::Ready(Feed::Dropped);
        }
        if s.wanted && s.frame.is_none() {
            return Poll::Ready(Feed::Frame);
        }
        if !s.conn.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.conn = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Hands over body bytes; `remaining` is what the framing still expects.
    pub fn data(&self, data: Bytes, remaining: Option<u64>) {
        self.give(Ok(Frame::data(data)), false, remaining);
    }

    /// Hands over the trailers, which end the body.
    pub fn trailers(&self, map: HeaderMap) {
        self.give(Ok(Frame::trailers(map)), true, Some(0));
    }

    /// The body has ended.
    pub fn end(&self) {
        let mut s = lock(&self.chan);
        s.ended = true;
        s.remaining = Some(0);
        wake(&mut s.body);
    }

    /// The body broke off.
    pub fn fail(&self, e: IncomingError) {
        self.give(Err(e), true, None);
    }

    fn give(&self, f: Result<Frame<Bytes>, IncomingError>, last: bool, remaining: Option<u64>) {
        let mut s = lock(&self.chan);
        s.frame = Some(f);
        s.wanted = false;
        s.ended |= last;
        s.remaining = remaining;
        wake(&mut s.body);
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut s = lock(&self.chan);
        if !s.ended {
            if s.frame.is_none() {
                s.frame = Some(Err(IncomingError::Closed));
            }
            s.ended = true;
        }
        wake(&mut s.body);
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if let Some(chan) = &self.chan {
            let mut s = lock(chan);
            s.dropped = true;
            wake(&mut s.conn);
        }
    }
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

impl http_body::Body for Incoming {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let Some(chan) = &self.chan else {
            return Poll::Ready(None);
        };
        let mut s = lock(chan);
        if let Some(f) = s.frame.take() {
            return Poll::Ready(Some(f.map_err(Into::into)));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        s.wanted = true;
        if !s.body.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.body = Some(cx.waker().clone());
        }
        wake(&mut s.conn);
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.chan.as_ref().is_none_or(|c| {
            let s = lock(c);
            s.ended && s.frame.is_none()
        })
    }

    fn size_hint(&self) -> SizeHint {
        let Some(chan) = &self.chan else {
            return SizeHint::with_exact(0);
        };
        let s = lock(chan);
        let buffered = match &s.frame {
            Some(Ok(f)) => f.data_ref().map_or(0, |d| d.len() as u64),
            _ => 0,
        };
        match s.remaining {
            Some(n) => SizeHint::with_exact(n + buffered),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn frames_flow_one_at_a_time_when_asked() {
        let (tx, rx) = channel(Some(5), false);
        assert_eq!(rx.size_hint().exact(), Some(5));
        let reader = tokio::spawn(async move {
            rx.collect()
                .await
                .map(|c| (c.trailers().cloned(), c.to_bytes()))
        });
        let mut sent = 0;
        loop {
            let want = std::future::poll_fn(|cx| tx.poll_want(cx)).await;
            assert_eq!(want, Feed::Frame);
            match sent {
                0 => tx.data(Bytes::from_static(b"hel"), Some(2)),
                1 => tx.data(Bytes::from_static(b"lo"), Some(0)),
                _ => {
                    let mut t = HeaderMap::new();
                    t.insert("x-sum", "1".parse().unwrap());
                    tx.trailers(t);
                    break;
                }
            }
            sent += 1;
        }
        let (trailers, data) = reader.await.unwrap().unwrap();
        assert_eq!(&data[..], b"hello");
        assert_eq!(trailers.unwrap()["x-sum"], "1");
    }

    #[tokio::test]
    async fn a_dropped_sender_is_an_error_and_a_dropped_body_is_seen() {
        let (tx, mut rx) = channel(None, false);
        drop(tx);
        assert!(rx.frame().await.unwrap().is_err());
        assert!(rx.frame().await.is_none());

        let (tx, rx) = channel(None, false);
        drop(rx);
        assert_eq!(
            std::future::poll_fn(|cx| tx.poll_want(cx)).await,
            Feed::Dropped
        );
        assert!(Incoming::empty().is_end_stream());
    }
}
