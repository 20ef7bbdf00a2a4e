//! The config file as written: serde structs mirroring the TOML, every field
//! optional with its default documented here and in `docs/config.md`.
//!
//! Nothing here is validated beyond TOML types; [`super::validate`] turns a
//! [`RawConfig`] into a [`super::Config`] and reports every problem with its
//! position. Fields that can be wrong in ways TOML can't see are `Spanned`, so
//! the error can point at them.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_spanned::Spanned;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    /// Process-wide settings: `[server]`.
    #[serde(default)]
    pub server: RawServer,
    /// Sites, in file order: `[site."example.com"]`. The first site on a
    /// listener is its default unless another says `default = true`.
    #[serde(default)]
    pub site: IndexMap<String, Spanned<RawSite>>,
    /// Automatic HTTPS, the local CA and HTTP/3: `[tls]`.
    #[serde(default)]
    pub tls: RawTlsGlobal,
    /// The admin API: `[admin]`.
    #[serde(default)]
    pub admin: RawAdmin,
    /// Where cached responses are kept: `[cache]`.
    #[serde(default)]
    pub cache: RawCacheGlobal,
    /// Layer-4 proxies, in file order: `[tcp."postgres"]` with `listen` and `to`.
    #[serde(default)]
    pub tcp: IndexMap<String, Spanned<RawStream>>,
    /// Several weir processes as one, through Redis: `[cluster]`.
    pub cluster: Option<RawCluster>,
    /// Named access-log formats sites use by name: `[log_format.main]`.
    #[serde(default)]
    pub log_format: IndexMap<String, Spanned<RawLogFormat>>,
    /// OpenTelemetry traces exported over OTLP: `[traces]`. Off by default.
    pub traces: Option<Spanned<RawTraces>>,
}

/// `[traces]`.
#[derive(Debug, Deserialize)]
pub struct RawTraces {
    /// The collector's OTLP/HTTP traces URL,
    /// `"http://127.0.0.1:4318/v1/traces"`. Required.
    pub endpoint: Spanned<String>,
    /// The share of new traces recorded, 0 to 1; default 1. A client's
    /// sampled `traceparent` is always followed, an unsampled one never.
    pub sample: Option<Spanned<f64>>,
    /// `service.name` of every span; default `"weir"`.
    pub service_name: Option<Spanned<String>>,
    /// Most spans in one export; default 512.
    pub batch: Option<Spanned<u64>>,
    /// Longest wait before a partial batch goes; default `"1s"`.
    pub interval: Option<Spanned<Value>>,
    /// Spans waiting for export at most (more are dropped); default 4096.
    pub queue: Option<Spanned<u64>>,
    /// How long one export may take before it is given up; default `"5s"`.
    pub timeout: Option<Spanned<Value>>,
    /// `"http/protobuf"` (default) or `"grpc"`, as OpenTelemetry's
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
    pub protocol: Option<Spanned<String>>,
}

/// `[log_format.NAME]`.
#[derive(Debug, Deserialize)]
pub struct RawLogFormat {
    /// The template: `'{client_ip} "{method} {uri}" {status}'`. Required.
    pub format: Spanned<String>,
    /// `"default"` (nginx's), `"json"` or `"none"`; default `"default"`.
    pub escape: Option<Spanned<String>>,
}

/// `[cluster]`.
#[derive(Debug, Deserialize)]
pub struct RawCluster {
    /// `"redis://127.0.0.1:6379"`, or `rediss://` for TLS. Required.
    pub redis: Spanned<String>,
    /// The secret every instance shares (at least 32 characters).
    pub key: Option<Spanned<String>>,
    /// A file holding it (mode 0600), relative to the config file.
    pub key_file: Option<Spanned<String>>,
    /// With `rediss://`: the CA (PEM) that signed Redis's certificate,
    /// instead of the system's; relative to the config file.
    pub ca: Option<Spanned<String>>,
    /// This instance's name; default host name and pid.
    pub name: Option<String>,
    /// Prefix of Redis keys and channels; default `"weir"`.
    pub prefix: Option<String>,
    /// How often limit counts are exchanged; default `"50ms"`.
    pub exchange: Option<Value>,
    /// What is shared; default all of `["certificates", "limits", "cache"]`.
    pub share: Option<Spanned<Vec<String>>>,
}

/// `[cache]`: storage shared by every site and route that caches.
#[derive(Debug, Default, Deserialize)]
pub struct RawCacheGlobal {
    /// Bytes of responses held in memory; default 256MiB.
    pub memory: Option<Spanned<Value>>,
    /// Larger responses are streamed through and not stored; default 16MiB.
    pub max_object_size: Option<Spanned<Value>>,
    /// Keep responses on disk too, across restarts: `{ path = "/var/cache/weir", size = "10GiB" }`;
    /// default off. `size` defaults to 1GiB.
    pub disk: Option<RawCacheDisk>,
}

/// `[cache] disk = { ... }`.
#[derive(Debug, Deserialize)]
pub struct RawCacheDisk {
    /// Directory of the store, relative to the config file. Required.
    pub path: Spanned<String>,
    pub size: Option<Spanned<Value>>,
}

/// A site's or route's `cache`: `true`, `false`, or a table of settings.
#[derive(Debug)]
pub enum RawCacheSwitch {
    Off,
    On(Box<RawCache>),
}

impl<'de> Deserialize<'de> for RawCacheSwitch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawCacheSwitch;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or a table like { default_ttl = \"2m\" }")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(if b {
                    RawCacheSwitch::On(Box::default())
                } else {
                    RawCacheSwitch::Off
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<Self::Value, A::Error> {
                RawCache::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(|c| RawCacheSwitch::On(Box::new(c)))
            }
        }
        // As a struct, so the keys of the table are known (`introspect`).
        d.deserialize_struct("RawCache", crate::introspect::fields::<RawCache>(), V)
    }
}

