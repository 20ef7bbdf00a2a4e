//! TLS and HTTP/2 against the real binary: ALPN, h2c with prior knowledge,
//! TLS 1.2 and 1.3, SNI choosing among sites, the HTTP-to-HTTPS redirect,
//! an HTTP/2 rapid-reset flood that must not hurt anyone else, and TLS
//! handshakes taking turns with the connections already open.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use weir_test_support::certs::*;
use weir_test_support::ports::free_port;
use weir_test_support::process::*;

use crate::WEIR;

struct Tls {
    w: Weir,
    port: u16,
    http_port: u16,
    ca_a: String,
    ca_b: String,
}

/// Two HTTPS sites on one port with their own certificates, plus a plain
/// port that redirects to HTTPS.
fn start() -> Tls {
    let port = free_port();
    let http_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in [("a", "site a\n"), ("b", "site b\n")] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
        std::fs::write(dir.path().join(name).join("index.html"), body).unwrap();
    }
    let (ca, ka, ca_a) = make_cert(dir.path(), "a", &["a.test"]);
    let (cb, kb, ca_b) = make_cert(dir.path(), "b", &["b.test", "*.b.test"]);
    let cfg = format!(
        r#"
[site."a.test"]
listen = "127.0.0.1:{port}"
root = "a"
tls = {{ cert = "{}", key = "{}" }}
http_redirect = "127.0.0.1:{http_port}"

[site."*.b.test"]
listen = "127.0.0.1:{port}"
root = "b"
tls = {{ cert = "{}", key = "{}" }}
"#,
        ca.display(),
        ka.display(),
        cb.display(),
        kb.display()
    );
    let w = Weir::start_in(WEIR, dir, &cfg, &[port, http_port]);
    Tls {
        w,
        port,
        http_port,
        ca_a,
        ca_b,
    }
}

#[tokio::test]
async fn https_serves_each_site_with_its_certificate_over_h1_and_h2() {
    let t = start();
    let a = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(t.ca_a.as_bytes()).unwrap()])
        .resolve("a.test", addr(t.port))
        .build()
        .unwrap();
    let r = a
        .get(format!("https://a.test:{}/", t.port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_2, "ALPN picks h2");
    assert_eq!(r.text().await.unwrap(), "site a\n");

    let b = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(t.ca_b.as_bytes()).unwrap()])
        .resolve("x.b.test", addr(t.port))
        .http1_only()
        .build()
        .unwrap();
    let r = b
        .get(format!("https://x.b.test:{}/", t.port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.version(), reqwest::Version::HTTP_11);
    assert_eq!(r.text().await.unwrap(), "site b\n");

    // a.test's CA does not vouch for b's certificate: SNI really chose.
    let wrong = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(t.ca_a.as_bytes()).unwrap()])
        .resolve("x.b.test", addr(t.port))
        .build()
        .unwrap();
    assert!(
        wrong
            .get(format!("https://x.b.test:{}/", t.port))
            .send()
            .await
            .is_err()
    );
    drop(t.w);
}

/// Handshakes with only one TLS version allowed and reports what was agreed.
async fn handshake(
    port: u16,
    ca_pem: &str,
    version: &'static rustls::SupportedProtocolVersion,
) -> (rustls::ProtocolVersion, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let conn = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr(port)).await.unwrap();
    let tls = conn
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap();
    let (_, s) = tls.get_ref();
    (
        s.protocol_version().unwrap(),
        s.alpn_protocol().map(|p| p.to_vec()),
    )
}

