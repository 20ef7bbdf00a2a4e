//! The cache's path against an origin that counts its requests, with the
//! clock moved by hand (`CLOCK_START` + `SKEW`, per test thread).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;

use super::*;

/// Where the tests' clock starts (seconds since the epoch, in 2027).
pub const CLOCK_START: u64 = 1_800_000_000;

thread_local! {
    pub static SKEW: Cell<u64> = const { Cell::new(0) };
}

fn advance(secs: u64) {
    SKEW.with(|s| s.set(s.get() + secs));
}

type Answer = (u16, Vec<(&'static str, String)>, String);
type AnswerFn = dyn Fn(&Parts, usize) -> Answer + Send + Sync;

/// An origin answering with `answer(request, n)` for its n-th request
/// (from 1), its body in two pieces `gap` apart.
struct Fake {
    n: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    gap: Duration,
    answer: Box<AnswerFn>,
}

impl Fake {
    fn new(answer: impl Fn(&Parts, usize) -> Answer + Send + Sync + 'static) -> Arc<Fake> {
        Self::slow(Duration::ZERO, answer)
    }

    fn slow(
        gap: Duration,
        answer: impl Fn(&Parts, usize) -> Answer + Send + Sync + 'static,
    ) -> Arc<Fake> {
        Arc::new(Fake {
            n: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            gap,
            answer: Box::new(answer),
        })
    }

    fn seen(&self) -> usize {
        self.n.load(Ordering::SeqCst)
    }
}

impl Origin for Fake {
    fn fetch<'a>(
        &'a self,
        parts: &'a mut Parts,
        _body: Body,
        _conn: &'a ConnInfo,
        _path: Option<&'a str>,
    ) -> Fetching<'a> {
        Box::pin(async move {
            let n = self.n.fetch_add(1, Ordering::SeqCst) + 1;
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let (status, headers, body) = (self.answer)(parts, n);
            if !self.gap.is_zero() {
                tokio::time::sleep(self.gap).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut b = http::Response::builder().status(status);
            for (k, v) in headers {
                b = b.header(k, v);
            }
            let gap = self.gap;
            let half = body.len() / 2;
            let (a, z) = (
                Bytes::from(body[..half].to_string()),
                Bytes::from(body[half..].to_string()),
            );
            let stream = futures_util::stream::unfold(0, move |i| {
                let (a, z) = (a.clone(), z.clone());
                async move {
                    match i {
                        0 => Some((Ok::<_, std::io::Error>(http_body::Frame::data(a)), 1)),
                        1 => {
                            tokio::time::sleep(gap).await;
                            Some((Ok(http_body::Frame::data(z)), 2))
                        }
                        _ => None,
                    }
                }
            });
            b.body(Body::stream(http_body_util::StreamBody::new(stream)))
                .unwrap()
        })
    }
}

fn cache_with(origin: Arc<Fake>, policy: CachePolicy) -> Cache {
    let store = Store::new(&Default::default(), 1);
    Cache::new(store, Arc::new(policy), origin)
}

fn cache(origin: Arc<Fake>) -> Cache {
    cache_with(origin, CachePolicy::default())
}

fn conn() -> ConnInfo {
    ConnInfo {
        peer: ([127, 0, 0, 1], 5000).into(),
        local: ([127, 0, 0, 1], 80).into(),
        tls: false,
        tls_info: None,
        worker: Default::default(),
    }
}

async fn get(c: &Cache, uri: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, Bytes) {
    send(c, "GET", uri, headers).await
}

async fn send(
    c: &Cache,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Bytes) {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "example.com");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (mut parts, ()) = b.body(()).unwrap().into_parts();
    let r = c.serve(&mut parts, Body::empty(), &conn(), None).await;
    let (rp, body) = r.into_parts();
    (
        rp.status.as_u16(),
        rp.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn status(h: &http::HeaderMap) -> &str {
    h.get("cache-status").map_or("", |v| v.to_str().unwrap())
}

fn ok(cc: &str, body: &str) -> Answer {
    (
        200,
        vec![("cache-control", cc.to_string())],
        body.to_string(),
    )
}

#[tokio::test]
async fn a_second_get_is_a_hit() {
    let o = Fake::new(|_, n| ok("max-age=60", &format!("body {n}")));
    let c = cache(o.clone());
    let (s, h, b) = get(&c, "/a", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"body 1"[..]));
    assert_eq!(status(&h), "weir; fwd=miss; fwd-status=200; stored");
    let (s, h, b) = get(&c, "/a", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"body 1"[..]));
    assert!(status(&h).starts_with("weir; hit; ttl="), "{}", status(&h));
    assert_eq!(h["age"], "0");
    assert_eq!(h["content-length"], "6");
    assert_eq!(o.seen(), 1);
    assert_eq!(c.store().counter(counter::HIT), 1);
    assert_eq!(c.store().counter(counter::MISS), 1);
    // Another URL is another entry.
    get(&c, "/b", &[]).await;
    assert_eq!(o.seen(), 2);
}

