//! Validation of traffic control: a site's or route's limits, access
//! control, header rules and body limit ([`Filters`]), a route's conditions
//! ([`RouteMatch`]), redirects and fixed answers, and the `{placeholder}`
//! templates they are written with ([`Template`]).
//!
//! Owns checking, defaults and the pure matching of a request head; never
//! counts, never keeps state and never answers a request (`weir-traffic`
//! and the server's request filters do).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use serde_spanned::Spanned;

use super::HostPattern;
use super::error::Collector;
use super::proxy::ProxyConfig;
use super::raw::{
    RawBasicAuth, RawFilterKeys, RawForwardAuth, RawHeaderOps, RawLimit, RawMatch, RawRedirect,
    RawRespond,
};
use super::units;
pub use crate::template::{RequestView, Template};

/// What a site or route does to a request before its handler and to the
/// response after it. Empty by default: nothing is checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    /// Refused with 403 when the client is in `deny`, or `allow` is not
    /// empty and the client is not in it.
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    pub basic_auth: Option<Arc<BasicAuth>>,
    pub forward_auth: Option<Arc<ForwardAuth>>,
    pub limits: Vec<Arc<LimitConfig>>,
    pub request_headers: HeaderOps,
    pub response_headers: HeaderOps,
    /// Refused with 413 past this many bytes of request body.
    pub max_body: Option<u64>,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        *self == Filters::default()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BasicAuth {
    pub realm: String,
    /// (user, PHC or modular-crypt hash), in file order.
    pub users: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ForwardAuth {
    /// The auth service, as one upstream with the proxy's defaults.
    pub upstream: Arc<ProxyConfig>,
    /// Path and query asked of it.
    pub path: String,
    /// Fields of the client's request sent on (`None`: all of them).
    pub headers: Option<Vec<HeaderName>>,
    /// Fields of a 2xx answer copied onto the request.
    pub copy: Vec<HeaderName>,
    pub timeout: Duration,
}

/// One limit of `limit = [...]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    pub name: String,
    pub key: Vec<LimitKey>,
    pub kind: LimitKind,
    pub status: u16,
    pub body: Option<String>,
    pub dry_run: bool,
    /// Most keys tracked.
    pub size: usize,
    /// Send `RateLimit-Policy` and `RateLimit`.
    pub headers: bool,
}

/// What a limit counts apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client address (after PROXY protocol and trusted proxies).
    Client,
    Header(HeaderName),
    Cookie(String),
    Path,
    /// Every request of the site or route together.
    Site,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKind {
    /// nginx's `limit_req`: thousandths of a request per second, the burst,
    /// and how many of the burst pass at once.
    Rate {
        per_sec_milli: u64,
        burst: u64,
        delay_after: u64,
    },
    /// nginx's `limit_conn`: requests in progress at once.
    Concurrent(u64),
    /// HAProxy's `http_req_rate`, `http_err_rate`, `bytes_out_rate` over a
    /// sliding window: refused while any count is past its bound.
    Window {
        period: Duration,
        requests: Option<u64>,
        errors: Option<u64>,
        bytes: Option<u64>,
    },
}

/// `set`, `add` and `remove` of header fields, in that order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeaderOps {
    pub set: Vec<(HeaderName, Template)>,
    pub add: Vec<(HeaderName, Template)>,
    pub remove: Vec<HeaderName>,
}

impl HeaderOps {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// A route's conditions besides its path; all must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteMatch {
    pub methods: Vec<Method>,
    pub hosts: Vec<HostPattern>,
    /// (field, value; `None`: present with any value).
    pub headers: Vec<(HeaderName, Option<String>)>,
    pub query: Vec<(String, Option<String>)>,
    pub clients: Vec<IpNet>,
    pub protocol: Option<Protocol>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
    Http1,
    Http2,
    Http3,
}

impl RouteMatch {
    pub fn is_empty(&self) -> bool {
        *self == RouteMatch::default()
    }