#[tokio::test]
async fn tls_1_2_and_1_3_both_work() {
    let t = start();
    let (v, alpn) = handshake(t.port, &t.ca_a, &rustls::version::TLS13).await;
    assert_eq!(v, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (v, _) = handshake(t.port, &t.ca_a, &rustls::version::TLS12).await;
    assert_eq!(v, rustls::ProtocolVersion::TLSv1_2);
}

#[tokio::test]
async fn plain_http_redirects_to_https_keeping_path_and_query() {
    let t = start();
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = c
        .get(format!("http://127.0.0.1:{}/some/page?x=1", t.http_port))
        .header("host", format!("a.test:{}", t.http_port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(
        r.headers()["location"],
        format!("https://a.test:{}/some/page?x=1", t.port).as_str()
    );
}

#[tokio::test]
async fn h2c_with_prior_knowledge() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), PAGE_164).unwrap();
    let _w = Weir::start_in(
        WEIR,
        dir,
        &format!("[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
        &[port],
    );
    let c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = c
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-length"], "164");
    assert_eq!(r.text().await.unwrap(), PAGE_164);
}

/// CVE-2023-44487 style: open and immediately reset streams as fast as
/// possible. The server must shed the abusive connection and keep serving
/// everyone else.
#[tokio::test]
async fn h2_rapid_reset_flood_is_shed_and_others_are_served() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), PAGE_164).unwrap();
    let _w = Weir::start_in(
        WEIR,
        dir,
        &format!("[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
        &[port],
    );

    let tcp = tokio::net::TcpStream::connect(addr(port)).await.unwrap();
    let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn_task = tokio::spawn(conn);
    let mut sent = 0;
    for _ in 0..20_000 {
        let req = http::Request::get(format!("http://127.0.0.1:{port}/"))
            .body(())
            .unwrap();
        match h2.send_request(req, true) {
            Ok((resp, _)) => {
                drop(resp);
                sent += 1;
            }
            Err(_) => break,
        }
        if sent % 100 == 0 {
            tokio::task::yield_now().await;
            if h2.clone().ready().await.is_err() {
                break;
            }
        }
    }
    // The abusive connection ends (GOAWAY) well before 20,000 resets...
    let ended = tokio::time::timeout(Duration::from_secs(5), conn_task).await;
    assert!(
        ended.is_ok(),
        "flooding connection was not shut down (sent {sent})"
    );
    // ...and a well-behaved client is still served.
    let r = reqwest::get(format!("http://127.0.0.1:{port}/"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// `server.limits.tls_handshakes` makes handshakes take turns; clients that
/// connect and send nothing never take one, and a client that sends its
/// ClientHello and then stalls gives its turn back as soon as the server's
/// answer is written (the turn covers the signature, not the wait for the
/// client), so neither kind can keep a real client waiting.
#[tokio::test]
async fn stalled_handshakes_do_not_hold_the_turns() {
    use tokio::io::AsyncWriteExt;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "turns\n").unwrap();
    let (c, k, ca) = make_cert(dir.path(), "a", &["a.test"]);
    let cfg = format!(
        "[server.limits]\ntls_handshakes = 1\n[site.\"a.test\"]\nlisten = \"127.0.0.1:{port}\"\n\
         root = \"{}\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        dir.path().display(),
        c.display(),
        k.display()
    );
    let _w = Weir::start_on(WEIR, &cfg, &[port]);

    // Silent connections, and connections stalled after a ClientHello.
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(tokio::net::TcpStream::connect(addr(port)).await.unwrap());
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let client_cfg = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    );
    for _ in 0..12 {
        let mut conn = rustls::ClientConnection::new(
            client_cfg.clone(),
            ServerName::try_from("a.test").unwrap(),
        )
        .unwrap();
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).unwrap();
        let mut s = tokio::net::TcpStream::connect(addr(port)).await.unwrap();
        s.write_all(&hello).await.unwrap();
        held.push(s);
    }

    let started = std::time::Instant::now();
    let (version, _) = tokio::time::timeout(
        Duration::from_secs(10),
        handshake(port, &ca, &rustls::version::TLS13),
    )
    .await
    .expect("a real client must get its handshake while others stall");
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_3);
    // Twelve stalled clients held a turn for 500 ms each, one after the
    // other, before turns ended with the server's answer (6 s); without a
    // cap they would hold it for the header timeout, 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?}",
        started.elapsed()
    );
    drop(held);
}

/// A storm of new TLS clients shares the worker with the connections
/// already open (`tls::turns`): a request on an open connection is answered
/// while most of the storm still waits for its handshake, and every client
/// of the storm gets its answer too. Before, a worker signed every
/// ClientHello it had queued before it read the request.
#[tokio::test]
async fn an_open_connection_is_served_during_a_handshake_storm() {
    use std::io::Write;
    use tokio::io::AsyncWriteExt;
    const STORM: usize = 400;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "open\n").unwrap();
    let (c, k, ca) = make_cert(dir.path(), "a", &["a.test"]);
    // One worker, so the storm and the open connection share its queue;
    // turns granted at most 32 a pass, so a slow pass cannot let the whole
    // storm through at once.
    let cfg = format!(
        "[server]\nworkers = 1\n[server.limits]\ntls_handshakes = 32\n\
         [site.\"a.test\"]\nlisten = \"127.0.0.1:{port}\"\n\
         root = \"{}\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        dir.path().display(),
        c.display(),
        k.display()
    );
    let _w = Weir::start_on(WEIR, &cfg, &[port]);

    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = Arc::new(client);
    let name = ServerName::try_from("a.test").unwrap();

    // The open keep-alive connection, one request answered.
    let tcp = tokio::net::TcpStream::connect(addr(port)).await.unwrap();
    let mut open = tokio_rustls::TlsConnector::from(client.clone())
        .connect(name.clone(), tcp)
        .await
        .unwrap();
    let get = b"GET /index.html HTTP/1.1\r\nHost: a.test\r\n\r\n";
    open.write_all(get).await.unwrap();
    read_until_body(&mut open, "open\n").await;

    // The storm: connected first, then every ClientHello sent at once.
    let mut storm = Vec::new();
    for _ in 0..STORM {
        storm.push(std::net::TcpStream::connect(addr(port)).unwrap());
    }
    let hellos: Vec<Vec<u8>> = (0..STORM)
        .map(|_| {
            let mut conn = rustls::ClientConnection::new(client.clone(), name.clone()).unwrap();
            let mut hello = Vec::new();
            conn.write_tls(&mut hello).unwrap();
            hello
        })
        .collect();
    for (s, hello) in storm.iter_mut().zip(&hellos) {
        s.write_all(hello).unwrap();
    }
    // The open connection's next request.
    open.write_all(get).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        read_until_body(&mut open, "open\n"),
    )
    .await
    .expect("the open connection's request is answered");
    let answered = storm
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            matches!(s.peek(&mut [0u8; 1]), Ok(1))
        })
        .count();
    assert!(
        answered < STORM / 2,
        "{answered} of {STORM} new clients answered before one request on an open connection"
    );
    // And the storm is served: every client gets the server's answer.
    for s in &storm {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(s.peek(&mut [0u8; 1]).unwrap(), 1);
    }
}

/// Reads an HTTP/1.1 response until it ends with `body`.
async fn read_until_body<S: tokio::io::AsyncRead + Unpin>(s: &mut S, body: &str) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(body.as_bytes()) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    got.clear();
}
