//! The handler phase: the one handler a route chose answers the request
//! (static files, the reverse proxy, the welcome page, the HTTP → HTTPS
//! redirect). Only answers; never adds site-wide headers or logs (the
//! response filters and the log phase do).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_config::HandlerConfig;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::response::{error, method_not_allowed};
use weir_static::StaticFiles;

use super::SiteError;

/// What answers the requests of a site.
pub(super) enum Handler {
    Static(Arc<StaticFiles>),
    Welcome,
    RedirectHttps {
        port: u16,
    },
    Proxy(Arc<weir_proxy::Proxy>),
    /// The proxy behind the cache, and the compression its answers get
    /// before they are stored.
    Cached(
        Arc<weir_proxy::Proxy>,
        weir_cache::Cache,
        Option<Arc<weir_config::files::CompressOptions>>,
    ),
    Redirect(weir_config::traffic::Redirect),
    Respond(weir_config::traffic::Respond),
    /// Scripts through FastCGI; the root's other files served by weir.
    FastCgi(Arc<weir_fastcgi::FastCgi>, Arc<StaticFiles>),
    /// An application weir runs, proxied to.
    App(Arc<weir_apps::App>),
    /// Routes by path, then the fallback (404 without one).
    Routes {
        routes: Vec<Route>,
        fallback: Option<Box<Handler>>,
    },
}

/// A `[[site."x".route]]`: matching requests go through its filters to
/// its handler (a proxy, maybe behind a cache; files; a redirect; a fixed
/// answer).
pub(super) struct Route {
    pub cfg: weir_config::routes::RouteConfig,
    pub handler: Handler,
    pub filters: Option<Arc<super::filter::Filters>>,
    /// The response filters of its answers (the site's layer included).
    pub response: super::ResponseFilters,
    pub counts: Arc<weir_http::metrics::RequestCounts>,
}

/// How handlers are built: the worker slots, and the handlers of the
/// config being replaced, whose state (idle upstream connections, health,
/// balancer counters, file caches) a handler with the same settings keeps.
pub(super) struct Build<'a> {
    pub workers: usize,
    pub previous: &'a [Arc<super::Site>],
    pub registry: &'a super::Registry,
    pub cache: &'a Arc<weir_cache::Store>,
}

impl Build<'_> {
    /// The proxy for `cfg` at `route` (`*`: the site's own) of `site`: the
    /// one there before if its settings are unchanged; else a new one that
    /// keeps that one's upstreams whose own settings are unchanged.
    pub(super) fn proxy(
        &self,
        cfg: &Arc<weir_config::proxy::ProxyConfig>,
        site: &str,
        route: &str,
    ) -> Arc<weir_proxy::Proxy> {
        let before: Vec<Arc<weir_proxy::Proxy>> = self
            .previous
            .iter()
            .filter(|s| s.cfg.name == site)
            .flat_map(|s| s.proxies())
            .filter(|(r, _)| r == route)
            .map(|(_, p)| p)
            .collect();
        if let Some(same) = before.iter().find(|p| *p.cfg == **cfg) {
            return same.clone();
        }
        weir_proxy::Proxy::after(cfg.clone(), self.workers, &before)
    }

    /// The cache `policy` puts in front of `proxy`, in the shared store;
    /// with `compress`, the proxy's answers are compressed before they are
    /// stored (the cache keeps the variant it serves).
    fn cache(
        &self,
        policy: Option<&Arc<weir_config::cache::CachePolicy>>,
        proxy: &Arc<weir_proxy::Proxy>,
        compress: Option<&Arc<weir_config::files::CompressOptions>>,
    ) -> Option<weir_cache::Cache> {
        let origin: Arc<dyn weir_cache::Origin> = match compress {
            Some(opts) => Arc::new(super::compress::Compressing {
                proxy: proxy.clone(),
                opts: opts.clone(),
            }),
            None => proxy.clone(),
        };
        policy.map(|p| weir_cache::Cache::new(self.cache.clone(), p.clone(), origin))
    }

    fn files(&self, opts: &weir_config::files::Options) -> Option<Arc<StaticFiles>> {
        self.previous.iter().find_map(|s| match &s.handler {
            Handler::Static(f) if f.options() == opts => Some(f.clone()),
            Handler::Routes {
                fallback: Some(f), ..
            } => match &**f {
                Handler::Static(f) if f.options() == opts => Some(f.clone()),
                _ => None,
            },
            _ => None,
        })
    }
}

