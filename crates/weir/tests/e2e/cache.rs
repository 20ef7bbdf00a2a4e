//! The cache end to end: the real binary in front of an origin that counts
//! the requests it gets, driven by real clients. What a user relies on:
//! hits that never reach the origin, one origin request for many
//! concurrent misses with every client getting the whole body as it
//! streams, variants kept apart, private answers never shared, purges,
//! stale answers only where RFC 9111 §4.2.4 allows them (or `grace` and
//! `stale_if_error` are set), a 304 that updates what later hits carry,
//! the header syntax of `Age`, `Cache-Control` and `Expires`, which
//! statuses are stored, a disk store that survives a restart, a memory
//! bound that holds, and a client's preconditions and ranges answered from
//! the store as static files answer them.

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
use weir_test_support::proxy::{Weir, client, get};

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
/// - `/tagged/T/…`: tagged T with `Surrogate-Key`;
/// - `/plain1/…`: fresh for 1 s, no validator, nothing about staleness;
/// - `/fail/CC/…`: first `200` with `ETag` and the `Cache-Control` CC names
///   (`plain`, `must-revalidate`, `proxy-revalidate`, `s-maxage`,
///   `no-cache`: [`fail_cc`]), then `500` to everything;
/// - `/update/…`: fresh for 1 s with `ETag`; its validation gets a 304 with
///   new fields;
/// - `/etag/…`: `ETag: "v1,comma"` (a comma inside the tag), fresh for 60 s;
/// - `/case/NAME`: one of [`CASES`].
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
    } else if path.starts_with("/plain1/") {
        r = r.header("cache-control", "max-age=1");
        full(format!("{path} #{n}"))
    } else if let Some(rest) = path.strip_prefix("/fail/") {
        if n > 1 {
            r = r.status(500);
            full(format!("failed #{n}"))
        } else {
            let cc = fail_cc(rest.split('/').next().unwrap());
            r = r.header("cache-control", cc).header("etag", "\"f1\"");
            full(format!("good #{n}"))
        }
    } else if path.starts_with("/update/") {
        if n > 1 && h("if-none-match") == "\"u1\"" {
            r = r
                .status(304)
                .header("cache-control", "max-age=3600")
                .header("etag", "\"u1\"")
                .header("content-type", "text/html; charset=utf-8")
                .header("content-location", "/updated-here")
                .header("expires", "Thu, 18 Aug 2050 02:01:18 GMT")
                .header("x-version", "2");
            full(Bytes::new())
        } else {
            r = r
                .header("cache-control", "max-age=1")
                .header("etag", "\"u1\"")
                .header("content-type", "text/plain")
                .header("x-version", "1");
            full(format!("update #{n}"))
        }
    } else if path.starts_with("/etag/") {
        r = r
            .header("cache-control", "max-age=60")
            .header("etag", "\"v1,comma\"");
        full(format!("{path} #{n}"))
    } else if let Some(name) = path.strip_prefix("/case/") {
        let case = CASES.iter().find(|c| c.name == name).expect("a known case");
        r = r.status(case.status);
        for (k, v) in (case.headers)() {
            r = r.header(k, v);
        }
        full(format!("{name} #{n}"))
    } else {
        r = r.status(404);
        full("not found")
    };
    r.body(body).unwrap()
}

/// The `Cache-Control` of `/fail/NAME/…`'s first answer.
fn fail_cc(name: &str) -> &'static str {
    match name {
        "plain" => "max-age=1",
        "must-revalidate" => "max-age=1, must-revalidate",
        "proxy-revalidate" => "max-age=1, proxy-revalidate",
        "s-maxage" => "s-maxage=1",
        "no-cache" => "max-age=60, no-cache",
        o => panic!("unknown /fail/ case {o}"),
    }
}

/// An HTTP-date `secs` from now (negative: in the past).
fn date_in(secs: i64) -> String {
    let now = std::time::SystemTime::now();
    let t = if secs >= 0 {
        now + Duration::from_secs(secs as u64)
    } else {
        now - Duration::from_secs(secs.unsigned_abs())
    };
    httpdate::fmt_http_date(t)
}

