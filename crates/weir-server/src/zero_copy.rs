//! `sendfile(2)` for large cached files on plain-TCP connections.
//!
//! hyper writes a response body through the connection's `AsyncWrite` as
//! plain byte slices, so it has no sendfile path: a 256 KiB file went to the
//! kernel by copying it out of the cache (`_copy_from_iter` was 27.5 % of
//! weir's samples serving 256 KiB files, where nginx's `sendfile` hands the
//! page-cache pages over instead).
//!
//! Written by hand because no crate reaches below hyper's writes. The
//! static-file handler tags a response whose body is a cached file's bytes
//! with a [`FileRegion`] (those bytes, the open file and the offset they came
//! from). The connection keeps the region (`Regions`) until the body has gone
//! out. [`ZeroCopy`], the layer just above the `TcpStream`, recognises a
//! slice hyper asks it to write by its address inside a region's bytes, and
//! sends that part with `sendfile` from the file at the matching offset; the
//! slices before it (the response head) go out with `MSG_MORE` so head and
//! body share packets. hyper still counts progress in bytes as usual, so
//! partial sends, pipelined responses and HTTP/2 framing need nothing extra.
//!
//! Safety of the address match: a region holds a clone of its `Bytes`, so the
//! memory it names stays allocated (and cannot be reused by another buffer)
//! while the region exists. The bytes sent are the file's, which match the
//! cached bytes unless the file was rewritten in place after it was cached
//! (a file replaced by rename keeps the old inode open here, so it is still
//! the cached content) — the same window nginx's sendfile has. A file that
//! got shorter makes `sendfile` return 0; weir then writes the rest from
//! memory. Never used on TLS connections: only the plain-TCP path has this
//! layer, and only it records regions.
//!
//! Cost: one open descriptor per cached file of at least [`MIN_LEN`], so at
//! most `cache.max_bytes / MIN_LEN` per site cache (1,024 with the 64 MiB
//! default), released when the entry leaves the cache.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use nix::libc;
use nix::sys::sendfile::sendfile;
use nix::sys::socket::{MsgFlags, SockaddrStorage, sendmsg};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
pub use weir_http::file_region::{FileRegion, MIN_LEN};

/// Responses whose regions a connection keeps at most (pipelining): older
/// ones are dropped and their bytes simply written from memory.
const MAX_REGIONS: usize = 4;

/// The regions of one connection's responses not yet sent.
#[derive(Default)]
pub struct Regions {
    /// Fast check for the common case: nothing to look up, no lock taken.
    any: AtomicBool,
    /// Per connection, so never contended.
    list: Mutex<VecDeque<FileRegion>>,
}

impl Regions {
    pub fn push(&self, r: FileRegion) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() == MAX_REGIONS {
            l.pop_front();
        }
        l.push_back(r);
        self.any.store(true, Ordering::Relaxed);
    }

    /// The first slice of `bufs` inside a region: its index, the file and
    /// the file offset of its first byte, and whether it ends the region.
    fn find(&self, bufs: &[IoSlice<'_>]) -> Option<(usize, Arc<File>, u64, bool)> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        bufs.iter().enumerate().find_map(|(i, b)| {
            if b.is_empty() {
                return None;
            }
            l.iter().find_map(|r| {
                r.locate(b).map(|at| {
                    let ends = b.as_ptr() as usize + b.len() == r.end();
                    (i, r.file.clone(), r.offset + at, ends)
                })
            })
        })
    }

    /// Forgets the region that ends at `end` (its last byte went out, or it
    /// is being written from memory instead).
    fn done(&self, end: usize) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|r| r.end() != end);
        self.any.store(!l.is_empty(), Ordering::Relaxed);
    }
}

/// A plain TCP stream that sends slices of recorded regions with `sendfile`.
pub struct ZeroCopy {
    io: TcpStream,
    regions: Arc<Regions>,
}

impl ZeroCopy {
    pub fn new(io: TcpStream, regions: Arc<Regions>) -> Self {
        ZeroCopy { io, regions }
    }

    /// The socket (its regions stay behind: none is in use between requests).
    pub fn into_inner(self) -> TcpStream {
        self.io
    }

