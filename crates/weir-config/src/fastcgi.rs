//! Validation of the FastCGI handler: a site's or route's `php = ...`
//! (Caddy's `php_fastcgi` defaults) or `fastcgi = ...`, turned into a
//! [`FastCgiConfig`] whose upstream part is a [`ProxyConfig`].
//!
//! Owns only checking and defaults; never opens a socket nor runs a script.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_spanned::Spanned;

use crate::error::Collector;
use crate::files;
use crate::proxy::ProxyConfig;
use crate::raw::{RawFastCgi, RawProxy, RawUpstreams, Shorthand};
use crate::units;

/// A validated `php` or `fastcgi` handler.
#[derive(Debug, Clone, PartialEq)]
pub struct FastCgiConfig {
    /// Upstreams, balance, health, `connect_timeout`, `max_conns` (every
    /// connection open, idle ones included), `queue`, `queue_timeout`,
    /// `idle_timeout`; `response_timeout` is the read timeout.
    pub upstream: Arc<ProxyConfig>,
    /// `DOCUMENT_ROOT`: scripts are looked up under it.
    pub root: PathBuf,
    /// Where a path splits into the script and `PATH_INFO` (`.php`).
    pub split: Vec<String>,
    /// Scripts tried for a directory (`index.php`).
    pub index: Vec<String>,
    /// The script for paths that name no file (`/index.php`), if any.
    pub front_controller: Option<String>,
    /// Extra variables for every script.
    pub env: Vec<(String, String)>,
    /// Each write of the request to the application must finish within this.
    pub send_timeout: Duration,
    /// Connections stay open between requests (`FCGI_KEEP_CONN`).
    pub keep_conn: bool,
    /// The files of the same root that are not scripts, served by weir.
    pub files: files::Options,
}

/// PHP-FPM's own default `pm.max_children`. Without `keep_conn` a
/// connection more than the pool has children waits only for a running
/// request to end; with it, for a child an idle connection holds, so
/// `keep_conn` is off by default (as nginx's `fastcgi_keep_conn`).
const MAX_CONNS: i64 = 5;

/// `php` (Caddy's defaults) or `fastcgi` at `key`; `files`: the static
/// options of the site's or route's `root`, `make_files` those of a root
/// the handler names itself.
pub(crate) fn fastcgi(
    c: &mut Collector<'_>,
    key: &str,
    raw: &Spanned<Shorthand<RawFastCgi>>,
    php: bool,
    files: Option<files::Options>,
    make_files: &dyn Fn(&mut Collector<'_>, &Spanned<String>) -> files::Options,
) -> Option<FastCgiConfig> {
    let default = RawFastCgi::default();
    let (r, to) = match raw.get_ref() {
        Shorthand::To(s) => (
            &default,
            Spanned::new(raw.span(), RawUpstreams::One(s.clone())),
        ),
        Shorthand::Full(r) => {
            match &r.to {
                Some(t) => (&**r, t.clone()),
                None => {
                    c.at(
                    raw.span(),
                    format!("{key}: needs `to = \"unix:/run/php/php-fpm.sock\"` (or \"127.0.0.1:9000\")"),
                );
                    return None;
                }
            }
        }
    };
    let mut p = RawProxy::bare(to);
    p.balance = r.balance.clone();
    p.connect_timeout = r.connect_timeout.clone();
    p.response_timeout = r.read_timeout.clone();
    p.idle_timeout = r.idle_timeout.clone();
    p.max_conns = Some(
        r.max_conns
            .clone()
            .unwrap_or_else(|| Spanned::new(raw.span(), MAX_CONNS)),
    );
    p.queue = Some(
        r.queue
            .clone()
            .unwrap_or_else(|| Spanned::new(raw.span(), 1024)),
    );
    p.queue_timeout = r.queue_timeout.clone();
    p.retries = r.retries.clone();
    p.health = r.health.clone();
    p.passive = r.passive.clone();
    p.dns_ttl = r.dns_ttl.clone();
    let upstream = crate::stream::upstream_part(c, key, &Spanned::new(raw.span(), p));
    if upstream.max_conns == 0 {
        c.at(
            r.max_conns.as_ref().map_or(raw.span(), |m| m.span()),
            format!("{key}.max_conns: must be at least 1 (PHP-FPM's pm.max_children)"),
        );
    }

    let files = match (&r.root, files) {
        (Some(root), _) => make_files(c, root),
        (None, Some(f)) => f,
        (None, None) => {
            c.at(
                raw.span(),
                format!("{key}: needs the scripts' directory: `root = \"/var/www/html\"`"),
            );
            return None;
        }
    };
    let list = |c: &mut Collector<'_>, name: &str, v: &Option<Spanned<Vec<String>>>, d: &str| {
        let Some(v) = v else {
            return vec![d.to_string()];
        };
        for s in v.get_ref() {
            if s.is_empty() || s.contains('/') {
                c.at(
                    v.span(),
                    format!("{key}.{name}: `{s}` must be a non-empty name without `/`"),
                );
            }
        }
        v.get_ref().clone()
    };
    let split = list(c, "split", &r.split, ".php");
    let index = list(c, "index", &r.index, "index.php");
    let front_controller = match &r.front_controller {
        Some(f) if f.get_ref().is_empty() => None,
        Some(f) if !f.get_ref().starts_with('/') => {
            c.at(
                f.span(),
                format!(
                    "{key}.front_controller: `{}` must start with `/`",
                    f.get_ref()
                ),
            );
            None
        }
        Some(f) => Some(f.get_ref().clone()),
        None => php.then(|| "/index.php".to_string()),
    };
    let mut env = Vec::new();
    for (k, v) in r.env.iter().flatten() {
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic() && b != b'=') {
            c.at(v.span(), format!("{key}.env: `{k}` is not a variable name"));
        } else {
            env.push((k.clone(), v.get_ref().clone()));
        }
    }
    let mut send_timeout = Duration::from_secs(60);
    if let Some(v) = &r.send_timeout {
        match units::parse_duration(v.get_ref()) {
            Ok(d) if !d.is_zero() => send_timeout = d,
            Ok(_) => c.at(
                v.span(),
                format!("{key}.send_timeout: must be more than zero"),
            ),
            Err(m) => c.at(v.span(), format!("{key}.send_timeout: {m}")),
        }
    }
    Some(FastCgiConfig {
        upstream: Arc::new(upstream),
        root: files.root.clone(),
        split,
        index,
        front_controller,
        env,
        send_timeout,
        keep_conn: r.keep_conn.as_ref().is_some_and(|k| *k.get_ref()),
        files,
    })
}