/// One answer of `/case/NAME` and whether a second request for it must be
/// a hit (`cached`) or must reach the origin again.
struct Case {
    name: &'static str,
    status: u16,
    headers: fn() -> Vec<(&'static str, String)>,
    cached: bool,
    rfc: &'static str,
}

fn cc_only(v: &'static str) -> Vec<(&'static str, String)> {
    vec![("cache-control", v.to_string())]
}

fn aged(age: &'static str) -> Vec<(&'static str, String)> {
    vec![
        ("cache-control", "max-age=3600".into()),
        ("age", age.into()),
    ]
}

static CASES: &[Case] = &[
    Case {
        name: "age-plain-old",
        status: 200,
        headers: || aged("7200"),
        cached: false,
        rfc: "§5.1",
    },
    Case {
        name: "age-list-old-first",
        status: 200,
        headers: || aged("7200, 0"),
        cached: false,
        rfc: "§5.1 first member",
    },
    Case {
        name: "age-list-zero-first",
        status: 200,
        headers: || aged("0, 7200"),
        cached: true,
        rfc: "§5.1 first member",
    },
    Case {
        name: "age-parameter",
        status: 200,
        headers: || aged("7200;foo=bar"),
        cached: false,
        rfc: "§5.1",
    },
    Case {
        name: "age-past-2-31",
        status: 200,
        headers: || aged("99999999999999999999"),
        cached: false,
        rfc: "§1.2.2",
    },
    Case {
        name: "age-negative",
        status: 200,
        headers: || aged("-7200"),
        cached: true,
        rfc: "§5.1 ignored",
    },
    Case {
        name: "age-float",
        status: 200,
        headers: || aged("7200.0"),
        cached: true,
        rfc: "§5.1 ignored",
    },
    Case {
        name: "cc-quoted",
        status: 200,
        headers: || cc_only("max-age=\"3600\""),
        cached: true,
        rfc: "§5.2",
    },
    Case {
        name: "cc-in-quotes",
        status: 200,
        headers: || cc_only("ext=\"max-age=3600\", max-age=0"),
        cached: false,
        rfc: "§5.2, RFC 9110 §5.6.4",
    },
    Case {
        name: "cc-duplicate-fresh-first",
        status: 200,
        headers: || cc_only("max-age=3600, max-age=0"),
        cached: true,
        rfc: "§4.2.1 first",
    },
    Case {
        name: "cc-duplicate-stale-first",
        status: 200,
        headers: || cc_only("max-age=0, max-age=3600"),
        cached: false,
        rfc: "§4.2.1 first",
    },
    Case {
        name: "cc-trailing-alpha",
        status: 200,
        headers: || cc_only("max-age=3600a"),
        cached: false,
        rfc: "§4.2.1 invalid",
    },
    Case {
        name: "cc-fraction",
        status: 200,
        headers: || cc_only("max-age=1.5"),
        cached: false,
        rfc: "§4.2.1 invalid",
    },
    Case {
        name: "cc-space-before-equals",
        status: 200,
        headers: || cc_only("max-age =3600"),
        cached: false,
        rfc: "RFC 9110 §5.6.2",
    },
    Case {
        name: "expires-invalid",
        status: 200,
        headers: || vec![("expires", "0".into())],
        cached: false,
        rfc: "§5.3",
    },
    Case {
        name: "expires-utc",
        status: 200,
        headers: || vec![("expires", "Thu, 18 Aug 2050 02:01:18 UTC".into())],
        cached: false,
        rfc: "§4.2",
    },
    Case {
        name: "expires-any-case",
        status: 200,
        headers: || vec![("expires", "THU, 18 AUG 2050 02:01:18 gmt".into())],
        cached: true,
        rfc: "§4.2",
    },
    Case {
        name: "expires-twice",
        status: 200,
        headers: || vec![("expires", date_in(3600)), ("expires", date_in(7200))],
        cached: false,
        rfc: "§4.2.1",
    },
    Case {
        name: "expires-date-far-future",
        status: 200,
        headers: || {
            vec![
                ("date", date_in(86_400)),
                ("expires", date_in(86_400 + 3600)),
            ]
        },
        cached: true,
        rfc: "§4.2.1 Expires − Date",
    },
    Case {
        name: "expires-date-far-past",
        status: 200,
        headers: || {
            vec![
                ("date", date_in(-86_400)),
                ("expires", date_in(-86_400 + 3600)),
            ]
        },
        cached: false,
        rfc: "§4.2.3 apparent age",
    },
    Case {
        name: "status-599-fresh",
        status: 599,
        headers: || cc_only("max-age=3600"),
        cached: true,
        rfc: "§3",
    },
    Case {
        name: "status-500-fresh",
        status: 500,
        headers: || cc_only("max-age=3600"),
        cached: true,
        rfc: "§3",
    },
    Case {
        name: "status-302-no-freshness",
        status: 302,
        headers: Vec::new,
        cached: false,
        rfc: "§3, §4.2.2",
    },
    Case {
        name: "status-404-heuristic",
        status: 404,
        headers: || vec![("last-modified", date_in(-100 * 86_400))],
        cached: true,
        rfc: "§4.2.2, RFC 9110 §15.1",
    },
    Case {
        name: "status-599-must-understand",
        status: 599,
        headers: || cc_only("max-age=3600, no-store, must-understand"),
        cached: false,
        rfc: "§5.2.2.3",
    },
    Case {
        name: "status-200-must-understand",
        status: 200,
        headers: || cc_only("max-age=3600, no-store, must-understand"),
        cached: true,
        rfc: "§5.2.2.3",
    },
];

/// A cached proxy site in front of `origin`; `cache`: more settings of its
/// cache table.
fn site(origin: &Origin, cache: &str) -> String {
    format!(
        "[server]\nworkers = 2\n\n[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\ncache = {{ purge_from = [\"127.0.0.1\"]{cache} }}\n",
        origin.addr
    )
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
    let w = reverse_proxy_cache(&o);
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
    let text = std::fs::read_to_string(w.path().join("weir.toml")).unwrap();
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

/// Polls `url` until `done` says its answer is the one awaited; every
/// answer before it must pass `meanwhile`. Returns the awaited answer.
async fn poll_until(
    url: &str,
    done: impl Fn(u16, &http::HeaderMap, &Bytes) -> bool,
    meanwhile: impl Fn(u16, &http::HeaderMap, &Bytes),
) -> (u16, http::HeaderMap, Bytes) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, h, b) = get(url, &[]).await;
        if done(s, &h, &b) {
            return (s, h, b);
        }
        meanwhile(s, &h, &b);
        assert!(Instant::now() < deadline, "{url}: still {s} {h:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh hit: what may come before a stored response is stale.
fn fresh_hit(url: &str) -> impl Fn(u16, &http::HeaderMap, &Bytes) + '_ {
    move |s, h, _| {
        let cs = cache_status(h);
        assert_eq!(s, 200, "{url}: {h:?}");
        assert!(
            !cs.contains("stale"),
            "{url}: a stale answer the origin did not allow: {cs}"
        );
    }
}

#[tokio::test]
async fn rfc9111_4_2_4_by_default_stale_is_served_only_when_the_origin_allows_it() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    // No stale-while-revalidate: once stale, the next answer is the
    // origin's, never the stale copy (the old 10 s grace served it).
    let url = w.url("/plain1/a");
    get(&url, &[]).await;
    let (_, h, b) = poll_until(&url, |_, _, b| !b.ends_with(b"#1"), fresh_hit(&url)).await;
    assert_eq!(&b[..], b"/plain1/a #2", "{h:?}");
    assert_eq!(o.count("/plain1/a"), 2);
    // No stale-if-error: the origin's 500 reaches the client (the old
    // hour of stale-if-error hid it), and the stored copy is asked for
    // again, never served stale.
    let url = w.url("/fail/plain/a");
    get(&url, &[]).await;
    poll_until(&url, |s, _, _| s == 500, fresh_hit(&url)).await;
    let before = o.count("/fail/plain/a");
    let (s, h, _) = get(&url, &[]).await;
    assert_eq!(s, 500, "{h:?}");
    assert_eq!(o.count("/fail/plain/a"), before + 1);
    // The origin allows it (stale-while-revalidate): still answered stale.
    get(&w.url("/grace"), &[]).await;
    poll_until(
        &w.url("/grace"),
        |_, h, _| cache_status(h).contains("stale-while-revalidate"),
        |_, _, _| {},
    )
    .await;
    o.stop();
}

