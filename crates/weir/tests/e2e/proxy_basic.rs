//! The reverse proxy end to end: the real `weir` binary in front of small
//! hyper upstreams started by the test.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{self, Upstream, Weir, client, scripted_upstream};

use crate::WEIR;

fn two(a: &Upstream, b: &Upstream) -> String {
    format!("[\"{}\", \"{}\"]", a.addr, b.addr)
}

#[tokio::test]
async fn smallest_config_balances_round_robin() {
    let (a, b) = (Upstream::start("a").await, Upstream::start("b").await);
    // The smallest proxy config: one site, two upstreams, two lines.
    let cfg = format!(
        "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = {} }}\n",
        two(&a, &b)
    );
    assert!(cfg.lines().count() <= 3);
    let w = Weir::start(WEIR, &format!("[server]\nworkers = 1\n{cfg}"));
    let c = client();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(
            c.get(w.url("/"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    assert_eq!(got, ["a", "b", "a", "b"]);
}

#[tokio::test]
async fn forwarding_headers_and_hop_by_hop_both_ways() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr
        ),
    );
    let r = client()
        .get(w.url("/hop?x=1"))
        .header("connection", "x-private")
        .header("x-private", "hidden")
        .header("x-forwarded-for", "6.6.6.6")
        .header("keep-alive", "timeout=1")
        .header("proxy-connection", "keep-alive")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Response: hop-by-hop from the upstream removed, Via added.
    assert!(r.headers().get("x-hop").is_none(), "{:?}", r.headers());
    assert!(r.headers().get("keep-alive").is_none());
    assert_eq!(r.headers()["via"], "1.1 weir");
    let seen = a.seen().pop().unwrap();
    let h = &seen.headers;
    assert_eq!(seen.uri, "/hop?x=1");
    assert!(h.get("x-private").is_none(), "{h:?}");
    assert!(h.get("keep-alive").is_none());
    assert!(h.get("proxy-connection").is_none());
    // Direct mode: the client's own X-Forwarded-For is not believed.
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    let host = format!("{}", w.addr);
    assert_eq!(h["x-forwarded-host"], host.as_str());
    assert_eq!(h["host"], host.as_str());
    assert_eq!(
        h["forwarded"].to_str().unwrap(),
        format!("for=127.0.0.1;host=\"{host}\";proto=http")
    );
    assert_eq!(h["via"], "1.1 weir");
}

/// weir reuses the tables of parsed header maps from one message to the
/// next (`header_maps`): no field of one request or response may show up
/// in a later one on the same connections.
#[tokio::test]
async fn fields_never_carry_over_to_the_next_message() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr
        ),
    );
    let c = client();
    for i in 0..40u32 {
        let with = i % 2 == 0;
        let mut req = c.get(w.url(&if with {
            format!("/field/{i}")
        } else {
            "/".into()
        }));
        if with {
            req = req.header("x-req", i.to_string());
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200);
        let field = r
            .headers()
            .get("x-field")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            field,
            with.then(|| i.to_string()),
            "response {i}: {:?}",
            r.headers()
        );
        assert_eq!(r.headers().get_all("server").iter().count(), 1);
        for name in ["x-req", "host", "accept"] {
            assert!(
                !r.headers().contains_key(name),
                "response {i}: {:?}",
                r.headers()
            );
        }
        let seen = a.seen().pop().unwrap();
        let got = seen
            .headers
            .get("x-req")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            got,
            with.then(|| i.to_string()),
            "request {i}: {:?}",
            seen.headers
        );
        assert_eq!(seen.headers.get_all("host").iter().count(), 1);
        assert_eq!(seen.headers.get_all("x-forwarded-for").iter().count(), 1);
        for name in ["x-field", "content-length", "server"] {
            assert!(
                !seen.headers.contains_key(name),
                "request {i}: {:?}",
                seen.headers
            );
        }
    }
    assert_eq!(a.count(), 40);
}

