//! A request's way through weir once hyper has parsed it: limits, choosing
//! the site by Host, the site's handler, error pages and extra headers, the
//! access log. Read [`Listener::handle`] top to bottom.
//!
//! Never blocks and never allocates on the cached static path beyond the
//! response itself: sites are chosen by comparing bytes, headers that never
//! change are `HeaderValue::from_static`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};

use crate::access_log::{self, AccessLog};
use weir_config::{Config, HandlerConfig, Limits, SiteConfig};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::response::{error, method_not_allowed};
use weir_static::StaticFiles;

/// One site, ready to answer.
pub struct Site {
    pub cfg: Arc<SiteConfig>,
    handler: Handler,
    access_log: Option<AccessLog>,
}

enum Handler {
    Static(Arc<StaticFiles>),
    Welcome,
    RedirectHttps {
        port: u16,
    },
    Proxy(Arc<weir_proxy::Proxy>),
    /// Routes by path, then the fallback (404 without one).
    Routes {
        routes: Vec<Route>,
        fallback: Option<Box<Handler>>,
    },
}

/// A `[[site."x".route]]`: matching paths go to its proxy.
struct Route {
    cfg: weir_config::proxy::RouteConfig,
    proxy: Arc<weir_proxy::Proxy>,
}

/// The sites of one listening address.
pub struct Listener {
    sites: Vec<Arc<Site>>,
    default: Arc<Site>,
    limits: Limits,
    /// `Alt-Svc` advertising HTTP/3, on TLS listeners with `tls.http3`.
    alt_svc: Option<HeaderValue>,
    /// ACME HTTP-01 answers, on plain listeners.
    acme: Option<Arc<weir_tls::Challenges>>,
    /// Whether any site here writes an access log (which times requests):
    /// without one, no clock is read for it.
    logs: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("site \"{site}\": {source}")]
    Static {
        site: String,
        source: weir_static::Error,
    },
    #[error("site \"{site}\": access log: {source}")]
    AccessLog {
        site: String,
        source: std::io::Error,
    },
}

/// Builds every site once; listeners share them.
pub fn build_sites(cfg: &Config) -> Result<Vec<Arc<Site>>, SiteError> {
    // The HTTP/1.1 engine setting covers both sides of the proxy.
    let own_h1 = cfg.server.http1 == weir_config::Http1Engine::Fast;
    cfg.sites
        .iter()
        .map(|s| {
            let handler = build_handler(&s.name, &s.handler, own_h1)?;
            let access_log = match &s.access_log {
                Some(a) => Some(AccessLog::open(a).map_err(|source| SiteError::AccessLog {
                    site: s.name.clone(),
                    source,
                })?),
                None => None,
            };
            Ok(Arc::new(Site {
                cfg: s.clone(),
                handler,
                access_log,
            }))
        })
        .collect()
}

fn build_handler(site: &str, h: &HandlerConfig, own_h1: bool) -> Result<Handler, SiteError> {
    Ok(match h {
        HandlerConfig::Static(opts) => Handler::Static(StaticFiles::new(opts.clone()).map_err(
            |source| SiteError::Static {
                site: site.to_string(),
                source,
            },
        )?),
        HandlerConfig::Welcome => Handler::Welcome,
        HandlerConfig::RedirectHttps { port } => Handler::RedirectHttps { port: *port },
        HandlerConfig::Proxy(p) => Handler::Proxy(weir_proxy::Proxy::new(p.clone(), own_h1)),
        HandlerConfig::Routes { routes, fallback } => Handler::Routes {
            routes: routes
                .iter()
                .filter_map(|r| match &r.handler {
                    HandlerConfig::Proxy(p) => Some(Route {
                        cfg: r.clone(),
                        proxy: weir_proxy::Proxy::new(p.clone(), own_h1),
                    }),
                    _ => None,
                })
                .collect(),
            fallback: match fallback {
                Some(f) => Some(Box::new(build_handler(site, f, own_h1)?)),
                None => None,
            },
        },
    })
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
    if parts.method == http::Method::CONNECT && !matches!(handler, Handler::Proxy(_)) {
        return method_not_allowed();
    }
    match handler {
        Handler::Static(files) => files.serve(parts, parts.uri.path()).await,
        Handler::Welcome => welcome(parts),
        Handler::RedirectHttps { port } => redirect_https(parts, request_host(parts), *port),
        // Boxed: the proxy's future is large, and hyper moves the request
        // future into place on every request; static requests must not pay
        // for copying it.
        Handler::Proxy(p) => Box::pin(p.serve(parts, upstream_body(body), conn, path)).await,
        Handler::Routes { .. } => error(StatusCode::NOT_FOUND),
    }
}

