//! `[cache]` (where cached responses are kept, process-wide) and a site's or
//! route's `cache = true | { ... }` (what is cached there and how). Owns the
//! settings and their defaults only; never stores a response.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use ipnet::IpNet;
use serde_spanned::Spanned;

use crate::error::Collector;
use crate::raw::{RawCache, RawCacheGlobal, RawCacheSwitch, RawSite};
use crate::units::{parse_duration, parse_size};

/// `[cache]`: the storage every cached site and route shares.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheStorage {
    /// Bytes of responses (heads and bodies) held in memory.
    pub memory: u64,
    /// Larger responses are streamed through and not stored.
    pub max_object_size: u64,
    pub disk: Option<DiskStorage>,
}

/// `[cache] disk = { path, size }`: responses kept on disk across restarts.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskStorage {
    pub path: PathBuf,
    pub size: u64,
}

impl Default for CacheStorage {
    fn default() -> Self {
        CacheStorage {
            memory: 256 * 1024 * 1024,
            max_object_size: 16 * 1024 * 1024,
            disk: None,
        }
    }
}

/// What a response carrying `Set-Cookie` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCookie {
    /// Not stored (and later requests pass straight through): the default.
    Pass,
    /// Stored without its `Set-Cookie` fields; only the client whose request
    /// fetched it gets the cookie.
    Strip,
}

/// How the query string enters the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryKey {
    /// As sent.
    Keep,
    /// Parameters sorted, so `?b=1&a=2` and `?a=2&b=1` are one entry.
    Sort,
    /// Left out: every query string of a path is one entry.
    Ignore,
}

/// A site's or route's cache policy.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePolicy {
    /// Freshness for responses that state none (instead of RFC 9111's
    /// heuristic); `None`: the heuristic only.
    pub default_ttl: Option<Duration>,
    /// How long a stale response is served while one background request
    /// refreshes it, when the response has no `stale-while-revalidate`.
    /// Zero by default: serving stale copies the origin did not allow
    /// departs from RFC 9111 §4.2.4 (as Varnish's grace does).
    pub grace: Duration,
    /// How long a stale response is served when the upstream fails, when
    /// the response has no `stale-if-error`. Zero by default, as `grace`.
    pub stale_if_error: Duration,
    /// Whether the client's `Cache-Control` (`no-cache`, `max-age`,
    /// `no-store`…) is obeyed; by default ignored, as Varnish does.
    pub honour_request: bool,
    pub set_cookie: SetCookie,
    pub query: QueryKey,
    /// Query parameters left out of the key (`utm_source`, `fbclid`).
    pub ignore_params: Vec<String>,
    /// Request fields added to the key.
    pub key_headers: Vec<HeaderName>,
    /// Cookies added to the key.
    pub key_cookies: Vec<String>,
    /// The response field naming the entry's tags (surrogate keys); removed
    /// before the response leaves weir.
    pub tags_header: HeaderName,
    /// Addresses allowed to send `PURGE`; none by default.
    pub purge_from: Vec<IpNet>,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            default_ttl: None,
            grace: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            honour_request: false,
            set_cookie: SetCookie::Pass,
            query: QueryKey::Keep,
            ignore_params: Vec::new(),
            key_headers: Vec::new(),
            key_cookies: Vec::new(),
            tags_header: HeaderName::from_static("surrogate-key"),
            purge_from: Vec::new(),
        }
    }
}

pub(crate) fn storage(
    c: &mut Collector<'_>,
    base: &std::path::Path,
    raw: &RawCacheGlobal,
) -> CacheStorage {
    let mut out = CacheStorage::default();
    let mut size = |v: &Option<Spanned<crate::raw::Value>>, key: &str, into: &mut u64| {
        if let Some(v) = v {
            match parse_size(v.get_ref()) {
                Ok(n) => *into = n,
                Err(m) => c.at(v.span(), format!("cache.{key}: {m}")),
            }
        }
    };
    size(&raw.memory, "memory", &mut out.memory);
    size(
        &raw.max_object_size,
        "max_object_size",
        &mut out.max_object_size,
    );
    if out.max_object_size > u32::MAX as u64 {
        out.max_object_size = u32::MAX as u64;
    }
    if let Some(d) = &raw.disk {
        let mut disk = DiskStorage {
            path: base.join(d.path.get_ref()),
            size: 1024 * 1024 * 1024,
        };
        size(&d.size, "disk.size", &mut disk.size);
        out.disk = Some(disk);
    }
    out
}

