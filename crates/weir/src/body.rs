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