#[tokio::test]
async fn concurrent_misses_make_one_request_and_stream_to_all() {
    let o = Fake::slow(Duration::from_millis(100), |_, n| {
        ok("max-age=60", &format!("{n}-{}", "x".repeat(5000)))
    });
    let c = cache(o.clone());
    let all: Vec<_> = (0..50)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { get(&c, "/big", &[]).await })
        })
        .collect();
    for t in all {
        let (s, _, b) = t.await.unwrap();
        assert_eq!(s, 200);
        assert_eq!(b.len(), 5002);
        assert!(b.starts_with(b"1-"));
    }
    assert_eq!(o.seen(), 1);
    assert_eq!(c.store().counter(counter::COALESCED), 49);
}

#[tokio::test]
async fn uncacheable_answers_do_not_make_requests_queue() {
    let o = Fake::slow(Duration::from_millis(50), |_, n| {
        (
            200,
            vec![("cache-control", "private".into())],
            format!("{n}"),
        )
    });
    let c = cache(o.clone());
    let (_, h, _) = get(&c, "/p", &[]).await;
    assert_eq!(status(&h), "weir; fwd=miss; fwd-status=200; detail=private");
    let all: Vec<_> = (0..10)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { get(&c, "/p", &[]).await })
        })
        .collect();
    for t in all {
        t.await.unwrap();
    }
    assert_eq!(o.seen(), 11);
    assert!(
        o.most_in_flight.load(Ordering::SeqCst) > 1,
        "hit-for-miss requests ran one at a time"
    );
}

#[tokio::test]
async fn private_no_store_and_set_cookie_are_never_shared() {
    for (name, h) in [
        ("private", ("cache-control", "private, max-age=60")),
        ("no-store", ("cache-control", "no-store")),
        ("set-cookie", ("set-cookie", "sid=secret")),
    ] {
        let o = Fake::new(move |_, n| {
            (
                200,
                vec![(h.0, h.1.to_string()), ("x-n", n.to_string())],
                format!("for client {n}"),
            )
        });
        let c = cache(o.clone());
        let (_, _, a) = get(&c, "/me", &[]).await;
        let (_, h2, b) = get(&c, "/me", &[]).await;
        assert_eq!(
            (&a[..], &b[..]),
            (&b"for client 1"[..], &b"for client 2"[..]),
            "{name}"
        );
        assert!(
            status(&h2).contains(&format!("detail={name}")),
            "{name}: {}",
            status(&h2)
        );
        assert_eq!(o.seen(), 2, "{name}");
    }
}

#[tokio::test]
async fn set_cookie_stripped_when_the_policy_says_so() {
    let o = Fake::new(|_, n| {
        (
            200,
            vec![
                ("set-cookie", "sid=1".into()),
                ("cache-control", "max-age=60".into()),
            ],
            format!("{n}"),
        )
    });
    let c = cache_with(
        o.clone(),
        CachePolicy {
            set_cookie: weir_config::cache::SetCookie::Strip,
            ..Default::default()
        },
    );
    let (_, first, _) = get(&c, "/", &[]).await;
    assert!(!first.contains_key("set-cookie"));
    let (_, second, b) = get(&c, "/", &[]).await;
    assert!(!second.contains_key("set-cookie"));
    assert_eq!((&b[..], o.seen()), (&b"1"[..], 1));
}