    pub fn matches(&self, r: &RequestView<'_>) -> bool {
        let p = r.parts;
        (self.methods.is_empty() || self.methods.contains(&p.method))
            && (self.hosts.is_empty() || self.hosts.iter().any(|h| h.matches(r.host)))
            && self.headers.iter().all(|(name, want)| {
                let mut values = p.headers.get_all(name).iter();
                match want {
                    None => values.next().is_some(),
                    Some(w) => values.any(|v| v.as_bytes() == w.as_bytes()),
                }
            })
            && self.query.iter().all(|(name, want)| {
                query_pairs(p.uri.query().unwrap_or(""))
                    .any(|(k, v)| k == name && want.as_ref().is_none_or(|w| w == v))
            })
            && (self.clients.is_empty() || self.clients.iter().any(|n| n.contains(&r.client)))
            && self.protocol.is_none_or(|proto| match proto {
                Protocol::Http => !r.tls,
                Protocol::Https => r.tls,
                Protocol::Http1 => p.version <= http::Version::HTTP_11,
                Protocol::Http2 => p.version == http::Version::HTTP_2,
                Protocol::Http3 => p.version == http::Version::HTTP_3,
            })
    }
}

/// `name=value` pairs of a query string, as written (not decoded).
pub fn query_pairs(q: &str) -> impl Iterator<Item = (&str, &str)> {
    q.split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
}

/// `redirect`: where to and with which status.
#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    pub to: Template,
    pub status: u16,
}

/// `respond`: a fixed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Respond {
    pub status: u16,
    pub body: bytes::Bytes,
    pub content_type: Option<HeaderValue>,
}

pub fn filters(c: &mut Collector<'_>, key: &str, raw: RawFilterKeys<'_>) -> Filters {
    let mut out = Filters::default();
    let cidrs = |c: &mut Collector<'_>, what: &str, v: &Option<Spanned<Vec<String>>>| match v {
        Some(l) => units::parse_cidrs(l.get_ref()).unwrap_or_else(|m| {
            c.at(l.span(), format!("{key}: {what}: {m}"));
            Vec::new()
        }),
        None => Vec::new(),
    };
    out.allow = cidrs(c, "allow", raw.allow);
    out.deny = cidrs(c, "deny", raw.deny);
    if let Some(a) = raw.basic_auth {
        out.basic_auth = basic_auth(c, key, a).map(Arc::new);
    }
    if let Some(f) = raw.forward_auth {
        out.forward_auth = forward_auth(c, key, f).map(Arc::new);
    }
    for (i, l) in raw.limit.iter().flatten().enumerate() {
        if let Some(l) = limit(c, &format!("{key}: limit {}", i + 1), i, l) {
            out.limits.push(Arc::new(l));
        }
    }
    if let Some(h) = raw.request_headers {
        out.request_headers = header_ops(c, &format!("{key}: request_headers"), h);
    }
    if let Some(h) = raw.response_headers {
        out.response_headers = header_ops(c, &format!("{key}: response_headers"), h);
    }
    if let Some(m) = raw.max_body {
        match units::parse_size(m.get_ref()) {
            Ok(n) => out.max_body = Some(n),
            Err(e) => c.at(m.span(), format!("{key}: max_body: {e}")),
        }
    }
    out
}

fn basic_auth(c: &mut Collector<'_>, key: &str, a: &Spanned<RawBasicAuth>) -> Option<BasicAuth> {
    let raw = a.get_ref();
    if raw.users.is_empty() {
        c.at(a.span(), format!("{key}: basic_auth: `users` is empty"));
        return None;
    }
    let mut users = Vec::new();
    for (user, hash) in &raw.users {
        let h = hash.get_ref();
        let known = h.starts_with("$2a$")
            || h.starts_with("$2b$")
            || h.starts_with("$2y$")
            || h.starts_with("$argon2");
        if !known {
            c.at(
                hash.span(),
                format!(
                    "{key}: basic_auth: the password of `{user}` is not a bcrypt or argon2 hash; make one with `weir hash-password`"
                ),
            );
            continue;
        }
        if user.contains(':') {
            c.at(
                hash.span(),
                format!("{key}: basic_auth: a user name cannot contain `:`"),
            );
            continue;
        }
        users.push((user.clone(), h.clone()));
    }
    Some(BasicAuth {
        realm: raw.realm.clone().unwrap_or_else(|| "restricted".into()),
        users,
    })
}