    /// Runs a non-blocking socket call when the socket is writable.
    fn poll_io(
        &self,
        cx: &mut Context<'_>,
        mut call: impl FnMut() -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.io.poll_write_ready(cx))?;
            match self.io.try_io(Interest::WRITABLE, &mut call) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn write(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let Some((i, file, offset, ends)) = self.regions.find(bufs) else {
            return super::io::poll_write_slices(Pin::new(&mut self.io), cx, bufs);
        };
        let fd = self.io.as_raw_fd();
        if i > 0 {
            // The head (and anything else) before the file bytes; MSG_MORE
            // lets the kernel put the file's first bytes in the same packet.
            let head = &bufs[..i];
            return self.poll_io(cx, || {
                // nix names no MSG_MORE; the bit is Linux's.
                let flags = MsgFlags::from_bits_retain(libc::MSG_MORE) | MsgFlags::MSG_NOSIGNAL;
                sendmsg::<SockaddrStorage>(fd, head, &[], flags, None).map_err(io::Error::from)
            });
        }
        let slice = &bufs[0];
        let end = slice.as_ptr() as usize + slice.len();
        let r = ready!(self.poll_io(cx, || {
            let mut off = offset as libc::off_t;
            sendfile(self.io.as_fd(), file.as_fd(), Some(&mut off), slice.len())
                .map_err(io::Error::from)
        }));
        match r {
            Ok(n) if n > 0 => {
                if ends && n == slice.len() {
                    self.regions.done(end);
                }
                Poll::Ready(Ok(n))
            }
            Err(e) if is_peer_error(&e) => Poll::Ready(Err(e)),
            // The file got shorter (0 bytes), or this file system cannot
            // sendfile: write this region from memory from now on.
            other => {
                if let Err(e) = other {
                    tracing::debug!("sendfile: {e}; writing from memory");
                }
                self.regions.done(end);
                Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }
        }
    }
}

/// Errors that belong to the connection, not to sendfile itself.
fn is_peer_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::TimedOut
    )
}

impl AsyncRead for ZeroCopy {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ZeroCopy {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (s, c)
    }

    /// `body` recorded as a region of a file holding `on_disk`, a
    /// `ZeroCopy` over a socket pair, and a task reading everything sent.
    async fn region_over(
        body: &Bytes,
        on_disk: &[u8],
    ) -> (
        tempfile::NamedTempFile,
        Arc<Regions>,
        ZeroCopy,
        tokio::task::JoinHandle<Vec<u8>>,
    ) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(on_disk).unwrap();
        let file = Arc::new(File::open(t.path()).unwrap());
        let regions = Arc::new(Regions::default());
        regions.push(FileRegion {
            bytes: body.clone(),
            file,
            offset: 0,
        });
        let (s, mut c) = pair().await;
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            c.read_to_end(&mut all).await.unwrap();
            all
        });
        (t, regions.clone(), ZeroCopy::new(s, regions), reader)
    }

    /// Head from memory, body via sendfile from the file's copy (changed on
    /// disk on purpose, so the bytes received prove which path sent them),
    /// a tail after it from memory; a slice of the same length elsewhere in
    /// memory is not mistaken for the region.
    #[tokio::test]
    async fn region_slices_come_from_the_file() {
        let body = Bytes::from(vec![b'm'; 200_000]);
        let (_t, regions, mut z, reader) = region_over(&body, &vec![b'f'; 200_000]).await;
        let other = vec![b'o'; 1000];
        let mut bufs: Vec<Bytes> = vec![
            Bytes::from_static(b"HEAD"),
            body.slice(..),
            Bytes::from_static(b"TAIL"),
            Bytes::from(other),
        ];
        while !bufs.is_empty() {
            let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
            let mut n = z.write_vectored(&slices).await.unwrap();
            while n > 0 {
                let take = n.min(bufs[0].len());
                let _ = bufs[0].split_to(take);
                n -= take;
                if bufs[0].is_empty() {
                    bufs.remove(0);
                }
            }
        }
        z.shutdown().await.unwrap();
        drop(z);
        let all = reader.await.unwrap();
        assert_eq!(&all[..4], b"HEAD");
        assert!(
            all[4..200_004].iter().all(|&b| b == b'f'),
            "body from the file"
        );
        assert_eq!(&all[200_004..200_008], b"TAIL");
        assert!(all[200_008..].iter().all(|&b| b == b'o'));
        assert_eq!(all.len(), 201_008);
        assert!(!regions.any.load(Ordering::Relaxed), "region released");
    }

    /// A file shorter than its region: the rest comes from memory.
    #[tokio::test]
    async fn a_shrunk_file_falls_back_to_memory() {
        let body = Bytes::from(vec![b'm'; 100_000]);
        let (_t, _regions, mut z, reader) = region_over(&body, &[b'f'; 10]).await;
        z.write_all(&body).await.unwrap();
        z.shutdown().await.unwrap();
        drop(z);
        let all = reader.await.unwrap();
        assert_eq!(all.len(), 100_000);
        assert_eq!(&all[..10], b"ffffffffff");
        assert!(all[10..].iter().all(|&b| b == b'm'));
    }
}