#[tokio::test]
async fn grace_and_stale_if_error_set_explicitly_serve_stale_as_varnish_does() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ", grace = \"10s\""));
    let url = w.url("/plain1/b");
    get(&url, &[]).await;
    let (_, _, b) = poll_until(
        &url,
        |_, h, _| cache_status(h).contains("stale-while-revalidate"),
        |_, _, _| {},
    )
    .await;
    assert_eq!(&b[..], b"/plain1/b #1");
    drop(w);
    let w = Weir::start(WEIR, &site(&o, ", stale_if_error = \"1h\""));
    let url = w.url("/fail/plain/b");
    get(&url, &[]).await;
    let (s, h, b) = poll_until(
        &url,
        |_, h, _| cache_status(h).contains("stale-if-error"),
        |s, h, _| assert_eq!(s, 200, "{h:?}"),
    )
    .await;
    assert_eq!((s, &b[..]), (200, &b"good #1"[..]), "{h:?}");
    assert!(
        cache_status(&h).contains("fwd-status=500"),
        "{}",
        cache_status(&h)
    );
    o.stop();
}

#[tokio::test]
async fn rfc9111_4_2_4_must_revalidate_proxy_revalidate_s_maxage_no_cache_forbid_stale() {
    let o = Origin::start().await;
    // Even with grace and stale-if-error set.
    let w = Weir::start(
        WEIR,
        &site(&o, ", grace = \"10s\", stale_if_error = \"1h\""),
    );
    for cc in [
        "must-revalidate",
        "proxy-revalidate",
        "s-maxage",
        "no-cache",
    ] {
        let path = format!("/fail/{cc}/c");
        let url = w.url(&path);
        let (s, _, _) = get(&url, &[]).await;
        assert_eq!(s, 200);
        poll_until(&url, |s, _, _| s == 500, fresh_hit(&url)).await;
        if cc == "no-cache" {
            assert_eq!(o.count(&path), 2, "no-cache is validated every time");
        }
    }
    o.stop();
}