fn forward_auth(
    c: &mut Collector<'_>,
    key: &str,
    f: &Spanned<RawForwardAuth>,
) -> Option<ForwardAuth> {
    let raw = f.get_ref();
    let url = raw.url.get_ref();
    let (scheme_host, path) = match url.find("://") {
        Some(i) => match url[i + 3..].find('/') {
            Some(j) => (&url[..i + 3 + j], &url[i + 3 + j..]),
            None => (url.as_str(), "/"),
        },
        None => {
            c.at(
                raw.url.span(),
                format!("{key}: forward_auth: url `{url}` needs a scheme, like http://127.0.0.1:9091/verify"),
            );
            return None;
        }
    };
    let upstream = match super::proxy::single_upstream(scheme_host) {
        Ok(p) => p,
        Err(m) => {
            c.at(raw.url.span(), format!("{key}: forward_auth: {m}"));
            return None;
        }
    };
    let names = |c: &mut Collector<'_>, what: &str, v: &Spanned<Vec<String>>| {
        v.get_ref()
            .iter()
            .filter_map(|n| match HeaderName::from_bytes(n.as_bytes()) {
                Ok(h) => Some(h),
                Err(_) => {
                    c.at(
                        v.span(),
                        format!("{key}: forward_auth: {what}: `{n}` is not a header name"),
                    );
                    None
                }
            })
            .collect::<Vec<_>>()
    };
    let headers = raw.headers.as_ref().map(|h| names(c, "headers", h));
    let copy = raw
        .copy_headers
        .as_ref()
        .map(|h| names(c, "copy_headers", h))
        .unwrap_or_default();
    let timeout = match &raw.timeout {
        Some(t) => units::parse_duration(t.get_ref()).unwrap_or_else(|m| {
            c.at(t.span(), format!("{key}: forward_auth: timeout: {m}"));
            Duration::from_secs(5)
        }),
        None => Duration::from_secs(5),
    };
    Some(ForwardAuth {
        upstream: Arc::new(upstream),
        path: path.to_string(),
        headers,
        copy,
        timeout,
    })
}