/// `cache = { ... }` on a site or route.
#[derive(Debug, Default, Deserialize)]
pub struct RawCache {
    /// Freshness of responses that give none (no `max-age`, `s-maxage` or
    /// `Expires`); default: RFC 9111's heuristic only (a tenth of the time
    /// since `Last-Modified`).
    pub default_ttl: Option<Spanned<Value>>,
    /// Stale responses are served for this long while one background request
    /// refreshes them, unless the response says `stale-while-revalidate`;
    /// default 0s (off: RFC 9111 §4.2.4 serves stale only when allowed).
    pub grace: Option<Spanned<Value>>,
    /// Stale responses are served for this long when the upstream fails or is
    /// down, unless the response says `stale-if-error`; default 0s (off).
    pub stale_if_error: Option<Spanned<Value>>,
    /// The client's `Cache-Control`: `"ignore"` (default, as Varnish) or `"honour"`.
    pub request_cache_control: Option<Spanned<String>>,
    /// Responses with `Set-Cookie`: `"pass"` (default: not stored) or
    /// `"strip"` (stored without the cookie).
    pub set_cookie: Option<Spanned<String>>,
    /// What the cache key holds besides scheme, host and path.
    pub key: Option<RawCacheKey>,
    /// Response field listing an entry's tags for purges; default `"Surrogate-Key"`.
    pub tags_header: Option<Spanned<String>>,
    /// Addresses allowed to send `PURGE <url>`; default none.
    pub purge_from: Option<Spanned<Vec<String>>>,
}

