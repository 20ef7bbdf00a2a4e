//! Layer-4 proxying end to end: TLS passed through by SNI on the same port
//! as weir's own HTTPS site (seen with `openssl s_client` and with a client
//! that sends its ClientHello a few bytes at a time), `[tcp]` listeners
//! balancing an echo service with one upstream killed, the PROXY v2
//! header at the upstream, the per-client connection limit, and the
//! streams counted in the metrics and the log.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_test_support::certs::{TestCa, make_cert};
use weir_test_support::poll::poll_until;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Weir, client};

use crate::WEIR;

/// A TLS server that answers every connection with its `name`.
pub(crate) async fn tls_backend(
    ca: &TestCa,
    host: &str,
    name: &'static str,
) -> (SocketAddr, CertificateDer<'static>) {
    weir_test_support::tls::install_crypto();
    let (cert, key) = ca.leaf_with_cn(&[host], Some(name));
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let leaf = chain[0].clone();
    let cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind(("127.0.0.1", free_port())).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut t) = acceptor.accept(s).await {
                    let mut buf = [0u8; 1024];
                    let _ = t.read(&mut buf).await;
                    let _ = t.write_all(name.as_bytes()).await;
                    let _ = t.shutdown().await;
                }
            });
        }
    });
    (addr, leaf)
}

/// A stream that writes at most 5 bytes per write, each its own segment.
struct Trickle(TcpStream);

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let n = buf.len().min(5);
        Pin::new(&mut self.0).poll_write(cx, &buf[..n])
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Connects through weir with `sni`, trusting no one (the test compares
/// certificates itself): the server's leaf and what it sent.
async fn tls_through<S: AsyncRead + AsyncWrite + Unpin>(
    s: S,
    sni: &str,
) -> (CertificateDer<'static>, String) {
    // Post-quantum key share first, as browsers send it: a hello of more
    // than one segment.
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![
        rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768,
        rustls::crypto::aws_lc_rs::kx_group::X25519,
    ];
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut t = conn
        .connect(ServerName::try_from(sni.to_string()).unwrap(), s)
        .await
        .unwrap();
    let leaf = t.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned();
    t.write_all(format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), t.read_to_end(&mut out)).await;
    (leaf, String::from_utf8_lossy(&out).into_owned())
}

/// Accepts any certificate: the tests compare certificates themselves.
#[derive(Debug)]
pub(crate) struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `openssl s_client`'s view of the certificate's subject for `sni` (run
/// without blocking the test's runtime, which serves the backends).
async fn openssl_subject(port: u16, sni: &str) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("127.0.0.1:{port}"),
                "-servername",
                sni,
            ])
            .stdin(std::process::Stdio::null())
            .output(),
    )
    .await
    .expect("openssl s_client did not finish")
    .expect("openssl (apt-get install openssl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_else(|| panic!("no subject from openssl s_client for {sni}:\n{text}"))
        .to_string()
}

#[tokio::test]
async fn tls_passes_through_by_sni_beside_weirs_own_site() {
    let ca = TestCa::named("backends");
    let (a, a_leaf) = tls_backend(&ca, "a.test", "backend a").await;
    let (b, b_leaf) = tls_backend(&ca, "b.test", "backend b").await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = make_cert(dir.path(), "own", &["own.test"]);
    let port = free_port();
    let admin = free_port();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "weir's own").unwrap();
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [site.\"a.test\"]\nlisten = \"127.0.0.1:{port}\"\npassthrough = \"{a}\"\n\
             [site.\"b.test\"]\nlisten = \"127.0.0.1:{port}\"\npassthrough = {{ to = \"{b}\" }}\n\
             [site.\"own.test\"]\nlisten = \"127.0.0.1:{port}\"\nroot = \"{}\"\n\
             tls = {{ cert = \"{}\", key = \"{}\" }}\n\
             # keeps the admin port from being the one waited for\n\
             [site.\"wait\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nrespond = 204\n",
            root.display(),
            cert.display(),
            key.display()
        ),
    );
    // Issue 55 §6: the log says which names the address passes through.
    let says =
        format!("listening on https://127.0.0.1:{port} (tls passthrough by SNI: a.test, b.test) (");
    assert!(
        poll_until(Duration::from_secs(10), || w.log().contains(&says)),
        "{}",
        w.log()
    );
    // Each name reaches its own backend's certificate, untouched.
    assert!(openssl_subject(port, "a.test").await.contains("backend a"));
    assert!(openssl_subject(port, "b.test").await.contains("backend b"));
    assert!(openssl_subject(port, "own.test").await.contains("own.test"));
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (leaf, body) = tls_through(s, "a.test").await;
    assert_eq!(leaf, a_leaf);
    assert_eq!(body, "backend a");
    // A ClientHello sent five bytes at a time (post-quantum key shares
    // make it span several segments) still routes.
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.set_nodelay(true).unwrap();
    let (leaf, body) = tls_through(Trickle(s), "b.test").await;
    assert_eq!(leaf, b_leaf);
    assert_eq!(body, "backend b");
    // Any other name is weir's own site on the same port.
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (_, body) = tls_through(s, "own.test").await;
    assert!(
        body.starts_with("HTTP/1.1 200") && body.ends_with("weir's own"),
        "{body}"
    );
    // Garbage instead of a ClientHello: closed, and weir serves on.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(!String::from_utf8_lossy(&out).contains("backend"));
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert_eq!(tls_through(s, "a.test").await.1, "backend a");

    // Counted: streams and bytes by site, and a log line per stream.
    let m = client()
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = m
        .lines()
        .find(|l| l.starts_with("weir_stream_connections_total") && l.contains("site=\"a.test\""))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(line.ends_with(" 3"), "{line}");
    assert!(
        m.contains("weir_stream_bytes_total{site=\"a.test\",direction=\"down\"}"),
        "{m}"
    );
    assert!(
        poll_until(Duration::from_secs(5), || w
            .log()
            .contains("a.test: 127.0.0.1:")
            && w.log().contains(&format!("→ {a}"))),
        "{}",
        w.log()
    );
}