impl Handler {
    /// Calls `f` with every FastCGI application this handler runs.
    fn each_fastcgi(&self, f: &mut dyn FnMut(&Arc<weir_fastcgi::FastCgi>)) {
        match self {
            Handler::FastCgi(app, _) => f(app),
            Handler::Routes { routes, fallback } => {
                for r in routes {
                    r.handler.each_fastcgi(f);
                }
                if let Some(h) = fallback {
                    h.each_fastcgi(f);
                }
            }
            _ => {}
        }
    }

    /// Calls `f` with every proxy this handler runs.
    pub(super) fn each_proxy(&self, f: &mut dyn FnMut(&Arc<weir_proxy::Proxy>)) {
        match self {
            Handler::Proxy(p) | Handler::Cached(p, ..) => f(p),
            Handler::FastCgi(app, _) => f(app.proxy()),
            Handler::App(app) => f(&app.proxy),
            Handler::Routes { routes, fallback } => {
                for r in routes {
                    r.handler.each_proxy(f);
                }
                if let Some(h) = fallback {
                    h.each_proxy(f);
                }
            }
            _ => {}
        }
    }
}

/// `cache`: the site's cache policy, for the site's own proxy, and
/// `compress` the compression of its answers; `route`: the route it
/// answers (`*`: the site's own handler); `site_filters`: the site's, whose
/// response filters follow a route's own.
pub(super) fn build_handler(
    site: &str,
    route: &str,
    h: &HandlerConfig,
    cache: Option<&Arc<weir_config::cache::CachePolicy>>,
    compress: Option<&Arc<weir_config::files::CompressOptions>>,
    site_filters: Option<&Arc<super::filter::Filters>>,
    b: &Build<'_>,
) -> Result<Handler, SiteError> {
    Ok(match h {
        HandlerConfig::Static(opts) => Handler::Static(match b.files(opts) {
            Some(f) => f,
            None => StaticFiles::new(opts.clone()).map_err(|source| SiteError::Static {
                site: site.to_string(),
                source,
            })?,
        }),
        HandlerConfig::Welcome => Handler::Welcome,
        HandlerConfig::RedirectHttps { port } => Handler::RedirectHttps { port: *port },
        HandlerConfig::Proxy(p) => {
            let proxy = b.proxy(p, site, route);
            match b.cache(cache, &proxy, compress) {
                Some(c) => Handler::Cached(proxy, c, compress.cloned()),
                None => Handler::Proxy(proxy),
            }
        }
        HandlerConfig::Redirect(r) => Handler::Redirect(r.clone()),
        HandlerConfig::Respond(r) => Handler::Respond(r.clone()),
        HandlerConfig::FastCgi(f) => {
            let files = match b.files(&f.files) {
                Some(s) => s,
                None => StaticFiles::new(f.files.clone()).map_err(|source| SiteError::Static {
                    site: site.to_string(),
                    source,
                })?,
            };
            let same = b
                .previous
                .iter()
                .filter(|s| s.cfg.name == site)
                .find_map(|s| {
                    let mut found = None;
                    s.handler.each_fastcgi(&mut |app| {
                        if app.cfg == *f {
                            found = Some(app.clone());
                        }
                    });
                    found
                });
            let app = same.unwrap_or_else(|| {
                Arc::new(weir_fastcgi::FastCgi::new(
                    f.clone(),
                    b.proxy(&f.upstream, site, route),
                    b.workers,
                ))
            });
            Handler::FastCgi(app, files)
        }
        HandlerConfig::App(cfg) => {
            let same = b
                .previous
                .iter()
                .filter(|s| s.cfg.name == site)
                // Kept, and rolled to the new settings once the reload is
                // in force (Server::reload).
                .find_map(|s| s.app().filter(|a| a.can_become(cfg)).cloned());
            match same {
                Some(a) => Handler::App(a),
                None => Handler::App(
                    weir_apps::App::start(
                        cfg.clone(),
                        &weir_config::proxy::ProxyConfig::defaults(),
                        b.workers,
                    )
                    .map_err(|source| SiteError::App {
                        site: site.to_string(),
                        source,
                    })?,
                ),
            }
        }
        HandlerConfig::Routes { routes, fallback } => Handler::Routes {
            routes: routes
                .iter()
                .map(|r| {
                    let label = super::route_label(&r.pattern);
                    let handler = build_handler(
                        site,
                        &label,
                        &r.handler,
                        r.cache.as_ref(),
                        r.compress.as_ref(),
                        site_filters,
                        b,
                    )?;
                    let filters = super::filter::Filters::build(
                        &r.filters,
                        format!("site \"{site}\" route {label}"),
                        b.workers,
                    )
                    .map(Arc::new);
                    let compress = r.compress.as_ref().filter(|_| handler.filter_compresses());
                    Ok(Route {
                        cfg: r.clone(),
                        response: super::response::chain(compress, filters.as_ref(), site_filters),
                        handler,
                        filters,
                        counts: b.registry.counts(site, &label),
                    })
                })
                .collect::<Result<_, SiteError>>()?,
            fallback: match fallback {
                Some(f) => Some(Box::new(build_handler(
                    site,
                    "*",
                    f,
                    cache,
                    compress,
                    site_filters,
                    b,
                )?)),
                None => None,
            },
        },
    })
}

