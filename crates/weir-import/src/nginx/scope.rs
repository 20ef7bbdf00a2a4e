//! The settings nginx inherits from `http` to `server` to `location`
//! ([`Scope`]), with nginx's rule for array directives (`add_header`,
//! `proxy_set_header`, `limit_req`, `allow`/`deny`, `error_page`): a level
//! that writes one of them inherits none of its parent's. Also nginx's
//! sizes, durations and variables in weir's spelling.
//!
//! Reads directives and htpasswd files; never builds weir tables.

use std::collections::HashSet;

use super::parse::{Directive, Reader};
use crate::error::Origin;
use crate::report::Report;
use crate::toml::V;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Http,
    Server,
    Location,
}

/// A header nginx adds (`add_header NAME VALUE [always]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Hdr {
    pub name: String,
    pub value: String,
    pub at: Origin,
}

/// The settings in force at one level.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub root: Option<String>,
    pub index: Option<Vec<String>>,
    pub headers: Vec<Hdr>,
    pub gzip: bool,
    pub gzip_types: Vec<String>,
    pub gzip_min_length: Option<i64>,
    pub max_body: Option<V>,
    pub limit_req_status: Option<u16>,
    pub limit_conn_status: Option<u16>,
    pub auth_realm: Option<String>,
    pub auth_file: Option<(String, Origin)>,
    /// `allow`/`deny` in order: (allow?, CIDR).
    pub access: Vec<(bool, String)>,
    pub default_type: Option<String>,
    pub proxy_headers: Vec<(String, String, Origin)>,
    pub proxy_connect_timeout: Option<String>,
    pub proxy_read_timeout: Option<String>,
    pub proxy_ssl_verify: bool,
    pub proxy_redirect_off: bool,
    /// `proxy_redirect FROM TO` as `rewrite_location` pairs.
    pub proxy_redirects: Vec<(String, String)>,
    pub errors: Vec<(u16, String)>,
    pub autoindex: bool,
    pub expires: Option<String>,
    pub access_log: Option<V>,
    pub ssl_cert: Option<String>,
    pub ssl_key: Option<String>,
    /// Name, value, and the `fastcgi_param` line.
    pub fastcgi_params: Vec<(String, String, Origin)>,
    /// Pending limit_req/limit_conn references, resolved by the site against the zones.
    pub limit_refs: Vec<LimitRef>,
}

#[derive(Debug, Clone)]
pub enum LimitRef {
    Req {
        zone: String,
        burst: u64,
        nodelay: bool,
        delay: Option<u64>,
        at: Origin,
        text: String,
    },
    Conn {
        zone: String,
        n: u64,
        at: Origin,
        text: String,
    },
}

/// Which array directives a level has written (so it inherits none of them).
#[derive(Default)]
pub struct Seen(HashSet<&'static str>);

impl Seen {
    /// True the first time `kind` is seen at this level.
    fn first(&mut self, kind: &'static str) -> bool {
        self.0.insert(kind)
    }
}

/// Directives that belong inside `http` (to read a lone sites file).
pub fn is_http_level(name: &str) -> bool {
    !matches!(
        name,
        "user"
            | "worker_processes"
            | "pid"
            | "error_log"
            | "events"
            | "stream"
            | "load_module"
            | "env"
            | "worker_rlimit_nofile"
            | "pcre_jit"
            | "daemon"
            | "master_process"
    )
}

/// An nginx size (`10m`, `512k`, `1g`, bytes) as weir writes it.
pub fn size(s: &str) -> Option<V> {
    let s = s.trim().to_ascii_lowercase();
    if s == "0" {
        return None;
    }
    let (num, unit) = match *s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], "KiB"),
        b'm' => (&s[..s.len() - 1], "MiB"),
        b'g' => (&s[..s.len() - 1], "GiB"),
        _ => (&s[..], ""),
    };
    let n: i64 = num.parse().ok()?;
    Some(if unit.is_empty() {
        V::I(n)
    } else {
        V::S(format!("{n}{unit}"))
    })
}

