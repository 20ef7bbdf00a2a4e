//! The response body type every handler returns.
//!
//! One concrete enum instead of `BoxBody` everywhere: the hot path (a small
//! cached file, an error page, the welcome page) is a single `Bytes` frame
//! with no boxing and no allocation beyond the response itself; only streamed
//! bodies (large files, compression on the fly, proxied bodies) pay for a box.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::deadline::Deadline;

/// Errors a streamed body can yield; hyper closes the connection on them.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

type BoxedBody = Pin<Box<dyn http_body::Body<Data = Bytes, Error = BodyError> + Send>>;

/// A response body.
#[derive(Default)]
pub enum Body {
    /// No body at all (HEAD, 304, 204).
    #[default]
    Empty,
    /// A complete body in one frame; `None` once it has been sent.
    Full(Option<Bytes>),
    /// Anything streamed.
    Stream(BoxedBody),
}

impl Body {
    pub fn empty() -> Self {
        Body::Empty
    }

    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        if bytes.is_empty() {
            Body::Empty
        } else {
            Body::Full(Some(bytes))
        }
    }

    /// Wraps any streaming body whose error converts into [`BodyError`].
    pub fn stream<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BodyError>,
    {
        use http_body_util::BodyExt;
        Body::Stream(Box::pin(body.map_err(Into::into)))
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::full(b)
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Self {
        Body::full(Bytes::from_static(s.as_bytes()))
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Body::full(Bytes::from(s))
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            Body::Empty => Poll::Ready(None),
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(s) => s.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(b) => b.is_none(),
            Body::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream(s) => s.size_hint(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request body with a limit on how long the client may go quiet
    /// between two pieces of it (`server.timeouts.body`, nginx's
    /// client_body_timeout): the slow-body (R-U-Dead-Yet) defence.
    ///
    /// The connection-level timer in `server::io` deliberately does not time
    /// reads while a request is in flight (hyper polls reads then too); the
    /// stall is measured here, where the body is actually consumed. One timer
    /// per body ([`Deadline`]), made at its first wait and moved (not remade)
    /// after data.
    pub struct TimedBody<B> {
        #[pin]
        inner: B,
        timeout: std::time::Duration,
        timer: Deadline,
        // The end of the current wait; `None`: data came since, and the next
        // wait starts a new one.
        until: Option<tokio::time::Instant>,
    }
}

impl<B> TimedBody<B> {
    pub fn new(inner: B, timeout: std::time::Duration) -> Self {
        TimedBody {
            inner,
            timeout,
            timer: Deadline::new(),
            until: None,
        }
    }
}

/// The error a [`TimedBody`] yields when the client stalls.
#[derive(Debug, thiserror::Error)]
#[error("request body timeout: no data for {0:?}")]
pub struct BodyTimeout(pub std::time::Duration);

/// Whether a request body failed because the client stopped sending it
/// (through whatever client carried the body on: hyper wraps it).
pub fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

impl<B> http_body::Body for TimedBody<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BodyError>,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(r) => {
                *this.until = None;
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let timeout = *this.timeout;
                let until = *this
                    .until
                    .get_or_insert_with(|| tokio::time::Instant::now() + timeout);
                if this.timer.expired(until, cx) {
                    Poll::Ready(Some(Err(Box::new(BodyTimeout(timeout)))))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out() {
        let body = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, std::io::Error>,
        >());
        let mut timed = TimedBody::new(body, std::time::Duration::from_secs(5));
        let err = timed.frame().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("request body timeout"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeout_is_per_pause_not_for_the_whole_body() {
        // Four pieces 3 s apart under a 5 s timeout: 12 s in all, no stall.
        let chunks = futures_util::stream::unfold(0u8, |i| async move {
            if i == 4 {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            Some((
                Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![i; 2]))),
                i + 1,
            ))
        });
        let timed = TimedBody::new(
            http_body_util::StreamBody::new(chunks),
            std::time::Duration::from_secs(5),
        );
        let all = timed.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], &[0, 0, 1, 1, 2, 2, 3, 3]);

        // Then a piece 3 s late and one 6 s late: the second stalls.
        let chunks = futures_util::stream::unfold(0u8, |i| async move {
            tokio::time::sleep(std::time::Duration::from_secs(3 * (u64::from(i) + 1))).await;
            Some((
                Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![i]))),
                i + 1,
            ))
        });
        let mut timed = std::pin::pin!(TimedBody::new(
            http_body_util::StreamBody::new(chunks),
            std::time::Duration::from_secs(5),
        ));
        assert!(timed.frame().await.unwrap().is_ok());
        let err = timed.frame().await.unwrap().unwrap_err();
        assert!(timed_out(err.as_ref()), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_flowing_body_is_untouched() {
        let chunks = (0..3).map(|i| Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![i; 4]))));
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let timed = TimedBody::new(body, std::time::Duration::from_secs(5));
        let all = timed.collect().await.unwrap().to_bytes();
        assert_eq!(&all[..], &[0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    }
}
