//! Validation of the layer-4 keys: `[tcp."name"]` listeners and a site's
//! `passthrough`, turned into [`StreamConfig`]s whose upstream part is a
//! [`ProxyConfig`] (the same balancing, health and connection limits as
//! the HTTP proxy's).
//!
//! Owns only checking and defaults; never opens a socket.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_spanned::Spanned;

use crate::HostPattern;
use crate::error::Collector;
use crate::proxy::{ProxyConfig, UpstreamTarget, proxy_config};
use crate::raw::{RawProxy, RawSite, RawStream, RawUpstreams, Shorthand};

/// Byte streams proxied to upstreams: a `[tcp]` listener's, or TLS
/// connections a site passes through.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    /// `tcp "postgres"` or the passthrough site's name, for logs and metrics.
    pub name: String,
    /// Upstreams, balance, health, `connect_timeout`, `max_conns`,
    /// `retries`, `send_proxy_protocol`; `idle_timeout` is the stream's.
    pub upstream: Arc<ProxyConfig>,
    /// Most connections open from one client address; 0: no limit.
    pub per_client: usize,
    /// Passthrough only: the client must offer one of these ALPN
    /// protocols (empty: any).
    pub alpn: Vec<Vec<u8>>,
}

/// A `[tcp."name"]` listener.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpListenerConfig {
    pub addrs: Vec<SocketAddr>,
    pub stream: Arc<StreamConfig>,
}

/// A stream's idle timeout when none is given (nginx's `proxy_timeout`).
const IDLE: Duration = Duration::from_secs(600);

/// A `[tcp."name"]` table.
pub(crate) fn tcp_listener(
    c: &mut Collector<'_>,
    name: &str,
    raw: &Spanned<RawStream>,
    bind: IpAddr,
) -> Option<TcpListenerConfig> {
    let key = format!("tcp \"{name}\"");
    let r = raw.get_ref();
    if let Some(a) = &r.alpn {
        c.at(
            a.span(),
            format!("{key}: `alpn` is for a site's passthrough; a [tcp] listener sees no TLS"),
        );
    }
    let Some(listen) = &r.listen else {
        c.at(
            raw.span(),
            format!("{key}: needs `listen = \"127.0.0.1:5432\"`"),
        );
        return None;
    };
    let mut addrs = Vec::new();
    for a in listen.get_ref().to_vec() {
        match crate::parse_listen(&a, bind) {
            Ok(addr) => addrs.push(addr),
            Err(m) => c.at(listen.span(), format!("{key}: listen: {m}")),
        }
    }
    let stream = stream(c, &key, &format!("tcp:{name}"), raw.span(), r, None)?;
    Some(TcpListenerConfig {
        addrs,
        stream: Arc::new(stream),
    })
}

/// Every `[tcp."name"]` table; a port must not be one that a site (`binds`)
/// or another `[tcp]` listens on.
pub(crate) fn tcp_listeners(
    c: &mut Collector<'_>,
    raw: &IndexMap<String, Spanned<RawStream>>,
    bind: IpAddr,
    binds: &[crate::Bind],
) -> Vec<TcpListenerConfig> {
    let mut tcp: Vec<TcpListenerConfig> = Vec::new();
    for (name, t) in raw {
        if let Some(l) = tcp_listener(c, name, t, bind) {
            for a in &l.addrs {
                if binds.iter().any(|b| b.0.port() == a.port())
                    || tcp
                        .iter()
                        .any(|o| o.addrs.iter().any(|b| b.port() == a.port()))
                {
                    c.at(
                        t.span(),
                        format!(
                            "tcp \"{name}\": port {} is already used by a site or another [tcp]",
                            a.port()
                        ),
                    );
                }
            }
            tcp.push(l);
        }
    }
    tcp
}

/// A site's `passthrough`, which hands the site's TLS to its upstreams and
/// so excludes every key that answers HTTP, and routes by the TLS server
/// name, so needs a site named by a host.
pub(crate) fn site_passthrough(
    c: &mut Collector<'_>,
    name: &str,
    s: &RawSite,
    host: &HostPattern,
    name_span: &Range<usize>,
) -> Option<Arc<StreamConfig>> {
    let p = s.passthrough.as_ref()?;
    let out = passthrough(c, name, p).map(Arc::new);
    let own = [
        ("tls", s.tls.is_some()),
        ("root", s.root.is_some()),
        ("proxy", s.proxy.is_some()),
        ("route", s.route.is_some()),
        ("php", s.php.is_some()),
        ("fastcgi", s.fastcgi.is_some()),
        ("redirect", s.redirect.is_some()),
        ("respond", s.respond.is_some()),
        ("http_redirect", s.http_redirect.is_some()),
    ];
    for (k, _) in own.iter().filter(|(_, set)| *set) {
        c.at(
            p.span(),
            format!("site \"{name}\": `passthrough` hands its TLS to the upstream; remove `{k}`"),
        );
    }
    if matches!(host, HostPattern::Any) {
        c.at(
            name_span.clone(),
            format!("site \"{name}\": `passthrough` routes by the TLS server name; name the site by a host"),
        );
    }
    out
}

