//! The reverse proxy: one [`Proxy`] per `proxy = { ... }` in the config.
//! [`Proxy::serve`] walks a request through named steps:
//! `check_smuggling` (HTTP/2 and HTTP/3 requests: the strict framing
//! rules HTTP/1 requests were read by) → forwarding headers (`forward`) → `pick` (balancer,
//! health, sticky cookie) → `admit` (max_conns and queue) → `sender`
//! (pooled or new connection, `pool`) → send with the response timeout
//! (through weir's own HTTP/1.1 client, `h1_client`: `send_own` for a body
//! in memory, `send_streamed` for one streamed from the client; `send`
//! through hyper's for HTTP/2 upstreams) →
//! `rewrite_location` on the answer's head (`location`) →
//! on failure the error's retry class decides (`error::Failed`) → `respond` (hop-by-hop removal, Via, the
//! body streamed back, the connection returned to the pool at its end).
//!
//! Every failure becomes a [`ProxyError`], and [`Proxy::fail`] is the one
//! place that maps it to 502/503/504 and logs the upstream and the reason.
//! Never buffers a body beyond `retry_body_size`; never retries a request
//! whose streamed body has been sent; never shares mutable state between
//! worker threads on the request path except a few atomics per upstream.

mod attempts;
pub mod balance;
pub mod dns;
mod error;
pub mod forward;
pub mod h1_client;
pub mod health;
mod location;
pub mod pool;
pub mod proxy_protocol;
pub mod stream;
pub mod upgrade;

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use http_body::Frame;
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use balance::{Balancer, Candidate, hash_parts};
use forward::{ClientAddr, Forwarding, UpstreamFields};
use pool::Sender;
use weir_config::proxy::{Balance, HashKey, HostHeader, ProxyConfig, UpstreamConfig};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::worker::{PerWorker, Worker};

pub use attempts::{Attempt, Attempts};
pub use error::{Blame, Failed, ProxyError, Retry, Unreachable, timed_out, too_large};

/// What one worker keeps for one proxy: its idle upstream connections, its
/// balancer and its DNS answers. Only that worker's requests take these
/// locks, so they are never contended with the per-core runtime (and with
/// the shared one, only by the threads its connections happen to run on).
struct Local {
    pools: Mutex<pool::Pools>,
    balancer: Mutex<Balancer>,
    dns: dns::Resolver,
}

impl Local {
    fn pools(&self) -> MutexGuard<'_, pool::Pools> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What an operator set for an upstream through the admin API (HAProxy's
/// `set server state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    /// In rotation (when healthy).
    Ready = 0,
    /// No new requests; those in flight finish.
    Drain = 1,
    /// As drain, and shown as under maintenance.
    Maint = 2,
}

/// Per-upstream counters (`Upstream::count`).
pub mod counter {
    pub const REQUESTS: usize = 0;
    pub const RETRIES: usize = 1;
    /// Errors by kind, from [`ERRORS`]`[0]` on.
    pub const FIRST_ERROR: usize = 2;
    pub const ERRORS: [&str; 6] = ["connect", "timeout", "tls", "protocol", "queue", "other"];
    pub const N: usize = FIRST_ERROR + ERRORS.len();
}

/// One upstream's run-time state, shared by the workers.
pub struct Upstream {
    pub cfg: UpstreamConfig,
    pub health: health::Shared,
    /// Requests in flight.
    active: AtomicU32,
    /// [`AdminState`] as a number.
    state: std::sync::atomic::AtomicU8,
    /// The weight in force (the config's, until the admin API changes it).
    weight: AtomicU32,
    /// Attempts, retries and errors by kind, per worker.
    pub counts: weir_http::metrics::Counts<{ counter::N }>,
    limit: Option<Arc<Semaphore>>,
    /// The `max_conns` `limit` was made for.
    max_conns: usize,
    queued: AtomicUsize,
    host: HeaderValue,
    /// The sticky-cookie value naming this upstream (stable across restarts).
    sticky: String,
}

/// A running proxy handler.
pub struct Proxy {
    pub cfg: Arc<ProxyConfig>,
    ups: Vec<Arc<Upstream>>,
    /// One slot per worker (`ConnInfo::worker`).
    locals: PerWorker<Arc<Local>>,
    /// Turns true when a reload has replaced this proxy and its grace
    /// period is over: the streams still open through it end.
    retired: tokio::sync::watch::Sender<bool>,
    tls: Option<tokio_rustls::TlsConnector>,
    tls_h2: Option<tokio_rustls::TlsConnector>,
    /// Held while deciding an ejection, so two failing upstreams cannot
    /// both take the budget's last place.
    ejecting: Mutex<()>,
}

/// A request body that can be sent again when it was small enough to keep.
enum Replay {
    Empty,
    Full(Bytes),
    Stream(Option<Body>),
}

impl Replay {
    fn take(&mut self) -> Body {
        match self {
            Replay::Empty => Body::empty(),
            Replay::Full(b) => Body::full(b.clone()),
            Replay::Stream(b) => b.take().unwrap_or_default(),
        }
    }

    fn replayable(&self) -> bool {
        !matches!(self, Replay::Stream(_))
    }
}

impl Upstream {
    pub fn admin_state(&self) -> AdminState {
        match self.state.load(Ordering::Relaxed) {
            0 => AdminState::Ready,
            1 => AdminState::Drain,
            _ => AdminState::Maint,
        }
    }