/// `key = { ... }` in a cache.
#[derive(Debug, Default, Deserialize)]
pub struct RawCacheKey {
    /// `"keep"` (default), `"sort"` (parameters sorted) or `"ignore"`.
    pub query: Option<Spanned<String>>,
    /// Query parameters left out of the key; default none.
    pub ignore_params: Option<Vec<String>>,
    /// Request fields added to the key; default none.
    pub headers: Option<Spanned<Vec<String>>>,
    /// Cookies added to the key; default none.
    pub cookies: Option<Vec<String>>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawAdmin {
    /// `"127.0.0.1:2019"` (default), a Unix socket path, or `"off"`.
    pub listen: Option<Spanned<String>>,
    /// A bearer token every admin request must carry; required for a
    /// non-loopback address.
    pub token: Option<Spanned<String>>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawServer {
    /// Worker threads; default (0): one per core.
    pub workers: Option<Spanned<i64>>,
    /// `"per-core"` (default: one single-threaded runtime per worker, each with
    /// its own SO_REUSEPORT listener) or `"shared"` (one work-stealing runtime).
    pub runtime: Option<Spanned<String>>,
    /// Which worker takes a new connection: `"hash"` (default: the kernel's
    /// SO_REUSEPORT hash spreads them), `"cpu"` (the worker of the CPU that
    /// received it) or `"pack"` (the first worker while it keeps up).
    pub accept: Option<Spanned<String>>,
    /// Removed in weir 0.1 (it chose between weir's HTTP/1 engine and
    /// hyper's): any value is refused with an error that says so.
    pub http1: Option<Spanned<toml::Value>>,
    /// Address sites without an explicit `listen` bind to; default `"0.0.0.0"`.
    pub bind: Option<Spanned<String>>,
    /// Error-log level: error, warn, info (default), debug, trace.
    pub log_level: Option<Spanned<String>>,
    /// Error-log format: `"text"` (default) or `"json"`.
    pub log_format: Option<Spanned<String>>,
    /// How long in-flight requests may run after SIGTERM/SIGINT; default 10s.
    pub grace_period: Option<Spanned<Value>>,
    #[serde(default)]
    pub timeouts: RawTimeouts,
    #[serde(default)]
    pub limits: RawLimits,
}

/// `[server.timeouts]`: durations like `"30s"`, `"500ms"`, `"2m"` or seconds.
#[derive(Debug, Default, Deserialize)]
pub struct RawTimeouts {
    /// From the first byte of a request to the end of its head; default 60s (nginx's client_header_timeout).
    pub header: Option<Spanned<Value>>,
    /// An idle keep-alive connection is closed after this; default 75s (nginx's keepalive_timeout).
    pub keepalive: Option<Spanned<Value>>,
    /// Longest wait for the next piece of a request body; default 60s (client_body_timeout).
    pub body: Option<Spanned<Value>>,
    /// Longest a write to a client may stall; default 60s (send_timeout).
    pub write: Option<Spanned<Value>>,
}

/// `[server.limits]`: sizes like `"8KiB"`, `"1MiB"`, `"10m"` or bytes.
#[derive(Debug, Default, Deserialize)]
pub struct RawLimits {
    /// Largest request head (request line and headers); default 32KiB (nginx: 4 x 8k). Over: 431.
    pub header_size: Option<Spanned<Value>>,
    /// Most header fields in a request; default 100. Over: 431.
    pub headers: Option<Spanned<i64>>,
    /// Longest request target; default 8KiB. Over: 414.
    pub uri: Option<Spanned<Value>>,
    /// Largest request body; default 1MiB (nginx's client_max_body_size). Over: 413.
    pub body: Option<Spanned<Value>>,
    /// Most open client connections for the process; default 16384. Over: closed at accept.
    pub connections: Option<Spanned<i64>>,
    /// Most concurrent HTTP/2 streams per connection; default 128.
    pub h2_streams: Option<Spanned<i64>>,
    /// TLS handshakes in progress at once, across the process; default 128.
    /// More wait their turn, so established connections keep being served
    /// during a storm of new ones.
    pub tls_handshakes: Option<Spanned<i64>>,
}

/// Declares a struct with the keys a site and a route share (their
/// handler and their filters) after its own, so the two tables cannot drift.
/// A macro, not `#[serde(flatten)]`: a flattened struct is read through a
/// buffered map, where TOML's spans (`Spanned`) are lost and serde_ignored
/// never sees an unknown key.
macro_rules! with_shared_keys {
    ($(#[$attr:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$attr])*
        pub struct $name {
            $($own)*
            /// Static files from this directory (relative to the config file).
            pub root: Option<Spanned<String>>,
            /// Reverse proxy: `proxy = { to = ["127.0.0.1:9001"] }`, or only the
            /// upstreams: `proxy = "127.0.0.1:9001"`, `proxy = ["a:1", "b:1"]`.
            /// Off by default; a site has either `proxy` or `root` (use `route`
            /// for both), and a route one of `proxy`, `root`, `redirect`, `respond`.
            #[serde(default, deserialize_with = "proxy_shorthand")]
            pub proxy: Option<Spanned<RawProxy>>,
            /// Cache the proxy's responses: `true`, `false` or `{ default_ttl = "2m", ... }`;
            /// default off for a site, the site's for a route (a site's applies to
            /// its routes unless a route says otherwise).
            pub cache: Option<Spanned<RawCacheSwitch>>,
            /// Compression on the fly: `true`, `false` or a table. A site's
            /// static files are compressed unless it is false, other handlers'
            /// answers only when set; a route's unset keys are its site's.
            #[serde(default, deserialize_with = "compress_shorthand")]
            pub compress: Option<RawCompress>,
            /// Client addresses allowed (CIDRs or addresses); others get 403.
            /// Default: everyone. Checked after `deny`.
            pub allow: Option<Spanned<Vec<String>>>,
            /// Client addresses refused with 403 (CIDRs or addresses). Default: none.
            pub deny: Option<Spanned<Vec<String>>>,
            /// HTTP basic authentication: `{ realm = "admin", users = { alice = "$2b$12$..." } }`
            /// with bcrypt or argon2 hashes (`weir hash-password`). Default off.
            pub basic_auth: Option<Spanned<RawBasicAuth>>,
            /// Ask an auth service first: `{ url = "http://127.0.0.1:9091/verify", copy_headers = ["X-User"] }`.
            /// Default off.
            pub forward_auth: Option<Spanned<RawForwardAuth>>,
            /// Rate, connection and window limits: `[{ rate = "10r/s", burst = 5, nodelay = true }]`.
            pub limit: Option<Vec<Spanned<RawLimit>>>,
            /// Request fields changed before the handler: `{ set = { X-Real-IP = "{client_ip}" }, add = {...}, remove = [...] }`.
            pub request_headers: Option<Spanned<RawHeaderOps>>,
            /// Response fields changed after the handler: `{ set = {...}, add = {...}, remove = [...] }`.
            pub response_headers: Option<Spanned<RawHeaderOps>>,
            /// Largest request body, refused with 413 past it (`"10MiB"`); default `server.limits.body`.
            pub max_body: Option<Spanned<Value>>,
            /// Files tried in order for static requests, the last one answering
            /// whatever it gives: `["{path}", "/index.html"]` (a single-page app). Default: `{path}`.
            pub try_files: Option<Spanned<Vec<String>>>,
            /// Redirect every request: `"https://example.com{uri}"` or `{ to = "...", status = 301 }`
            /// (default status 302). Exclusive with `root` and `proxy`.
            pub redirect: Option<Spanned<RawRedirect>>,
            /// Answer every request with a fixed response: `403` or `{ status = 200, body = "ok" }`.
            pub respond: Option<Spanned<RawRespond>>,
            /// PHP through FastCGI with Caddy's `php_fastcgi` defaults:
            /// `"unix:/run/php/php-fpm.sock"` or `{ to = "127.0.0.1:9000", ... }`. Needs `root`.
            pub php: Option<Spanned<Shorthand<RawFastCgi>>>,
            /// A FastCGI application with no PHP defaults (no front controller).
            pub fastcgi: Option<Spanned<Shorthand<RawFastCgi>>>,
        }

        impl $name {
            /// The filter keys, for [`crate::traffic::filters`].
            pub fn filter_keys(&self) -> RawFilterKeys<'_> {
                RawFilterKeys {
                    allow: &self.allow,
                    deny: &self.deny,
                    basic_auth: &self.basic_auth,
                    forward_auth: &self.forward_auth,
                    limit: &self.limit,
                    request_headers: &self.request_headers,
                    response_headers: &self.response_headers,
                    max_body: &self.max_body,
                }
            }
        }
    };
}

/// The raw filter keys a site and a route share.
pub struct RawFilterKeys<'a> {
    pub allow: &'a Option<Spanned<Vec<String>>>,
    pub deny: &'a Option<Spanned<Vec<String>>>,
    pub basic_auth: &'a Option<Spanned<RawBasicAuth>>,
    pub forward_auth: &'a Option<Spanned<RawForwardAuth>>,
    pub limit: &'a Option<Vec<Spanned<RawLimit>>>,
    pub request_headers: &'a Option<Spanned<RawHeaderOps>>,
    pub response_headers: &'a Option<Spanned<RawHeaderOps>>,
    pub max_body: &'a Option<Spanned<Value>>,
}

with_shared_keys! {
/// `[site."name"]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawSite {
    /// Addresses to listen on (`"127.0.0.1:8443"`, `":8080"`, `"[::]:443"`).
    /// Default: the port in the site name, else 443 with `tls`, else 80, on `server.bind`.
    pub listen: Option<Spanned<OneOrMany>>,
    /// This site answers requests whose Host matches no site on its listener.
    pub default: Option<bool>,
    /// `{ cert = "cert.pem", key = "key.pem" }`, paths relative to the config
    /// file, reloaded when they change. Without `tls`, a site named by a host
    /// or IP with no port and no `listen` (or named `https://...`) gets its
    /// certificate automatically: from ACME for public names, from the local
    /// CA for `localhost`, `*.localhost`, `.local`, `.internal`, single-label
    /// names and IPs. `{ issuer = "acme" | "internal" }` forces automatic
    /// HTTPS and its issuer; `{ on_demand = true }` obtains certificates at
    /// the first handshake for names no site has (see `[tls.on_demand]`).
    pub tls: Option<Spanned<RawTls>>,
    /// Redirect plain HTTP to HTTPS: true (default for a TLS site with no
    /// explicit `listen`: listens on port 80 of the same address), false, or
    /// the address to listen on for plain HTTP (`"127.0.0.1:8080"`).
    pub http_redirect: Option<Spanned<BoolOrString>>,
    /// Index files tried for a directory; default `["index.html"]`.
    pub index: Option<Vec<String>>,
    /// Directory listings (HTML, or JSON for `Accept: application/json`); default false.
    pub browse: Option<bool>,
    /// Serve dot-files like `.env` and `.git/`; default false.
    pub serve_hidden: Option<bool>,
    /// Follow symlinks that lead outside `root`; default false.
    pub follow_symlinks: Option<bool>,
    /// Sidecar files served to clients that accept them, in order of
    /// preference; default `["br", "zstd", "gzip"]` (`file.br`, `file.zst`, `file.gz`).
    pub precompressed: Option<Spanned<Vec<String>>>,
    pub file_cache: Option<RawFileCache>,
    /// Custom error pages: `{ 404 = "errors/404.html" }`, relative to the config file.
    pub errors: Option<BTreeMap<String, Spanned<String>>>,
    /// Extra response headers: `{ "X-Frame-Options" = "DENY" }`.
    pub headers: Option<IndexMap<String, Spanned<String>>>,
    /// Access log; off by default. `"stdout"`, a file path, or `{ path, format }`.
    pub access_log: Option<Spanned<RawAccessLog>>,
    /// An ID per request, sent upstream and logged: `true`, or
    /// `{ header = "X-Request-ID", response = true }`. Default off.
    pub request_id: Option<Spanned<RawRequestId>>,
    /// With `[traces]`: `false` records no spans for this site. Default true.
    pub traces: Option<bool>,
    /// Routes by path, tried in file order before the site's own handler:
    /// `[[site."x".route]]` with `path = "/api/*"` and `proxy = { ... }`. None by default.
    pub route: Option<Vec<Spanned<RawRoute>>>,
    /// Accept the PROXY protocol (v1 or v2, detected) on this site's
    /// listeners, from `trusted_sources` only; default false.
    pub proxy_protocol: Option<Spanned<bool>>,
    /// CIDRs allowed to send a PROXY protocol header; default: none (every
    /// connection is refused while `proxy_protocol = true` and this is empty).
    pub trusted_sources: Option<Spanned<Vec<String>>>,
    /// An application weir runs and proxies to: `"node server.js"` or
    /// `{ run = "...", instances = 2, ... }`; instead of `proxy`.
    pub app: Option<Spanned<Shorthand<RawApp>>>,
    /// TLS for this name is passed through untouched to these upstreams
    /// (routed by SNI): `"10.0.0.5:443"` or `{ to = [...], alpn = [...] }`.
    pub passthrough: Option<Spanned<Shorthand<RawStream>>>,
}
}

