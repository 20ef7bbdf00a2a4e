//! The plain-proxy lane (`proxy::plain`: a GET or HEAD on weir's own
//! HTTP/1.1 loop, proxied from bytes to bytes) against the general path it
//! stands in for: the same request goes upstream, the same response comes
//! back, and a failed first attempt is retried the same way.
//!
//! The general path is the same proxy with `max_conns` set, which the lane
//! does not take (a queue slot is the general path's) and which changes
//! nothing in what is sent.
//!
//! Over HTTPS too: there the listener offers HTTP/3 (`Alt-Svc`, on by
//! default), which the lane adds to every response itself.

use weir_test_support::certs::make_cert;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Scripted, Upstream, Weir, raw, scripted_upstream};
use weir_test_support::tls;

use crate::WEIR;

fn start(up: std::net::SocketAddr, lane: bool, extra: &str) -> Weir {
    let limit = if lane { "" } else { ", max_conns = 1000" };
    Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"], retries = 0, passive = {{ failures = 0 }}{limit}{extra} }}\n"
        ),
    )
}

/// Two scripted upstreams, one behind the lane and one behind the general
/// path.
async fn pair() -> (Scripted, Weir, Scripted, Weir) {
    let (lane_up, general_up) = (scripted_upstream().await, scripted_upstream().await);
    let lane = start(lane_up.addr, true, "");
    let general = start(general_up.addr, false, "");
    (lane_up, lane, general_up, general)
}

