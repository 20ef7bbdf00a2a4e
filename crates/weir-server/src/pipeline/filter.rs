//! The request filters of a site or route, between the route and the
//! handler: address lists (403), limits (429 with `Retry-After`, or a
//! delay), basic authentication (401), forward authentication (the auth
//! service's own answer), the body limit (413) and request header rules;
//! and the response filter of their limits ([`LimitFields`]: what they
//! count of the answer, the `RateLimit` fields). The response header rules
//! are a response filter of their own (`response_headers`).
//!
//! Answers only to refuse; never serves content. A site or route without
//! filters has none of this built (`Option<Filters>` is `None`), so the
//! static path pays one branch.

// A refusal is the answer itself, returned once and straight to the
// client; boxing it would only add an allocation on that path.
#![allow(clippy::result_large_err)]

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use ipnet::IpNet;

use weir_config::traffic::{self, HeaderOps, RequestView};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::response::error;
use weir_traffic::clock::now_ms;
use weir_traffic::limit::{Decision, Held, Limiter, Quota};
use weir_traffic::password::{Check, Users};

use super::{Exchange, ResponseFilter};

/// The filters of one site or route, with their state.
pub(super) struct Filters {
    pub cfg: Arc<traffic::Filters>,
    /// `site` or `site route`, for log lines.
    label: String,
    pub limiters: Vec<Arc<Limiter>>,
    users: Option<Arc<Users>>,
    forward_auth: Option<(Arc<traffic::ForwardAuth>, Arc<weir_proxy::Proxy>)>,
}

/// What a request that passed owes its answer: for the site's filters
/// (`[0]`) and the route's (`[1]`).
#[derive(Default)]
pub(super) struct Passed {
    /// Connection-limit slots, released when the answer is done.
    pub held: Vec<Held>,
    pub owed: [Owed; 2],
}

/// What one set of filters owes the answer.
#[derive(Default)]
pub(super) struct Owed {
    /// (limiter index, key) of window limits that count the answer.
    counted: Vec<(usize, Option<u64>)>,
    /// The `RateLimit` fields of the first limit that sends them.
    quota: Option<(usize, Quota)>,
}

/// Nothing owed (a refused request).
static NOTHING_OWED: Owed = Owed {
    counted: Vec::new(),
    quota: None,
};

impl Filters {
    /// `None` for an empty config: nothing to run.
    pub fn build(cfg: &Arc<traffic::Filters>, label: String, workers: usize) -> Option<Filters> {
        if cfg.is_empty() {
            return None;
        }
        let limiters = cfg
            .limits
            .iter()
            .map(|l| weir_traffic::shared::limiter(l.clone(), &label))
            .collect();
        Some(Filters {
            label,
            limiters,
            users: cfg
                .basic_auth
                .as_ref()
                .map(|b| Arc::new(Users::new(b.clone()))),
            forward_auth: cfg.forward_auth.as_ref().map(|f| {
                (
                    f.clone(),
                    weir_proxy::Proxy::after(f.upstream.clone(), workers, &[]),
                )
            }),
            cfg: cfg.clone(),
        })
    }

    /// Whether a request can wait here on something but a delay (a
    /// password check, the auth service).
    pub fn waits(&self) -> bool {
        self.users.is_some() || self.forward_auth.is_some()
    }

