//! Configuration: the TOML file (`raw`), turned into a validated [`Config`]
//! that the server runs from.
//!
//! Two layers, as sozu and ripgrep do it: serde parses the file into `raw`
//! structs, then [`load_str`] checks everything it can before a socket is
//! opened (paths, addresses, certificates, conflicting listeners) and reports
//! every problem as `file:line:col: message`. A config that has errors never
//! starts a server.

pub mod admin;
pub mod app;
pub mod cache;
pub mod cluster;
pub mod error;
pub mod fastcgi;
pub mod files;
mod introspect;
pub mod log_format;
mod parse;
pub mod proxy;
pub mod raw;
pub mod routes;
pub mod stream;
pub mod template;
mod tls;
pub mod traces;
pub mod traffic;
pub mod units;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use serde_spanned::Spanned;

pub use error::{CertCheck, ConfigErrors, Diagnostic};
use error::{CertProblem, Collector, FilesReadable};
use raw::*;

use crate::files::{CacheOptions, CompressOptions, Encoding};
pub use tls::{
    AcmeConfig, ChallengeKind, Issuer, KeyType, OnDemandConfig, TlsConfig, TlsGlobal,
    default_storage_dir, is_internal_name,
};

/// A validated configuration, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it came from (a path, or `<built-in>`), for messages.
    pub source: String,
    pub server: ServerConfig,
    pub sites: Vec<Arc<SiteConfig>>,
    pub listeners: Vec<ListenerConfig>,
    /// Certificates, automatic HTTPS and HTTP/3: `[tls]`.
    pub tls: TlsGlobal,
    /// The admin API: `[admin]`.
    pub admin: admin::AdminConfig,
    /// Where cached responses are kept: `[cache]`.
    pub cache: cache::CacheStorage,
    /// Several weir processes as one through Redis: `[cluster]`.
    pub cluster: Option<cluster::ClusterConfig>,
    /// OpenTelemetry traces over OTLP: `[traces]`.
    pub traces: Option<traces::TracesConfig>,
    /// The text it was read from (`None` for the built-in welcome page),
    /// which the admin API's `GET /config` returns.
    pub text: Option<Arc<str>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub workers: usize,
    pub runtime: RuntimeMode,
    pub accept: AcceptSteering,
    pub log_level: String,
    pub log_json: bool,
    pub grace_period: Duration,
    pub timeouts: Timeouts,
    pub limits: Limits,
}

/// Which per-core worker a new connection goes to (`server.accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptSteering {
    /// The kernel's SO_REUSEPORT hash of the addresses: an even spread.
    Hash,
    /// The worker whose index is the CPU that received the connection
    /// (modulo the workers): locality with a multi-queue NIC, and on a
    /// machine shared with a local client, the client's connections kept
    /// together on one worker.
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeMode {
    /// One current-thread runtime per worker, each with its own SO_REUSEPORT socket.
    PerCore,
    /// One multi-threaded, work-stealing runtime.
    Shared,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub header: Duration,
    pub keepalive: Duration,
    pub body: Duration,
    pub write: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub header_size: usize,
    pub headers: usize,
    pub uri: usize,
    pub body: u64,
    pub connections: usize,
    pub h2_streams: u32,
    /// Most TLS handshakes a worker answers in one pass over its other work
    /// (`tls::turns`).
    pub tls_handshakes: usize,
}

/// One socket address weir listens on, and the sites it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    pub addr: SocketAddr,
    pub tls: bool,
    /// Indexes into [`Config::sites`], in file order.
    pub sites: Vec<usize>,
    /// Index into [`Config::sites`] of the site for unmatched hosts.
    pub default_site: usize,
    /// PROXY protocol accepted here (a site on it says `proxy_protocol = true`).
    pub proxy_protocol: Option<proxy::AcceptProxyProtocol>,
    /// A `[tcp]` listener: every connection is relayed by its one site's
    /// `passthrough` stream, with no TLS or HTTP.
    pub layer4: bool,
}

/// A site: which requests it answers and how.
#[derive(PartialEq)]
pub struct SiteConfig {
    /// The name as written in the file (`example.com`, `*.example.com:8443`).
    pub name: String,
    pub host: HostPattern,
    pub handler: HandlerConfig,
    pub tls: Option<TlsConfig>,
    /// Custom error pages, loaded at start-up.
    pub error_pages: HashMap<u16, bytes::Bytes>,
    /// Extra response headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub access_log: Option<AccessLogConfig>,
    /// An ID per request, sent upstream, logged and shown on error pages.
    pub request_id: Option<log_format::RequestIdConfig>,
    /// Spans recorded for its requests when `[traces]` is on (`traces = false`: none).
    pub traces: bool,
    /// The cache in front of the site's own proxy, and of routes that say
    /// nothing about caching.
    pub cache: Option<Arc<cache::CachePolicy>>,
    /// The compression of its answers other than static files (and of
    /// routes that say nothing about it); `None`: off.
    pub compress: Option<Arc<CompressOptions>>,
    /// Limits, access control and header rules for every request.
    pub filters: Arc<traffic::Filters>,
    /// TLS for this name goes untouched to these upstreams (SNI routing).
    pub passthrough: Option<Arc<stream::StreamConfig>>,
}

impl std::fmt::Debug for SiteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteConfig")
            .field("name", &self.name)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Any host (the site name was an address or empty).
    Any,
    /// One host name, lower-case.
    Exact(String),
    /// `*.example.com`: stores `.example.com`.
    Wildcard(String),
}

impl HostPattern {
    /// Whether `host` (lower-case, no port) matches.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h.eq_ignore_ascii_case(host),
            HostPattern::Wildcard(suffix) => {
                host.len() > suffix.len()
                    && host.as_bytes()[host.len() - suffix.len()..]
                        .eq_ignore_ascii_case(suffix.as_bytes())
                    && !host[..host.len() - suffix.len()].contains('.')
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum HandlerConfig {
    /// Static files from a root directory.
    Static(files::Options),
    /// The built-in welcome page.
    Welcome,
    /// Redirect every request to `https://host[:port]/path`.
    RedirectHttps { port: u16 },
    /// Reverse proxy to upstreams.
    Proxy(Arc<proxy::ProxyConfig>),
    /// Scripts through FastCGI (PHP-FPM), other files of the root as static files.
    FastCgi(Arc<fastcgi::FastCgiConfig>),
    /// An application weir runs, proxied to with the proxy's defaults.
    App(Arc<app::AppConfig>),
    /// A redirect to a URL made from the request.
    Redirect(traffic::Redirect),
    /// A fixed answer.
    Respond(traffic::Respond),
    /// Routes by path, tried in order; then `fallback` (404 without one).
    Routes {
        routes: Vec<routes::RouteConfig>,
        fallback: Option<Box<HandlerConfig>>,
    },
}

impl HandlerConfig {
    /// Whether any request can be proxied upstream (a proxy, or routes,
    /// which proxy).
    pub fn proxies(&self) -> bool {
        matches!(
            self,
            HandlerConfig::Proxy(_) | HandlerConfig::Routes { .. } | HandlerConfig::App(..)
        )
    }

    /// The site's app: its own handler, or the fallback of its routes.
    pub fn app(&self) -> Option<&Arc<app::AppConfig>> {
        match self {
            HandlerConfig::App(a) => Some(a),
            HandlerConfig::Routes {
                fallback: Some(f), ..
            } => f.app(),
            _ => None,
        }
    }
}

pub use log_format::{AccessLogConfig, LogFormat, LogSink};

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(60),
            keepalive: Duration::from_secs(75),
            body: Duration::from_secs(60),
            write: Duration::from_secs(60),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_size: 32 * 1024,
            headers: 100,
            uri: 8 * 1024,
            body: 1024 * 1024,
            connections: 16384,
            h2_streams: 128,
            tls_handshakes: 128,
        }
    }
}

fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

impl ServerConfig {
    fn defaults() -> Self {
        ServerConfig {
            workers: default_workers(),
            runtime: RuntimeMode::PerCore,
            accept: AcceptSteering::Hash,
            log_level: "info".into(),
            log_json: false,
            grace_period: Duration::from_secs(10),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
        }
    }
}

impl Config {
    /// What may be a mistake but need not be, one line each (`weir
    /// validate` prints them; they never stop a start): a FastCGI Unix
    /// socket that does not exist (PHP-FPM may start after weir).
    pub fn warnings(&self) -> Vec<String> {
        fn walk(site: &str, h: &HandlerConfig, out: &mut Vec<String>) {
            match h {
                HandlerConfig::FastCgi(f) => {
                    for u in &f.upstream.upstreams {
                        if let proxy::UpstreamTarget::Unix(p) = &u.target
                            && !p.exists()
                        {
                            out.push(format!(
                                "site \"{site}\": FastCGI socket {} does not exist (yet: is PHP-FPM running, and is the path right?)",
                                p.display()
                            ));
                        }
                    }
                }
                HandlerConfig::Routes { routes, fallback } => {
                    for r in routes {
                        walk(site, &r.handler, out);
                    }
                    if let Some(f) = fallback {
                        walk(site, f, out);
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for s in &self.sites {
            walk(&s.name, &s.handler, &mut out);
        }
        out
    }

    /// What `weir run` serves with no config file: a welcome page on
    /// http://127.0.0.1:8080.
    pub fn builtin_welcome() -> Config {
        let site = bare_site(
            "127.0.0.1:8080".into(),
            HostPattern::Any,
            HandlerConfig::Welcome,
        );
        Config {
            source: "<built-in>".into(),
            server: ServerConfig::defaults(),
            sites: vec![Arc::new(site)],
            listeners: vec![ListenerConfig {
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080),
                tls: false,
                sites: vec![0],
                default_site: 0,
                proxy_protocol: None,
                layer4: false,
            }],
            tls: TlsGlobal::default(),
            admin: admin::AdminConfig::default_on(),
            cache: cache::CacheStorage::default(),
            cluster: None,
            traces: None,
            text: None,
        }
    }
}

/// Reads and validates a config file; certificate files are only checked
/// to be readable ([`load_file_with`] takes the full check).
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    load_file_with(path, &FilesReadable)
}

/// Reads and validates a config file, checking certificates with `certs`.
pub fn load_file_with(path: &Path, certs: &dyn CertCheck) -> Result<Config, ConfigErrors> {
    let name = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![Diagnostic {
            machine: true,
            file: name.clone(),
            line: 1,
            col: 1,
            message: format!("cannot read config file: {e}"),
        }])
    })?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    load_str_with(&name, &src, &base, certs)
}

/// Validates config text; relative paths in it are taken from `base`.
/// Certificate files are only checked to be readable.
pub fn load_str(file: &str, src: &str, base: &Path) -> Result<Config, ConfigErrors> {
    load_str_with(file, src, base, &FilesReadable)
}