fn limit(
    c: &mut Collector<'_>,
    key: &str,
    index: usize,
    l: &Spanned<RawLimit>,
) -> Option<LimitConfig> {
    let raw = l.get_ref();
    let mut keys = Vec::new();
    match &raw.key {
        None => keys.push(LimitKey::Client),
        Some(k) => {
            for part in k.get_ref().to_vec() {
                let parsed = match part.split_once(':') {
                    None if part == "client" || part == "client_ip" => Ok(LimitKey::Client),
                    None if part == "path" => Ok(LimitKey::Path),
                    None if part == "site" || part == "route" => Ok(LimitKey::Site),
                    Some(("header", h)) => HeaderName::from_bytes(h.trim().as_bytes())
                        .map(LimitKey::Header)
                        .map_err(|_| format!("`{h}` is not a header name")),
                    Some(("cookie", n)) if !n.trim().is_empty() => {
                        Ok(LimitKey::Cookie(n.trim().to_string()))
                    }
                    _ => Err(format!(
                        "unknown key `{part}`; use \"client\", \"header:NAME\", \"cookie:NAME\", \"path\" or \"site\""
                    )),
                };
                match parsed {
                    Ok(p) => keys.push(p),
                    Err(m) => c.at(k.span(), format!("{key}: key: {m}")),
                }
            }
        }
    }
    let kinds =
        raw.rate.is_some() as u8 + raw.connections.is_some() as u8 + raw.window.is_some() as u8;
    if kinds != 1 {
        c.at(
            l.span(),
            format!("{key}: give exactly one of `rate` (\"10r/s\"), `connections` (a number) or `window` (\"10s\" with `requests`, `errors` or `bytes`)"),
        );
        return None;
    }
    let kind = if let Some(r) = &raw.rate {
        let per_sec_milli = match parse_rate(r.get_ref()) {
            Ok(v) => v,
            Err(m) => {
                c.at(r.span(), format!("{key}: rate: {m}"));
                return None;
            }
        };
        let burst = raw.burst.unwrap_or(0);
        let delay_after = match (raw.nodelay, raw.delay) {
            (Some(true), Some(_)) => {
                c.at(
                    l.span(),
                    format!("{key}: `nodelay` and `delay` exclude each other"),
                );
                burst
            }
            (Some(true), None) => burst,
            (_, Some(d)) => d.min(burst),
            _ => 0,
        };
        LimitKind::Rate {
            per_sec_milli,
            burst,
            delay_after,
        }
    } else if let Some(n) = raw.connections {
        if n == 0 {
            c.at(l.span(), format!("{key}: connections must be at least 1"));
        }
        LimitKind::Concurrent(n)
    } else {
        let w = raw.window.as_ref()?;
        let period = match units::parse_duration(w.get_ref()) {
            Ok(d) if d >= Duration::from_millis(10) => d,
            Ok(_) => {
                c.at(w.span(), format!("{key}: window: at least 10ms"));
                return None;
            }
            Err(m) => {
                c.at(w.span(), format!("{key}: window: {m}"));
                return None;
            }
        };
        let bytes = match &raw.bytes {
            Some(b) => match units::parse_size(b.get_ref()) {
                Ok(n) => Some(n),
                Err(m) => {
                    c.at(b.span(), format!("{key}: bytes: {m}"));
                    None
                }
            },
            None => None,
        };
        if raw.requests.is_none() && raw.errors.is_none() && bytes.is_none() {
            c.at(
                w.span(),
                format!(
                    "{key}: a window limits `requests`, `errors` or `bytes`; give at least one"
                ),
            );
        }
        LimitKind::Window {
            period,
            requests: raw.requests,
            errors: raw.errors,
            bytes,
        }
    };
    if !matches!(kind, LimitKind::Rate { .. })
        && (raw.burst.is_some() || raw.nodelay.is_some() || raw.delay.is_some())
    {
        c.at(
            l.span(),
            format!("{key}: `burst`, `nodelay` and `delay` go with `rate`"),
        );
    }
    let status = match &raw.status {
        Some(s) if !(400..=599).contains(s.get_ref()) => {
            c.at(s.span(), format!("{key}: status must be 400 to 599"));
            429
        }
        Some(s) => *s.get_ref(),
        None => 429,
    };
    let size = match &raw.size {
        Some(s) if *s.get_ref() == 0 => {
            c.at(s.span(), format!("{key}: size must be at least 1"));
            1
        }
        Some(s) => *s.get_ref() as usize,
        None => 100_000,
    };
    Some(LimitConfig {
        name: raw
            .name
            .clone()
            .unwrap_or_else(|| format!("limit{}", index + 1)),
        key: keys,
        kind,
        status,
        body: raw.body.clone(),
        dry_run: raw.dry_run.unwrap_or(false),
        size,
        headers: raw.headers.unwrap_or(false),
    })
}

/// `"10r/s"`, `"300r/m"`, `"2r/h"` in thousandths of a request per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a rate; write it like \"10r/s\" or \"300r/m\"");
    let (n, per) = s.trim().split_once("r/").ok_or_else(bad)?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    let milli = match per.trim() {
        "s" => n * 1000,
        "m" => n * 1000 / 60,
        "h" => n * 1000 / 3600,
        _ => return Err(bad()),
    };
    if milli == 0 {
        return Err(format!("`{s}` is below one request an hour"));
    }
    Ok(milli)
}