/// A key that is either an upstream address or a table with `to` and settings.
#[derive(Debug)]
pub enum Shorthand<T> {
    To(String),
    Full(Box<T>),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shorthand<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = Shorthand<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address like \"127.0.0.1:9000\" or a table like { to = \"...\" }")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Shorthand::To(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(|t| Shorthand::Full(Box::new(t)))
            }
        }
        // As a struct, so the keys of the table are known (`introspect`).
        let fields = crate::introspect::fields::<T>();
        d.deserialize_struct("Shorthand", fields, V(std::marker::PhantomData))
    }
}

/// `proxy = "ADDR"` or `proxy = ["ADDR", …]`: the upstreams alone, every
/// other setting at its default (Caddy's `reverse_proxy ADDR`); a table is
/// read as `RawProxy` itself, with its own errors.
fn proxy_shorthand<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Spanned<RawProxy>>, D::Error> {
    enum Given {
        To(RawUpstreams),
        Full(Box<RawProxy>),
    }
    impl<'de> Deserialize<'de> for Given {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Given;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(
                        "an upstream like \"127.0.0.1:9001\", a list of them, or a table like { to = [...] }",
                    )
                }
                fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Given, E> {
                    Ok(Given::To(RawUpstreams::One(s.to_string())))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, a: A) -> Result<Given, A::Error> {
                    Vec::<RawUpstream>::deserialize(serde::de::value::SeqAccessDeserializer::new(a))
                        .map(|v| Given::To(RawUpstreams::Many(v)))
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Given, A::Error> {
                    RawProxy::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                        .map(|p| Given::Full(Box::new(p)))
                }
            }
            // As a struct, so the keys of the table are known (`introspect`).
            d.deserialize_struct("RawProxy", crate::introspect::fields::<RawProxy>(), V)
        }
    }
    let Some(given) = Option::<Spanned<Given>>::deserialize(d)? else {
        return Ok(None);
    };
    let span = given.span();
    let proxy = match given.into_inner() {
        Given::To(to) => RawProxy::bare(Spanned::new(span.clone(), to)),
        Given::Full(p) => *p,
    };
    Ok(Some(Spanned::new(span, proxy)))
}

/// `php = { ... }` / `fastcgi = { ... }`: FastCGI upstreams (PHP-FPM) and
/// how requests become scripts.
#[derive(Debug, Default, Deserialize)]
pub struct RawFastCgi {
    /// Upstreams: `"127.0.0.1:9000"`, `"unix:/run/php/php-fpm.sock"`, or a list. Required.
    pub to: Option<Spanned<RawUpstreams>>,
    /// The document root the scripts are in; default: the site's or route's `root`.
    pub root: Option<Spanned<String>>,
    /// Where a path splits into the script and `PATH_INFO`; default `[".php"]`.
    pub split: Option<Spanned<Vec<String>>>,
    /// Scripts tried for a directory; default `["index.php"]`.
    pub index: Option<Spanned<Vec<String>>>,
    /// The script that answers paths naming no file (`PATH_INFO` is the
    /// path): default `"/index.php"` for `php`, none for `fastcgi`; `""` turns it off.
    pub front_controller: Option<Spanned<String>>,
    /// Extra variables passed to every script: `{ APP_ENV = "prod" }`.
    pub env: Option<IndexMap<String, Spanned<String>>>,
    /// Most connections open to each upstream (with `keep_conn`, idle ones
    /// included: then at most PHP-FPM's `pm.max_children`); default 5.
    pub max_conns: Option<Spanned<i64>>,
    /// Keep connections open between requests (`FCGI_KEEP_CONN`, nginx's
    /// `fastcgi_keep_conn`); default false. A kept connection holds a PHP-FPM
    /// child while idle, so `max_conns` must then not exceed `pm.max_children`.
    pub keep_conn: Option<Spanned<bool>>,
    /// Requests that may wait for a connection; default 1024. Over: 503.
    pub queue: Option<Spanned<i64>>,
    /// Longest wait for a connection; default 5s. Over: 503.
    pub queue_timeout: Option<Spanned<Value>>,
    /// Connecting must finish within this; default 5s.
    pub connect_timeout: Option<Spanned<Value>>,
    /// Each read of the response must come within this; default 60s. Over: 504.
    pub read_timeout: Option<Spanned<Value>>,
    /// Each write of the request must finish within this; default 60s.
    pub send_timeout: Option<Spanned<Value>>,
    /// Idle connections are closed after this; default 60s.
    pub idle_timeout: Option<Spanned<Value>>,
    /// As a proxy's `balance`; default `"round_robin"`.
    pub balance: Option<Spanned<String>>,
    /// Further attempts on other upstreams when connecting fails; default 2.
    pub retries: Option<Spanned<i64>>,
    /// Active health checks (connection checks); default off.
    pub health: Option<RawHealth>,
    /// Passive health checks, as a proxy's.
    pub passive: Option<RawPassive>,
    /// Upstream host names are resolved again after this; default 30s.
    pub dns_ttl: Option<Spanned<Value>>,
}

