//! Validation of the reverse-proxy keys: a site's or route's
//! `proxy = { ... }` and the listener's PROXY protocol settings, turned into
//! [`ProxyConfig`] (routes themselves: `routes`).
//!
//! Owns only checking and defaults; never opens a socket or resolves a name
//! (upstream host names are resolved at run time, see `proxy::dns`).

use std::net::IpAddr;
use std::path::PathBuf;

use std::time::Duration;

use ipnet::IpNet;
use serde_spanned::Spanned;

use super::error::Collector;
use super::raw::{RawProxy, RawSite, RawUpstream, RawUpstreams, Value};
use super::units;

/// A validated `proxy = { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    pub upstreams: Vec<UpstreamConfig>,
    pub balance: Balance,
    pub sticky_cookie: Option<String>,
    pub host: HostHeader,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_idle: usize,
    /// 0: no limit.
    pub max_conns: usize,
    pub queue: usize,
    pub queue_timeout: Duration,
    pub retries: u32,
    pub retry_body_size: u64,
    pub health: Option<HealthConfig>,
    pub passive: PassiveConfig,
    pub x_forwarded: bool,
    pub forwarded: bool,
    pub via: bool,
    /// Empty: direct mode.
    pub trusted_proxies: Vec<IpNet>,
    pub send_proxy_protocol: Option<ProxyProtocolVersion>,
    pub tls_verify: bool,
    pub sni: Option<String>,
    pub dns_ttl: Duration,
    /// Each attempt's upstream, status and times are kept with the answer
    /// for the access log (set when the site's log format uses them).
    pub record_attempts: bool,
    /// The field holding the request's ID, named in the proxy's log lines.
    pub request_id: Option<http::HeaderName>,
    /// Send W3C `traceparent` upstream (the client's trace continued, a
    /// new span per attempt).
    pub traceparent: bool,
    /// The upstream's `Location` and `Content-Location` rewritten, the
    /// first matching entry's `from` prefix replaced by its `to`.
    pub rewrite_location: Vec<LocationRewrite>,
}

/// One `rewrite_location` entry: a leading `from` (compared without regard
/// to ASCII case, as scheme and host are) becomes `to`, filled from the
/// request.
#[derive(Debug, Clone, PartialEq)]
pub struct LocationRewrite {
    pub from: String,
    pub to: crate::template::Template,
}