/// What the handler phase is to run.
pub(super) enum Target<'a> {
    /// A site's own handler, or a routed site's fallback.
    Handler(&'a Handler),
    /// A route, with the path (and query, after `?`) its rewrite made, if
    /// it changed it, and the groups of its `path_regex`.
    Route {
        route: &'a Route,
        path: Option<String>,
        captures: Vec<String>,
    },
    /// A routed site with no matching route and no fallback.
    NotFound,
}

/// Answers the request with the handler `target` names.
pub(super) async fn serve<B>(
    target: &Target<'_>,
    parts: &mut http::request::Parts,
    body: B,
    conn: &ConnInfo,
    client: std::net::IpAddr,
    body_limits: BodyLimits,
) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    match target {
        Target::Handler(h) => {
            let given = Given {
                path: None,
                client,
                captures: &[],
                body_limits,
            };
            leaf(h, parts, body, conn, &given).await
        }
        Target::Route {
            route,
            path,
            captures,
        } => {
            let given = Given {
                path: path.as_deref(),
                client,
                captures,
                body_limits,
            };
            leaf(&route.handler, parts, body, conn, &given).await
        }
        Target::NotFound => error(StatusCode::NOT_FOUND),
    }
}

/// What a request body is held to on its way to a handler.
#[derive(Clone, Copy)]
pub(super) struct BodyLimits {
    /// The most bytes sent on.
    pub max: u64,
    /// The longest the client may go quiet in the middle of it.
    pub stall: std::time::Duration,
}

/// A request body as the proxy sends it on: no box for a request without
/// one; cut off past `max` bytes (a body that declared its length was
/// checked before; a chunked one is counted as it streams, and the proxy
/// answers 413 when it overflows); failed when the client stalls longer
/// than `stall` (the proxy answers 408).
fn upstream_body<B>(body: B, limits: BodyLimits) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    if body.is_end_stream() {
        Body::empty()
    } else {
        let max = usize::try_from(limits.max).unwrap_or(usize::MAX);
        Body::stream(http_body_util::Limited::new(
            weir_http::body::TimedBody::new(body, limits.stall),
            max,
        ))
    }
}