impl Listener {
    pub fn new(all: &[Arc<Site>], indexes: &[usize], default: usize, limits: Limits) -> Self {
        let sites: Vec<Arc<Site>> = indexes.iter().map(|&i| all[i].clone()).collect();
        let default = all[default].clone();
        let logs = sites
            .iter()
            .chain([&default])
            .any(|s| s.access_log.is_some());
        Listener {
            logs,
            sites,
            default,
            limits,
            alt_svc: None,
            acme: None,
        }
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

    /// The limits on a request head hyper does not enforce for us: the
    /// answer when the target (`target_len` bytes) or the `count` fields
    /// (each a name's and a value's length) are past them.
    fn head_over_limits(
        &self,
        target_len: usize,
        count: usize,
        fields: impl Iterator<Item = (usize, usize)>,
    ) -> Option<StatusCode> {
        if target_len > self.limits.uri {
            return Some(StatusCode::URI_TOO_LONG);
        }
        let too_many = count > self.limits.headers;
        let size = target_len + fields.map(|(n, v)| n + v + 4).sum::<usize>();
        (too_many || size > self.limits.header_size)
            .then_some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
    }

    /// Answers one request. `B` is the request body as the protocol layer
    /// delivers it (hyper's `Incoming` for HTTP/1 and HTTP/2).
    pub async fn handle<B>(&self, req: Request<B>, conn: &ConnInfo) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<weir_http::body::BodyError>,
    {
        let started = self.logs.then(Instant::now);
        let (mut parts, body) = req.into_parts();

        // Limits hyper does not enforce for us.
        let target_len = parts.uri.path_and_query().map_or(0, |p| p.as_str().len());
        let fields = parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().len(), v.len()));
        if let Some(status) = self.head_over_limits(target_len, parts.headers.len(), fields) {
            return closing(error(status));
        }
        if let Some(len) = parts.headers.get(header::CONTENT_LENGTH)
            && len
                .to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|n| n > self.limits.body)
        {
            return closing(error(StatusCode::PAYLOAD_TOO_LARGE));
        }

        if let Some(acme) = &self.acme
            && let Some(token) = parts
                .uri
                .path()
                .strip_prefix("/.well-known/acme-challenge/")
            && let Some(key_auth) = acme.http01(token)
        {
            let mut r = Response::new(Body::full(Bytes::from(key_auth)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            return r;
        }

        // One site: no need to read the Host field at all.
        let site = if self.sites.len() == 1 {
            &self.default
        } else {
            self.pick(request_host(&parts))
        };

        let mut resp = match &site.handler {
            Handler::Routes { routes, fallback } => {
                let path = parts.uri.path();
                match routes.iter().find(|r| r.cfg.pattern.matches(path)) {
                    Some(r) => {
                        let rewritten = match r.cfg.rewrite.apply(&r.cfg.pattern, path) {
                            std::borrow::Cow::Owned(p) => Some(p),
                            std::borrow::Cow::Borrowed(_) => None,
                        };
                        Box::pin(r.proxy.serve(
                            &mut parts,
                            upstream_body(body),
                            conn,
                            rewritten.as_deref(),
                        ))
                        .await
                    }
                    None => match fallback {
                        Some(h) => leaf(h, &mut parts, body, conn, None).await,
                        None => error(StatusCode::NOT_FOUND),
                    },
                }
            }
            h => leaf(h, &mut parts, body, conn, None).await,
        };
        finish(&site.cfg, &mut resp, parts.method == http::Method::HEAD);
        if let Some(v) = &self.alt_svc {
            resp.headers_mut().insert(header::ALT_SVC, v.clone());
        }

        if let Some(log) = &site.access_log {
            log.log(&access_log::Entry {
                peer: conn.peer,
                method: parts.method.as_str(),
                target: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
                version: parts.version,
                status: resp.status().as_u16(),
                bytes: resp
                    .headers()
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok()),
                referer: parts
                    .headers
                    .get(header::REFERER)
                    .and_then(|v| v.to_str().ok()),
                user_agent: parts
                    .headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok()),
                host: request_host(&parts),
                duration: started.map_or(Duration::ZERO, |t| t.elapsed()),
            });
        }
        weir_http::header_maps::give(parts.headers);
        resp
    }

    /// The site for a host: exact name, then wildcard, then catch-all, then the default.
    fn pick(&self, host: &str) -> &Arc<Site> {
        use weir_config::HostPattern as H;
        let rank = |s: &Arc<Site>| match s.cfg.host {
            H::Exact(_) => 0,
            H::Wildcard(_) => 1,
            H::Any => 2,
        };
        for r in 0..3 {
            if let Some(s) = self
                .sites
                .iter()
                .find(|s| rank(s) == r && s.cfg.host.matches(host))
            {
                return s;
            }
        }
        &self.default
    }
}

