//! Static file serving: maps a request path under a site's root to a file and
//! answers it the way nginx and Caddy do.
//!
//! PLACEHOLDER: minimal version so the server compiles; replaced by the full
//! module (cache, conditionals, ranges, compression, listing, path safety).

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode, header};

use crate::body::Body;

/// Content codings weir knows, for precompressed sidecars and on-the-fly compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

/// On-the-fly compression settings.
#[derive(Debug, Clone)]
pub struct CompressOptions {
    pub enabled: bool,
    /// Files smaller than this are sent as they are.
    pub min_size: u64,
    /// Codings offered, in order of preference.
    pub encodings: Vec<Encoding>,
    /// MIME types (exact, or `text/*` prefix) worth compressing.
    pub types: Vec<String>,
}

/// In-memory cache of small hot files.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Total bytes held (bodies and compressed variants); 0 disables the cache.
    pub max_bytes: u64,
    /// Files larger than this are never cached, always streamed.
    pub max_file_size: u64,
}

/// Everything the file server needs from the site config.
#[derive(Debug, Clone)]
pub struct Options {
    pub root: PathBuf,
    pub index: Vec<String>,
    pub browse: bool,
    pub serve_hidden: bool,
    pub follow_symlinks: bool,
    pub precompressed: Vec<Encoding>,
    pub compress: CompressOptions,
    pub cache: CacheOptions,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            enabled: true,
            min_size: 1024,
            encodings: vec![Encoding::Br, Encoding::Zstd, Encoding::Gzip],
            types: vec!["text/*".into()],
        }
    }
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            max_bytes: 64 << 20,
            max_file_size: 1 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("root {path}: {source}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct StaticFiles {
    opts: Options,
}

impl StaticFiles {
    pub fn new(opts: Options) -> Result<Arc<Self>, Error> {
        std::fs::metadata(&opts.root).map_err(|source| Error::Root {
            path: opts.root.clone(),
            source,
        })?;
        Ok(Arc::new(StaticFiles { opts }))
    }

    /// Answers `req` for `rel_path`, the raw (still percent-encoded) part of
    /// the request path below the route's prefix, starting with `/`.
    pub async fn serve(&self, req: &http::request::Parts, rel_path: &str) -> Response<Body> {
        let mut p = rel_path.trim_start_matches('/').to_string();
        if p.is_empty() || p.ends_with('/') {
            p.push_str("index.html");
        }
        if p.contains("..") {
            return simple(StatusCode::FORBIDDEN);
        }
        match tokio::fs::read(self.opts.root.join(p)).await {
            Ok(data) => {
                let len = data.len();
                let body = if req.method == http::Method::HEAD {
                    Body::empty()
                } else {
                    Body::full(Bytes::from(data))
                };
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
                    .header(header::CONTENT_LENGTH, len)
                    .body(body)
                    .unwrap()
            }
            Err(_) => simple(StatusCode::NOT_FOUND),
        }
    }
}

fn simple(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::from(status.canonical_reason().unwrap_or("error")));
    *r.status_mut() = status;
    r
}
