//! weir's HTTP cache: a shared cache by RFC 9111 in front of a site's or
//! route's reverse proxy. [`Cache::serve`] is its whole path, top to
//! bottom:
//!
//! 1. `PURGE` from an allowed address removes the URL (and, in a cluster,
//!    on every instance: [`fanout`]); other unsafe
//!    methods go upstream and, when they succeed, invalidate (§4.4).
//! 2. The key ([`key`]): scheme, host, path and query as the policy
//!    shapes them; then the variant the request selects (`Vary`).
//! 3. A stored response ([`store`]) is reused as the rules say
//!    ([`rules`]): fresh → served; stale within `stale-while-revalidate`
//!    → served while one background request refreshes it; otherwise
//!    validated upstream (a 304 freshens it; a failing upstream gets the
//!    stale copy within `stale-if-error`, an unreachable one whenever no
//!    directive forbids it: RFC 9111 §4.2.4; when `must-revalidate`,
//!    `proxy-revalidate` or `s-maxage` does, a 504 of the cache's own:
//!    §5.2.2.2).
//! 4. A miss joins the fetch already in flight for its key (request
//!    coalescing: it reads the body as it streams in) or starts it; a URL
//!    whose last answer was uncacheable goes straight upstream instead
//!    (hit-for-miss), so uncacheable URLs never queue.
//! 5. A storable answer is stored as its body arrives ([`fetch::pump`]);
//!    every answer carries `Cache-Status` ([`respond`]).
//!
//! Never blocks a worker (the store is lock-free on reads, the in-flight
//! map is sharded) and never forwards a field outside the key that could
//! shape what other clients receive.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body::Body as _;
use weir_config::cache::CachePolicy;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

pub mod control;
mod disk;
pub mod fanout;
mod fetch;
pub mod key;
mod object;
mod respond;
pub mod rules;
pub mod store;

use control::CacheControl;
use object::{ObjBody, Object};
pub use respond::CACHE_STATUS;
use respond::{forward, from_object, hit};
use rules::{Freshness, Reuse};
pub use store::{EntryInfo, Invalidation, Store, Summary, counter};
use store::{Flights, Joined, Landing, Lead};

/// Seconds since the epoch: the clock every freshness rule counts in.
pub fn now() -> u64 {
    // Unit tests run on a clock of their own that only they move, so no
    // second ticks between two steps of a test.
    #[cfg(test)]
    return tests::CLOCK_START + tests::SKEW.with(|s| s.get());
    #[cfg(not(test))]
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

thread_local! {
    static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

type Fetching<'a> = Pin<Box<dyn Future<Output = Response<Body>> + Send + 'a>>;

/// Where the cache fetches from: weir's reverse proxy, or a test's origin.
/// A failure is an answer too (502, 503, 504), as the proxy gives it.
pub trait Origin: Send + Sync + 'static {
    fn fetch<'a>(
        &'a self,
        parts: &'a mut Parts,
        body: Body,
        conn: &'a ConnInfo,
        path: Option<&'a str>,
    ) -> Fetching<'a>;
}

impl Origin for weir_proxy::Proxy {
    fn fetch<'a>(
        &'a self,
        parts: &'a mut Parts,
        body: Body,
        conn: &'a ConnInfo,
        path: Option<&'a str>,
    ) -> Fetching<'a> {
        Box::pin(self.serve(parts, body, conn, path))
    }
}

/// The cache in front of one site's or route's proxy.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    policy: Arc<CachePolicy>,
    origin: Arc<dyn Origin>,
}

