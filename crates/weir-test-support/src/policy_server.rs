//! Backends with known behaviour for weir-bench's load generator: an
//! in-process HTTP/1.1 keep-alive server that answers request `i` as a
//! policy says (ok, 500, reset, delay, chunked) and counts what it did.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with the request it numbers `i` (0-based, global).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// 200 with a 16-byte body.
    Ok,
    /// 500 with a short body.
    Error500,
    /// Reset the connection (SO_LINGER 0) instead of answering.
    Reset,
    /// Wait, then 200.
    Delay(Duration),
    /// 200 with a chunked body (2 chunks + trailer).
    Chunked,
}

/// Counts of what the server did.
#[derive(Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub ok: AtomicU64,
    pub e500: AtomicU64,
    pub resets: AtomicU64,
    pub delayed: AtomicU64,
    pub connections: AtomicU64,
}

impl Counts {
    pub fn get(&self, f: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        f(self).load(Ordering::SeqCst)
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

/// Starts an HTTP/1.1 keep-alive server whose behaviour per request is
/// `policy(i)`, on a background multi-thread runtime.
pub fn start(policy: fn(u64) -> Action) -> TestServer {
    let counts = Arc::new(Counts::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let c = counts.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                c.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(s, policy, c.clone()));
            }
        });
    });
    TestServer {
        addr: rx.recv().unwrap(),
        counts,
    }
}

async fn serve(mut s: TcpStream, policy: fn(u64) -> Action, c: Arc<Counts>) {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    loop {
        // Read one request head (the generator does not pipeline).
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        let close = String::from_utf8_lossy(&buf[..end])
            .to_ascii_lowercase()
            .contains("connection: close");
        buf.drain(..end);
        let i = c.requests.fetch_add(1, Ordering::SeqCst);
        let resp: &[u8] = match policy(i) {
            Action::Ok => {
                c.ok.fetch_add(1, Ordering::SeqCst);
                b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n0123456789abcdef"
            }
            Action::Error500 => {
                c.e500.fetch_add(1, Ordering::SeqCst);
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!"
            }
            Action::Reset => {
                c.resets.fetch_add(1, Ordering::SeqCst);
                let std = s.into_std().unwrap();
                let sock = socket2::Socket::from(std);
                sock.set_linger(Some(Duration::ZERO)).unwrap();
                drop(sock);
                return;
            }
            Action::Delay(d) => {
                c.delayed.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(d).await;
                b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n0123456789abcdef"
            }
            Action::Chunked => {
                c.ok.fetch_add(1, Ordering::SeqCst);
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nB;ext=1\r\n, chunked!!\r\n0\r\nX-Trailer: 1\r\n\r\n"
            }
        };
        if s.write_all(resp).await.is_err() {
            return;
        }
        if close {
            return;
        }
    }
}
