//! The request pipeline: the phases every request passes through once a
//! protocol layer has parsed its head, whichever of HTTP/1.1 (weir's own
//! loop), HTTP/2 or HTTP/3 brought it. Read [`Listener::handle`] top to
//! bottom: request head ([`request_head`]: limits, ACME tokens) → route
//! ([`route`]: site by Host, route by path) → request filters ([`filter`]:
//! limits, access control, authentication, header rules) → handler
//! ([`handler`]) → response filters ([`response`]: the site's base, then
//! the filters registered for the route or site, such as [`compress`]) →
//! log ([`log`]).
//!
//! The three extension points are tables built once per site and route at
//! config load: a handler is one module under `handler/` and one line in
//! `handler`'s `handlers!`, a request filter one module under `filter/` and
//! one line in `filter`'s `request_filters!`, a response filter one module
//! and one line in [`response::chain`]. `handle` itself never names one.
//!
//! Never blocks and never allocates on the cached static path beyond the
//! response itself: sites are chosen by comparing bytes, headers that never
//! change are `HeaderValue::from_static`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};

mod compress;
mod filter;
mod handler;
mod log;
mod request_head;
mod request_id;
mod response;
mod response_headers;
mod route;
mod trace;

use crate::access_log::AccessLog;
use handler::{Handler, SiteHandler};
use weir_config::traffic::RequestView;
use weir_config::{Config, Limits, SiteConfig};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::metrics::RequestCounts;

/// One site, ready to answer.
pub struct Site {
    pub cfg: Arc<SiteConfig>,
    handler: SiteHandler,
    access_log: Option<AccessLog>,
    /// Requests its own handler answered (routes count their own).
    counts: Arc<RequestCounts>,
    /// Its limits, access control and header rules (`None`: it has none).
    filters: Option<Arc<filter::Filters>>,
    /// The request filters of its own handler's (or fallback's) requests
    /// and of a routed site's 404.
    request: filter::RequestFilters,
    /// The response filters of its own handler's (or fallback's) answers,
    /// and of a routed site's 404 (no handler's).
    response: ResponseFilters,
    not_found: ResponseFilters,
    /// The proxies whose `X-Forwarded-For` is believed: the client address
    /// limits and address lists see is the one the site's proxies see.
    trusted: Vec<ipnet::IpNet>,
    /// A `[tcp]` listener's stream, or the upstreams this name's TLS is
    /// passed through to.
    pub relay: Option<Arc<crate::layer4::Relay>>,
    /// Which requests get spans (`[traces]`; `None`: off for this site).
    sampler: Option<weir_http::trace::Sampler>,
}

impl Site {
    /// Every limit of the site and its routes, with the route (`*`: the site's).
    pub fn limiters(&self) -> Vec<(String, &weir_traffic::limit::Limiter)> {
        let mut out: Vec<(String, &weir_traffic::limit::Limiter)> = Vec::new();
        if let Some(f) = &self.filters {
            out.extend(f.limiters.iter().map(|l| ("*".to_string(), &**l)));
        }
        for (r, _) in self.handler.all() {
            if let Some(r) = r
                && let Some(f) = &r.filters
            {
                out.extend(f.limiters.iter().map(|l| (r.label.to_string(), &**l)));
            }
        }
        out
    }

    /// The client's address: the peer (after the PROXY protocol), or in
    /// trusted-proxy mode the address `X-Forwarded-For` gives.
    fn client(&self, conn: &ConnInfo, h: &http::HeaderMap) -> std::net::IpAddr {
        if self.trusted.is_empty() {
            return conn.peer.ip();
        }
        weir_proxy::forward::ClientAddr {
            peer: conn.peer.ip(),
            trusted: &self.trusted,
        }
        .resolve(h)
    }

    /// Whether every cache of the site keeps its responses in `store`.
    fn caches_in(&self, store: &Arc<weir_cache::Store>) -> bool {
        self.caches().iter().all(|c| Arc::ptr_eq(c.store(), store))
    }

    /// The app the site runs, if any: its handler, or its routes' fallback.
    pub fn app(&self) -> Option<&Arc<weir_apps::App>> {
        self.handler.own().and_then(|h| h.owns().app)
    }

