//! The handler phase: the one handler a route chose answers the request.
//! A handler is a type implementing [`Handle`] in a module of its own under
//! `handler/`, and one line in [`handlers!`]'s table below, which names
//! its variant and the config it is built from; the table generates the
//! [`Handler`] enum (static dispatch: no box, no virtual call), its
//! dispatch and [`build`], called once per site and route at config load.
//! Only answers; never adds site-wide headers or logs (the response
//! filters and the log phase do).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};

use weir_config::HandlerConfig;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::response::{error, method_not_allowed};
use weir_static::StaticFiles;

use super::SiteError;

mod app;
mod cache;
mod fastcgi;
mod files;
mod proxy;
mod redirect;
mod redirect_https;
mod respond;
mod welcome;

/// One handler: what answers the requests of the routes and sites it is
/// built for.
pub(super) trait Handle: Send + Sync {
    /// Answers one request. `body` is the request body, already held to
    /// the body limit and the stall timeout; a handler that does not read
    /// it drops it.
    fn serve(&self, req: Req<'_>, body: Body) -> impl Future<Output = Response<Body>> + Send;

    /// Whether it answers CONNECT (HTTP/2 extended CONNECT, WebSockets);
    /// anything else's 2xx would open a tunnel to nowhere, so the handler
    /// phase answers 405 for the others.
    fn tunnels(&self) -> bool {
        false
    }

    /// Whether the compression response filter takes its answers: not
    /// when it encodes its own.
    fn filter_compresses(&self) -> bool {
        true
    }

    /// The state it runs that a reload may keep and the admin API reads.
    fn owns(&self) -> Owns<'_> {
        Owns::default()
    }
}

/// What a handler runs, for those that look from outside (a reload keeping
/// what is unchanged, the admin API, the metrics).
#[derive(Default)]
pub(super) struct Owns<'a> {
    pub proxy: Option<&'a Arc<weir_proxy::Proxy>>,
    pub cache: Option<&'a weir_cache::Cache>,
    pub files: Option<&'a Arc<StaticFiles>>,
    pub fastcgi: Option<&'a Arc<weir_fastcgi::FastCgi>>,
    pub app: Option<&'a Arc<weir_apps::App>>,
}

/// One request as the handler phase gives it to a handler.
pub(super) struct Req<'a> {
    pub parts: &'a mut http::request::Parts,
    pub conn: &'a ConnInfo,
    /// The path (and query, after `?`) a route's rewrite made.
    pub path: Option<&'a str>,
    /// The client's address (after trusted proxies).
    pub client: std::net::IpAddr,
    /// A route's `path_regex` groups.
    pub captures: &'a [String],
}

impl Req<'_> {
    /// The path to answer: the rewritten one (without its query), else the
    /// request's.
    pub fn path(&self) -> &str {
        self.path
            .map_or(self.parts.uri.path(), |p| p.split('?').next().unwrap_or(p))
    }
}

/// How handlers are built: where (site, route), what the config around
/// the handler adds (the cache and compression of a proxy), the worker
/// slots, and the sites of the config being replaced, whose state (idle
/// upstream connections, health, balancer counters, file caches) a
/// handler with the same settings keeps.
pub(super) struct At<'a> {
    pub site: &'a str,
    /// The route it answers (`*`: the site's own handler).
    pub route: &'a str,
    /// The cache policy in front of a proxy here.
    pub cache: Option<&'a Arc<weir_config::cache::CachePolicy>>,
    /// The compression of answers here.
    pub compress: Option<&'a Arc<weir_config::files::CompressOptions>>,
    pub b: &'a Build<'a>,
}

/// What every handler built from one config shares.
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

    /// The first handler of the previous config (of site `site` only, if
    /// given) for which `f` finds something.
    pub(super) fn find_previous<T>(
        &self,
        site: Option<&str>,
        mut f: impl FnMut(&Handler) -> Option<T>,
    ) -> Option<T> {
        self.previous
            .iter()
            .filter(|s| site.is_none_or(|n| s.cfg.name == n))
            .find_map(|s| s.handler.all().find_map(|(_, h)| f(h)))
    }
}

impl At<'_> {
    /// The proxy for `cfg` here (see [`Build::proxy`]).
    pub fn proxy(&self, cfg: &Arc<weir_config::proxy::ProxyConfig>) -> Arc<weir_proxy::Proxy> {
        self.b.proxy(cfg, self.site, self.route)
    }

    /// Static files with `opts`: those of the previous config with the same
    /// options (their file cache with them), or new ones.
    pub fn files(&self, opts: &weir_config::files::Options) -> Result<Arc<StaticFiles>, SiteError> {
        if let Some(f) = self.b.find_previous(None, |h| {
            h.owns().files.filter(|f| f.options() == opts).cloned()
        }) {
            return Ok(f);
        }
        StaticFiles::new(opts.clone()).map_err(|source| SiteError::Static {
            site: self.site.to_string(),
            source,
        })
    }
}