impl ProxyConfig {
    /// Every setting at its default, with no upstream.
    pub fn defaults() -> ProxyConfig {
        ProxyConfig {
            upstreams: Vec::new(),
            balance: Balance::RoundRobin,
            sticky_cookie: None,
            host: HostHeader::Pass,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_idle: 1024,
            max_conns: 0,
            queue: 0,
            queue_timeout: Duration::from_secs(5),
            retries: 2,
            retry_body_size: 64 * 1024,
            health: None,
            passive: PassiveConfig {
                failures: 5,
                window: Duration::from_secs(10),
                cooldown: Duration::from_secs(30),
                max_ejected: 50,
            },
            x_forwarded: true,
            forwarded: true,
            via: true,
            trusted_proxies: Vec::new(),
            send_proxy_protocol: None,
            tls_verify: true,
            sni: None,
            dns_ttl: Duration::from_secs(30),
            record_attempts: false,
            request_id: None,
            traceparent: false,
            rewrite_location: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocolVersion {
    V1,
    V2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round robin (nginx's); plain round robin with equal weights.
    RoundRobin,
    LeastConn,
    Random,
    PowerOfTwo,
    First,
    IpHash,
    Hash(HashKey),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    Uri,
    /// Lower-case header name.
    Header(String),
    Cookie(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostHeader {
    Pass,
    Upstream,
    Fixed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamScheme {
    /// HTTP/1.1 over TCP or a Unix socket.
    Http,
    /// HTTP/1.1 over TLS.
    Https,
    /// HTTP/2 with prior knowledge, cleartext.
    H2c,
    /// HTTP/2 over TLS.
    H2,
}

impl UpstreamScheme {
    pub fn is_tls(self) -> bool {
        matches!(self, UpstreamScheme::Https | UpstreamScheme::H2)
    }
    pub fn is_h2(self) -> bool {
        matches!(self, UpstreamScheme::H2c | UpstreamScheme::H2)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTarget {
    /// A host name or IP literal (without brackets) and a port.
    Tcp {
        host: String,
        port: u16,
    },
    Unix(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// As written in the file, for logs.
    pub name: String,
    pub scheme: UpstreamScheme,
    pub target: UpstreamTarget,
    pub weight: u32,
}

impl UpstreamConfig {
    /// `host:port` for the Host header and h2 authority.
    pub fn authority(&self) -> String {
        match &self.target {
            UpstreamTarget::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            UpstreamTarget::Tcp { host, port } => format!("{host}:{port}"),
            UpstreamTarget::Unix(_) => "localhost".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// `None`: TCP connect only.
    pub path: Option<String>,
    /// GET unless set.
    pub method: http::Method,
    pub status: Option<u16>,
    pub body: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
}

/// Passive health: what requests' failures do to an upstream's place in
/// rotation (docs/config.md, "Passive health").
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveConfig {
    /// Failures in a row (no success between them) within `window` that
    /// eject an upstream; 0: off.
    pub failures: u32,
    pub window: Duration,
    /// How long an ejected upstream stays out before one trial request.
    pub cooldown: Duration,
    /// The share of a proxy's usable upstreams that may be ejected at once,
    /// in percent (at least one of two or more; never the last one; 0: none).
    pub max_ejected: u8,
}

/// PROXY protocol accepted on a listener.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AcceptProxyProtocol {
    pub trusted_sources: Vec<IpNet>,
}

impl AcceptProxyProtocol {
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted_sources.iter().any(|n| n.contains(&ip))
    }
}

/// Whether the site uses any proxy key, so `root` is not required.
pub fn has_proxy(s: &RawSite) -> bool {
    s.proxy.is_some() || s.route.is_some()
}

/// The defaults of a proxy with one upstream at `url` (`http://host:port`):
/// a forward-auth service.
pub fn single_upstream(url: &str) -> Result<ProxyConfig, String> {
    let (scheme, target) = parse_upstream(url)?;
    let mut p = ProxyConfig::defaults();
    p.upstreams.push(UpstreamConfig {
        name: url.to_string(),
        scheme,
        target,
        weight: 1,
    });
    Ok(p)
}

/// Parses one upstream as written.
pub fn parse_upstream(s: &str) -> Result<(UpstreamScheme, UpstreamTarget), String> {
    let s = s.trim();
    if let Some(path) = s.strip_prefix("unix:") {
        let path = path.trim_start_matches("//");
        if path.is_empty() {
            return Err("`unix:` needs a socket path, like \"unix:/run/app.sock\"".into());
        }
        return Ok((
            UpstreamScheme::Http,
            UpstreamTarget::Unix(PathBuf::from(path)),
        ));
    }
    let (scheme, rest, default_port) = if let Some(r) = s.strip_prefix("http://") {
        (UpstreamScheme::Http, r, Some(80))
    } else if let Some(r) = s.strip_prefix("https://") {
        (UpstreamScheme::Https, r, Some(443))
    } else if let Some(r) = s.strip_prefix("h2c://") {
        (UpstreamScheme::H2c, r, None)
    } else if let Some(r) = s.strip_prefix("h2://") {
        (UpstreamScheme::H2, r, Some(443))
    } else if s.contains("://") {
        return Err(format!(
            "`{s}`: unknown scheme; use http://, https://, h2c://, h2:// or unix:"
        ));
    } else {
        (UpstreamScheme::Http, s, None)
    };
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err(format!(
            "`{s}`: an upstream has no path; rewrite paths in a route"
        ));
    }
    if let Ok(sa) = rest.parse::<std::net::SocketAddr>() {
        return Ok((
            scheme,
            UpstreamTarget::Tcp {
                host: sa.ip().to_string(),
                port: sa.port(),
            },
        ));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let port = p
                .parse::<u16>()
                .map_err(|_| format!("`{s}`: `{p}` is not a port number"))?;
            (h.trim_start_matches('[').trim_end_matches(']'), port)
        }
        _ => match default_port {
            Some(p) => (rest.trim_start_matches('[').trim_end_matches(']'), p),
            None => {
                return Err(format!(
                    "`{s}` needs a port, like \"127.0.0.1:9000\" or \"http://app:8080\""
                ));
            }
        },
    };
    let valid_name = host
        .split('.')
        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if host.parse::<IpAddr>().is_err() && !valid_name {
        return Err(format!("`{s}`: `{host}` is not a host name or IP address"));
    }
    Ok((
        scheme,
        UpstreamTarget::Tcp {
            host: host.to_ascii_lowercase(),
            port,
        },
    ))
}

pub(crate) fn proxy_config(c: &mut Collector<'_>, key: &str, p: &Spanned<RawProxy>) -> ProxyConfig {
    let raw = p.get_ref();
    let mut out = ProxyConfig {
        x_forwarded: raw.x_forwarded.unwrap_or(true),
        forwarded: raw.forwarded.unwrap_or(true),
        via: raw.via.unwrap_or(true),
        tls_verify: raw.tls_verify.unwrap_or(true),
        sni: raw.sni.clone(),
        traceparent: raw.traceparent.unwrap_or(false),
        ..ProxyConfig::defaults()
    };

    let list: Vec<RawUpstream> = match raw.to.get_ref() {
        RawUpstreams::One(s) => vec![RawUpstream::Addr(s.clone())],
        RawUpstreams::Many(v) => v.clone(),
    };
    if list.is_empty() {
        c.at(
            raw.to.span(),
            format!("{key}.to: needs at least one upstream"),
        );
    }
    for u in list {
        let (addr, weight) = match u {
            RawUpstream::Addr(a) => (a, 1),
            RawUpstream::Full { addr, weight } => (addr, weight.unwrap_or(1)),
        };
        if !(1..=1000).contains(&weight) {
            c.at(
                raw.to.span(),
                format!("{key}.to: weight {weight} of `{addr}` is out of range (1 to 1000)"),
            );
            continue;
        }
        match parse_upstream(&addr) {
            Ok((scheme, target)) => out.upstreams.push(UpstreamConfig {
                name: addr,
                scheme,
                target,
                weight: weight as u32,
            }),
            Err(m) => c.at(raw.to.span(), format!("{key}.to: {m}")),
        }
    }

    if let Some(b) = &raw.balance {
        out.balance = match b.get_ref().as_str() {
            "round_robin" | "roundrobin" | "weighted_round_robin" => Balance::RoundRobin,
            "least_conn" | "leastconn" => Balance::LeastConn,
            "random" => Balance::Random,
            "p2c" | "power_of_two" => Balance::PowerOfTwo,
            "first" => Balance::First,
            "ip_hash" => Balance::IpHash,
            "hash" => Balance::Hash(HashKey::Uri),
            o => {
                c.at(
                    b.span(),
                    format!(
                        "{key}.balance: `{o}` is unknown; use round_robin, least_conn, random, p2c, first, ip_hash or hash"
                    ),
                );
                Balance::RoundRobin
            }
        };
    }
    if let Some(k) = &raw.hash_key {
        let v = k.get_ref();
        let parsed = if v == "uri" {
            Some(HashKey::Uri)
        } else if let Some(h) = v.strip_prefix("header:") {
            http::HeaderName::from_bytes(h.trim().as_bytes())
                .ok()
                .map(|n| HashKey::Header(n.as_str().to_string()))
        } else {
            v.strip_prefix("cookie:")
                .filter(|c| !c.trim().is_empty())
                .map(|c| HashKey::Cookie(c.trim().to_string()))
        };
        match (parsed, &out.balance) {
            (Some(h), Balance::Hash(_)) => out.balance = Balance::Hash(h),
            (Some(_), _) => c.at(
                k.span(),
                format!("{key}.hash_key: only used with balance = \"hash\""),
            ),
            (None, _) => c.at(
                k.span(),
                format!(
                    "{key}.hash_key: `{v}` is unknown; use \"uri\", \"header:NAME\" or \"cookie:NAME\""
                ),
            ),
        }
    }
    if let Some(s) = &raw.sticky_cookie {
        let v = s.get_ref();
        if v.is_empty()
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            c.at(
                s.span(),
                format!(
                    "{key}.sticky_cookie: `{v}` is not a cookie name (letters, digits, - and _)"
                ),
            );
        } else {
            out.sticky_cookie = Some(v.clone());
        }
    }
    if let Some(h) = &raw.host {
        out.host = match h.get_ref().as_str() {
            "pass" => HostHeader::Pass,
            "upstream" => HostHeader::Upstream,
            v if http::HeaderValue::from_str(v).is_ok() && !v.is_empty() => {
                HostHeader::Fixed(v.to_string())
            }
            v => {
                c.at(
                    h.span(),
                    format!("{key}.host: `{v}` is not \"pass\", \"upstream\" or a host name"),
                );
                HostHeader::Pass
            }
        };
    }

    let dur =
        |c: &mut Collector<'_>, name: &str, v: &Option<Spanned<Value>>, slot: &mut Duration| {
            if let Some(v) = v {
                match units::parse_duration(v.get_ref()) {
                    Ok(d) if d.is_zero() => {
                        c.at(v.span(), format!("{key}.{name}: must be more than zero"))
                    }
                    Ok(d) => *slot = d,
                    Err(m) => c.at(v.span(), format!("{key}.{name}: {m}")),
                }
            }
        };
    dur(
        c,
        "connect_timeout",
        &raw.connect_timeout,
        &mut out.connect_timeout,
    );
    dur(
        c,
        "response_timeout",
        &raw.response_timeout,
        &mut out.response_timeout,
    );
    dur(c, "idle_timeout", &raw.idle_timeout, &mut out.idle_timeout);
    dur(
        c,
        "queue_timeout",
        &raw.queue_timeout,
        &mut out.queue_timeout,
    );
    dur(c, "dns_ttl", &raw.dns_ttl, &mut out.dns_ttl);
    if let Some(list) = &raw.rewrite_location {
        for r in list.get_ref() {
            if r.from.is_empty() {
                c.at(
                    list.span(),
                    format!("{key}.rewrite_location: `from` is empty; name the upstream's URL prefix, like \"http://10.0.0.2:8080/\""),
                );
                continue;
            }
            match crate::template::Template::parse(&r.to) {
                Ok(to) if to.max_capture() == 0 => out.rewrite_location.push(LocationRewrite {
                    from: r.from.clone(),
                    to,
                }),
                Ok(_) => c.at(
                    list.span(),
                    format!("{key}.rewrite_location: `{}` uses a {{1}}..{{9}} group; only a route's regex has groups", r.to),
                ),
                Err(m) => c.at(list.span(), format!("{key}.rewrite_location: {m}")),
            }
        }
    }

    let count = |c: &mut Collector<'_>, name: &str, v: &Option<Spanned<i64>>, max: i64| {
        let v = v.as_ref()?;
        let n = *v.get_ref();
        if (0..=max).contains(&n) {
            Some(n)
        } else {
            c.at(
                v.span(),
                format!("{key}.{name}: {n} is out of range (0 to {max})"),
            );
            None
        }
    };
    if let Some(n) = count(c, "max_idle", &raw.max_idle, 100_000) {
        out.max_idle = n as usize;
    }
    if let Some(n) = count(c, "max_conns", &raw.max_conns, 1_000_000) {
        out.max_conns = n as usize;
    }
    if let Some(n) = count(c, "queue", &raw.queue, 1_000_000) {
        out.queue = n as usize;
    }
    if let Some(n) = count(c, "retries", &raw.retries, 10) {
        out.retries = n as u32;
    }
    if let Some(v) = &raw.retry_body_size {
        match units::parse_size(v.get_ref()) {
            Ok(n) => out.retry_body_size = n,
            Err(m) => c.at(v.span(), format!("{key}.retry_body_size: {m}")),
        }
    }

    if let Some(h) = &raw.health {
        let mut hc = HealthConfig {
            path: if h.tcp == Some(true) {
                None
            } else {
                Some(h.path.clone().unwrap_or_else(|| "/".into()))
            },
            method: http::Method::GET,
            status: None,
            body: h.body.clone(),
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
        };
        if let Some(p) = &hc.path
            && !p.starts_with('/')
        {
            c.at(
                p_span(p, &raw.to),
                format!("{key}.health.path: `{p}` must start with `/`"),
            );
        }
        if let Some(m) = &h.method {
            match http::Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                Ok(method) if method == http::Method::CONNECT => c.at(
                    m.span(),
                    format!("{key}.health.method: CONNECT cannot check an upstream"),
                ),
                Ok(method) if method == http::Method::HEAD && hc.body.is_some() => c.at(
                    m.span(),
                    format!(
                        "{key}.health.method: an answer to HEAD has no body for `health.body` to find"
                    ),
                ),
                Ok(method) => hc.method = method,
                Err(_) => c.at(
                    m.span(),
                    format!(
                        "{key}.health.method: `{}` is not an HTTP method",
                        m.get_ref()
                    ),
                ),
            }
        }
        if let Some(s) = &h.status {
            match *s.get_ref() {
                n @ 100..=599 => hc.status = Some(n as u16),
                n => c.at(
                    s.span(),
                    format!("{key}.health.status: {n} is not an HTTP status"),
                ),
            }
        }
        dur(c, "health.interval", &h.interval, &mut hc.interval);
        dur(c, "health.timeout", &h.timeout, &mut hc.timeout);
        if let Some(n) = count(c, "health.rise", &h.rise, 100) {
            hc.rise = (n as u32).max(1);
        }
        if let Some(n) = count(c, "health.fall", &h.fall, 100) {
            hc.fall = (n as u32).max(1);
        }
        out.health = Some(hc);
    }
    if let Some(p) = &raw.passive {
        if let Some(n) = count(c, "passive.failures", &p.failures, 10_000) {
            out.passive.failures = n as u32;
        }
        dur(c, "passive.window", &p.window, &mut out.passive.window);
        dur(
            c,
            "passive.cooldown",
            &p.cooldown,
            &mut out.passive.cooldown,
        );
        if let Some(v) = &p.max_ejected {
            match parse_percent(v.get_ref()) {
                Some(n) => out.passive.max_ejected = n,
                None => c.at(
                    v.span(),
                    format!(
                        "{key}.passive.max_ejected: `{}` is not a share; write a percentage such as \"50%\"",
                        v.get_ref()
                    ),
                ),
            }
        }
    }
    if let Some(t) = &raw.trusted_proxies {
        match crate::units::parse_cidrs(t.get_ref()) {
            Ok(v) => out.trusted_proxies = v,
            Err(m) => c.at(t.span(), format!("{key}.trusted_proxies: {m}")),
        }
    }
    if let Some(v) = &raw.send_proxy_protocol {
        out.send_proxy_protocol = match v.get_ref().as_str() {
            "v1" | "1" => Some(ProxyProtocolVersion::V1),
            "v2" | "2" => Some(ProxyProtocolVersion::V2),
            o => {
                c.at(
                    v.span(),
                    format!("{key}.send_proxy_protocol: `{o}` is unknown; use \"v1\" or \"v2\""),
                );
                None
            }
        };
    }
    out
}

/// Health paths are plain strings (no span): point at the proxy's `to`.
fn p_span(_p: &str, to: &Spanned<RawUpstreams>) -> std::ops::Range<usize> {
    to.span()
}

/// Validates the listener's `proxy_protocol` and `trusted_sources`.
pub fn accept_proxy_protocol(
    c: &mut Collector<'_>,
    site: &str,
    s: &RawSite,
) -> Option<AcceptProxyProtocol> {
    let on = s.proxy_protocol.as_ref().is_some_and(|p| *p.get_ref());
    let sources = match &s.trusted_sources {
        Some(t) => match crate::units::parse_cidrs(t.get_ref()) {
            Ok(v) => v,
            Err(m) => {
                c.at(t.span(), format!("site \"{site}\": trusted_sources: {m}"));
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    if on
        && sources.is_empty()
        && let Some(p) = &s.proxy_protocol
    {
        c.at(
            p.span(),
            format!(
                "site \"{site}\": proxy_protocol = true needs `trusted_sources = [\"10.0.0.0/8\", ...]` (who may send it)"
            ),
        );
    }
    on.then_some(AcceptProxyProtocol {
        trusted_sources: sources,
    })
}

/// `"50%"`: 0 to 100.
fn parse_percent(s: &str) -> Option<u8> {
    let n: u8 = s.trim().strip_suffix('%')?.trim().parse().ok()?;
    (n <= 100).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_forms() {
        let t = |h: &str, p| UpstreamTarget::Tcp {
            host: h.into(),
            port: p,
        };
        assert_eq!(
            parse_upstream("127.0.0.1:9001").unwrap(),
            (UpstreamScheme::Http, t("127.0.0.1", 9001))
        );
        assert_eq!(
            parse_upstream("https://API.example.com").unwrap(),
            (UpstreamScheme::Https, t("api.example.com", 443))
        );
        assert_eq!(
            parse_upstream("h2c://[::1]:9002").unwrap(),
            (UpstreamScheme::H2c, t("::1", 9002))
        );
        assert_eq!(
            parse_upstream("unix:/run/app.sock").unwrap().1,
            UpstreamTarget::Unix("/run/app.sock".into())
        );
        assert!(parse_upstream("app").is_err());
        assert!(parse_upstream("ftp://x:1").is_err());
        assert!(parse_upstream("http://x:1/path").is_err());
    }
}