    /// The caches in front of the site's proxies.
    pub fn caches(&self) -> Vec<weir_cache::Cache> {
        self.handler
            .all()
            .filter_map(|(_, h)| h.owns().cache.cloned())
            .collect()
    }

    /// Every proxy the site runs, with the route it serves (`*`: the site's
    /// own handler).
    pub fn proxies(&self) -> Vec<(String, Arc<weir_proxy::Proxy>)> {
        let mut out: Vec<(String, Arc<weir_proxy::Proxy>)> = self
            .handler
            .all()
            .filter_map(|(r, h)| {
                let label = r.map_or_else(|| "*".into(), |r| r.label.to_string());
                Some((label, h.owns().proxy?.clone()))
            })
            .collect();
        if let Some(r) = &self.relay {
            out.push((STREAM_ROUTE.into(), r.proxy.clone()));
        }
        out
    }
}

/// The route label of a site's stream upstreams (`[tcp]`, `passthrough`).
pub const STREAM_ROUTE: &str = "stream";

/// A route's pattern as written in the config: its metrics label.
pub(crate) fn route_label(p: &weir_config::routes::PathPattern) -> String {
    use weir_config::routes::PathPattern as P;
    match p {
        P::Prefix(s) | P::Glob(s) => s.clone(),
        P::Dir(d) => format!("{d}*"),
        P::Regex(r) => format!("~{}", r.src),
        P::Any => "(match)".into(),
    }
}

/// The request counts of every site and route, by name, kept across
/// reloads: a site built anew keeps counting where its predecessor was.
pub struct Registry {
    workers: usize,
    counts: std::sync::Mutex<Vec<(String, String, Arc<RequestCounts>)>>,
}

impl Registry {
    pub fn new(workers: usize) -> Self {
        Registry {
            workers,
            counts: Default::default(),
        }
    }

    /// The counts of `route` (`*`: the site's own handler) of `site`.
    pub(crate) fn counts(&self, site: &str, route: &str) -> Arc<RequestCounts> {
        let mut all = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, c)) = all.iter().find(|(s, r, _)| s == site && r == route) {
            return c.clone();
        }
        let c = Arc::new(RequestCounts::new(self.workers));
        all.push((site.to_string(), route.to_string(), c.clone()));
        c
    }

    /// (site, route, counts) of everything counted since start-up.
    pub fn all(&self) -> Vec<(String, String, Arc<RequestCounts>)> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The sites of one listening address.
pub struct Listener {
    sites: Vec<Arc<Site>>,
    default: Arc<Site>,
    limits: Limits,
    /// How long a request body may stall (`server.timeouts.body`).
    body_timeout: std::time::Duration,
    /// `Alt-Svc` advertising HTTP/3, on TLS listeners with `tls.http3`.
    alt_svc: Option<HeaderValue>,
    /// ACME HTTP-01 answers, on plain listeners.
    acme: Option<Arc<weir_tls::Challenges>>,
    /// Whether a site here passes TLS through (the ClientHello is read first).
    passthrough: bool,
    /// Whether a site here logs a `tls_*` variable: only then does a
    /// connection keep what its handshake settled (`ConnInfo::tls_info`).
    logs_tls: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("site \"{site}\": {source}")]
    Static {
        site: String,
        source: weir_static::Error,
    },
    #[error("site \"{site}\": app: {source}")]
    App {
        site: String,
        source: std::io::Error,
    },
    #[error("site \"{site}\": a route's handler cannot be routes")]
    NestedRoutes { site: String },
    #[error("site \"{site}\": access log: {source}")]
    AccessLog {
        site: String,
        source: std::io::Error,
    },
}

/// What a response filter may read of the exchange it filters.
struct Exchange<'a> {
    /// The request as it reached the handler (after the request filters'
    /// header rules and the route's rewrite).
    pub req: &'a RequestView<'a>,
    /// What the request filters' limits owe the answer (`None`: nothing).
    pub passed: Option<&'a filter::Passed>,
}