/// [`load_str`], checking certificates with `certs`.
pub fn load_str_with(
    file: &str,
    src: &str,
    base: &Path,
    certs: &dyn CertCheck,
) -> Result<Config, ConfigErrors> {
    let mut c = Collector::new(file, src, certs);
    let Some(raw) = parse::raw(&mut c, src) else {
        return c.into_result(Config::builtin_welcome());
    };

    let server = validate_server(&mut c, &raw.server);
    let tls_global = tls::validate_global(&mut c, base, &raw.tls);
    let admin = admin::validate(&mut c, &raw.admin);
    let cache_storage = cache::storage(&mut c, base, &raw.cache);
    let cluster = cluster::validate(&mut c, base, &raw.cluster);
    let traces = traces::validate(&mut c, &raw.traces);
    let bind_ip = bind_ip(&mut c, &raw.server);

    if raw.site.is_empty() && raw.tcp.is_empty() {
        c.at(
            0..0,
            "no sites: add one, e.g. [site.\"localhost\"] with root = \"/var/www/html\"",
        );
    }

    let log_formats = named_log_formats(&mut c, &raw.log_format);
    let ctx = SiteContext {
        base,
        bind_ip,
        tls: &tls_global,
        log_formats: &log_formats,
    };
    let mut sites = Sites::default();
    let doc = toml::de::DeTable::parse(src).ok();
    for (name, site) in &raw.site {
        let name_span = doc
            .as_ref()
            .and_then(|d| parse::key_span(d.get_ref(), &["site".to_string(), name.clone()]))
            .unwrap_or_else(|| site.span());
        load_site(&mut c, &ctx, &mut sites, name, site, name_span);
    }
    let tcp = stream::tcp_listeners(&mut c, &raw.tcp, bind_ip, &sites.binds);
    let (sites, listeners) = sites.into_listeners(&mut c, tcp);

    c.into_result(Config {
        source: file.to_string(),
        server,
        sites: sites.into_iter().map(Arc::new).collect(),
        listeners,
        tls: tls_global,
        admin,
        cache: cache_storage,
        cluster,
        traces,
        text: Some(Arc::from(src)),
    })
}

/// `server.bind`: the address of sites without an explicit `listen`.
fn bind_ip(c: &mut Collector<'_>, s: &RawServer) -> IpAddr {
    s.bind
        .as_ref()
        .and_then(|b| match b.get_ref().parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                c.at(
                    b.span(),
                    format!("server.bind: `{}` is not an IP address", b.get_ref()),
                );
                None
            }
        })
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// What every site's validation reads besides its own table.
struct SiteContext<'a> {
    /// The config file's directory, which relative paths start from.
    base: &'a Path,
    bind_ip: IpAddr,
    tls: &'a TlsGlobal,
    /// `[log_format.NAME]`, compiled.
    log_formats: &'a HashMap<String, Arc<LogFormat>>,
}

/// The sites validated so far and the addresses they listen on.
#[derive(Default)]
struct Sites {
    sites: Vec<SiteConfig>,
    binds: Vec<Bind>,
    /// PROXY protocol per site index, applied to the site's listeners.
    accept_pp: HashMap<usize, proxy::AcceptProxyProtocol>,
}

impl Sites {
    /// The sites with those of `[tcp]` added, and the listeners of them all.
    fn into_listeners(
        mut self,
        c: &mut Collector<'_>,
        tcp: Vec<stream::TcpListenerConfig>,
    ) -> (Vec<SiteConfig>, Vec<ListenerConfig>) {
        let sites = &self.sites;
        let passes = |i: usize| sites.get(i).is_some_and(|s| s.passthrough.is_some());
        let mut listeners = group_listeners(c, &self.binds, passes);
        for l in &mut listeners {
            l.proxy_protocol = l.sites.iter().find_map(|i| self.accept_pp.get(i).cloned());
        }
        for t in tcp {
            let idx = self.sites.len();
            self.sites.push(SiteConfig {
                passthrough: Some(t.stream.clone()),
                ..bare_site(t.stream.name.clone(), HostPattern::Any, misdirected())
            });
            for addr in t.addrs {
                listeners.push(ListenerConfig {
                    addr,
                    tls: false,
                    sites: vec![idx],
                    default_site: idx,
                    proxy_protocol: None,
                    layer4: true,
                });
            }
        }
        (self.sites, listeners)
    }
}

/// A site with only a handler: no TLS, filters, headers nor logs.
fn bare_site(name: String, host: HostPattern, handler: HandlerConfig) -> SiteConfig {
    SiteConfig {
        name,
        host,
        handler,
        tls: None,
        error_pages: HashMap::new(),
        headers: Vec::new(),
        access_log: None,
        request_id: None,
        traces: true,
        cache: None,
        compress: None,
        filters: Default::default(),
        passthrough: None,
    }
}

/// `[site."name"]`: the site (and its HTTP redirect site) added to `out`,
/// with the addresses it listens on.
fn load_site(
    c: &mut Collector<'_>,
    ctx: &SiteContext<'_>,
    out: &mut Sites,
    name: &str,
    site: &Spanned<RawSite>,
    name_span: std::ops::Range<usize>,
) {
    let raw_site = site.get_ref();
    let (host, name_port, name_ip) = match parse_site_name(name) {
        Ok(v) => v,
        Err(msg) => {
            c.at(name_span, format!("site \"{name}\": {msg}"));
            return;
        }
    };
    let passthrough = stream::site_passthrough(c, name, raw_site, &host, &name_span);
    let tls = if raw_site.passthrough.is_some() {
        None
    } else {
        tls::site_tls(
            c,
            ctx.base,
            name,
            raw_site,
            (&host, name_port, name_ip),
            ctx.tls,
        )
    };
    let has_tls = tls.is_some() || raw_site.tls.is_some() || passthrough.is_some();

    let own = own_handler(c, ctx.base, name, site, passthrough.is_some());
    let site_cache = cache::site_policy(c, name, raw_site);
    let files = |c: &mut Collector<'_>, root: &Spanned<String>| {
        site_files(c, ctx.base, name, raw_site, root)
    };
    let own = site_fastcgi(c, name, raw_site, own, &files);
    let own = app::site_app(c, ctx.base, name, raw_site, own);
    let site_compress = files::answer_compression(
        c,
        &format!("site \"{name}\": compress"),
        raw_site.compress.as_ref(),
        None,
    );
    let inherited = routes::Inherited {
        cache: site_cache.as_ref(),
        compress: site_compress.as_ref(),
    };
    let handler =
        routes::site_handler(c, name, raw_site, own, inherited, &files).unwrap_or_else(|| {
            if passthrough.is_some() {
                misdirected()
            } else {
                HandlerConfig::Welcome
            }
        });
    let filters = traffic::filters(c, &format!("site \"{name}\""), raw_site.filter_keys());

    let idx = out.sites.len();
    if let Some(pp) = proxy::accept_proxy_protocol(c, name, raw_site) {
        out.accept_pp.insert(idx, pp);
    }
    let addrs = site_addrs(
        c,
        ctx.bind_ip,
        name,
        raw_site,
        (name_port, name_ip),
        has_tls,
    );
    if raw_site.default == Some(true) && raw_site.passthrough.is_some() {
        c.at(
            name_span.clone(),
            format!("site \"{name}\": a `passthrough` site never answers HTTP, so it cannot be the `default`"),
        );
    }
    for a in &addrs {
        out.binds.push((
            *a,
            has_tls,
            idx,
            raw_site.default == Some(true),
            name_span.clone(),
        ));
    }
    let redirect_from =
        http_redirect_from(c, ctx.bind_ip, name, raw_site, has_tls, &addrs, name_port);
    let access_log = access_log(c, ctx, name, raw_site);
    let request_id = request_id(c, name, raw_site);
    let mut handler = handler;
    let attempts = access_log
        .as_ref()
        .is_some_and(|a| a.format.uses_upstream());
    if attempts || request_id.is_some() {
        tell_proxies(
            &mut handler,
            attempts,
            request_id.as_ref().map(|r| &r.header),
        );
    }

    out.sites.push(SiteConfig {
        name: name.to_string(),
        host: host.clone(),
        handler,
        tls,
        error_pages: load_error_pages(c, ctx.base, name, raw_site),
        headers: parse_headers(c, name, raw_site),
        access_log,
        request_id,
        traces: raw_site.traces.unwrap_or(true),
        cache: site_cache,
        compress: site_compress,
        filters: Arc::new(filters),
        passthrough,
    });

    if let (Some(from), Some(to)) = (redirect_from, addrs.first()) {
        let ridx = out.sites.len();
        out.sites.push(bare_site(
            format!("{name} (HTTP redirect)"),
            host,
            HandlerConfig::RedirectHttps { port: to.port() },
        ));
        out.binds.push((from, false, ridx, false, name_span));
    }
}

/// The handler of a site's own keys: its files (`root`), or `redirect` or
/// `respond`; `None` when another key (`proxy`, `app`, `php`...) has it.
fn own_handler(
    c: &mut Collector<'_>,
    base: &Path,
    name: &str,
    site: &Spanned<RawSite>,
    passthrough: bool,
) -> Option<HandlerConfig> {
    let raw_site = site.get_ref();
    if let (Some(r), true) = (
        &raw_site.root,
        raw_site.redirect.is_some() || raw_site.respond.is_some(),
    ) {
        c.at(
            r.span(),
            format!("site \"{name}\": `root` excludes `redirect` and `respond` (use a route for some paths)"),
        );
    }
    match &raw_site.root {
        Some(root) => Some({
            let path = base.join(root.get_ref());
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => c.at_file(
                    root.span(),
                    format!(
                        "site \"{name}\": root {} is not a directory",
                        path.display()
                    ),
                ),
                Err(e) => c.at_file(
                    root.span(),
                    format!("site \"{name}\": root {}: {e}", path.display()),
                ),
            }
            HandlerConfig::Static(static_options(c, name, raw_site, path))
        }),
        None if raw_site.redirect.is_some() || raw_site.respond.is_some() => {
            own_answer(c, name, raw_site)
        }
        None if proxy::has_proxy(raw_site) || passthrough => None,
        None if raw_site.app.is_some() => None,
        None if raw_site.php.is_some() || raw_site.fastcgi.is_some() => None,
        None => {
            c.at(
                site.span(),
                format!("site \"{name}\" has nothing to serve: add `root = \"/path/to/files\"`"),
            );
            Some(HandlerConfig::Welcome)
        }
    }
}

/// The site's static files from `root` (a route's or `php`'s), with the
/// site's file options.
fn site_files(
    c: &mut Collector<'_>,
    base: &Path,
    name: &str,
    raw_site: &RawSite,
    root: &Spanned<String>,
) -> HandlerConfig {
    let path = base.join(root.get_ref());
    if !path.is_dir() {
        c.at_file(
            root.span(),
            format!(
                "site \"{name}\": root {} is not a directory",
                path.display()
            ),
        );
    }
    HandlerConfig::Static(static_options(c, name, raw_site, path))
}

