//! The cache end to end: the real binary in front of an origin that counts
//! the requests it gets, driven by real clients. What a user relies on:
//! hits that never reach the origin, one origin request for many
//! concurrent misses with every client getting the whole body as it
//! streams, variants kept apart, private answers never shared, purges,
//! grace and stale-if-error, a disk store that survives a restart, and a
//! memory bound that holds.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Weir, client};

use crate::WEIR;

type Body = BoxBody<Bytes, Infallible>;

/// An origin that counts requests by path and answers by path:
/// - `/max60/…`: `Cache-Control: max-age=60`, a body naming the request's number;
/// - `/vary`: `Vary: Accept-Language`, the language in the body;
/// - `/private`, `/nostore`, `/cookie`: answers for one client only;
/// - `/held`: 64 KiB in two halves, the second only once `release` is notified;
/// - `/grace`: fresh for 1 s, then `stale-while-revalidate=30`;
/// - `/error`: fresh for 1 s, `stale-if-error=600`;
/// - `/echo-xfh`: the X-Forwarded-Host it received;
/// - `/size/N/…`: N bytes, cacheable;
/// - `/tagged/T/…`: tagged T with `Surrogate-Key`.
struct Origin {
    addr: std::net::SocketAddr,
    counts: Arc<Mutex<HashMap<String, usize>>>,
    release: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Origin {
    async fn start() -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let counts: Arc<Mutex<HashMap<String, usize>>> = Default::default();
        let release = Arc::new(Notify::new());
        let (c, r) = (counts.clone(), release.clone());
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Default::default();
        let open = conns.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (c, r) = (c.clone(), r.clone());
                let t = tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (c, r) = (c.clone(), r.clone());
                        async move { Ok::<_, Infallible>(answer(req, &c, r).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
                open.lock().unwrap().push(t.abort_handle());
            }
        });
        Origin {
            addr,
            counts,
            release,
            task,
            conns,
        }
    }

    fn count(&self, path: &str) -> usize {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.counts.lock().unwrap().values().sum()
    }

    /// Stops accepting and closes every connection it has.
    fn stop(&self) {
        self.task.abort();
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(b.into()).boxed()
}

async fn answer(
    req: Request<Incoming>,
    counts: &Mutex<HashMap<String, usize>>,
    release: Arc<Notify>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let n = {
        let mut c = counts.lock().unwrap();
        let e = c.entry(path.clone()).or_default();
        *e += 1;
        *e
    };
    let h = |name: &str| {
        req.headers()
            .get(name)
            .map_or("-", |v| v.to_str().unwrap())
            .to_string()
    };
    let mut r = Response::builder().header("x-origin-count", n.to_string());
    let body = if path.starts_with("/max60/") {
        r = r.header("cache-control", "max-age=60");
        full(format!("{path} #{n}"))
    } else if path == "/vary" {
        r = r
            .header("cache-control", "max-age=60")
            .header("vary", "Accept-Language");
        full(format!("lang {}", h("accept-language")))
    } else if path == "/private" {
        r = r.header("cache-control", "private, max-age=60");
        full(format!("private #{n}"))
    } else if path == "/nostore" {
        r = r.header("cache-control", "no-store");
        full(format!("nostore #{n}"))
    } else if path == "/cookie" {
        r = r
            .header("cache-control", "max-age=60")
            .header("set-cookie", format!("session=secret-{n}"));
        full(format!("cookie #{n}"))
    } else if path == "/held" {
        r = r
            .header("cache-control", "max-age=60")
            .header("content-length", "65536");
        let first = Bytes::from(vec![b'a'; 32768]);
        let second = Bytes::from(vec![b'b'; 32768]);
        let s = futures_util::stream::unfold(0, move |i| {
            let (first, second, release) = (first.clone(), second.clone(), release.clone());
            async move {
                match i {
                    0 => Some((Ok(Frame::data(first)), 1)),
                    1 => {
                        release.notified().await;
                        Some((Ok(Frame::data(second)), 2))
                    }
                    _ => None,
                }
            }
        });
        StreamBody::new(s).boxed()
    } else if path == "/grace" {
        r = r.header("cache-control", "max-age=1, stale-while-revalidate=30");
        full(format!("grace #{n}"))
    } else if path == "/error" {
        r = r.header("cache-control", "max-age=1, stale-if-error=600");
        full(format!("error #{n}"))
    } else if path == "/echo-xfh" {
        r = r.header("cache-control", "max-age=60");
        full(format!("xfh {}", h("x-forwarded-host")))
    } else if let Some(rest) = path.strip_prefix("/size/") {
        let len: usize = rest.split('/').next().unwrap().parse().unwrap();
        r = r.header("cache-control", "max-age=600");
        full(vec![b'z'; len])
    } else if let Some(rest) = path.strip_prefix("/tagged/") {
        let tag = rest.split('/').next().unwrap().to_string();
        r = r
            .header("cache-control", "max-age=60")
            .header("surrogate-key", format!("all {tag}"));
        full(format!("{path} #{n}"))
    } else {
        r = r.status(404);
        full("not found")
    };
    r.body(body).unwrap()
}