/// One response filter: a step every answer of the routes and sites it is
/// registered for passes, whichever handler made it (a refusal of a
/// request filter included).
trait ResponseFilter: Send + Sync {
    /// Changes the answer's head, or wraps its body.
    fn response(&self, ex: &Exchange<'_>, resp: &mut Response<Body>);
}

/// The response filters of one route, or of a site's own handler, in the
/// order they run.
#[derive(Default)]
struct ResponseFilters(Box<[Box<dyn ResponseFilter>]>);

impl ResponseFilters {
    pub fn new(list: Vec<Box<dyn ResponseFilter>>) -> Self {
        ResponseFilters(list.into_boxed_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn run(&self, ex: &Exchange<'_>, resp: &mut Response<Body>) {
        for f in &self.0 {
            f.response(ex, resp);
        }
    }
}

/// The sites of one listening address as connections read them: replaced
/// whole by a reload; a connection takes the current one at each request.
pub type Current = arc_swap::ArcSwap<Listener>;

/// Builds every site once; listeners share them. `previous`: the sites of
/// the config being replaced: a site whose settings are unchanged is kept
/// as it is (its access log, proxies and file cache), and a changed site
/// keeps the proxies and file caches whose own settings are unchanged.
/// `cache`: the store every cached site and route keeps responses in (a
/// site whose cache is elsewhere is built anew).
pub fn build_sites(
    cfg: &Config,
    previous: &[Arc<Site>],
    registry: &Registry,
    cache: &Arc<weir_cache::Store>,
) -> Result<Vec<Arc<Site>>, SiteError> {
    let b = handler::Build {
        cache,
        workers: crate::worker_slots(cfg),
        previous,
        registry,
    };
    cfg.sites
        .iter()
        .map(|s| {
            let sampler = cfg
                .traces
                .as_ref()
                .filter(|_| s.traces)
                .map(|t| weir_http::trace::Sampler::new(t.sample));
            if let Some(same) = previous
                .iter()
                .find(|p| p.cfg == *s && p.caches_in(cache) && p.sampler == sampler)
            {
                return Ok(same.clone());
            }
            let filters = filter::Filters::build(
                &s.filters,
                format!("site \"{}\"", s.name),
                filter::SITE,
                b.workers,
            )
            .map(Arc::new);
            let handler = handler::build_site(s, filters.as_ref(), &b)?;
            let compress = s
                .compress
                .as_ref()
                .filter(|_| handler.own().is_some_and(Handler::filter_compresses));
            let request = filter::chain(filters.as_deref(), None);
            let response = response::chain(compress, None, filters.as_ref());
            let not_found = response::chain(None, None, filters.as_ref());
            let relay = s.passthrough.as_ref().map(|p| {
                let same = previous
                    .iter()
                    .filter(|o| o.cfg.name == s.name)
                    .find_map(|o| o.relay.clone().filter(|r| r.cfg == *p));
                same.unwrap_or_else(|| {
                    let proxy = b.proxy(&p.upstream, &s.name, STREAM_ROUTE);
                    Arc::new(crate::layer4::Relay::new(p.clone(), proxy, b.workers))
                })
            });
            let mut trusted = Vec::new();
            for (_, h) in handler.all() {
                if let Some(p) = h.owns().proxy {
                    trusted.extend(p.cfg.trusted_proxies.iter().copied());
                }
            }
            let counts = registry.counts(&s.name, "*");
            let access_log =
                match &s.access_log {
                    Some(a) => Some(AccessLog::open(a, b.workers).map_err(|source| {
                        SiteError::AccessLog {
                            site: s.name.clone(),
                            source,
                        }
                    })?),
                    None => None,
                };
            Ok(Arc::new(Site {
                cfg: s.clone(),
                handler,
                access_log,
                counts,
                filters,
                request,
                response,
                not_found,
                trusted,
                relay,
                sampler,
            }))
        })
        .collect()
}

impl Listener {
    pub fn new(
        all: &[Arc<Site>],
        indexes: &[usize],
        default: usize,
        server: &weir_config::ServerConfig,
    ) -> Self {
        let sites: Vec<Arc<Site>> = indexes.iter().map(|&i| all[i].clone()).collect();
        let default = all[default].clone();
        let passthrough = sites.iter().any(|s| s.relay.is_some());
        let logs_tls = sites.iter().chain([&default]).any(|s| {
            s.cfg
                .access_log
                .as_ref()
                .is_some_and(|a| a.format.uses_tls())
        });
        Listener {
            sites,
            default,
            limits: server.limits.clone(),
            body_timeout: server.timeouts.body,
            alt_svc: None,
            acme: None,
            passthrough,
            logs_tls,
        }
    }

    /// Whether connections must keep what their TLS handshake settled
    /// (a site here logs it).
    pub fn logs_tls(&self) -> bool {
        self.logs_tls
    }

    /// Whether connections must have their ClientHello read before the
    /// handshake: a site here passes TLS through.
    pub fn passes_through(&self) -> bool {
        self.passthrough
    }

    /// The stream a ClientHello naming `sni` and offering `alpn` goes to,
    /// if its site passes TLS through (else weir answers it).
    pub fn relay_for(
        &self,
        sni: Option<&str>,
        alpn: &[Vec<u8>],
    ) -> Option<Arc<crate::layer4::Relay>> {
        let sni = sni?;
        // An exact name wins over a wildcard, as for certificates.
        let site = self
            .sites
            .iter()
            .find(|s| matches!(&s.cfg.host, weir_config::HostPattern::Exact(h) if h.eq_ignore_ascii_case(sni)))
            .or_else(|| self.sites.iter().find(|s| s.cfg.host.matches(sni)))?;
        let r = site.relay.as_ref()?;
        r.takes_alpn(alpn.iter().map(Vec::as_slice))
            .then(|| r.clone())
    }

    /// A `[tcp]` listener's stream.
    pub fn stream(&self) -> Option<Arc<crate::layer4::Relay>> {
        self.default.relay.clone()
    }

    /// Advertise HTTP/3 on `port` (UDP) in every response.
    pub fn set_alt_svc(&mut self, port: u16) {
        self.alt_svc = HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).ok();
    }

    /// Answer `/.well-known/acme-challenge/<token>` from `c` before any site
    /// (and so before any redirect to HTTPS).
    pub fn set_acme_challenges(&mut self, c: Arc<weir_tls::Challenges>) {
        self.acme = Some(c);
    }

    /// Answers one request, whichever protocol brought it, through the
    /// phases in order. `B` is the request body as the protocol layer
    /// delivers it: weir's own HTTP/1 body (`weir_http::h1::Incoming`),
    /// an HTTP/2 stream's through hyper (`ReadOn`) or an HTTP/3 stream's
    /// (`RecvBody`).
    pub async fn handle<B>(&self, req: Request<B>, conn: &ConnInfo) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<weir_http::body::BodyError>,
    {
        let started = Instant::now();
        let (mut parts, body) = req.into_parts();

        // Request head: the limits every protocol is held to.
        if let Some(refused) = request_head::check(&self.limits, &parts) {
            self.default.counts.record(
                conn.worker,
                &parts.method,
                refused.status(),
                started.elapsed(),
                None,
                None,
            );
            return refused;
        }
        request_head::absolute_form_host(&mut parts);
        // Answers that come before any site (ACME HTTP-01 tokens).
        if let Some(r) = self
            .acme
            .as_ref()
            .and_then(|a| request_head::acme(a, &parts))
        {
            return r;
        }
        // Route: the site by Host, then the route by path and conditions.
        let site = route::site(self, &parts);
        if site.relay.is_some() {
            return self.misdirected(parts, conn, started);
        }
        let client = site.client(conn, &parts.headers);
        request_id::on_request(site, conn, &mut parts.headers);
        let span = trace::begin(site.sampler.as_ref(), &mut parts);
        let target = route::target(
            &site.handler,
            &RequestView {
                parts: &parts,
                host: request_head::request_host(&parts),
                client,
                tls: conn.tls,
            },
        );
        let counts = match &target {
            handler::Target::Route { route, .. } => &route.counts,
            _ => &site.counts,
        };
        let bytes_in = content_length(&parts.headers);
        // Request filters (address lists, limits, authentication, body
        // limit, header rules) may answer instead of the handler.
        // Handler: static files, the proxy, a redirect, a fixed answer.
        let captures: &[String] = match &target {
            handler::Target::Route { captures, .. } => captures,
            _ => &[],
        };
        let request_filters = target.request_filters(site);
        let mut outcome = crate::access_log::Outcome::default();
        let filtered = if request_filters.is_empty() {
            Ok(None)
        } else if !request_filters.waits() {
            match request_filters.run_now(&mut parts, conn, client, captures, &mut outcome) {
                Ok((passed, 0)) => Ok(passed),
                Ok((passed, ms)) => {
                    // Boxed: only a delayed request pays for a timer.
                    Box::pin(tokio::time::sleep(std::time::Duration::from_millis(ms))).await;
                    Ok(passed)
                }
                Err(refused) => Err(refused),
            }
        } else {
            // Boxed: the authentication's future is large, and requests
            // without it must not pay for moving it.
            Box::pin(request_filters.run(&mut parts, conn, client, captures, &mut outcome)).await
        };
        let max_body = request_filters
            .max_body()
            .map_or(self.limits.body, |m| m.min(self.limits.body));
        let (mut resp, passed) = match filtered {
            Ok(passed) => (
                handler::serve(
                    &target,
                    &mut parts,
                    body,
                    conn,
                    client,
                    handler::BodyLimits {
                        max: max_body,
                        stall: self.body_timeout,
                    },
                )
                .await,
                passed,
            ),
            Err(refused) => (refused, None),
        };
        // Response filters: the site's base (error pages, the Server and
        // extra headers, Alt-Svc), then those registered for the route or
        // site (compression, the limits' counts and fields, header rules,
        // which may remove any of those).
        response::finish(
            &site.cfg,
            self.alt_svc.as_ref(),
            &mut resp,
            parts.method == http::Method::HEAD,
        );
        request_id::on_response(site, &parts.headers, &mut resp);
        let registered = target.response_filters(site);
        if !registered.is_empty() {
            let view = RequestView {
                parts: &parts,
                host: request_head::request_host(&parts),
                client,
                tls: conn.tls,
            };
            let ex = Exchange {
                req: &view,
                passed: passed.as_deref(),
            };
            registered.run(&ex, &mut resp);
        }
        drop(passed);
        // Log: the metrics, then the access log.
        let took = started.elapsed();
        let bytes_out = content_length(resp.headers());
        counts.record(
            conn.worker,
            &parts.method,
            resp.status(),
            took,
            bytes_in,
            bytes_out,
        );
        let route = match &target {
            handler::Target::Route { route, .. } => Some(route),
            _ => None,
        };
        if let Some(span) = span {
            let label = route.map(|r| &r.label);
            trace::end(
                *span,
                &mut parts,
                &resp,
                conn,
                client,
                &site.cfg.name,
                label,
            );
        }
        if let Some(log) = &site.access_log {
            let facts = log::Facts {
                client,
                route: route.map(|r| &r.cfg.pattern),
                took,
                bytes_in,
                bytes_out,
                outcome,
                limit_name: log::limit_name(
                    site,
                    route.and_then(|r| r.filters.as_deref()),
                    &outcome,
                ),
            };
            log::record(log, site, conn, &parts, &resp, facts);
        }
        weir_http::header_maps::give(parts.headers);
        resp
    }
}

impl Listener {
    /// The answer to a request whose Host names a site that passes TLS
    /// through: it came over weir's own TLS under another name, and that
    /// site never answers HTTP. 421 (RFC 9110 §15.5.20) tells a client that
    /// reused a connection for a second name to open one of its own.
    /// Counted and logged under the address's default site, if it has one
    /// that answers HTTP; never under the passthrough site.
    #[cold]
    fn misdirected(
        &self,
        parts: http::request::Parts,
        conn: &ConnInfo,
        started: Instant,
    ) -> Response<Body> {
        let mut resp = Response::new(Body::from("Misdirected Request\n"));
        *resp.status_mut() = http::StatusCode::MISDIRECTED_REQUEST;
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        let site = &self.default;
        if site.relay.is_some() {
            return resp;
        }
        response::finish(
            &site.cfg,
            self.alt_svc.as_ref(),
            &mut resp,
            parts.method == http::Method::HEAD,
        );
        let took = started.elapsed();
        let bytes_out = content_length(resp.headers());
        site.counts.record(
            conn.worker,
            &parts.method,
            resp.status(),
            took,
            content_length(&parts.headers),
            bytes_out,
        );
        if let Some(log) = &site.access_log {
            let facts = log::Facts {
                client: site.client(conn, &parts.headers),
                route: None,
                took,
                bytes_in: content_length(&parts.headers),
                bytes_out,
                outcome: Default::default(),
                limit_name: None,
            };
            log::record(log, site, conn, &parts, &resp, facts);
        }
        weir_http::header_maps::give(parts.headers);
        resp
    }
}

/// A body's length as its `Content-Length` field gives it
/// (`weir_http::fields`); a value that is not a length counts as unknown.
pub(crate) fn content_length(h: &http::HeaderMap) -> Option<u64> {
    weir_http::fields::content_length(h).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn test_store() -> Arc<weir_cache::Store> {
        weir_cache::Store::new(&Default::default(), 1)
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        use request_head::strip_port;
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
    }

    /// hyper moves each request's future into place, so its size is copied
    /// per request: large branches (the proxy) are boxed to keep it small.
    #[test]
    fn request_future_stays_small() {
        let cfg = weir_config::Config::builtin_welcome();
        let sites = build_sites(&cfg, &[], &Registry::new(1), &test_store()).unwrap();
        let l = Listener::new(&sites, &[0], 0, &cfg.server);
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
            tls_info: None,
            worker: Default::default(),
        };
        let req = Request::new(http_body_util::Empty::<Bytes>::new());
        let fut = l.handle(req, &conn);
        let size = std::mem::size_of_val(&fut);
        eprintln!("request future: {size} bytes");
        assert!(size <= 1600, "request future is {size} bytes");
    }

