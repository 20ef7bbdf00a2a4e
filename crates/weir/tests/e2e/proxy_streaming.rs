//! What flows around a body through the proxy: trailers both ways (HTTP/1.1
//! chunked and HTTP/2), `Expect: 100-continue` and bodies that stall,
//! checked on the bytes a client sees.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_test_support::proxy::{Upstream, Weir, h2_read, h2c, raw};

use crate::WEIR;

async fn proxy_to(up: &Upstream) -> Weir {
    Weir::start(
        WEIR,
        &format!(
            "[server.limits]\nbody = \"64MiB\"\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], retries = 0 }}\n",
            up.addr
        ),
    )
}

#[tokio::test]
async fn chunked_trailers_pass_both_ways_over_http1() {
    let up = Upstream::start("up").await;
    let w = proxy_to(&up).await;
    let resp = raw(
        &w,
        b"POST /trailers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: x-req-sum\r\n\
          TE: trailers\r\nConnection: TE, close\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nx-req-sum: 42\r\n\r\n",
    )
    .await;
    let lower = resp.to_ascii_lowercase();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        lower.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{resp}"
    );
    assert!(lower.contains("\r\ntrailer: x-checksum\r\n"), "{resp}");
    assert!(resp.contains("got 11 bytes; x-req-sum=42\n"), "{resp}");
    assert!(
        resp.ends_with("\r\n0\r\nx-checksum: c0ffee\r\n\r\n"),
        "{resp:?}"
    );
    let seen = up.seen().pop().unwrap();
    assert_eq!(seen.body_len, 11);
    assert_eq!(seen.trailers.unwrap()["x-req-sum"], "42");

    // A client that does not say `TE: trailers` gets the body without them.
    let resp = raw(
        &w,
        b"POST /trailers HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("got 2 bytes; x-req-sum=none\n"), "{resp}");
    assert!(!resp.contains("c0ffee"), "{resp}");
}

#[tokio::test]
async fn trailers_pass_both_ways_over_http2() {
    let up = Upstream::start("up").await;
    let w = proxy_to(&up).await;
    let mut tx = h2c(w.addr).await;
    let req = http::Request::post(format!("http://{}/trailers", w.addr))
        .header("trailer", "x-req-sum")
        .body(())
        .unwrap();
    let (resp, mut send) = tx.send_request(req, false).unwrap();
    send.send_data(Bytes::from_static(b"over h2"), false)
        .unwrap();
    let mut t = http::HeaderMap::new();
    t.insert("x-req-sum", "7".parse().unwrap());
    send.send_trailers(t).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (body, trailers) = h2_read(resp.into_body()).await;
    assert_eq!(body, b"got 7 bytes; x-req-sum=7\n");
    assert_eq!(trailers.expect("no trailers")["x-checksum"], "c0ffee");
    assert_eq!(up.seen().pop().unwrap().trailers.unwrap()["x-req-sum"], "7");
}

/// Reads up to the end of one response head.
async fn read_head(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .expect("no response head in time")
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&buf));
        buf.push(b[0]);
    }
    String::from_utf8(buf).unwrap()
}