/// `app = { ... }`: the processes of an application weir runs.
#[derive(Debug, Default, Deserialize)]
pub struct RawApp {
    /// The command line, run with `sh -c`; `$PORT` and `$HOST` (or
    /// `$SOCKET`) say where to listen. Required.
    pub run: Option<String>,
    /// Processes kept running; default 1.
    pub instances: Option<i64>,
    /// Working directory, relative to the config file; default its directory.
    pub dir: Option<String>,
    /// Extra environment variables.
    pub env: Option<IndexMap<String, String>>,
    /// A file of `KEY=value` lines (secrets): it must not be readable by others.
    pub env_file: Option<String>,
    /// Path whose 2xx/3xx answer means an instance is ready; default `"/"`.
    pub ready: Option<String>,
    /// Longest wait for an instance to be ready; default 30s.
    pub start_timeout: Option<Value>,
    /// SIGTERM, then SIGKILL after this; default 10s.
    pub stop_timeout: Option<Value>,
    /// Stop every instance after this long with no request (scale to
    /// zero); the next request starts one. Default: never.
    pub idle: Option<Value>,
    /// Reach instances by a Unix socket (`$SOCKET`) instead of a port; default false.
    pub socket: Option<bool>,
    /// Requests that may wait for an instance to start; default 1024.
    pub queue: Option<i64>,
    /// Files and directories (under `dir`) whose change makes a reload
    /// restart the app; default: everything under `dir` when it is given.
    pub watch: Option<Vec<String>>,
}

/// `[tcp."name"]`, or a site's `passthrough = { ... }`: byte streams
/// proxied to upstreams.
#[derive(Debug, Default, Deserialize)]
pub struct RawStream {
    /// `[tcp."x"]` only: addresses to listen on. Required there.
    pub listen: Option<Spanned<OneOrMany>>,
    /// Upstreams: `"10.0.0.5:5432"`, `"unix:/run/app.sock"`, or a list
    /// (`{ addr = "...", weight = 3 }` too). Required.
    pub to: Option<Spanned<RawUpstreams>>,
    /// As a proxy's `balance` (`ip_hash` keys on the client address); default `"round_robin"`.
    pub balance: Option<Spanned<String>>,
    /// Connecting must finish within this; default 5s.
    pub connect_timeout: Option<Spanned<Value>>,
    /// A stream with no byte either way for this long is closed; default 10m.
    pub idle_timeout: Option<Spanned<Value>>,
    /// Most connections open to each upstream; default 0 = no limit.
    pub max_conns: Option<Spanned<i64>>,
    /// Most connections open from one client address; default 0 = no limit.
    pub max_conns_per_client: Option<Spanned<i64>>,
    /// Further upstreams tried when connecting fails; default 2.
    pub retries: Option<Spanned<i64>>,
    /// Active health checks (connection checks); default off.
    pub health: Option<RawHealth>,
    /// Passive health checks, as a proxy's.
    pub passive: Option<RawPassive>,
    /// Send a PROXY protocol header to upstreams: `"v1"` or `"v2"`; default off.
    pub send_proxy_protocol: Option<Spanned<String>>,
    /// `passthrough` only: pass through only clients offering one of these
    /// ALPN protocols; default: any.
    pub alpn: Option<Spanned<Vec<String>>>,
    /// Upstream host names are resolved again after this; default 30s.
    pub dns_ttl: Option<Spanned<Value>>,
}

with_shared_keys! {
/// `[[site."x".route]]`: requests whose path matches go to this route's handler.
#[derive(Debug, Deserialize)]
pub struct RawRoute {
    /// `"/api/"` (prefix), `"/api/*"` (the prefix `/api/` and `/api` itself)
    /// or a glob with `*` (`"/*.php"`). Default: every path.
    pub path: Option<Spanned<String>>,
    /// A regular expression the path must match; its groups are `{1}`,
    /// `{2}`... in `rewrite`, `redirect` and header values. Exclusive with `path`.
    pub path_regex: Option<Spanned<String>>,
    /// More conditions, all of which must hold: `{ method = ["GET"], host = "a.example",
    /// header = { X-Debug = "1" }, query = { preview = "*" }, client = ["10.0.0.0/8"], protocol = "https" }`.
    #[serde(rename = "match")]
    pub matches: Option<Spanned<RawMatch>>,
    /// Remove the literal part of `path` before the first `*` (keeping a
    /// leading `/`) before forwarding; default false.
    pub strip_prefix: Option<bool>,
    /// Replace the literal part of `path` with this before forwarding
    /// (`"/v2/"`); default: no rewrite. Exclusive with `strip_prefix`.
    pub rewrite: Option<Spanned<String>>,
}
}

/// `basic_auth = { ... }`.
#[derive(Debug, Deserialize)]
pub struct RawBasicAuth {
    /// Shown by browsers in the login prompt; default `"restricted"`.
    pub realm: Option<String>,
    /// User name to a bcrypt (`$2b$...`) or argon2 (`$argon2id$...`) hash. Required.
    pub users: IndexMap<String, Spanned<String>>,
}

/// `forward_auth = { ... }`.
#[derive(Debug, Deserialize)]
pub struct RawForwardAuth {
    /// The auth service's endpoint: `"http://127.0.0.1:9091/verify"`. Required.
    pub url: Spanned<String>,
    /// Request fields sent to it; default: all of the client's.
    pub headers: Option<Spanned<Vec<String>>>,
    /// Fields of its 2xx answer copied onto the request (removed from the
    /// client's request first); default none.
    pub copy_headers: Option<Spanned<Vec<String>>>,
    /// How long it may take to answer; default 5s (then 503).
    pub timeout: Option<Spanned<Value>>,
}

/// One entry of `limit = [...]`.
#[derive(Debug, Deserialize)]
pub struct RawLimit {
    /// Its name in logs, metrics and `RateLimit-Policy`; default `limitN`.
    pub name: Option<String>,
    /// What is counted apart: `"client"` (default), `"header:NAME"`,
    /// `"cookie:NAME"`, `"path"`, `"site"`, or a list of them.
    pub key: Option<Spanned<OneOrMany>>,
    /// Requests per time: `"10r/s"`, `"300r/m"`.
    pub rate: Option<Spanned<String>>,
    /// Requests beyond the rate held in the bucket; default 0.
    pub burst: Option<u64>,
    /// Answer the whole burst at once instead of spacing it out; default false.
    pub nodelay: Option<bool>,
    /// Answer the first `delay` of the burst at once, space out the rest.
    pub delay: Option<u64>,
    /// Requests in progress at once per key (nginx's `limit_conn`).
    pub connections: Option<u64>,
    /// The sliding window of `requests`, `errors` and `bytes`: `"10s"`.
    pub window: Option<Spanned<Value>>,
    /// Most requests per window.
    pub requests: Option<u64>,
    /// Most error answers (status 400 and above) per window.
    pub errors: Option<u64>,
    /// Most response bytes per window (`"100MiB"`).
    pub bytes: Option<Spanned<Value>>,
    /// Status of a refusal; default 429.
    pub status: Option<Spanned<u16>>,
    /// Body of a refusal; default a short text.
    pub body: Option<String>,
    /// Only log and count what would be refused; default false.
    pub dry_run: Option<bool>,
    /// Most keys tracked; the least recently seen are forgotten past it; default 100000.
    pub size: Option<Spanned<u64>>,
    /// Send the `RateLimit-Policy` and `RateLimit` fields; default false.
    pub headers: Option<bool>,
}

