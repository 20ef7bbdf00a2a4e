//! A sampled request's server span (`[traces]`): begun once the route
//! phase knows the site (the sampling decision: the client's
//! `traceparent`, else the site's ratio), ended at the log phase with the
//! answer's status. The request phase holds the span itself; its
//! [`Current`] is a request extension under which the proxy's attempts,
//! the cache, FastCGI and forward auth hang their own spans. An unsampled
//! request gets no extension and allocates nothing here.

use std::net::IpAddr;
use std::sync::Arc;

use http::Response;
use http::request::Parts;

use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::trace::{Current, Record, Sampler};

/// The route phase: a sampled request's span begins. Boxed: every
/// request's future holds the slot, and is moved whole.
#[inline]
pub(super) fn begin(sampler: Option<&Sampler>, parts: &mut Parts) -> Option<Box<Record>> {
    let r = sampler?.start(&parts.headers)?;
    parts.extensions.insert(r.current());
    Some(Box::new(r))
}

/// The log phase: the request's span `r` ends with what was answered;
/// `route`: the label of the route that answered.
pub(super) fn end(
    mut r: Record,
    parts: &mut Parts,
    resp: &Response<Body>,
    conn: &ConnInfo,
    client: IpAddr,
    site: &str,
    route: Option<&Arc<str>>,
) {
    parts.extensions.remove::<Current>();
    r.name = weir_http::trace::method(&parts.method);
    r.route = route.cloned();
    let status = resp.status().as_u16();
    r.error = status >= 500;
    r.attr("http.request.method", parts.method.as_str());
    r.attr("url.path", parts.uri.path());
    if let Some(q) = parts.uri.query() {
        r.attr("url.query", q);
    }
    r.attr("url.scheme", if conn.tls { "https" } else { "http" });
    let host = super::request_head::strip_port(super::request_head::request_host(parts));
    if !host.is_empty() {
        r.attr("server.address", host);
    }
    r.attr(
        "network.protocol.version",
        match parts.version {
            http::Version::HTTP_10 => "1.0",
            http::Version::HTTP_2 => "2",
            http::Version::HTTP_3 => "3",
            _ => "1.1",
        },
    );
    r.attr_display("client.address", client);
    if let Some(ua) = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
    {
        r.attr("user_agent.original", ua);
    }
    if let Some(rt) = route {
        r.attr("http.route", &**rt);
    }
    r.attr("http.response.status_code", i64::from(status));
    r.attr("weir.site", site);
    r.end();
}

/// A child span of the request's around `f` (the cache's): while it runs,
/// it is the request's [`Current`], so the proxy's attempts hang under it.
pub(super) fn child_of(parts: &mut Parts, name: &'static str) -> Option<(Record, Current)> {
    let cur = *parts.extensions.get::<Current>()?;
    let span = cur.child(name, weir_http::trace::Kind::Internal);
    parts.extensions.insert(span.current());
    Some((span, cur))
}

/// Ends a span [`child_of`] began and gives the request its own span back.
pub(super) fn end_child(parts: &mut Parts, (span, cur): (Record, Current)) {
    parts.extensions.insert(cur);
    span.end();
}