/// An nginx time (`60s`, `1m`, `500ms`, `1h30m`, bare seconds) as weir writes it.
pub fn duration(s: &str) -> Option<String> {
    let s = s.trim();
    if let Ok(n) = s.parse::<u64>() {
        return Some(format!("{n}s"));
    }
    let mut total_ms: u64 = 0;
    let mut num = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            num.push(c as char);
            i += 1;
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let (mult, len) = if s[i..].starts_with("ms") {
            (1, 2)
        } else {
            let m = match c {
                b's' => 1000,
                b'm' => 60_000,
                b'h' => 3_600_000,
                b'd' => 86_400_000,
                b'w' => 7 * 86_400_000,
                b'M' => 30 * 86_400_000,
                b'y' => 365 * 86_400_000,
                _ => return None,
            };
            (m, 1)
        };
        total_ms += n * mult;
        i += len;
    }
    if !num.is_empty() {
        total_ms += num.parse::<u64>().ok()? * 1000;
    }
    Some(if total_ms.is_multiple_of(1000) {
        format!("{}s", total_ms / 1000)
    } else {
        format!("{total_ms}ms")
    })
}

/// Seconds of an nginx time, for `expires`.
pub fn seconds(s: &str) -> Option<u64> {
    let d = duration(s)?;
    if let Some(ms) = d.strip_suffix("ms") {
        return Some(ms.parse::<u64>().ok()? / 1000);
    }
    d.strip_suffix('s')?.parse().ok()
}

/// nginx variables in a string as weir placeholders (`$host` → `{host}`);
/// `Err` names the first variable weir has no placeholder for, or a
/// literal brace weir's templates cannot hold.
pub fn template(s: &str, server_name: &str) -> Result<String, String> {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' || c == b'}' {
            return Err(format!("the literal `{}`", c as char));
        }
        if c != b'$' {
            let start = i;
            while i < b.len() && b[i] != b'$' && b[i] != b'{' && b[i] != b'}' {
                i += 1;
            }
            out.push_str(&s[start..i]);
            continue;
        }
        i += 1;
        let name: String = if i < b.len() && b[i] == b'{' {
            let end = s[i..].find('}').map(|e| i + e).ok_or("`${` without `}`")?;
            let n = s[i + 1..end].to_string();
            i = end + 1;
            n
        } else {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            s[start..i].to_string()
        };
        match name.as_str() {
            "scheme" => out.push_str("{scheme}"),
            "host" => out.push_str("{host}"),
            "request_uri" => out.push_str("{uri}"),
            "uri" | "document_uri" => out.push_str("{path}"),
            "args" | "query_string" => {
                if out.ends_with("{?}") {
                    out.truncate(out.len() - 3);
                    out.push_str("{?query}");
                } else {
                    out.push_str("{query}");
                }
            }
            "is_args" => out.push_str("{?}"),
            "remote_addr" | "binary_remote_addr" => out.push_str("{client_ip}"),
            "request_method" => out.push_str("{method}"),
            "server_name" if !server_name.is_empty() => out.push_str(server_name),
            n if n.len() == 1 && n.as_bytes()[0].is_ascii_digit() && n != "0" => {
                out.push('{');
                out.push_str(n);
                out.push('}');
            }
            n => return Err(format!("the variable `${n}`")),
        }
    }
    if out.contains("{?}") {
        return Err("`$is_args` without `$args` after it".into());
    }
    Ok(out)
}

impl Scope {
    /// The scope a child level starts from.
    pub fn child(&self) -> Scope {
        self.clone()
    }

