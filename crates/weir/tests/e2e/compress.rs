//! Compression as a response filter, end to end: the real binary with
//! `compress` on a proxy, an app (`weir-bench backend`), PHP (php-fpm) and
//! a cache, driven by a client that asks for each coding and one that asks
//! for none. What a user relies on: the decoded bytes are the origin's;
//! `Vary: Accept-Encoding` is there; a range, a `no-transform` answer and
//! an answer already encoded pass untouched; an event stream (and any
//! streamed answer) through a compressing proxy reaches the client as the
//! origin sends it; the cache serves its hits compressed, and identity to
//! a client that asks for none.

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::proxy::{Weir, client, get};

use crate::WEIR;

type Body = BoxBody<Bytes, Infallible>;

/// The page the origin serves: 24 KiB of HTML.
fn page() -> Bytes {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 24 * 1024 {
        s.push_str(&format!("<p>line {i} of a page weir compresses</p>\n"));
        i += 1;
    }
    Bytes::from(s)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// An origin answering by path:
/// - `/page`, `/cached`: [`page`] with a strong ETag (`/cached` for a
///   minute), a byte range of it for a `Range` request (206);
/// - `/no-transform`: the page marked `Cache-Control: no-transform`;
/// - `/encoded`: the page gzip-encoded by the origin;
/// - `/sse`: an event stream: one event, then nothing for 30 s;
/// - `/ticks`: a streamed text answer: one line, then nothing for 30 s.
struct Origin {
    addr: std::net::SocketAddr,
    /// Requests to `/cached`.
    cached: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    async fn start() -> Origin {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cached = Arc::new(AtomicUsize::new(0));
        let c = cached.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let c = c.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let c = c.clone();
                        async move { Ok::<_, Infallible>(answer(&req, &c)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        Origin { addr, cached, task }
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(b.into()).boxed()
}

/// A body that gives `first`, then waits 30 s before it ends.
fn then_silence(first: &'static str) -> Body {
    let s = futures_util::stream::once(async move { Ok(Frame::data(Bytes::from(first))) }).chain(
        futures_util::stream::once(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Frame::data(Bytes::from_static(b"late\n")))
        }),
    );
    BodyExt::boxed(StreamBody::new(s))
}

fn answer(req: &Request<Incoming>, cached: &AtomicUsize) -> Response<Body> {
    let path = req.uri().path();
    let b = Response::builder();
    match path {
        "/page" | "/cached" => {
            if path == "/cached" {
                cached.fetch_add(1, Ordering::SeqCst);
            }
            let b = b
                .header("content-type", "text/html; charset=utf-8")
                .header("etag", "\"p1\"")
                .header("accept-ranges", "bytes")
                .header(
                    "cache-control",
                    if path == "/cached" {
                        "max-age=60"
                    } else {
                        "no-cache"
                    },
                );
            let p = page();
            let range = req
                .headers()
                .get("range")
                .and_then(|r| r.to_str().ok()?.strip_prefix("bytes=")?.split_once('-'))
                .and_then(|(a, z)| Some((a.parse::<usize>().ok()?, z.parse::<usize>().ok()?)));
            match range {
                Some((a, z)) => b
                    .status(206)
                    .header("content-range", format!("bytes {a}-{z}/{}", p.len()))
                    .body(full(p.slice(a..=z))),
                None => b.body(full(p)),
            }
        }
        "/no-transform" => b
            .header("content-type", "text/html")
            .header("cache-control", "no-transform")
            .body(full(page())),
        "/encoded" => b
            .header("content-type", "text/html")
            .header("content-encoding", "gzip")
            .body(full(gzip(&page()))),
        "/sse" => b
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(then_silence("data: first\n\n")),
        "/ticks" => b
            .header("content-type", "text/plain")
            .body(then_silence("tick 0: the first line of a long poll\n")),
        _ => b.status(404).body(full("not found\n")),
    }
    .unwrap()
}

async fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
    let mut out = Vec::new();
    match coding {
        "br" => BrotliDecoder::new(data).read_to_end(&mut out).await,
        "zstd" => ZstdDecoder::new(data).read_to_end(&mut out).await,
        "gzip" => GzipDecoder::new(data).read_to_end(&mut out).await,
        other => panic!("unexpected coding {other}"),
    }
    .unwrap();
    out
}

fn field<'a>(h: &'a http::HeaderMap, name: &str) -> &'a str {
    h.get(name).map_or("", |v| v.to_str().unwrap())
}

