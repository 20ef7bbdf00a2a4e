//! Requests that could smuggle a second request past weir: each is sent as
//! raw bytes through the real binary; weir must answer 400 and close, and
//! the upstream must never see anything.

use std::time::Duration;

use weir_test_support::proxy::{Upstream, Weir, raw};

use crate::WEIR;

const CASES: &[(&str, &[u8])] = &[
    ("CL and TE", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("TE and CL", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("TE not final chunked", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
    ("TE gzip, chunked", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
    ("TE case", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n"),
    ("TE space before colon", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
    ("TE tab", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\t,\r\n\r\n0\r\n\r\n"),
    ("TE tab and list", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \tchunked, identity\r\n\r\n0\r\n\r\n"),
    ("TE vertical tab", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n"),
    ("TE twice", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("TE identity", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc"),
    ("TE on HTTP/1.0", b"POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("CL twice same", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"),
    ("CL twice different", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc"),
    ("CL list", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc"),
    ("CL sign", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc"),
    ("CL hex", b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc"),
    ("bad chunk size", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
    ("chunk size overflow", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff1\r\nabc\r\n0\r\n\r\n"),
    ("chunk ext with space", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3 ; x\r\nabc\r\n0\r\n\r\n"),
    ("negative chunk size", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n"),
    ("chunk size of 17 digits", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\nabc\r\n0\r\n\r\n"),
    ("bare LF after chunk size", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n"),
    ("bare LF", b"GET /a HTTP/1.1\nHost: x\n\n"),
    ("bare LF in one header", b"GET /a HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n"),
    ("bare CR", b"GET /a HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n"),
    ("obs-fold", b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
    ("obs-fold of TE", b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
    ("invalid header name", b"GET /a HTTP/1.1\r\nHost: x\r\nX(A): b\r\n\r\n"),
    ("space in header name", b"GET /a HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n"),
    ("empty header name", b"GET /a HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n"),
];

/// weir proxying to one recording upstream.
async fn proxied() -> (Upstream, Weir) {
    let up = Upstream::start("up").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            up.addr
        ),
    );
    (up, w)
}

#[tokio::test]
async fn smuggling_attempts_get_400_and_close_and_never_reach_the_upstream() {
    let (up, w) = proxied().await;
    // Control: a clean request reaches the upstream.
    let ok = raw(
        &w,
        b"GET /clean HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert_eq!(up.count(), 1);
    let mut failures = Vec::new();
    for (name, req) in CASES {
        let resp = raw(&w, req).await;
        if !resp.starts_with("HTTP/1.1 400") {
            failures.push(format!("{name}: {:?}", resp.lines().next()));
        }
        if up.count() != 1 {
            failures.push(format!(
                "{name}: reached the upstream: {:?}",
                up.seen().last()
            ));
            up.seen.lock().unwrap().truncate(1);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn a_smuggled_second_request_after_a_clean_one_is_refused() {
    let (up, w) = proxied().await;
    let resp = raw(
        &w,
        b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nokGET /second HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
    // The first request is answered, then the connection ends with a 400;
    // the smuggled one never reaches the upstream.
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("HTTP/1.1 400"), "{resp}");
    // A window for a smuggled request to reach the upstream: an absence
    // cannot be polled for.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen: Vec<String> = up.seen().iter().map(|s| s.uri.clone()).collect();
    assert!(seen.iter().all(|u| u == "/first"), "{seen:?}");
}

/// A chunk whose data does not end in CRLF, after a first chunk that was
/// good: the request may already be on its way upstream (its body
/// streams), but it is cut off there, the client gets 400 and the
/// connection closes, and nothing after the fault reaches the upstream.
#[tokio::test]
async fn a_chunk_without_its_crlf_mid_body_gets_400_and_nothing_after_it_goes_upstream() {
    let (up, w) = proxied().await;
    let resp = raw(
        &w,
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(!resp.contains("HTTP/1.1 200"), "{resp}");
    // A window for a smuggled request to reach the upstream: an absence
    // cannot be polled for.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen: Vec<String> = up.seen().iter().map(|s| s.uri.clone()).collect();
    assert!(seen.iter().all(|u| u == "/a"), "{seen:?}");
}

/// An HTTP/2 request whose framing fields an HTTP/1.1 upstream could read
/// two ways (two Content-Length values) gets the same strict reading at the
/// proxy as an HTTP/1 head: 400, and nothing reaches the upstream.
#[tokio::test]
async fn an_http2_request_with_two_lengths_never_reaches_the_upstream() {
    let (up, w) = proxied().await;
    // h2c with prior knowledge.
    let tcp = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut h2 = h2.ready().await.unwrap();
    let send = |h2: &mut h2::client::SendRequest<bytes::Bytes>, path: &str, lengths: &[&str]| {
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{path}", w.addr));
        for l in lengths {
            req = req.header("content-length", *l);
        }
        let (resp, mut body) = h2.send_request(req.body(()).unwrap(), false).unwrap();
        body.send_data(bytes::Bytes::from_static(b"abc"), true)
            .unwrap();
        resp
    };
    // Control: a clean request reaches the upstream.
    let ok = send(&mut h2, "/clean", &["3"]).await.unwrap();
    assert_eq!(ok.status(), 200);
    let resp = send(&mut h2, "/two-lengths", &["3", "3"]).await.unwrap();
    assert_eq!(resp.status(), 400);
    let seen: Vec<String> = up.seen().iter().map(|s| s.uri.clone()).collect();
    assert_eq!(seen, ["/clean"]);
}