/// `request_headers` and `response_headers`.
#[derive(Debug, Deserialize)]
pub struct RawHeaderOps {
    /// Replace these fields (`{ X-Real-IP = "{client_ip}" }`).
    pub set: Option<IndexMap<String, Spanned<String>>>,
    /// Add these fields, keeping any present.
    pub add: Option<IndexMap<String, Spanned<String>>>,
    /// Remove these fields.
    pub remove: Option<Vec<Spanned<String>>>,
}

/// A route's `match = { ... }`.
#[derive(Debug, Deserialize)]
pub struct RawMatch {
    /// `"GET"` or `["GET", "HEAD"]`.
    pub method: Option<OneOrMany>,
    /// Host names (`"*.example.com"` matches one label).
    pub host: Option<OneOrMany>,
    /// Fields and their values (`"*"`: present with any value).
    pub header: Option<IndexMap<String, String>>,
    /// Query parameters and their values (`"*"`: present with any value).
    pub query: Option<IndexMap<String, String>>,
    /// Client addresses (CIDRs).
    pub client: Option<Vec<String>>,
    /// `"http"`, `"https"`, `"http/1.1"`, `"h2"` or `"h3"`.
    pub protocol: Option<String>,
}

/// `redirect = "..."` or `{ to = "...", status = 301 }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawRedirect {
    To(String),
    Full { to: String, status: Option<u16> },
}

/// `respond = 403` or `{ status = 200, body = "ok", content_type = "text/plain" }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawRespond {
    Status(u16),
    Full {
        status: Option<u16>,
        body: Option<String>,
        content_type: Option<String>,
    },
}

/// `proxy = { ... }`: forward requests to upstream servers.
#[derive(Debug, Deserialize)]
pub struct RawProxy {
    /// Upstreams: `"127.0.0.1:9001"`, `"http://app:8080"`, `"https://api.example.com"`,
    /// `"h2c://127.0.0.1:9002"`, `"unix:/run/app.sock"`, or `{ addr = "...", weight = 3 }`. Required.
    pub to: Spanned<RawUpstreams>,
    /// `"round_robin"` (default; smooth weighted when weights differ), `"least_conn"`,
    /// `"random"`, `"p2c"` (power of two choices), `"first"`, `"ip_hash"`, `"hash"`.
    pub balance: Option<Spanned<String>>,
    /// Key for `balance = "hash"`: `"uri"`, `"header:NAME"` or `"cookie:NAME"`; default `"uri"`.
    pub hash_key: Option<Spanned<String>>,
    /// Sticky sessions: the name of a cookie weir sets to pin a client to an upstream; default off.
    pub sticky_cookie: Option<Spanned<String>>,
    /// Host header sent upstream: `"pass"` (default: the client's), `"upstream"`
    /// (the upstream's host:port), or a literal value.
    pub host: Option<Spanned<String>>,
    /// Connecting (TCP, TLS, handshake) must finish within this; default 5s.
    pub connect_timeout: Option<Spanned<Value>>,
    /// The response head must arrive within this after the request head is sent; default 60s.
    pub response_timeout: Option<Spanned<Value>>,
    /// Idle pooled upstream connections are closed after this; default 60s.
    pub idle_timeout: Option<Spanned<Value>>,
    /// Idle connections kept per upstream per worker; default 1024 (as many as were in
    /// flight at once, up to that; `idle_timeout` closes the rest); 0 disables keep-alive.
    pub max_idle: Option<Spanned<i64>>,
    /// Most requests in flight per upstream (HAProxy's maxconn); default 0 = no limit.
    pub max_conns: Option<Spanned<i64>>,
    /// Requests that may wait for a free slot when `max_conns` is reached; default 0.
    /// Over: 503.
    pub queue: Option<Spanned<i64>>,
    /// Longest wait in that queue; default 5s. Over: 503.
    pub queue_timeout: Option<Spanned<Value>>,
    /// Further attempts on other upstreams after a failure that is safe to retry; default 2.
    pub retries: Option<Spanned<i64>>,
    /// Request bodies up to this size are buffered so that a failed
    /// idempotent request can be retried; larger bodies are streamed and never retried.
    /// Default 64KiB; 0 never buffers.
    pub retry_body_size: Option<Spanned<Value>>,
    /// Active health checks; default off.
    pub health: Option<RawHealth>,
    /// Passive health checks: `{ failures = 5, window = "10s", cooldown = "30s", max_ejected = "50%" }`
    /// (the defaults; docs/config.md, "Passive health").
    pub passive: Option<RawPassive>,
    /// Send X-Forwarded-For, -Proto and -Host; default true.
    pub x_forwarded: Option<bool>,
    /// Send RFC 7239 `Forwarded`; default true.
    pub forwarded: Option<bool>,
    /// Add `Via` to requests and responses; default true.
    pub via: Option<bool>,
    /// Client address mode. Default (absent): direct, incoming X-Forwarded-For
    /// and Forwarded are replaced. With CIDRs: they are kept when the peer is in
    /// one, and the client is the right-most address not in any.
    pub trusted_proxies: Option<Spanned<Vec<String>>>,
    /// Send a PROXY protocol header to upstreams: `"v1"` or `"v2"`; default off.
    pub send_proxy_protocol: Option<Spanned<String>>,
    /// Verify upstream TLS certificates against the system/webpki roots; default true.
    pub tls_verify: Option<bool>,
    /// TLS server name sent to upstreams; default: the upstream's host.
    pub sni: Option<String>,
    /// Send W3C `traceparent` upstream: the client's trace continued with
    /// a new span per attempt, or a new trace; default false.
    pub traceparent: Option<bool>,
    /// Upstream host names are resolved again after this; default 30s.
    pub dns_ttl: Option<Spanned<Value>>,
    /// Rewrite the upstream's `Location` and `Content-Location`: each
    /// `{ from = "http://10.0.0.2:8080/", to = "{scheme}://{http_host}/app/" }`
    /// replaces a value's leading `from` (the first that matches) with `to`,
    /// as nginx's `proxy_redirect` and Apache's `ProxyPassReverse`; default none.
    pub rewrite_location: Option<Spanned<Vec<RawLocationRewrite>>>,
}