/// An echo service; stops accepting (and closes) when the handle is aborted.
pub(crate) async fn echo(tag: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let h = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut out = tag.as_bytes().to_vec();
                            out.extend_from_slice(&buf[..n]);
                            if s.write_all(&out).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, h)
}

pub(crate) async fn say(port: u16, what: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(what.as_bytes()).await.ok()?;
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test]
async fn tcp_listeners_balance_survive_a_dead_upstream_and_send_proxy_v2() {
    let (e1, h1) = echo("1:").await;
    let (e2, _h2) = echo("2:").await;
    // PROXY v2 arrives first at this upstream, naming the client.
    let pp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pp_addr = pp.local_addr().unwrap();
    let seen = tokio::spawn(async move {
        let (mut s, _) = pp.accept().await.unwrap();
        let mut head = [0u8; 16];
        s.read_exact(&mut head).await.unwrap();
        let len = u16::from_be_bytes([head[14], head[15]]) as usize;
        let mut rest = vec![0u8; len];
        s.read_exact(&mut rest).await.unwrap();
        let mut hello = [0u8; 5];
        s.read_exact(&mut hello).await.unwrap();
        (head, rest, hello)
    });
    let (echo_port, pp_port, lim_port) = (free_port(), free_port(), free_port());
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[tcp.\"echo\"]\nlisten = \"127.0.0.1:{echo_port}\"\nto = [\"{e1}\", \"{e2}\"]\n\
             [tcp.\"pp\"]\nlisten = \"127.0.0.1:{pp_port}\"\nto = \"{pp_addr}\"\nsend_proxy_protocol = \"v2\"\n\
             [tcp.\"limited\"]\nlisten = \"127.0.0.1:{lim_port}\"\nto = \"{e2}\"\nmax_conns_per_client = 2\n\
             [site.\"wait\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nrespond = 204\n"
        ),
    );
    // Issue 55 §6: a relay is logged as what it is, not as HTTP.
    let relay = format!("listening on tcp://127.0.0.1:{echo_port} (");
    assert!(
        poll_until(Duration::from_secs(10), || w.log().contains(&relay)),
        "{}",
        w.log()
    );
    assert!(!w.log().contains(&format!("http://127.0.0.1:{echo_port}")));
    // Round robin over both.
    let mut tags = std::collections::BTreeSet::new();
    for i in 0..6 {
        let r = say(echo_port, &format!("ping{i}")).await.expect("echo");
        assert!(r.ends_with(&format!("ping{i}")), "{r}");
        tags.insert(r[..2].to_string());
    }
    assert_eq!(tags.len(), 2, "{tags:?}");
    // One upstream dies: no new connection is lost.
    h1.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..20 {
        let r = say(echo_port, &format!("after{i}")).await;
        assert_eq!(
            r.as_deref(),
            Some(format!("2:after{i}").as_str()),
            "connection {i}"
        );
    }

    // PROXY v2 names the client and weir's address.
    let mut c = TcpStream::connect(("127.0.0.1", pp_port)).await.unwrap();
    let client_port = c.local_addr().unwrap().port();
    c.write_all(b"hello").await.unwrap();
    let (head, rest, hello) = tokio::time::timeout(Duration::from_secs(5), seen)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&head[..12], b"\r\n\r\n\0\r\nQUIT\n");
    assert_eq!(head[12], 0x21, "v2, PROXY command");
    assert_eq!(head[13], 0x11, "TCP over IPv4");
    assert_eq!(&rest[..4], &[127, 0, 0, 1]);
    assert_eq!(u16::from_be_bytes([rest[8], rest[9]]), client_port);
    assert_eq!(u16::from_be_bytes([rest[10], rest[11]]), pp_port);
    assert_eq!(&hello, b"hello");

    // Two connections per client address; the third is closed at once.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", lim_port)).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut b = [0u8; 8];
        let n = s.read(&mut b).await.unwrap();
        assert_eq!(&b[..n], b"2:x");
        held.push(s);
    }
    assert_eq!(say(lim_port, "third").await, None);
    drop(held);
    // The slots come back once the held connections have closed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while say(lim_port, "y").await.as_deref() != Some("2:y") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no slot came back once the held connections closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(w.log().contains("max_conns_per_client"), "{}", w.log());
}