#[tokio::test]
async fn vary_variants_are_kept_apart_and_accept_encoding_normalised() {
    let o = Fake::new(|p, _| {
        let enc = p
            .headers
            .get("accept-encoding")
            .map_or("identity", |v| v.to_str().unwrap())
            .to_string();
        (
            200,
            vec![
                ("cache-control", "max-age=60".into()),
                ("vary", "Accept-Encoding".into()),
            ],
            format!("coded {enc}"),
        )
    });
    let c = cache(o.clone());
    assert_eq!(
        &get(&c, "/v", &[("accept-encoding", "gzip, br")]).await.2[..],
        b"coded br"
    );
    assert_eq!(&get(&c, "/v", &[]).await.2[..], b"coded identity");
    assert_eq!(
        &get(&c, "/v", &[("accept-encoding", "br;q=1, gzip;q=0.5")])
            .await
            .2[..],
        b"coded br"
    );
    assert_eq!(
        &get(&c, "/v", &[("accept-encoding", "gzip")]).await.2[..],
        b"coded gzip"
    );
    assert_eq!(
        &get(&c, "/v", &[("accept-encoding", "identity")]).await.2[..],
        b"coded identity"
    );
    assert_eq!(o.seen(), 3);
}

#[tokio::test]
async fn unkeyed_forwarding_fields_never_reach_the_origin() {
    let o = Fake::new(|p, _| {
        let xfh = p
            .headers
            .get("x-forwarded-host")
            .map_or("-", |v| v.to_str().unwrap())
            .to_string();
        ok("max-age=60", &format!("<a href=//{xfh}/>"))
    });
    let c = cache(o.clone());
    let (_, _, poisoned) = get(&c, "/", &[("x-forwarded-host", "evil.example")]).await;
    assert_eq!(&poisoned[..], b"<a href=//-/>");
    assert_eq!(&get(&c, "/", &[]).await.2[..], b"<a href=//-/>");
}

#[tokio::test]
async fn conditional_head_and_range_requests_are_answered_from_the_store() {
    let o = Fake::new(|_, _| {
        (
            200,
            vec![
                ("cache-control", "max-age=60".into()),
                ("etag", "\"v1\"".into()),
            ],
            "0123456789".into(),
        )
    });
    let c = cache(o.clone());
    get(&c, "/r", &[]).await;
    let (s, h, b) = get(&c, "/r", &[("if-none-match", "W/\"v1\"")]).await;
    assert_eq!((s, b.len()), (304, 0));
    assert_eq!(h["etag"], "\"v1\"");
    let (s, h, b) = send(&c, "HEAD", "/r", &[]).await;
    assert_eq!((s, b.len()), (200, 0));
    assert_eq!(h["content-length"], "10");
    let (s, h, b) = get(&c, "/r", &[("range", "bytes=2-4")]).await;
    assert_eq!((s, &b[..]), (206, &b"234"[..]));
    assert_eq!(h["content-range"], "bytes 2-4/10");
    let (s, _, b) = get(&c, "/r", &[("range", "bytes=2-4"), ("if-range", "\"old\"")]).await;
    assert_eq!((s, b.len()), (200, 10));
    assert_eq!(o.seen(), 1);
}

#[tokio::test]
async fn a_head_miss_is_fetched_as_get_and_stored() {
    let o = Fake::new(|p, _| ok("max-age=60", &format!("method {}", p.method)));
    let c = cache(o.clone());
    let (s, h, b) = send(&c, "HEAD", "/h", &[]).await;
    assert_eq!((s, b.len()), (200, 0));
    assert!(status(&h).contains("stored"));
    let (_, h, b) = get(&c, "/h", &[]).await;
    assert_eq!(&b[..], b"method GET");
    assert!(status(&h).starts_with("weir; hit"));
    assert_eq!(o.seen(), 1);
}

