//! HTTP/3 on every worker: which worker a QUIC datagram belongs to, and the
//! UDP socket each worker's quinn endpoint reads through.
//!
//! Every worker has its own socket in the address's SO_REUSEPORT group and
//! its own quinn endpoint. The kernel picks a socket by the datagram's
//! addresses, so a connection's datagrams stay on the socket its first one
//! reached until the client's address changes (migration, a NAT rebinding)
//! or the group changes. The connection IDs a worker issues name it
//! ([`WorkerCids`]: the worker's index masked, and signed, with a key of the
//! process), and [`RoutedSocket`] reads each datagram's destination
//! connection ID and hands a datagram of another worker's connection to
//! that worker's inbox. A datagram whose ID this process did not issue (a
//! client's first Initial, a connection of the process an upgrade replaced)
//! stays where it landed.
//!
//! Owns the routing only: never decrypts, never answers a datagram, never
//! blocks; a full inbox drops the datagram, as a full socket buffer would.

use std::fmt;
use std::hash::BuildHasher;
use std::io::{self, IoSliceMut};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, ConnectionId, UdpPoller};
use tokio::sync::mpsc;

/// The length of the connection IDs weir issues: 4 bytes of nonce, 2 of
/// masked worker index, 2 of signature.
pub const CID_LEN: usize = 8;

/// Datagrams a worker's inbox holds before more are dropped.
const INBOX: usize = 4096;

/// Reads of the socket in one poll that may all turn out to be other
/// workers' datagrams before the endpoint gets a turn again.
const READS_PER_POLL: usize = 16;

/// The key that masks and signs connection IDs: one per process, shared by
/// its workers so any of them reads the others' IDs.
#[derive(Clone, Default)]
pub struct CidKey(std::hash::RandomState);

impl CidKey {
    pub fn new() -> CidKey {
        CidKey::default()
    }

    /// The ID numbered `n` of `worker`. The nonce is a keyed hash of both,
    /// so IDs of one connection cannot be linked by an observer; the worker
    /// index is masked by a keyed hash of the nonce.
    fn make(&self, worker: u16, n: u64) -> [u8; CID_LEN] {
        let nonce = (self.0.hash_one((worker, n)) as u32).to_le_bytes();
        let h = self.0.hash_one(&nonce[..]);
        let mut cid = [0; CID_LEN];
        cid[..4].copy_from_slice(&nonce);
        cid[4..6].copy_from_slice(&(worker ^ h as u16).to_le_bytes());
        cid[6..].copy_from_slice(&((h >> 16) as u16).to_le_bytes());
        cid
    }

    /// The worker that issued `cid`, if a worker of this process did
    /// (a random ID passes for one with odds of 1 in 65,536).
    pub fn worker_of(&self, cid: &[u8]) -> Option<usize> {
        if cid.len() != CID_LEN {
            return None;
        }
        let h = self.0.hash_one(&cid[..4]);
        if u16::from_le_bytes([cid[6], cid[7]]) != (h >> 16) as u16 {
            return None;
        }
        Some(usize::from(u16::from_le_bytes([cid[4], cid[5]]) ^ h as u16))
    }
}

/// The destination connection ID of a QUIC datagram (its first packet's):
/// in a short header it follows the first byte; in a long header, the
/// version and its length byte. `None` when it cannot be one of ours.
pub fn dcid(datagram: &[u8]) -> Option<&[u8]> {
    let first = *datagram.first()?;
    if first & 0x80 == 0 {
        datagram.get(1..1 + CID_LEN)
    } else if usize::from(*datagram.get(5)?) == CID_LEN {
        datagram.get(6..6 + CID_LEN)
    } else {
        None
    }
}

/// The connection IDs one worker's endpoint issues.
pub struct WorkerCids {
    key: CidKey,
    worker: u16,
    issued: u64,
}

impl WorkerCids {
    pub fn new(key: CidKey, worker: usize) -> WorkerCids {
        WorkerCids {
            key,
            // Config caps workers at 1024.
            worker: u16::try_from(worker).unwrap_or(u16::MAX),
            issued: 0,
        }
    }
}

