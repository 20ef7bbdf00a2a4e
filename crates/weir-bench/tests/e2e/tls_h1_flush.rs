//! HTTP/1.1 over TLS when the socket pushes back.
//!
//! A TLS write that the socket refuses part-way (`WouldBlock`, or tokio's
//! cooperative budget running out, which looks the same) leaves encrypted
//! bytes queued inside rustls while `poll_write` still reports the plaintext
//! as written. Unless the request is flushed, those bytes stay there: the
//! server never sees the end of the request and the connection waits for a
//! response until its timeout. This server reads request bodies slowly from a
//! small receive buffer (so the client's writes regularly hit `WouldBlock`),
//! and answers with the head and the body as separate TLS records, separated
//! by small random delays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weir_bench::load::{LoadConfig, run};

const BODY: &[u8] = b"slow and steady, in two records";

fn head() -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY.len())
}

/// A tiny xorshift generator: small random delays without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    async fn pause(&mut self, max_us: u64) {
        let us = self.below(max_us + 1);
        if us > 0 {
            tokio::time::sleep(Duration::from_micros(us)).await;
        }
    }
}

/// Serves one connection: requests with a Content-Length body, read in small
/// slices with pauses; answers in two records (head, then body).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    mut rng: Rng,
    served: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut slice = [0u8; 4096];
    loop {
        // The head.
        let (head_len, body_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let len = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                break (n, len);
            }
            let n = s.read(&mut slice).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&slice[..n]);
        };
        // The body, slowly: the client's socket stays full.
        let mut have = buf.len() - head_len;
        let mut reads = 0u32;
        while have < body_len {
            let want = (body_len - have).min(slice.len());
            let n = s.read(&mut slice[..want]).await?;
            if n == 0 {
                return Ok(());
            }
            have += n;
            reads += 1;
            if reads.is_multiple_of(8) {
                rng.pause(300).await;
            }
        }
        buf.clear(); // The client does not pipeline.
        // The response: head and body as two records, apart in time.
        s.write_all(head().as_bytes()).await?;
        s.flush().await?;
        rng.pause(2000).await;
        s.write_all(BODY).await?;
        s.flush().await?;
        served.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts the TLS server; returns its port and its request counter.
fn start_server() -> (u16, Arc<AtomicU64>) {
    weir_bench::load::tls::install_crypto_provider();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let certs = vec![CertificateDer::from_pem_slice(ck.cert.pem().as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(ck.signing_key.serialize_pem().as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let served = Arc::new(AtomicU64::new(0));
    let served2 = served.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            // A small receive window (inherited by accepted sockets): the
            // client's sends fill up quickly and see WouldBlock.
            sock.set_recv_buffer_size(8 * 1024).unwrap();
            sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            // A backlog above the 256 connections opened at once: a SYN
            // dropped on a full queue is retried after a second, past the
            // client's 500 ms connect timeout.
            let l = sock.listen(1024).unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            loop {
                let (s, _) = l.accept().await.unwrap();
                seed = seed.wrapping_add(0x2545_f491_4f6c_dd1d);
                let (acceptor, served) = (acceptor.clone(), served2.clone());
                tokio::spawn(async move {
                    if let Ok(s) = acceptor.accept(s).await {
                        let _ = serve(s, Rng(seed | 1), &served).await;
                    }
                });
            }
        });
    });
    (rx.recv().unwrap(), served)
}

#[test]
fn tls_requests_are_flushed_when_the_socket_pushes_back() {
    let (port, served) = start_server();
    // Many connections on one generator thread: each poll of the runtime
    // drives dozens of them, so tokio's cooperative budget regularly runs out
    // between reading a response and writing the next request.
    let mut c = LoadConfig::new(&format!("https://localhost:{port}/"));
    c.insecure = true;
    c.connections = 256;
    c.duration = Some(Duration::from_secs(2));
    c.timeout = Duration::from_millis(500);
    let r = run(&c).unwrap();
    assert_eq!(
        r.errors.timeout, 0,
        "requests stuck unflushed in the TLS buffer: {:?}",
        r.errors
    );
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(r.successes > 1000, "{r:?}");
    assert_eq!(r.bytes, r.responses * (head().len() + BODY.len()) as u64);
    // A stalled request would have cost a reconnect.
    assert_eq!(r.connections_opened, 256);

    // Large request bodies read slowly through a small receive window: the
    // client's writes see WouldBlock part-way through.
    let before = served.load(Ordering::Relaxed);
    let mut c = LoadConfig::new(&format!("https://localhost:{port}/"));
    c.insecure = true;
    c.method = "POST".into();
    c.body = vec![b'x'; 200_000];
    c.connections = 8;
    c.requests = Some(100);
    c.timeout = Duration::from_secs(1);
    let r = run(&c).unwrap();
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(r.successes, 100, "{r:?}");
    assert_eq!(served.load(Ordering::Relaxed) - before, 100);
}
