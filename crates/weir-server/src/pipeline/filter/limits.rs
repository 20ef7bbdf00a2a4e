//! A layer's `limit`s: each admits the request (429 with `Retry-After`,
//! or a delay; a connection slot held until the answer is done), and
//! their response filter ([`LimitFields`]) counts what window limits count
//! of the answer and adds the `RateLimit` fields.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;
use weir_traffic::clock::now_ms;
use weir_traffic::limit::{Decision, Limiter, Quota};

use super::{Checking, Layer, RequestFilter};
use crate::access_log::LimitStatus;
use crate::pipeline::{Exchange, ResponseFilter};

pub(in crate::pipeline) struct Limits {
    limiters: Arc<[Arc<Limiter>]>,
    /// For log lines.
    label: String,
    /// `SITE` or `ROUTE`: where it keeps what the answer owes.
    index: usize,
}

/// What one layer's limits owe the answer.
#[derive(Default)]
pub(in crate::pipeline) struct Owed {
    /// (limiter index, key) of window limits that count the answer.
    counted: Vec<(usize, Option<u64>)>,
    /// The `RateLimit` fields of the first limit that sends them.
    quota: Option<(usize, Quota)>,
}

impl Owed {
    pub fn is_empty(&self) -> bool {
        self.counted.is_empty() && self.quota.is_none()
    }
}

/// Nothing owed (a refused request).
static NOTHING_OWED: Owed = Owed {
    counted: Vec::new(),
    quota: None,
};

impl Limits {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        (!layer.limiters.is_empty()).then(|| Limits {
            limiters: layer.limiters.clone(),
            label: layer.label.to_string(),
            index: layer.index,
        })
    }
}

impl RequestFilter for Limits {
    fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        let (parts, client) = (&*req.parts, req.client);
        let passed = &mut *req.passed;
        let owed = &mut passed.owed[self.index];
        let now = now_ms();
        let mut delay = 0;
        for (i, l) in self.limiters.iter().enumerate() {
            let a = l.admit(l.key(parts, client), now);
            if let Some(h) = a.held {
                passed.held.push(h);
            }
            if l.counts_answers() {
                owed.counted.push((i, a.key));
            }
            if owed.quota.is_none()
                && let Some(q) = a.quota
            {
                owed.quota = Some((i, q));
            }
            let evicted = l.take_evictions(now);
            if evicted > 0 {
                tracing::warn!(
                    "{}: limit {}: {} keys tracked, the most it holds: {evicted} least recently seen forgotten (raise its `size`)",
                    self.label,
                    l.cfg.name,
                    l.capacity()
                );
            }
            let at = (self.index as u8, i as u16);
            match a.decision {
                Decision::Pass => req.outcome.limit(LimitStatus::Passed, at),
                Decision::Delay(ms) => {
                    // The longest delay names the limit.
                    if ms > delay && req.outcome.limit <= LimitStatus::Delayed {
                        req.outcome.limit = LimitStatus::Delayed;
                        req.outcome.limit_at = Some(at);
                    }
                    delay = delay.max(ms);
                }
                Decision::Refuse(_) if l.cfg.dry_run => {
                    req.outcome.limit(LimitStatus::RejectedDryRun, at);
                    tracing::info!(
                        "{}: limit {} would refuse {client} {} {} (dry run)",
                        self.label,
                        l.cfg.name,
                        parts.method,
                        parts.uri.path()
                    );
                }
                Decision::Refuse(ms) => {
                    req.outcome.limit(LimitStatus::Rejected, at);
                    let mut r = refusal(l, ms);
                    if let Some((qi, q)) = owed.quota.take() {
                        quota_fields(&self.limiters[qi], q, r.headers_mut());
                    }
                    return Err(r);
                }
            }
        }
        Ok(delay)
    }
}

/// The response filter of a layer's limits: what they count of the answer
/// (status, bytes) and the `RateLimit` fields.
pub(in crate::pipeline) struct LimitFields {
    pub limiters: Arc<[Arc<Limiter>]>,
    /// `SITE` or `ROUTE`.
    pub layer: usize,
}

impl ResponseFilter for LimitFields {
    fn response(&self, ex: &Exchange<'_>, resp: &mut Response<Body>) {
        let owed = ex.passed.map_or(&NOTHING_OWED, |p| &p.owed[self.layer]);
        if !owed.counted.is_empty() {
            let now = now_ms();
            let bytes = crate::pipeline::content_length(resp.headers()).unwrap_or(0);
            for (i, key) in &owed.counted {
                self.limiters[*i].answered(*key, resp.status().as_u16(), bytes, now);
            }
        }
        if let Some((i, q)) = owed.quota {
            quota_fields(&self.limiters[i], q, resp.headers_mut());
        }
    }
}

/// The answer of a limit that refuses: its status, `Retry-After` in whole
/// seconds (at least 1), its body.
fn refusal(l: &Limiter, retry_ms: u64) -> Response<Body> {
    let status = StatusCode::from_u16(l.cfg.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut r = error(status);
    if let Some(b) = &l.cfg.body {
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(b.len()));
        *r.body_mut() = Body::full(Bytes::from(b.clone()));
    }
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_ms.div_ceil(1000).max(1)),
    );
    r
}

/// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
fn quota_fields(l: &Limiter, q: Quota, h: &mut http::HeaderMap) {
    static POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
    static LIMIT: HeaderName = HeaderName::from_static("ratelimit");
    let name = l.cfg.name.replace(['"', '\\'], "");
    if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";q={};w={}", q.q, q.w)) {
        h.insert(POLICY.clone(), v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";r={};t={}", q.r, q.t)) {
        h.insert(LIMIT.clone(), v);
    }
}
