//! OpenTelemetry traces as the real binary exports them: an OTLP/HTTP
//! receiver in the test decodes each `ExportTraceServiceRequest` with the
//! official protobuf definitions (opentelemetry-proto) and the tests check
//! the spans of proxied, retried and cached requests against what the
//! upstream saw; the same spans reach an OTLP/gRPC receiver; then a
//! collector that stops answering under load costs dropped spans,
//! counted, and no failed request.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;

use weir_bench::backend::{BackendConfig, start as backend};
use weir_bench::load::{LoadConfig, run as load};
use weir_test_support::poll::{PATIENCE, poll_until, poll_until_async};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Upstream, Weir, client};

use crate::WEIR;
use crate::reload::admin;

/// An OTLP/HTTP traces receiver: decodes what it is sent, or, told to
/// hang, takes connections and never answers (a collector that stopped).
struct Collector {
    addr: SocketAddr,
    /// (service.name, span) of every span received.
    spans: Arc<Mutex<Vec<(String, Span)>>>,
    hang: Arc<AtomicBool>,
    posts: Arc<AtomicUsize>,
    /// Connections accepted.
    conns: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    /// An OTLP/HTTP receiver.
    async fn start() -> Collector {
        Collector::serve(false).await
    }

    /// An OTLP/gRPC receiver (`TraceService/Export` over HTTP/2).
    async fn start_grpc() -> Collector {
        Collector::serve(true).await
    }

    async fn serve(grpc: bool) -> Collector {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let spans: Arc<Mutex<Vec<(String, Span)>>> = Arc::default();
        let hang = Arc::new(AtomicBool::new(false));
        let posts = Arc::new(AtomicUsize::new(0));
        let conns = Arc::new(AtomicUsize::new(0));
        let (s2, h2, p2, c2) = (spans.clone(), hang.clone(), posts.clone(), conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = l.accept().await {
                c2.fetch_add(1, Ordering::SeqCst);
                let (spans, hang, posts) = (s2.clone(), h2.clone(), p2.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (spans, hang, posts) = (spans.clone(), hang.clone(), posts.clone());
                        async move {
                            Ok::<_, Infallible>(if grpc {
                                receive_grpc(req, &spans, &posts).await
                            } else {
                                receive(req, &spans, &hang, &posts).await.map(BoxBody::new)
                            })
                        }
                    });
                    let io = TokioIo::new(stream);
                    let _ = if grpc {
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, svc)
                            .await
                    } else {
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, svc)
                            .await
                    };
                });
            }
        });
        Collector {
            addr,
            spans,
            hang,
            posts,
            conns,
            task,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of trace `id` once there are `n` (all there are, if never).
    async fn trace(&self, id: u128, n: usize) -> Vec<Span> {
        let of = || -> Vec<Span> {
            self.spans()
                .into_iter()
                .map(|(_, s)| s)
                .filter(|s| s.trace_id == id.to_be_bytes())
                .collect()
        };
        // The caller asserts on the spans; fewer than `n` shows what came.
        let _ = poll_until_async(PATIENCE, async || of().len() >= n).await;
        of()
    }
}

async fn receive(
    req: hyper::Request<hyper::body::Incoming>,
    spans: &Mutex<Vec<(String, Span)>>,
    hang: &AtomicBool,
    posts: &AtomicUsize,
) -> hyper::Response<Full<Bytes>> {
    if hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    posts.fetch_add(1, Ordering::SeqCst);
    let ok = req.method() == http::Method::POST
        && req.uri().path() == "/v1/traces"
        && req.headers()["content-type"] == "application/x-protobuf";
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let decoded = ExportTraceServiceRequest::decode(body).expect("a valid OTLP request");
    assert!(ok, "not an OTLP/HTTP protobuf POST to /v1/traces");
    store(decoded, spans);
    hyper::Response::new(Full::new(Bytes::new()))
}