    /// Takes the upstream in or out of rotation; requests in flight finish.
    pub fn set_admin_state(&self, s: AdminState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    fn in_rotation(&self) -> bool {
        self.state.load(Ordering::Relaxed) == AdminState::Ready as u8
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// The weight the balancers use from the next pick on (the hash ring
    /// of `ip_hash` and `hash` keeps the config's weights).
    pub fn set_weight(&self, w: u32) {
        self.weight.store(w, Ordering::Relaxed);
    }

    /// Requests in flight to it now.
    pub fn in_flight(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    fn count_error(&self, w: Worker, e: &ProxyError) {
        use ProxyError as E;
        let kind = match e {
            E::Connect(_) | E::Resolve(_) => 0,
            E::ConnectTimeout(_) | E::ResponseTimeout(_) => 1,
            E::Tls(_) => 2,
            E::Handshake(_) | E::Upstream(_) | E::Client(_) | E::NotSwitched(_) => 3,
            E::QueueFull | E::QueueTimeout(_) => 4,
            _ => 5,
        };
        self.counts.add(w, counter::FIRST_ERROR + kind, 1);
    }
}

impl Proxy {
    /// Ends the long streams still open through this proxy (responses of
    /// no declared length, and tunnels): a reload replaced it and its grace
    /// period is over.
    pub fn retire(&self) {
        let open = self.retired.receiver_count();
        if open > 0 {
            tracing::info!(
                "proxy to {}: closing {open} streams left open through it by a reload",
                self.ups
                    .iter()
                    .map(|u| u.cfg.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        self.retired.send_replace(true);
    }

    /// Resolves once [`Proxy::retire`] has been called.
    pub(crate) fn retirement(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.retired.subscribe();
        async move {
            let _ = rx.wait_for(|r| *r).await;
        }
    }

    /// Idle connections to upstream `idx`, over every worker's pool.
    pub fn idle_connections(&self, idx: usize) -> usize {
        self.locals.iter().map(|l| l.pools().idle_count(idx)).sum()
    }

    /// `workers`: how many workers' slots of pools and balancers to keep.
    pub fn new(cfg: Arc<ProxyConfig>, workers: usize) -> Arc<Proxy> {
        Self::after(cfg, workers, &[])
    }

    /// As [`Proxy::new`], for a proxy that replaces `previous` (a reload):
    /// an upstream of theirs with the same settings is kept as it is, with
    /// its health, admin state, weight and counters, and its idle
    /// connections move to the new proxy's pools.
    pub fn after(cfg: Arc<ProxyConfig>, workers: usize, previous: &[Arc<Proxy>]) -> Arc<Proxy> {
        // (new index, old proxy, old index) of every upstream kept.
        let mut kept: Vec<(usize, &Arc<Proxy>, usize)> = Vec::new();
        let ups =
            cfg.upstreams
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let host = match &cfg.host {
                        HostHeader::Fixed(h) => HeaderValue::from_str(h),
                        _ => HeaderValue::from_str(&u.authority()),
                    }
                    .unwrap_or(HeaderValue::from_static("localhost"));
                    for p in previous {
                        if let Some(j) = p.ups.iter().position(|o| {
                            o.cfg == *u && o.host == host && o.max_conns == cfg.max_conns
                        }) && !kept.iter().any(|(_, q, k)| Arc::ptr_eq(q, p) && *k == j)
                        {
                            kept.push((i, p, j));
                            return p.ups[j].clone();
                        }
                    }
                    Arc::new(Upstream {
                        cfg: u.clone(),
                        health: health::Shared::default(),
                        active: AtomicU32::new(0),
                        state: std::sync::atomic::AtomicU8::new(AdminState::Ready as u8),
                        weight: AtomicU32::new(u.weight),
                        counts: weir_http::metrics::Counts::new(workers),
                        limit: (cfg.max_conns > 0).then(|| Arc::new(Semaphore::new(cfg.max_conns))),
                        max_conns: cfg.max_conns,
                        queued: AtomicUsize::new(0),
                        host,
                        sticky: format!("{:016x}", hash_parts(&[u.name.as_bytes()])),
                    })
                })
                .collect();
        let any_tls = cfg.upstreams.iter().any(|u| u.scheme.is_tls());
        let names: Vec<&str> = cfg.upstreams.iter().map(|u| u.name.as_str()).collect();
        let weights: Vec<u32> = cfg.upstreams.iter().map(|u| u.weight).collect();
        let locals = PerWorker::new(workers, || {
            Arc::new(Local {
                pools: Mutex::new(pool::Pools::new(names.len())),
                balancer: Mutex::new(Balancer::new(
                    cfg.balance.clone(),
                    &names,
                    &weights,
                    fastrand::u64(..),
                )),
                dns: dns::Resolver::default(),
            })
        });
        for (i, old, j) in &kept {
            for (mine, theirs) in locals.iter().zip(old.locals.iter()) {
                mine.pools().adopt(*i, &mut theirs.pools(), *j);
            }
        }
        let (retired, _) = tokio::sync::watch::channel(false);
        let p = Arc::new(Proxy {
            locals,
            retired,
            tls: any_tls.then(|| pool::tls_connector(cfg.tls_verify, false)),
            tls_h2: any_tls.then(|| pool::tls_connector(cfg.tls_verify, true)),
            cfg,
            ups,
            ejecting: Mutex::new(()),
        });
        if p.cfg.health.is_some() {
            spawn_health_checks(Arc::downgrade(&p));
        }
        p
    }

    /// Upstreams and their state (for tests and the admin API).
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.ups
    }

    fn local(&self, w: Worker) -> &Arc<Local> {
        self.locals.get(w)
    }

    /// Proxies one request. `path` is the path to send when a route rewrote it.
    pub async fn serve(
        &self,
        parts: &mut http::request::Parts,
        body: Body,
        conn: &ConnInfo,
        path: Option<&str>,
    ) -> Response<Body> {
        // HTTP/1 requests were read strictly as they arrived (weir_http::h1::framing).
        if parts.version >= Version::HTTP_2
            && let Err(e) = forward::check_smuggling(parts.version, &parts.headers)
        {
            let mut r = self.fail(parts, None, e.into());
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
        if upgrade::is_upgrade(parts) {
            return Box::pin(upgrade::serve(self, parts, body, conn, path)).await;
        }
        if parts.method == Method::CONNECT {
            return Box::pin(upgrade::serve_connect(self, parts, conn, path)).await;
        }
        let client = ClientAddr {
            peer: conn.peer.ip(),
            trusted: &self.cfg.trusted_proxies,
        };
        let client_ip = client.resolve(&parts.headers);
        let mut fields = self.upstream_fields(parts, conn, client, false);
        let pq = path_and_query(parts, path);
        let key = self.hash_key(parts, client_ip);
        let sticky = self.sticky_choice(&parts.headers);
        let idempotent = matches!(
            parts.method,
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        );

        // The three awaits before the exchange (the body, a queue slot, a
        // connection) usually finish at once. Each is boxed on its slow path
        // only: kept in this future, their states made every request's
        // future several KiB, allocated and copied per request.
        let mut body = if http_body::Body::is_end_stream(&body) {
            Replay::Empty
        } else {
            match Box::pin(self.replayable_body(parts, body)).await {
                Ok(b) => b,
                Err(e) => return self.fail(parts, None, e),
            }
        };

        let mut tried: Vec<usize> = Vec::new();
        let mut attempt = 0u32;
        // The failure that sent this request on to another upstream: when
        // none is left, the client and the log get it (a 502 "cannot
        // connect" naming the upstream), not "no upstream is available".
        let mut last: Option<(usize, ProxyError)> = None;
        let mut rec = attempts::Recorder::new(self.cfg.record_attempts);
        let mut tries = 0u32;
        loop {
            let Some(idx) = self.pick(conn.worker, key, sticky, &tried) else {
                return rec.attach(match last {
                    Some((i, e)) => self.fail(parts, Some(&self.ups[i]), e),
                    None => self.fail(parts, None, ProxyError::NoneAvailable),
                });
            };
            let up = &self.ups[idx];
            rec.begin(up);
            let span = attempts::Span::begin(parts.extensions.get(), &parts.method, up, tries);
            tries += 1;
            up.counts.add(conn.worker, counter::REQUESTS, 1);
            if last.is_some() {
                up.counts.add(conn.worker, counter::RETRIES, 1);
            }
            if let Some((i, e)) = &last {
                tracing::info!(
                    "proxy: {}: {e}; retrying on {}",
                    self.ups[*i].cfg.name,
                    up.cfg.name
                );
            }
            let permit = if up.limit.is_none() {
                None
            } else {
                match Box::pin(self.admit(up)).await {
                    Ok(p) => p,
                    Err(e) => {
                        up.count_error(conn.worker, &e);
                        span.failed(&e);
                        return rec.attach(self.fail(parts, Some(up), e));
                    }
                }
            };
            let active = ActiveGuard::new(up.clone());
            let sender = match self.pooled_now(conn.worker, idx) {
                Ok(s) => Ok((s, true)),
                Err(first) => Box::pin(self.sender_after(idx, conn, false, first)).await,
            };
            let (sender, reused) = match sender {
                Ok(s) => s,
                Err(e) => {
                    let failed = Failed::connect(e);
                    span.failed(&failed.error);
                    up.count_error(conn.worker, &failed.error);
                    self.passive_failure(up, &failed.error);
                    tried.push(idx);
                    if failed.may_retry(idempotent, body.replayable(), attempt, self.cfg.retries) {
                        attempt += 1;
                        last = Some((idx, failed.error));
                        continue;
                    }
                    return rec.attach(self.fail(parts, Some(up), failed.error));
                }
            };
            rec.connected();
            if let Some((trace, id)) = span.ids() {
                fields.sampled_span(trace, id);
            } else if last.is_some() {
                // Each attempt is a span of its own (W3C Trace Context).
                fields.new_span();
            }
            let sent = match (sender, &mut body) {
                (Sender::Own(c), Replay::Stream(b)) => {
                    Box::pin(self.send_streamed(c, parts, &pq, &fields, up, b, idempotent)).await
                }
                (Sender::Own(c), body) => {
                    let bytes = match body {
                        Replay::Full(b) => Some(&*b),
                        _ => None,
                    };
                    // Boxed on its own (about 930 bytes): with it, this
                    // future is 1.8 KiB, past glibc's per-thread cache of
                    // small blocks (1,032 bytes), where an allocation costs
                    // several times as much; apart, both fit in it.
                    Box::pin(self.send_own(c, parts, &pq, &fields, up, bytes, idempotent)).await
                }
                (Sender::H2(tx), body) => {
                    let req = build_request(
                        parts,
                        &pq,
                        fields.to_map(),
                        upstream_host(&self.cfg.host, fields.host(), up),
                        up,
                        body.take(),
                    );
                    Box::pin(self.send_h2(tx, req)).await.map(|resp| {
                        let (rp, incoming) = resp.into_parts();
                        (rp, FromUpstream::H2(incoming))
                    })
                }
            };
            match sent {
                Ok((mut rp, from)) => {
                    if !self.cfg.rewrite_location.is_empty() {
                        location::rewrite(
                            &self.cfg.rewrite_location,
                            &mut rp.headers,
                            parts,
                            conn.tls,
                            client_ip,
                        );
                    }
                    rec.answered(rp.status.as_u16());
                    span.answered(rp.status.as_u16());
                    self.passive_success(up);
                    let done = Done {
                        local: self.local(conn.worker).clone(),
                        idx,
                        sender: None,
                        max_idle: self.cfg.max_idle,
                        _permit: permit,
                        _active: active,
                    };
                    let set_sticky = self.cfg.sticky_cookie.is_some() && sticky != Some(idx);
                    return rec.attach(self.respond_from(
                        rp,
                        from,
                        done,
                        up,
                        parts.version,
                        set_sticky,
                    ));
                }
                Err((failed, returned)) => {
                    // A shared HTTP/2 connection closed by the upstream as
                    // the request went out: as weir's own client treats it,
                    // stale, and tried again when that is safe.
                    let failed = if reused
                        && returned.is_none()
                        && idempotent
                        && body.replayable()
                        && failed.error.is_closed_early()
                    {
                        Failed::stale(failed.error)
                    } else {
                        failed
                    };
                    span.failed(&failed.error);
                    if let Some(req) = returned {
                        // Nothing was written: the request (and its body) is intact.
                        body = Replay::Stream(Some(req.into_body()));
                    }
                    if failed.blame == Blame::Upstream {
                        up.count_error(conn.worker, &failed.error);
                        self.passive_failure(up, &failed.error);
                        tried.push(idx);
                    }
                    let replayable = body.replayable() || failed.untouched();
                    if failed.may_retry(idempotent, replayable, attempt, self.cfg.retries) {
                        if failed.retry != Retry::Free {
                            attempt += 1;
                        }
                        last = Some((idx, failed.error));
                        continue;
                    }
                    return rec.attach(self.fail(parts, Some(up), failed.error));
                }
            }
        }
    }

    /// The request's fields for upstreams: hop-by-hop removed, forwarding
    /// fields added; Host apart.
    fn upstream_fields<'a>(
        &self,
        parts: &'a http::request::Parts,
        conn: &ConnInfo,
        client: ClientAddr<'_>,
        tunnel: bool,
    ) -> UpstreamFields<'a> {
        UpstreamFields::new(
            parts,
            &Forwarding {
                client,
                tls: conn.tls,
                x_forwarded: self.cfg.x_forwarded,
                forwarded: self.cfg.forwarded,
                via: self.cfg.via.then_some(via_for(parts.version)),
                traceparent: self.cfg.traceparent,
            },
            tunnel,
        )
    }

    fn hash_key(&self, parts: &http::request::Parts, client: std::net::IpAddr) -> Option<u64> {
        match &self.cfg.balance {
            Balance::IpHash => Some(match client {
                std::net::IpAddr::V4(a) => hash_parts(&[&a.octets()]),
                std::net::IpAddr::V6(a) => hash_parts(&[&a.octets()]),
            }),
            Balance::Hash(HashKey::Uri) => Some(hash_parts(&[parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .as_bytes()])),
            Balance::Hash(HashKey::Header(n)) => parts
                .headers
                .get(n.as_str())
                .map(|v| hash_parts(&[v.as_bytes()])),
            Balance::Hash(HashKey::Cookie(n)) => {
                cookie(&parts.headers, n).map(|v| hash_parts(&[v.as_bytes()]))
            }
            _ => None,
        }
    }

    fn sticky_choice(&self, headers: &HeaderMap) -> Option<usize> {
        let name = self.cfg.sticky_cookie.as_deref()?;
        let v = cookie(headers, name)?;
        self.ups.iter().position(|u| u.sticky == v)
    }

    /// Chooses an upstream among the healthy ones not yet tried. Passive
    /// health never leaves nothing to try: a proxy's only upstream is always
    /// tried, an ejected upstream whose cooldown is over takes this request
    /// as its trial, and when every usable upstream is ejected they are
    /// tried rather than none (the active checks' verdict stands: upstreams
    /// they find down are not tried).
    fn pick(
        &self,
        worker: Worker,
        key: Option<u64>,
        sticky: Option<usize>,
        tried: &[usize],
    ) -> Option<usize> {
        // Read once, and only if an upstream is ejected.
        let now = std::cell::LazyCell::new(weir_http::clock::now);
        let usable = |i: usize| {
            let u = &self.ups[i];
            !tried.contains(&i) && u.in_rotation() && u.health.active_up()
        };
        if self.ups.len() == 1 {
            // Every algorithm picks the only upstream when it may be used:
            // no candidate list and no balancer state to touch.
            return usable(0).then_some(0);
        }
        if let Some(i) = sticky
            && usable(i)
            && self.ups[i].health.standing_with(|| *now) == health::Standing::In
        {
            return Some(i);
        }
        // Some usable upstream is in rotation, tried or not: the ejected
        // ones stay out.
        let mut any_in = false;
        let mut cands: Vec<Candidate> = Vec::with_capacity(self.ups.len());
        for (i, u) in self.ups.iter().enumerate() {
            let mut eligible = usable(i);
            if !eligible {
                any_in |= u.in_rotation()
                    && u.health.active_up()
                    && u.health.standing_with(|| *now) == health::Standing::In;
            } else {
                match u.health.standing_with(|| *now) {
                    health::Standing::In => any_in = true,
                    health::Standing::TrialDue
                        if u.health.claim_trial(*now, self.cfg.passive.cooldown) =>
                    {
                        return Some(i);
                    }
                    _ => eligible = false,
                }
            }
            cands.push(Candidate {
                eligible,
                weight: u.weight.load(Ordering::Relaxed),
                active: u.active.load(Ordering::Relaxed),
                full: u.limit.as_ref().is_some_and(|s| s.available_permits() == 0),
            });
        }
        if !any_in {
            // Every usable upstream is ejected: try them rather than none.
            for (i, c) in cands.iter_mut().enumerate() {
                c.eligible = usable(i);
            }
        }
        self.local(worker)
            .balancer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pick(&cands, key)
    }

    /// A connection slot on `up`: at once, after waiting in its queue, or an error.
    async fn admit(&self, up: &Upstream) -> Result<Option<OwnedSemaphorePermit>, ProxyError> {
        let Some(sem) = &up.limit else {
            return Ok(None);
        };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Ok(Some(p));
        }
        if up.queued.fetch_add(1, Ordering::Relaxed) >= self.cfg.queue {
            up.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(ProxyError::QueueFull);
        }
        let r = tokio::time::timeout(self.cfg.queue_timeout, sem.clone().acquire_owned()).await;
        up.queued.fetch_sub(1, Ordering::Relaxed);
        match r {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(ProxyError::QueueTimeout(self.cfg.queue_timeout)),
        }
    }

    /// A pooled connection to upstream `idx`, or a new one (`upgrades`:
    /// always a new one, never pooled after).
    async fn sender(
        &self,
        idx: usize,
        conn: &ConnInfo,
        upgrades: bool,
    ) -> Result<Sender, ProxyError> {
        self.sender_after(idx, conn, upgrades, None)
            .await
            .map(|(s, _)| s)
    }

    /// A pooled connection that needs no waiting (the common case: one of
    /// weir's own, or a shared HTTP/2 one), else what the pool gave, for
    /// [`Proxy::sender_after`].
    fn pooled_now(&self, worker: Worker, idx: usize) -> Result<Sender, Option<Sender>> {
        let pooled = self
            .local(worker)
            .pools()
            .checkout(idx, self.cfg.idle_timeout);
        match pooled {
            Some(s @ (Sender::H2(_) | Sender::Own(_))) => Ok(s),
            other => Err(other),
        }
    }

    /// [`Proxy::sender`], starting with `first` if the pool gave one already.
    async fn sender_after(
        &self,
        idx: usize,
        conn: &ConnInfo,
        upgrades: bool,
        mut first: Option<Sender>,
    ) -> Result<(Sender, bool), ProxyError> {
        let up = &self.ups[idx];
        let local = self.local(conn.worker);
        if !upgrades
            && let Some(s) = first
                .take()
                .or_else(|| local.pools().checkout(idx, self.cfg.idle_timeout))
        {
            return Ok((s, true));
        }
        let tls = if up.cfg.scheme.is_h2() {
            self.tls_h2.as_ref()
        } else {
            self.tls.as_ref()
        };
        let s = Box::pin(pool::connect(
            &up.cfg,
            &pool::ConnectOpts {
                timeout: self.cfg.connect_timeout,
                dns_ttl: self.cfg.dns_ttl,
                dns: &local.dns,
                proxy_protocol: self.cfg.send_proxy_protocol,
                client: (conn.peer, conn.local),
                tls,
                sni: self.cfg.sni.as_deref(),
            },
        ))
        .await?;
        if let Sender::H2(tx) = &s {
            local.pools().share_h2(idx, tx);
        }
        Ok((s, false))
    }

    /// Sends the request on an HTTP/2 connection; on failure says how far
    /// it got and hands back the request when hyper did not write any of it.
    async fn send_h2(
        &self,
        mut tx: hyper::client::conn::http2::SendRequest<Body>,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, (Failed, Option<Request<Body>>)> {
        let timeout = self.cfg.response_timeout;
        match tokio::time::timeout(timeout, tx.try_send_request(req)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(mut e)) => {
                let returned = e.take_message();
                Err(classify(e.into_error(), returned))
            }
            Err(_) => Err((Failed::timeout(ProxyError::ResponseTimeout(timeout)), None)),
        }
    }

    /// Sends the request on one of weir's own connections and reads the
    /// response head, within the response timeout.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    async fn send_own(
        &self,
        mut c: h1_client::Conn,
        parts: &http::request::Parts,
        pq: &http::uri::PathAndQuery,
        fields: &UpstreamFields<'_>,
        up: &Upstream,
        body: Option<&Bytes>,
        idempotent: bool,
    ) -> Result<(http::response::Parts, FromUpstream), (Failed, Option<Request<Body>>)> {
        let request = h1_client::Encoded::new(
            h1_client::RequestHead {
                method: &parts.method,
                target: pq.as_str(),
                host: upstream_host(&self.cfg.host, fields.host(), up),
                fields: fields.iter(),
            },
            body,
        );
        let reused = c.reused();
        let timeout = self.cfg.response_timeout;
        let mut timer = c.take_timer();
        let r = {
            let exchange = std::pin::pin!(async {
                c.send(request).await?;
                c.read_head(parts.method == Method::HEAD)
                    .await
                    .map_err(|e| (e, false))
            });
            timer.within(timeout, exchange).await.ok_or(())
        };
        c.put_timer(timer);
        match r {
            Ok(Ok(head)) => Ok((
                head.parts,
                FromUpstream::Own {
                    conn: c,
                    framing: head.framing,
                    keep_alive: head.keep_alive,
                    hop_by_hop: head.hop_by_hop,
                    upload: None,
                },
            )),
            Ok(Err((e, nothing_sent))) => {
                // A reused connection the upstream closed just as the request
                // went out: the upstream never saw it; an idempotent request
                // goes again on a new connection, as hyper's and nginx's do.
                let stale = reused && idempotent && e.is_closed_before_response();
                Err((
                    Failed::exchange(ProxyError::Client(e), stale, nothing_sent),
                    None,
                ))
            }
            Err(_) => Err((Failed::timeout(ProxyError::ResponseTimeout(timeout)), None)),
        }
    }