fn header_ops(c: &mut Collector<'_>, key: &str, h: &Spanned<RawHeaderOps>) -> HeaderOps {
    let raw = h.get_ref();
    let mut out = HeaderOps::default();
    let pairs = |c: &mut Collector<'_>,
                 what: &str,
                 m: &Option<indexmap::IndexMap<String, Spanned<String>>>| {
        let mut v = Vec::new();
        for (k, val) in m.iter().flatten() {
            let Ok(name) = HeaderName::from_bytes(k.as_bytes()) else {
                c.at(
                    val.span(),
                    format!("{key}.{what}: `{k}` is not a header name"),
                );
                continue;
            };
            match Template::parse(val.get_ref()) {
                Ok(t) => v.push((name, t)),
                Err(m) => c.at(val.span(), format!("{key}.{what}: {m}")),
            }
        }
        v
    };
    out.set = pairs(c, "set", &raw.set);
    out.add = pairs(c, "add", &raw.add);
    for r in raw.remove.iter().flatten() {
        match HeaderName::from_bytes(r.get_ref().as_bytes()) {
            Ok(n) => out.remove.push(n),
            Err(_) => c.at(
                r.span(),
                format!("{key}.remove: `{}` is not a header name", r.get_ref()),
            ),
        }
    }
    out
}

pub fn route_match(c: &mut Collector<'_>, key: &str, m: &Spanned<RawMatch>) -> RouteMatch {
    let raw = m.get_ref();
    let mut out = RouteMatch::default();
    let at = m.span();
    for meth in raw.method.iter().flat_map(|m| m.to_vec()) {
        match Method::from_bytes(meth.to_ascii_uppercase().as_bytes()) {
            Ok(x) => out.methods.push(x),
            Err(_) => c.at(
                at.clone(),
                format!("{key}: match.method: `{meth}` is not a method"),
            ),
        }
    }
    for h in raw.host.iter().flat_map(|m| m.to_vec()) {
        let h = h.to_ascii_lowercase();
        out.hosts.push(match h.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') => HostPattern::Wildcard(suffix.to_string()),
            _ => HostPattern::Exact(h),
        });
    }
    for (k, v) in raw.header.iter().flatten() {
        match HeaderName::from_bytes(k.as_bytes()) {
            Ok(n) => out.headers.push((n, (v != "*").then(|| v.clone()))),
            Err(_) => c.at(
                at.clone(),
                format!("{key}: match.header: `{k}` is not a header name"),
            ),
        }
    }
    for (k, v) in raw.query.iter().flatten() {
        out.query.push((k.clone(), (v != "*").then(|| v.clone())));
    }
    if let Some(cl) = &raw.client {
        match units::parse_cidrs(cl) {
            Ok(v) => out.clients = v,
            Err(e) => c.at(at.clone(), format!("{key}: match.client: {e}")),
        }
    }
    if let Some(p) = &raw.protocol {
        out.protocol = match p.to_ascii_lowercase().as_str() {
            "http" => Some(Protocol::Http),
            "https" => Some(Protocol::Https),
            "http/1.1" | "http1" | "h1" => Some(Protocol::Http1),
            "h2" | "http/2" | "http2" => Some(Protocol::Http2),
            "h3" | "http/3" | "http3" => Some(Protocol::Http3),
            o => {
                c.at(
                    at,
                    format!("{key}: match.protocol: `{o}` is unknown; use \"http\", \"https\", \"http/1.1\", \"h2\" or \"h3\""),
                );
                None
            }
        };
    }
    out
}

pub fn redirect(c: &mut Collector<'_>, key: &str, r: &Spanned<RawRedirect>) -> Option<Redirect> {
    let (to, status) = match r.get_ref() {
        RawRedirect::To(t) => (t, None),
        RawRedirect::Full { to, status } => (to, *status),
    };
    let status = status.unwrap_or(302);
    if !matches!(status, 301 | 302 | 303 | 307 | 308) {
        c.at(
            r.span(),
            format!(
                "{key}: redirect: status {status} is not a redirect; use 301, 302, 303, 307 or 308"
            ),
        );
    }
    match Template::parse(to) {
        Ok(to) => Some(Redirect { to, status }),
        Err(m) => {
            c.at(r.span(), format!("{key}: redirect: {m}"));
            None
        }
    }
}