/// The addresses a site listens on: its `listen`, else the address and
/// port in its name, else `server.bind` on 443 with TLS or 80.
fn site_addrs(
    c: &mut Collector<'_>,
    bind_ip: IpAddr,
    name: &str,
    raw_site: &RawSite,
    (name_port, name_ip): (Option<u16>, Option<IpAddr>),
    has_tls: bool,
) -> Vec<SocketAddr> {
    let default_port = if has_tls { 443 } else { 80 };
    match &raw_site.listen {
        Some(l) => {
            let mut out = Vec::new();
            for a in l.get_ref().to_vec() {
                match parse_listen(&a, bind_ip) {
                    Ok(addr) => out.push(addr),
                    Err(msg) => c.at(l.span(), format!("site \"{name}\": listen: {msg}")),
                }
            }
            out
        }
        None => vec![SocketAddr::new(
            name_ip.unwrap_or(bind_ip),
            name_port.unwrap_or(default_port),
        )],
    }
}

/// The plain-HTTP address whose listener redirects to this TLS site, if any.
fn http_redirect_from(
    c: &mut Collector<'_>,
    bind_ip: IpAddr,
    name: &str,
    raw_site: &RawSite,
    has_tls: bool,
    addrs: &[SocketAddr],
    name_port: Option<u16>,
) -> Option<SocketAddr> {
    match (&raw_site.http_redirect, has_tls) {
        (Some(r), false) => {
            if matches!(
                r.get_ref(),
                BoolOrString::String(_) | BoolOrString::Bool(true)
            ) {
                c.at(
                    r.span(),
                    format!("site \"{name}\": http_redirect needs `tls` on the site"),
                );
            }
            None
        }
        (Some(r), true) => match r.get_ref() {
            BoolOrString::Bool(false) => None,
            BoolOrString::Bool(true) => addrs.first().map(|a| SocketAddr::new(a.ip(), 80)),
            BoolOrString::String(s) => match parse_listen(s, bind_ip) {
                Ok(a) => Some(a),
                Err(msg) => {
                    c.at(r.span(), format!("site \"{name}\": http_redirect: {msg}"));
                    None
                }
            },
        },
        (None, true) if raw_site.listen.is_none() && name_port.is_none() => {
            addrs.first().map(|a| SocketAddr::new(a.ip(), 80))
        }
        _ => None,
    }
}

/// Tells every proxy of `h` what the site's log needs of it: its attempts
/// recorded, the request ID field its own log lines name.
fn tell_proxies(h: &mut HandlerConfig, attempts: bool, request_id: Option<&http::HeaderName>) {
    match h {
        HandlerConfig::Proxy(p) => {
            let p = Arc::make_mut(p);
            p.record_attempts = attempts;
            p.request_id = request_id.cloned();
        }
        HandlerConfig::Routes { routes, fallback } => {
            for r in routes {
                tell_proxies(&mut r.handler, attempts, request_id);
            }
            if let Some(f) = fallback {
                tell_proxies(f, attempts, request_id);
            }
        }
        _ => {}
    }
}

/// A site's `request_id`.
fn request_id(
    c: &mut Collector<'_>,
    name: &str,
    raw_site: &RawSite,
) -> Option<log_format::RequestIdConfig> {
    let r = raw_site.request_id.as_ref()?;
    let (header, response) = match r.get_ref() {
        raw::RawRequestId::On(false) => return None,
        raw::RawRequestId::On(true) => (None, false),
        raw::RawRequestId::Full(t) => (t.header.as_deref(), t.response.unwrap_or(false)),
    };
    let header = match http::HeaderName::from_bytes(header.unwrap_or("x-request-id").as_bytes()) {
        Ok(h) => h,
        Err(_) => {
            c.at(
                r.span(),
                format!(
                    "site \"{name}\": request_id: `{}` is not a header name",
                    header.unwrap_or_default()
                ),
            );
            return None;
        }
    };
    Some(log_format::RequestIdConfig { header, response })
}

/// `[log_format.NAME]`, each compiled once.
fn named_log_formats(
    c: &mut Collector<'_>,
    raw: &indexmap::IndexMap<String, serde_spanned::Spanned<raw::RawLogFormat>>,
) -> HashMap<String, Arc<LogFormat>> {
    let mut out = HashMap::new();
    for (name, f) in raw {
        let f = f.get_ref();
        if LogFormat::builtin(name).is_some() {
            c.at(
                f.format.span(),
                format!("log_format.{name}: `{name}` is a built-in format's name; choose another"),
            );
            continue;
        }
        let escape = match f
            .escape
            .as_ref()
            .map(|e| (e.span(), log_format::escape(e.get_ref())))
        {
            None => log_format::Escape::Default,
            Some((_, Ok(e))) => e,
            Some((span, Err(e))) => {
                c.at(span, format!("log_format.{name}: {e}"));
                continue;
            }
        };
        match LogFormat::template(f.format.get_ref(), escape) {
            Ok(t) => {
                out.insert(name.clone(), Arc::new(t));
            }
            Err(e) => c.at(f.format.span(), format!("log_format.{name}: {e}")),
        }
    }
    out
}

/// A site's `access_log`.
fn access_log(
    c: &mut Collector<'_>,
    ctx: &SiteContext<'_>,
    name: &str,
    raw_site: &RawSite,
) -> Option<AccessLogConfig> {
    use log_format as lf;
    let a = raw_site.access_log.as_ref()?;
    let span = a.span();
    let fail = |c: &mut Collector<'_>, msg: String| {
        c.at(span.clone(), format!("site \"{name}\": access_log: {msg}"));
    };
    let empty = raw::RawAccessLogTable::default();
    let (path, t) = match a.get_ref() {
        RawAccessLog::Path(p) => (Some(p), &empty),
        RawAccessLog::Full(t) => (t.path.as_ref(), t),
    };
    let (format, escape, syslog, facility, tag, cond, sample) = (
        t.format.as_deref(),
        t.escape.as_deref(),
        t.syslog.as_deref(),
        t.facility.as_deref(),
        t.tag.as_deref(),
        t.condition.as_deref(),
        t.sample,
    );
    let journal = match &t.journal {
        None | Some(BoolOrString::Bool(false)) => None,
        Some(BoolOrString::Bool(true)) => Some(PathBuf::from(lf::JOURNAL_SOCKET)),
        Some(BoolOrString::String(p)) if p.starts_with('/') => Some(PathBuf::from(p)),
        Some(BoolOrString::String(p)) => {
            fail(
                c,
                format!("journal `{p}`: use true, or the journal socket's absolute path"),
            );
            return None;
        }
    };
    let escape = match escape.map(lf::escape).transpose() {
        Ok(e) => e,
        Err(e) => {
            fail(c, e);
            return None;
        }
    };
    let format = match format.unwrap_or("combined") {
        t if t.contains(['{', '}']) => {
            match LogFormat::template(t, escape.unwrap_or(lf::Escape::Default)) {
                Ok(f) => Arc::new(f),
                Err(e) => {
                    fail(c, e);
                    return None;
                }
            }
        }
        n => match (LogFormat::builtin(n), ctx.log_formats.get(n)) {
            (Some(f), _) => Arc::new(f),
            (None, Some(f)) => f.clone(),
            (None, None) => {
                let mut known: Vec<&str> = vec!["combined", "common", "json"];
                known.extend(ctx.log_formats.keys().map(String::as_str));
                let hint = match error::suggest(n, &known) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!(
                        "use \"combined\", \"common\", \"json\", a [log_format] name or a template with {{variables}} (known: {})",
                        known.join(", ")
                    ),
                };
                fail(c, format!("format `{n}` is unknown; {hint}"));
                return None;
            }
        },
    };
    let sink = match (path, syslog, journal) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            fail(
                c,
                "`path`, `syslog` and `journal` exclude each other".into(),
            );
            return None;
        }
        (None, None, None) => {
            fail(
                c,
                "give a `path` (a file or \"stdout\"), a `syslog` address or `journal = true`"
                    .into(),
            );
            return None;
        }
        (Some(p), None, None) => match p.as_str() {
            "stdout" | "-" => LogSink::Stdout,
            p => LogSink::File(ctx.base.join(p)),
        },
        (None, None, Some(socket)) => LogSink::Journal(lf::JournalConfig {
            socket,
            identifier: tag.unwrap_or("weir").to_string(),
        }),
        (None, Some(to), None) => {
            let to = lf::syslog_target(to);
            let facility = lf::facility(facility.unwrap_or("local7"));
            match (to, facility) {
                (Ok(to), Ok(facility)) => LogSink::Syslog(lf::SyslogConfig {
                    to,
                    facility,
                    tag: tag.unwrap_or("weir").to_string(),
                }),
                (Err(e), _) | (_, Err(e)) => {
                    fail(c, e);
                    return None;
                }
            }
        }
    };
    match &sink {
        LogSink::Syslog(_) => {}
        LogSink::Journal(_) if facility.is_some() => {
            fail(c, "`facility` is for `syslog`".into());
        }
        LogSink::Journal(_) => {}
        _ if facility.is_some() || tag.is_some() => {
            fail(
                c,
                "`facility` and `tag` are for `syslog` (and `tag` for `journal`)".into(),
            );
        }
        _ => {}
    }
    let condition = match cond.map(lf::condition).transpose() {
        Ok(c) => c,
        Err(e) => {
            fail(c, e);
            return None;
        }
    };
    let sample = sample.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample) {
        fail(c, format!("sample {sample} is not between 0 and 1"));
        return None;
    }
    Some(AccessLogConfig {
        sink,
        format,
        condition,
        sample,
    })
}