/// One `rewrite_location` entry of a proxy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLocationRewrite {
    pub from: String,
    pub to: String,
}

impl RawProxy {
    /// A proxy to `to` with every other key unset (the upstream part of
    /// `php`, `fastcgi`, `passthrough` and `[tcp]`).
    pub fn bare(to: Spanned<RawUpstreams>) -> RawProxy {
        RawProxy {
            to,
            balance: None,
            hash_key: None,
            sticky_cookie: None,
            host: None,
            connect_timeout: None,
            response_timeout: None,
            idle_timeout: None,
            max_idle: None,
            max_conns: None,
            queue: None,
            queue_timeout: None,
            retries: None,
            retry_body_size: None,
            health: None,
            passive: None,
            x_forwarded: None,
            forwarded: None,
            via: None,
            trusted_proxies: None,
            send_proxy_protocol: None,
            tls_verify: None,
            sni: None,
            traceparent: None,
            dns_ttl: None,
            rewrite_location: None,
        }
    }
}

/// `health = { ... }` in a proxy: active checks, run by one background task.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawHealth {
    /// HTTP path to ask for; default `"/"`. Ignored with `tcp = true`.
    pub path: Option<String>,
    /// The check's method; default GET (HAProxy's `option httpchk HEAD`).
    pub method: Option<Spanned<String>>,
    /// Only check that a TCP connection opens; default false.
    pub tcp: Option<bool>,
    /// Expected status; default: any 2xx or 3xx.
    pub status: Option<Spanned<i64>>,
    /// Text the body must contain; default: not checked.
    pub body: Option<String>,
    /// Time between checks; default 2s.
    pub interval: Option<Spanned<Value>>,
    /// A check not done within this fails; default 1s.
    pub timeout: Option<Spanned<Value>>,
    /// Consecutive successes to mark a down upstream up; default 2.
    pub rise: Option<Spanned<i64>>,
    /// Consecutive failures to mark an up upstream down; default 3.
    pub fall: Option<Spanned<i64>>,
}

/// `passive = { ... }` in a proxy.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawPassive {
    /// Failures in a row (connect errors, resets, timeouts; 5xx are not
    /// counted) within `window` that eject an upstream; default 5; 0 turns
    /// passive checks off.
    pub failures: Option<Spanned<i64>>,
    /// Default 10s.
    pub window: Option<Spanned<Value>>,
    /// How long an upstream stays out before one trial request; default 30s.
    pub cooldown: Option<Spanned<Value>>,
    /// The share of the usable upstreams ejected at once, `"50%"` (the
    /// default); at least one of two or more, never the last one.
    pub max_ejected: Option<Spanned<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawUpstreams {
    One(String),
    Many(Vec<RawUpstream>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawUpstream {
    Addr(String),
    Full {
        addr: String,
        /// Share of requests relative to the others; default 1.
        weight: Option<i64>,
    },
}

/// A site's `tls = { ... }`.
#[derive(Debug, Default, Deserialize)]
pub struct RawTls {
    /// Certificate chain (PEM), with `key`.
    pub cert: Option<Spanned<String>>,
    /// Private key (PEM) of `cert`.
    pub key: Option<Spanned<String>>,
    /// `"acme"` or `"internal"` (the local CA); default: by the site's name.
    pub issuer: Option<Spanned<String>>,
    /// Obtain certificates at the first handshake for names no site has,
    /// behind `[tls.on_demand]`'s `ask` or `allow`; default false.
    pub on_demand: Option<Spanned<bool>>,
}

/// `[tls]`: process-wide certificate settings.
#[derive(Debug, Default, Deserialize)]
pub struct RawTlsGlobal {
    /// Where accounts, certificates, keys and the local CA are kept; default
    /// `$XDG_DATA_HOME/weir` (`~/.local/share/weir`). Relative to the config file.
    pub storage: Option<Spanned<String>>,
    /// Serve HTTP/3 (QUIC) on the UDP port of every TLS listener, advertised
    /// with `Alt-Svc`; default true.
    pub http3: Option<bool>,
    /// Accept TLS 1.3 / QUIC 0-RTT early data, for GET/HEAD/OPTIONS only
    /// (others get 425 Too Early); default false (replay risk).
    pub early_data: Option<bool>,
    #[serde(default)]
    pub acme: RawAcme,
    #[serde(default)]
    pub internal: RawInternal,
    #[serde(default)]
    pub on_demand: RawOnDemand,
}

/// `[tls.acme]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawAcme {
    /// Directory URL; default Let's Encrypt production. `"staging"` is
    /// Let's Encrypt's staging directory; any other CA by its `https://` URL.
    pub directory: Option<Spanned<String>>,
    /// Contact e-mail for the account; default none.
    pub email: Option<Spanned<String>>,
    /// External Account Binding: `{ kid = "...", hmac_key = "base64url" }`; default none.
    pub eab: Option<Spanned<RawEab>>,
    /// Certificate key type: `"p256"` (default, ECDSA P-256) or `"rsa2048"`.
    pub key_type: Option<Spanned<String>>,
    /// Challenge types, in order of preference; default `["http-01", "tls-alpn-01"]`.
    /// HTTP-01 is used only for sites with a plain-HTTP listener.
    pub challenges: Option<Spanned<Vec<String>>>,
    /// Extra root certificate (PEM) trusted for the ACME server's own HTTPS,
    /// for private CAs; default: the system roots only.
    pub ca_root: Option<Spanned<String>>,
    /// First wait after a failed order; doubles up to `retry_max`; default 1m.
    pub retry_min: Option<Spanned<Value>>,
    /// Longest wait between failed orders; default 1h.
    pub retry_max: Option<Spanned<Value>>,
}

/// `eab = { kid, hmac_key }`.
#[derive(Debug, Deserialize)]
pub struct RawEab {
    pub kid: String,
    /// The MAC key as the CA gives it: base64url.
    pub hmac_key: String,
}

/// `[tls.internal]`: the local CA.
#[derive(Debug, Default, Deserialize)]
pub struct RawInternal {
    /// Lifetime of leaf certificates; default 12h (renewed at two thirds).
    pub lifetime: Option<Spanned<Value>>,
}

/// `[tls.on_demand]`: the gate in front of on-demand certificates.
#[derive(Debug, Default, Deserialize)]
pub struct RawOnDemand {
    /// URL asked `GET <ask>?domain=<name>` before ordering; only a 200 allows
    /// it. Default none. On-demand sites need `ask` or `allow`.
    pub ask: Option<Spanned<String>>,
    /// Names (or `*.example.com` patterns) allowed without asking; default none.
    pub allow: Option<Vec<String>>,
    /// Most certificates obtained in a burst; default 10.
    pub burst: Option<Spanned<i64>>,
    /// One more certificate may be obtained after this; default "6s" (10 a minute).
    pub refill: Option<Spanned<Value>>,
    /// One name is tried at most once per this after a refusal or failure; default "10m".
    pub name_interval: Option<Spanned<Value>>,
}

/// `compress = { ... }`: on-the-fly compression.
#[derive(Debug, Default, Deserialize)]
pub struct RawCompress {
    /// Default true (a table turns compression on).
    pub enabled: Option<bool>,
    /// Smallest body compressed; default 1KiB.
    pub min_size: Option<Spanned<Value>>,
    /// Codings offered, in order of preference; default `["br", "zstd", "gzip"]`.
    pub encodings: Option<Spanned<Vec<String>>>,
    /// MIME types compressed (`text/*` matches a prefix); default: text, JS, JSON, XML, SVG, WASM.
    pub types: Option<Vec<String>>,
}

/// `compress = true | false`: the table's `enabled` alone, every other
/// setting at its default (as `cache = true`); a table is read as
/// `RawCompress` itself, with its own errors.
fn compress_shorthand<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<RawCompress>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = RawCompress;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("true, false or a table like { min_size = \"1KiB\" }")
        }
        fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<RawCompress, E> {
            Ok(RawCompress {
                enabled: Some(b),
                ..RawCompress::default()
            })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<RawCompress, A::Error> {
            RawCompress::deserialize(serde::de::value::MapAccessDeserializer::new(m))
        }
    }
    struct Given(RawCompress);
    impl<'de> Deserialize<'de> for Given {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            // As a struct, so the keys of the table are known (`introspect`).
            d.deserialize_struct("RawCompress", crate::introspect::fields::<RawCompress>(), V)
                .map(Given)
        }
    }
    Ok(Option::<Given>::deserialize(d)?.map(|g| g.0))
}