#[tokio::test]
async fn rfc9111_4_2_4_an_unreachable_upstream_gets_the_stale_copy_unless_forbidden() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    for p in ["/fail/plain/u", "/fail/must-revalidate/u"] {
        let (s, _, _) = get(&w.url(p), &[]).await;
        assert_eq!(s, 200);
    }
    o.stop();
    // Disconnected (RFC 9111 §4.2.4): the stale copy answers...
    let url = w.url("/fail/plain/u");
    let (s, h, b) = poll_until(
        &url,
        |_, h, _| cache_status(h).contains("detail=unreachable"),
        fresh_hit(&url),
    )
    .await;
    assert_eq!((s, &b[..]), (200, &b"good #1"[..]), "{h:?}");
    // ...but must-revalidate forbids it: the cache's 504, never the stale
    // copy (RFC 9111 §5.2.2.2).
    let url = w.url("/fail/must-revalidate/u");
    let (s, h, _) = poll_until(&url, |s, _, _| s >= 500, fresh_hit(&url)).await;
    assert_eq!(s, 504, "{}", cache_status(&h));
}

/// RFC 9111 §5.2.2.2 (and §5.2.2.8, §5.2.2.10 for a shared cache): a stale
/// stored response with `must-revalidate`, `proxy-revalidate` or
/// `s-maxage`, and no upstream to validate it with: the cache answers 504
/// itself (it passed the proxy's 502 through), through
/// `weir reverse-proxy --cache` as a new user runs it.
#[tokio::test]
async fn rfc9111_5_2_2_2_must_revalidate_while_disconnected_answers_504() {
    let o = Origin::start().await;
    let w = reverse_proxy_cache(&o);
    let cases = ["must-revalidate", "proxy-revalidate", "s-maxage"];
    for cc in cases {
        let (s, _, _) = get(&w.url(&format!("/fail/{cc}/d")), &[]).await;
        assert_eq!(s, 200);
    }
    o.stop();
    for cc in cases {
        let url = w.url(&format!("/fail/{cc}/d"));
        let (s, h, b) = poll_until(&url, |s, _, _| s != 200, fresh_hit(&url)).await;
        assert_eq!(s, 504, "{cc}: {}", cache_status(&h));
        assert!(
            cache_status(&h).ends_with(&format!("detail={cc}")),
            "{cc}: {}",
            cache_status(&h)
        );
        let text = String::from_utf8_lossy(&b);
        assert!(
            text.starts_with("504 Gateway Timeout") && text.contains(cc),
            "{text}"
        );
        assert_eq!(o.count(&format!("/fail/{cc}/d")), 1);
    }
}