/// The coding a client asking `ae` gets, and the bytes decoded: the
/// origin's `want` for every coding; identity with `Vary` for no coding.
async fn check_codings(url: &str, want: &[u8]) {
    for (ae, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        // Equal qvalues: gzip over brotli for an answer compressed as it
        // streams; a qvalue the client gives decides first.
        ("gzip, br", "gzip"),
        ("br, gzip", "gzip"),
        ("br, gzip;q=0.8", "br"),
        ("br;q=0.5, gzip", "gzip"),
    ] {
        let (s, h, body) = get(url, &[("accept-encoding", ae)]).await;
        assert_eq!(s, 200, "{url} {ae}");
        assert_eq!(field(&h, "content-encoding"), coding, "{url} {ae}: {h:?}");
        assert!(
            field(&h, "vary")
                .to_ascii_lowercase()
                .contains("accept-encoding"),
            "{url} {ae}: {h:?}"
        );
        assert!(!h.contains_key("content-length"), "{url} {ae}: {h:?}");
        assert!(body.len() < want.len() / 3, "{url} {ae}: {}", body.len());
        assert_eq!(decode(coding, &body).await, want, "{url} {ae}");
    }
    // A client that asks for no coding (or only one weir lacks).
    for ae in [None, Some("identity"), Some("deflate")] {
        let headers: Vec<(&str, &str)> = ae.map(|v| ("accept-encoding", v)).into_iter().collect();
        let (s, h, body) = get(url, &headers).await;
        assert_eq!(s, 200, "{url} {ae:?}");
        assert!(!h.contains_key("content-encoding"), "{url} {ae:?}: {h:?}");
        assert!(
            field(&h, "vary")
                .to_ascii_lowercase()
                .contains("accept-encoding"),
            "{url} {ae:?}: {h:?}"
        );
        assert_eq!(&body[..], want, "{url} {ae:?}");
    }
}

fn proxy_site(o: &Origin, extra: &str) -> String {
    format!(
        "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = \"{}\"\n{extra}",
        o.addr
    )
}

#[tokio::test]
async fn a_proxied_answer_is_compressed_for_a_client_that_asks_and_only_then() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &proxy_site(&o, "compress = true\n"));
    let url = w.url("/page");
    check_codings(&url, &page()).await;
    // The compressed answer's ETag is weak: its bytes are not the
    // identity's, yet a conditional request still matches upstream.
    let (_, h, _) = get(&url, &[("accept-encoding", "gzip")]).await;
    assert_eq!(field(&h, "etag"), "W/\"p1\"");
    let (_, h, _) = get(&url, &[]).await;
    assert_eq!(field(&h, "etag"), "\"p1\"");
    assert_eq!(field(&h, "content-length"), page().len().to_string());

    // Without `compress`, a proxied answer goes out as the origin sent it.
    let plain = Weir::start(WEIR, &proxy_site(&o, ""));
    let (_, h, body) = get(&plain.url("/page"), &[("accept-encoding", "gzip, br")]).await;
    assert!(!h.contains_key("content-encoding"), "{h:?}");
    assert_eq!(body, page());
}

#[tokio::test]
async fn a_range_a_no_transform_and_an_encoded_answer_pass_untouched() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &proxy_site(&o, "compress = true\n"));
    let ae = ("accept-encoding", "gzip, br, zstd");

    let (s, h, body) = get(&w.url("/page"), &[ae, ("range", "bytes=100-199")]).await;
    assert_eq!(s, 206);
    assert!(!h.contains_key("content-encoding"), "{h:?}");
    assert_eq!(
        field(&h, "content-range"),
        format!("bytes 100-199/{}", page().len())
    );
    assert_eq!(body, page().slice(100..200));

    let (s, h, body) = get(&w.url("/no-transform"), &[ae]).await;
    assert_eq!(s, 200);
    assert!(!h.contains_key("content-encoding"), "{h:?}");
    assert_eq!(body, page());

    let (s, h, body) = get(&w.url("/encoded"), &[ae]).await;
    assert_eq!(s, 200);
    assert_eq!(field(&h, "content-encoding"), "gzip");
    assert_eq!(
        decode("gzip", &body).await,
        page(),
        "encoded once, by the origin"
    );
}

/// Reads `url` with `ae` until `done` holds for the bytes so far, or 5 s
/// pass; the origin then stays silent for 30 s, so only what weir sent at
/// once can satisfy it.
async fn first_bytes(
    w: &Weir,
    path: &str,
    ae: &str,
    done: impl Fn(&http::HeaderMap, &[u8]) -> bool,
) -> (http::HeaderMap, Vec<u8>) {
    let r = client()
        .get(w.url(path))
        .header("accept-encoding", ae)
        .send()
        .await
        .unwrap();
    let h = r.headers().clone();
    let mut stream = r.bytes_stream();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !done(&h, &got) {
            match stream.next().await {
                Some(Ok(b)) => got.extend_from_slice(&b),
                _ => break,
            }
        }
    })
    .await;
    assert!(read.is_ok(), "{path}: only {got:?} within 5 s; {h:?}");
    (h, got)
}

/// What a gzip stream cut short decodes to so far.
fn gunzip_prefix(data: &[u8]) -> Vec<u8> {
    let mut d = flate2::write::GzDecoder::new(Vec::new());
    let _ = d.write_all(data);
    let _ = d.flush();
    d.get_ref().clone()
}