    /// Sends a request whose body streams from the client on one of weir's
    /// own connections and reads the response head, within the response
    /// timeout. A body no frame was taken from stays in `body`, so the
    /// request can still go elsewhere.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    async fn send_streamed(
        &self,
        mut c: h1_client::Conn,
        parts: &http::request::Parts,
        pq: &http::uri::PathAndQuery,
        fields: &UpstreamFields<'_>,
        up: &Upstream,
        body: &mut Option<Body>,
        idempotent: bool,
    ) -> Result<(http::response::Parts, FromUpstream), (Failed, Option<Request<Body>>)> {
        let b = body.take().unwrap_or_default();
        // hyper's client sends the trailers the request's `Trailer` declares.
        let trailers: Vec<header::HeaderName> = fields
            .iter()
            .filter(|(n, _)| *n == header::TRAILER)
            .flat_map(|(_, v)| v.split(|&c| c == b','))
            .filter_map(|t| header::HeaderName::from_bytes(t.trim_ascii()).ok())
            .collect();
        let (request, chunked) = h1_client::Encoded::streamed(
            h1_client::RequestHead {
                method: &parts.method,
                target: pq.as_str(),
                host: upstream_host(&self.cfg.host, fields.host(), up),
                fields: fields.iter(),
            },
            &b,
        );
        let expect = if parts.method == Method::HEAD {
            h1_client::Expect::HeadRequest
        } else {
            h1_client::Expect::Response
        };
        let mut upload = h1_client::Uploading::new(b, chunked, trailers);
        let reused = c.reused();
        let timeout = self.cfg.response_timeout;
        let mut timer = c.take_timer();
        let r = {
            let exchange = std::pin::pin!(c.send_streamed(request, &mut upload, expect));
            timer.within(timeout, exchange).await
        };
        c.put_timer(timer);
        match r {
            Some(Ok(head)) => Ok((
                head.parts,
                FromUpstream::Own {
                    conn: c,
                    framing: head.framing,
                    keep_alive: head.keep_alive,
                    hop_by_hop: head.hop_by_hop,
                    upload: (!upload.is_sent()).then(|| Box::new(upload)),
                },
            )),
            Some(Err(h1_client::StreamError::Body(e))) => {
                Err((Failed::client(ProxyError::ClientBody(e)), None))
            }
            Some(Err(h1_client::StreamError::Upstream {
                error,
                nothing_sent,
                body_untouched,
            })) => {
                *body = upload.into_untouched();
                // As in `send_own`; the body must still be whole to go again.
                let stale =
                    reused && idempotent && body_untouched && error.is_closed_before_response();
                let failed = Failed::exchange(ProxyError::Client(error), stale, nothing_sent);
                Err((failed, None))
            }
            None => Err((Failed::timeout(ProxyError::ResponseTimeout(timeout)), None)),
        }
    }

    /// The client's response: the upstream's head with hop-by-hop fields
    /// removed, Via and the sticky cookie added, and its body passed on; the
    /// connection goes back to the pool when the body has ended cleanly.
    fn respond_from(
        &self,
        mut rp: http::response::Parts,
        from: FromUpstream,
        done: Done,
        up: &Upstream,
        version: Version,
        set_sticky: bool,
    ) -> Response<Body> {
        // A proxy answers in its own HTTP version, whatever the upstream's
        // (RFC 9110 §6.2): an HTTP/1.0 upstream does not make the client's
        // response HTTP/1.0.
        rp.version = Version::HTTP_11;
        // weir's own client saw every field's name as it parsed the head.
        if !matches!(
            from,
            FromUpstream::Own {
                hop_by_hop: false,
                ..
            }
        ) {
            forward::strip_hop_by_hop(&mut rp.headers, false);
        }
        if self.cfg.via {
            forward::append_via(&mut rp.headers, via_for(version));
        }
        if set_sticky && let Some(name) = &self.cfg.sticky_cookie {
            let c = format!("{name}={}; Path=/; HttpOnly; SameSite=Lax", up.sticky);
            if let Ok(v) = HeaderValue::from_str(&c) {
                rp.headers.append(header::SET_COOKIE, v);
            }
        }
        // A stream with no declared length (event streams, long polls) may
        // outlive this proxy's config: it ends when a reload retires it.
        let unbounded = !rp.headers.contains_key(header::CONTENT_LENGTH);
        let body = match from {
            FromUpstream::H2(incoming) => {
                if http_body::Body::is_end_stream(&incoming) {
                    done.release(true);
                    Body::empty()
                } else if unbounded {
                    Body::stream(Retirable::new(
                        UpstreamBody {
                            inner: incoming,
                            done: Some(done),
                        },
                        self.retirement(),
                    ))
                } else {
                    Body::stream(UpstreamBody {
                        inner: incoming,
                        done: Some(done),
                    })
                }
            }
            FromUpstream::Own {
                conn,
                framing,
                keep_alive,
                upload,
                ..
            } => match own_body(conn, framing, keep_alive, upload, done) {
                Body::Stream(s) if unbounded => {
                    Body::stream(Retirable::new(Body::Stream(s), self.retirement()))
                }
                b => b,
            },
        };
        Response::from_parts(rp, body)
    }

    /// Small bodies with a known length are read first so a retry can resend them.
    async fn replayable_body(
        &self,
        parts: &http::request::Parts,
        body: Body,
    ) -> Result<Replay, ProxyError> {
        if http_body::Body::is_end_stream(&body) {
            return Ok(Replay::Empty);
        }
        match weir_http::fields::content_length(&parts.headers)
            .ok()
            .flatten()
        {
            Some(0) => Ok(Replay::Empty),
            Some(n) if n <= self.cfg.retry_body_size => {
                use http_body_util::BodyExt;
                let b = body.collect().await.map_err(ProxyError::ClientBody)?;
                Ok(Replay::Full(b.to_bytes()))
            }
            _ => Ok(Replay::Stream(Some(body))),
        }
    }

    /// A failure that is `up`'s fault (see docs/config.md, "Passive
    /// health"): towards its ejection, within the proxy's budget.
    fn passive_failure(&self, up: &Upstream, e: &ProxyError) {
        let cfg = &self.cfg.passive;
        if cfg.failures == 0 {
            return;
        }
        let _deciding = self.ejecting.lock().unwrap_or_else(PoisonError::into_inner);
        let usable = |u: &Upstream| u.in_rotation() && u.health.active_up();
        // How many usable upstreams there were when the budget said no.
        let usable_n = std::cell::Cell::new(0);
        let may_eject = || {
            if !usable(up) {
                return true;
            }
            let mut n = 0;
            let mut out = 0;
            for u in self.ups.iter().filter(|u| usable(u)) {
                n += 1;
                out += u.health.is_ejected() as usize;
            }
            usable_n.set(n);
            out < health::max_ejected(n, cfg.max_ejected)
        };
        let name = &up.cfg.name;
        match up.health.passive_failure(Instant::now(), cfg, may_eject) {
            Some(health::Passive::Ejected) => tracing::warn!(
                "proxy: upstream {name} ejected for {:?} after {} failures in a row (last: {e})",
                cfg.cooldown,
                cfg.failures
            ),
            Some(health::Passive::TrialFailed) => tracing::warn!(
                "proxy: upstream {name} failed its trial request ({e}); ejected for another {:?}",
                cfg.cooldown
            ),
            Some(health::Passive::Held) if usable_n.get() <= 1 => tracing::warn!(
                "proxy: upstream {name} failed {} requests in a row (last: {e}) but stays in rotation: \
                 it is the last usable upstream",
                cfg.failures
            ),
            Some(health::Passive::Held) => tracing::warn!(
                "proxy: upstream {name} failed {} requests in a row (last: {e}) but stays in rotation: \
                 passive.max_ejected ({}%) allows no more ejections now",
                cfg.failures,
                cfg.max_ejected
            ),
            _ => {}
        }
    }

    /// A request `up` answered: ends its run of failures, and brings it back
    /// when it was ejected (its trial succeeded).
    fn passive_success(&self, up: &Upstream) {
        if let Some(health::Passive::Readmitted) = up.health.passive_success() {
            tracing::info!(
                "proxy: upstream {} answered its trial request; back in rotation",
                up.cfg.name
            );
        }
    }

    /// The one place a proxy failure becomes a response: status from
    /// [`ProxyError::status`], logged with the upstream and the reason.
    fn fail(
        &self,
        parts: &http::request::Parts,
        up: Option<&Upstream>,
        e: ProxyError,
    ) -> Response<Body> {
        let status = e.status();
        let name = up.map_or("-", |u| u.cfg.name.as_str());
        let id = (self.cfg.request_id.as_ref())
            .and_then(|h| parts.headers.get(h))
            .and_then(|v| v.to_str().ok());
        match id {
            Some(id) => tracing::warn!(
                upstream = name,
                status = status.as_u16(),
                request_id = id,
                "proxy {} {}: {e}",
                parts.method,
                parts.uri.path()
            ),
            None => tracing::warn!(
                upstream = name,
                status = status.as_u16(),
                "proxy {} {}: {e}",
                parts.method,
                parts.uri.path()
            ),
        }
        error_response(&e)
    }
}