pub fn respond(c: &mut Collector<'_>, key: &str, r: &Spanned<RawRespond>) -> Option<Respond> {
    let (status, body, ct) = match r.get_ref() {
        RawRespond::Status(s) => (*s, None, None),
        RawRespond::Full {
            status,
            body,
            content_type,
        } => (status.unwrap_or(200), body.clone(), content_type.clone()),
    };
    if !(200..=599).contains(&status) {
        c.at(
            r.span(),
            format!("{key}: respond: status {status} is out of range (200 to 599)"),
        );
        return None;
    }
    let content_type = match ct {
        Some(t) => match HeaderValue::from_str(&t) {
            Ok(v) => Some(v),
            Err(_) => {
                c.at(
                    r.span(),
                    format!("{key}: respond: content_type is not a header value"),
                );
                None
            }
        },
        None if body.is_some() => Some(HeaderValue::from_static("text/plain; charset=utf-8")),
        None => None,
    };
    Some(Respond {
        status,
        body: body.map(bytes::Bytes::from).unwrap_or_default(),
        content_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(uri: &str) -> http::request::Parts {
        http::Request::get(uri).body(()).unwrap().into_parts().0
    }

    #[test]
    fn templates_fill_placeholders_and_captures() {
        let parts = view("/old/42?a=1&b=2");
        let r = RequestView {
            parts: &parts,
            host: "example.com",
            client: "10.0.0.7".parse().unwrap(),
            tls: true,
        };
        let mut out = String::new();
        Template::parse("{scheme}://new.{host}/u/{1}{?query} from {client_ip}")
            .unwrap()
            .render(&r, &["/old/42", "42"], &mut out);
        assert_eq!(out, "https://new.example.com/u/42?a=1&b=2 from 10.0.0.7");
        let bare = view("/x");
        let r = RequestView { parts: &bare, ..r };
        out.clear();
        Template::parse("{path}{?query}")
            .unwrap()
            .render(&r, &[], &mut out);
        assert_eq!(out, "/x");
        assert!(Template::parse("{nope}").is_err());
        assert!(Template::parse("{path").is_err());
        assert_eq!(Template::parse("fixed").unwrap().fixed().unwrap(), "fixed");
    }

    #[test]
    fn rates_are_read_as_nginx_writes_them() {
        assert_eq!(parse_rate("10r/s").unwrap(), 10_000);
        assert_eq!(parse_rate("30r/m").unwrap(), 500);
        assert!(parse_rate("10/s").is_err());
        assert!(parse_rate("0r/s").is_err());
    }

    #[test]
    fn a_route_match_needs_every_condition() {
        let m = RouteMatch {
            methods: vec![Method::GET],
            headers: vec![(HeaderName::from_static("x-debug"), Some("1".into()))],
            query: vec![("preview".into(), None)],
            clients: vec!["10.0.0.0/8".parse().unwrap()],
            protocol: Some(Protocol::Http),
            ..Default::default()
        };
        let mut parts = view("/?preview&x=2");
        parts
            .headers
            .insert("x-debug", HeaderValue::from_static("1"));
        let r = RequestView {
            parts: &parts,
            host: "a",
            client: "10.1.2.3".parse().unwrap(),
            tls: false,
        };
        assert!(m.matches(&r));
        assert!(!m.matches(&RequestView { tls: true, ..r }));
        let r = RequestView {
            parts: &parts,
            host: "a",
            client: "192.168.0.1".parse().unwrap(),
            tls: false,
        };
        assert!(!m.matches(&r));
        let other = view("/?x=2");
        let r = RequestView {
            parts: &other,
            host: "a",
            client: "10.1.2.3".parse().unwrap(),
            tls: false,
        };
        assert!(!m.matches(&r));
    }
}