#[tokio::test]
async fn a_stale_response_is_revalidated_and_a_304_freshens_it() {
    let o = Fake::new(|p, n| {
        if n > 1 && p.headers.get("if-none-match").is_some_and(|v| v == "\"e\"") {
            return (
                304,
                vec![
                    ("cache-control", "max-age=100".into()),
                    ("etag", "\"e\"".into()),
                    ("x-gen", "2".into()),
                ],
                String::new(),
            );
        }
        (
            200,
            vec![
                ("cache-control", "max-age=10, must-revalidate".into()),
                ("etag", "\"e\"".into()),
                ("x-gen", "1".into()),
            ],
            "payload".into(),
        )
    });
    let c = cache(o.clone());
    get(&c, "/s", &[]).await;
    advance(11);
    let (s, h, b) = get(&c, "/s", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"payload"[..]));
    assert_eq!(status(&h), "weir; fwd=stale; fwd-status=304; stored");
    assert_eq!(h["x-gen"], "2");
    assert_eq!(h["content-length"], "7");
    // Fresh again for 100 s.
    advance(50);
    let (_, h, _) = get(&c, "/s", &[]).await;
    assert!(status(&h).starts_with("weir; hit"));
    assert_eq!(o.seen(), 2);
    assert_eq!(c.store().counter(counter::REVALIDATED), 1);
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_once() {
    let o = Fake::slow(Duration::from_millis(50), |_, n| {
        ok("max-age=10, stale-while-revalidate=60", &format!("v{n}"))
    });
    let c = cache(o.clone());
    get(&c, "/w", &[]).await;
    advance(15);
    for _ in 0..5 {
        let (_, h, b) = get(&c, "/w", &[]).await;
        assert_eq!(&b[..], b"v1");
        assert_eq!(
            status(&h),
            "weir; hit; ttl=-5; detail=stale-while-revalidate"
        );
    }
    crate::tests::until(|| o.seen() == 2).await;
    crate::tests::until(|| {
        c.store()
            .lookup("http://example.com/w", &http::HeaderMap::new(), "", now())
            .is_some_and(|o| o.fresh.ttl(now()) > 0)
    })
    .await;
    assert_eq!(&get(&c, "/w", &[]).await.2[..], b"v2");
    assert_eq!(o.seen(), 2);
}

pub(crate) async fn until(mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn stale_if_error_stands_in_for_a_failing_origin_when_configured() {
    let o = Fake::new(|_, n| {
        if n == 1 {
            ok("max-age=10", "good")
        } else {
            (502, vec![], "bad gateway".into())
        }
    });
    let c = cache_with(
        o.clone(),
        CachePolicy {
            stale_if_error: Duration::from_secs(3600),
            ..Default::default()
        },
    );
    get(&c, "/e", &[]).await;
    advance(100);
    let (s, h, b) = get(&c, "/e", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"good"[..]));
    assert_eq!(
        status(&h),
        "weir; fwd=stale; fwd-status=502; detail=stale-if-error"
    );
    // Past the window (the policy's hour), the error goes through.
    advance(3600);
    let (s, _, _) = get(&c, "/e", &[]).await;
    assert_eq!(s, 502);
}

/// An origin whose first answer is `first` and every later one `then`;
/// `unreachable`: the later ones are weir's own "no upstream reached".
fn first_then(first: Answer, then: u16, unreachable: bool) -> Arc<UnreachableFake> {
    Arc::new(UnreachableFake {
        inner: Fake::new(move |_, n| {
            if n == 1 {
                first.clone()
            } else {
                (then, vec![], format!("error {then}"))
            }
        }),
        unreachable,
    })
}

/// A [`Fake`] whose error answers carry [`weir_proxy::Unreachable`] when
/// asked to, as the proxy's do when no upstream could be reached.
struct UnreachableFake {
    inner: Arc<Fake>,
    unreachable: bool,
}

impl Origin for UnreachableFake {
    fn fetch<'a>(
        &'a self,
        parts: &'a mut Parts,
        body: Body,
        conn: &'a ConnInfo,
        path: Option<&'a str>,
    ) -> Fetching<'a> {
        Box::pin(async move {
            let mut r = self.inner.fetch(parts, body, conn, path).await;
            if self.unreachable && r.status().is_server_error() {
                r.extensions_mut().insert(weir_proxy::Unreachable);
            }
            r
        })
    }
}