fn validate_server(c: &mut Collector<'_>, s: &RawServer) -> ServerConfig {
    let mut out = ServerConfig::defaults();
    if let Some(w) = &s.workers {
        match *w.get_ref() {
            0 => {}
            n if (1..=1024).contains(&n) => out.workers = n as usize,
            n => c.at(
                w.span(),
                format!("server.workers: {n} is out of range (0 = one per core, up to 1024)"),
            ),
        }
    }
    if let Some(r) = &s.runtime {
        match r.get_ref().as_str() {
            "per-core" => out.runtime = RuntimeMode::PerCore,
            "shared" => out.runtime = RuntimeMode::Shared,
            o => c.at(
                r.span(),
                format!("server.runtime: `{o}` is unknown; use \"per-core\" or \"shared\""),
            ),
        }
    }
    if let Some(a) = &s.accept {
        match a.get_ref().as_str() {
            "hash" => out.accept = AcceptSteering::Hash,
            "cpu" if out.runtime == RuntimeMode::Shared => c.at(
                a.span(),
                "server.accept: \"cpu\" steers among per-core workers; it needs runtime = \"per-core\"".to_string(),
            ),
            "cpu" => out.accept = AcceptSteering::Cpu,
            o @ ("pack" | "adaptive") => c.at(
                a.span(),
                format!("server.accept: `{o}` was removed; use \"hash\" (the default: the kernel's SO_REUSEPORT hash) or \"cpu\""),
            ),
            o => c.at(
                a.span(),
                format!("server.accept: `{o}` is unknown; use \"hash\" or \"cpu\""),
            ),
        }
    }
    if let Some(h) = &s.http1 {
        c.at(
            h.span(),
            "server.http1 was removed in weir 0.1: weir's own HTTP/1 server and client serve every \
             HTTP/1 request (hyper's engine is gone); delete the key"
                .to_string(),
        );
    }
    if let Some(l) = &s.log_level {
        match l.get_ref().as_str() {
            "error" | "warn" | "info" | "debug" | "trace" | "off" => {
                out.log_level = l.get_ref().clone()
            }
            o => c.at(
                l.span(),
                format!(
                    "server.log_level: `{o}` is unknown; use error, warn, info, debug or trace"
                ),
            ),
        }
    }
    if let Some(f) = &s.log_format {
        match f.get_ref().as_str() {
            "text" => out.log_json = false,
            "json" => out.log_json = true,
            o => c.at(
                f.span(),
                format!("server.log_format: `{o}` is unknown; use \"text\" or \"json\""),
            ),
        }
    }
    let dur = |c: &mut Collector<'_>,
               key: &str,
               v: &Option<Spanned<Value>>,
               slot: &mut Duration| {
        if let Some(v) = v {
            match units::parse_duration(v.get_ref()) {
                Ok(d) if d.is_zero() => c.at(v.span(), format!("{key}: must be more than zero")),
                Ok(d) => *slot = d,
                Err(m) => c.at(v.span(), format!("{key}: {m}")),
            }
        }
    };
    dur(
        c,
        "server.grace_period",
        &s.grace_period,
        &mut out.grace_period,
    );
    let t = &s.timeouts;
    dur(
        c,
        "server.timeouts.header",
        &t.header,
        &mut out.timeouts.header,
    );
    dur(
        c,
        "server.timeouts.keepalive",
        &t.keepalive,
        &mut out.timeouts.keepalive,
    );
    dur(c, "server.timeouts.body", &t.body, &mut out.timeouts.body);
    dur(
        c,
        "server.timeouts.write",
        &t.write,
        &mut out.timeouts.write,
    );

    let l = &s.limits;
    let size =
        |c: &mut Collector<'_>, key: &str, v: &Option<Spanned<Value>>, min: u64| -> Option<u64> {
            let v = v.as_ref()?;
            match units::parse_size(v.get_ref()) {
                Ok(n) if n >= min => Some(n),
                Ok(n) => {
                    c.at(
                        v.span(),
                        format!("{key}: {n} bytes is too small (at least {min})"),
                    );
                    None
                }
                Err(m) => {
                    c.at(v.span(), format!("{key}: {m}"));
                    None
                }
            }
        };
    if let Some(n) = size(c, "server.limits.header_size", &l.header_size, 1024) {
        out.limits.header_size = n as usize;
    }
    if let Some(n) = size(c, "server.limits.uri", &l.uri, 64) {
        out.limits.uri = n as usize;
    }
    if let Some(n) = size(c, "server.limits.body", &l.body, 0) {
        out.limits.body = n;
    }
    let count =
        |c: &mut Collector<'_>, key: &str, v: &Option<Spanned<i64>>, max: i64| -> Option<i64> {
            let v = v.as_ref()?;
            let n = *v.get_ref();
            if (1..=max).contains(&n) {
                Some(n)
            } else {
                c.at(v.span(), format!("{key}: {n} is out of range (1 to {max})"));
                None
            }
        };
    if let Some(n) = count(c, "server.limits.headers", &l.headers, 10_000) {
        out.limits.headers = n as usize;
    }
    if let Some(n) = count(c, "server.limits.connections", &l.connections, 10_000_000) {
        out.limits.connections = n as usize;
    }
    if let Some(n) = count(c, "server.limits.h2_streams", &l.h2_streams, 100_000) {
        out.limits.h2_streams = n as u32;
    }
    if let Some(n) = count(
        c,
        "server.limits.tls_handshakes",
        &l.tls_handshakes,
        1_000_000,
    ) {
        out.limits.tls_handshakes = n as usize;
    }
    if out.limits.uri > out.limits.header_size {
        out.limits.header_size = out.limits.uri;
    }
    out
}

/// `example.com`, `example.com:8443`, `*.example.com`, `:8080`,
/// `127.0.0.1:8080`, `[::1]:8080`, optionally with `http://` or `https://`.
fn parse_site_name(name: &str) -> Result<(HostPattern, Option<u16>, Option<IpAddr>), String> {
    let mut rest = name.trim();
    let mut scheme_port = None;
    if let Some(r) = rest.strip_prefix("http://") {
        rest = r;
        scheme_port = Some(80);
    } else if let Some(r) = rest.strip_prefix("https://") {
        rest = r;
        scheme_port = Some(443);
    }
    let rest = rest.trim_end_matches('/');
    if let Ok(sa) = rest.parse::<SocketAddr>() {
        return Ok((HostPattern::Any, Some(sa.port()), Some(sa.ip())));
    }
    if let Ok(ip) = rest
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok((HostPattern::Any, scheme_port, Some(ip)));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("`{p}` is not a port number"))?;
            (h, Some(port))
        }
        None => (rest, None),
    };
    let port = port.or(scheme_port);
    let host = host.to_ascii_lowercase();
    if host.is_empty() || host == "*" {
        return Ok((HostPattern::Any, port, None));
    }
    let check = host.strip_prefix("*.").unwrap_or(&host);
    if !check.split('.').all(|l| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }) {
        return Err(format!("`{host}` is not a valid host name"));
    }
    if let Some(suffix) = host.strip_prefix('*') {
        Ok((HostPattern::Wildcard(suffix.to_string()), port, None))
    } else {
        Ok((HostPattern::Exact(host), port, None))
    }
}

fn parse_listen(a: &str, bind: IpAddr) -> Result<SocketAddr, String> {
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Some(p) = a.strip_prefix(':')
        && let Ok(port) = p.parse::<u16>()
    {
        return Ok(SocketAddr::new(bind, port));
    }
    if let Ok(port) = a.parse::<u16>() {
        return Ok(SocketAddr::new(bind, port));
    }
    Err(format!(
        "`{a}` is not an address; write it like \"127.0.0.1:8080\", \":8080\" or \"[::]:443\""
    ))
}

fn load_tls(
    c: &mut Collector<'_>,
    base: &Path,
    site: &str,
    cert: &Spanned<String>,
    key: &Spanned<String>,
) -> Option<TlsConfig> {
    let cert_path = base.join(cert.get_ref());
    let key_path = base.join(key.get_ref());
    match c.certs.check(&cert_path, &key_path) {
        Ok(()) => Some(TlsConfig::Files {
            cert_path,
            key_path,
        }),
        Err(CertProblem::Key(e)) => {
            c.at_file(key.span(), format!("site \"{site}\": {e}"));
            None
        }
        Err(CertProblem::Cert(e)) => {
            c.at_file(cert.span(), format!("site \"{site}\": {e}"));
            None
        }
    }
}

fn parse_encodings(c: &mut Collector<'_>, key: &str, v: &Spanned<Vec<String>>) -> Vec<Encoding> {
    let mut out = Vec::new();
    for e in v.get_ref() {
        match e.as_str() {
            "br" => out.push(Encoding::Br),
            "zstd" => out.push(Encoding::Zstd),
            "gzip" => out.push(Encoding::Gzip),
            o => c.at(
                v.span(),
                format!("{key}: `{o}` is unknown; use \"br\", \"zstd\" or \"gzip\""),
            ),
        }
    }
    out
}

/// `try_files = ["{path}", "/index.html"]`: each a path with `{path}`,
/// the last one may be `=404` (a status).
pub(crate) fn try_files(c: &mut Collector<'_>, key: &str, t: &Spanned<Vec<String>>) -> Vec<String> {
    let list = t.get_ref();
    if list.is_empty() {
        c.at(t.span(), format!("{key}: try_files is empty"));
    }
    for (i, e) in list.iter().enumerate() {
        let status = e.strip_prefix('=').map(|n| n.parse::<u16>());
        let ok = match status {
            Some(Ok(n)) => i == list.len() - 1 && (200..=599).contains(&n),
            Some(Err(_)) => false,
            None => {
                (e.starts_with('/') || e.starts_with("{path}"))
                    && e.replace("{path}", "").find(['{', '}']).is_none()
            }
        };
        if !ok {
            c.at(
                t.span(),
                format!("{key}: try_files: `{e}` is not a path starting with `/` or `{{path}}` (the last may be a status like \"=404\")"),
            );
        }
    }
    list.clone()
}

/// A site's `redirect` or `respond`, which stand in for `root`.
fn own_answer(c: &mut Collector<'_>, name: &str, s: &RawSite) -> Option<HandlerConfig> {
    let key = format!("site \"{name}\"");
    if let (Some(r), true) = (&s.redirect, s.proxy.is_some() || s.respond.is_some()) {
        c.at(
            r.span(),
            format!("{key}: `redirect` answers every request; it excludes `proxy` and `respond` (use a route for some paths)"),
        );
    }
    if let (Some(r), true) = (&s.respond, s.proxy.is_some()) {
        c.at(
            r.span(),
            format!("{key}: `respond` answers every request; it excludes `proxy` (use a route for some paths)"),
        );
    }
    if let Some(r) = &s.redirect {
        let rd = traffic::redirect(c, &key, r)?;
        if rd.to.max_capture() > 0 {
            c.at(
                r.span(),
                format!("{key}: redirect: groups like {{1}} come from a route's `path_regex`"),
            );
        }
        return Some(HandlerConfig::Redirect(rd));
    }
    s.respond
        .as_ref()
        .and_then(|r| traffic::respond(c, &key, r))
        .map(HandlerConfig::Respond)
}

/// A site's `php` or `fastcgi` in place of its static files (which then
/// serve the root's other files).
fn site_fastcgi(
    c: &mut Collector<'_>,
    name: &str,
    s: &RawSite,
    own: Option<HandlerConfig>,
    files: &dyn Fn(&mut Collector<'_>, &Spanned<String>) -> HandlerConfig,
) -> Option<HandlerConfig> {
    let (raw, php) = match (&s.php, &s.fastcgi) {
        (Some(p), Some(_)) => {
            c.at(
                p.span(),
                format!("site \"{name}\": `php` and `fastcgi` exclude each other; keep one"),
            );
            return own;
        }
        (Some(p), None) => (p, true),
        (None, Some(f)) => (f, false),
        (None, None) => return own,
    };
    let key = format!("site \"{name}\": {}", if php { "php" } else { "fastcgi" });
    let opts = match own {
        Some(HandlerConfig::Static(o)) => Some(o),
        Some(_) => {
            c.at(
                raw.span(),
                format!("{key}: excludes `redirect` and `respond` (use a route for some paths)"),
            );
            return own;
        }
        None => None,
    };
    let make = |c: &mut Collector<'_>, root: &Spanned<String>| match files(c, root) {
        HandlerConfig::Static(o) => o,
        _ => unreachable!("the files closure makes static options"),
    };
    fastcgi::fastcgi(c, &key, raw, php, opts, &make).map(|f| HandlerConfig::FastCgi(Arc::new(f)))
}