/// The registration table: `Variant(module::Type) = config pattern [if
/// guard] => how it is built,` one line per handler, tried in order (so a
/// guarded line comes before the plain one for the same config), after
/// the configs no handler takes. Generates
/// [`Handler`], its dispatch to each type's [`Handle`] methods, and
/// [`build`].
macro_rules! handlers {
    (
        fn $build:ident($cfg:ident, $at:ident);
        // A config that is no handler's, and the error it gets.
        refuse $other:pat => $refuse:expr;
        $( $(#[$doc:meta])* $variant:ident($ty:ty) = $pat:pat $(if $guard:expr)? => $make:expr, )*
    ) => {
        /// A registered handler.
        pub(super) enum Handler {
            $( $(#[$doc])* $variant($ty), )*
        }

        pin_project_lite::pin_project! {
            /// A request being answered: the registered handler's own future,
            /// or an answer known before any handler ran. Dispatch is a
            /// variant, not an async layer, so a request's future holds its
            /// arguments once (it is stored per connection).
            #[project = ServingProj]
            pub(super) enum Serving<$($variant),*> {
                $( $variant { #[pin] fut: $variant }, )*
                Ready { resp: Option<Response<Body>> },
            }
        }

        impl<$($variant: Future<Output = Response<Body>>),*> Future for Serving<$($variant),*> {
            type Output = Response<Body>;

            fn poll(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Response<Body>> {
                match self.project() {
                    $( ServingProj::$variant { fut } => fut.poll(cx), )*
                    ServingProj::Ready { resp } => {
                        std::task::Poll::Ready(resp.take().expect("Serving polled after its answer"))
                    }
                }
            }
        }

        /// Answers one request with its handler (see [`Handle::serve`]), or
        /// with the answer the handler phase already has.
        fn dispatch<'a>(
            to: Result<(&'a Handler, Req<'a>, Body), Response<Body>>,
        ) -> impl Future<Output = Response<Body>> + Send + 'a {
            match to {
                $( Ok((Handler::$variant(h), req, body)) => Serving::$variant { fut: h.serve(req, body) }, )*
                Err(resp) => Serving::Ready { resp: Some(resp) },
            }
        }

        impl Handler {

            /// See [`Handle::tunnels`].
            pub(super) fn tunnels(&self) -> bool {
                match self {
                    $( Handler::$variant(h) => h.tunnels(), )*
                }
            }

            /// See [`Handle::filter_compresses`].
            pub(super) fn filter_compresses(&self) -> bool {
                match self {
                    $( Handler::$variant(h) => h.filter_compresses(), )*
                }
            }

            /// See [`Handle::owns`].
            pub(super) fn owns(&self) -> Owns<'_> {
                match self {
                    $( Handler::$variant(h) => h.owns(), )*
                }
            }
        }

        /// The handler `cfg` configures, built once (`at`: where, with
        /// what around it).
        pub(super) fn $build($cfg: &HandlerConfig, $at: &At<'_>) -> Result<Handler, SiteError> {
            Ok(match $cfg {
                $( $pat $(if $guard)? => Handler::$variant($make), )*
                $other => return $refuse,
            })
        }
    };
}

handlers! {
    fn build(cfg, at);
    // Routes are the route phase's (`build_site`), never a route's handler.
    refuse HandlerConfig::Routes { .. } => Err(SiteError::NestedRoutes {
        site: at.site.to_string(),
    });
    /// Files under a root.
    Static(files::Files) = HandlerConfig::Static(opts) => files::Files::build(opts, at)?,
    /// The built-in welcome page.
    Welcome(welcome::Welcome) = HandlerConfig::Welcome => welcome::Welcome,
    /// Every request to `https://host[:port]/path`.
    RedirectHttps(redirect_https::RedirectHttps) = HandlerConfig::RedirectHttps { port } =>
        redirect_https::RedirectHttps { port: *port },
    /// A redirect to a URL made from the request.
    Redirect(redirect::Redirect) = HandlerConfig::Redirect(r) => redirect::Redirect(r.clone()),
    /// A fixed answer.
    Respond(respond::Respond) = HandlerConfig::Respond(r) => respond::Respond(r.clone()),
    /// The proxy behind the cache.
    Cached(cache::Cached) = HandlerConfig::Proxy(p) if at.cache.is_some() =>
        cache::Cached::build(p, at),
    /// The reverse proxy.
    Proxy(proxy::Proxied) = HandlerConfig::Proxy(p) => proxy::Proxied(at.proxy(p)),
    /// Scripts through FastCGI; the root's other files served by weir.
    FastCgi(fastcgi::FastCgi) = HandlerConfig::FastCgi(f) => fastcgi::FastCgi::build(f, at)?,
    /// An application weir runs, proxied to.
    App(app::App) = HandlerConfig::App(a) => app::App::build(a, at)?,
}

/// What answers the requests of a site: one handler, or routes.
pub(super) enum SiteHandler {
    One(Handler),
    /// Routes by path, then the fallback (404 without one).
    Routes {
        routes: Vec<Route>,
        fallback: Option<Handler>,
    },
}

/// A `[[site."x".route]]`: matching requests go through its filters to
/// its handler.
pub(super) struct Route {
    pub cfg: weir_config::routes::RouteConfig,
    pub handler: Handler,
    pub filters: Option<Arc<super::filter::Filters>>,
    /// The request filters of its requests (the site's layer first).
    pub request: super::filter::RequestFilters,
    /// The response filters of its answers (the site's layer included).
    pub response: super::ResponseFilters,
    pub counts: Arc<weir_http::metrics::RequestCounts>,
    /// How spans and metrics name it (`/api/*`).
    pub label: Arc<str>,
}

impl SiteHandler {
    /// The site's own handler, or its routes' fallback.
    pub(super) fn own(&self) -> Option<&Handler> {
        match self {
            SiteHandler::One(h) => Some(h),
            SiteHandler::Routes { fallback, .. } => fallback.as_ref(),
        }
    }

    /// Every handler of the site, with its route (`None`: the site's own
    /// or fallback).
    pub(super) fn all(&self) -> impl Iterator<Item = (Option<&Route>, &Handler)> {
        let routes = match self {
            SiteHandler::Routes { routes, .. } => &routes[..],
            SiteHandler::One(_) => &[],
        };
        routes
            .iter()
            .map(|r| (Some(r), &r.handler))
            .chain(self.own().map(|h| (None, h)))
    }
}

/// The site's handler (`cfg`), with its routes and their filters;
/// `site_filters`: the site's, whose response filters follow a route's own.
pub(super) fn build_site(
    site: &weir_config::SiteConfig,
    site_filters: Option<&Arc<super::filter::Filters>>,
    b: &Build<'_>,
) -> Result<SiteHandler, SiteError> {
    let at = At {
        site: &site.name,
        route: "*",
        cache: site.cache.as_ref(),
        compress: site.compress.as_ref(),
        b,
    };
    let HandlerConfig::Routes { routes, fallback } = &site.handler else {
        return Ok(SiteHandler::One(build(&site.handler, &at)?));
    };
    let routes = routes
        .iter()
        .map(|r| {
            let label = super::route_label(&r.pattern);
            let handler = build(
                &r.handler,
                &At {
                    route: &label,
                    cache: r.cache.as_ref(),
                    compress: r.compress.as_ref(),
                    ..at
                },
            )?;
            let filters = super::filter::Filters::build(
                &r.filters,
                format!("site \"{}\" route {label}", site.name),
                super::filter::ROUTE,
                b.workers,
            )
            .map(Arc::new);
            let compress = r.compress.as_ref().filter(|_| handler.filter_compresses());
            Ok(Route {
                cfg: r.clone(),
                request: super::filter::chain(site_filters.map(|f| &**f), filters.as_deref()),
                response: super::response::chain(compress, filters.as_ref(), site_filters),
                handler,
                filters,
                counts: b.registry.counts(&site.name, &label),
                label: label.into(),
            })
        })
        .collect::<Result<_, SiteError>>()?;
    let fallback = match fallback {
        Some(f) => Some(build(f, &at)?),
        None => None,
    };
    Ok(SiteHandler::Routes { routes, fallback })
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
pub(super) fn serve<'a, B>(
    target: &'a Target<'a>,
    parts: &'a mut http::request::Parts,
    body: B,
    conn: &'a ConnInfo,
    client: std::net::IpAddr,
    body_limits: BodyLimits,
) -> impl Future<Output = Response<Body>> + Send + 'a
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<weir_http::body::BodyError>,
{
    let (handler, path, captures) = match target {
        Target::Handler(h) => (*h, None, &[][..]),
        Target::Route {
            route,
            path,
            captures,
        } => (&route.handler, path.as_deref(), &captures[..]),
        Target::NotFound => return dispatch(Err(error(StatusCode::NOT_FOUND))),
    };
    if parts.method == http::Method::CONNECT && !handler.tunnels() {
        return dispatch(Err(method_not_allowed()));
    }
    let req = Req {
        parts,
        conn,
        path,
        client,
        captures,
    };
    dispatch(Ok((handler, req, request_body(body, body_limits))))
}

/// What a request body is held to on its way to a handler.
#[derive(Clone, Copy)]
pub(super) struct BodyLimits {
    /// The most bytes sent on.
    pub max: u64,
    /// The longest the client may go quiet in the middle of it.
    pub stall: std::time::Duration,
}

/// A request body as handlers read it: no box for a request without one;
/// cut off past `max` bytes (a body that declared its length was checked
/// before; a chunked one is counted as it streams, and the proxy answers
/// 413 when it overflows); failed when the client stalls longer than
/// `stall` (the proxy answers 408).
fn request_body<B>(body: B, limits: BodyLimits) -> Body
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

impl<'a> Target<'a> {
    /// The request filters this target's request passes.
    pub(super) fn request_filters(
        &self,
        site: &'a super::Site,
    ) -> &'a super::filter::RequestFilters {
        match self {
            Target::Route { route, .. } => &route.request,
            Target::Handler(_) | Target::NotFound => &site.request,
        }
    }

    /// The response filters this target's answer passes.
    pub(super) fn response_filters(&self, site: &'a super::Site) -> &'a super::ResponseFilters {
        match self {
            Target::Route { route, .. } => &route.response,
            Target::Handler(_) => &site.response,
            Target::NotFound => &site.not_found,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::super::tests::test_store;
    use super::super::{Registry, build_sites};
    use super::{BodyLimits, Handler, SiteHandler, Target};

    /// The table builds each config's handler once: a proxy behind a cache
    /// is the cache's, without one the proxy's; only those tunnel, and
    /// those that encode their own answers are left by the compression
    /// filter. A registered handler answers through `serve`.
    #[tokio::test]
    async fn handlers_are_registered_and_dispatched() {
        let cfg = weir_config::load_str(
            "t.toml",
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nroot = \".\"\n\
             [[site.\"a\".route]]\npath = \"/c/\"\nproxy = { to = [\"127.0.0.1:2\"] }\ncache = true\n\
             [[site.\"a\".route]]\npath = \"/p/\"\nproxy = { to = [\"127.0.0.1:3\"] }\n\
             [[site.\"a\".route]]\npath = \"/r/\"\nrespond = { status = 418, body = \"tea\" }\n",
            std::path::Path::new("."),
        )
        .unwrap();
        let sites = build_sites(&cfg, &[], &Registry::new(1), &test_store()).unwrap();
        let SiteHandler::Routes { routes, fallback } = &sites[0].handler else {
            panic!("not a routed site");
        };
        let kinds: Vec<_> = routes
            .iter()
            .map(|r| &r.handler)
            .chain(fallback)
            .map(|h| match h {
                Handler::Cached(_) => "cache",
                Handler::Proxy(_) => "proxy",
                Handler::Respond(_) => "respond",
                Handler::Static(_) => "static",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["cache", "proxy", "respond", "static"]);
        let tunnels: Vec<_> = routes.iter().map(|r| r.handler.tunnels()).collect();
        assert_eq!(tunnels, [true, true, false]);
        let compressed: Vec<_> = routes
            .iter()
            .map(|r| r.handler.filter_compresses())
            .collect();
        assert_eq!(compressed, [false, true, true]);
        assert!(fallback.as_ref().is_some_and(|f| !f.filter_compresses()));
        assert_eq!(sites[0].caches().len(), 1);
        assert_eq!(sites[0].proxies().len(), 2);

        let conn = weir_http::conn::ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
            tls_info: None,
            worker: Default::default(),
        };
        let limits = BodyLimits {
            max: 1 << 20,
            stall: std::time::Duration::from_secs(1),
        };
        let serve = |method: http::Method| {
            let (mut parts, ()) = http::Request::builder()
                .method(method)
                .uri("/r/")
                .body(())
                .unwrap()
                .into_parts();
            let target = Target::Route {
                route: &routes[2],
                path: None,
                captures: Vec::new(),
            };
            let conn = &conn;
            async move {
                super::serve(
                    &target,
                    &mut parts,
                    http_body_util::Empty::<bytes::Bytes>::new(),
                    conn,
                    [127, 0, 0, 1].into(),
                    limits,
                )
                .await
            }
        };
        let r = serve(http::Method::GET).await;
        assert_eq!(r.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(r.headers()["content-length"], "3");
        // CONNECT to a handler that does not tunnel.
        let r = serve(http::Method::CONNECT).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