    /// Applies one directive of `level`; reports it.
    pub fn apply(
        &mut self,
        d: &Directive,
        seen: &mut Seen,
        report: &mut Report,
        _reader: &Reader,
        level: Level,
    ) {
        let r = report;
        match d.name.as_str() {
            "root" => {
                self.root = Some(d.arg(0).trim_end_matches('/').to_string()).map(|s| {
                    if s.is_empty() { "/".into() } else { s }
                });
                if !d.arg(0).starts_with('/') {
                    r.approx(&d.at, d.text(), "root", "a relative root: nginx resolves it against its prefix (-p), weir against weir.toml's directory; write it absolute");
                } else if d.arg(0).contains('$') {
                    r.none(&d.at, d.text(), "weir's root is a fixed directory, not variables");
                    self.root = None;
                } else {
                    r.mapped(&d.at, d.text(), "root");
                }
            }
            "index" => {
                self.index = Some(d.args.clone());
                r.mapped(&d.at, d.text(), "index");
            }
            "add_header" => {
                if seen.first("add_header") {
                    self.headers.clear();
                }
                let always = d.arg(2) == "always";
                self.headers.push(Hdr {
                    name: d.arg(0).to_string(),
                    value: d.arg(1).to_string(),
                    at: d.at.clone(),
                });
                if always {
                    r.mapped(&d.at, d.text(), "response_headers");
                } else {
                    r.approx(&d.at, d.text(), "response_headers", "weir adds it to every answer; nginx only to 200, 201, 204, 206, 301, 302, 303, 304, 307 and 308 (without `always`)");
                }
            }
            "gzip" => {
                self.gzip = d.arg(0) == "on";
                r.approx(&d.at, d.text(), "compress", "weir's static files are compressed unless `compress = false`, nginx's only with gzip on; with it on, weir also adds `Vary: Accept-Encoding` (nginx only with gzip_vary on) and gzips HTTP/1.0 requests too");
            }
            "gzip_types" => {
                self.gzip_types = d.args.iter().filter(|t| *t != "text/html").cloned().collect();
                r.mapped(&d.at, d.text(), "compress.types");
            }
            "gzip_min_length" => {
                self.gzip_min_length = d.arg(0).parse().ok();
                r.mapped(&d.at, d.text(), "compress.min_size");
            }
            "gzip_vary" | "gzip_proxied" | "gzip_comp_level" | "gzip_buffers" | "gzip_http_version"
            | "gzip_disable" => r.approx(&d.at, d.text(), "compress", "weir chooses its compression level and buffers itself, compresses proxied answers whatever their Via, and always sends `Vary: Accept-Encoding`"),
            "gzip_static" => r.mapped(&d.at, d.text(), "precompressed (weir serves .gz, .br and .zst sidecars by default)"),
            "client_max_body_size" => match size(d.arg(0)) {
                Some(v) => {
                    self.max_body = Some(v);
                    r.mapped(&d.at, d.text(), "max_body");
                }
                None => r.none(&d.at, d.text(), "weir has no unlimited body size: set max_body to the largest body you accept"),
            },
            "limit_req" => {
                if seen.first("limit_req") {
                    self.limit_refs.retain(|l| !matches!(l, LimitRef::Req { .. }));
                }
                let zone = d.args.iter().find_map(|a| a.strip_prefix("zone=")).unwrap_or("").to_string();
                let burst = d.args.iter().find_map(|a| a.strip_prefix("burst=")).and_then(|b| b.parse().ok()).unwrap_or(0);
                let delay = d.args.iter().find_map(|a| a.strip_prefix("delay=")).and_then(|b| b.parse().ok());
                self.limit_refs.push(LimitRef::Req {
                    zone,
                    burst,
                    nodelay: d.args.iter().any(|a| a == "nodelay"),
                    delay,
                    at: d.at.clone(),
                    text: d.text(),
                });
            }
            "limit_conn" => {
                if seen.first("limit_conn") {
                    self.limit_refs.retain(|l| !matches!(l, LimitRef::Conn { .. }));
                }
                self.limit_refs.push(LimitRef::Conn {
                    zone: d.arg(0).to_string(),
                    n: d.arg(1).parse().unwrap_or(1),
                    at: d.at.clone(),
                    text: d.text(),
                });
            }
            "limit_req_status" => {
                self.limit_req_status = d.arg(0).parse().ok();
                r.mapped(&d.at, d.text(), "limit status");
            }
            "limit_conn_status" => {
                self.limit_conn_status = d.arg(0).parse().ok();
                r.mapped(&d.at, d.text(), "limit status");
            }
            "limit_req_log_level" | "limit_conn_log_level" => r.mapped(&d.at, d.text(), "weir logs refusals at warn"),
            "limit_req_dry_run" | "limit_conn_dry_run" => r.none(&d.at, d.text(), "set `dry_run = true` on the limit by hand"),
            "auth_basic" => {
                self.auth_realm = (d.arg(0) != "off").then(|| d.arg(0).to_string());
                if self.auth_realm.is_some() {
                    r.approx_closed(&d.at, d.text(), "basic_auth", "weir's challenge says `Basic realm=\"…\", charset=\"UTF-8\"` (RFC 7617); nginx's has no charset");
                } else {
                    r.mapped(&d.at, d.text(), "basic_auth");
                }
            }
            "auth_basic_user_file" => {
                self.auth_file = Some((d.arg(0).to_string(), d.at.clone()));
                r.mapped(&d.at, d.text(), "basic_auth.users");
            }
            "allow" | "deny" => {
                if seen.first("access") {
                    self.access.clear();
                }
                let a = d.arg(0);
                let cidr = if a == "all" { "all".to_string() } else { a.to_string() };
                if a.starts_with("unix:") {
                    r.none(&d.at, d.text(), "weir's address lists hold IP addresses and CIDRs");
                } else {
                    self.access.push((d.name == "allow", cidr));
                }
            }
            "default_type" => {
                self.default_type = Some(d.arg(0).to_string());
                // weir's static files of no known type are application/octet-stream.
                if d.arg(0).eq_ignore_ascii_case("application/octet-stream") {
                    r.mapped(&d.at, d.text(), "respond content_type; static files' default");
                } else {
                    r.approx(
                        &d.at,
                        d.text(),
                        "respond content_type",
                        format!(
                            "a static file of no known type is application/octet-stream in weir, {} in nginx",
                            d.arg(0)
                        ),
                    );
                }
            }
            "types" => r.approx(&d.at, "types { … }", "weir's own type table", "weir names types from its own table (the same for common extensions, but `.js` is text/javascript, RFC 9239's name, where nginx's mime.types says application/javascript) and adds `; charset=utf-8` to textual ones"),
            "charset" | "source_charset" | "charset_types" | "override_charset" => r.approx(&d.at, d.text(), "weir's charset rule", "weir adds `; charset=utf-8` to every textual type and converts no charset"),
            "proxy_set_header" => {
                if seen.first("proxy_set_header") {
                    self.proxy_headers.clear();
                }
                self.proxy_headers.push((d.arg(0).to_string(), d.arg(1).to_string(), d.at.clone()));
            }
            "proxy_connect_timeout" => {
                self.proxy_connect_timeout = duration(d.arg(0));
                r.mapped(&d.at, d.text(), "proxy connect_timeout");
            }
            "proxy_read_timeout" => {
                self.proxy_read_timeout = duration(d.arg(0));
                r.approx(&d.at, d.text(), "proxy response_timeout", "weir times the wait for the response head; nginx each read of the response");
            }
            "proxy_send_timeout" => r.approx(&d.at, d.text(), "server.timeouts.write", "weir bounds each stalled write with the client body timeout, not per proxy"),
            "proxy_ssl_verify" => {
                self.proxy_ssl_verify = d.arg(0) == "on";
                r.mapped(&d.at, d.text(), "proxy tls_verify");
            }
            "proxy_ssl_trusted_certificate" | "proxy_ssl_verify_depth" => r.approx(&d.at, d.text(), "proxy tls_verify", "weir verifies upstream certificates against the system's roots only"),
            "proxy_ssl_server_name" | "proxy_ssl_name" => r.mapped(&d.at, d.text(), "proxy sni (weir sends the upstream's name by default)"),
            "proxy_redirect" => {
                // nginx's variables weir's templates have.
                let to = d
                    .arg(1)
                    .replace("$scheme", "{scheme}")
                    .replace("$http_host", "{http_host}")
                    .replace("$host", "{host}");
                match (d.arg(0), d.args.len()) {
                    ("off", 1) => {
                        self.proxy_redirect_off = true;
                        self.proxy_redirects.clear();
                        r.mapped(&d.at, d.text(), "no rewrite_location: weir rewrites no Location field");
                    }
                    ("default", 1) => {
                        self.proxy_redirect_off = false;
                        r.mapped(&d.at, d.text(), "proxy rewrite_location from the proxy_pass URL to the location");
                    }
                    (from, 2) if !from.contains('$') && !from.starts_with('~') && !to.contains('$') => {
                        self.proxy_redirect_off = false;
                        self.proxy_redirects.push((from.to_string(), to));
                        r.mapped(&d.at, d.text(), "proxy rewrite_location");
                    }
                    _ => r.none(&d.at, d.text(), "weir's rewrite_location replaces a fixed prefix: no regex, and no variable but $scheme, $host and $http_host in the replacement"),
                }
            }
            "proxy_http_version" | "proxy_buffering" | "proxy_buffers" | "proxy_buffer_size"
            | "proxy_busy_buffers_size" | "proxy_request_buffering" | "proxy_max_temp_file_size"
            | "proxy_temp_file_write_size" | "proxy_temp_path" | "proxy_ignore_client_abort"
            | "proxy_socket_keepalive" => r.mapped(&d.at, d.text(), "none needed: weir streams both ways over HTTP/1.1 with keep-alive"),
            "proxy_next_upstream" | "proxy_next_upstream_tries" | "proxy_next_upstream_timeout" => r.approx(&d.at, d.text(), "proxy retries", "weir retries a failed idempotent request on another upstream (2 retries), never after a response head"),
            "proxy_intercept_errors" => r.none(&d.at, d.text(), "weir passes an upstream's error answers as they are"),
            "proxy_hide_header" => r.none(&d.at, d.text(), "write `response_headers = { remove = [...] }` on the route by hand"),
            "proxy_pass_header" | "proxy_pass_request_headers" | "proxy_pass_request_body" => r.mapped(&d.at, d.text(), "weir passes fields and bodies by default"),
            "proxy_cache_path" | "proxy_cache" | "proxy_cache_valid" | "proxy_cache_key" | "proxy_cache_use_stale"
            | "proxy_cache_lock" | "proxy_cache_bypass" | "proxy_no_cache" | "proxy_cache_methods" => r.none(&d.at, d.text(), "weir's cache follows RFC 9111 rather than nginx's rules: add `cache = true` (or a table) to the proxy by hand, see docs/cache.md"),
            "error_page" => {
                if seen.first("error_page") {
                    self.errors.clear();
                }
                let uri = d.args.last().cloned().unwrap_or_default();
                let codes: Vec<u16> = d.args[..d.args.len().saturating_sub(1)].iter().filter_map(|c| c.parse().ok()).collect();
                let changes_status = d.args.iter().any(|a| a.starts_with('='));
                if uri.starts_with('/') && !changes_status && !uri.contains('$') && !uri.contains(".php") {
                    for c in codes {
                        self.errors.push((c, uri.clone()));
                    }
                    r.approx(&d.at, d.text(), "errors", "weir reads the page at start-up from the root in force here, for static answers; nginx serves it through a location");
                } else {
                    r.none(&d.at, d.text(), "weir's error pages are static files answered with the error's status, not scripts, other statuses or named locations");
                }
            }
            "autoindex" => {
                self.autoindex = d.arg(0) == "on";
                r.approx(&d.at, d.text(), "browse", "weir's listing is its own HTML (and JSON for Accept: application/json)");
            }
            "autoindex_exact_size" | "autoindex_localtime" | "autoindex_format" => r.approx(&d.at, d.text(), "browse", "weir's listing has one format"),
            "expires" => {
                match d.arg(0) {
                    "off" => self.expires = None,
                    "epoch" => self.expires = Some("no-cache".into()),
                    "max" => self.expires = Some("max-age=315360000".into()),
                    a => match seconds(a.trim_start_matches('+')) {
                        Some(s) if !a.starts_with('-') && !a.starts_with('@') && !a.starts_with("modified") => self.expires = Some(format!("max-age={s}")),
                        _ => {
                            r.none(&d.at, d.text(), "weir sets a fixed Cache-Control; write it in response_headers");
                            return;
                        }
                    },
                }
                r.approx(&d.at, d.text(), "response_headers Cache-Control", "weir sends Cache-Control only, no Expires field (HTTP/1.1 caches read Cache-Control first), on every answer");
            }
            "access_log" => {
                match d.arg(0) {
                    "off" => {
                        self.access_log = None;
                        r.mapped(&d.at, d.text(), "access_log (off by default)");
                    }
                    "syslog:" | "stdout" => r.none(&d.at, d.text(), "weir logs to a file or stdout"),
                    p => {
                        self.access_log = Some(V::s(p));
                        if d.args.len() > 1 && d.arg(1) != "combined" {
                            r.approx(&d.at, d.text(), "access_log", "weir writes the combined format (or JSON), not a log_format of your own");
                        } else {
                            r.mapped(&d.at, d.text(), "access_log");
                        }
                    }
                }
            }
            "log_format" => r.approx(&d.at, "log_format …", "access_log format", "weir writes the combined format or JSON lines"),
            "log_not_found" | "open_log_file_cache" => r.mapped(&d.at, d.text(), "weir logs no error for a missing file"),
            "ssl_certificate" => {
                self.ssl_cert = Some(d.arg(0).to_string());
                r.mapped(&d.at, d.text(), "tls.cert");
            }
            "ssl_certificate_key" => {
                self.ssl_key = Some(d.arg(0).to_string());
                r.mapped(&d.at, d.text(), "tls.key");
            }
            "ssl_protocols" => {
                if d.args.iter().any(|p| p == "TLSv1" || p == "TLSv1.1" || p == "SSLv3") {
                    r.approx(&d.at, d.text(), "weir's TLS", "weir speaks TLS 1.2 and 1.3 only: clients limited to TLS 1.0/1.1 cannot connect");
                } else {
                    r.mapped(&d.at, d.text(), "weir's TLS (1.2 and 1.3)");
                }
            }
            "ssl_ciphers" | "ssl_prefer_server_ciphers" | "ssl_ecdh_curve" | "ssl_dhparam" | "ssl_conf_command" => r.approx(&d.at, d.text(), "weir's TLS", "weir offers rustls's modern suites and curves, in its own order"),
            "ssl_session_cache" | "ssl_session_timeout" | "ssl_session_tickets" | "ssl_buffer_size" | "ssl_early_data" => r.mapped(&d.at, d.text(), "none needed: weir resumes sessions itself"),
            "ssl_stapling" | "ssl_stapling_verify" | "ssl_trusted_certificate" | "ssl_client_certificate" | "ssl_verify_client" => r.none(&d.at, d.text(), "weir does not staple OCSP nor verify client certificates"),
            "ssl" => r.mapped(&d.at, d.text(), "tls"),
            "http2" | "http3" | "quic_retry" | "http2_max_concurrent_streams" => r.mapped(&d.at, d.text(), "none needed: weir serves HTTP/2 and HTTP/3 on every TLS site"),
            "fastcgi_param" => {
                self.fastcgi_params.push((d.arg(0).to_string(), d.arg(1).to_string(), d.at.clone()));
            }
            "fastcgi_index" | "fastcgi_split_path_info" | "fastcgi_intercept_errors" | "fastcgi_buffers"
            | "fastcgi_buffer_size" | "fastcgi_busy_buffers_size" | "fastcgi_read_timeout" | "fastcgi_keep_conn"
            | "fastcgi_temp_path" | "fastcgi_connect_timeout" | "fastcgi_send_timeout" | "fastcgi_hide_header" => r.mapped(&d.at, d.text(), "php (weir splits, indexes and times scripts as nginx's fastcgi_params snippets do)"),
            "sendfile" | "tcp_nopush" | "tcp_nodelay" | "types_hash_max_size" | "types_hash_bucket_size"
            | "server_names_hash_bucket_size" | "server_names_hash_max_size" | "variables_hash_max_size"
            | "open_file_cache" | "open_file_cache_valid" | "open_file_cache_min_uses" | "open_file_cache_errors"
            | "client_body_buffer_size" | "client_header_buffer_size" | "large_client_header_buffers"
            | "keepalive_requests" | "reset_timedout_connection" | "client_body_temp_path" | "uwsgi_temp_path"
            | "scgi_temp_path" | "output_buffers" | "aio" | "directio" | "resolver" | "resolver_timeout"
            | "server_name_in_redirect" | "msie_padding" | "lingering_close" | "lingering_time" | "lingering_timeout"
            | "postpone_output" | "port_in_redirect" | "absolute_redirect" | "etag" | "if_modified_since" => {
                r.mapped(&d.at, d.text(), "none needed: weir does this itself")
            }
            "keepalive_timeout" | "client_header_timeout" | "client_body_timeout" | "send_timeout" => r.approx(&d.at, d.text(), "[server.timeouts]", "weir has one value for the whole process: set it in [server.timeouts]"),
            "server_tokens" => r.approx(&d.at, d.text(), "Server field", "weir sends `Server: weir`; remove it with response_headers = { remove = [\"Server\"] }"),
            _ => {
                let _ = level;
                r.none(&d.at, d.text(), "not known to weir import");
            }
        }
    }