/// A site's or route's `cache`, with `inherited` (the site's) for a route
/// that says nothing.
pub(crate) fn policy(
    c: &mut Collector<'_>,
    key: &str,
    raw: Option<&Spanned<RawCacheSwitch>>,
    inherited: Option<&Arc<CachePolicy>>,
) -> Option<Arc<CachePolicy>> {
    let raw = match raw {
        None => return inherited.cloned(),
        Some(r) => r,
    };
    let RawCacheSwitch::On(r) = raw.get_ref() else {
        return None;
    };
    Some(Arc::new(table(c, key, r)))
}

/// A site's `cache`, which keeps the responses of its proxy or its routes'.
pub(crate) fn site_policy(
    c: &mut Collector<'_>,
    name: &str,
    s: &RawSite,
) -> Option<Arc<CachePolicy>> {
    let policy = policy(
        c,
        &format!("site \"{name}\": cache"),
        s.cache.as_ref(),
        None,
    );
    if let (Some(_), Some(span)) = (&policy, s.cache.as_ref().map(|c| c.span()))
        && !crate::proxy::has_proxy(s)
    {
        c.at(
            span,
            format!(
                "site \"{name}\": `cache` keeps responses of a proxy; add `proxy = {{ to = [...] }}` or a route"
            ),
        );
    }
    policy
}

fn table(c: &mut Collector<'_>, key: &str, r: &RawCache) -> CachePolicy {
    let mut out = CachePolicy::default();
    let mut dur = |v: &Option<Spanned<crate::raw::Value>>, name: &str| -> Option<Duration> {
        let v = v.as_ref()?;
        match parse_duration(v.get_ref()) {
            Ok(d) => Some(d),
            Err(m) => {
                c.at(v.span(), format!("{key}.{name}: {m}"));
                None
            }
        }
    };
    out.default_ttl = dur(&r.default_ttl, "default_ttl");
    if let Some(d) = dur(&r.grace, "grace") {
        out.grace = d;
    }
    if let Some(d) = dur(&r.stale_if_error, "stale_if_error") {
        out.stale_if_error = d;
    }
    if let Some(v) = &r.request_cache_control {
        match v.get_ref().as_str() {
            "ignore" => out.honour_request = false,
            "honour" | "honor" => out.honour_request = true,
            o => c.at(
                v.span(),
                format!(
                    "{key}.request_cache_control: `{o}` is unknown; use \"ignore\" or \"honour\""
                ),
            ),
        }
    }
    if let Some(v) = &r.set_cookie {
        match v.get_ref().as_str() {
            "pass" => out.set_cookie = SetCookie::Pass,
            "strip" => out.set_cookie = SetCookie::Strip,
            o => c.at(
                v.span(),
                format!("{key}.set_cookie: `{o}` is unknown; use \"pass\" or \"strip\""),
            ),
        }
    }
    if let Some(k) = &r.key {
        if let Some(q) = &k.query {
            match q.get_ref().as_str() {
                "keep" => out.query = QueryKey::Keep,
                "sort" => out.query = QueryKey::Sort,
                "ignore" => out.query = QueryKey::Ignore,
                o => c.at(
                    q.span(),
                    format!(
                        "{key}.key.query: `{o}` is unknown; use \"keep\", \"sort\" or \"ignore\""
                    ),
                ),
            }
        }
        out.ignore_params = k.ignore_params.clone().unwrap_or_default();
        if let Some(h) = &k.headers {
            for name in h.get_ref() {
                match HeaderName::from_bytes(name.trim().as_bytes()) {
                    Ok(n) => out.key_headers.push(n),
                    Err(_) => c.at(
                        h.span(),
                        format!("{key}.key.headers: `{name}` is not a field name"),
                    ),
                }
            }
        }
        out.key_cookies = k.cookies.clone().unwrap_or_default();
    }
    if let Some(t) = &r.tags_header {
        match HeaderName::from_bytes(t.get_ref().trim().as_bytes()) {
            Ok(n) => out.tags_header = n,
            Err(_) => c.at(
                t.span(),
                format!("{key}.tags_header: `{}` is not a field name", t.get_ref()),
            ),
        }
    }
    if let Some(p) = &r.purge_from {
        match crate::units::parse_cidrs(p.get_ref()) {
            Ok(n) => out.purge_from = n,
            Err(m) => c.at(p.span(), format!("{key}.purge_from: {m}")),
        }
    }
    out
}