fn cache_of(origin: Arc<UnreachableFake>, policy: CachePolicy) -> Cache {
    Cache::new(Store::new(&Default::default(), 1), Arc::new(policy), origin)
}

#[tokio::test]
async fn s4_2_4_by_default_a_stale_copy_the_origin_did_not_allow_is_never_served() {
    let validator = |cc: &str| {
        (
            200,
            vec![
                ("cache-control", cc.to_string()),
                ("etag", "\"v\"".to_string()),
            ],
            "good".to_string(),
        )
    };
    // Stale, and the origin answers 500: the 500 goes through, and the
    // stored copy stays for the next validation.
    let o = first_then(validator("max-age=10"), 500, false);
    let c = cache_of(o.clone(), CachePolicy::default());
    get(&c, "/a", &[]).await;
    advance(11);
    let (s, h, _) = get(&c, "/a", &[]).await;
    assert_eq!(s, 500, "{}", status(&h));
    assert_eq!(o.inner.seen(), 2);
    let (s, _, _) = get(&c, "/a", &[]).await;
    assert_eq!(s, 500);
    assert_eq!(
        o.inner.seen(),
        3,
        "a stale copy without grace is validated each time"
    );

    // Allowed by the origin: stale-if-error.
    let o = first_then(validator("max-age=10, stale-if-error=60"), 500, false);
    let c = cache_of(o.clone(), CachePolicy::default());
    get(&c, "/b", &[]).await;
    advance(11);
    let (s, h, b) = get(&c, "/b", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"good"[..]));
    assert!(
        status(&h).ends_with("detail=stale-if-error"),
        "{}",
        status(&h)
    );

    // No upstream reached at all: disconnected, so the stale copy answers...
    let o = first_then(validator("max-age=10"), 502, true);
    let c = cache_of(o.clone(), CachePolicy::default());
    get(&c, "/c", &[]).await;
    advance(11);
    let (s, h, b) = get(&c, "/c", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"good"[..]));
    assert_eq!(
        status(&h),
        "weir; fwd=stale; fwd-status=502; detail=unreachable"
    );
    // ...unless a directive forbids it, even with grace configured:
    // `no-cache` lets the proxy's error through; `must-revalidate` and its
    // kin get the cache's own 504 (`s5_2_2_2_…`).
    let o = first_then(validator("max-age=10, no-cache"), 503, true);
    let c = cache_of(o.clone(), varnish_like());
    get(&c, "/d", &[]).await;
    advance(11);
    let (s, h, _) = get(&c, "/d", &[]).await;
    assert_eq!(s, 503, "{}", status(&h));
    assert_eq!(o.inner.seen(), 2);
}

/// Grace and `stale-if-error` on, as Varnish's defaults have them.
fn varnish_like() -> CachePolicy {
    CachePolicy {
        grace: Duration::from_secs(10),
        stale_if_error: Duration::from_secs(3600),
        ..Default::default()
    }
}

#[tokio::test]
async fn s5_2_2_2_must_revalidate_while_disconnected_answers_504() {
    let validator = |cc: &str| {
        (
            200,
            vec![
                ("cache-control", cc.to_string()),
                ("etag", "\"v\"".to_string()),
            ],
            "good".to_string(),
        )
    };
    // §5.2.2.8 and §5.2.2.10: proxy-revalidate and s-maxage say the same to
    // a shared cache. Not even grace or stale-if-error serve the copy.
    for (cc, directive) in [
        ("max-age=10, must-revalidate", "must-revalidate"),
        ("max-age=10, proxy-revalidate", "proxy-revalidate"),
        ("s-maxage=10", "s-maxage"),
    ] {
        for unreachable_status in [502, 503] {
            let o = first_then(validator(cc), unreachable_status, true);
            let c = cache_of(o.clone(), varnish_like());
            get(&c, "/m", &[]).await;
            advance(11);
            let (s, h, b) = get(&c, "/m", &[]).await;
            assert_eq!(s, 504, "{cc}: {}", status(&h));
            assert_eq!(
                status(&h),
                format!("weir; fwd=stale; fwd-status={unreachable_status}; detail={directive}")
            );
            let text = String::from_utf8_lossy(&b);
            assert!(
                text.starts_with("504 Gateway Timeout") && text.contains(directive),
                "{text}"
            );
            assert_eq!(o.inner.seen(), 2, "{cc}");
            // The copy stays, to be validated once the upstream is back.
            let (s, _, _) = get(&c, "/m", &[]).await;
            assert_eq!(s, 504);
            assert_eq!(o.inner.seen(), 3, "{cc}");
        }
    }
    // An upstream that answers with its own 5xx is not a disconnected
    // cache: its answer goes through.
    let o = first_then(validator("max-age=10, must-revalidate"), 503, false);
    let c = cache_of(o.clone(), CachePolicy::default());
    get(&c, "/n", &[]).await;
    advance(11);
    let (s, h, b) = get(&c, "/n", &[]).await;
    assert_eq!((s, &b[..]), (503, &b"error 503"[..]), "{}", status(&h));
}

