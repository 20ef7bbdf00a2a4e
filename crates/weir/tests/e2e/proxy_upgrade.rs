//! WebSocket through the proxy (HTTP/1.1 Upgrade, and HTTP/2 extended
//! CONNECT from the client, RFC 8441), and the PROXY protocol both ways.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use weir_proxy::proxy_protocol;
use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::proxy::{self, Upstream, Weir, client, h2c, spawn_server, ws_echo};

use crate::WEIR;

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    let (up, _t) = ws_echo().await;
    let w = Weir::start(
        WEIR,
        &format!("[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"] }}\n"),
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(format!("ws://{}/chat", w.addr))
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..5 {
        ws.send(Message::text(format!("hello {i}"))).await.unwrap();
        let m = tokio::time::timeout(Duration::from_secs(2), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(m.into_text().unwrap().as_str(), format!("hello {i}"));
    }
    let big = vec![42u8; 300_000];
    ws.send(Message::binary(big.clone())).await.unwrap();
    let m = ws.next().await.unwrap().unwrap();
    assert_eq!(m.into_data().as_ref(), &big[..]);
    ws.close(None).await.unwrap();
}

/// A WebSocket echo server that records each handshake's request headers
/// and picks `chat` when the client offers it.
// The callback's error type (an HTTP response) is tungstenite's, not ours.
#[allow(clippy::result_large_err)]
async fn ws_echo_recording(
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    spawn_server(move |s| {
        let seen = seen.clone();
        async move {
            let cb = |req: &Request, mut resp: Response| {
                seen.lock().unwrap().push(req.headers().clone());
                let offered = req
                    .headers()
                    .get("sec-websocket-protocol")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if offered.split(',').any(|p| p.trim() == "chat") {
                    resp.headers_mut()
                        .insert("sec-websocket-protocol", "chat".parse().unwrap());
                }
                Ok(resp)
            };
            let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(s, cb).await else {
                return;
            };
            while let Some(Ok(m)) = ws.next().await {
                if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

/// A masked client frame (RFC 6455 5.2), written by hand: the HTTP/2
/// stream carries the same bytes a TCP connection would.
fn client_frame(opcode: u8, payload: &[u8]) -> Bytes {
    let mut f = vec![0x80 | opcode];
    let n = payload.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    Bytes::from(f)
}

/// One unmasked server frame from the front of `buf`: opcode, payload, size.
fn server_frame(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    if buf.len() < 2 {
        return None;
    }
    assert_eq!(buf[1] & 0x80, 0, "a server frame must not be masked");
    let (len, at) = match buf[1] & 0x7f {
        126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
        127 if buf.len() >= 10 => (
            u64::from_be_bytes(buf[2..10].try_into().unwrap()) as usize,
            10,
        ),
        126 | 127 => return None,
        n => (n as usize, 2),
    };
    (buf.len() >= at + len).then(|| (buf[0] & 0x0f, buf[at..at + len].to_vec(), at + len))
}

async fn read_frame(recv: &mut h2::RecvStream, buf: &mut Vec<u8>) -> (u8, Vec<u8>) {
    loop {
        if let Some((op, payload, n)) = server_frame(buf) {
            buf.drain(..n);
            return (op, payload);
        }
        let d = tokio::time::timeout(Duration::from_secs(5), recv.data())
            .await
            .expect("no frame in time")
            .expect("the stream ended")
            .unwrap();
        let _ = recv.flow_control().release_capacity(d.len());
        buf.extend_from_slice(&d);
    }
}

fn connect_request(base: &str, path: &str) -> http::Request<()> {
    http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(format!("{base}{path}"))
        .extension(h2::ext::Protocol::from("websocket"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat, superchat")
        .header("sec-websocket-extensions", "permessage-deflate")
        .body(())
        .unwrap()
}

async fn response(
    tx: &mut h2::client::SendRequest<Bytes>,
    req: http::Request<()>,
) -> (http::Response<h2::RecvStream>, h2::SendStream<Bytes>) {
    let (resp, send) = tx.send_request(req, false).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .expect("no response in time")
        .unwrap();
    (resp, send)
}

/// Upstreams for the HTTP/2 WebSocket tests and the site config in front of
/// them: a static root, `/ws/*` to a WebSocket echo, `/plain/*` to an
/// upstream that never switches protocols.
struct H2Ws {
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
    plain: Upstream,
    ws: SocketAddr,
    _t: tokio::task::JoinHandle<()>,
}

impl H2Ws {
    async fn start() -> H2Ws {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ws, _t) = ws_echo_recording(seen.clone()).await;
        let plain = Upstream::start("plain").await;
        H2Ws {
            seen,
            plain,
            ws,
            _t,
        }
    }

    /// The site `name` with `head` (listen, tls…) and the routes.
    fn config(&self, name: &str, head: &str) -> String {
        format!(
            "[site.\"{name}\"]\n{head}root = \"{{DIR}}\"\n\
             [[site.\"{name}\".route]]\npath = \"/ws/*\"\nproxy = {{ to = [\"{}\"] }}\n\
             [[site.\"{name}\".route]]\npath = \"/plain/*\"\nproxy = {{ to = [\"{}\"], retries = 0 }}\n",
            self.ws, self.plain.addr
        )
    }

    /// A WebSocket over one HTTP/2 stream (`base` is the scheme and
    /// authority), then CONNECT where it must be refused.
    async fn check(&self, mut tx: h2::client::SendRequest<Bytes>, base: &str) {
        // weir's SETTINGS announce the extended CONNECT protocol.
        assert!(
            poll_until_async(PATIENCE, async || tx.is_extended_connect_protocol_enabled()).await,
            "SETTINGS_ENABLE_CONNECT_PROTOCOL not announced"
        );

        let (resp, mut send) = response(&mut tx, connect_request(base, "/ws/chat?room=1")).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["sec-websocket-protocol"], "chat");
        assert!(resp.headers().get("sec-websocket-accept").is_none());
        assert!(resp.headers().get("upgrade").is_none());
        let mut recv = resp.into_body();
        let mut buf = Vec::new();
        for i in 0..5 {
            let text = format!("hello {i}");
            send.send_data(client_frame(1, text.as_bytes()), false)
                .unwrap();
            assert_eq!(
                read_frame(&mut recv, &mut buf).await,
                (1, text.into_bytes())
            );
        }
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        send.send_data(client_frame(2, &big), false).unwrap();
        assert_eq!(read_frame(&mut recv, &mut buf).await, (2, big));
        // Close: the echo server answers with a close frame of its own.
        send.send_data(client_frame(8, &1000u16.to_be_bytes()), false)
            .unwrap();
        assert_eq!(read_frame(&mut recv, &mut buf).await.0, 8);

        // The upstream saw a real HTTP/1.1 WebSocket handshake.
        let h = self.seen.lock().unwrap().pop().unwrap();
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"].to_str().unwrap().to_lowercase(), "upgrade");
        assert_eq!(h["sec-websocket-version"], "13");
        assert_eq!(h["sec-websocket-key"].len(), 24);
        assert_eq!(h["sec-websocket-protocol"], "chat, superchat");
        assert_eq!(h["sec-websocket-extensions"], "permessage-deflate");
        assert_eq!(h["x-forwarded-for"], "127.0.0.1");
        assert!(h.get("te").is_none(), "{h:?}");

        // Not a proxy route: a clear 405, not a tunnel to nowhere or a hang.
        let (resp, _s) = response(&mut tx, connect_request(base, "/index.html")).await;
        assert_eq!(resp.status(), 405);
        // An upstream that answers 200 instead of switching protocols: 502.
        let (resp, _s) = response(&mut tx, connect_request(base, "/plain/x")).await;
        assert_eq!(resp.status(), 502);
        assert_eq!(
            self.plain.seen().pop().unwrap().headers["upgrade"],
            "websocket"
        );
        // The static site still answers ordinary requests on the same connection.
        let req = http::Request::get(format!("{base}/")).body(()).unwrap();
        let (resp, _) = tx.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let (body, _) = proxy::h2_read(resp.into_body()).await;
        assert_eq!(body, b"static page");
    }
}

#[tokio::test]
async fn websocket_over_h2c_extended_connect() {
    let t = H2Ws::start().await;
    let w = Weir::start(WEIR, &t.config("127.0.0.1:{PORT}", ""));
    std::fs::write(w.path().join("index.html"), "static page").unwrap();
    t.check(h2c(w.addr).await, &format!("http://{}", w.addr))
        .await;
}

#[tokio::test]
async fn websocket_over_tls_h2_extended_connect() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let certs = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (crt, pem) = (certs.path().join("l.crt"), certs.path().join("l.key"));
    std::fs::write(&crt, leaf.pem()).unwrap();
    std::fs::write(&pem, key.serialize_pem()).unwrap();

    let t = H2Ws::start().await;
    let head = format!(
        "listen = \"127.0.0.1:{{PORT}}\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        crt.display(),
        pem.display()
    );
    let w = Weir::start(WEIR, &t.config("localhost", &head));
    std::fs::write(w.path().join("index.html"), "static page").unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (tx, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let tx = tx.ready().await.unwrap();
    t.check(tx, &format!("https://localhost:{}", w.addr.port()))
        .await;
}

/// An upstream that reads a PROXY header then answers with the source it named.
async fn pp_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    spawn_server(|mut s| async move {
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        loop {
            let n = s.read(&mut tmp).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&tmp[..n]);
            // The v2 signature itself contains CRLFCRLF: look after the header.
            let skip = match proxy_protocol::parse(&buf) {
                Ok(Some(h)) => h.len,
                Ok(None) => continue,
                Err(_) => 0,
            };
            if buf[skip..].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let (body, ok) = match proxy_protocol::parse(&buf) {
            Ok(Some(h)) => {
                let v = if buf.starts_with(b"PROXY") {
                    "v1"
                } else {
                    "v2"
                };
                let rest = &buf[h.len..];
                (
                    format!("{v} {:?}", h.addrs.map(|a| a.0)),
                    rest.starts_with(b"GET "),
                )
            }
            other => (format!("no header: {other:?}"), false),
        };
        let body = if ok { body } else { format!("bad: {body}") };
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(resp.as_bytes()).await;
    })
    .await
}

#[tokio::test]
async fn proxy_protocol_v1_and_v2_sent_to_upstreams() {
    let (up, _t) = pp_upstream().await;
    for v in ["v1", "v2"] {
        let w = Weir::start(
            WEIR,
            &format!(
                "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"], send_proxy_protocol = \"{v}\" }}\n"
            ),
        );
        let text = client()
            .get(w.url("/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(text.starts_with(&format!("{v} Some(127.0.0.1:")), "{text}");
    }
}

#[tokio::test]
async fn proxy_protocol_accepted_from_trusted_sources_only() {
    let up = Upstream::start("up").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy_protocol = true\ntrusted_sources = [\"127.0.0.0/8\"]\n\
         proxy = {{ to = [\"{}\"] }}\n",
            up.addr
        ),
    );
    let src: SocketAddr = "203.0.113.7:4444".parse().unwrap();
    for header in [
        proxy_protocol::write_v1(src, w.addr),
        proxy_protocol::write_v2(src, w.addr),
    ] {
        let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
        s.write_all(&header).await.unwrap();
        s.write_all(b"GET /pp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let local = s.local_addr().unwrap();
        if let Err(e) = s.read_to_string(&mut out).await {
            panic!(
                "reading the answer on {local} -> {}: {e} (read: {out:?})",
                w.addr
            );
        }
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        let seen = up.seen().pop().unwrap();
        assert_eq!(seen.headers["x-forwarded-for"], "203.0.113.7");
    }
    // Without a header: refused.
    let mut s = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    s.write_all(b"GET /nopp HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(up.count(), 2);

    // An untrusted source may not send one at all.
    let w2 = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy_protocol = true\ntrusted_sources = [\"10.0.0.0/8\"]\n\
         proxy = {{ to = [\"{}\"] }}\n",
            up.addr
        ),
    );
    let mut s = tokio::net::TcpStream::connect(w2.addr).await.unwrap();
    // weir may close before these are written: errors are expected.
    let _ = s.write_all(&proxy_protocol::write_v1(src, w2.addr)).await;
    let _ = s
        .write_all(b"GET /untrusted HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    assert!(out.is_empty(), "{out}");
    assert_eq!(up.count(), 2);
}
