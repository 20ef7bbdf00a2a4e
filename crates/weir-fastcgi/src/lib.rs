//! PHP and other FastCGI applications behind weir: [`FastCgi`] is the
//! handler of a site's or route's `php`/`fastcgi`. A request goes through
//! named steps: `script::resolve` (which script, or a static file, or 404)
//! → `params::cgi_params` (the CGI variables) → `client::Pool::run` (an
//! upstream chosen by the proxy's balancer and health, a kept-alive
//! connection in one of its `max_conns` slots, the records out, the
//! response streamed back).
//!
//! The codec is [`proto`] (request records encoded into the caller's
//! buffer, the application's records decoded incrementally) and [`head`]
//! (the CGI response head, RFC 3875 §6); neither does I/O. Written by hand
//! rather than with fastcgi-client or async-fcgi because those own the
//! connection and buffer the whole response, while weir streams bodies
//! both ways with bounded memory and pools connections itself.
//!
//! Never runs a path that is not an existing script under the root, and
//! never holds more than one record of either body.
//!
//! ```
//! use bytes::BytesMut;
//! use weir_fastcgi::{Decoder, Event};
//!
//! let mut out = BytesMut::new();
//! weir_fastcgi::begin_request(&mut out, 1, true);
//! weir_fastcgi::params(&mut out, 1, [(&b"SCRIPT_FILENAME"[..], &b"/srv/index.php"[..])]);
//! weir_fastcgi::stdin_end(&mut out, 1);
//! // ... write `out` to the connection, append what is read to `input` ...
//! # let mut input = BytesMut::from(&[1u8, 3, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
//! let mut decoder = Decoder::new(1);
//! while let Some(event) = decoder.decode(&mut input)? {
//!     match event {
//!         Event::Stdout(_body) => { /* the CGI head, then the body */ }
//!         Event::Stderr(_log) => { /* log it */ }
//!         Event::End { app_status, .. } => {
//!             assert_eq!(app_status, 0);
//!             break;
//!         }
//!     }
//! }
//! assert!(decoder.ended());
//! # Ok::<(), weir_fastcgi::ProtoError>(())
//! ```

pub mod client;
pub mod head;
pub mod params;
pub mod proto;
pub mod script;

#[cfg(test)]
mod fuzz;

pub use head::{HeadError, parse_head};
pub use proto::{
    Decoder, Event, HEADER_LEN, MAX_CONTENT, Pair, ProtoError, RecordType, abort_request,
    begin_request, decode_pairs, params, stdin, stdin_end,
};

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_http::worker::{PerWorker, Worker};

use http::{Response, StatusCode};
use weir_config::fastcgi::FastCgiConfig;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

pub use script::Resolved;

/// How long a path's script lookup is reused: a script added or removed
/// is seen within this (nginx's `open_file_cache_valid` default is 60 s).
const RESOLVED_FOR: Duration = Duration::from_secs(1);
/// Lookups kept per worker before the oldest are forgotten.
const RESOLVED_MAX: usize = 4096;

/// A running `php` or `fastcgi` handler.
pub struct FastCgi {
    pub cfg: Arc<FastCgiConfig>,
    pool: Arc<client::Pool>,
    /// The root with its links resolved, for the symlink policy.
    canonical_root: PathBuf,
    /// Recent lookups by path, per worker (no lock is shared): a hit
    /// skips the blocking pool and the file system.
    resolved: PerWorker<Lookups>,
}

/// One worker's recent lookups: path → (what it came to, when).
type Lookups = Mutex<HashMap<String, (Arc<Resolved>, Instant)>>;

impl FastCgi {
    /// `proxy`: the upstreams of `cfg.upstream` (balancer, health, slots).
    pub fn new(cfg: Arc<FastCgiConfig>, proxy: Arc<weir_proxy::Proxy>, workers: usize) -> FastCgi {
        let canonical_root = std::fs::canonicalize(&cfg.root).unwrap_or_else(|_| cfg.root.clone());
        let keep_conn = cfg.keep_conn;
        FastCgi {
            cfg,
            pool: Arc::new(client::Pool::new(proxy, keep_conn)),
            canonical_root,
            resolved: PerWorker::new(workers, Default::default),
        }
    }

    pub fn proxy(&self) -> &Arc<weir_proxy::Proxy> {
        &self.pool.proxy
    }

    /// Idle connections to upstream `idx`.
    pub fn idle_connections(&self, idx: usize) -> usize {
        self.pool.idle(idx)
    }

    /// What the percent-encoded `path` comes to: looked up on the blocking
    /// pool (it reads the file system), then reused for a second.
    pub async fn resolve(self: &Arc<Self>, worker: Worker, path: &str) -> Arc<Resolved> {
        let slot = self.resolved.get(worker);
        if let Some((r, at)) = slot.lock().unwrap_or_else(|e| e.into_inner()).get(path)
            && at.elapsed() < RESOLVED_FOR
        {
            return r.clone();
        }
        let me = self.clone();
        let owned = path.to_string();
        let r = tokio::task::spawn_blocking(move || {
            script::resolve(&me.cfg, &me.canonical_root, &owned)
        })
        .await
        .unwrap_or(Resolved::NotFound);
        let r = Arc::new(r);
        let mut m = slot.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= RESOLVED_MAX {
            m.retain(|_, (_, at)| at.elapsed() < RESOLVED_FOR);
            if m.len() >= RESOLVED_MAX {
                m.clear();
            }
        }
        m.insert(path.to_string(), (r.clone(), Instant::now()));
        r
    }

    /// Runs `script` for the request; every failure is an error response
    /// (502, 503, 504, 413), logged with the upstream and the reason.
    pub async fn run(
        &self,
        script: &params::Script<'_>,
        parts: &http::request::Parts,
        body: Body,
        conn: &ConnInfo,
        client: IpAddr,
    ) -> Response<Body> {
        let params = params::cgi_params(parts, script, conn, client, &self.cfg.env);
        let req = client::Request {
            params: &params,
            send_timeout: self.cfg.send_timeout,
            client: (conn.peer, conn.local),
            worker: conn.worker,
            script: script.script_name,
        };
        match self.pool.run(req, body).await {
            Ok(mut r) => {
                if parts.method == http::Method::HEAD {
                    *r.body_mut() = Body::empty();
                }
                r
            }
            Err(client::Failure { error: e, upstream }) => {
                let status = e.status();
                let ups = self.pool.proxy.upstreams();
                let name = upstream.map_or("-", |i| ups[i].cfg.name.as_str());
                tracing::warn!(
                    upstream = name,
                    status = status.as_u16(),
                    "FastCGI {} {}: {e}",
                    parts.method,
                    script.script_name
                );
                weir_http::response::error(if status == StatusCode::OK {
                    StatusCode::BAD_GATEWAY
                } else {
                    status
                })
            }
        }
    }
}