/// A gRPC `TraceService/Export` call: one length-prefixed message in, an
/// empty `ExportTraceServiceResponse` and `grpc-status: 0` in trailers out.
async fn receive_grpc(
    req: hyper::Request<hyper::body::Incoming>,
    spans: &Mutex<Vec<(String, Span)>>,
    posts: &AtomicUsize,
) -> hyper::Response<BoxBody<Bytes, Infallible>> {
    posts.fetch_add(1, Ordering::SeqCst);
    let ok = req.method() == http::Method::POST
        && req.version() == http::Version::HTTP_2
        && req.uri().path() == "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        && req.headers()["content-type"] == "application/grpc"
        && req.headers()["te"] == "trailers";
    assert!(ok, "not a gRPC Export call: {req:?}");
    let body = req.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body[0], 0, "a compressed message");
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, body.len() - 5, "one whole message");
    let decoded = ExportTraceServiceRequest::decode(body.slice(5..)).expect("a valid OTLP request");
    store(decoded, spans);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
        .with_trailers(async move { Some(Ok(trailers)) });
    hyper::Response::builder()
        .header("content-type", "application/grpc")
        .body(BoxBody::new(body))
        .unwrap()
}

fn store(decoded: ExportTraceServiceRequest, spans: &Mutex<Vec<(String, Span)>>) {
    for rs in decoded.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            assert_eq!(ss.scope.as_ref().map(|s| s.name.as_str()), Some("weir"));
            let mut all = spans.lock().unwrap();
            all.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
        }
    }
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn int(s: &Span, key: &str) -> Option<i64> {
    match attr(s, key)? {
        Value::IntValue(n) => Some(*n),
        _ => None,
    }
}

fn text<'a>(s: &'a Span, key: &str) -> Option<&'a str> {
    match attr(s, key)? {
        Value::StringValue(v) => Some(v),
        _ => None,
    }
}

fn id64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().expect("an 8-byte span ID"))
}

/// The span ID in the `traceparent` an upstream received, and its trace.
fn sent_upstream(tp: &str) -> (u128, u64, &str) {
    let p: Vec<&str> = tp.split('-').collect();
    assert_eq!(p.len(), 4, "{tp}");
    (
        u128::from_str_radix(p[1], 16).unwrap(),
        u64::from_str_radix(p[2], 16).unwrap(),
        p[3],
    )
}

fn one<'a>(spans: &'a [Span], what: &str, f: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| f(s)).collect();
    assert_eq!(found.len(), 1, "{what}: {spans:#?}");
    found[0]
}

