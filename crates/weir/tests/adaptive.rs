//! `server.accept = "adaptive"` against the real binary: under a steady
//! load the controller tries packing the connections on worker 0, and
//! keep-alive connections move between workers between two requests, over
//! plain HTTP and over TLS (the session moves with the socket). Every
//! request on every connection is answered, byte for byte, throughout.

mod tls_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tls_support::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const BODY: &str = "moved and still served\n";
const CONNECTIONS: usize = 16;

/// Requests on one keep-alive connection until `stop`; each response must
/// be a 200 with exactly `BODY`.
async fn keep_asking<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) {
    let mut buf = Vec::with_capacity(1024);
    while !stop.load(Ordering::Relaxed) {
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .await
            .unwrap();
        buf.clear();
        let want = loop {
            let mut chunk = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
                .await
                .expect("a response within 5 s")
                .unwrap();
            assert!(
                n > 0,
                "closed mid-response: {:?}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let want = end + 4 + BODY.len();
                if buf.len() >= want {
                    break want;
                }
            }
        };
        let resp = String::from_utf8_lossy(&buf).to_string();
        assert_eq!(buf.len(), want, "{resp}");
        assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
        assert!(resp.ends_with(&format!("\r\n\r\n{BODY}")), "{resp}");
        answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts weir with two workers and `accept = "adaptive"`; loads it from
/// Whether a connection moved after the controller switched to packing.
fn moved_after_pack(log: &str) -> bool {
    log.find("accept: Pack")
        .is_some_and(|at| log[at..].contains("moved to worker"))
}

/// `CONNECTIONS` connections made by `connect` until connections have moved
/// (and half a second more); returns the log.
async fn run<S, F, Fut>(tls: bool, connect: F) -> String
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(u16, Option<String>) -> Fut,
    Fut: std::future::Future<Output = S>,
{
    install_crypto();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), BODY).unwrap();
    let (tls_line, ca) = if tls {
        let (cert, key, ca) = make_cert(dir.path(), "a", &["a.test"]);
        (
            format!(
                "tls = {{ cert = \"{}\", key = \"{}\" }}\n",
                cert.display(),
                key.display()
            ),
            Some(ca),
        )
    } else {
        (String::new(), None)
    };
    let cfg = format!(
        "[server]\nworkers = 2\naccept = \"adaptive\"\n[site.\"a.test\"]\nlisten = \"127.0.0.1:{port}\"\nroot = \"{}\"\n{tls_line}",
        dir.path().display()
    );
    let w = Weir::start(dir.path(), &cfg, port);
    assert!(
        w.wait_log("Adaptive accept", Duration::from_secs(5)),
        "{}",
        w.logs()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let s = connect(port, ca.clone()).await;
        tasks.push(tokio::spawn(keep_asking(s, stop.clone(), answered.clone())));
    }
    // The first trial comes after four steady epochs of 100 ms. Spread
    // also moves connections, when the kernel's hash left one worker a
    // clear excess: wait for the packing trial and its moves, not only for
    // the first move.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(w.logs().contains("accept: Pack") && moved_after_pack(&w.logs())) {
        assert!(
            Instant::now() < deadline,
            "no connection moved for packing:\n{}",
            w.logs()
        );
        assert!(!tasks.iter().any(|t| t.is_finished()), "a client failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = answered.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("every request answered");
    }
    assert!(
        answered.load(Ordering::Relaxed) > before,
        "requests went on after the move"
    );
    let log = w.stop();
    assert!(log.contains("accept: Pack"), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_connections_move_between_workers_and_every_request_is_answered() {
    let log = run(false, |port, _| async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap()
    })
    .await;
    // Packing moves them to worker 0.
    assert!(log.contains("moved to worker 0"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_move_with_their_session_and_every_request_is_answered() {
    let log = run(true, |port, ca| async move {
        let roots = roots_from_pem(ca.unwrap().as_bytes());
        let cfg = Arc::new(client_config(roots, &[b"http/1.1"]));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap()
    })
    .await;
    assert!(log.contains("moved to worker 0"), "{log}");
}
