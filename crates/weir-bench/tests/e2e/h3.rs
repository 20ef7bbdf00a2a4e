//! `--http3` against an in-process quinn + h3 server with a self-signed
//! certificate: exact request counts with `-n`, status counts, body bytes,
//! request bodies, open loop, and TLS verification (`--insecure` needed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use weir_bench::load::{LoadConfig, run};

const BODY: &[u8] = b"hello over quic, 32 bytes long!!";

struct Server {
    port: u16,
    cert_pem: String,
    /// Requests whose headers arrived.
    requests: Arc<AtomicU64>,
    /// Request body bytes received.
    body_bytes: Arc<AtomicU64>,
}

/// Starts an HTTP/3 server answering `BODY` (404 with the same body for
/// `/missing`), on its own thread and runtime.
fn start_h3() -> Server {
    weir_bench::load::tls::install_crypto_provider();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = ck.cert.pem();
    let certs = vec![CertificateDer::from(ck.cert.der().to_vec())];
    let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
    let server = quinn::ServerConfig::with_crypto(Arc::new(quic));
    let requests = Arc::new(AtomicU64::new(0));
    let body_bytes = Arc::new(AtomicU64::new(0));
    let (req2, body2) = (requests.clone(), body_bytes.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let ep = quinn::Endpoint::server(server, "127.0.0.1:0".parse().unwrap()).unwrap();
            tx.send(ep.local_addr().unwrap().port()).unwrap();
            while let Some(incoming) = ep.accept().await {
                let (requests, body_bytes) = (req2.clone(), body2.clone());
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    let Ok(mut h3c) =
                        h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn))
                            .await
                    else {
                        return;
                    };
                    while let Ok(Some(resolver)) = h3c.accept().await {
                        let (requests, body_bytes) = (requests.clone(), body_bytes.clone());
                        tokio::spawn(async move {
                            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                                return;
                            };
                            requests.fetch_add(1, Ordering::SeqCst);
                            while let Ok(Some(chunk)) = stream.recv_data().await {
                                body_bytes.fetch_add(chunk.remaining() as u64, Ordering::SeqCst);
                            }
                            let status = if req.uri().path() == "/missing" {
                                404
                            } else {
                                200
                            };
                            let resp = http::Response::builder()
                                .status(status)
                                .header("content-length", BODY.len())
                                .body(())
                                .unwrap();
                            if stream.send_response(resp).await.is_err() {
                                return;
                            }
                            let _ = stream.send_data(Bytes::from_static(BODY)).await;
                            let _ = stream.finish().await;
                        });
                    }
                });
            }
        });
    });
    Server {
        port: rx.recv().unwrap(),
        cert_pem,
        requests,
        body_bytes,
    }
}

fn h3_cfg(url: &str) -> LoadConfig {
    let mut c = LoadConfig::new(url);
    c.http3 = true;
    c
}

#[test]
fn http3_counts_requests_statuses_and_bytes_exactly() {
    let s = start_h3();
    let url = format!("https://localhost:{}/", s.port);

    let mut c = h3_cfg(&url);
    c.insecure = true;
    c.connections = 3;
    c.streams = 4;
    c.threads = 2;
    c.requests = Some(500);
    let r = run(&c).unwrap();
    assert_eq!(r.protocol, "HTTP/3");
    assert_eq!(r.streams, 4);
    assert_eq!(r.successes, 500, "{r:?}");
    assert_eq!(r.responses, 500);
    assert_eq!(r.status.get(&200), Some(&500), "{:?}", r.status);
    assert_eq!(r.bytes, 500 * BODY.len() as u64, "body bytes only");
    assert_eq!(r.errors.connect + r.errors.tls + r.errors.reset, 0);
    assert_eq!(
        s.requests.load(Ordering::SeqCst),
        500,
        "exactly -n requests"
    );
    assert_eq!(r.connections_opened, 3);
    let hs = r.tls_handshake_ms.expect("handshake time is reported");
    assert_eq!(hs.count, 3);
    assert_eq!(r.connect_ms.count, 3);

    // Statuses are counted per code; HEAD-less 404s still carry the body.
    let mut c = h3_cfg(&format!("https://localhost:{}/missing", s.port));
    c.insecure = true;
    c.connections = 1;
    c.streams = 2;
    c.requests = Some(30);
    let r = run(&c).unwrap();
    assert_eq!(r.status.get(&404), Some(&30), "{:?}", r.status);
    assert_eq!(r.successes, 0);
    assert_eq!(r.responses, 30);
    assert_eq!(s.requests.load(Ordering::SeqCst), 530);

    // Request bodies are sent in full.
    let mut c = h3_cfg(&url);
    c.insecure = true;
    c.connections = 1;
    c.streams = 2;
    c.requests = Some(20);
    c.method = "POST".into();
    c.body = vec![b'x'; 10_000];
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 20, "{r:?}");
    assert_eq!(s.body_bytes.load(Ordering::SeqCst), 20 * 10_000);
    assert_eq!(s.requests.load(Ordering::SeqCst), 550);
}

#[test]
fn http3_needs_insecure_or_the_right_ca() {
    let s = start_h3();
    let url = format!("https://localhost:{}/", s.port);
    let dir = tempfile::tempdir().unwrap();

    // Without --insecure, a CA that did not sign the server's cert: TLS errors.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let wrong = dir.path().join("wrong.pem");
    std::fs::write(&wrong, other.cert.pem()).unwrap();
    let mut c = h3_cfg(&url);
    c.cacert = Some(wrong);
    c.connections = 2;
    c.streams = 2;
    c.duration = Some(Duration::from_millis(300));
    let r = run(&c).unwrap();
    assert_eq!(r.responses, 0, "{r:?}");
    assert!(r.errors.tls > 0, "{:?}", r.errors);
    assert_eq!(r.errors.connect + r.errors.protocol, 0, "{:?}", r.errors);
    assert_eq!(s.requests.load(Ordering::SeqCst), 0);

    // The server's own cert as CA works.
    let right = dir.path().join("right.pem");
    std::fs::write(&right, &s.cert_pem).unwrap();
    let mut c = h3_cfg(&url);
    c.cacert = Some(right);
    c.connections = 1;
    c.requests = Some(50);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 50, "{r:?}");
    assert_eq!(s.requests.load(Ordering::SeqCst), 50);

    // Neither --insecure nor --cacert: refused before starting.
    let e = run(&h3_cfg(&url)).unwrap_err();
    assert_eq!(e.to_string(), "HTTPS needs --insecure or --cacert FILE");
}

#[test]
fn http3_open_loop_and_unreachable_server() {
    let s = start_h3();
    let mut c = h3_cfg(&format!("https://localhost:{}/", s.port));
    c.insecure = true;
    c.connections = 2;
    c.streams = 2;
    c.rate = Some(200.0);
    c.duration = Some(Duration::from_millis(1000));
    let r = run(&c).unwrap();
    assert_eq!(r.mode, "open");
    assert!(
        (150..=210).contains(&r.successes),
        "about 200 requests in 1 s at 200/s: {r:?}"
    );
    assert!(r.service_time_ms.is_some());

    // Nobody on the port: connect errors, no responses.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = h3_cfg(&format!("https://127.0.0.1:{port}/"));
    c.insecure = true;
    c.connections = 1;
    c.timeout = Duration::from_millis(200);
    c.duration = Some(Duration::from_millis(500));
    let r = run(&c).unwrap();
    assert_eq!(r.responses, 0);
    assert!(r.errors.connect > 0, "{:?}", r.errors);
}