#[tokio::test]
async fn an_event_stream_and_a_long_poll_through_a_compressing_proxy_arrive_at_once() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &proxy_site(&o, "compress = true\n"));
    // An event stream is never compressed: the event arrives as it is.
    let (h, got) = first_bytes(&w, "/sse", "gzip, br", |_, b| {
        b.windows(13).any(|x| x == b"data: first\n\n")
    })
    .await;
    assert!(!h.contains_key("content-encoding"), "{h:?}");
    assert_eq!(got, b"data: first\n\n");
    // Another streamed answer is compressed, and what the origin sent is
    // flushed to the client while the origin waits.
    let line = b"tick 0: the first line of a long poll\n";
    let (h, got) = first_bytes(&w, "/ticks", "gzip", |_, b| gunzip_prefix(b) == line).await;
    assert_eq!(field(&h, "content-encoding"), "gzip");
    assert_eq!(gunzip_prefix(&got), line);
}

#[tokio::test]
async fn an_apps_answer_is_compressed() {
    let size = 20_000;
    let run = format!(
        "'{}' backend --listen 127.0.0.1:$PORT --threads 1 --size {size}",
        crate::apps::bench().display()
    );
    let w = Weir::start(
        WEIR,
        &format!("[site.\"127.0.0.1:{{PORT}}\"]\napp = {{ run = \"{run}\" }}\ncompress = true\n"),
    );
    let url = w.url("/");
    assert!(
        poll_until_async(PATIENCE, async || get(&url, &[]).await.0 == 200).await,
        "the app never answered"
    );
    // weir-bench backend's body: the alphabet over and over, as text/plain.
    let want: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    check_codings(&url, &want).await;
}

#[tokio::test]
async fn a_php_answer_is_compressed() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("index.php"),
        "<?php header('Content-Type: text/html; charset=utf-8');\n\
         for ($i = 0; $i < 600; $i++) { echo \"<li>row $i of a PHP page</li>\\n\"; }\n",
    )
    .unwrap();
    let want: String = (0..600)
        .map(|i| format!("<li>row {i} of a PHP page</li>\n"))
        .collect();
    let fpm_dir = tempfile::tempdir().unwrap();
    let sock = fpm_dir.path().join("fpm.sock").display().to_string();
    let _fpm = crate::php::PhpFpm::start(&sock, 2);
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\nphp = \"unix:{sock}\"\ncompress = true\n",
            root.path().display()
        ),
    );
    check_codings(&w.url("/"), want.as_bytes()).await;
}

#[tokio::test]
async fn the_cache_stores_and_serves_the_compressed_variant() {
    let o = Origin::start().await;
    let w = Weir::start(WEIR, &proxy_site(&o, "cache = true\ncompress = true\n"));
    let url = w.url("/cached");
    let status = |h: &http::HeaderMap| field(h, "cache-status").to_string();

    // A miss, compressed before it is stored (gzip: the browsers' `br`
    // and `gzip` at equal qvalue).
    let (_, h, body) = get(&url, &[("accept-encoding", "gzip, br")]).await;
    assert!(status(&h).contains("fwd=miss"), "{h:?}");
    assert_eq!(field(&h, "content-encoding"), "gzip");
    assert_eq!(decode("gzip", &body).await, page());
    // A hit for the same coding however it is spelt, still compressed.
    for ae in ["br, gzip", "gzip, br", "gzip"] {
        let (_, h, body) = get(&url, &[("accept-encoding", ae)]).await;
        assert!(status(&h).contains("hit"), "{ae}: {h:?}");
        assert_eq!(field(&h, "content-encoding"), "gzip", "{ae}");
        assert!(
            field(&h, "vary")
                .to_ascii_lowercase()
                .contains("accept-encoding")
        );
        assert_eq!(decode("gzip", &body).await, page(), "{ae}");
    }
    assert_eq!(o.cached.load(Ordering::SeqCst), 1);
    // A client that asks for no coding is another variant: fetched once
    // (identity), then a hit, never the compressed bytes.
    for n in [2, 2] {
        let (_, h, body) = get(&url, &[]).await;
        assert!(!h.contains_key("content-encoding"), "{h:?}");
        assert_eq!(body, page());
        assert_eq!(o.cached.load(Ordering::SeqCst), n);
    }
    let (_, h, _) = get(&url, &[]).await;
    assert!(status(&h).contains("hit"), "{h:?}");
    // Brotli, for a client that prefers it, is a third variant.
    let (_, h, body) = get(&url, &[("accept-encoding", "br")]).await;
    assert_eq!(field(&h, "content-encoding"), "br");
    assert_eq!(decode("br", &body).await, page());
    let (_, h, _) = get(&url, &[("accept-encoding", "br, gzip;q=0.5")]).await;
    assert!(status(&h).contains("hit"), "{h:?}");
    assert_eq!(field(&h, "content-encoding"), "br");
    let (_, h, _) = get(&url, &[("accept-encoding", "x-gzip, deflate")]).await;
    assert!(status(&h).contains("hit"), "{h:?}");
    assert_eq!(field(&h, "content-encoding"), "gzip");
    assert_eq!(o.cached.load(Ordering::SeqCst), 3);
}