/// Date lines aside (weir's own date may fall in another second).
fn without_date(s: String) -> String {
    s.split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Two requests for `path` on one connection: the second finds the
/// upstream connection the first left in the pool, which the lane needs.
fn twice(method: &str, path: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: a\r\n\r\n{method} {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn the_lane_answers_every_response_shape_as_the_general_path() {
    let (_, lane, _, general) = pair().await;
    let paths = [
        "/reason",
        "/no-reason",
        "/hop",
        "/server-via",
        "/not-modified",
        "/no-content",
        "/zero",
        "/alt-svc",
        "/mixed",
        "/same-length",
        "/http10-keep",
        "/big",
        "/early",
        "/chunked",
        "/until-close",
        "/close",
        "/bad-length",
        "/cut",
        "/other",
    ];
    let mut cases = Vec::new();
    for p in paths {
        cases.push(twice("GET", p));
        cases.push(twice("HEAD", p));
    }
    for case in &cases {
        let a = without_date(raw(&lane, case.as_bytes()).await);
        let b = without_date(raw(&general, case.as_bytes()).await);
        assert!(b.starts_with("HTTP/1.1 "), "no answer to {case:?}: {b}");
        assert_eq!(a, b, "answers differ for {case:?}");
    }
    // And what the lane answers is right.
    let r = raw(&lane, twice("GET", "/server-via").as_bytes()).await;
    let second = &r[r.rfind("HTTP/1.1 200").unwrap()..];
    assert!(
        second.starts_with(
            "HTTP/1.1 200 OK\r\nserver: weir\r\nvia: 1.0 cache-a, 1.1 cache-b, 1.1 weir\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\ndate: "
        ),
        "{second}"
    );
    assert!(second.ends_with("\r\n\r\nsv"), "{second}");
    let r = raw(&lane, twice("GET", "/hop").as_bytes()).await;
    assert!(
        !r.contains("secret") && !r.contains("eep-alive") && r.ends_with("hop"),
        "{r}"
    );
    let r = raw(&lane, twice("GET", "/not-modified").as_bytes()).await;
    assert!(
        !r.contains("content-length") && !r.contains("trailer") && r.contains("etag: \"v1\""),
        "{r}"
    );
    let r = raw(&lane, twice("HEAD", "/big").as_bytes()).await;
    assert_eq!(r.matches("content-length: 100000\r\n").count(), 2, "{r}");
    assert!(r.ends_with("\r\n\r\n"), "HEAD has no body: {r}");
    let r = raw(&lane, twice("GET", "/big").as_bytes()).await;
    assert_eq!(r.matches(&"b".repeat(100_000)).count(), 2);
    let r = raw(&lane, twice("GET", "/zero").as_bytes()).await;
    assert!(
        r.contains(
            "x-before: 1\r\nx-after: 2\r\nvia: 1.1 weir\r\nserver: weir\r\ncontent-length: 0\r\n"
        ),
        "{r}"
    );
}

#[tokio::test]
async fn the_lane_sends_upstream_what_the_general_path_sends() {
    let (lane_up, lane, general_up, general) = pair().await;
    let lean_up = scripted_upstream().await;
    let lean = start(lean_up.addr, true, ", forwarded = false, via = false");
    let requests = [
        "GET /r1?q=1&x=%20 HTTP/1.1\r\nHost: example.test:8080\r\nUser-Agent: t/1\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=6.6.6.6\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\nAccept: */*\r\nX-Dup: 1\r\nx-dup: 2\r\n\r\n",
        "HEAD /r2 HTTP/1.1\r\nhost: b\r\nVia: 1.0 other\r\n\r\n",
        "GET /r3 HTTP/1.1\r\nHost:\r\nX-No-Host: 1\r\n\r\n",
        "GET /r4 HTTP/1.1\r\nHost: c\r\nTE: trailers\r\n\r\n",
        "GET /r5 HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
    ];
    for r in requests {
        // Twice on one connection, the second through the lane.
        let close = r.contains("Connection: close");
        let both = if close {
            format!("{}{r}", r.replace("Connection: close\r\n", ""))
        } else {
            format!(
                "{r}{}",
                r.replacen("\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
            )
        };
        for w in [&lane, &general, &lean] {
            let answer = raw(w, both.as_bytes()).await;
            assert_eq!(
                answer.matches("HTTP/1.1 204").count(),
                2,
                "{both:?}: {answer}"
            );
        }
    }
    // Each upstream's own address (the Host without a client's) as one.
    let heads = |s: &Scripted| {
        let own = s.addr.to_string();
        s.heads
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.replace(&own, "UPSTREAM"))
            .collect::<Vec<_>>()
    };
    let (a, b) = (heads(&lane_up), heads(&general_up));
    assert_eq!(a.len(), 2 * requests.len());
    assert_eq!(a, b);
    // What the first one looked like: the client's forwarding claims and
    // hop-by-hop fields gone, weir's own added.
    assert_eq!(
        a[1],
        "GET /r1?q=1&x=%20 HTTP/1.1\r\nhost: example.test:8080\r\nuser-agent: t/1\r\naccept: */*\r\nx-dup: 1\r\nx-dup: 2\r\nx-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: example.test:8080\r\nforwarded: for=127.0.0.1;host=\"example.test:8080\";proto=http\r\nvia: 1.1 weir"
    );
    assert!(
        a[5].starts_with("GET /r3 HTTP/1.1\r\nhost: UPSTREAM\r\n"),
        "{}",
        a[5]
    );
    let lean = heads(&lean_up);
    assert_eq!(
        lean[1],
        "GET /r1?q=1&x=%20 HTTP/1.1\r\nhost: example.test:8080\r\nuser-agent: t/1\r\naccept: */*\r\nx-dup: 1\r\nx-dup: 2\r\nx-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: example.test:8080"
    );
    // Without weir's Via, the client's goes on as it was.
    assert!(lean[3].contains("\r\nvia: 1.0 other"), "{}", lean[3]);
    // No Host: none forwarded but the upstream's own.
    assert!(!lean[5].contains("x-forwarded-host"), "{}", lean[5]);
}

/// A pooled connection that fails under the lane's first attempt (the
/// upstream closes it without an answer) is retried as the general path
/// retries: on a new connection, then on the next upstream, with the retry
/// logged.
#[tokio::test]
async fn a_failed_first_attempt_goes_on_like_the_general_path() {
    let x = scripted_upstream().await;
    let y = Upstream::start("y").await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\", \"{}\"], balance = \"first\", retries = 1, passive = {{ failures = 0 }} }}\n",
            x.addr, y.addr
        ),
    );
    let r = raw(
        &w,
        b"GET /warm HTTP/1.1\r\nHost: a\r\n\r\nGET /nothing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 204 No Content\r\n"), "{r}");
    let second = &r[r.rfind("HTTP/1.1 ").unwrap()..];
    assert!(
        second.starts_with("HTTP/1.1 200 OK\r\n") && second.ends_with("\r\n\r\ny"),
        "{r}"
    );
    let paths = |s: &Scripted| {
        s.heads
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.split(' ').nth(1).unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // The pooled connection, a new one, then the other upstream.
    assert_eq!(paths(&x), ["/warm", "/nothing", "/nothing"]);
    assert_eq!(y.count(), 1);
    let log = w.log();
    assert!(
        log.contains(&format!("proxy: {}: ", x.addr))
            && log.contains(&format!("retrying on {}", y.addr)),
        "{log}"
    );
}

/// Sends `req` over TLS (HTTP/1.1) to `port` and reads until weir closes.
async fn tls_raw(port: u16, ca: &str, req: &[u8]) -> String {
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cfg = tls::client_config(tls::roots_from_pem(ca.as_bytes()), &[b"http/1.1"]);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = ServerName::try_from("a.test").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let read = async {
        let mut b = [0u8; 16384];
        while let Ok(n @ 1..) = s.read(&mut b).await {
            out.extend_from_slice(&b[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), read)
        .await
        .expect("weir kept the connection open");
    String::from_utf8_lossy(&out).into_owned()
}

/// Over HTTPS, where the listener offers HTTP/3, the lane answers as the
/// general path does: weir's `Alt-Svc` on every response, in place of an
/// upstream's (the first line of them; the others dropped), else after
/// `Server`.
#[tokio::test]
async fn over_https_the_lane_adds_alt_svc_as_the_general_path() {
    tls::install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = make_cert(dir.path(), "a", &["a.test"]);
    let start = |up: std::net::SocketAddr, lane: bool| {
        let port = free_port();
        let limit = if lane { "" } else { ", max_conns = 1000" };
        let sub = dir.path().join(format!("w{port}"));
        std::fs::create_dir(&sub).unwrap();
        let cfg = format!(
            "[site.\"a.test\"]\nlisten = \"127.0.0.1:{port}\"\n\
             tls = {{ cert = \"{}\", key = \"{}\" }}\n\
             proxy = {{ to = [\"{up}\"], retries = 0{limit} }}\n",
            cert.display(),
            key.display()
        );
        (tls::Weir::start_debug(WEIR, &sub, &cfg, port), port)
    };
    let (lane_up, general_up) = (scripted_upstream().await, scripted_upstream().await);
    let (_lane, lane_port) = start(lane_up.addr, true);
    let (_general, general_port) = start(general_up.addr, false);
    for p in [
        "/alt-svc",
        "/server-via",
        "/zero",
        "/not-modified",
        "/chunked",
        "/big",
    ] {
        for m in ["GET", "HEAD"] {
            let case = twice(m, p);
            let a = tls_raw(lane_port, &ca, case.as_bytes()).await;
            let b = tls_raw(general_port, &ca, case.as_bytes()).await;
            assert!(b.starts_with("HTTP/1.1 "), "no answer to {case:?}: {b}");
            // Each names its own UDP port.
            let a = without_date(a.replace(&format!(":{lane_port}\""), ":PORT\""));
            let b = without_date(b.replace(&format!(":{general_port}\""), ":PORT\""));
            assert_eq!(a, b, "answers differ for {case:?}");
        }
    }
    let ours = format!("alt-svc: h3=\":{lane_port}\"; ma=86400\r\n");
    let r = tls_raw(lane_port, &ca, twice("GET", "/alt-svc").as_bytes()).await;
    let second = &r[r.rfind("HTTP/1.1 200").unwrap()..];
    assert!(
        second.starts_with(&format!(
            "HTTP/1.1 200 OK\r\n{ours}x-mid: 1\r\ncontent-length: 2\r\nvia: 1.1 weir\r\nserver: weir\r\n"
        )),
        "{second}"
    );
    assert!(!r.contains("h2=") && !r.contains("clear"), "{r}");
    let r = tls_raw(lane_port, &ca, twice("GET", "/zero").as_bytes()).await;
    assert!(
        r.contains(&format!(
            "via: 1.1 weir\r\nserver: weir\r\n{ours}content-length: 0\r\n"
        )),
        "{r}"
    );
    assert_eq!(r.matches(&ours).count(), 2, "{r}");
}