#[tokio::test]
async fn trusted_proxies_keep_the_chain_and_host_is_rewritten() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], trusted_proxies = [\"127.0.0.0/8\"], host = \"upstream\" }}\n",
            a.addr
        ),
    );
    client()
        .get(w.url("/"))
        .header("x-forwarded-for", "203.0.113.9")
        .header("forwarded", "for=203.0.113.9")
        .send()
        .await
        .unwrap();
    let h = a.seen().pop().unwrap().headers;
    assert_eq!(h["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert!(
        h["forwarded"]
            .to_str()
            .unwrap()
            .starts_with("for=203.0.113.9, for=127.0.0.1")
    );
    assert_eq!(h["host"].to_str().unwrap(), a.addr.to_string());
}

#[tokio::test]
async fn routes_proxy_a_prefix_and_serve_the_rest_from_root() {
    let a = Upstream::start("api").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{{DIR}}\"\n\
         [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/api/*\"\nstrip_prefix = true\nproxy = {{ to = [\"{}\"] }}\n\
         [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/old/*\"\nrewrite = \"/new/\"\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr, a.addr
        ),
    );
    std::fs::write(w.path().join("index.html"), "static page").unwrap();
    let c = client();
    assert_eq!(
        c.get(w.url("/"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "static page"
    );
    assert_eq!(
        c.get(w.url("/api/users?id=3"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "api"
    );
    assert_eq!(a.seen().pop().unwrap().uri, "/users?id=3");
    c.get(w.url("/api")).send().await.unwrap();
    assert_eq!(a.seen().pop().unwrap().uri, "/");
    c.get(w.url("/old/x")).send().await.unwrap();
    assert_eq!(a.seen().pop().unwrap().uri, "/new/x");
    assert_eq!(c.get(w.url("/apix")).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn bodies_stream_both_ways() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server.limits]\nbody = \"64MiB\"\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr
        ),
    );
    let c = client();
    // Content-Length body, echoed.
    let data = vec![7u8; 3 * 1024 * 1024 + 17];
    let r = c
        .post(w.url("/echo"))
        .body(data.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), &data[..]);
    // Chunked body (a stream of unknown length).
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..64).map(|i| Ok(vec![i as u8; 10_000])).collect();
    let r = c
        .post(w.url("/count"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "640000");
    // Small body, buffered for retries, arrives intact with its length.
    let r = c.put(w.url("/count")).body("hello").send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "5");
    assert_eq!(a.seen().pop().unwrap().headers["content-length"], "5");
}

