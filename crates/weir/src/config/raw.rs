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
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawServer {
    /// Worker threads; default (0): one per core.
    pub workers: Option<Spanned<i64>>,
    /// `"per-core"` (default: one single-threaded runtime per worker, each with
    /// its own SO_REUSEPORT listener) or `"shared"` (one work-stealing runtime).
    pub runtime: Option<Spanned<String>>,
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
}

/// `[site."name"]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawSite {
    /// Addresses to listen on (`"127.0.0.1:8443"`, `":8080"`, `"[::]:443"`).
    /// Default: the port in the site name, else 443 with `tls`, else 80, on `server.bind`.
    pub listen: Option<Spanned<OneOrMany>>,
    /// This site answers requests whose Host matches no site on its listener.
    pub default: Option<bool>,
    /// Directory served as static files.
    pub root: Option<Spanned<String>>,
    /// `{ cert = "cert.pem", key = "key.pem" }`, paths relative to the config file.
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
    pub compress: Option<RawCompress>,
    pub file_cache: Option<RawFileCache>,
    /// Custom error pages: `{ 404 = "errors/404.html" }`, relative to the config file.
    pub errors: Option<BTreeMap<String, Spanned<String>>>,
    /// Extra response headers: `{ "X-Frame-Options" = "DENY" }`.
    pub headers: Option<IndexMap<String, Spanned<String>>>,
    /// Access log; off by default. `"stdout"`, a file path, or `{ path, format }`.
    pub access_log: Option<Spanned<RawAccessLog>>,
}

#[derive(Debug, Deserialize)]
pub struct RawTls {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

/// `compress = { ... }`: on-the-fly compression.
#[derive(Debug, Default, Deserialize)]
pub struct RawCompress {
    /// Default true.
    pub enabled: Option<bool>,
    /// Smallest body compressed; default 1KiB.
    pub min_size: Option<Spanned<Value>>,
    /// Codings offered, in order of preference; default `["br", "zstd", "gzip"]`.
    pub encodings: Option<Spanned<Vec<String>>>,
    /// MIME types compressed (`text/*` matches a prefix); default: text, JS, JSON, XML, SVG, WASM.
    pub types: Option<Vec<String>>,
}

/// `file_cache = { ... }`: in-memory cache of small hot files.
#[derive(Debug, Default, Deserialize)]
pub struct RawFileCache {
    /// Total bytes held; default 64MiB; 0 turns the cache off.
    pub max_size: Option<Spanned<Value>>,
    /// Larger files are streamed from disk; default 1MiB.
    pub max_file_size: Option<Spanned<Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawAccessLog {
    Path(String),
    Full {
        path: String,
        /// `"combined"` (default) or `"json"`.
        format: Option<String>,
    },
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
