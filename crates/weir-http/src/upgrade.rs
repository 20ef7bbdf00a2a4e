//! The hand-over of a connection after a protocol switch: an HTTP/1.1
//! `101 Switching Protocols` (WebSocket and other Upgrades) or a 2xx to a
//! `CONNECT`. The server loop inserts an [`OnUpgrade`] into the request's
//! extensions and, once the answer has gone out, fulfils it with the
//! connection's stream and the bytes it had read past the head
//! ([`Upgraded`]). HTTP/2 extended CONNECT (served by hyper) is converted to
//! the same type at the hyper service boundary ([`OnUpgrade::from_future`]),
//! so a handler knows one type whatever the protocol.
//!
//! Never reads or writes the tunnelled bytes itself.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::body::BodyError;

/// A byte stream that can carry a tunnel.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A stream with bytes already read from it put back in front.
pub struct Rewind<T> {
    io: T,
    read: Bytes,
}

impl<T> Rewind<T> {
    pub fn new(io: T, read: Bytes) -> Self {
        Rewind { io, read }
    }
}

/// An upgraded connection: the stream, and what the server had read past
/// the head that switched protocols.
pub type Upgraded = Rewind<Box<dyn Io>>;

impl Upgraded {
    pub fn boxed<T: Io + 'static>(io: T, read: Bytes) -> Self {
        Rewind::new(Box::new(io), read)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
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
            // An empty slice still holds its buffer, which may be shared
            // with other requests' heads: let it go for the stream's life.
            this.read = Bytes::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
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

/// Why no upgraded connection came.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("the connection was not upgraded")]
    NotUpgraded,
    #[error("upgrade failed: {0}")]
    Failed(BodyError),
}

type BoxedUpgrade = Pin<Box<dyn Future<Output = Result<Upgraded, UpgradeError>> + Send>>;

enum Inner {
    Own(oneshot::Receiver<Upgraded>),
    Other(BoxedUpgrade),
}

/// The connection a request switches to, once its answer has gone out. A
/// request extension; cloneable as extensions must be, but only one clone
/// gets the connection.
#[derive(Clone)]
pub struct OnUpgrade {
    inner: Arc<Mutex<Option<Inner>>>,
}

/// The server's end of an [`OnUpgrade`].
pub struct Pending(oneshot::Sender<Upgraded>);

/// A connection hand-over for one request.
pub fn pending() -> (Pending, OnUpgrade) {
    let (tx, rx) = oneshot::channel();
    (
        Pending(tx),
        OnUpgrade {
            inner: Arc::new(Mutex::new(Some(Inner::Own(rx)))),
        },
    )
}

impl Pending {
    /// Hands the connection over.
    pub fn fulfil(self, upgraded: Upgraded) {
        // The handler may have let go of its end: the connection just ends.
        let _ = self.0.send(upgraded);
    }
}

impl OnUpgrade {
    /// Another protocol layer's hand-over (hyper's), as weir's.
    pub fn from_future<F>(f: F) -> Self
    where
        F: Future<Output = Result<Upgraded, UpgradeError>> + Send + 'static,
    {
        OnUpgrade {
            inner: Arc::new(Mutex::new(Some(Inner::Other(Box::pin(f))))),
        }
    }
}

impl Future for OnUpgrade {
    type Output = Result<Upgraded, UpgradeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let r = match slot.as_mut() {
            None => return Poll::Ready(Err(UpgradeError::NotUpgraded)),
            Some(Inner::Own(rx)) => {
                ready!(Pin::new(rx).poll(cx)).map_err(|_| UpgradeError::NotUpgraded)
            }
            Some(Inner::Other(f)) => ready!(f.as_mut().poll(cx)),
        };
        *slot = None;
        Poll::Ready(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_bytes_read_past_the_head_come_first() {
        let (a, mut b) = tokio::io::duplex(64);
        let (tx, rx) = pending();
        tx.fulfil(Upgraded::boxed(a, Bytes::from_static(b"early ")));
        let mut up = rx.clone().await.unwrap();
        b.write_all(b"late").await.unwrap();
        let mut got = [0u8; 10];
        up.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"early late");
        // The other clone finds the connection taken.
        assert!(matches!(rx.await, Err(UpgradeError::NotUpgraded)));
    }

    #[tokio::test]
    async fn a_dropped_pending_is_not_upgraded() {
        let (tx, rx) = pending();
        drop(tx);
        assert!(matches!(rx.await, Err(UpgradeError::NotUpgraded)));
    }
}