/// A client's sampled trace is continued: the request's server span is the
/// child of the client's span, each upstream attempt a client span under it
/// whose ID is the one the upstream received; a retry gives two attempts;
/// a cached hit's span says so. Untraced requests (the ratio is 0 and the
/// client's flag says no) and an opted-out site make no spans.
#[tokio::test]
async fn spans_follow_a_request_through_the_proxy_retries_and_the_cache() {
    let collector = Collector::start().await;
    let a = Upstream::start("a").await;
    let dead = free_port();
    let origin = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.txt"), "cached").unwrap();
    let cfg = format!(
        r#"[server]
workers = 1

[traces]
endpoint = "{endpoint}"
sample = 0.0
service_name = "edge"
interval = "50ms"

[site."127.0.0.1:{{PORT}}"]

[[site."127.0.0.1:{{PORT}}".route]]
path = "/retry/*"
proxy = {{ to = ["127.0.0.1:{dead}", "{a}"], balance = "first", retries = 2 }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/c.txt"
proxy = {{ to = ["127.0.0.1:{origin}"] }}
cache = true

[[site."127.0.0.1:{{PORT}}".route]]
path = "/*"
proxy = {{ to = ["{a}"] }}

[site."127.0.0.1:{origin}"]
root = "{www}"
headers = {{ Cache-Control = "max-age=60" }}
traces = false
"#,
        endpoint = collector.endpoint(),
        a = a.addr,
        www = dir.path().display(),
    );
    let w = Weir::start(WEIR, &cfg);
    let c = client();
    let get = |path: &str, tp: Option<String>| {
        let mut r = c.get(w.url(path));
        if let Some(tp) = tp {
            r = r.header("traceparent", tp);
        }
        async move {
            let r = r.send().await.unwrap();
            let s = r.status().as_u16();
            let h = r.headers().clone();
            r.bytes().await.unwrap();
            (s, h)
        }
    };
    let tp = |t: u128, s: u64, flags: &str| format!("00-{t:032x}-{s:016x}-{flags}");

    // Not traced: no traceparent at ratio 0, and a client's unsampled one.
    assert_eq!(get("/plain/0", None).await.0, 200);
    assert_eq!(get("/plain/1", Some(tp(0x1111, 0x22, "00"))).await.0, 200);

    // A proxied request.
    let (t1, client_span) = (
        0x4bf92f3577b34da6a3ce929d0e0e4736u128,
        0x00f067aa0ba902b7u64,
    );
    assert_eq!(
        get("/plain/2?q=1", Some(tp(t1, client_span, "01"))).await.0,
        200
    );
    let spans = collector.trace(t1, 2).await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let server = one(&spans, "server span", |s| s.kind == SpanKind::Server as i32);
    assert_eq!(id64(&server.parent_span_id), client_span);
    assert_eq!(server.name, "GET /*");
    assert_eq!(text(server, "http.request.method"), Some("GET"));
    assert_eq!(text(server, "http.route"), Some("/*"));
    assert_eq!(text(server, "url.path"), Some("/plain/2"));
    assert_eq!(text(server, "url.query"), Some("q=1"));
    assert_eq!(int(server, "http.response.status_code"), Some(200));
    assert_eq!(text(server, "client.address"), Some("127.0.0.1"));
    assert!(server.end_time_unix_nano >= server.start_time_unix_nano);
    let attempt = one(&spans, "upstream span", |s| {
        s.kind == SpanKind::Client as i32
    });
    assert_eq!(attempt.parent_span_id, server.span_id);
    assert_eq!(int(attempt, "http.response.status_code"), Some(200));
    assert_eq!(text(attempt, "http.request.method"), Some("GET"));
    assert_eq!(int(attempt, "server.port"), Some(i64::from(a.addr.port())));
    assert!(attempt.start_time_unix_nano >= server.start_time_unix_nano);
    assert!(attempt.end_time_unix_nano <= server.end_time_unix_nano);
    let seen = a.seen();
    let upstream_tp = seen
        .iter()
        .find(|s| s.uri == "/plain/2?q=1")
        .and_then(|s| s.headers.get("traceparent"))
        .expect("traceparent upstream")
        .to_str()
        .unwrap()
        .to_string();
    let (t, span, flags) = sent_upstream(&upstream_tp);
    assert_eq!((t, flags), (t1, "01"), "{upstream_tp}");
    assert_eq!(
        span,
        id64(&attempt.span_id),
        "the upstream saw another span"
    );
    assert_eq!(collector.spans()[0].0, "edge");

    // A retried request: two attempts, the first failed, the second sent
    // its own span ID upstream.
    let t2 = 0xabcdefu128;
    assert_eq!(get("/retry/x", Some(tp(t2, 7, "01"))).await.0, 200);
    let spans = collector.trace(t2, 3).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let server = one(&spans, "server span", |s| s.kind == SpanKind::Server as i32);
    assert_eq!(text(server, "http.route"), Some("/retry/*"));
    let failed = one(&spans, "failed attempt", |s| {
        text(s, "error.type") == Some("connect")
    });
    let retried = one(&spans, "retried attempt", |s| {
        int(s, "http.request.resend_count") == Some(1)
    });
    for s in [failed, retried] {
        assert_eq!(s.kind, SpanKind::Client as i32);
        assert_eq!(s.parent_span_id, server.span_id);
    }
    assert_eq!(int(failed, "server.port"), Some(i64::from(dead)));
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(2));
    assert_eq!(int(retried, "http.response.status_code"), Some(200));
    let upstream_tp = a
        .seen()
        .iter()
        .find(|s| s.uri == "/retry/x")
        .and_then(|s| s.headers.get("traceparent"))
        .map(|v| v.to_str().unwrap().to_string())
        .expect("traceparent upstream");
    assert_eq!(sent_upstream(&upstream_tp).1, id64(&retried.span_id));

    // A cached route: a miss (the cache's span over the attempt), then a hit
    // (the cache's span alone).
    let (t3, t4) = (0x3333u128, 0x4444u128);
    let (s, h) = get("/c.txt", Some(tp(t3, 9, "01"))).await;
    assert_eq!(s, 200);
    assert!(h["cache-status"].to_str().unwrap().contains("fwd=miss"));
    let spans = collector.trace(t3, 3).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let server = one(&spans, "server span", |s| s.kind == SpanKind::Server as i32);
    let cache = one(&spans, "cache span", |s| s.name == "cache");
    assert_eq!(cache.parent_span_id, server.span_id);
    assert_eq!(
        attr(cache, "weir.cache.hit"),
        Some(&Value::BoolValue(false))
    );
    let fetch = one(&spans, "fetch", |s| s.kind == SpanKind::Client as i32);
    assert_eq!(fetch.parent_span_id, cache.span_id);
    let (s, h) = get("/c.txt", Some(tp(t4, 9, "01"))).await;
    assert_eq!(s, 200);
    assert!(h["cache-status"].to_str().unwrap().contains("hit"));
    let spans = collector.trace(t4, 2).await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let cache = one(&spans, "cache span", |s| s.name == "cache");
    assert_eq!(attr(cache, "weir.cache.hit"), Some(&Value::BoolValue(true)));
    assert!(
        text(cache, "weir.cache.status").is_some_and(|v| v.contains("hit")),
        "{cache:#?}"
    );

    // Everything queued before the last spans has arrived with them: the
    // untraced requests and the opted-out origin made none.
    let traces: HashSet<Vec<u8>> = collector
        .spans()
        .into_iter()
        .map(|(_, s)| s.trace_id)
        .collect();
    let want: HashSet<Vec<u8>> = [t1, t2, t3, t4]
        .iter()
        .map(|t| t.to_be_bytes().to_vec())
        .collect();
    assert_eq!(traces, want);
    assert_eq!(collector.spans().len(), 2 + 3 + 3 + 2);
}