#[tokio::test]
async fn s4_2_4_grace_serves_stale_only_when_configured() {
    let answer = |_: &Parts, n: usize| ok("max-age=10", &format!("v{n}"));
    let o = Fake::slow(Duration::from_millis(20), answer);
    let c = cache(o.clone());
    get(&c, "/g", &[]).await;
    advance(11);
    let (_, h, b) = get(&c, "/g", &[]).await;
    assert_eq!(&b[..], b"v2", "{}", status(&h));
    assert!(!status(&h).contains("hit"), "{}", status(&h));

    let o = Fake::slow(Duration::from_millis(20), answer);
    let c = cache_with(
        o.clone(),
        CachePolicy {
            grace: Duration::from_secs(10),
            ..Default::default()
        },
    );
    get(&c, "/g", &[]).await;
    advance(11);
    let (_, h, b) = get(&c, "/g", &[]).await;
    assert_eq!(&b[..], b"v1");
    assert_eq!(
        status(&h),
        "weir; hit; ttl=-1; detail=stale-while-revalidate"
    );
}

#[tokio::test]
async fn s4_3_4_a_304_updates_the_stored_fields_and_later_hits_carry_them() {
    let o = Fake::new(|p, n| {
        if n > 1
            && p.headers
                .get("if-none-match")
                .is_some_and(|v| v == "\"e1\"")
        {
            return (
                304,
                vec![
                    ("cache-control", "max-age=100".into()),
                    ("etag", "\"e1\"".into()),
                    ("content-type", "text/html".into()),
                    ("content-location", "/elsewhere".into()),
                    ("expires", "Thu, 18 Aug 2050 02:01:18 GMT".into()),
                    ("x-version", "2".into()),
                    ("surrogate-key", "new-tag".into()),
                    ("age", "3".into()),
                ],
                String::new(),
            );
        }
        (
            200,
            vec![
                ("cache-control", "max-age=10".into()),
                ("etag", "\"e1\"".into()),
                ("content-type", "text/plain".into()),
                ("x-version", "1".into()),
                ("surrogate-key", "old-tag".into()),
            ],
            "payload".into(),
        )
    });
    let c = cache(o.clone());
    get(&c, "/u", &[]).await;
    advance(11);
    let (s, h, b) = get(&c, "/u", &[]).await;
    assert_eq!((s, &b[..]), (200, &b"payload"[..]));
    assert_eq!(status(&h), "weir; fwd=stale; fwd-status=304; stored");
    for _ in 0..2 {
        let (_, h, b) = get(&c, "/u", &[]).await;
        assert!(status(&h).starts_with("weir; hit"), "{}", status(&h));
        assert_eq!(&b[..], b"payload");
        assert_eq!(h["cache-control"], "max-age=100");
        assert_eq!(h["content-type"], "text/html");
        assert_eq!(h["content-location"], "/elsewhere");
        assert_eq!(h["expires"], "Thu, 18 Aug 2050 02:01:18 GMT");
        assert_eq!(h["x-version"], "2");
        assert_eq!(h["content-length"], "7");
        // Age from the 304's own, the tags kept apart and updated.
        assert_eq!(h["age"], "3");
        assert!(!h.contains_key("surrogate-key"));
    }
    assert_eq!(o.seen(), 2);
    assert_eq!(c.store().purge_tag("old-tag"), 0);
    assert_eq!(c.store().purge_tag("new-tag"), 1);
}