/// A cached proxy site in front of `origin`; `cache`: more settings of its
/// cache table.
fn site(origin: &Origin, cache: &str) -> String {
    format!(
        "[server]\nworkers = 2\n\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\ncache = {{ purge_from = [\"127.0.0.1\"]{cache} }}\n",
        origin.addr
    )
}

async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, Bytes) {
    let mut r = client().get(url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    (s, h, r.bytes().await.unwrap())
}

/// The admin API's `GET /cache` on port `admin`.
async fn cache_list(admin: u16) -> serde_json::Value {
    let t = client()
        .get(format!("http://127.0.0.1:{admin}/cache"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&t).unwrap()
}

fn cache_status(h: &http::HeaderMap) -> String {
    h.get("cache-status")
        .map_or(String::new(), |v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn a_second_get_is_a_hit_and_purge_makes_it_a_miss() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let (s, h, b) = get(&w.url("/max60/a"), &[]).await;
    assert_eq!((s, &b[..]), (200, &b"/max60/a #1"[..]));
    assert!(cache_status(&h).contains("fwd=miss"), "{h:?}");
    let (s, h, b) = get(&w.url("/max60/a"), &[]).await;
    assert_eq!((s, &b[..]), (200, &b"/max60/a #1"[..]));
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    assert!(h.contains_key("age"));
    assert_eq!(o.count("/max60/a"), 1);
    // HEAD from the stored GET, a client's conditional from the store.
    let r = client().head(w.url("/max60/a")).send().await.unwrap();
    assert_eq!(r.headers()["content-length"], "11");
    assert_eq!(o.count("/max60/a"), 1);

    // PURGE from an allowed address: the next request is a miss.
    let r = client()
        .request(
            http::Method::from_bytes(b"PURGE").unwrap(),
            w.url("/max60/a"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("\"purged\":1"));
    let (_, h, b) = get(&w.url("/max60/a"), &[]).await;
    assert_eq!(&b[..], b"/max60/a #2");
    assert!(cache_status(&h).contains("fwd=miss"));
    o.stop();
}

#[tokio::test]
async fn two_hundred_concurrent_misses_reach_the_origin_once_and_stream() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let url = w.url("/held");
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut r = c.get(&url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            // The first half arrives while the origin still holds the second.
            let mut got = Vec::new();
            while got.len() < 32768 {
                got.extend_from_slice(&r.chunk().await.unwrap().expect("first half"));
            }
            (r, got)
        }));
    }
    // Every client has its first half before the origin sends the rest.
    let mut started = Vec::new();
    for t in tasks {
        started.push(t.await.unwrap());
    }
    assert_eq!(o.count("/held"), 1, "one origin request for 200 misses");
    o.release.notify_one();
    for (mut r, mut got) in started {
        while let Some(c) = r.chunk().await.unwrap() {
            got.extend_from_slice(&c);
        }
        assert_eq!(got.len(), 65536);
        assert!(got[..32768].iter().all(|&b| b == b'a') && got[32768..].iter().all(|&b| b == b'b'));
    }
    let (_, h, b) = get(&url, &[]).await;
    assert_eq!(b.len(), 65536);
    assert!(cache_status(&h).starts_with("weir; hit"));
    assert_eq!(o.count("/held"), 1);
    o.stop();
}