impl quinn::ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        self.issued += 1;
        ConnectionId::new(&self.key.make(self.worker, self.issued))
    }

    /// A short-header datagram with an ID no worker issued is dropped
    /// unanswered (no stateless reset for a stranger).
    fn validate(&self, cid: &ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        match self.key.worker_of(cid) {
            Some(_) => Ok(()),
            None => Err(quinn_proto::InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A datagram handed from the worker that read it to the one that owns it.
struct Forwarded {
    meta: RecvMeta,
    data: Vec<u8>,
}

/// The inboxes of one address's workers, by worker index.
pub struct Routes {
    inboxes: Box<[mpsc::Sender<Forwarded>]>,
}

/// One worker's end of [`Routes`].
pub struct Inbox(mpsc::Receiver<Forwarded>);

/// Routes for `workers` workers and each worker's inbox.
pub fn routes(workers: usize) -> (Arc<Routes>, Vec<Inbox>) {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::channel(INBOX)).unzip();
    (
        Arc::new(Routes {
            inboxes: tx.into_boxed_slice(),
        }),
        rx.into_iter().map(Inbox).collect(),
    )
}

/// A worker's UDP socket as its quinn endpoint sees it: quinn's own socket
/// (GSO and GRO where the kernel has them) for sending and receiving, and
/// the worker's inbox of datagrams other workers read for it.
pub struct RoutedSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    worker: usize,
    key: CidKey,
    routes: Arc<Routes>,
    /// Only this worker's endpoint driver reads it: never contended.
    inbox: Mutex<Inbox>,
}

impl fmt::Debug for RoutedSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoutedSocket")
            .field("inner", &self.inner)
            .field("worker", &self.worker)
            .finish()
    }
}