/// What the phases before the handler worked out for it.
struct Given<'a> {
    /// The path (and query) a route's rewrite made.
    path: Option<&'a str>,
    client: std::net::IpAddr,
    /// A route's `path_regex` groups.
    captures: &'a [String],
    /// What the request body is held to.
    body_limits: BodyLimits,
}

/// The handlers that answer by themselves (everything but `Routes`).
async fn leaf<B>(
    handler: &Handler,
    parts: &mut http::request::Parts,
    body: B,
    conn: &ConnInfo,
    given: &Given<'_>,
) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    // Only the proxy tunnels (HTTP/2 extended CONNECT for WebSockets); a
    // 2xx from anything else would open an HTTP/2 tunnel to nowhere.
    if parts.method == http::Method::CONNECT
        && !matches!(handler, Handler::Proxy(_) | Handler::Cached(..))
    {
        return method_not_allowed();
    }
    let Given {
        path,
        client,
        captures,
        body_limits,
    } = *given;
    match handler {
        Handler::Static(files) => {
            let path = path.map_or(parts.uri.path(), |p| p.split('?').next().unwrap_or(p));
            let try_files = &files.options().try_files;
            if try_files.is_empty() {
                files.serve(parts, path).await
            } else {
                // Boxed: it holds a file lookup and an answer at once.
                Box::pin(self::try_files(files, try_files, parts, path)).await
            }
        }
        Handler::Redirect(r) => {
            let view = weir_config::traffic::RequestView {
                parts,
                host: super::request_head::request_host(parts),
                client,
                tls: conn.tls,
            };
            let groups: smallvec::SmallVec<[&str; 4]> =
                captures.iter().map(String::as_str).collect();
            redirect(r, &view, &groups)
        }
        Handler::Respond(r) => respond(r, parts.method == http::Method::HEAD),
        Handler::Welcome => welcome(parts),
        Handler::RedirectHttps { port } => redirect_https(parts, *port),
        // Boxed: the proxy's future is large, and hyper moves the request
        // future into place on every request; static requests must not pay
        // for copying it.
        Handler::Proxy(p) => {
            Box::pin(p.serve(parts, upstream_body(body, body_limits), conn, path)).await
        }
        Handler::Cached(_, c, compress) => {
            if let Some(opts) = compress {
                super::compress::narrow_accept_encoding(opts, &mut parts.headers);
            }
            Box::pin(c.serve(parts, upstream_body(body, body_limits), conn, path)).await
        }
        Handler::App(app) => {
            if let Err(why) = Box::pin(app.ready_for_request()).await {
                // Say why: starting, a full queue, or the last start's failure.
                let mut r = Response::new(Body::full(format!(
                    "503 Service Unavailable: app \"{}\" has no ready instance ({why})\n",
                    app.name
                )));
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            }
            Box::pin(
                app.proxy
                    .serve(parts, upstream_body(body, body_limits), conn, path),
            )
            .await
        }
        Handler::FastCgi(app, files) => {
            let body = upstream_body(body, body_limits);
            Box::pin(fastcgi(app, files, parts, body, conn, path, client)).await
        }
        Handler::Routes { .. } => error(StatusCode::NOT_FOUND),
    }
}

/// A `php`/`fastcgi` handler: the script the path names (or the front
/// controller) through FastCGI, another file of the root as a static file.
async fn fastcgi(
    app: &Arc<weir_fastcgi::FastCgi>,
    files: &StaticFiles,
    parts: &mut http::request::Parts,
    body: Body,
    conn: &ConnInfo,
    path: Option<&str>,
    client: std::net::IpAddr,
) -> Response<Body> {
    use weir_fastcgi::Resolved;
    let raw = path.map_or(parts.uri.path(), |p| p.split('?').next().unwrap_or(p));
    match &*app.resolve(conn.worker, raw).await {
        Resolved::Script {
            script_name,
            path_info,
            filename,
        } => {
            let script = weir_fastcgi::params::Script {
                script_name,
                path_info,
                filename,
                root: &app.cfg.root,
            };
            app.run(&script, parts, body, conn, client).await
        }
        Resolved::Static => {
            let raw = raw.to_string();
            files.serve(parts, &raw).await
        }
        // The static files' rule, so a directory gets the same answer
        // whether a script or a file serves it.
        Resolved::AddSlash => weir_static::redirect_to_slash(parts),
        Resolved::NotFound => error(StatusCode::NOT_FOUND),
        Resolved::BadPath => error(StatusCode::BAD_REQUEST),
    }
}