fn static_options(c: &mut Collector<'_>, name: &str, s: &RawSite, root: PathBuf) -> files::Options {
    let all = vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip];
    let precompressed = match &s.precompressed {
        Some(p) => parse_encodings(c, &format!("site \"{name}\": precompressed"), p),
        None => all.clone(),
    };
    let compress = match &s.compress {
        Some(rc) => files::compress(
            c,
            &format!("site \"{name}\": compress"),
            rc,
            &CompressOptions::default(),
        ),
        None => CompressOptions::default(),
    };
    let mut cache = CacheOptions::default();
    if let Some(fc) = &s.file_cache {
        if let Some(v) = &fc.max_size {
            match units::parse_size(v.get_ref()) {
                Ok(n) => cache.max_bytes = n,
                Err(m) => c.at(
                    v.span(),
                    format!("site \"{name}\": file_cache.max_size: {m}"),
                ),
            }
        }
        if let Some(v) = &fc.max_file_size {
            match units::parse_size(v.get_ref()) {
                Ok(n) => cache.max_file_size = n,
                Err(m) => c.at(
                    v.span(),
                    format!("site \"{name}\": file_cache.max_file_size: {m}"),
                ),
            }
        }
    }
    let try_files = match &s.try_files {
        Some(t) => try_files(c, &format!("site \"{name}\""), t),
        None => Vec::new(),
    };
    files::Options {
        root,
        try_files,
        index: s.index.clone().unwrap_or_else(|| vec!["index.html".into()]),
        browse: s.browse.unwrap_or(false),
        serve_hidden: s.serve_hidden.unwrap_or(false),
        follow_symlinks: s.follow_symlinks.unwrap_or(false),
        precompressed,
        compress,
        cache,
    }
}

fn load_error_pages(
    c: &mut Collector<'_>,
    base: &Path,
    site: &str,
    s: &RawSite,
) -> HashMap<u16, bytes::Bytes> {
    let mut out = HashMap::new();
    for (code, path) in s.errors.iter().flatten() {
        let status = match code.parse::<u16>() {
            Ok(n) if (400..600).contains(&n) => n,
            _ => {
                c.at(
                    path.span(),
                    format!("site \"{site}\": errors: `{code}` is not an error status (400-599)"),
                );
                continue;
            }
        };
        let p = base.join(path.get_ref());
        match std::fs::read(&p) {
            Ok(b) => {
                out.insert(status, bytes::Bytes::from(b));
            }
            Err(e) => c.at_file(
                path.span(),
                format!("site \"{site}\": error page {}: {e}", p.display()),
            ),
        }
    }
    out
}

fn parse_headers(c: &mut Collector<'_>, site: &str, s: &RawSite) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    for (k, v) in s.headers.iter().flatten() {
        let name = match HeaderName::from_bytes(k.as_bytes()) {
            Ok(n) => n,
            Err(_) => {
                c.at(
                    v.span(),
                    format!("site \"{site}\": headers: `{k}` is not a valid header name"),
                );
                continue;
            }
        };
        match HeaderValue::from_str(v.get_ref()) {
            Ok(val) => out.push((name, val)),
            Err(_) => c.at(
                v.span(),
                format!("site \"{site}\": headers: the value of `{k}` is not a valid header value"),
            ),
        }
    }
    out
}

/// An address a site listens on: (address, TLS, site index, `default = true`,
/// span of the site's name).
pub(crate) type Bind = (SocketAddr, bool, usize, bool, std::ops::Range<usize>);

/// What a site that relays TLS or TCP answers if HTTP ever reaches it: 421
/// (RFC 9110 §15.5.20), never the welcome page, which is for a weir with
/// no config at all.
fn misdirected() -> HandlerConfig {
    HandlerConfig::Respond(traffic::Respond {
        status: 421,
        body: bytes::Bytes::from_static(b"Misdirected Request\n"),
        content_type: Some(HeaderValue::from_static("text/plain; charset=utf-8")),
    })
}