#[tokio::test]
async fn rfc9111_4_3_4_a_304_updates_the_stored_fields_and_later_hits_carry_them() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let url = w.url("/update/a");
    let (_, h, _) = get(&url, &[]).await;
    assert_eq!(h["x-version"], "1");
    // Once stale, the validation's 304 updates the stored response.
    let (_, h, b) = poll_until(
        &url,
        |_, h, _| h["x-version"] == "2",
        |_, h, _| assert_eq!(h["content-type"], "text/plain"),
    )
    .await;
    assert_eq!(&b[..], b"update #1");
    assert!(
        cache_status(&h).contains("fwd-status=304"),
        "{}",
        cache_status(&h)
    );
    for _ in 0..2 {
        let (s, h, b) = get(&url, &[]).await;
        assert_eq!((s, &b[..]), (200, &b"update #1"[..]));
        assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
        assert_eq!(h["cache-control"], "max-age=3600");
        assert_eq!(h["content-type"], "text/html; charset=utf-8");
        assert_eq!(h["content-location"], "/updated-here");
        assert_eq!(h["expires"], "Thu, 18 Aug 2050 02:01:18 GMT");
        assert_eq!(h["etag"], "\"u1\"");
        assert_eq!(h["x-version"], "2");
        assert_eq!(h["content-length"], "9");
    }
    assert_eq!(o.count("/update/a"), 2);
    o.stop();
}

