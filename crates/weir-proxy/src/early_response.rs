//! Keeps an upstream's early answer readable when its socket stops taking
//! the request body.
//!
//! An upstream may answer before it has read the whole request body (a 413,
//! a 401, a redirect) and then close its socket. With unread bytes in its
//! receive buffer the kernel sends a reset, so weir's next write fails with
//! `EPIPE`/`ECONNRESET` — but the answer is already sitting in weir's receive
//! queue. hyper's HTTP/1 client fails the whole exchange on that write error
//! ("error writing a body to connection") and the client got a 502 instead of
//! the upstream's answer, depending on which of the two the dispatcher polled
//! first (RFC 9112 §9.5: a client sending a body should watch for an error
//! response and stop sending).
//!
//! This wrapper, put under hyper's HTTP/1 client only, turns the first such
//! write error into "write side gone": that write and every later one report
//! success and drop their bytes, so hyper keeps reading and delivers the
//! answer. If there is no answer, the read side fails on its own (reset or
//! end of stream before a response) and the attempt ends as it did before.
//! Reads are untouched.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An upstream stream whose writes stop failing once the peer closed.
pub struct EarlyResponse<S> {
    io: S,
    write_gone: bool,
}

impl<S> EarlyResponse<S> {
    pub fn new(io: S) -> Self {
        EarlyResponse {
            io,
            write_gone: false,
        }
    }
}

/// The errors that mean "the peer stopped reading", not "this stream broke".
fn peer_stopped_reading(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

impl<S: AsyncWrite + Unpin> EarlyResponse<S> {
    /// Maps a write result: a peer that stopped reading makes the write side
    /// gone and the write a success of `len` bytes.
    fn absorb(&mut self, r: io::Result<usize>, len: usize) -> io::Result<usize> {
        match r {
            Err(e) if peer_stopped_reading(&e) => {
                tracing::debug!(
                    "upstream stopped reading the request ({e}); waiting for its answer"
                );
                self.write_gone = true;
                Ok(len)
            }
            other => other,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for EarlyResponse<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EarlyResponse<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.write_gone {
            return Poll::Ready(Ok(buf.len()));
        }
        let r = ready!(Pin::new(&mut self.io).poll_write(cx, buf));
        Poll::Ready(self.absorb(r, buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        if self.write_gone {
            return Poll::Ready(Ok(len));
        }
        let r = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs));
        Poll::Ready(self.absorb(r, len))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_gone {
            return Poll::Ready(Ok(()));
        }
        let r = ready!(Pin::new(&mut self.io).poll_flush(cx));
        Poll::Ready(self.absorb(r.map(|()| 0), 0).map(|_| ()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_gone {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that answers, then closes with our bytes unread (a reset):
    /// writes keep "succeeding" and the answer is still read in full.
    #[tokio::test]
    async fn the_answer_survives_a_reset_while_writing() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = [0u8; 16];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(b"answer").await.unwrap();
            // Closing with unread bytes sends a reset.
        });
        let mut s = EarlyResponse::new(tokio::net::TcpStream::connect(addr).await.unwrap());
        s.write_all(&[b'x'; 16]).await.unwrap();
        peer.await.unwrap();
        let chunk = vec![b'y'; 64 * 1024];
        for _ in 0..64 {
            s.write_all(&chunk).await.expect("writes are absorbed");
        }
        assert!(s.write_gone, "4 MiB to a closed peer must hit the reset");
        s.flush().await.unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 64];
        loop {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&b[..n]),
            }
        }
        assert_eq!(got, b"answer");
    }
}