    /// The registration table (`response::chain`) builds each list once:
    /// a site whose filters have nothing to do after the handler gets an
    /// empty one (its answers pay one branch); a proxy with `compress` gets
    /// compression; a route runs its header rules before its site's, so the
    /// site has the last word, and a routed site's 404 is never compressed.
    #[test]
    fn response_filters_are_registered_once_per_route_and_site() {
        let cfg = weir_config::load_str(
            "t.toml",
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nroot = \".\"\n\
             request_headers = { set = { X-In = \"1\" } }\n\
             [site.\"b\"]\nlisten = [\"127.0.0.1:1\"]\ncompress = true\n\
             response_headers = { set = { X-Who = \"site\" }, add = { X-Seen = \"site\" } }\n\
             [[site.\"b\".route]]\npath = \"/api/\"\nproxy = { to = [\"127.0.0.1:2\"] }\ncompress = true\n\
             response_headers = { set = { X-Who = \"route\" }, add = { X-Seen = \"route\" } }\n",
            std::path::Path::new("."),
        )
        .unwrap();
        let sites = build_sites(&cfg, &[], &Registry::new(1), &test_store()).unwrap();
        assert!(sites[0].response.is_empty() && sites[0].not_found.is_empty());
        let SiteHandler::Routes { routes, .. } = &sites[1].handler else {
            panic!("not a routed site");
        };
        let (parts, _) = Request::get("/api/x").body(()).unwrap().into_parts();
        let view = RequestView {
            parts: &parts,
            host: "b",
            client: [127, 0, 0, 1].into(),
            tls: false,
        };
        let ex = Exchange {
            req: &view,
            passed: None,
        };
        let mut resp = Response::new(Body::empty());
        routes[0].response.run(&ex, &mut resp);
        assert_eq!(resp.headers()["x-who"], "site");
        let seen: Vec<_> = resp.headers().get_all("x-seen").iter().collect();
        assert_eq!(seen, ["route", "site"]);
        // Compression is the route's first filter: a text answer is coded.
        let (mut parts, _) = Request::get("/api/x").body(()).unwrap().into_parts();
        parts.headers.insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip"),
        );
        let view = RequestView {
            parts: &parts,
            host: "b",
            client: [127, 0, 0, 1].into(),
            tls: false,
        };
        let ex = Exchange {
            req: &view,
            passed: None,
        };
        let text = || {
            let mut r = Response::new(Body::from("x".repeat(4096)));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/html"),
            );
            r
        };
        let mut resp = text();
        routes[0].response.run(&ex, &mut resp);
        assert_eq!(resp.headers()["content-encoding"], "gzip");
        let mut resp = text();
        sites[1].not_found.run(&ex, &mut resp);
        assert!(!resp.headers().contains_key("content-encoding"));
        assert_eq!(resp.headers()["x-who"], "site");
    }

    /// The proxy's future is boxed per request (see `leaf`), so its size is
    /// copied into the box on every proxied request.
    #[test]
    fn proxy_future_stays_small() {
        let cfg = weir_config::load_str(
            "t.toml",
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:2\"] }\n",
            std::path::Path::new("."),
        )
        .unwrap();
        let sites = build_sites(&cfg, &[], &Registry::new(1), &test_store()).unwrap();
        let Some(p) = sites[0].handler.own().and_then(|h| h.owns().proxy) else {
            panic!("not a proxy site");
        };
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
            tls_info: None,
            worker: Default::default(),
        };
        let (mut parts, _) = Request::new(()).into_parts();
        let fut = p.serve(&mut parts, Body::empty(), &conn, None);
        let size = std::mem::size_of_val(&fut);
        eprintln!("proxy future: {size} bytes");
        assert!(size <= 1536, "proxy future is {size} bytes");
    }

    /// A reload keeps what is unchanged: a site with the same settings
    /// whole; in a changed site, an unchanged proxy, and in a changed proxy,
    /// the upstreams whose settings are unchanged (their health with them).
    #[test]
    fn a_rebuild_keeps_what_did_not_change() {
        let load =
            |src: &str| weir_config::load_str("t.toml", src, std::path::Path::new(".")).unwrap();
        let a = load(
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:2\"] }\n\
             [site.\"b\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:3\"] }\n",
        );
        let reg = Registry::new(2);
        let first_store = test_store();
        let first = build_sites(&a, &[], &reg, &first_store).unwrap();
        let up = |s: &Arc<Site>, i: usize| s.proxies()[0].1.upstreams()[i].clone();
        up(&first[1], 0).set_admin_state(weir_proxy::AdminState::Drain);

        // Site a gains a header (its proxy is unchanged); site b's proxy
        // gains an upstream.
        let b = load(
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nheaders = { X-A = \"1\" }\nproxy = { to = [\"127.0.0.1:2\"] }\n\
             [site.\"b\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:3\", \"127.0.0.1:4\"] }\n",
        );
        let second = build_sites(&b, &first, &reg, &first_store).unwrap();
        assert!(!Arc::ptr_eq(&first[0], &second[0]), "site a changed");
        assert!(Arc::ptr_eq(
            &first[0].proxies()[0].1,
            &second[0].proxies()[0].1
        ));
        assert!(!Arc::ptr_eq(
            &first[1].proxies()[0].1,
            &second[1].proxies()[0].1
        ));
        assert!(Arc::ptr_eq(&up(&first[1], 0), &up(&second[1], 0)));
        assert_eq!(
            up(&second[1], 0).admin_state(),
            weir_proxy::AdminState::Drain
        );
        assert_eq!(
            up(&second[1], 1).admin_state(),
            weir_proxy::AdminState::Ready
        );
        // Unchanged again: the very same sites.
        let third = build_sites(&b, &second, &reg, &first_store).unwrap();
        assert!(Arc::ptr_eq(&second[0], &third[0]) && Arc::ptr_eq(&second[1], &third[1]));
        // Counts follow the names.
        assert!(Arc::ptr_eq(&first[1].counts, &third[1].counts));
    }
}