#[tokio::test]
async fn upstream_connections_are_kept_alive() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr
        ),
    );
    let c = client();
    for _ in 0..20 {
        assert_eq!(c.get(w.url("/")).send().await.unwrap().status(), 200);
    }
    assert_eq!(a.conns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn idle_upstream_connections_expire() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], idle_timeout = \"100ms\" }}\n",
            a.addr
        ),
    );
    let c = client();
    c.get(w.url("/")).send().await.unwrap();
    // Waiting out the idle timeout is the scenario; expiry is judged by age
    // at checkout, so a slow machine only makes the wait longer.
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.get(w.url("/")).send().await.unwrap();
    assert_eq!(a.conns.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn errors_map_to_502_503_504() {
    let dead = free_port();
    let slow = Upstream::start("slow").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\ndefault = true\nproxy = {{ to = [\"127.0.0.1:{dead}\"], retries = 0, passive = {{ failures = 0 }} }}\n\
         [site.\"slow.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nproxy = {{ to = [\"{}\"], response_timeout = \"200ms\" }}\n\
         [site.\"busy.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\nproxy = {{ to = [\"{}\"], max_conns = 1, queue = 0 }}\n",
            slow.addr, slow.addr
        ),
    );
    let c = client();
    let r = c.get(w.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let r = c
        .get(w.url("/slow/2000"))
        .header("host", "slow.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    // max_conns = 1 with no queue: a second concurrent request gets 503.
    let first = c.get(w.url("/slow/500")).header("host", "busy.test").send();
    let second = async {
        // Sent once the first holds the only slot (its upstream sleeps 500 ms).
        let first_upstream = async || slow.seen().iter().any(|s| s.uri == "/slow/500");
        assert!(
            poll_until_async(PATIENCE, first_upstream).await,
            "the first request never reached the upstream"
        );
        c.get(w.url("/"))
            .header("host", "busy.test")
            .send()
            .await
            .unwrap()
    };
    let (r1, r2) = tokio::join!(first, second);
    assert_eq!(r1.unwrap().status(), 200);
    assert_eq!(r2.status(), 503);
    assert!(r2.text().await.unwrap().contains("busy"));
}

/// One upstream connection serves every request here (`max_conns = 1`):
/// its response timer, kept from request to request, gives each its whole
/// `response_timeout` from its own start, also after it fired while idle.
#[tokio::test]
async fn response_timeout_holds_on_a_reused_connection() {
    let slow = Upstream::start("slow").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], max_conns = 1, retries = 0, response_timeout = \"400ms\" }}\n",
            slow.addr
        ),
    );
    let c = client();
    let get = |path: &'static str| {
        let c = c.clone();
        let url = w.url(path);
        async move { c.get(url).send().await.unwrap().status() }
    };
    assert_eq!(get("/slow/100").await, 200);
    // Idle past the first request's deadline: the wait is the scenario.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(get("/slow/250").await, 200);
    assert_eq!(get("/slow/300").await, 200);
    let start = std::time::Instant::now();
    assert_eq!(get("/slow/3000").await, 504);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(380) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    assert_eq!(get("/slow/10").await, 200);
}

#[tokio::test]
async fn queue_waits_for_a_free_slot() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"], max_conns = 1, queue = 4, queue_timeout = \"2s\" }}\n",
            a.addr
        ),
    );
    let c = client();
    let reqs = (0..4).map(|_| c.get(w.url("/slow/100")).send());
    for r in futures_util::future::join_all(reqs).await {
        assert_eq!(r.unwrap().status(), 200);
    }
}

#[tokio::test]
async fn reverse_proxy_command() {
    let a = Upstream::start("a").await;
    let port = free_port();
    let from = format!("127.0.0.1:{port}");
    let to = a.addr.to_string();
    let w = Weir::start_args(WEIR, &["reverse-proxy", "--from", &from, "--to", &to], port);
    let r = client().get(w.url("/x")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "a");
}

#[tokio::test]
async fn server_sent_events_are_not_buffered() {
    let a = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            a.addr
        ),
    );
    let mut r = client().get(w.url("/sse")).send().await.unwrap();
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = std::time::Instant::now();
    assert_eq!(&first[..], b"data: 0\n\n");
    let mut rest = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert_eq!(rest, b"data: 1\n\ndata: 2\n\n");
    // The upstream sends the three events 300 ms apart: passed on as they
    // come, the first arrives well before the last (buffered, together).
    // Measured between arrivals, so a slow machine delays both ends.
    assert!(
        first_at.elapsed() >= Duration::from_millis(200),
        "the first event came {:?} before the end",
        first_at.elapsed()
    );
}