    /// Address lists and limits: how long the request must wait (ms), or
    /// the answer that refuses it.
    fn admit(
        &self,
        parts: &http::request::Parts,
        client: IpAddr,
        held: &mut Vec<Held>,
        owed: &mut Owed,
    ) -> Result<u64, Response<Body>> {
        let c = &self.cfg;
        if listed(&c.deny, client) || (!c.allow.is_empty() && !listed(&c.allow, client)) {
            return Err(error(StatusCode::FORBIDDEN));
        }
        if self.limiters.is_empty() {
            return Ok(0);
        }
        let now = now_ms();
        let mut delay = 0;
        for (i, l) in self.limiters.iter().enumerate() {
            let a = l.admit(l.key(parts, client), now);
            if let Some(h) = a.held {
                held.push(h);
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
            match a.decision {
                Decision::Pass => {}
                Decision::Delay(ms) => delay = delay.max(ms),
                Decision::Refuse(_) if l.cfg.dry_run => {
                    tracing::info!(
                        "{}: limit {} would refuse {client} {} {} (dry run)",
                        self.label,
                        l.cfg.name,
                        parts.method,
                        parts.uri.path()
                    );
                }
                Decision::Refuse(ms) => {
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

    /// Basic and forward authentication.
    async fn authenticate(
        &self,
        parts: &mut http::request::Parts,
        conn: &ConnInfo,
    ) -> Result<(), Response<Body>> {
        if let Some(users) = &self.users {
            self.basic_auth(users, parts).await?;
        }
        if let Some((fa, proxy)) = &self.forward_auth {
            forward_auth(fa, proxy, parts, conn).await?;
        }
        Ok(())
    }

    /// 413 for a declared body past `max_body`.
    fn body_limit(&self, parts: &http::request::Parts) -> Result<(), Response<Body>> {
        match self.cfg.max_body {
            Some(max) if super::content_length(&parts.headers).is_some_and(|n| n > max) => {
                Err(error(StatusCode::PAYLOAD_TOO_LARGE))
            }
            _ => Ok(()),
        }
    }

    async fn basic_auth(
        &self,
        users: &Arc<Users>,
        parts: &http::request::Parts,
    ) -> Result<(), Response<Body>> {
        let ok = match users.check(&parts.headers) {
            Check::Known => true,
            Check::Refused => false,
            Check::Verify {
                digest,
                password,
                hash,
            } => {
                let (users, hash) = (users.clone(), hash.to_string());
                // Seconds of CPU at high costs: off the async threads.
                tokio::task::spawn_blocking(move || users.verify(digest, &password, &hash))
                    .await
                    .unwrap_or(false)
            }
        };
        if ok {
            return Ok(());
        }
        let mut r = error(StatusCode::UNAUTHORIZED);
        let realm = users.cfg.realm.replace('"', "'");
        if let Ok(v) = HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
        {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        Err(r)
    }
}

/// Where a layer's filters keep what they owe in [`Passed::owed`].
pub(super) const SITE: usize = 0;
pub(super) const ROUTE: usize = 1;

/// The response filter of a layer's limits: what they count of the answer
/// (status, bytes) and the `RateLimit` fields.
pub(super) struct LimitFields {
    pub filters: Arc<Filters>,
    /// [`SITE`] or [`ROUTE`].
    pub layer: usize,
}

impl ResponseFilter for LimitFields {
    fn response(&self, ex: &Exchange<'_>, resp: &mut Response<Body>) {
        let owed = ex.passed.map_or(&NOTHING_OWED, |p| &p.owed[self.layer]);
        if !owed.counted.is_empty() {
            let now = now_ms();
            let bytes = super::content_length(resp.headers()).unwrap_or(0);
            for (i, key) in &owed.counted {
                self.filters.limiters[*i].answered(*key, resp.status().as_u16(), bytes, now);
            }
        }
        if let Some((i, q)) = owed.quota {
            quota_fields(&self.filters.limiters[i], q, resp.headers_mut());
        }
    }
}

/// Runs the request filters of the site, then of the route (each: address
/// lists, limits, a delay, authentication, the body limit), then their
/// request header rules: `Ok` with what the answer owes, or the answer
/// that refuses the request.
pub(super) async fn run(
    filters: [Option<&Filters>; 2],
    parts: &mut http::request::Parts,
    conn: &ConnInfo,
    client: IpAddr,
    captures: &[String],
) -> Result<Option<Box<Passed>>, Response<Body>> {
    let mut passed = Passed::default();
    let Passed { held, owed } = &mut passed;
    for (f, owed) in filters.iter().zip(owed.iter_mut()) {
        if let Some(f) = f {
            let delay = f.admit(parts, client, held, owed)?;
            if delay > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
            }
            f.authenticate(parts, conn).await?;
            f.body_limit(parts)?;
        }
    }
    for f in filters.into_iter().flatten() {
        request_headers(f, parts, client, conn.tls, captures);
    }
    Ok(passed.boxed())
}

/// [`run`] for filters that never wait on anything but a delay (no
/// authentication): no future to box; the delay to wait is returned
/// (the largest any limit asks for).
pub(super) fn run_now(
    filters: [Option<&Filters>; 2],
    parts: &mut http::request::Parts,
    conn: &ConnInfo,
    client: IpAddr,
    captures: &[String],
) -> Result<(Option<Box<Passed>>, u64), Response<Body>> {
    let mut passed = Passed::default();
    let mut delay = 0;
    let Passed { held, owed } = &mut passed;
    for (f, owed) in filters.iter().zip(owed.iter_mut()) {
        if let Some(f) = f {
            delay = delay.max(f.admit(parts, client, held, owed)?);
            f.body_limit(parts)?;
        }
    }
    for f in filters.into_iter().flatten() {
        request_headers(f, parts, client, conn.tls, captures);
    }
    Ok((passed.boxed(), delay))
}

impl Passed {
    /// Boxed when something is owed (no allocation otherwise).
    fn boxed(self) -> Option<Box<Passed>> {
        let empty = self.held.is_empty()
            && self
                .owed
                .iter()
                .all(|o| o.counted.is_empty() && o.quota.is_none());
        (!empty).then(|| Box::new(self))
    }
}

/// A filter's request header rules, its values filled from the request as
/// it arrived (a route's with its regex groups).
fn request_headers(
    f: &Filters,
    parts: &mut http::request::Parts,
    client: std::net::IpAddr,
    tls: bool,
    captures: &[String],
) {
    let ops = &f.cfg.request_headers;
    if ops.is_empty() {
        return;
    }
    let fixed = |l: &[(HeaderName, traffic::Template)]| l.iter().all(|(_, t)| t.fixed().is_some());
    if fixed(&ops.set) && fixed(&ops.add) {
        // No placeholder: nothing to read from the request.
        apply(ops, &mut parts.headers, None, &[]);
        return;
    }
    let captures: smallvec::SmallVec<[&str; 4]> = captures.iter().map(String::as_str).collect();
    // The values read the request's own fields: filled first, then set.
    let mut h = std::mem::take(&mut parts.headers);
    let before = http::request::Builder::new()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .version(parts.version)
        .body(())
        .map(|r| r.into_parts().0);
    if let Ok(mut view_parts) = before {
        if let Some(host) = h.get(http::header::HOST) {
            view_parts.headers.insert(http::header::HOST, host.clone());
        }
        let view = RequestView {
            parts: &view_parts,
            host: super::request_head::request_host(&view_parts),
            client,
            tls,
        };
        apply(ops, &mut h, Some(&view), &captures);
    }
    parts.headers = h;
}

fn listed(list: &[IpNet], ip: IpAddr) -> bool {
    // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    list.iter().any(|n| n.contains(&ip))
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

/// `set`, `add`, `remove`, in that order; values filled from the request.
pub(super) fn apply(
    ops: &HeaderOps,
    h: &mut http::HeaderMap,
    view: Option<&RequestView<'_>>,
    captures: &[&str],
) {
    if ops.is_empty() {
        return;
    }
    // `view` is `None` only when every value is fixed.
    let value = |t: &traffic::Template| match (t.fixed(), view) {
        (Some(v), _) => Some(v.clone()),
        (None, Some(view)) => {
            let mut s = String::new();
            t.render(view, captures, &mut s);
            HeaderValue::from_str(&s).ok()
        }
        (None, None) => None,
    };
    for (name, t) in &ops.set {
        match value(t) {
            Some(v) if !v.is_empty() => {
                h.insert(name.clone(), v);
            }
            // An empty value removes the field, as nginx's proxy_set_header does.
            _ => {
                h.remove(name);
            }
        }
    }
    for (name, t) in &ops.add {
        if let Some(v) = value(t) {
            h.append(name.clone(), v);
        }
    }
    for name in &ops.remove {
        h.remove(name);
    }
}

/// Fields never sent to the auth service: they describe the client's body
/// or connection, and the sub-request has neither.
fn not_forwarded(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "te"
            | "upgrade"
            | "expect"
            | "trailer"
            | "proxy-connection"
    )
}

/// Asks the auth service about the request: a 2xx lets it through with the
/// chosen fields of the answer; anything else is the client's answer.
async fn forward_auth(
    fa: &traffic::ForwardAuth,
    proxy: &weir_proxy::Proxy,
    parts: &mut http::request::Parts,
    conn: &ConnInfo,
) -> Result<(), Response<Body>> {
    static METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
    static URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
    static ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
    let (mut sub, ()) = http::Request::get(fa.path.as_str())
        .body(())
        .unwrap_or_default()
        .into_parts();
    for (name, v) in &parts.headers {
        let wanted = match &fa.headers {
            None => !not_forwarded(name),
            Some(list) => list.contains(name) || name == header::HOST,
        };
        if wanted {
            sub.headers.append(name.clone(), v.clone());
        }
    }
    // HTTP/2 and HTTP/3 carry the host in the URI.
    if !sub.headers.contains_key(header::HOST)
        && let Some(a) = parts.uri.authority()
        && let Ok(v) = HeaderValue::from_str(a.as_str())
    {
        sub.headers.insert(header::HOST, v);
    }
    sub.headers.insert(
        METHOD.clone(),
        HeaderValue::from_str(parts.method.as_str()).unwrap_or(HeaderValue::from_static("GET")),
    );
    let uri = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if let Ok(v) = HeaderValue::from_str(uri) {
        sub.headers.insert(URI.clone(), v.clone());
        sub.headers.insert(ORIGINAL_URI.clone(), v);
    }
    let answer =
        tokio::time::timeout(fa.timeout, proxy.serve(&mut sub, Body::empty(), conn, None)).await;
    let resp = match answer {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!(
                "forward_auth: no answer from {} within {:?}",
                fa.upstream.upstreams[0].name,
                fa.timeout
            );
            return Err(error(StatusCode::GATEWAY_TIMEOUT));
        }
    };
    if !resp.status().is_success() {
        return Err(resp);
    }
    for name in &fa.copy {
        parts.headers.remove(name);
        for v in resp.headers().get_all(name) {
            parts.headers.append(name.clone(), v.clone());
        }
    }
    Ok(())
}