#[tokio::test]
async fn rfc9111_age_cache_control_expires_and_status_decide_what_is_reused() {
    let o = Origin::start().await;
    let w = reverse_proxy_cache(&o);
    let mut wrong = Vec::new();
    for case in CASES {
        let path = format!("/case/{}", case.name);
        let (s, _, _) = get(&w.url(&path), &[]).await;
        assert_eq!(s, case.status, "{}", case.name);
        let (s, h, _) = get(&w.url(&path), &[]).await;
        assert_eq!(s, case.status, "{}", case.name);
        let hit = cache_status(&h).starts_with("weir; hit");
        let asked = o.count(&path);
        if hit != case.cached || asked != if case.cached { 1 } else { 2 } {
            wrong.push(format!(
                "{} ({}): cached {} expected, got {} with {asked} origin requests ({})",
                case.name,
                case.rfc,
                case.cached,
                hit,
                cache_status(&h)
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    o.stop();
}

/// `weir reverse-proxy --cache` in front of `o`, with no config file: the
/// cache as a new user first meets it.
fn reverse_proxy_cache(o: &Origin) -> Weir {
    let port = free_port();
    Weir::start_args(
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
    )
}

/// RFC 9110 §13.1.1: a stored response answers `If-Match` itself: 412 when
/// no listed tag matches it by strong comparison (a weak tag never does),
/// the stored 200 when one does. The cache used to ignore `If-Match`.
#[tokio::test]
async fn rfc9110_13_1_1_a_hit_answers_if_match_with_412_or_the_response() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let url = w.url("/etag/if-match");
    assert_eq!(get(&url, &[]).await.0, 200);
    for tag in ["\"other\"", "W/\"v1,comma\"", "\"v1\", \"comma\""] {
        let (s, h, _) = get(&url, &[("if-match", tag)]).await;
        assert_eq!(s, 412, "{tag}: {h:?}");
        assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    }
    for tag in ["\"other\", \"v1,comma\"", "*"] {
        let (s, h, b) = get(&url, &[("if-match", tag)]).await;
        assert_eq!((s, &b[..]), (200, &b"/etag/if-match #1"[..]), "{tag}");
        assert_eq!(h["etag"], "\"v1,comma\"");
    }
    assert_eq!(o.count("/etag/if-match"), 1);
    o.stop();
}

/// RFC 9110 §8.8.3: an entity-tag may hold a comma, so a list is split on
/// the commas outside quotes. The cache used to split on every comma and
/// never matched `"v1,comma"` in a list.
#[tokio::test]
async fn rfc9110_8_8_3_a_quoted_comma_in_an_if_none_match_list_still_matches() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &site(&o, ""));
    let url = w.url("/etag/list");
    assert_eq!(get(&url, &[]).await.0, 200);
    let (s, h, b) = get(&url, &[("if-none-match", "\"x\", \"v1,comma\"")]).await;
    assert_eq!((s, b.len()), (304, 0), "{h:?}");
    assert_eq!(h["etag"], "\"v1,comma\"");
    assert!(cache_status(&h).starts_with("weir; hit"), "{h:?}");
    // Its two halves are other tags.
    let (s, _, b) = get(&url, &[("if-none-match", "\"v1\", \"comma\"")]).await;
    assert_eq!((s, &b[..]), (200, &b"/etag/list #1"[..]));
    assert_eq!(o.count("/etag/list"), 1);
    o.stop();
}

/// RFC 9110 §14: a range of a stored response is answered as the same
/// range of a static file with the same bytes: status, `Content-Range`,
/// `Content-Length` and body alike, for one range, a suffix, a range past
/// the end, several, and none satisfiable (416 with `bytes */LEN`). The
/// cache's 416 used to differ (no body, the stored fields).
#[tokio::test]
async fn a_range_of_a_cached_response_is_answered_as_one_of_a_static_file() {
    let o = Origin::start().await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server]\nworkers = 2\n\n[site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{{DIR}}\"\n\n\
             [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/size/*\"\nproxy = {{ to = [\"{}\"] }}\ncache = true\n",
            o.addr
        ),
    );
    std::fs::write(w.path().join("same.bin"), vec![b'z'; 1000]).unwrap();
    let cached = w.url("/size/1000/range");
    assert_eq!(get(&cached, &[]).await.0, 200);
    // The multipart boundary is random per response.
    let unbound = |h: &http::HeaderMap, b: &Bytes| {
        let ct = h
            .get("content-type")
            .map_or("", |v| v.to_str().unwrap())
            .to_string();
        let body = String::from_utf8_lossy(b).into_owned();
        match ct.strip_prefix("multipart/byteranges; boundary=") {
            Some(boundary) => ("multipart".to_string(), body.replace(boundary, "B")),
            None => (String::new(), body),
        }
    };
    for range in [
        "bytes=0-9",
        "bytes=-10",
        "bytes=990-5000",
        "bytes=0-1,5-6",
        "bytes=1000-",
    ] {
        let (ss, sh, sb) = get(&w.url("/same.bin"), &[("range", range)]).await;
        let (cs, ch, cb) = get(&cached, &[("range", range)]).await;
        assert!(cache_status(&ch).starts_with("weir; hit"), "{ch:?}");
        assert!(ss == 206 || ss == 416, "{range}: {ss}");
        assert_eq!(cs, ss, "{range}");
        for f in ["content-range", "content-length"] {
            assert_eq!(ch.get(f), sh.get(f), "{range}: {f}");
        }
        assert_eq!(unbound(&ch, &cb), unbound(&sh, &sb), "{range}");
    }
    let (s, h, _) = get(&cached, &[("range", "bytes=1000-")]).await;
    assert_eq!(s, 416);
    assert_eq!(h["content-range"], "bytes */1000");
    assert_eq!(o.count("/size/1000/range"), 1);
    o.stop();
}