/// Every request sampled, then the collector stops answering under load:
/// no request fails or waits on it, and the spans it cannot take are
/// dropped and counted at /metrics.
#[test]
fn a_collector_that_stops_answering_costs_dropped_spans_not_requests() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let collector = rt.block_on(Collector::start());
    let up = backend(&BackendConfig {
        listen: weir_test_support::process::addr(0),
        size: 10,
        delay: Duration::ZERO,
        threads: 1,
    })
    .unwrap();
    let (adm, site) = (free_port(), free_port());
    let w = Weir::start_on(
        WEIR,
        &format!(
            r#"[server]
workers = 2

[admin]
listen = "127.0.0.1:{adm}"

[traces]
endpoint = "{endpoint}"
interval = "50ms"
timeout = "300ms"
batch = 64
queue = 1024

[site."127.0.0.1:{site}"]
proxy = {{ to = ["127.0.0.1:{port}"] }}
"#,
            endpoint = collector.endpoint(),
            port = up.addr.port(),
        ),
        &[adm, site],
    );
    let metric = |name: &str| -> u64 {
        let (_, m) = admin(adm, "GET", "/metrics", "");
        m.lines()
            .find_map(|l| {
                let v = l.strip_prefix(name)?;
                v.strip_prefix("{}").unwrap_or(v).trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no {name} in:\n{m}"))
    };
    let run = |secs: u64| {
        let mut c = LoadConfig::new(&format!("http://127.0.0.1:{site}/"));
        c.rate = Some(2000.0);
        c.connections = 20;
        c.duration = Some(Duration::from_secs(secs));
        c.timeout = Duration::from_secs(5);
        load(&c).unwrap()
    };
    // Answering: spans arrive, none dropped.
    let rep = run(2);
    assert_eq!(rep.errors.total(), 0, "{:?}", rep.errors);
    assert!(poll_until(PATIENCE, || metric(
        "weir_trace_spans_exported_total"
    ) >= 2 * rep.status[&200]));
    assert_eq!(metric("weir_trace_spans_dropped_total"), 0);
    assert!(collector.spans().len() as u64 >= 2 * rep.status[&200]);
    // In batches: far fewer exports than spans.
    let posts = collector.posts.load(Ordering::SeqCst) as u64;
    assert!(
        posts > 0 && posts * 8 < 2 * rep.status[&200],
        "{posts} exports"
    );
    let rss = w.rss_kib();

    // It stops answering: every request still succeeds, spans are dropped.
    collector.hang.store(true, Ordering::SeqCst);
    let rep = run(3);
    assert_eq!(rep.errors.total(), 0, "{:?}", rep.errors);
    assert_eq!(rep.status.keys().copied().collect::<Vec<_>>(), [200]);
    assert!(rep.status[&200] > 1000, "{:?}", rep.status);
    // Two spans a request (the request's, the attempt's): all but those
    // a thread's buffer and the batch in export hold are dropped (a failed
    // export drops the rest of what it took).
    assert!(poll_until(PATIENCE, || metric(
        "weir_trace_spans_dropped_total"
    ) + 1024
        + 64
        >= 2 * rep.status[&200]));
    // The buffers' limit bounds what waits: memory stays where it was.
    let grown = w.rss_kib().saturating_sub(rss);
    assert!(grown < 20 * 1024, "RSS grew by {grown} KiB");
    drop(rt);
}

/// `protocol = "grpc"`: the same spans, with their parent links and
/// attributes, reach an OTLP/gRPC receiver.
#[tokio::test]
async fn spans_reach_a_grpc_collector() {
    let collector = Collector::start_grpc().await;
    let a = Upstream::start("a").await;
    let cfg = format!(
        r#"[server]
workers = 1

[traces]
endpoint = "http://{addr}"
protocol = "grpc"
service_name = "edge"
interval = "50ms"

[site."127.0.0.1:{{PORT}}"]
proxy = "{a}"
"#,
        addr = collector.addr,
        a = a.addr,
    );
    let w = Weir::start(WEIR, &cfg);
    let (t, parent) = (
        0x0af7651916cd43dd8448eb211c80319cu128,
        0xb7ad6b7169203331u64,
    );
    let r = client()
        .get(w.url("/grpc/1?x=y"))
        .header("traceparent", format!("00-{t:032x}-{parent:016x}-01"))
        .header("user-agent", "grpc-test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    let spans = collector.trace(t, 2).await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let server = one(&spans, "server span", |s| s.kind == SpanKind::Server as i32);
    let attempt = one(&spans, "client span", |s| s.kind == SpanKind::Client as i32);
    assert_eq!(id64(&server.parent_span_id), parent);
    assert_eq!(attempt.parent_span_id, server.span_id);
    assert_eq!(text(server, "url.path"), Some("/grpc/1"));
    assert_eq!(text(server, "url.query"), Some("x=y"));
    assert_eq!(text(server, "user_agent.original"), Some("grpc-test"));
    assert_eq!(text(server, "client.address"), Some("127.0.0.1"));
    assert_eq!(int(server, "http.response.status_code"), Some(200));
    assert_eq!(int(attempt, "http.response.status_code"), Some(200));
    assert!(collector.spans().iter().all(|(svc, _)| svc == "edge"));
}

/// The exporter keeps its connection to the collector: batches sent a
/// while apart arrive on one connection, over OTLP/HTTP and OTLP/gRPC.
#[tokio::test]
async fn batches_share_one_connection_to_the_collector() {
    for grpc in [false, true] {
        let collector = Collector::serve(grpc).await;
        let a = Upstream::start("a").await;
        let endpoint = if grpc {
            format!("http://{}", collector.addr)
        } else {
            collector.endpoint()
        };
        let cfg = format!(
            "[server]\nworkers = 1\n\n[traces]\nendpoint = \"{endpoint}\"\nprotocol = \"{}\"\ninterval = \"50ms\"\n\n\
             [site.\"127.0.0.1:{{PORT}}\"]\nproxy = \"{}\"\n",
            if grpc { "grpc" } else { "http/protobuf" },
            a.addr,
        );
        let w = Weir::start(WEIR, &cfg);
        for i in 1..=3u128 {
            let r = client()
                .get(w.url("/"))
                .header("traceparent", format!("00-{i:032x}-{:016x}-01", 7))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
            // Each request's spans come in a batch of their own.
            assert_eq!(collector.trace(i, 2).await.len(), 2, "grpc {grpc}");
        }
        assert!(collector.posts.load(Ordering::SeqCst) >= 3, "grpc {grpc}");
        assert_eq!(collector.conns.load(Ordering::SeqCst), 1, "grpc {grpc}");
    }
}