    /// `basic_auth` in force: `None` off; `Some(None)` on with no user
    /// weir can check (the site then denies everyone).
    pub fn basic_auth(&self, reader: &Reader, r: &mut Report) -> Option<Option<V>> {
        self.auth_realm.as_ref()?;
        Some(self.users_from(reader, r))
    }

    /// The htpasswd file read into weir's `basic_auth`: bcrypt lines kept,
    /// others reported (weir checks bcrypt and argon2 only).
    fn users_from(&self, reader: &Reader, r: &mut Report) -> Option<V> {
        let (file, at) = self.auth_file.clone()?;
        let path = reader.resolve(&file);
        let users = crate::htpasswd::users(&path, "auth_basic_user_file", &file, &at, r)?;
        let mut t = Vec::new();
        if let Some(realm) = &self.auth_realm {
            t.push(("realm".to_string(), V::s(realm.clone())));
        }
        t.push(("users".to_string(), V::T(users)));
        Some(V::T(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_in_weir_spelling() {
        assert_eq!(size("10m"), Some(V::s("10MiB")));
        assert_eq!(size("512K"), Some(V::s("512KiB")));
        assert_eq!(size("4096"), Some(V::I(4096)));
        assert_eq!(size("0"), None);
        assert_eq!(duration("65").as_deref(), Some("65s"));
        assert_eq!(duration("3m").as_deref(), Some("180s"));
        assert_eq!(duration("1h30m").as_deref(), Some("5400s"));
        assert_eq!(duration("500ms").as_deref(), Some("500ms"));
        assert_eq!(seconds("30d"), Some(2_592_000));
    }

    #[test]
    fn variables_become_placeholders() {
        assert_eq!(
            template("https://$host$request_uri", "").unwrap(),
            "https://{host}{uri}"
        );
        assert_eq!(
            template("/new/$1$is_args$args", "").unwrap(),
            "/new/{1}{?query}"
        );
        assert_eq!(
            template("https://$server_name/$uri?$args", "example.com").unwrap(),
            "https://example.com/{path}?{query}"
        );
        assert!(
            template("$http_user_agent", "")
                .unwrap_err()
                .contains("$http_user_agent")
        );
        assert!(template("{x}", "").is_err());
    }
}