#[tokio::test]
async fn variants_are_kept_apart_and_private_answers_never_shared() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    for lang in ["de", "fr", "de", "fr"] {
        let (_, _, b) = get(&w.url("/vary"), &[("accept-language", lang)]).await;
        assert_eq!(b, format!("lang {lang}"));
    }
    assert_eq!(o.count("/vary"), 2);
    for path in ["/private", "/nostore", "/cookie"] {
        let (_, h1, a) = get(&w.url(path), &[]).await;
        let (_, h2, b) = get(&w.url(path), &[]).await;
        assert_ne!(a, b, "{path}: the second client got the first one's answer");
        assert!(b.ends_with(b"#2"), "{path}");
        assert!(cache_status(&h2).contains("detail="), "{path}: {h2:?}");
        if path == "/cookie" {
            assert_eq!(h1["set-cookie"], "session=secret-1");
            assert_eq!(h2["set-cookie"], "session=secret-2");
        }
    }
    o.stop();
}

#[tokio::test]
async fn unkeyed_headers_never_poison_the_cache() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let host = w.addr.to_string();
    let (_, _, b) = get(&w.url("/echo-xfh"), &[("x-forwarded-host", "evil.example")]).await;
    assert_eq!(
        b,
        format!("xfh {host}"),
        "the origin saw the client's X-Forwarded-Host"
    );
    let (_, _, b) = get(&w.url("/echo-xfh"), &[]).await;
    assert_eq!(b, format!("xfh {host}"));
    o.stop();
}

#[tokio::test]
async fn grace_answers_stale_at_once_and_refreshes_once() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    get(&w.url("/grace"), &[]).await;
    // Once stale (max-age=1), answers come from the stale copy at once...
    let deadline = Instant::now() + Duration::from_secs(10);
    let stale = loop {
        let (_, h, b) = get(&w.url("/grace"), &[]).await;
        if cache_status(&h).contains("stale-while-revalidate") {
            break b;
        }
        assert!(Instant::now() < deadline, "never served stale: {h:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(&stale[..], b"grace #1");
    for _ in 0..5 {
        get(&w.url("/grace"), &[]).await;
    }
    // ... and the origin sees exactly one refresh.
    let deadline = Instant::now() + Duration::from_secs(10);
    while o.count("/grace") < 2 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, h, b) = get(&w.url("/grace"), &[]).await;
    assert_eq!(&b[..], b"grace #2", "{h:?}");
    assert_eq!(o.count("/grace"), 2);
    o.stop();
}

