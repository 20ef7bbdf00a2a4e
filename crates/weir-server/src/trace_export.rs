//! The trace exporter (`[traces]`): one thread of its own takes the spans
//! requests ended (`weir_http::trace::take`, every thread's buffer of
//! them), wraps them in an OTLP `ExportTraceServiceRequest` per batch and
//! sends it to the collector: POSTed through the proxy's HTTP/1.1 client
//! (OTLP/HTTP), or as a gRPC `TraceService/Export` call over HTTP/2
//! (OTLP/gRPC, [`grpc`]).
//!
//! It never runs on a worker and a request never waits for it: it wakes
//! when a thread has a batch waiting, else every `interval`. It keeps its
//! connection to the collector for the next batch, as OpenTelemetry's own
//! exporters do. While an export is slow or the collector is down, the
//! threads' buffers fill to their limit (`queue` spans each) and new spans
//! are dropped and counted; a failed export drops its batch. One exporter
//! per process; a reload changes the endpoint, the batching and the
//! timeout (the limit stays the first one).
//!
//! The OTLP protobuf is written by hand ([`otlp`]): the OpenTelemetry SDK
//! allocates and locks per span on the request path, and the generated
//! protobuf types would bring tonic and the SDK into the binary for ten
//! message fields; the e2e tests decode what is sent with the official
//! definitions (`opentelemetry-proto`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};

use weir_config::traces::{Protocol, TracesConfig};
use weir_http::trace::{DROPPED, EXPORTED, Ended};
use weir_proxy::h1_client::{Conn, one_shot};

mod grpc;
mod otlp;

static SETTINGS: OnceLock<ArcSwap<TracesConfig>> = OnceLock::new();

/// Starts the exporter the first time a config has `[traces]`; later,
/// hands it the new settings. A config without `[traces]` leaves it be:
/// its sites sample nothing, so it idles.
pub(crate) fn configure(cfg: Option<&TracesConfig>) {
    let Some(cfg) = cfg else { return };
    if !weir_http::trace::install(cfg.queue, cfg.batch) {
        if let Some(s) = SETTINGS.get() {
            s.store(Arc::new(cfg.clone()));
        }
        return;
    }
    if SETTINGS.set(ArcSwap::from_pointee(cfg.clone())).is_err() {
        return;
    }
    if let Err(e) = weir_http::background::spawn("weir-traces".into(), "trace exporter", export) {
        tracing::error!("traces: cannot start the exporter thread: {e}");
    }
}

async fn export() {
    let mut ended = Ended::default();
    // The last failure logged: one line a minute while the collector fails.
    let mut warned: Option<Instant> = None;
    let mut collector = Collector::default();
    loop {
        let Some(cfg) = SETTINGS.get().map(|s| s.load_full()) else {
            return;
        };
        // A thread with a batch waiting wakes this; else what came within
        // `interval` goes as it is.
        let _ = tokio::time::timeout(cfg.interval, weir_http::trace::full()).await;
        weir_http::trace::take(&mut ended);
        let mut failed = false;
        for (spans, n) in otlp::batches(&ended.bytes, cfg.batch) {
            if failed {
                // The collector just failed: the rest is not sent to wait
                // out another timeout each.
                DROPPED.fetch_add(n as u64, Relaxed);
                continue;
            }
            let body = Bytes::from(otlp::encode(
                &cfg.service_name,
                env!("CARGO_PKG_VERSION"),
                spans,
            ));
            failed = !send(&cfg, &mut collector, body, n as u64, &mut warned).await;
        }
        ended.clear();
    }
}

/// The connection kept to the collector between batches, with the
/// endpoint it goes to (a reload may name another).
#[derive(Default)]
struct Collector {
    endpoint: Option<http::Uri>,
    http: Option<Conn>,
    grpc: Option<grpc::Channel>,
}

impl Collector {
    /// Forgets a connection to another endpoint than `uri`.
    fn to(&mut self, uri: &http::Uri) -> &mut Collector {
        if self.endpoint.as_ref() != Some(uri) {
            *self = Collector {
                endpoint: Some(uri.clone()),
                ..Collector::default()
            };
        }
        self
    }
}

/// Sends one batch of `n` spans and counts them exported or dropped;
/// whether the collector took them.
async fn send(
    cfg: &TracesConfig,
    collector: &mut Collector,
    body: Bytes,
    n: u64,
    warned: &mut Option<Instant>,
) -> bool {
    let collector = collector.to(&cfg.endpoint);
    let send = async {
        match cfg.protocol {
            Protocol::HttpProtobuf => {
                match post(&cfg.endpoint, &mut collector.http, &body).await? {
                    s if (200..300).contains(&s) => Ok(()),
                    s => Err(format!("it answered {s}")),
                }
            }
            Protocol::Grpc => grpc::export(&cfg.endpoint, &mut collector.grpc, body).await,
        }
    };
    let failure = match tokio::time::timeout(cfg.timeout, send).await {
        Ok(Ok(())) => {
            EXPORTED.fetch_add(n, Relaxed);
            if warned.take().is_some() {
                tracing::info!("traces: {} accepts spans again", cfg.endpoint);
            }
            return true;
        }
        Ok(Err(e)) => e,
        Err(_) => {
            // The connection is left in an unknown state.
            *collector = Collector::default();
            format!("no answer within {:?}", cfg.timeout)
        }
    };
    DROPPED.fetch_add(n, Relaxed);
    if warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
        *warned = Some(Instant::now());
        tracing::warn!(
            "traces: cannot export to {}: {failure}; spans are dropped until it answers",
            cfg.endpoint
        );
    }
    false
}

/// A connection to the collector at `uri`'s host and port
/// (`default_port` when it names none), with Nagle off.
async fn connect(uri: &http::Uri, default_port: u16) -> Result<tokio::net::TcpStream, String> {
    let host = uri.host().ok_or("no host")?;
    let port = uri.port_u16().unwrap_or(default_port);
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// POSTs `body` to `uri` on the kept connection (`kept`, if still open;
/// else a new one) and keeps the connection when the answer allows;
/// the answer's status. A kept connection the collector closed as the
/// batch went out is replaced once, as OpenTelemetry's exporters retry.
async fn post(uri: &http::Uri, kept: &mut Option<Conn>, body: &Bytes) -> Result<u16, String> {
    let authority = uri.authority().ok_or("no host")?.as_str();
    let host_field = HeaderValue::from_str(authority).map_err(|e| e.to_string())?;
    let mut fields = HeaderMap::new();
    fields.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    fields.insert(header::USER_AGENT, HeaderValue::from_static("weir"));
    let target = uri.path_and_query().map_or("/v1/traces", |p| p.as_str());
    let post = |c: Conn| {
        one_shot::send_on(
            c,
            &http::Method::POST,
            target,
            &host_field,
            &fields,
            Some(body),
        )
    };
    let reused = kept
        .take()
        .and_then(|mut c| c.is_idle_and_open().then_some(c));
    let (head, conn) = match reused {
        Some(c) => match post(c).await {
            Err(e) if e.is_closed_before_response() => {
                post(Conn::new(Box::new(connect(uri, 80).await?))).await
            }
            r => r,
        },
        None => post(Conn::new(Box::new(connect(uri, 80).await?))).await,
    }
    .map_err(|e| e.to_string())?;
    // The answer (an ExportTraceServiceResponse) says nothing weir acts on.
    if let Ok((_, c)) = one_shot::read_body_keep(conn, &head, 64 * 1024).await {
        *kept = c;
    }
    Ok(head.parts.status.as_u16())
}
