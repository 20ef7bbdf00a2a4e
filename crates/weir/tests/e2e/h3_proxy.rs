//! HTTP/3 in front of a proxied route, and HTTP/3 at shutdown.
//!
//! A proxied route answers the same over HTTP/3 as over HTTP/1.1 and
//! HTTP/2 (status, content-type, content-length, body bytes; the upstream
//! sees `X-Forwarded-Proto: https` and a `Via` naming the client's protocol),
//! and a request body sent over HTTP/3 reaches the upstream intact.
//!
//! On SIGTERM an idle HTTP/3 connection does not hold the process for the
//! grace period (regression: it used to, for all of it), and a request in
//! flight over HTTP/3 still gets its whole answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::Upstream;
use weir_test_support::tls::*;

use crate::WEIR;

/// weir with a local-CA HTTPS site on `port` proxying to `upstream`; the
/// root certificate to trust.
fn start_proxy(
    dir: &std::path::Path,
    port: u16,
    upstream: SocketAddr,
    grace: &str,
) -> (Weir, Vec<u8>) {
    let storage = dir.join("storage");
    let cfg = format!(
        "[server]\ngrace_period = \"{grace}\"\n[tls]\nstorage = \"{}\"\n\n\
         [site.\"https://localhost:{port}\"]\nproxy = {{ to = [\"{upstream}\"] }}\n",
        storage.display(),
    );
    let weir = Weir::start_debug(WEIR, dir, &cfg, port);
    assert!(
        weir.wait_log("HTTP/3", Duration::from_secs(5)),
        "{}",
        weir.log()
    );
    let root_pem = std::fs::read(storage.join("local-ca/root.pem")).unwrap();
    (weir, root_pem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_matches_h1_and_h2_for_a_proxied_route() {
    install_crypto();
    let up = Upstream::start("up-a").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (_weir, root_pem) = start_proxy(dir.path(), port, up.addr, "10s");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let h1 = reqwest_client(&root_pem, "localhost", addr, false);
    let h2 = reqwest_client(&root_pem, "localhost", addr, true);
    let mut h3 = H3Client::connect(addr, "localhost", roots_from_pem(&root_pem)).await;

    // A fixed-size answer, a 2 MiB streamed one with content-length, and a
    // streamed one of unknown length (server-sent events).
    for path in ["/", "/download/2", "/sse"] {
        let url = format!("https://localhost:{port}{path}");
        let before = up.count();
        let (a, ha) = reqwest_send(&h1, "GET", &url, http::Version::HTTP_11, None).await;
        let (b, hb) = reqwest_send(&h2, "GET", &url, http::Version::HTTP_2, None).await;
        let (c, hc) = h3.request_full("GET", &url, None).await;
        assert_eq!(a.status, 200, "{path}");
        assert_eq!(a, b, "h1 vs h2 for {path}");
        assert_eq!(a, c, "h1 vs h3 for {path}");
        // The response names the hop, with the protocol each client used.
        assert_eq!(ha["via"], "1.1 weir", "{path}");
        assert_eq!(hb["via"], "2 weir", "{path}");
        assert_eq!(hc["via"], "3 weir", "{path}");
        // The upstream saw the three requests as coming over HTTPS.
        let seen = up.seen();
        assert_eq!(seen.len(), before + 3, "{path}");
        for (s, via) in seen[before..].iter().zip(["1.1 weir", "2 weir", "3 weir"]) {
            assert_eq!(s.headers["x-forwarded-proto"], "https", "{path}");
            assert_eq!(s.headers["via"], via, "{path}");
            assert_eq!(s.uri, path, "{path}");
            assert_eq!(s.headers["host"], format!("localhost:{port}").as_str());
        }
    }
    let c = h3
        .request("GET", &format!("https://localhost:{port}/download/2"))
        .await;
    assert_eq!(c.body.len(), 2 * 1024 * 1024);
    assert!(c.body.iter().all(|&b| b == b'x'));
    let c = h3
        .request("GET", &format!("https://localhost:{port}/sse"))
        .await;
    assert_eq!(&c.body[..], b"data: 0\n\ndata: 1\n\ndata: 2\n\n");
    assert!(
        c.headers.iter().all(|(k, _)| k != "content-length"),
        "{c:?}"
    );

    // A POST body through HTTP/3 reaches the upstream byte for byte: echoed
    // back whole, and counted where the upstream reads it.
    let body: Bytes = (0..1_000_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let (r, _) = h3
        .request_full(
            "POST",
            &format!("https://localhost:{port}/echo"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), body.len());
    assert!(r.body == body, "echoed body differs");
    let (r, _) = h3
        .request_full(
            "POST",
            &format!("https://localhost:{port}/count"),
            Some(body.clone()),
        )
        .await;
    assert_eq!((r.status, &r.body[..]), (200, b"1000000".as_slice()));
    let last = up.seen().pop().unwrap();
    assert_eq!((last.method.as_str(), last.body_len), ("POST", 1_000_000));
    assert_eq!(last.headers["x-forwarded-proto"], "https");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h3_connection_does_not_hold_shutdown_for_the_grace_period() {
    install_crypto();
    let up = Upstream::start("up-a").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (mut weir, root_pem) = start_proxy(dir.path(), port, up.addr, "10s");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut h3 = H3Client::connect(addr, "localhost", roots_from_pem(&root_pem)).await;
    let r = h3
        .request("GET", &format!("https://localhost:{port}/"))
        .await;
    assert_eq!((r.status, &r.body[..]), (200, b"up-a".as_slice()));

    // Scenario: the connection stays open and idle; the grace period is 10 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    weir.terminate();
    let st = tokio::task::block_in_place(|| weir.wait_exit(Duration::from_secs(12)));
    let took = t.elapsed();
    let st = st.unwrap_or_else(|| panic!("weir still running:\n{}", weir.log()));
    assert!(st.success(), "{st}:\n{}", weir.log());
    assert!(
        took < Duration::from_secs(3),
        "exit took {took:?} with an idle HTTP/3 client:\n{}",
        weir.log()
    );
    // The client was told: a graceful HTTP/3 close (H3_NO_ERROR), not a timeout.
    let why = tokio::time::timeout(Duration::from_secs(2), h3.conn.closed())
        .await
        .expect("client connection still open after weir exited");
    match why {
        quinn::ConnectionError::ApplicationClosed(c) => {
            assert_eq!(c.error_code, quinn::VarInt::from_u32(0x100), "{c:?}")
        }
        other => panic!("connection ended with {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_request_in_flight_at_sigterm_completes() {
    install_crypto();
    let up = Upstream::start("up-a").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (mut weir, root_pem) = start_proxy(dir.path(), port, up.addr, "10s");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut h3 = H3Client::connect(addr, "localhost", roots_from_pem(&root_pem)).await;
    let url = format!("https://localhost:{port}/slow/1500");
    let req = tokio::spawn(async move {
        let r = h3.request("GET", &url).await;
        (r, h3)
    });
    // SIGTERM once the upstream holds the request.
    let deadline = Instant::now() + Duration::from_secs(5);
    while up.count() == 0 {
        assert!(
            Instant::now() < deadline,
            "request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = Instant::now();
    weir.terminate();
    let (r, _h3) = tokio::time::timeout(Duration::from_secs(8), req)
        .await
        .expect("in-flight request did not complete")
        .unwrap();
    assert_eq!((r.status, &r.body[..]), (200, b"up-a".as_slice()));
    let st = tokio::task::block_in_place(|| weir.wait_exit(Duration::from_secs(12)))
        .unwrap_or_else(|| panic!("weir still running:\n{}", weir.log()));
    assert!(st.success(), "{st}");
    // Held for the request (about 1.5 s), not for the 10 s grace period.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