impl RoutedSocket {
    pub fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        worker: usize,
        key: CidKey,
        routes: Arc<Routes>,
        inbox: Inbox,
    ) -> RoutedSocket {
        RoutedSocket {
            inner,
            worker,
            key,
            routes,
            inbox: Mutex::new(inbox),
        }
    }

    /// The other worker `datagram` belongs to, if any.
    fn elsewhere(&self, datagram: &[u8]) -> Option<usize> {
        let w = self.key.worker_of(dcid(datagram)?)?;
        (w != self.worker && w < self.routes.inboxes.len()).then_some(w)
    }

    fn forward(&self, to: usize, meta: &RecvMeta, datagram: &[u8]) {
        let f = Forwarded {
            meta: RecvMeta {
                len: datagram.len(),
                stride: datagram.len(),
                ..*meta
            },
            data: datagram.to_vec(),
        };
        match self.routes.inboxes[to].try_send(f) {
            Ok(()) => tracing::debug!(
                "HTTP/3: a datagram read by worker {} passed on to worker {to}",
                self.worker
            ),
            Err(_) => tracing::debug!("HTTP/3: worker {to}'s inbox is full; a datagram dropped"),
        }
    }

    /// Moves datagrams other workers sent here into `bufs`.
    fn take_forwarded(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> usize {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        let mut n = 0;
        while n < bufs.len() {
            match inbox.0.poll_recv(cx) {
                Poll::Ready(Some(f)) => {
                    // Every worker's buffers are the same size.
                    if let Some(dst) = bufs[n].get_mut(..f.data.len()) {
                        dst.copy_from_slice(&f.data);
                        meta[n] = f.meta;
                        n += 1;
                    }
                }
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        n
    }

    /// Forwards the datagrams among the first `got` entries that belong to
    /// other workers and packs the rest at the front; returns how many
    /// entries are left. A GRO batch holds datagrams of one source address,
    /// usually of one connection, but is split datagram by datagram.
    fn keep_local(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta], got: usize) -> usize {
        let mut kept = 0;
        for i in 0..got {
            let mut m = meta[i];
            let stride = if m.stride == 0 { m.len } else { m.stride };
            let all_here = bufs[i][..m.len]
                .chunks(stride.max(1))
                .all(|d| self.elsewhere(d).is_none());
            if !all_here {
                // Datagrams staying here move down over those forwarded;
                // only the last one may be shorter than the stride, so the
                // batch stays well formed.
                let buf = &mut bufs[i][..m.len];
                let mut len = 0;
                let mut at = 0;
                while at < m.len {
                    let end = (at + stride).min(m.len);
                    match self.elsewhere(&buf[at..end]) {
                        Some(w) => self.forward(w, &m, &buf[at..end]),
                        None => {
                            buf.copy_within(at..end, len);
                            len += end - at;
                        }
                    }
                    at = end;
                }
                m.len = len;
                if len == 0 {
                    continue;
                }
            }
            if kept != i {
                let (front, back) = bufs.split_at_mut(i);
                front[kept][..m.len].copy_from_slice(&back[0][..m.len]);
            }
            meta[kept] = m;
            kept += 1;
        }
        kept
    }
}

impl AsyncUdpSocket for RoutedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut n = self.take_forwarded(cx, bufs, meta);
        for _ in 0..READS_PER_POLL {
            if n == bufs.len() {
                return Poll::Ready(Ok(n));
            }
            match self.inner.poll_recv(cx, &mut bufs[n..], &mut meta[n..]) {
                // Both the inbox and the socket will wake this task.
                Poll::Pending if n == 0 => return Poll::Pending,
                Poll::Pending => return Poll::Ready(Ok(n)),
                Poll::Ready(Err(e)) if n == 0 => return Poll::Ready(Err(e)),
                // Reported at the next read, which meets it again.
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(n)),
                Poll::Ready(Ok(got)) => {
                    n += self.keep_local(&mut bufs[n..], &mut meta[n..], got);
                    if n > 0 {
                        return Poll::Ready(Ok(n));
                    }
                }
            }
        }
        // Every read went to other workers: quinn polls again at once,
        // after its other work.
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::ConnectionIdGenerator;

    #[test]
    fn ids_name_their_worker_and_only_ours_pass() {
        let key = CidKey::new();
        for w in [0usize, 1, 7, 1023] {
            let mut g = WorkerCids::new(key.clone(), w);
            let a = g.generate_cid();
            let b = g.generate_cid();
            assert_ne!(a, b);
            assert_eq!(a.len(), CID_LEN);
            assert_eq!(key.worker_of(&a), Some(w));
            assert_eq!(key.worker_of(&b), Some(w));
            assert!(g.validate(&a).is_ok());
            // Another process's key does not read them.
            assert_ne!(CidKey::new().worker_of(&a), Some(w));
        }
        // Random IDs (a client's first Initial) almost never pass.
        let strangers = (0..10_000u64)
            .filter(|i| {
                key.worker_of(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes())
                    .is_some()
            })
            .count();
        assert!(strangers < 5, "{strangers}");
        assert_eq!(key.worker_of(&[0; 5]), None);
    }

    /// A socket that yields the entries queued in it.
    #[derive(Debug, Default)]
    struct Queued(Mutex<std::collections::VecDeque<(RecvMeta, Vec<u8>)>>);

    #[derive(Debug)]
    struct Writable;

    impl UdpPoller for Writable {
        fn poll_writable(self: Pin<&mut Self>, _: &mut Context) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncUdpSocket for Queued {
        fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
            Box::pin(Writable)
        }
        fn try_send(&self, _: &Transmit) -> io::Result<()> {
            Ok(())
        }
        fn poll_recv(
            &self,
            _: &mut Context,
            bufs: &mut [IoSliceMut<'_>],
            meta: &mut [RecvMeta],
        ) -> Poll<io::Result<usize>> {
            let mut q = self.0.lock().unwrap();
            let mut n = 0;
            while n < bufs.len() {
                let Some((m, d)) = q.pop_front() else { break };
                bufs[n][..d.len()].copy_from_slice(&d);
                meta[n] = m;
                n += 1;
            }
            if n == 0 {
                Poll::Pending
            } else {
                Poll::Ready(Ok(n))
            }
        }
        fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
            Ok(([127, 0, 0, 1], 443).into())
        }
    }

    fn meta(len: usize, stride: usize) -> RecvMeta {
        RecvMeta {
            addr: ([127, 0, 0, 1], 5000).into(),
            len,
            stride,
            ecn: None,
            dst_ip: None,
        }
    }

    /// A short-header datagram of `len` bytes to `cid`, filled with `fill`.
    fn short(cid: &ConnectionId, len: usize, fill: u8) -> Vec<u8> {
        let mut d = vec![0x40];
        d.extend_from_slice(cid);
        d.resize(len, fill);
        d
    }

    fn recv(s: &RoutedSocket) -> Vec<(RecvMeta, Vec<u8>)> {
        let mut storage = vec![[0u8; 400]; 4];
        let mut bufs: Vec<IoSliceMut> = storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        let mut metas = [meta(0, 0); 4];
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match s.poll_recv(&mut cx, &mut bufs, &mut metas) {
            Poll::Ready(Ok(n)) => (0..n)
                .map(|i| (metas[i], bufs[i][..metas[i].len].to_vec()))
                .collect(),
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => Vec::new(),
        }
    }

    #[test]
    fn datagrams_of_other_workers_are_passed_on_and_the_rest_stays() {
        let key = CidKey::new();
        let cid = |w| WorkerCids::new(key.clone(), w).generate_cid();
        let (mine, w1, w2) = (cid(0), cid(1), cid(2));
        let (routes, mut inboxes) = routes(3);
        let sockets: Vec<_> = (0..3).map(|_| Arc::new(Queued::default())).collect();
        let mut routed: Vec<RoutedSocket> = Vec::new();
        for (w, inbox) in inboxes.drain(..).enumerate() {
            let inner: Arc<dyn AsyncUdpSocket> = sockets[w].clone();
            routed.push(RoutedSocket::new(
                inner,
                w,
                key.clone(),
                routes.clone(),
                inbox,
            ));
        }
        // A GRO batch of three (the last one short): worker 0's, worker
        // 2's, worker 0's; then worker 1's long-header datagram; then a
        // client's first Initial with a 16-byte ID it chose.
        let mut batch = short(&mine, 100, 1);
        batch.extend(short(&w2, 100, 2));
        batch.extend(short(&mine, 50, 3));
        let mut long = vec![0xe0, 0, 0, 0, 1, 8];
        long.extend_from_slice(&w1);
        long.resize(120, 4);
        let mut initial = vec![0xc0, 0, 0, 0, 1, 16];
        initial.resize(300, 5);
        {
            let mut q = sockets[0].0.lock().unwrap();
            q.push_back((meta(250, 100), batch.clone()));
            q.push_back((meta(120, 120), long.clone()));
            q.push_back((meta(300, 300), initial.clone()));
        }
        let got = recv(&routed[0]);
        assert_eq!(got.len(), 2);
        // Worker 0's two, packed, still a well-formed batch.
        assert_eq!((got[0].0.len, got[0].0.stride), (150, 100));
        assert_eq!(got[0].1[..100], batch[..100]);
        assert_eq!(got[0].1[100..], batch[200..]);
        assert_eq!(got[1].1, initial);
        // The others reach their workers, with the sender's address.
        let at2 = recv(&routed[2]);
        assert_eq!(at2.len(), 1);
        assert_eq!(at2[0].1, batch[100..200]);
        assert_eq!(at2[0].0.addr, meta(0, 0).addr);
        let at1 = recv(&routed[1]);
        assert_eq!(at1.len(), 1);
        assert_eq!(at1[0].1, long);
        assert!(recv(&routed[0]).is_empty());
    }

    #[test]
    fn dcid_of_short_and_long_headers() {
        let cid = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut short = vec![0x40];
        short.extend_from_slice(&cid);
        short.extend_from_slice(&[0; 20]);
        assert_eq!(dcid(&short), Some(&cid[..]));
        let mut long = vec![0xc0, 0, 0, 0, 1, 8];
        long.extend_from_slice(&cid);
        long.extend_from_slice(&[0; 20]);
        assert_eq!(dcid(&long), Some(&cid[..]));
        // A client's 16-byte first DCID is never ours.
        long[5] = 16;
        assert_eq!(dcid(&long), None);
        assert_eq!(dcid(&[0x40, 1, 2]), None);
        assert_eq!(dcid(&[]), None);
    }
}
