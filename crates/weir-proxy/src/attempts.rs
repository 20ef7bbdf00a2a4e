//! What the proxy tried for one request, kept with the answer (as a
//! response extension) for the access log's `upstream_*` variables. Only
//! recorded when the proxy's config asks (`record_attempts`); never read
//! by the proxy itself. And each attempt of a traced request as a client
//! span ([`Span`]), which nothing else pays for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::Upstream;

/// One upstream tried.
#[derive(Clone)]
pub struct Attempt {
    pub upstream: Arc<Upstream>,
    /// Its response's status; `None` when it never answered.
    pub status: Option<u16>,
    /// How long getting a connection took (a pooled one: about nothing).
    pub connect: Option<Duration>,
    /// From sending the request to the response head.
    pub response: Option<Duration>,
}

impl Attempt {
    /// The upstream as the config names it (`10.0.0.1:8080`).
    pub fn addr(&self) -> &str {
        &self.upstream.cfg.name
    }
}

/// Every upstream tried for one request, in order (one, usually: kept
/// inline).
#[derive(Clone, Default)]
pub struct Attempts(pub SmallVec<[Attempt; 1]>);

/// The attempts of one request while the proxy makes them: nothing at all
/// unless recording, so a proxy whose site logs no upstream pays nothing.
pub(crate) struct Recorder {
    on: bool,
    list: SmallVec<[Attempt; 1]>,
    started: Option<Instant>,
}

impl Recorder {
    pub fn new(on: bool) -> Recorder {
        Recorder {
            on,
            list: SmallVec::new(),
            started: None,
        }
    }

    /// An attempt on `up` begins (before its connection is got).
    pub fn begin(&mut self, up: &Arc<Upstream>) {
        if self.on {
            self.list.push(Attempt {
                upstream: up.clone(),
                status: None,
                connect: None,
                response: None,
            });
            self.started = Some(Instant::now());
        }
    }

    /// The connection is there; the request goes out now.
    pub fn connected(&mut self) {
        if let (Some(a), Some(t)) = (self.list.last_mut(), self.started) {
            let now = Instant::now();
            a.connect = Some(now - t);
            self.started = Some(now);
        }
    }

    /// The response head came, with `status`.
    pub fn answered(&mut self, status: u16) {
        if let (Some(a), Some(t)) = (self.list.last_mut(), self.started) {
            a.response = Some(t.elapsed());
            a.status = Some(status);
        }
    }

    /// `resp` with the attempts attached (when recording).
    pub fn attach(
        self,
        mut resp: http::Response<weir_http::body::Body>,
    ) -> http::Response<weir_http::body::Body> {
        if self.on {
            resp.extensions_mut().insert(Attempts(self.list));
        }
        resp
    }
}

/// One attempt of a traced request (the request carries a
/// `weir_http::trace::Current`) as a client span, child of the request's
/// span; its ID is the one `traceparent` sends upstream. Boxed: an
/// untraced request's future holds a null pointer.
pub(crate) struct Span(Option<Box<weir_http::trace::Record>>);

impl Span {
    /// `retry`: how many attempts came before this one.
    pub fn begin(
        on: Option<&weir_http::trace::Current>,
        method: &http::Method,
        up: &Upstream,
        retry: u32,
    ) -> Span {
        Span(on.map(|c| {
            let mut r = c.child(
                weir_http::trace::method(method),
                weir_http::trace::Kind::Client,
            );
            r.attr("http.request.method", method.as_str());
            match &up.cfg.target {
                weir_config::proxy::UpstreamTarget::Tcp { host, port } => {
                    r.attr("server.address", host);
                    r.attr("server.port", i64::from(*port));
                }
                weir_config::proxy::UpstreamTarget::Unix(p) => {
                    r.attr_display("server.address", p.display());
                }
            }
            r.attr("weir.upstream", &up.cfg.name);
            if retry > 0 {
                r.attr("http.request.resend_count", i64::from(retry));
            }
            Box::new(r)
        }))
    }

    /// (trace ID, span ID) to send upstream.
    pub fn ids(&self) -> Option<(u128, u64)> {
        self.0.as_ref().map(|r| (r.trace_id, r.span_id))
    }

    /// The upstream answered with `status`.
    pub fn answered(self, status: u16) {
        if let Some(mut r) = self.0 {
            r.attr("http.response.status_code", i64::from(status));
            r.error = status >= 500;
            r.end();
        }
    }

    /// The attempt failed: `error.type` names how.
    pub fn failed(self, e: &crate::ProxyError) {
        if let Some(mut r) = self.0 {
            r.attr("error.type", e.kind());
            r.error = true;
            r.end();
        }
    }
}
