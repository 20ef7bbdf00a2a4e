//! HTTPS (HTTP/1.1 and HTTP/2 via ALPN) and h2c prior knowledge against an
//! in-process hyper server, plus the backend's size and delay.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use weir_bench::backend;
use weir_bench::load::{LoadConfig, run};

async fn hello(
    _: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    Ok(hyper::Response::new(Full::new(Bytes::from_static(
        b"hello over tls!!",
    ))))
}

/// Starts a hyper server (h1 + h2) with or without TLS; returns its port and
/// the PEM of its self-signed certificate.
fn start_hyper(tls: bool) -> (u16, String) {
    weir_bench::load::tls::install_crypto_provider();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = ck.cert.pem();
    let key_pem = ck.signing_key.serialize_pem();
    let (tx, rx) = std::sync::mpsc::channel();
    let cert_pem2 = cert_pem.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let acceptor = tls.then(|| {
                let certs = vec![CertificateDer::from_pem_slice(cert_pem2.as_bytes()).unwrap()];
                let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
                let mut cfg = rustls::ServerConfig::builder()
                    .with_no_client_auth()
                    .with_single_cert(certs, key)
                    .unwrap();
                cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
            });
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let b = auto::Builder::new(TokioExecutor::new());
                    match acceptor {
                        Some(a) => {
                            if let Ok(s) = a.accept(s).await {
                                let _ =
                                    b.serve_connection(TokioIo::new(s), service_fn(hello)).await;
                            }
                        }
                        None => {
                            let _ = b.serve_connection(TokioIo::new(s), service_fn(hello)).await;
                        }
                    }
                });
            }
        });
    });
    (rx.recv().unwrap(), cert_pem)
}

#[test]
fn https_h1_and_h2_with_insecure_and_cacert() {
    let (port, cert_pem) = start_hyper(true);
    let url = format!("https://localhost:{port}/");

    let mut c = LoadConfig::new(&url);
    c.insecure = true;
    c.connections = 4;
    c.requests = Some(400);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 400, "{r:?}");
    assert_eq!(r.protocol, "HTTP/1.1");
    let hs = r.tls_handshake_ms.expect("TLS handshake time is reported");
    assert_eq!(hs.count, 4);

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert_pem).unwrap();
    let mut c = LoadConfig::new(&url);
    c.cacert = Some(ca.clone());
    c.h2 = true;
    c.streams = 8;
    c.connections = 2;
    c.requests = Some(1000);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 1000, "{r:?}");
    assert_eq!(r.protocol, "HTTP/2");
    assert_eq!(r.connections_opened, 2);

    // A wrong SNI name fails verification: counted as TLS errors.
    let mut c = LoadConfig::new(&url);
    c.cacert = Some(ca);
    c.sni = Some("not-localhost.example".into());
    c.connections = 1;
    c.duration = Some(Duration::from_millis(300));
    let r = run(&c).unwrap();
    assert_eq!(r.responses, 0);
    assert!(r.errors.tls > 0, "{:?}", r.errors);
}

#[test]
fn h2c_prior_knowledge() {
    let (port, _) = start_hyper(false);
    let mut c = LoadConfig::new(&format!("http://127.0.0.1:{port}/"));
    c.h2 = true;
    c.streams = 4;
    c.connections = 1;
    c.requests = Some(300);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 300, "{r:?}");
    assert_eq!(r.bytes, 300 * 16, "h2 counts body bytes");
}

#[test]
fn backend_serves_size_and_delay() {
    let b = backend::start(&backend::BackendConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        size: 1000,
        delay: Duration::from_millis(20),
        threads: 2,
    })
    .unwrap();
    let mut c = LoadConfig::new(&format!("http://{}/", b.addr));
    c.connections = 2;
    c.requests = Some(20);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 20);
    assert_eq!(b.requests.load(std::sync::atomic::Ordering::SeqCst), 20);
    let per = r.bytes / 20;
    assert!(
        per > 1000 && per < 1200,
        "body is 1000 bytes plus a head: {per}"
    );
    assert!(r.latency_ms.p50 >= 19.0, "{:?}", r.latency_ms);

    let mut c = LoadConfig::new(&format!("http://{}/", b.addr));
    c.connections = 1;
    c.requests = Some(5);
    c.method = "POST".into();
    c.body = vec![b'x'; 100_000];
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 5, "request bodies are read and discarded");
}