/// The body that follows a response head read on one of weir's own
/// connections; the connection goes back to the pool once it has ended.
fn own_body(
    mut conn: h1_client::Conn,
    framing: h1_client::Framing,
    keep_alive: bool,
    upload: Option<Box<h1_client::Uploading>>,
    mut done: Done,
) -> Body {
    match conn.take_buffered(framing) {
        // The whole body has arrived: one frame, no copy. A request body
        // still going out stops here (an early answer such as a 413).
        Some(bytes) => {
            let reuse = keep_alive && conn.is_clean() && upload.is_none();
            done.sender = Some(Sender::Own(conn));
            done.release(reuse);
            Body::full(bytes)
        }
        None => Body::stream(
            h1_client::ResponseBody::new(conn, framing, keep_alive, done).sending(upload),
        ),
    }
}

/// A response body that ends, with an error, once `retired` resolves.
struct Retirable<B> {
    inner: B,
    retired: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl<B> Retirable<B> {
    fn new(inner: B, retired: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Retirable {
            inner,
            retired: Box::pin(retired),
        }
    }
}

impl<B> http_body::Body for Retirable<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<weir_http::body::BodyError>,
{
    type Data = Bytes;
    type Error = weir_http::body::BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.retired.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Some(Err(weir_http::body::BodyError::from(
                std::io::Error::other("its proxy was replaced by a reload"),
            ))));
        }
        std::pin::Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// How far a failed send through hyper's HTTP/2 client got; the client's body failing is