impl Cache {
    pub fn new(store: Arc<Store>, policy: Arc<CachePolicy>, origin: Arc<dyn Origin>) -> Cache {
        Cache {
            inner: Arc::new(Inner {
                store,
                policy,
                origin,
            }),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    pub fn policy(&self) -> &Arc<CachePolicy> {
        &self.inner.policy
    }

    /// Answers one request: from the store, or through the origin.
    pub async fn serve(
        &self,
        parts: &mut Parts,
        body: Body,
        conn: &ConnInfo,
        path: Option<&str>,
    ) -> Response<Body> {
        let store = &self.inner.store;
        let policy = &self.inner.policy;
        // Unsafe methods, purges, upgrades and requests with bodies pass.
        if parts.method.as_str() == "PURGE" {
            return self.purge_request(parts, conn);
        }
        if parts.method != Method::GET && parts.method != Method::HEAD {
            store.count(conn.worker, counter::PASS, 1);
            let resp = self.inner.origin.fetch(parts, body, conn, path).await;
            if rules::invalidates(&parts.method, resp.status()) {
                self.invalidate(parts, conn.tls, resp.headers());
            }
            return self.passed(parts, resp, forward("method", None, false, false, None));
        }
        if parts.headers.contains_key(header::UPGRADE) {
            return self.inner.origin.fetch(parts, body, conn, path).await;
        }
        if !body.is_end_stream() {
            return self.pass(parts, body, conn, path, "request-body").await;
        }
        let req_cc = policy
            .honour_request
            .then(|| CacheControl::parse(&parts.headers));
        if req_cc.as_ref().is_some_and(|c| c.no_store) {
            return self.pass(parts, body, conn, path, "request-no-store").await;
        }

        // The key, then a stored response and what the rules let it do.
        let now = now();
        let extra = key::policy_extra(&parts.headers, policy);
        // A hit needs the key only for the lookup: it is built in a buffer
        // of the thread's, and owned only on the way upstream.
        let mut stored = KEY.with_borrow_mut(|k| {
            k.clear();
            key::primary_into(k, parts, conn.tls, policy);
            store.lookup(k, &parts.headers, &extra, now)
        });
        if let Some(obj) = &stored
            && let ObjBody::OnDisk(_) = obj.body
        {
            let primary = key::primary(parts, conn.tls, policy);
            stored = store.load(&primary, obj).await;
        }
        if let Some(obj) = &stored {
            let ttl = obj.fresh.ttl(now);
            let reuse = obj.fresh.reuse(now, req_cc.as_ref());
            let served = match reuse {
                Reuse::Fresh => from_object(parts, obj, now, hit(ttl, None))
                    .inspect(|_| store.count(conn.worker, counter::HIT, 1)),
                Reuse::StaleWhileRevalidate => {
                    let primary = key::primary(parts, conn.tls, policy);
                    self.refresh(parts, conn, path, &primary, obj, &extra);
                    from_object(parts, obj, now, hit(ttl, Some("stale-while-revalidate")))
                        .inspect(|_| store.count(conn.worker, counter::STALE, 1))
                }
                Reuse::Validate => None,
            };
            if let Some(r) = served {
                store.count(
                    conn.worker,
                    counter::BYTES_SERVED,
                    obj.body_len().unwrap_or(0),
                );
                return r;
            }
        } else if req_cc.as_ref().is_some_and(|c| c.only_if_cached) {
            // §5.2.1.7: nothing stored, and the client wants nothing else.
            let mut r = weir_http::response::error(StatusCode::GATEWAY_TIMEOUT);
            r.headers_mut().insert(
                CACHE_STATUS.clone(),
                forward("miss", None, false, false, Some("only-if-cached")),
            );
            return r;
        }
        let primary: Arc<str> = Arc::from(key::primary(parts, conn.tls, policy));
        self.miss(parts, conn, path, primary, extra, stored, req_cc)
            .await
    }

    /// A miss, or a stored response to validate: wait for the fetch in
    /// flight for the same variant, or make it.
    #[allow(clippy::too_many_arguments)]
    async fn miss(
        &self,
        parts: &Parts,
        conn: &ConnInfo,
        path: Option<&str>,
        primary: Arc<str>,
        extra: String,
        stale: Option<Arc<Object>>,
        req_cc: Option<CacheControl>,
    ) -> Response<Body> {
        let store = &self.inner.store;
        // Hit-for-miss: the last answer was uncacheable, so nobody waits.
        let alone = stale.is_none() && store.uncacheable(&primary).is_some();
        let mut lead = None;
        if !alone {
            let fkey = flight_key(store, &primary, &extra, parts);
            loop {
                match Flights::join(store, fkey.clone()) {
                    Joined::Lead(l) => {
                        lead = Some(l);
                        break;
                    }
                    Joined::Wait(rx) => match store::wait(rx).await {
                        Some(Landing::Stored(obj)) if obj.matches(&parts.headers, &extra) => {
                            let now = now();
                            let status = if obj.fresh.ttl(now) < 0 {
                                forward("stale", None, false, true, Some("stale-if-error"))
                            } else {
                                forward("miss", None, false, true, None)
                            };
                            if let Some(r) = from_object(parts, &obj, now, status) {
                                store.count(conn.worker, counter::COALESCED, 1);
                                return r;
                            }
                            break;
                        }
                        // Not stored, or another variant: fetch alone.
                        Some(_) => break,
                        // The fetch was cancelled: join or lead the next one.
                        None => continue,
                    },
                }
            }
        }
        let req_cc = req_cc.as_ref();
        self.go(parts, conn, path, &primary, &extra, stale, req_cc, lead)
            .await
    }

    /// One fetch upstream for the cache, and what becomes of its answer.
    #[allow(clippy::too_many_arguments)]
    async fn go(
        &self,
        parts: &Parts,
        conn: &ConnInfo,
        path: Option<&str>,
        primary: &Arc<str>,
        extra: &str,
        stale: Option<Arc<Object>>,
        req_cc: Option<&CacheControl>,
        lead: Option<Lead>,
    ) -> Response<Body> {
        let store = &self.inner.store;
        let policy = &self.inner.policy;
        let land = |l: Landing| {
            if let Some(lead) = &lead {
                lead.land(l);
            }
        };
        let mut up = fetch::upstream_request(parts, policy, stale.as_deref());
        // A traced request's fetch hangs its attempts under its span.
        if let Some(c) = parts.extensions.get::<weir_http::trace::Current>() {
            up.extensions.insert(*c);
        }
        let request_time = now();
        let mut resp = self
            .inner
            .origin
            .fetch(&mut up, Body::empty(), conn, path)
            .await;
        let response_time = now();
        let status = resp.status();
        store.count(conn.worker, counter::MISS, 1);
        // The proxy's attempts (for the access log) stay with whichever
        // answer the cache gives, built from the object or passed on.
        let attempts = resp.extensions_mut().remove::<weir_proxy::Attempts>();
        let mut answer = (|| {
            if let Some(old) = &stale {
                // §4.3.3, §4.3.4: the stored response is still good: freshen it.
                if status == StatusCode::NOT_MODIFIED {
                    let mut headers = old.headers.clone();
                    rules::freshen(&mut headers, resp.headers(), policy);
                    let cc = CacheControl::parse(&headers);
                    let mut fresh = Freshness::new(
                        old.status,
                        &headers,
                        &cc,
                        request_time,
                        response_time,
                        policy,
                    );
                    // The age counts from this validation, as the 304 gives it.
                    fresh.initial_age =
                        rules::initial_age(resp.headers(), request_time, response_time);
                    let mut new = old.with(headers, fresh, old.share_body());
                    if resp.headers().contains_key(&policy.tags_header) {
                        new.tags = fetch::tags(resp.headers(), policy);
                    }
                    let new = Arc::new(new);
                    store.replace(primary, old, new.clone());
                    land(Landing::Stored(new.clone()));
                    store.count(conn.worker, counter::REVALIDATED, 1);
                    return from_object(
                        parts,
                        &new,
                        response_time,
                        forward("stale", Some(304), true, false, None),
                    )
                    .unwrap_or_else(gone);
                }
                // The origin fails and allowed a stale copy to stand in
                // (RFC 5861 `stale-if-error`, or the policy's), or no upstream
                // could be reached at all (§4.2.4: disconnected).
                let disconnected = rules::is_origin_error(status)
                    && resp.extensions().get::<weir_proxy::Unreachable>().is_some();
                let why = if !rules::is_origin_error(status) {
                    None
                } else if old.fresh.serves_on_error(response_time, req_cc) {
                    Some("stale-if-error")
                } else if disconnected && old.fresh.serves_disconnected() {
                    Some("unreachable")
                } else {
                    None
                };
                if why.is_none()
                    && disconnected
                    && let Some(directive) =
                        CacheControl::parse(&old.headers).must_revalidate_shared()
                {
                    land(Landing::Pass);
                    return self.must_revalidate_error(parts, primary, status, directive);
                }
                if let Some(why) = why {
                    land(Landing::Stored(old.clone()));
                    store.count(conn.worker, counter::STALE_ERROR, 1);
                    let st = forward("stale", Some(status.as_u16()), false, false, Some(why));
                    if let Some(r) = from_object(parts, old, response_time, st) {
                        return r;
                    }
                }
            }

            let cc = CacheControl::parse(resp.headers());
            let verdict = rules::storable(
                &rules::Exchange {
                    method: &up.method,
                    req: &parts.headers,
                    req_cc,
                    status,
                    resp: resp.headers(),
                    cc: &cc,
                },
                policy,
            )
            .and_then(
                |()| match weir_http::fields::content_length(resp.headers()) {
                    Ok(Some(n)) if n > store.max_object_size() => Err(rules::Uncacheable::TooLarge),
                    _ => Ok(()),
                },
            )
            .and_then(|()| {
                // Never fresh and nothing to validate with: storing it would
                // only serve it stale.
                let h = resp.headers();
                let lifetime = rules::freshness_lifetime(status, h, &cc, response_time, policy);
                if lifetime == 0
                    && !h.contains_key(header::ETAG)
                    && !h.contains_key(header::LAST_MODIFIED)
                {
                    Err(rules::Uncacheable::NoFreshness)
                } else {
                    Ok(())
                }
            });
            let fwd = if stale.is_some() { "stale" } else { "miss" };
            match verdict {
                Err(why) => {
                    // A failing origin is not an uncacheable URL, and leaves
                    // the stored response to validate again later.
                    if !rules::is_origin_error(status) {
                        if let Some(old) = &stale {
                            store.remove(primary, old);
                        }
                        store.mark_uncacheable(primary, why);
                    }
                    land(Landing::Pass);
                    self.passed(
                        parts,
                        resp,
                        forward(fwd, Some(status.as_u16()), false, false, Some(why.as_str())),
                    )
                }
                Ok(()) => {
                    let head =
                        fetch::object(&up, extra, resp, &cc, policy, request_time, response_time);
                    let obj = Arc::new(head.obj);
                    store.insert(primary, obj.clone());
                    land(Landing::Stored(obj.clone()));
                    if let ObjBody::Filling(_) = &obj.body {
                        tokio::spawn(fetch::pump(
                            store.clone(),
                            primary.clone(),
                            obj.clone(),
                            head.body,
                        ));
                    }
                    from_object(
                        parts,
                        &obj,
                        response_time,
                        forward(fwd, Some(status.as_u16()), true, false, None),
                    )
                    .unwrap_or_else(gone)
                }
            }
        })();
        if let Some(a) = attempts {
            answer.extensions_mut().insert(a);
        }
        answer
    }

    /// RFC 9111 §5.2.2.2 (§5.2.2.8, §5.2.2.10 for `proxy-revalidate` and
    /// `s-maxage`): a stored response that must be revalidated, and no
    /// upstream reached: the cache's own 504, not the proxy's error (whose
    /// 502 or 503 would blame the upstream alone) and not the stale copy.
    fn must_revalidate_error(
        &self,
        parts: &Parts,
        primary: &str,
        upstream: StatusCode,
        directive: &str,
    ) -> Response<Body> {
        tracing::warn!(
            key = %primary,
            directive,
            "cache: 504, the stored response is stale, its {directive} forbids serving it \
             unvalidated, and no upstream could be reached (RFC 9111 §5.2.2.2)"
        );
        let text = format!(
            "504 Gateway Timeout: the cached response is stale and its {directive} \
             requires revalidation, but no upstream could be reached\n"
        );
        let len = text.len();
        let mut r = Response::new(Body::full(bytes::Bytes::from(text)));
        *r.status_mut() = StatusCode::GATEWAY_TIMEOUT;
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        let st = forward(
            "stale",
            Some(upstream.as_u16()),
            false,
            false,
            Some(directive),
        );
        self.passed(parts, r, st)
    }

    /// Serves the stale response now and refreshes it once, in the
    /// background (unless a fetch for it is already in flight).
    fn refresh(
        &self,
        parts: &Parts,
        conn: &ConnInfo,
        path: Option<&str>,
        primary: &str,
        obj: &Arc<Object>,
        extra: &str,
    ) {
        let store = &self.inner.store;
        let primary: Arc<str> = Arc::from(primary);
        let Joined::Lead(lead) = Flights::join(store, flight_key(store, &primary, extra, parts))
        else {
            return;
        };
        let mut p = http::Request::new(()).into_parts().0;
        p.method = Method::GET;
        p.uri = parts.uri.clone();
        p.version = parts.version;
        p.headers = parts.headers.clone();
        let (this, conn, path, obj, extra) = (
            self.clone(),
            conn.clone(),
            path.map(str::to_string),
            obj.clone(),
            extra.to_string(),
        );
        tokio::spawn(async move {
            let _ = this
                .go(
                    &p,
                    &conn,
                    path.as_deref(),
                    &primary,
                    &extra,
                    Some(obj),
                    None,
                    Some(lead),
                )
                .await;
        });
    }

    /// Straight upstream, nothing stored.
    async fn pass(
        &self,
        parts: &mut Parts,
        body: Body,
        conn: &ConnInfo,
        path: Option<&str>,
        why: &str,
    ) -> Response<Body> {
        self.inner.store.count(conn.worker, counter::PASS, 1);
        let resp = self.inner.origin.fetch(parts, body, conn, path).await;
        self.passed(
            parts,
            resp,
            forward("request", None, false, false, Some(why)),
        )
    }

    /// An upstream answer on its way to the client: tags removed, status added.
    fn passed(
        &self,
        parts: &Parts,
        mut resp: Response<Body>,
        status: HeaderValue,
    ) -> Response<Body> {
        resp.headers_mut().remove(&self.inner.policy.tags_header);
        resp.headers_mut().insert(CACHE_STATUS.clone(), status);
        if parts.method == Method::HEAD {
            *resp.body_mut() = Body::empty();
        }
        resp
    }

    /// `PURGE <url>`: removes the URL's stored responses, for allowed addresses.
    fn purge_request(&self, parts: &Parts, conn: &ConnInfo) -> Response<Body> {
        let policy = &self.inner.policy;
        if policy.purge_from.is_empty() {
            return weir_http::response::method_not_allowed();
        }
        if !policy
            .purge_from
            .iter()
            .any(|n| n.contains(&conn.peer.ip()))
        {
            return weir_http::response::error(StatusCode::FORBIDDEN);
        }
        let key = key::primary(parts, conn.tls, policy);
        let n = self.inner.store.purge(&key);
        tracing::info!(key = %key, purged = n, client = %conn.peer.ip(), "cache: PURGE");
        fanout::send(&store::Invalidation::Url(key.to_string()));
        let body = format!("{{\"purged\":{n},\"key\":{}}}\n", json_string(&key));
        let mut r = Response::new(Body::from(body));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }

    /// §4.4: what a successful unsafe request invalidates.
    fn invalidate(&self, parts: &Parts, tls: bool, resp: &http::HeaderMap) {
        let store = &self.inner.store;
        let target = key::primary(parts, tls, &self.inner.policy);
        store.purge(&target);
        // `scheme://host` of the target: only same-host URIs are invalidated.
        let origin_end = target[target.find("://").map_or(0, |i| i + 3)..]
            .find('/')
            .map_or(target.len(), |i| {
                i + target.find("://").map_or(0, |j| j + 3)
            });
        let origin = &target[..origin_end];
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let Some(v) = resp.get(name).and_then(|v| v.to_str().ok()) else {
                continue;
            };
            if v.starts_with('/') && !v.starts_with("//") {
                store.purge(&format!("{origin}{v}"));
            } else if v.len() > origin.len()
                && v.starts_with(origin)
                && v[origin.len()..].starts_with('/')
            {
                store.purge(v);
            }
        }
    }
}

/// The key concurrent misses wait on: the URL and the variant the
/// request selects among what the URL is known to vary on.
fn flight_key(store: &Store, primary: &str, extra: &str, parts: &Parts) -> Arc<str> {
    let mut k = String::with_capacity(primary.len() + extra.len() + 2);
    k.push_str(primary);
    k.push('\0');
    k.push_str(extra);
    if let Some(o) = store.vary_of(primary) {
        for (name, _) in o.vary.iter() {
            k.push('\0');
            k.push_str(&key::field_value(&parts.headers, name));
        }
    }
    Arc::from(k)
}

/// A body that moved on before this request could read it (it outgrew
/// the store in the instant between): the client gets a clean 503.
fn gone() -> Response<Body> {
    weir_http::response::error(StatusCode::SERVICE_UNAVAILABLE)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