/// The request's host without port: the URI authority (HTTP/2, absolute
/// form) or the Host header.
fn request_host(parts: &http::request::Parts) -> &str {
    let raw = parts
        .uri
        .host()
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("");
    strip_port(raw)
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split(']').next().map_or(h, |s| &h[..s.len() + 1]);
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    }
}

static SERVER: HeaderValue = HeaderValue::from_static("weir");

/// What every response from a site gets: the Server header, the site's
/// extra headers, and its custom error page when it has one.
fn finish(site: &SiteConfig, resp: &mut Response<Body>, head: bool) {
    let status = resp.status().as_u16();
    if status >= 400
        && let Some(page) = site.error_pages.get(&status)
    {
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(page.len()));
        h.remove(header::CONTENT_ENCODING);
        *resp.body_mut() = if head {
            Body::empty()
        } else {
            Body::full(page.clone())
        };
    }
    let h = resp.headers_mut();
    h.insert(header::SERVER, SERVER.clone());
    for (k, v) in &site.headers {
        h.insert(k.clone(), v.clone());
    }
}

fn closing(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
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

fn redirect_https(parts: &http::request::Parts, host: &str, port: u16) -> Response<Body> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_from_hosts() {
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
        let sites = build_sites(&cfg).unwrap();
        let l = Listener::new(&sites, &[0], 0, cfg.server.limits.clone());
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
        };
        let req = Request::new(http_body_util::Empty::<Bytes>::new());
        let fut = l.handle(req, &conn);
        let size = std::mem::size_of_val(&fut);
        eprintln!("request future: {size} bytes");
        assert!(size <= 1536, "request future is {size} bytes");
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
        let sites = build_sites(&cfg).unwrap();
        let Handler::Proxy(p) = &sites[0].handler else {
            panic!("not a proxy site");
        };
        let conn = ConnInfo {
            peer: ([127, 0, 0, 1], 1).into(),
            local: ([127, 0, 0, 1], 2).into(),
            tls: false,
        };
        let (mut parts, _) = Request::new(()).into_parts();
        let fut = p.serve(&mut parts, Body::empty(), &conn, None);
        let size = std::mem::size_of_val(&fut);
        eprintln!("proxy future: {size} bytes");
        assert!(size <= 1536, "proxy future is {size} bytes");
    }
}