async fn read_rest(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("weir kept the connection open")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn expect_100_continue_then_the_upstream_answer() {
    let up = Upstream::start("up").await;
    let w = proxy_to(&up).await;
    // A small body (kept for retries) and a large one (streamed).
    for len in [11usize, 300_000] {
        let mut s = TcpStream::connect(w.addr).await.unwrap();
        s.write_all(
            format!(
                "POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\
                 Expect: 100-continue\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let head = read_head(&mut s).await;
        assert_eq!(head, "HTTP/1.1 100 Continue\r\n\r\n", "{len}");
        s.write_all(&vec![b'x'; len]).await.unwrap();
        let resp = read_head(&mut s).await + &read_rest(&mut s).await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{len}: {resp}");
        assert!(resp.ends_with(&format!("\r\n\r\n{len}")), "{len}: {resp}");
        let seen = up.seen().pop().unwrap();
        assert_eq!(seen.body_len, len);
        assert!(seen.headers.get("expect").is_none(), "{:?}", seen.headers);
    }
}

#[tokio::test]
async fn an_upstream_refusing_the_body_is_answered_through() {
    let up = Upstream::start("up").await;
    let w = proxy_to(&up).await;
    for len in [11usize, 5_000_000] {
        let mut s = TcpStream::connect(w.addr).await.unwrap();
        s.write_all(
            format!(
                "POST /reject HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\
                 Expect: 100-continue\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut head = read_head(&mut s).await;
        if head.starts_with("HTTP/1.1 100 ") {
            // weir asked for the body: send it (weir may stop reading it
            // once the answer is in, so errors are expected).
            let body = vec![b'x'; len];
            let _ = tokio::time::timeout(Duration::from_secs(5), s.write_all(&body)).await;
            head = read_head(&mut s).await;
        }
        let body = read_rest(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{len}: {head}");
        assert_eq!(body, "rejected by upstream\n", "{len}: {head}");
    }
}

/// Uploads of every framing pipelined on one connection reach the upstream
/// whole and in order, with a chunked body's trailers.
#[tokio::test]
async fn pipelined_posts_reach_the_upstream_whole_and_in_order() {
    let up = Upstream::start("up").await;
    let w = proxy_to(&up).await;
    let resp = raw(
        &w,
        b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
          POST /trailers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: x-req-sum\r\n\r\n\
          3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nx-req-sum: 9\r\n\r\n\
          POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .await;
    assert_eq!(resp.matches("HTTP/1.1 200").count(), 3, "{resp}");
    let first = resp.find("\r\n\r\n5").expect("the first answer");
    let second = resp
        .find("got 7 bytes; x-req-sum=9")
        .expect("the second answer");
    assert!(first < second && resp.ends_with("\r\n\r\n2"), "{resp}");
    let seen = up.seen();
    let lens: Vec<usize> = seen[seen.len() - 3..].iter().map(|s| s.body_len).collect();
    assert_eq!(lens, [5, 7, 2]);
}

/// An upstream on a bare socket that records the bytes of one request and
/// answers with `answer` once `until` has arrived.
async fn bare_upstream(
    answer: &'static [u8],
    until: &'static [u8],
) -> (std::net::SocketAddr, tokio::task::JoinHandle<Vec<u8>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while !got.windows(until.len()).any(|w| w == until) {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b))
                .await
                .expect("the request in time")
                .unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
        s.write_all(answer).await.unwrap();
        // Closing with the rest of a body unread resets the connection.
        got
    });
    (addr, task)
}

/// weir's own client sends a chunked upload on as chunks, with the
/// trailers the request declared, and nothing it did not declare.
#[tokio::test]
async fn a_chunked_upload_reaches_the_upstream_chunked_with_its_trailers() {
    let (addr, got) = bare_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        b"\r\n0\r\nx-sum: 42\r\n\r\n",
    )
    .await;
    let w = Weir::start(
        WEIR,
        &format!("[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{addr}\"], retries = 0 }}\n"),
    );
    let resp = raw(
        &w,
        b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\nConnection: close\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 42\r\nx-other: 1\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let got = String::from_utf8(got.await.unwrap()).unwrap();
    let lower = got.to_ascii_lowercase();
    assert!(
        lower.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{got}"
    );
    assert!(!lower.contains("content-length"), "{got}");
    let body = &got[got.find("\r\n\r\n").unwrap() + 4..];
    assert!(body.contains("hello") && body.contains(" world"), "{got:?}");
    assert!(body.ends_with("\r\n0\r\nx-sum: 42\r\n\r\n"), "{got:?}");
    assert!(!body.contains("x-other"), "{got:?}");
}

/// An upstream that answers 413 as soon as it has the head, never reading
/// the 4 MiB body: the client gets the 413, not a 502, and the next
/// request on a fresh connection works.
#[tokio::test]
async fn an_upstream_answering_413_before_the_body_is_passed_on() {
    let (addr, got) = bare_upstream(
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large",
        b"\r\n\r\n",
    )
    .await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server.limits]\nbody = \"64MiB\"\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{addr}\"], retries = 0 }}\n"
        ),
    );
    let len = 4 * 1024 * 1024;
    let mut s = TcpStream::connect(w.addr).await.unwrap();
    s.write_all(
        format!(
            "PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // weir may stop reading the body once the answer is in.
    let body = vec![b'b'; len];
    let _ = tokio::time::timeout(Duration::from_secs(5), s.write_all(&body)).await;
    let resp = read_head(&mut s).await + &read_rest(&mut s).await;
    assert!(resp.starts_with("HTTP/1.1 413"), "{resp}");
    assert!(resp.ends_with("too large"), "{resp}");
    got.await.unwrap();
}

async fn proxy_with_body_timeout(up: &Upstream) -> Weir {
    Weir::start(
        WEIR,
        &format!(
            "[server.timeouts]\nbody = \"1s\"\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], retries = 0 }}\n",
            up.addr
        ),
    )
}

/// A client that stops in the middle of a body (the slow-POST attack) gets
/// 408 after `server.timeouts.body` and the connection closes; one that
/// trickles its body with shorter pauses is served, however long it takes.
#[tokio::test]
async fn a_stalled_request_body_gets_408_and_a_trickling_one_is_served() {
    let up = Upstream::start("up").await;
    let w = proxy_with_body_timeout(&up).await;

    let mut s = TcpStream::connect(w.addr).await.unwrap();
    s.write_all(b"POST /stall HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let head = read_head(&mut s).await;
    let waited = t0.elapsed();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(waited >= Duration::from_millis(900), "408 after {waited:?}");
    let rest = read_rest(&mut s).await;
    assert_eq!(
        rest,
        "408 Request Timeout: the request body stopped arriving\n"
    );

    // Ten pieces 400 ms apart: 4 s in all, each pause under the 1 s limit.
    let mut s = TcpStream::connect(w.addr).await.unwrap();
    s.write_all(
        b"POST /trickle HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    for i in 0..10u8 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.write_all(&[b'0' + i]).await.unwrap();
    }
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen = up.seen();
    let trickled = seen.iter().find(|r| r.uri == "/trickle").expect("trickle");
    assert_eq!(trickled.body_len, 10);
}

/// The same limit holds a stream of an HTTP/2 connection: 408 on it.
#[tokio::test]
async fn a_stalled_http2_request_body_gets_408() {
    let up = Upstream::start("up").await;
    let w = proxy_with_body_timeout(&up).await;
    let mut tx = h2c(w.addr).await;
    let req = http::Request::post(format!("http://{}/stall", w.addr))
        .body(())
        .unwrap();
    let (resp, mut send) = tx.send_request(req, false).unwrap();
    send.send_data(Bytes::from_static(b"half of it"), false)
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    assert_eq!(resp.status(), 408);
    let (body, _) = h2_read(resp.into_body()).await;
    assert_eq!(
        body,
        b"408 Request Timeout: the request body stopped arriving\n"
    );
}
