//! WebSocket through the proxy, and the PROXY protocol both ways.

mod proxy_support;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use proxy_support::{Upstream, Weir, client, spawn_server, ws_echo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use weir::proxy::proxy_protocol;

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    let (up, _t) = ws_echo().await;
    let w = Weir::start(&format!(
        "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"] }}\n"
    ));
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
        let w = Weir::start(&format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"], send_proxy_protocol = \"{v}\" }}\n"
        ));
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
    let w = Weir::start(&format!(
        "[site.\"127.0.0.1:{{PORT}}\"]\nproxy_protocol = true\ntrusted_sources = [\"127.0.0.0/8\"]\n\
         proxy = {{ to = [\"{}\"] }}\n",
        up.addr
    ));
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
        s.read_to_string(&mut out).await.unwrap();
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
    let w2 = Weir::start(&format!(
        "[site.\"127.0.0.1:{{PORT}}\"]\nproxy_protocol = true\ntrusted_sources = [\"10.0.0.0/8\"]\n\
         proxy = {{ to = [\"{}\"] }}\n",
        up.addr
    ));
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