#[tokio::test]
async fn stale_if_error_answers_when_the_origin_is_gone() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ", grace = \"0s\""));
    get(&w.url("/error"), &[]).await;
    o.stop();
    // Past its freshness, the origin down: the stale copy still answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, h, b) = get(&w.url("/error"), &[]).await;
        assert_eq!((s, &b[..]), (200, &b"error #1"[..]), "{h:?}");
        if cache_status(&h).contains("stale-if-error") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served stale-if-error: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn admin_api_lists_purges_tags_and_counts() {
    let o = Origin::start().await;
    let admin = free_port();
    let w = Weir::start(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n{}",
            site(&o, "")
        ),
    );
    for p in ["/tagged/red/1", "/tagged/red/2", "/tagged/blue/1"] {
        let (_, h, _) = get(&w.url(p), &[]).await;
        assert!(!h.contains_key("surrogate-key"), "tags stay inside weir");
        get(&w.url(p), &[]).await;
    }
    let admin_url = |p: &str| format!("http://127.0.0.1:{admin}{p}");
    let list = cache_list(admin).await;
    assert_eq!(list["summary"]["urls"], 3, "{list}");
    assert_eq!(list["summary"]["hits"], 3, "{list}");
    let purge = |body: &'static str| {
        let url = admin_url("/cache/purge");
        async move {
            let r = client()
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
            v["purged"].as_u64().unwrap()
        }
    };
    assert_eq!(purge(r#"{"tag": "red"}"#).await, 2);
    let (_, h, _) = get(&w.url("/tagged/red/1"), &[]).await;
    assert!(cache_status(&h).contains("fwd=miss"));
    let (_, h, _) = get(&w.url("/tagged/blue/1"), &[]).await;
    assert!(cache_status(&h).starts_with("weir; hit"));
    assert_eq!(purge(r#"{"pattern": "/tagged/.*/1$"}"#).await, 2);
    let metrics = client()
        .get(admin_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("weir_cache_requests_total{result=\"hit\"} 4"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_cache_purged_total 4"), "{metrics}");
    o.stop();
}

#[tokio::test]
async fn memory_stays_within_its_bound_while_ten_times_it_flows_through() {
    let o = Origin::start().await;
    let admin = free_port();
    let w = Weir::start(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[cache]\nmemory = \"4MiB\"\n\n{}",
            site(&o, "")
        ),
    );
    let rss_before = w.rss_kib();
    // 40 MiB of distinct 64 KiB responses.
    for i in 0..640 {
        let (s, _, b) = get(&w.url(&format!("/size/65536/{i}")), &[]).await;
        assert_eq!((s, b.len()), (200, 65536));
    }
    let list = cache_list(admin).await;
    let bytes = list["summary"]["bytes"].as_u64().unwrap();
    assert!(
        bytes <= 4 * 1024 * 1024,
        "{bytes} bytes held over the 4 MiB bound"
    );
    assert!(list["summary"]["evictions"].as_u64().unwrap() > 0, "{list}");
    let grown = w.rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 24 * 1024,
        "RSS grew by {grown} KiB for a 4 MiB cache"
    );
    o.stop();
}

#[tokio::test]
async fn reverse_proxy_cache_flag_needs_no_config() {
    let o = Origin::start().await;
    let port = free_port();
    let w = Weir::start_args(
        WEIR,
        &[
            "reverse-proxy",
            "--cache",
            "--from",
            &format!("127.0.0.1:{port}"),
            "--to",
            &o.addr.to_string(),
        ],
        port,
    );
    get(&w.url("/max60/cli"), &[]).await;
    let (_, h, b) = get(&w.url("/max60/cli"), &[]).await;
    assert_eq!(&b[..], b"/max60/cli #1");
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    assert_eq!(o.total(), 1);
    o.stop();
}

#[tokio::test]
async fn a_restart_with_the_disk_store_serves_old_entries_as_hits() {
    let o = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[cache]\ndisk = {{ path = \"store\", size = \"64MiB\" }}\n\n\
             [site.\"127.0.0.1:{port}\"]\nproxy = {{ to = [\"{}\"] }}\ncache = true\n",
            o.addr
        ),
    )
    .unwrap();
    let start = || Weir::start_args(WEIR, &["run", "-c", cfg.to_str().unwrap()], port);
    let disk_urls = || async move {
        cache_list(admin).await["summary"]["disk_urls"]
            .as_u64()
            .unwrap()
    };
    let w = start();
    for p in ["/size/300000/big", "/max60/small"] {
        let (_, h, _) = get(&w.url(p), &[]).await;
        assert!(cache_status(&h).contains("stored"), "{h:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while disk_urls().await < 2 {
        assert!(Instant::now() < deadline, "not written to disk");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(w);

    let w = start();
    let deadline = Instant::now() + Duration::from_secs(10);
    while disk_urls().await < 2 {
        assert!(
            Instant::now() < deadline,
            "the disk store was not read back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (s, h, b) = get(&w.url("/size/300000/big"), &[]).await;
    assert_eq!((s, b.len()), (200, 300000));
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    let (_, h, b) = get(&w.url("/max60/small"), &[]).await;
    assert_eq!(&b[..], b"/max60/small #1");
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    assert_eq!(o.total(), 2, "the origin was asked again after the restart");
    o.stop();
}

#[tokio::test]
async fn a_reload_keeps_the_cached_responses() {
    let o = Origin::start().await;
    let admin = free_port();
    let w = Weir::start(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n{}",
            site(&o, "")
        ),
    );
    get(&w.url("/max60/r"), &[]).await;
    // The site changes (a header), [cache] does not: the store stays.
    let text = std::fs::read_to_string(w.dir.path().join("weir.toml")).unwrap();
    let changed = text.replace("cache = {", "headers = { X-Reloaded = \"yes\" }\ncache = {");
    let r = client()
        .post(format!("http://127.0.0.1:{admin}/load"))
        .header("content-type", "application/toml")
        .body(changed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let (_, h, b) = get(&w.url("/max60/r"), &[]).await;
    assert_eq!(h["x-reloaded"], "yes");
    assert_eq!(&b[..], b"/max60/r #1");
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    assert_eq!(o.count("/max60/r"), 1);
    o.stop();
}