/// the client's fault.
fn classify(e: hyper::Error, returned: Option<Request<Body>>) -> (Failed, Option<Request<Body>>) {
    if e.is_user() {
        return (Failed::client(ProxyError::ClientBody(e.into())), None);
    }
    match returned {
        Some(req) => (Failed::not_sent(ProxyError::Upstream(e)), Some(req)),
        None => (Failed::after_send(ProxyError::Upstream(e)), None),
    }
}

/// The client-facing response for a proxy failure.
pub fn error_response(e: &ProxyError) -> Response<Body> {
    let text = e.client_text();
    let mut r = Response::new(Body::full(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = e.status();
    r.extensions_mut()
        .insert(weir_http::response::OwnError(text));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    if matches!(e, ProxyError::Smuggling(_) | ProxyError::ClientBody(_)) {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if e.is_unreachable() {
        r.extensions_mut().insert(error::Unreachable);
    }
    r
}

fn via_for(v: Version) -> &'static str {
    match v {
        Version::HTTP_10 => "1.0 weir",
        Version::HTTP_2 => "2 weir",
        Version::HTTP_3 => "3 weir",
        _ => "1.1 weir",
    }
}

/// The path and query to send: the rewritten path with the original query.
fn path_and_query(parts: &http::request::Parts, path: Option<&str>) -> http::uri::PathAndQuery {
    let orig = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let Some(p) = path else { return orig };
    // A rewrite that made its own query replaces the client's.
    if p.contains('?') {
        return p.parse().unwrap_or(orig);
    }
    let s = match orig.query() {
        Some(q) => format!("{p}?{q}"),
        None => p.to_string(),
    };
    s.parse().unwrap_or(orig)
}

/// The Host sent upstream: the client's with `host = "pass"` (unless it
/// is empty: a target without authority), else `Upstream::host` (the
/// upstream's authority or the fixed `host`).
fn upstream_host<'a>(
    host_mode: &HostHeader,
    client_host: Option<&'a HeaderValue>,
    up: &'a Upstream,
) -> &'a HeaderValue {
    match (host_mode, client_host) {
        (HostHeader::Pass, Some(v)) if !v.is_empty() => v,
        _ => &up.host,
    }
}