/// weir's HTTP/1.1 upstream client passes on the response shapes an
/// upstream can send: chunked with trailers and extensions, 1xx before the
/// answer, a body until close, HTTP/1.0, a custom reason, hop-by-hop fields,
/// `Connection: close`; and answers 502 to what cannot be framed (a bad
/// length) or never came.
#[tokio::test]
async fn own_upstream_client_passes_every_response_shape_on() {
    let up = scripted_upstream().await.addr;
    let own = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"], retries = 0, passive = {{ failures = 0 }} }}\n"
        ),
    );
    let mut cases = Vec::new();
    for path in [
        "/chunked",
        "/early",
        "/until-close",
        "/http10",
        "/both",
        "/bad-length",
        "/nothing",
        "/reason",
        "/hop",
        "/close",
        "/cut",
        "/empty",
    ] {
        cases.push(format!(
            "GET {path} HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nConnection: close\r\n\r\n"
        ));
    }
    // And what they answer is right.
    let r = proxy::raw(&own, cases[0].as_bytes()).await;
    assert!(
        r.contains("\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n"),
        "{r}"
    );
    let r = proxy::raw(&own, cases[2].as_bytes()).await;
    assert!(
        r.contains("\r\n13\r\nall until the close\r\n0\r\n\r\n"),
        "{r}"
    );
    for i in [5, 6] {
        let r = proxy::raw(&own, cases[i].as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 502 "), "{}: {r}", cases[i]);
    }
    let r = proxy::raw(&own, cases[8].as_bytes()).await;
    assert!(
        !r.contains("secret") && !r.contains("keep-alive") && r.ends_with("hop"),
        "{r}"
    );
    // A repeated trailer field reaches the client with every value.
    let r = proxy::raw(
        &own,
        b"GET /trailer-twice HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        r.ends_with("\r\n2\r\nok\r\n0\r\nx-sum: 1\r\nx-sum: 2\r\n\r\n"),
        "{r}"
    );
}

/// A worker keeps as many idle upstream connections as it had requests in
/// flight: 100 requests at once, four times over, need 100 upstream
/// connections, not new ones each time (with the old cap of 64 idle per
/// worker, each round after the first opened 36 more).
#[tokio::test]
async fn a_worker_keeps_an_idle_connection_for_each_request_it_had_in_flight() {
    let up = Upstream::start("a").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n",
            up.addr
        ),
    );
    let c = client();
    for round in 0..4 {
        // Each request waits 300 ms at the upstream, so all 100 are in flight at once.
        let all = (0..100).map(|_| {
            let c = c.clone();
            let url = w.url("/slow/300");
            async move { c.get(url).send().await.unwrap().status() }
        });
        let statuses = futures_util::future::join_all(all).await;
        assert!(
            statuses.iter().all(|s| *s == 200),
            "round {round}: {statuses:?}"
        );
    }
    assert_eq!(up.count(), 400);
    assert_eq!(
        up.conns.load(Ordering::SeqCst),
        100,
        "upstream connections opened over four rounds of 100 requests at once"
    );
}

/// An upstream that closes idle keep-alive connections: the request that
/// finds its pooled connection closed is not lost, and a response cut short
/// or closed never puts its connection back in the pool.
#[tokio::test]
async fn pooled_connections_closed_by_the_upstream_lose_nothing() {
    let scripted = scripted_upstream().await;
    let (up, conns) = (scripted.addr, scripted.conns);
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{up}\"] }}\n"
        ),
    );
    let c = client();
    for _ in 0..5 {
        assert_eq!(c.get(w.url("/reason")).send().await.unwrap().status(), 200);
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "one kept-alive upstream connection"
    );
    // Each of these closes its connection; the next request needs a new one.
    for (path, status, body) in [
        ("/close", 200, "close"),
        ("/http10", 200, "old ok"),
        ("/until-close", 200, "all until the close"),
    ] {
        let r = c.get(w.url(path)).send().await.unwrap();
        assert_eq!(r.status(), status);
        assert_eq!(r.text().await.unwrap(), body);
        assert_eq!(
            c.get(w.url("/reason"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
            "ok"
        );
    }
    assert_eq!(conns.load(Ordering::SeqCst), 4);
    // A body cut short reaches the client as an error, not as a complete body.
    assert!(
        c.get(w.url("/cut"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .is_err()
    );
    assert_eq!(c.get(w.url("/reason")).send().await.unwrap().status(), 200);
}