/// nginx's and Caddy's `try_files`: each candidate (`{path}` the
/// request's) served in turn while it is not found; the last answers
/// whatever it gives, `=404` a status.
async fn try_files(
    files: &StaticFiles,
    candidates: &[String],
    parts: &http::request::Parts,
    path: &str,
) -> Response<Body> {
    let mut last = error(StatusCode::NOT_FOUND);
    for (i, c) in candidates.iter().enumerate() {
        if let Some(code) = c.strip_prefix('=') {
            return error(
                code.parse()
                    .ok()
                    .and_then(|n| StatusCode::from_u16(n).ok())
                    .unwrap_or(StatusCode::NOT_FOUND),
            );
        }
        let candidate = c.replace("{path}", path);
        last = files.serve(parts, &candidate).await;
        if last.status() != StatusCode::NOT_FOUND || i == candidates.len() - 1 {
            break;
        }
    }
    last
}

fn redirect(
    r: &weir_config::traffic::Redirect,
    view: &weir_config::traffic::RequestView<'_>,
    captures: &[&str],
) -> Response<Body> {
    let mut to = String::new();
    r.to.render(view, captures, &mut to);
    let Ok(loc) = HeaderValue::from_str(&to) else {
        return error(StatusCode::BAD_REQUEST);
    };
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::FOUND);
    resp.headers_mut().insert(header::LOCATION, loc);
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    resp
}

fn respond(r: &weir_config::traffic::Respond, head: bool) -> Response<Body> {
    let mut resp = Response::new(if head || r.body.is_empty() {
        Body::empty()
    } else {
        Body::full(r.body.clone())
    });
    *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    if let Some(t) = &r.content_type {
        resp.headers_mut().insert(header::CONTENT_TYPE, t.clone());
    }
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(r.body.len()));
    resp
}

fn welcome(parts: &http::request::Parts) -> Response<Body> {
    use http::Method;
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return method_not_allowed();
    }
    if parts.uri.path() != "/" {
        return error(StatusCode::NOT_FOUND);
    }
    let body = if parts.method == Method::HEAD {
        Body::empty()
    } else {
        Body::full(Bytes::from_static(crate::welcome::PAGE.as_bytes()))
    };
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(crate::welcome::PAGE.len()),
    );
    r
}

fn redirect_https(parts: &http::request::Parts, port: u16) -> Response<Body> {
    let host = super::request_head::request_host(parts);
    if host.is_empty() {
        return error(StatusCode::BAD_REQUEST);
    }
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let location = if port == 443 {
        format!("https://{host}{pq}")
    } else {
        format!("https://{host}:{port}{pq}")
    };
    let Ok(loc) = HeaderValue::from_str(&location) else {
        return error(StatusCode::BAD_REQUEST);
    };
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
    r.headers_mut().insert(header::LOCATION, loc);
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

impl<'a> Target<'a> {
    /// The response filters this target's answer passes.
    pub(super) fn response_filters(&self, site: &'a super::Site) -> &'a super::ResponseFilters {
        match self {
            Target::Route { route, .. } => &route.response,
            Target::Handler(_) => &site.response,
            Target::NotFound => &site.not_found,
        }
    }
}

impl Handler {
    /// Whether the compression response filter takes this handler's
    /// answers: not those of static files (they negotiate their own
    /// coding), of a cache (compressed before it stored them) or of routes
    /// (each has its own).
    pub(super) fn filter_compresses(&self) -> bool {
        !matches!(
            self,
            Handler::Static(_) | Handler::Cached(..) | Handler::Routes { .. }
        )
    }
}