/// The listening addresses of `binds`, each with its sites in file order.
/// The default site of an address is the one that says `default = true`,
/// else its first site that answers HTTP (`passes(i)`: site `i` passes
/// TLS through and never does).
fn group_listeners(
    c: &mut Collector<'_>,
    binds: &[Bind],
    passes: impl Fn(usize) -> bool,
) -> Vec<ListenerConfig> {
    let mut out: Vec<ListenerConfig> = Vec::new();
    let mut explicit_default: HashMap<SocketAddr, usize> = HashMap::new();
    for (addr, tls, idx, is_default, span) in binds {
        // One port can't be both plain and TLS, nor be bound twice through
        // 0.0.0.0 and a specific address of one family. `[::]` takes IPv6
        // only (weir sets IPV6_V6ONLY), so it may sit beside `0.0.0.0`.
        if let Some(other) = out.iter().find(|l| {
            l.addr.port() == addr.port()
                && l.addr != *addr
                && l.addr.is_ipv4() == addr.is_ipv4()
                && (l.addr.ip().is_unspecified() || addr.ip().is_unspecified())
        }) {
            c.at(
                span.clone(),
                format!(
                    "listen {addr} overlaps with {} used by another site",
                    other.addr
                ),
            );
            continue;
        }
        match out.iter_mut().find(|l| l.addr == *addr) {
            Some(l) => {
                if l.tls != *tls {
                    c.at(
                        span.clone(),
                        format!("listen {addr}: mixes sites with and without `tls` on one port; give them different ports"),
                    );
                    continue;
                }
                l.sites.push(*idx);
                if !explicit_default.contains_key(addr) && passes(l.default_site) && !passes(*idx) {
                    l.default_site = *idx;
                }
            }
            None => out.push(ListenerConfig {
                addr: *addr,
                tls: *tls,
                sites: vec![*idx],
                default_site: *idx,
                proxy_protocol: None,
                layer4: false,
            }),
        }
        if *is_default {
            if explicit_default.insert(*addr, *idx).is_some() {
                c.at(
                    span.clone(),
                    format!("listen {addr}: two sites say `default = true`"),
                );
            }
            if let Some(l) = out.iter_mut().find(|l| l.addr == *addr) {
                l.default_site = *idx;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(src: &str) -> Result<Config, ConfigErrors> {
        let dir = std::env::temp_dir();
        load_str("weir.toml", src, &dir)
    }

    #[test]
    fn any_ipv4_and_any_ipv6_share_a_port_but_one_family_does_not() {
        // nginx's `listen 80; listen [::]:80;`: [::] is IPv6 only.
        let c = load("[site.\"a\"]\nlisten = [\"0.0.0.0:8080\", \"[::]:8080\"]\nrespond = 204\n")
            .unwrap();
        let mut addrs: Vec<String> = c.listeners.iter().map(|l| l.addr.to_string()).collect();
        addrs.sort();
        assert_eq!(addrs, ["0.0.0.0:8080", "[::]:8080"]);
        for pair in [
            ["0.0.0.0:8080", "127.0.0.1:8080"],
            ["[::]:8080", "[::1]:8080"],
        ] {
            let src = format!(
                "[site.\"a\"]\nlisten = \"{}\"\nrespond = 204\n[site.\"b\"]\nlisten = \"{}\"\nrespond = 204\n",
                pair[0], pair[1]
            );
            let text = load(&src).unwrap_err().to_string();
            assert!(text.contains("overlaps with"), "{pair:?}: {text}");
        }
    }

    #[test]
    fn proxy_takes_an_address_or_a_list_as_its_upstreams() {
        let names = |src: &str| -> Vec<String> {
            let c = load(src).unwrap();
            let HandlerConfig::Proxy(p) = &c.sites[0].handler else {
                panic!("proxy handler");
            };
            p.upstreams.iter().map(|u| u.name.clone()).collect()
        };
        let table = names("[site.\"a\"]\nproxy = { to = [\"127.0.0.1:9001\"] }\n");
        assert_eq!(table, ["127.0.0.1:9001"]);
        assert_eq!(names("[site.\"a\"]\nproxy = \"127.0.0.1:9001\"\n"), table);
        assert_eq!(
            names(
                "[site.\"a\"]\nproxy = [\"127.0.0.1:9001\", { addr = \"127.0.0.1:9002\", weight = 2 }]\n"
            ),
            ["127.0.0.1:9001", "127.0.0.1:9002"]
        );
        // A route's too, with the same defaults as the table form.
        let c = load(
            "[site.\"a\"]\n[[site.\"a\".route]]\npath = \"/api/*\"\nproxy = \"127.0.0.1:9001\"\n",
        )
        .unwrap();
        let HandlerConfig::Routes { routes, .. } = &c.sites[0].handler else {
            panic!("routes");
        };
        let HandlerConfig::Proxy(p) = &routes[0].handler else {
            panic!("route proxy");
        };
        assert_eq!(p.upstreams[0].name, "127.0.0.1:9001");
        assert_eq!(p.retries, 2);
        // Mistakes keep their position and say what is expected.
        let text = load("[site.\"a\"]\nproxy = 9001\n")
            .unwrap_err()
            .to_string();
        assert!(text.contains("weir.toml:2:9"), "{text}");
        assert!(
            text.contains("an upstream like \"127.0.0.1:9001\""),
            "{text}"
        );
        let text = load("[site.\"a\"]\nproxy = { to = \"127.0.0.1:9\", retires = 1 }\n")
            .unwrap_err()
            .to_string();
        assert!(text.contains("retires"), "{text}");
        assert!(text.contains("retries"), "{text}");
    }

    #[test]
    fn passive_max_ejected_is_a_percentage_defaulting_to_half() {
        let passive = |src: &str| {
            let c = load(src)?;
            let HandlerConfig::Proxy(p) = &c.sites[0].handler else {
                panic!("proxy handler");
            };
            Ok::<_, ConfigErrors>(p.passive.clone())
        };
        let d = passive("[site.\"a\"]\nproxy = \"127.0.0.1:9001\"\n").unwrap();
        assert_eq!((d.failures, d.max_ejected), (5, 50));
        let p = passive(
            "[site.\"a\"]\nproxy = { to = \"127.0.0.1:9\", passive = { max_ejected = \"25%\" } }\n",
        )
        .unwrap();
        assert_eq!(p.max_ejected, 25);
        for bad in ["\"150%\"", "\"half\"", "\"50\""] {
            let text = passive(&format!(
                "[site.\"a\"]\nproxy = {{ to = \"127.0.0.1:9\", passive = {{ max_ejected = {bad} }} }}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                text.contains("max_ejected") && text.contains("50%"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_health_check_may_name_its_method() {
        let health = |h: &str| {
            let c = load(&format!(
                "[site.\"a\"]\nproxy = {{ to = \"127.0.0.1:9\", health = {h} }}\n"
            ))?;
            let HandlerConfig::Proxy(p) = &c.sites[0].handler else {
                panic!("proxy handler");
            };
            Ok::<_, ConfigErrors>(p.health.clone().unwrap())
        };
        assert_eq!(
            health("{ path = \"/up\" }").unwrap().method,
            http::Method::GET
        );
        assert_eq!(
            health("{ method = \"head\" }").unwrap().method,
            http::Method::HEAD
        );
        assert_eq!(
            health("{ method = \"OPTIONS\" }").unwrap().method,
            http::Method::OPTIONS
        );
        for (bad, says) in [
            ("{ method = \"GE T\" }", "is not an HTTP method"),
            ("{ method = \"CONNECT\" }", "cannot check"),
            ("{ method = \"HEAD\", body = \"ok\" }", "no body"),
        ] {
            let text = health(bad).unwrap_err().to_string();
            assert!(
                text.contains("health.method") && text.contains(says),
                "{text}"
            );
        }
    }

    #[test]
    fn a_missing_fastcgi_socket_is_a_warning_not_an_error() {
        let dir = std::env::temp_dir().join(format!("weir-warn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let there = dir.join("fpm.sock");
        std::fs::write(&there, "").unwrap();
        let missing = dir.join("fmp.sock");
        let c = load(&format!(
            "[site.\"a\"]\nroot = \".\"\nphp = \"unix:{}\"\n\
             [site.\"b\"]\nroot = \".\"\n[[site.\"b\".route]]\npath = \"/x/*\"\nphp = \"unix:{}\"\n",
            there.display(),
            missing.display()
        ))
        .unwrap();
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("site \"b\"") && w[0].contains(&missing.display().to_string()),
            "{w:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn php_is_one_line_with_caddys_defaults() {
        let c = load("[site.\"a\"]\nroot = \".\"\nphp = \"unix:/run/php/fpm.sock\"\n").unwrap();
        let HandlerConfig::FastCgi(f) = &c.sites[0].handler else {
            panic!("php handler");
        };
        assert_eq!(f.split, [".php"]);
        assert_eq!(f.index, ["index.php"]);
        assert_eq!(f.front_controller.as_deref(), Some("/index.php"));
        assert_eq!(f.upstream.max_conns, 5, "PHP-FPM's default pm.max_children");
        assert_eq!(
            f.upstream.upstreams[0].target,
            proxy::UpstreamTarget::Unix("/run/php/fpm.sock".into())
        );
        assert_eq!(f.files.root, std::env::temp_dir().join("."));

        let c = load(
            "[site.\"a\"]\nroot = \".\"\n[[site.\"a\".route]]\npath = \"/cgi/*\"\n\
             fastcgi = { to = \"127.0.0.1:9000\", max_conns = 8, env = { APP = \"x\" }, read_timeout = \"2s\" }\n",
        )
        .unwrap();
        let HandlerConfig::Routes { routes, .. } = &c.sites[0].handler else {
            panic!("routes");
        };
        let HandlerConfig::FastCgi(f) = &routes[0].handler else {
            panic!("fastcgi route");
        };
        assert_eq!(f.front_controller, None, "fastcgi has no PHP defaults");
        assert_eq!(f.upstream.max_conns, 8);
        assert_eq!(f.upstream.response_timeout, Duration::from_secs(2));
        assert_eq!(f.env, [("APP".to_string(), "x".to_string())]);
    }

    #[test]
    fn php_mistakes_are_reported() {
        for (src, want) in [
            (
                "[site.\"a\"]\nphp = \"127.0.0.1:9000\"\n",
                "needs the scripts' directory",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = \"http://127.0.0.1:9000\"\n",
                "has a scheme",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = { max_conns = 3 }\n",
                "needs `to",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = { to = \"127.0.0.1:9\", max_conns = 0 }\n",
                "at least 1",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = { to = \"127.0.0.1:9\", split = [\"a/b\"] }\n",
                "without `/`",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = { to = \"127.0.0.1:9\", read_timeot = \"1s\" }\n",
                "did you mean `read_timeout`",
            ),
            (
                "[site.\"a\"]\nroot = \".\"\nphp = \"127.0.0.1:9\"\nfastcgi = \"127.0.0.1:9\"\n",
                "exclude each other",
            ),
        ] {
            let e = load(src).unwrap_err().to_string();
            assert!(e.contains(want), "{src}: {e}");
        }
    }

    /// Issue 55 §3: a passthrough site first on its address used to be the
    /// address's default, so HTTPS with an unknown SNI got its built-in
    /// welcome page. The default is the first site that answers HTTP.
    #[test]
    fn a_passthrough_site_is_never_the_default() {
        let c = load(
            "[site.\"back.test\"]\nlisten = \"127.0.0.1:8443\"\npassthrough = \"10.0.0.5:443\"\n\
             [site.\"weir.test\"]\nlisten = \"127.0.0.1:8443\"\nroot = \".\"\ntls = { issuer = \"internal\" }\n",
        )
        .unwrap();
        assert_eq!(c.listeners[0].sites, [0, 1]);
        assert_eq!(c.listeners[0].default_site, 1);
        // What the passthrough site would answer if HTTP ever reached it.
        assert!(
            matches!(&c.sites[0].handler, HandlerConfig::Respond(r) if r.status == 421),
            "{:?}",
            c.sites[0].handler
        );
        let e = load(
            "[site.\"back.test\"]\nlisten = \"127.0.0.1:8443\"\npassthrough = \"10.0.0.5:443\"\ndefault = true\n\
             [site.\"weir.test\"]\nlisten = \"127.0.0.1:8443\"\nroot = \".\"\ntls = { issuer = \"internal\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot be the `default`"), "{e}");
    }

    #[test]
    fn passthrough_sites_and_tcp_listeners() {
        let c = load(
            "[site.\"a.test\"]\nlisten = \"127.0.0.1:8443\"\npassthrough = \"10.0.0.5:443\"\n\
             [site.\"b.test\"]\nlisten = \"127.0.0.1:8443\"\npassthrough = { to = [\"10.0.0.6:443\", \"10.0.0.7:443\"], alpn = [\"imap\"], send_proxy_protocol = \"v2\" }\n\
             [tcp.\"pg\"]\nlisten = \"127.0.0.1:15432\"\nto = [\"10.0.0.8:5432\"]\nbalance = \"least_conn\"\nmax_conns_per_client = 10\n",
        )
        .unwrap();
        let l = &c.listeners[0];
        assert!(
            l.tls && !l.layer4,
            "passthrough needs the ClientHello: a TLS listener"
        );
        assert!(
            c.sites[0].tls.is_none(),
            "no certificate for a name passed through"
        );
        let b = c.sites[1].passthrough.as_ref().unwrap();
        assert_eq!(b.alpn, [b"imap".to_vec()]);
        assert_eq!(b.upstream.upstreams.len(), 2);
        assert_eq!(
            b.upstream.send_proxy_protocol,
            Some(proxy::ProxyProtocolVersion::V2)
        );
        let tcp = c.listeners.iter().find(|l| l.layer4).unwrap();
        assert_eq!(tcp.addr, "127.0.0.1:15432".parse().unwrap());
        let pg = c.sites[tcp.default_site].passthrough.as_ref().unwrap();
        assert_eq!(pg.name, "tcp:pg");
        assert_eq!(pg.per_client, 10);
        assert_eq!(pg.upstream.balance, proxy::Balance::LeastConn);
        assert_eq!(pg.upstream.idle_timeout, Duration::from_secs(600));

        for (src, want) in [
            (
                "[site.\"a.test\"]\nroot = \".\"\npassthrough = \"10.0.0.5:443\"\n",
                "remove `root`",
            ),
            (
                "[site.\"127.0.0.1:8443\"]\npassthrough = \"10.0.0.5:443\"\n",
                "name the site by a host",
            ),
            ("[tcp.\"pg\"]\nto = \"10.0.0.8:5432\"\n", "needs `listen"),
            ("[tcp.\"pg\"]\nlisten = \"127.0.0.1:1\"\n", "needs `to"),
            (
                "[tcp.\"pg\"]\nlisten = \"127.0.0.1:1\"\nto = \"10.0.0.8:1\"\nalpn = [\"h2\"]\n",
                "`alpn` is for a site's passthrough",
            ),
            (
                "[tcp.\"pg\"]\nlisten = \"127.0.0.1:1\"\nto = \"10.0.0.8:1\"\nbalance = \"hash\"\n",
                "use ip_hash",
            ),
            (
                "[site.\"a\"]\nlisten = \"127.0.0.1:1\"\nroot = \".\"\n[tcp.\"pg\"]\nlisten = \"127.0.0.1:1\"\nto = \"10.0.0.8:1\"\n",
                "already used",
            ),
            (
                "[tcp.\"pg\"]\nlisten = \"127.0.0.1:1\"\nto = \"10.0.0.8:1\"\nmax_conn = 3\n",
                "did you mean `max_conns`",
            ),
        ] {
            let e = load(src).unwrap_err().to_string();
            assert!(e.contains(want), "{src}: {e}");
        }
    }

    #[test]
    fn smallest_static_site_is_two_lines() {
        let cfg = load("[site.\"localhost:8081\"]\nroot = \".\"\n").unwrap();
        assert_eq!(cfg.listeners.len(), 1);
        assert_eq!(cfg.listeners[0].addr.port(), 8081);
        assert_eq!(cfg.sites[0].host, HostPattern::Exact("localhost".into()));
    }

    #[test]
    fn a_site_cache_covers_its_routes_unless_they_say_otherwise() {
        let c = load(
            "[cache]\nmemory = \"64MiB\"\ndisk = { path = \"store\" }\n\
             [site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:9\"] }\n\
             cache = { default_ttl = \"2m\", key = { query = \"sort\", headers = [\"X-Lang\"] }, purge_from = [\"10.0.0.0/8\"] }\n\
             [[site.\"a\".route]]\npath = \"/api/*\"\nproxy = { to = [\"127.0.0.1:9\"] }\ncache = false\n\
             [[site.\"a\".route]]\npath = \"/img/*\"\nproxy = { to = [\"127.0.0.1:9\"] }\n\
             [[site.\"a\".route]]\npath = \"/b/*\"\nproxy = { to = [\"127.0.0.1:9\"] }\ncache = { grace = \"1m\" }\n",
        )
        .unwrap();
        assert_eq!(c.cache.memory, 64 << 20);
        assert_eq!(c.cache.disk.as_ref().unwrap().size, 1 << 30);
        let site = c.sites[0].cache.clone().unwrap();
        assert_eq!(site.default_ttl, Some(Duration::from_secs(120)));
        // RFC 9111 §4.2.4: no stale answers the upstream did not allow.
        assert_eq!(site.grace, Duration::ZERO);
        assert_eq!(site.stale_if_error, Duration::ZERO);
        assert_eq!(site.query, cache::QueryKey::Sort);
        assert_eq!(site.key_headers, [HeaderName::from_static("x-lang")]);
        let HandlerConfig::Routes { routes, .. } = &c.sites[0].handler else {
            panic!("routes");
        };
        assert!(routes[0].cache.is_none());
        assert!(Arc::ptr_eq(routes[1].cache.as_ref().unwrap(), &site));
        let own = routes[2].cache.as_ref().unwrap();
        assert_eq!(own.grace, Duration::from_secs(60));
        assert_eq!(
            own.default_ttl, None,
            "a route's own table starts from the defaults"
        );
    }

    #[test]
    fn traffic_keys_are_read_on_sites_and_routes() {
        let c = load(
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nroot = \".\"\ntry_files = [\"{path}\", \"/index.html\"]\n\
             deny = [\"10.0.0.0/8\"]\nlimit = [{ rate = \"10r/s\", burst = 5, nodelay = true }, \
             { key = [\"client\", \"header:X-Key\"], connections = 2 }, { window = \"10s\", errors = 3, name = \"errs\" }]\n\
             response_headers = { set = { X-A = \"{host}\" }, remove = [\"Server\"] }\n\
             [[site.\"a\".route]]\npath_regex = \"^/u/([0-9]+)$\"\nredirect = { to = \"/p/{1}\", status = 301 }\n\
             [[site.\"a\".route]]\nmatch = { method = \"DELETE\", protocol = \"https\" }\nrespond = 405\nmax_body = \"1KiB\"\n",
        )
        .unwrap();
        let s = &c.sites[0];
        let f = &s.filters;
        assert_eq!(f.deny.len(), 1);
        assert_eq!(f.limits.len(), 3);
        assert_eq!(
            f.limits[0].kind,
            traffic::LimitKind::Rate {
                per_sec_milli: 10_000,
                burst: 5,
                delay_after: 5
            }
        );
        assert_eq!(f.limits[1].key.len(), 2);
        assert_eq!(f.limits[2].name, "errs");
        assert_eq!(
            f.response_headers.remove,
            [HeaderName::from_static("server")]
        );
        let HandlerConfig::Routes { routes, fallback } = &s.handler else {
            panic!("routes");
        };
        let Some(HandlerConfig::Static(o)) = fallback.as_deref() else {
            panic!("static fallback");
        };
        assert_eq!(o.try_files, ["{path}", "/index.html"]);
        assert!(matches!(routes[0].handler, HandlerConfig::Redirect(_)));
        assert_eq!(routes[1].matcher.methods, [http::Method::DELETE]);
        assert_eq!(routes[1].filters.max_body, Some(1024));
    }

    #[test]
    fn traffic_mistakes_are_reported_where_they_are() {
        let errs = |src: &str| load(src).unwrap_err().to_string();
        let site = "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nroot = \".\"\n";
        for (extra, want) in [
            ("limit = [{ rate = \"10/s\" }]\n", "is not a rate"),
            (
                "limit = [{ rate = \"10r/s\", connections = 2 }]\n",
                "exactly one of",
            ),
            (
                "limit = [{ connections = 2, burst = 3 }]\n",
                "go with `rate`",
            ),
            (
                "limit = [{ rate = \"1r/s\", key = \"ip\" }]\n",
                "unknown key `ip`",
            ),
            (
                "limit = [{ rate = \"1r/s\", bursts = 3 }]\n",
                "did you mean `burst`",
            ),
            ("allow = [\"10.0.0.300\"]\n", "allow"),
            (
                "basic_auth = { users = { bob = \"plain\" } }\n",
                "weir hash-password",
            ),
            (
                "forward_auth = { url = \"127.0.0.1:9/x\" }\n",
                "needs a scheme",
            ),
            (
                "response_headers = { set = { X-A = \"{nope}\" } }\n",
                "unknown placeholder",
            ),
            ("try_files = [\"index.html\"]\n", "try_files"),
            ("redirect = \"/x\"\n", "`root` excludes `redirect`"),
        ] {
            let e = errs(&format!("{site}{extra}"));
            assert!(e.contains(want), "{extra}: {e}");
        }
        let e = errs(&format!(
            "{site}[[site.\"a\".route]]\npath_regex = \"^/(x\"\nrespond = 200\n"
        ));
        assert!(e.contains("path_regex"), "{e}");
        let e = errs(&format!(
            "{site}[[site.\"a\".route]]\npath_regex = \"^/(x)$\"\nredirect = \"/{{2}}\"\n"
        ));
        assert!(e.contains("group {2} but the path has 1"), "{e}");
        let e = errs(&format!("{site}[[site.\"a\".route]]\nrespond = 200\n"));
        assert!(e.contains("matches nothing in particular"), "{e}");
        let e = errs(&format!(
            "{site}[[site.\"a\".route]]\npath = \"/x\"\nrespond = 200\nredirect = \"/y\"\n"
        ));
        assert!(e.contains("give one of"), "{e}");
    }

    #[test]
    fn sites_that_proxy_are_told_from_those_that_answer_themselves() {
        let proxies = |src: &str| load(src).unwrap().sites[0].handler.proxies();
        assert!(!proxies("[site.\"a\"]\nroot = \".\"\n"));
        assert!(proxies(
            "[site.\"a\"]\nproxy = { to = [\"127.0.0.1:9\"] }\n"
        ));
        assert!(proxies(
            "[site.\"a\"]\nroot = \".\"\n[[site.\"a\".route]]\npath = \"/api/*\"\nproxy = { to = [\"127.0.0.1:9\"] }\n"
        ));
    }

    #[test]
    fn misspelt_key_names_position_and_suggestion() {
        let err =
            load("[site.\"a\"]\nroot = \".\"\nbrowze = true\n[server]\nwrokers = 2\n").unwrap_err();
        let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(
            msgs[0],
            "weir.toml:3:1: unknown key `site.a.browze`: did you mean `browse`?"
        );
        assert_eq!(
            msgs[1],
            "weir.toml:5:1: unknown key `server.wrokers`: did you mean `workers`?"
        );
    }

    /// `server.http1` chose hyper's HTTP/1 engine; that engine is gone, so
    /// any value, the old default included, is refused with the release.
    #[test]
    fn the_removed_http1_engine_key_is_refused_with_its_release() {
        for value in ["\"fast\"", "\"hyper\"", "true"] {
            let err = load(&format!(
                "[server]\nhttp1 = {value}\n[site.\"a\"]\nroot = \".\"\n"
            ))
            .unwrap_err();
            let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
            assert_eq!(
                msgs,
                [
                    "weir.toml:2:9: server.http1 was removed in weir 0.1: weir's own HTTP/1 server \
                  and client serve every HTTP/1 request (hyper's engine is gone); delete the key"
                ],
                "{value}"
            );
        }
    }

    #[test]
    fn accept_steering_is_chosen_and_checked() {
        let cfg = load("[server]\naccept = \"cpu\"\n[site.\"a\"]\nroot = \".\"\n").unwrap();
        assert_eq!(cfg.server.accept, AcceptSteering::Cpu);
        let cfg = load("[site.\"a\"]\nroot = \".\"\n").unwrap();
        assert_eq!(cfg.server.accept, AcceptSteering::Hash);
        let cfg = load("[server]\nruntime = \"shared\"\n[site.\"a\"]\nroot = \".\"\n").unwrap();
        assert_eq!(cfg.server.accept, AcceptSteering::Hash);
        let cfg = load("[server]\naccept = \"hash\"\n[site.\"a\"]\nroot = \".\"\n").unwrap();
        assert_eq!(cfg.server.accept, AcceptSteering::Hash);
        for removed in ["pack", "adaptive"] {
            let err = load(&format!(
                "[server]\naccept = \"{removed}\"\n[site.\"a\"]\nroot = \".\"\n"
            ))
            .unwrap_err();
            assert_eq!(
                err.0[0].to_string(),
                format!(
                    "weir.toml:2:10: server.accept: `{removed}` was removed; use \"hash\" (the default: the kernel's SO_REUSEPORT hash) or \"cpu\""
                )
            );
        }
        let err =
            load("[server]\nruntime = \"shared\"\naccept = \"cpu\"\n[site.\"a\"]\nroot = \".\"\n")
                .unwrap_err();
        let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "weir.toml:3:10: server.accept: \"cpu\" steers among per-core workers; it needs runtime = \"per-core\""
            ]
        );
        let err = load("[server]\naccept = \"random\"\n[site.\"a\"]\nroot = \".\"\n").unwrap_err();
        let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            msgs,
            ["weir.toml:2:10: server.accept: `random` is unknown; use \"hash\" or \"cpu\""]
        );
    }

    #[test]
    fn unknown_keys_in_routes_point_at_their_line() {
        let err = load(
            "[site.\"a\"]\nroot = \".\"\n\
             [[site.\"a\".route]]\npath = \"/api/*\"\nproxy = { to = [\"127.0.0.1:9\"] }\n\
             [[site.\"a\".route]]\npath = \"/b/*\"\nstrip_prefx = true\n\
             proxy = { to = [\"127.0.0.1:9\"], retires = 1 }\n",
        )
        .unwrap_err();
        let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "weir.toml:8:1: unknown key `site.a.route.1.strip_prefx`: did you mean `strip_prefix`?",
                "weir.toml:9:33: unknown key `site.a.route.1.proxy.retires`: did you mean `retries`?",
            ]
        );
    }

    #[test]
    fn every_semantic_error_is_reported() {
        let err = load(
            "[server]\nruntime = \"fast\"\n[server.timeouts]\nheader = \"5 fortnights\"\n[site.\"a\"]\nroot = \"/nonexistent/weir\"\nlisten = \"nowhere\"\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("weir.toml:2:11: server.runtime"), "{text}");
        assert!(
            text.contains("weir.toml:4:10: server.timeouts.header"),
            "{text}"
        );
        assert!(
            text.contains("weir.toml:6:8: site \"a\": root /nonexistent/weir"),
            "{text}"
        );
        assert!(
            text.contains("weir.toml:7:10: site \"a\": listen"),
            "{text}"
        );
    }

    /// One error of each branch of a site's and a `[tcp]`'s validation,
    /// each at its key: the positions the split of `load_str_with` keeps.
    #[test]
    fn site_section_errors_keep_their_positions() {
        let err = load(concat!(
            "[server]\n",
            "bind = \"nope\"\n",
            "[admin]\n",
            "zzzzzz = 1\n",
            "[site.\"a.test\"]\n",
            "passthrough = \"127.0.0.1:9\"\n",
            "root = \".\"\n",
            "[site.\":8081\"]\n",
            "passthrough = \"127.0.0.1:9\"\n",
            "default = true\n",
            "[site.\":8082\"]\n",
            "root = \".\"\n",
            "http_redirect = true\n",
            "access_log = { path = \"x.log\", format = \"xml\" }\n",
            "[site.\":8083\"]\n",
            "app = \"node x.js\"\n",
            "root = \".\"\n",
            "[site.\":8084\"]\n",
            "root = \".\"\n",
            "cache = true\n",
            "[site.\":8085\"]\n",
            "[tcp.\"t\"]\n",
            "listen = \":8084\"\n",
            "to = \"127.0.0.1:1\"\n",
        ))
        .unwrap_err();
        let msgs: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "weir.toml:2:8: server.bind: `nope` is not an IP address",
                "weir.toml:4:1: unknown key `admin.zzzzzz`; the keys allowed here are: listen, token",
                "weir.toml:6:15: site \"a.test\": `passthrough` hands its TLS to the upstream; remove `root`",
                "weir.toml:8:7: site \":8081\": `passthrough` routes by the TLS server name; name the site by a host",
                "weir.toml:8:7: site \":8081\": a `passthrough` site never answers HTTP, so it cannot be the `default`",
                "weir.toml:13:17: site \":8082\": http_redirect needs `tls` on the site",
                "weir.toml:14:14: site \":8082\": access_log: format `xml` is unknown; use \"combined\", \"common\", \"json\", a [log_format] name or a template with {variables} (known: combined, common, json)",
                "weir.toml:16:7: site \":8083\": `app` is the site's handler; remove `root` (use a route for some paths)",
                "weir.toml:20:9: site \":8084\": `cache` keeps responses of a proxy; add `proxy = { to = [...] }` or a route",
                "weir.toml:21:1: site \":8085\" has nothing to serve: add `root = \"/path/to/files\"`",
                "weir.toml:22:1: tcp \"t\": port 8084 is already used by a site or another [tcp]",
            ]
        );
    }

    /// A misspelt key in each kind of table, shorthands included: each
    /// suggestion comes from the fields of that table's struct.
    #[test]
    fn misspelt_keys_in_every_table_get_their_tables_suggestion() {
        let err = load(concat!(
            "[server]\n",
            "wrokers = 2\n",
            "[server.limits]\n",
            "hedaers = 10\n",
            "[tls.acme]\n",
            "emial = \"a@b.c\"\n",
            "[cache]\n",
            "memroy = \"1MiB\"\n",
            "[site.\"a\"]\n",
            "root = \".\"\n",
            "compres = { enabled = true }\n",
            "file_cache = { max_sze = \"1MiB\" }\n",
            "basic_auth = { realm = \"x\", users = {}, usrs = 1 }\n",
            "limit = [{ rate = \"1r/s\", brust = 1 }]\n",
            "request_headers = { sett = {} }\n",
            "[site.\"b\"]\n",
            "proxy = { to = \"127.0.0.1:9\", helth = { path = \"/\" }, passive = { failurs = 1 } }\n",
            "cache = { default_tl = \"1m\", key = { qurey = \"keep\" } }\n",
            "[[site.\"b\".route]]\n",
            "path = \"/x/*\"\n",
            "php = { to = \"127.0.0.1:9\", spilt = [\".php\"], health = { intervl = \"1s\" } }\n",
            "math = { method = \"GET\" }\n",
            "[site.\"c.test\"]\n",
            "passthrough = { to = \"127.0.0.1:9\", alpnn = [\"h2\"] }\n",
            "[site.\"d\"]\n",
            "app = { run = \"x\", instancs = 2 }\n",
            "[tcp.\"t\"]\n",
            "listen = \":9999\"\n",
            "to = \"127.0.0.1:1\"\n",
            "health = { intervall = \"1s\" }\n",
        ))
        .unwrap_err();
        let msgs: Vec<String> = err
            .0
            .iter()
            .map(|d| d.to_string())
            .filter(|m| m.contains("unknown key"))
            .collect();
        assert_eq!(
            msgs,
            [
                "weir.toml:2:1: unknown key `server.wrokers`: did you mean `workers`?",
                "weir.toml:4:1: unknown key `server.limits.hedaers`: did you mean `headers`?",
                "weir.toml:6:1: unknown key `tls.acme.emial`: did you mean `email`?",
                "weir.toml:8:1: unknown key `cache.memroy`: did you mean `memory`?",
                "weir.toml:11:1: unknown key `site.a.compres`: did you mean `compress`?",
                "weir.toml:12:16: unknown key `site.a.file_cache.max_sze`: did you mean `max_size`?",
                "weir.toml:13:41: unknown key `site.a.basic_auth.usrs`: did you mean `users`?",
                "weir.toml:14:27: unknown key `site.a.limit.0.brust`: did you mean `burst`?",
                "weir.toml:15:21: unknown key `site.a.request_headers.sett`: did you mean `set`?",
                "weir.toml:17:31: unknown key `site.b.proxy.helth`: did you mean `health`?",
                "weir.toml:17:67: unknown key `site.b.proxy.passive.failurs`: did you mean `failures`?",
                "weir.toml:18:11: unknown key `site.b.cache.default_tl`: did you mean `default_ttl`?",
                "weir.toml:18:38: unknown key `site.b.cache.key.qurey`: did you mean `query`?",
                "weir.toml:21:29: unknown key `site.b.route.0.php.spilt`: did you mean `split`?",
                "weir.toml:21:58: unknown key `site.b.route.0.php.health.intervl`: did you mean `interval`?",
                "weir.toml:22:1: unknown key `site.b.route.0.math`: did you mean `path`?",
                "weir.toml:24:37: unknown key `site.c.test.passthrough.alpnn`: did you mean `alpn`?",
                "weir.toml:26:20: unknown key `site.d.app.instancs`: did you mean `instances`?",
                "weir.toml:30:12: unknown key `tcp.t.health.intervall`: did you mean `interval`?",
            ]
        );
    }

    /// `access_log` and `request_id` take a shorthand or a table: a
    /// mistyped key in the table is refused with the key meant, and the
    /// shorthands and tables still read.
    #[test]
    fn mistyped_keys_of_access_log_and_request_id_are_refused() {
        let err = load(concat!(
            "[site.\"a\"]\n",
            "root = \".\"\n",
            "access_log = { path = \"a.log\", fromat = \"json\", smaple = 0.5 }\n",
            "request_id = { heder = \"X-Id\" }\n",
            "[site.\"b\"]\n",
            "root = \".\"\n",
            "access_log = { jornal = true }\n",
        ))
        .unwrap_err();
        let msgs: Vec<String> = err
            .0
            .iter()
            .map(|d| d.to_string())
            .filter(|m| m.contains("unknown key"))
            .collect();
        assert_eq!(
            msgs,
            [
                "weir.toml:3:32: unknown key `site.a.access_log.fromat`: did you mean `format`?",
                "weir.toml:3:49: unknown key `site.a.access_log.smaple`: did you mean `sample`?",
                "weir.toml:4:16: unknown key `site.a.request_id.heder`: did you mean `header`?",
                "weir.toml:7:16: unknown key `site.b.access_log.jornal`: did you mean `journal`?",
            ]
        );
        let ok = load(concat!(
            "[site.\"a\"]\n",
            "root = \".\"\n",
            "access_log = \"stdout\"\n",
            "request_id = true\n",
            "[site.\"b\"]\n",
            "root = \".\"\n",
            "access_log = { journal = true, tag = \"web\", format = \"json\" }\n",
            "request_id = { header = \"X-Id\", response = true }\n",
        ))
        .unwrap();
        let site = |n: &str| ok.sites.iter().find(|s| s.name == n).unwrap();
        assert_eq!(site("a").access_log.as_ref().unwrap().sink, LogSink::Stdout);
        assert_eq!(
            site("b").access_log.as_ref().unwrap().sink,
            LogSink::Journal(log_format::JournalConfig {
                socket: log_format::JOURNAL_SOCKET.into(),
                identifier: "web".into(),
            })
        );
        assert!(site("b").request_id.as_ref().unwrap().response);
        let err = load("[site.\"a\"]\nroot = \".\"\naccess_log = 3\n").unwrap_err();
        assert!(
            err.0[0].to_string().contains("expected a path or a table"),
            "{}",
            err.0[0]
        );
    }

    /// The keys a site and a route share (declared once in `raw`) point at
    /// their own value in either table.
    #[test]
    fn shared_site_and_route_keys_point_at_their_value() {
        let err = load(concat!(
            "[site.\"a\"]\n",
            "root = \".\"\n",
            "allow = [\"10.0.0.300\"]\n",
            "max_body = \"lots\"\n",
            "[[site.\"a\".route]]\n",
            "path = \"/x/*\"\n",
            "root = \".\"\n",
            "deny = [\"nope\"]\n",
            "max_body = \"heaps\"\n",
        ))
        .unwrap_err();
        let at: Vec<(usize, usize, bool)> = err
            .0
            .iter()
            .map(|d| (d.line, d.col, d.message.contains("route 1")))
            .collect();
        assert_eq!(
            at,
            [(3, 9, false), (4, 12, false), (8, 8, true), (9, 12, true)],
            "{err}"
        );
    }

    #[test]
    fn syntax_error_has_position() {
        let err = load("[site.\"a\"\nroot = 1\n").unwrap_err();
        assert_eq!(err.0[0].line, 1, "{err}");
    }

    #[test]
    fn type_error_has_position() {
        let err = load("[site.\"a\"]\nroot = \".\"\nbrowse = \"yes\"\n").unwrap_err();
        assert_eq!((err.0[0].line, err.0[0].col), (3, 10), "{err}");
    }

    #[test]
    fn site_names_parse_into_hosts_and_ports() {
        assert_eq!(
            parse_site_name("example.com").unwrap(),
            (HostPattern::Exact("example.com".into()), None, None)
        );
        assert_eq!(
            parse_site_name("*.Example.com:8443").unwrap(),
            (
                HostPattern::Wildcard(".example.com".into()),
                Some(8443),
                None
            )
        );
        assert_eq!(
            parse_site_name(":8080").unwrap(),
            (HostPattern::Any, Some(8080), None)
        );
        assert_eq!(
            parse_site_name("127.0.0.1:9000").unwrap().2,
            Some("127.0.0.1".parse().unwrap())
        );
        assert!(parse_site_name("bad host!").is_err());
    }

    #[test]
    fn wildcard_matches_one_label() {
        let w = HostPattern::Wildcard(".example.com".into());
        assert!(w.matches("a.example.com"));
        assert!(w.matches("A.EXAMPLE.COM"));
        assert!(!w.matches("example.com"));
        assert!(!w.matches("a.b.example.com"));
    }

    #[test]
    fn sites_share_a_listener_and_first_is_default() {
        let cfg = load(
            "[site.\"a.test:8090\"]\nroot = \".\"\n[site.\"b.test:8090\"]\nroot = \".\"\ndefault = true\n",
        )
        .unwrap();
        assert_eq!(cfg.listeners.len(), 1);
        assert_eq!(cfg.listeners[0].sites, vec![0, 1]);
        assert_eq!(cfg.listeners[0].default_site, 1);
    }

    #[test]
    fn mixing_tls_and_plain_on_one_port_is_refused() {
        let err = load(
            "[site.\"a:8090\"]\nroot = \".\"\n[site.\"b:8090\"]\nroot = \".\"\ntls = { cert = \"/nonexistent/c.pem\", key = \"/nonexistent/k.pem\" }\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("c.pem"), "{text}");
        assert!(
            text.contains("mixes sites with and without `tls`"),
            "{text}"
        );
    }

    /// The fuzz target's invariant, on a few thousand mutations of a real
    /// config, so CI exercises it without nightly: never a panic, and every
    /// error points at a line of the text.
    #[test]
    fn mangled_configs_never_panic_and_errors_stay_in_the_text() {
        let base = "[server]\nworkers = 2\n[server.timeouts]\nheader = \"5s\"\n[site.\"a.test:8080\"]\nroot = \".\"\nindex = [\"index.html\"]\ncompress = { min_size = \"1KiB\" }\nerrors = { 404 = \"x.html\" }\n";
        let alphabet = b"[]{}\"=.,:#\n \\az09*-_";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3000 {
            let mut b = base.as_bytes().to_vec();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() as usize) % b.len();
                match next() % 3 {
                    0 => b[i] = alphabet[(next() as usize) % alphabet.len()],
                    1 => {
                        b.remove(i);
                    }
                    _ => b.insert(i, alphabet[(next() as usize) % alphabet.len()]),
                }
            }
            let Ok(src) = String::from_utf8(b) else {
                continue;
            };
            if let Err(errs) = load_str("f.toml", &src, std::path::Path::new("/nonexistent")) {
                let lines = src.lines().count() + 1;
                for d in &errs.0 {
                    assert!(d.line >= 1 && d.line <= lines, "{d} in {src:?}");
                }
            }
        }
    }
}