/// One HTTP/1.1 request over weir's own TLS with `sni` (none when `None`)
/// and `host` in the request: the whole answer.
async fn https_get(port: u16, sni: Option<&str>, host: &str) -> String {
    weir_test_support::tls::install_crypto();
    let mut cfg = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    cfg.enable_sni = sni.is_some();
    let name = ServerName::try_from(sni.unwrap_or("unnamed.test").to_string()).unwrap();
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut t = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
        .unwrap();
    t.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), t.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Issue 55 §3: with weir's own HTTPS site first on the address and a
/// passthrough site beside it, an unknown SNI or none got the built-in
/// welcome page, counted under the passthrough site. A passthrough site
/// never answers HTTP: the default is weir's own site, and a request whose
/// Host names the passthrough site over weir's TLS gets 421.
#[tokio::test]
async fn a_passthrough_site_never_answers_http() {
    let ca = TestCa::named("backends");
    let (back, _) = tls_backend(&ca, "back.test", "backend").await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = make_cert(dir.path(), "own", &["weir.test"]);
    let port = free_port();
    let admin = free_port();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "weir's own").unwrap();
    let _w = Weir::start_logged(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [site.\"weir.test\"]\nlisten = \"127.0.0.1:{port}\"\nroot = \"{}\"\n\
             tls = {{ cert = \"{}\", key = \"{}\" }}\n\
             [site.\"back.test\"]\nlisten = \"127.0.0.1:{port}\"\npassthrough = \"{back}\"\n\
             # keeps the admin port from being the one waited for\n\
             [site.\"wait\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nrespond = 204\n",
            root.display(),
            cert.display(),
            key.display()
        ),
    );
    let own = |r: &str| r.starts_with("HTTP/1.1 200") && r.ends_with("weir's own");
    // The passthrough name still reaches its backend.
    let s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    assert_eq!(tls_through(s, "back.test").await.1, "backend");
    // An unknown SNI, and none at all, get weir's own site.
    let r = https_get(port, Some("other.test"), "other.test").await;
    assert!(own(&r), "{r}");
    let r = https_get(port, None, &format!("127.0.0.1:{port}")).await;
    assert!(own(&r), "{r}");
    let r = https_get(port, Some("weir.test"), "weir.test").await;
    assert!(own(&r), "{r}");
    // The passthrough name in Host over weir's own TLS: misdirected.
    for sni in [Some("weir.test"), None] {
        let r = https_get(port, sni, "back.test").await;
        assert!(r.starts_with("HTTP/1.1 421 Misdirected Request"), "{r}");
        assert!(!r.contains("welcome") && !r.contains("backend"), "{r}");
    }

    // Every HTTP request is counted under weir's own site, none under the
    // passthrough site.
    let m = client()
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let requests = |site: &str, status: &str| -> u64 {
        m.lines()
            .filter(|l| l.starts_with("weir_requests_total{"))
            .filter(|l| l.contains(&format!("site=\"{site}\"")) && l.contains(status))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    assert_eq!(requests("back.test", ""), 0, "{m}");
    assert_eq!(requests("weir.test", "status=\"2xx\""), 3, "{m}");
    assert_eq!(requests("weir.test", "status=\"4xx\""), 2, "{m}");
}