/// `file_cache = { ... }`: in-memory cache of small hot files.
#[derive(Debug, Default, Deserialize)]
pub struct RawFileCache {
    /// Total bytes held; default 64MiB; 0 turns the cache off.
    pub max_size: Option<Spanned<Value>>,
    /// Larger files are streamed from disk; default 1MiB.
    pub max_file_size: Option<Spanned<Value>>,
}

/// `request_id = true | false | { header, response }`.
#[derive(Debug)]
pub enum RawRequestId {
    On(bool),
    Full(RawRequestIdTable),
}

/// `request_id = { ... }`.
#[derive(Debug, Default, Deserialize)]
pub struct RawRequestIdTable {
    /// The request field that carries it; default `"X-Request-ID"`.
    pub header: Option<String>,
    /// Send it back in the response too; default false.
    pub response: Option<bool>,
}

/// `access_log = "PATH" | { ... }`.
#[derive(Debug)]
pub enum RawAccessLog {
    Path(String),
    Full(RawAccessLogTable),
}

/// `access_log = { ... }`.
#[derive(Debug, Default, Deserialize)]
pub struct RawAccessLogTable {
    /// A file, or `"stdout"`; not with `syslog` or `journal`.
    pub path: Option<String>,
    /// `"combined"` (default), `"common"`, `"json"`, a `[log_format]`
    /// name, or a template with `{variables}`.
    pub format: Option<String>,
    /// An inline template's escaping: `"default"`, `"json"` or `"none"`.
    pub escape: Option<String>,
    /// `"udp://HOST:PORT"` or `"unix:///dev/log"`: RFC 5424 syslog.
    pub syslog: Option<String>,
    /// `true` (systemd's socket) or the journal's socket path: each line
    /// as a journal entry with fields of its own. Default off.
    pub journal: Option<BoolOrString>,
    /// The syslog facility; default `"local7"`.
    pub facility: Option<String>,
    /// The syslog APP-NAME or journal SYSLOG_IDENTIFIER; default `"weir"`.
    pub tag: Option<String>,
    /// Only log answers for which it holds: `"status >= 400"`.
    #[serde(rename = "if")]
    pub condition: Option<String>,
    /// The share of requests logged (after `if`), 0 to 1; default 1.
    pub sample: Option<f64>,
}

/// Reads a shorthand (`visit`: a bool or a string) or the table `T` as a
/// struct, so serde_ignored reports its unknown keys and `introspect`
/// sees its fields (an untagged enum would buffer the table and hide both).
fn shorthand_or_table<'de, D, T, R>(
    d: D,
    expecting: &'static str,
    short: impl FnOnce(Short) -> Option<R>,
    table: impl FnOnce(T) -> R,
) -> Result<R, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<'de, T>(&'static str, std::marker::PhantomData<(&'de (), T)>);
    enum Read<T> {
        Short(Short),
        Table(T),
    }
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<'de, T> {
        type Value = Read<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Read<T>, E> {
            Ok(Read::Short(Short::Bool(b)))
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Read<T>, E> {
            Ok(Read::Short(Short::Str(s.to_string())))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<Read<T>, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(m)).map(Read::Table)
        }
    }
    let name = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("table");
    match d.deserialize_struct(
        name,
        crate::introspect::fields::<T>(),
        V::<T>(expecting, std::marker::PhantomData),
    )? {
        Read::Short(s) => short(s).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid value: expected {expecting}"))
        }),
        Read::Table(t) => Ok(table(t)),
    }
}

/// A shorthand's value.
enum Short {
    Bool(bool),
    Str(String),
}

impl<'de> Deserialize<'de> for RawRequestId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        shorthand_or_table(
            d,
            "true, false or a table like { header = \"X-Request-ID\", response = true }",
            |s| match s {
                Short::Bool(b) => Some(RawRequestId::On(b)),
                Short::Str(_) => None,
            },
            RawRequestId::Full,
        )
    }
}

impl<'de> Deserialize<'de> for RawAccessLog {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        shorthand_or_table(
            d,
            "a path or a table like { path = \"access.log\", format = \"json\" }",
            |s| match s {
                Short::Str(p) => Some(RawAccessLog::Path(p)),
                Short::Bool(_) => None,
            },
            RawAccessLog::Full,
        )
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum BoolOrString {
    Bool(bool),
    String(String),
}

/// A duration or size: a string with a unit, or a bare number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Int(i64),
    Float(f64),
    Str(String),
}
