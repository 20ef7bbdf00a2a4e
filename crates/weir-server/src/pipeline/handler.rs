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
    /// The proxy behind the cache.
    Cached(Arc<weir_proxy::Proxy>, weir_cache::Cache),
    /// Routes by path, then the fallback (404 without one).
    Routes {
        routes: Vec<Route>,
        fallback: Option<Box<Handler>>,
    },
}

/// A `[[site."x".route]]`: matching paths go to its proxy (through its
/// cache, when it has one).
pub(super) struct Route {
    pub cfg: weir_config::proxy::RouteConfig,
    pub proxy: Arc<weir_proxy::Proxy>,
    pub cache: Option<weir_cache::Cache>,
    pub counts: Arc<weir_http::metrics::RequestCounts>,
}

/// How handlers are built: the engine settings, and the handlers of the
/// config being replaced, whose state (idle upstream connections, health,
/// balancer counters, file caches) a handler with the same settings keeps.
pub(super) struct Build<'a> {
    pub own_h1: bool,
    pub workers: usize,
    pub previous: &'a [Arc<super::Site>],
    pub registry: &'a super::Registry,
    pub cache: &'a Arc<weir_cache::Store>,
}

impl Build<'_> {
    /// The proxy for `cfg` at `route` (`*`: the site's own) of `site`: the
    /// one there before if its settings are unchanged; else a new one that
    /// keeps that one's upstreams whose own settings are unchanged.
    fn proxy(
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
        weir_proxy::Proxy::after(cfg.clone(), self.own_h1, self.workers, &before)
    }

    /// The cache `policy` puts in front of `proxy`, in the shared store.
    fn cache(
        &self,
        policy: Option<&Arc<weir_config::cache::CachePolicy>>,
        proxy: &Arc<weir_proxy::Proxy>,
    ) -> Option<weir_cache::Cache> {
        let origin: Arc<dyn weir_cache::Origin> = proxy.clone();
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
    /// Calls `f` with every proxy this handler runs.
    pub(super) fn each_proxy(&self, f: &mut dyn FnMut(&Arc<weir_proxy::Proxy>)) {
        match self {
            Handler::Proxy(p) | Handler::Cached(p, _) => f(p),
            Handler::Routes { routes, fallback } => {
                for r in routes {
                    f(&r.proxy);
                }
                if let Some(h) = fallback {
                    h.each_proxy(f);
                }
            }
            _ => {}
        }
    }
}

/// `cache`: the site's cache policy, for the site's own proxy.
pub(super) fn build_handler(
    site: &str,
    h: &HandlerConfig,
    cache: Option<&Arc<weir_config::cache::CachePolicy>>,
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
            let proxy = b.proxy(p, site, "*");
            match b.cache(cache, &proxy) {
                Some(c) => Handler::Cached(proxy, c),
                None => Handler::Proxy(proxy),
            }
        }
        HandlerConfig::Routes { routes, fallback } => Handler::Routes {
            routes: routes
                .iter()
                .filter_map(|r| match &r.handler {
                    HandlerConfig::Proxy(p) => {
                        let label = super::route_label(&r.pattern);
                        let proxy = b.proxy(p, site, &label);
                        Some(Route {
                            cfg: r.clone(),
                            cache: b.cache(r.cache.as_ref(), &proxy),
                            proxy,
                            counts: b.registry.counts(site, &label),
                        })
                    }
                    _ => None,
                })
                .collect(),
            fallback: match fallback {
                Some(f) => Some(Box::new(build_handler(site, f, cache, b)?)),
                None => None,
            },
        },
    })
}

/// What the handler phase is to run.
pub(super) enum Target<'a> {
    /// A site's own handler, or a routed site's fallback.
    Handler(&'a Handler),
    /// A route's proxy, with the path its rewrite made (if it changed it).
    Route(&'a Route, Option<String>),
    /// A routed site with no matching route and no fallback.
    NotFound,
}

/// Answers the request with the handler `target` names.
pub(super) async fn serve<B>(
    target: Target<'_>,
    parts: &mut http::request::Parts,
    body: B,
    conn: &ConnInfo,
) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    match target {
        Target::Handler(h) => leaf(h, parts, body, conn, None).await,
        // Boxed, as in `leaf`.
        Target::Route(r, path) => match &r.cache {
            Some(c) => Box::pin(c.serve(parts, upstream_body(body), conn, path.as_deref())).await,
            None => {
                Box::pin(
                    r.proxy
                        .serve(parts, upstream_body(body), conn, path.as_deref()),
                )
                .await
            }
        },
        Target::NotFound => error(StatusCode::NOT_FOUND),
    }
}

/// A request body as the proxy sends it on: no box for a request without one.
fn upstream_body<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    if body.is_end_stream() {
        Body::empty()
    } else {
        Body::stream(body)
    }
}

/// The handlers that answer by themselves (everything but `Routes`).
async fn leaf<B>(
    handler: &Handler,
    parts: &mut http::request::Parts,
    body: B,
    conn: &ConnInfo,
    path: Option<&str>,
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
    match handler {
        Handler::Static(files) => files.serve(parts, parts.uri.path()).await,
        Handler::Welcome => welcome(parts),
        Handler::RedirectHttps { port } => redirect_https(parts, *port),
        // Boxed: the proxy's future is large, and hyper moves the request
        // future into place on every request; static requests must not pay
        // for copying it.
        Handler::Proxy(p) => Box::pin(p.serve(parts, upstream_body(body), conn, path)).await,
        Handler::Cached(_, c) => Box::pin(c.serve(parts, upstream_body(body), conn, path)).await,
        Handler::Routes { .. } => error(StatusCode::NOT_FOUND),
    }
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