/// A site's `passthrough`.
fn passthrough(
    c: &mut Collector<'_>,
    site: &str,
    raw: &Spanned<Shorthand<RawStream>>,
) -> Option<StreamConfig> {
    let key = format!("site \"{site}\": passthrough");
    match raw.get_ref() {
        Shorthand::To(to) => {
            let r = RawStream::default();
            stream(c, &key, site, raw.span(), &r, Some(to))
        }
        Shorthand::Full(r) => {
            if let Some(l) = &r.listen {
                c.at(
                    l.span(),
                    format!("{key}: `listen` is the site's own; remove it here"),
                );
            }
            stream(c, &key, site, raw.span(), r, None)
        }
    }
}

fn stream(
    c: &mut Collector<'_>,
    key: &str,
    name: &str,
    span: std::ops::Range<usize>,
    r: &RawStream,
    to: Option<&String>,
) -> Option<StreamConfig> {
    let to = match (to, &r.to) {
        (Some(s), _) => Spanned::new(span.clone(), RawUpstreams::One(s.clone())),
        (None, Some(t)) => t.clone(),
        (None, None) => {
            c.at(span, format!("{key}: needs `to = \"10.0.0.5:5432\"`"));
            return None;
        }
    };
    let mut p = RawProxy::bare(to);
    p.balance = r.balance.clone();
    p.connect_timeout = r.connect_timeout.clone();
    p.max_conns = r.max_conns.clone();
    p.retries = r.retries.clone();
    p.health = r.health.clone();
    p.passive = r.passive.clone();
    p.send_proxy_protocol = r.send_proxy_protocol.clone();
    p.dns_ttl = r.dns_ttl.clone();
    p.idle_timeout = r.idle_timeout.clone();
    let mut upstream = upstream_part(c, key, &Spanned::new(span, p));
    if r.idle_timeout.is_none() {
        upstream.idle_timeout = IDLE;
    }
    if matches!(upstream.balance, crate::proxy::Balance::Hash(_)) {
        c.at(
            r.balance.as_ref().map_or(0..0, |b| b.span()),
            format!("{key}.balance: a stream has no URI or header to hash; use ip_hash"),
        );
    }
    let per_client = match &r.max_conns_per_client {
        Some(n) if (0..=1_000_000).contains(n.get_ref()) => *n.get_ref() as usize,
        Some(n) => {
            c.at(
                n.span(),
                format!("{key}.max_conns_per_client: out of range (0 to 1000000)"),
            );
            0
        }
        None => 0,
    };
    let alpn = r
        .alpn
        .as_ref()
        .map(|a| {
            a.get_ref()
                .iter()
                .filter_map(|p| {
                    if p.is_empty() || p.len() > 255 {
                        c.at(
                            a.span(),
                            format!("{key}.alpn: `{p}` is not an ALPN protocol"),
                        );
                        None
                    } else {
                        Some(p.as_bytes().to_vec())
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Some(StreamConfig {
        name: name.to_string(),
        upstream: Arc::new(upstream),
        per_client,
        alpn,
    })
}

/// The upstream part of a stream or a FastCGI handler: a [`ProxyConfig`]
/// whose upstreams must be bare addresses (`host:port` or `unix:`), and
/// whose health checks only open a connection (there is no HTTP to ask).
pub(crate) fn upstream_part(
    c: &mut Collector<'_>,
    key: &str,
    p: &Spanned<RawProxy>,
) -> ProxyConfig {
    let mut out = proxy_config(c, key, p);
    for u in &out.upstreams {
        if u.name.contains("://") {
            c.at(
                p.get_ref().to.span(),
                format!(
                    "{key}.to: `{}` has a scheme; write \"host:port\" or \"unix:/path\"",
                    u.name
                ),
            );
        }
        if let UpstreamTarget::Unix(path) = &u.target
            && path.as_os_str().is_empty()
        {
            c.at(
                p.get_ref().to.span(),
                format!("{key}.to: empty socket path"),
            );
        }
    }
    if let Some(h) = &mut out.health {
        h.path = None;
    }
    out
}