/// The request for an HTTP/2 upstream: Host becomes the authority.
fn build_request(
    parts: &http::request::Parts,
    pq: &http::uri::PathAndQuery,
    h: HeaderMap,
    host: &HeaderValue,
    up: &Upstream,
    body: Body,
) -> Request<Body> {
    let scheme = if up.cfg.scheme.is_tls() {
        "https"
    } else {
        "http"
    };
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(host.to_str().unwrap_or("localhost"))
        .path_and_query(pq.clone())
        .build();
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri.unwrap_or_default();
    *req.version_mut() = Version::HTTP_2;
    *req.headers_mut() = h;
    req
}

/// The value of cookie `name` in the request's Cookie headers.
pub fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then(|| v.trim_matches('"'))
        })
}

/// Counts a request in flight on an upstream (least_conn, p2c).
struct ActiveGuard(pub(crate) Arc<Upstream>);

impl ActiveGuard {
    fn new(up: Arc<Upstream>) -> Self {
        up.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(up)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What an upstream response holds until its body ends.
struct Done {
    /// The worker's pools, and the upstream the connection goes back to.
    local: Arc<Local>,
    idx: usize,
    sender: Option<Sender>,
    max_idle: usize,
    _permit: Option<OwnedSemaphorePermit>,
    _active: ActiveGuard,
}

impl Done {
    /// The response is complete: an HTTP/1.1 connection goes back to the pool.
    fn release(mut self, reusable: bool) {
        if reusable && let Some(Sender::Own(mut c)) = self.sender.take() {
            c.set_reused();
            self.local
                .pools()
                .checkin(self.idx, Sender::Own(c), self.max_idle);
        }
    }
}

impl h1_client::Finish for Done {
    fn finish(mut self, conn: Option<h1_client::Conn>) {
        let reusable = conn.is_some();
        self.sender = conn.map(Sender::Own);
        self.release(reusable);
    }
}

/// A response head's body, still with the upstream connection.
enum FromUpstream {
    /// hyper's HTTP/2 client: the body (its connection is shared, not pooled).
    H2(Incoming),
    /// weir's own client: the connection the body is (or has been) read from.
    Own {
        conn: h1_client::Conn,
        framing: h1_client::Framing,
        keep_alive: bool,
        /// The head holds a hop-by-hop field (else nothing to strip).
        hop_by_hop: bool,
        /// The request body, when the answer came before all of it went out.
        upload: Option<Box<h1_client::Uploading>>,
    },
}

/// The upstream's response body on its way to the client; returns the
/// connection to the pool when it ends cleanly. Dropped early (client gone),
/// the connection is closed instead: its state is unknown.
struct UpstreamBody {
    inner: Incoming,
    done: Option<Done>,
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let r = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &r {
            None => {
                if let Some(d) = self.done.take() {
                    d.release(true);
                }
            }
            Some(Err(_)) => {
                self.done.take();
            }
            Some(Ok(_)) => {
                if self.inner.is_end_stream()
                    && let Some(d) = self.done.take()
                {
                    d.release(true);
                }
            }
        }
        Poll::Ready(r)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Runs the active health checks of one proxy on a thread of their own, so
/// they never compete with requests for a worker's runtime. The thread ends
/// once the proxy is gone (a reload replaced it).
fn spawn_health_checks(p: std::sync::Weak<Proxy>) {
    let spawned = weir_http::background::spawn("weir-health".into(), "health checks", move || {
        health_loop(p)
    });
    if let Err(e) = spawned {
        tracing::error!("health checks: cannot start a thread: {e}");
    }
}

async fn health_loop(weak: std::sync::Weak<Proxy>) {
    let Some(hc) = weak.upgrade().and_then(|p| p.cfg.health.clone()) else {
        return;
    };
    let mut tick = tokio::time::interval(hc.interval.max(health::MIN_INTERVAL));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The checks' own DNS answers: they run on a thread of their own.
    let dns = &dns::Resolver::default();
    loop {
        tick.tick().await;
        let Some(p) = weak.upgrade() else {
            return;
        };
        // No checks in maintenance (as HAProxy): nothing may run there.
        let checks = p
            .ups
            .iter()
            .filter(|up| up.admin_state() != AdminState::Maint)
            .map(|up| {
                let p = p.clone();
                let up = up.clone();
                let hc = hc.clone();
                async move {
                    let ok = matches!(
                        tokio::time::timeout(hc.timeout, check_once(&p, &up, &hc, dns)).await,
                        Ok(Ok(true))
                    );
                    match up.health.active_result(ok, hc.rise, hc.fall) {
                        Some(health::Transition::WentDown) => {
                            tracing::warn!("health check: upstream {} is down", up.cfg.name)
                        }
                        Some(health::Transition::CameUp) => {
                            tracing::info!("health check: upstream {} is up", up.cfg.name)
                        }
                        None => {}
                    }
                }
            });
        futures_util::future::join_all(checks).await;
    }
}

async fn check_once(
    p: &Proxy,
    up: &Upstream,
    hc: &weir_config::proxy::HealthConfig,
    dns: &dns::Resolver,
) -> Result<bool, ProxyError> {
    let local: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
    let tls = if up.cfg.scheme.is_h2() {
        p.tls_h2.as_ref()
    } else {
        p.tls.as_ref()
    };
    let sender = pool::connect(
        &up.cfg,
        &pool::ConnectOpts {
            timeout: hc.timeout,
            dns_ttl: p.cfg.dns_ttl,
            dns,
            proxy_protocol: p.cfg.send_proxy_protocol,
            client: (local, local),
            tls,
            sni: p.cfg.sni.as_deref(),
        },
    )
    .await?;
    let Some(path) = &hc.path else {
        return Ok(true);
    };
    let mut tx = match sender {
        Sender::Own(c) => return check_own(c, path, &up.host, hc).await,
        Sender::H2(tx) => tx,
    };
    let mut req = Request::new(Body::empty());
    *req.method_mut() = hc.method.clone();
    *req.uri_mut() = format!(
        "{}://{}{path}",
        if up.cfg.scheme.is_tls() {
            "https"
        } else {
            "http"
        },
        up.cfg.authority()
    )
    .parse()
    .unwrap_or_default();
    let resp = tx.send_request(req).await.map_err(ProxyError::Upstream)?;
    let status = resp.status().as_u16();
    let body = if hc.body.is_some() {
        use http_body_util::BodyExt;
        let limited = http_body_util::Limited::new(resp.into_body(), health::MAX_CHECK_BODY);
        match limited.collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return Ok(false),
        }
    } else {
        Bytes::new()
    };
    Ok(health::check_passes(
        status,
        hc.status,
        &body,
        hc.body.as_deref(),
    ))
}

/// One health check request on one of weir's own connections.
async fn check_own(
    mut c: h1_client::Conn,
    path: &str,
    host: &HeaderValue,
    hc: &weir_config::proxy::HealthConfig,
) -> Result<bool, ProxyError> {
    let req = h1_client::Encoded::new(
        h1_client::RequestHead {
            method: &hc.method,
            target: path,
            host,
            fields: std::iter::empty(),
        },
        None,
    );
    c.send(req).await.map_err(|(e, _)| ProxyError::Client(e))?;
    let head = c.read_head(hc.method == Method::HEAD).await?;
    let status = head.parts.status.as_u16();
    let body = match (&hc.body, c.take_buffered(head.framing)) {
        (None, _) => Bytes::new(),
        (Some(_), Some(b)) => b,
        (Some(_), None) => {
            use http_body_util::BodyExt;
            let body = h1_client::ResponseBody::new(c, head.framing, false, Discard);
            match http_body_util::Limited::new(body, health::MAX_CHECK_BODY)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => return Ok(false),
            }
        }
    };
    Ok(health::check_passes(
        status,
        hc.status,
        &body,
        hc.body.as_deref(),
    ))
}

/// A health check's connection is closed after its one request.
struct Discard;

impl h1_client::Finish for Discard {
    fn finish(self, _: Option<h1_client::Conn>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; weir=abc"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&h, "weir"), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