#[tokio::test]
async fn purge_and_unsafe_methods_invalidate() {
    let o = Fake::new(|p, n| {
        if p.method == Method::POST {
            (303, vec![("location", "/other".into())], String::new())
        } else {
            ok("max-age=60", &format!("{n}"))
        }
    });
    let policy = CachePolicy {
        purge_from: vec!["127.0.0.0/8".parse().unwrap()],
        ..Default::default()
    };
    let c = cache_with(o.clone(), policy);
    get(&c, "/x", &[]).await;
    get(&c, "/other", &[]).await;
    let (s, _, b) = send(&c, "PURGE", "/x", &[]).await;
    assert_eq!(s, 200);
    assert_eq!(&b[..], b"{\"purged\":1,\"key\":\"http://example.com/x\"}\n");
    let (_, h, _) = get(&c, "/x", &[]).await;
    assert!(status(&h).contains("fwd=miss"));
    // A POST to /x invalidates /x and its Location.
    get(&c, "/x", &[]).await;
    let n = o.seen();
    send(&c, "POST", "/x", &[]).await;
    let (_, h1, _) = get(&c, "/x", &[]).await;
    let (_, h2, _) = get(&c, "/other", &[]).await;
    assert!(status(&h1).contains("fwd=miss") && status(&h2).contains("fwd=miss"));
    assert_eq!(o.seen(), n + 3);
}

#[tokio::test]
async fn a_response_never_fresh_without_validators_is_not_stored() {
    let o = Fake::new(|_, n| (200, vec![], format!("{n}")));
    let c = cache(o.clone());
    let (_, h, _) = get(&c, "/", &[]).await;
    assert_eq!(
        status(&h),
        "weir; fwd=miss; fwd-status=200; detail=no-freshness"
    );
    assert_eq!(&get(&c, "/", &[]).await.2[..], b"2");
    // With the policy's default freshness it is.
    let c = cache_with(
        o.clone(),
        CachePolicy {
            default_ttl: Some(Duration::from_secs(120)),
            ..Default::default()
        },
    );
    get(&c, "/", &[]).await;
    let (_, h, _) = get(&c, "/", &[]).await;
    assert_eq!(status(&h), "weir; hit; ttl=120");
}

#[tokio::test]
async fn purge_is_refused_by_default_and_from_other_addresses() {
    let o = Fake::new(|_, _| ok("max-age=60", "x"));
    assert_eq!(send(&cache(o.clone()), "PURGE", "/", &[]).await.0, 405);
    let c = cache_with(
        o,
        CachePolicy {
            purge_from: vec!["10.0.0.0/8".parse().unwrap()],
            ..Default::default()
        },
    );
    assert_eq!(send(&c, "PURGE", "/", &[]).await.0, 403);
}

#[tokio::test]
async fn tags_and_bans_purge_many() {
    let o = Fake::new(|p, _| {
        let tag = if p.uri.path().starts_with("/img/") {
            "images"
        } else {
            "pages"
        };
        (
            200,
            vec![
                ("cache-control", "max-age=60".into()),
                ("surrogate-key", format!("all {tag}")),
            ],
            "x".into(),
        )
    });
    let c = cache(o.clone());
    for u in ["/img/a", "/img/b", "/p/1", "/p/2"] {
        let (_, h, _) = get(&c, u, &[]).await;
        assert!(!h.contains_key("surrogate-key"), "tags leave weir");
    }
    assert_eq!(c.store().purge_tag("images"), 2);
    assert_eq!(c.store().ban_prefix("http://example.com/p/"), 2);
    assert_eq!(c.store().purge_tag("all"), 0);
}

