//! The sni-passthrough corpus config (TLS passed through by SNI, and a
//! TCP proxy with a backup server) in HAProxy and, imported, in weir, in
//! front of the same TLS backends and TCP echo servers: rustls clients
//! with several server names (and none) see which backend's certificate
//! and answer come back, bytes that are no ClientHello are dropped, and
//! the TCP proxy echoes through its first server. Rewritten: the two binds
//! on loopback test ports, the five servers test backends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_test_support::certs::TestCa;
use weir_test_support::poll::poll_until_async;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::Weir;

use super::Haproxy;
use crate::WEIR;
use crate::import::{corpus, import_as};
use crate::layer4::{AnyCert, tls_backend};

/// A TLS connection through `port` with `sni` (none when `None`): the
/// backend's certificate subject and what it said, or why it failed.
async fn through(port: u16, sni: Option<&str>) -> Result<(String, String), String> {
    weir_test_support::tls::install_crypto();
    let mut cfg = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    cfg.enable_sni = sni.is_some();
    let name = ServerName::try_from(sni.unwrap_or("unnamed.test").to_string()).unwrap();
    let s = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let connect = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, s);
    // HAProxy waits up to its inspect-delay (5s) for a ClientHello.
    let mut t = tokio::time::timeout(Duration::from_secs(20), connect)
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    let leaf = t.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, c) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let subject = c.subject().to_string();
    t.write_all(b"hello").await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), t.read_to_end(&mut out)).await;
    Ok((subject, String::from_utf8_lossy(&out).into_owned()))
}

/// Sends `what` and reads the first answer (`None`: closed or silent).
async fn say(port: u16, what: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(what.as_bytes()).await.ok()?;
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A TCP echo server that prefixes each answer with `tag`.
async fn echo(tag: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind(("127.0.0.1", free_port())).await.unwrap();
    let addr = l.local_addr().unwrap();
    let h = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    let mut out = tag.as_bytes().to_vec();
                    out.extend_from_slice(&buf[..n]);
                    if s.write_all(&out).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_passthrough_answers_as_haproxy() {
    let ca = TestCa::named("backends");
    let (mail, _) = tls_backend(&ca, "mail.example.com", "backend mail").await;
    // balance source: the two web servers answer alike, as either may be
    // chosen (weir hashes the client on its own ring; the report says so).
    let (w1, _) = tls_backend(&ca, "www.example.com", "backend web").await;
    let (w2, _) = tls_backend(&ca, "www.example.com", "backend web").await;
    let (db1, db1_task) = echo("db1:").await;
    let (db2, _db2_task) = echo("db2:").await;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = std::fs::read_to_string(corpus("haproxy/sni-passthrough/haproxy.cfg")).unwrap();
    let conf = |tls: u16, pg: u16, name: &str| {
        let text = src
            .replace("bind :443", &format!("bind 127.0.0.1:{tls}"))
            .replace("bind 10.0.0.1:5432", &format!("bind 127.0.0.1:{pg}"))
            .replace("10.0.0.7:443", &mail.to_string())
            .replace("10.0.0.8:443", &w1.to_string())
            .replace("10.0.0.9:443", &w2.to_string())
            .replace("10.0.1.5:5432", &db1.to_string())
            .replace("10.0.1.6:5432", &db2.to_string());
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (hp, hp_pg, w, w_pg) = (free_port(), free_port(), free_port(), free_port());
    let hp_conf = conf(hp, hp_pg, "haproxy.cfg");
    let w_conf = conf(w, w_pg, "for-weir.cfg");
    let _hp = Haproxy::start(&hp_conf, hp);
    let out = dir.join("weir.toml");
    let (code, report) = import_as("haproxy", &w_conf, &out, &[]);
    assert_eq!(
        code, 3,
        "approximations are reported with exit 3:\n{report}"
    );
    assert!(report.contains("balance source"), "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[w, w_pg]);

    for sni in [
        Some("mail.example.com"),
        Some("MAIL.example.com"),
        Some("www.example.com"),
        Some("example.com"),
        Some("other.example.com"),
        Some("sub.www.example.com"),
        None,
    ] {
        let h = through(hp, sni).await;
        let wa = through(w, sni).await;
        match (&h, &wa) {
            (Ok(h), Ok(wa)) => assert_eq!(h, wa, "SNI {sni:?}"),
            // No backend: both close without a handshake (the errors' words differ).
            (Err(_), Err(_)) => {}
            _ => panic!("SNI {sni:?}: haproxy {h:?}, weir {wa:?}"),
        }
        let expect = match sni.map(|s| s.to_ascii_lowercase()).as_deref() {
            Some("mail.example.com") => Some("backend mail"),
            Some("www.example.com" | "example.com") => Some("backend web"),
            _ => None,
        };
        match expect {
            Some(b) => {
                let (subject, said) = h.unwrap();
                assert!(subject.contains(b), "SNI {sni:?}: {subject}");
                assert_eq!(said, b, "SNI {sni:?}");
            }
            None => assert!(h.is_err(), "SNI {sni:?}: {h:?}"),
        }
    }

    // Bytes that are no ClientHello: no backend, closed without an answer.
    for port in [hp, w] {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "port {port}: left open");
        assert!(
            out.is_empty(),
            "port {port}: {}",
            String::from_utf8_lossy(&out)
        );
    }

    // The TCP proxy: through db1; the backup db2 is left out of weir's.
    assert_eq!(say(hp_pg, "q1").await.as_deref(), Some("db1:q1"));
    assert_eq!(say(w_pg, "q1").await.as_deref(), Some("db1:q1"));
    db1_task.abort();
    assert!(
        poll_until_async(Duration::from_secs(10), async || TcpStream::connect(db1)
            .await
            .is_err())
        .await
    );
    // HAProxy moves to its backup once its checks find db1 down.
    assert!(
        poll_until_async(Duration::from_secs(30), async || say(hp_pg, "q2")
            .await
            .as_deref()
            == Some("db2:q2"))
        .await,
        "haproxy never used its backup server"
    );
    assert_eq!(say(w_pg, "q2").await, None);
    assert!(report.contains("weir has no backup servers"), "{report}");
}