#[tokio::test]
async fn a_body_larger_than_the_limit_streams_through_unstored() {
    let o = Fake::new(|_, n| {
        (
            200,
            vec![("cache-control", "max-age=60".into())],
            format!("{n}{}", "y".repeat(3000)),
        )
    });
    let store = Store::new(
        &weir_config::cache::CacheStorage {
            max_object_size: 1000,
            ..Default::default()
        },
        1,
    );
    let c = Cache::new(store, Arc::new(CachePolicy::default()), o.clone());
    let (_, _, b) = get(&c, "/large", &[]).await;
    assert_eq!(b.len(), 3001);
    until(|| c.store().size().0 == 0).await;
    let (_, _, b) = get(&c, "/large", &[]).await;
    assert!(b.starts_with(b"2"));
}

#[tokio::test]
async fn memory_stays_within_its_bound() {
    let o = Fake::new(|_, _| ok("max-age=600", &"z".repeat(10_000)));
    let bound = 200_000;
    let store = Store::new(
        &weir_config::cache::CacheStorage {
            memory: bound,
            ..Default::default()
        },
        1,
    );
    let c = Cache::new(store, Arc::new(CachePolicy::default()), o.clone());
    for i in 0..200 {
        get(&c, &format!("/m/{i}"), &[]).await;
    }
    let (_, bytes) = c.store().size();
    assert!(bytes <= bound, "{bytes} bytes held, bound {bound}");
    assert!(c.store().evictions() > 0 || c.store().size().0 < 200);
}

#[tokio::test]
async fn request_directives_are_ignored_unless_honoured() {
    let o = Fake::new(|_, n| ok("max-age=60", &format!("{n}")));
    let c = cache(o.clone());
    get(&c, "/q", &[]).await;
    assert_eq!(
        &get(&c, "/q", &[("cache-control", "no-cache")]).await.2[..],
        b"1"
    );
    let c = cache_with(
        o.clone(),
        CachePolicy {
            honour_request: true,
            ..Default::default()
        },
    );
    get(&c, "/q", &[]).await;
    let n = o.seen();
    get(&c, "/q", &[("cache-control", "no-cache")]).await;
    assert_eq!(o.seen(), n + 1);
    let (s, _, _) = get(&c, "/never", &[("cache-control", "only-if-cached")]).await;
    assert_eq!(s, 504);
}

#[tokio::test]
async fn a_restart_reads_the_disk_store_back() {
    let dir = tempfile::tempdir().unwrap();
    let storage = weir_config::cache::CacheStorage {
        disk: Some(weir_config::cache::DiskStorage {
            path: dir.path().to_path_buf(),
            size: 10 << 20,
        }),
        ..Default::default()
    };
    let o = Fake::new(|_, n| {
        (
            200,
            vec![
                ("cache-control", "max-age=600".into()),
                ("etag", "\"d\"".into()),
                ("x-n", n.to_string()),
            ],
            format!("{n}{}", "d".repeat(300_000)),
        )
    });
    let c = Cache::new(
        Store::new(&storage, 1),
        Arc::new(CachePolicy::default()),
        o.clone(),
    );
    get(&c, "/disk", &[("accept-encoding", "gzip")]).await;
    until(|| c.store().summary().disk_urls == 1).await;
    drop(c);

    // A new store on the same directory: the response is a hit again.
    let c = Cache::new(
        Store::new(&storage, 1),
        Arc::new(CachePolicy::default()),
        o.clone(),
    );
    until(|| c.store().summary().disk_urls == 1).await;
    let (s, h, b) = get(&c, "/disk", &[("accept-encoding", "gzip")]).await;
    assert_eq!((s, b.len()), (200, 300_001));
    assert!(b.starts_with(b"1d"));
    assert!(status(&h).starts_with("weir; hit"), "{}", status(&h));
    assert_eq!(h["x-n"], "1");
    assert_eq!(o.seen(), 1);
    // Read back into memory, with its file kept for sendfile.
    let obj = c.store().lookup(
        "http://example.com/disk",
        &http::HeaderMap::new(),
        "",
        now(),
    );
    assert!(obj.is_some_and(|o| o.file.is_some() && matches!(o.body, ObjBody::Complete(_))));
    // A purge removes the file too.
    assert_eq!(c.store().purge("http://example.com/disk"), 1);
    let files = walk(dir.path());
    assert!(files.is_empty(), "{files:?}");
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
