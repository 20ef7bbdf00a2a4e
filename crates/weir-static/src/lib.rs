//! Static file serving: maps a request path under a site's root to a file and
//! answers it the way nginx and Caddy do (GET/HEAD, conditionals, ranges,
//! index files, listings, precompressed sidecars, on-the-fly compression).
//!
//! This module owns the request flow and the public interface; the parts
//! live in submodules: [`path`] (safety), [`resolve`] (file system),
//! [`cache`] (hot files + watcher), [`validators`] (ETags and modification times),
//! [`listing`], [`mime`]; preconditions and byte ranges are
//! `weir_http::conditional` and `weir_http::range`, shared with the cache,
//! and content codings are `weir_http::encoding`'s. It must never serve a
//! byte from outside the root, never block an async thread on file I/O,
//! and on a cache hit never touch the disk or take a lock.

pub mod cache;
pub mod listing;
pub mod mime;
pub mod path;
pub mod resolve;
pub mod validators;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body::Frame;

use cache::{Cache, CachedFile, Revalidate, Variant};
use resolve::{LargeFile, Resolved, Resolver, Segment, SmallFile};
use weir_http::body::Body;
use weir_http::conditional::{Outcome, Validators};
use weir_http::encoding as compress;
use weir_http::range::{self, RangeDecision};

pub use weir_config::files::{CacheOptions, CompressOptions, Encoding, Options};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("root {path}: {source}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("root {0} is not a directory")]
    RootNotDir(PathBuf),
    #[error("index file name {0:?} must be a plain file name")]
    BadIndex(String),
}

pub struct StaticFiles {
    opts: Options,
    resolver: Arc<Resolver>,
    cache: Option<Arc<Cache>>,
    /// True when inotify covers the root; otherwise entries are revalidated
    /// by stat at most once per second.
    watching: bool,
    _watcher: Option<notify::RecommendedWatcher>,
    epoch: Instant,
}

const ALLOW: HeaderValue = HeaderValue::from_static("GET, HEAD");
const VARY_AE: HeaderValue = HeaderValue::from_static("accept-encoding");
const BYTES: HeaderValue = HeaderValue::from_static("bytes");
const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

impl StaticFiles {
    /// The options it was built from (a reload keeps it, and its file
    /// cache, when they are unchanged).
    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn new(opts: Options) -> Result<Arc<Self>, Error> {
        let root = std::fs::canonicalize(&opts.root).map_err(|source| Error::Root {
            path: opts.root.clone(),
            source,
        })?;
        if !root.is_dir() {
            return Err(Error::RootNotDir(opts.root.clone()));
        }
        // Index names are joined to request paths: a `/` or `..` in one
        // would be a way out of the directory (and, with follow_symlinks,
        // out of the root).
        if let Some(bad) = opts
            .index
            .iter()
            .find(|i| i.is_empty() || *i == "." || *i == ".." || i.contains(['/', '\\', '\0']))
        {
            return Err(Error::BadIndex(bad.clone()));
        }
        let cache_on = opts.cache.max_bytes > 0 && opts.cache.max_file_size > 0;
        let small_max = if cache_on {
            opts.cache.max_file_size.min(opts.cache.max_bytes)
        } else {
            0
        };
        let resolver = Arc::new(Resolver {
            root: root.clone(),
            index: opts.index.clone(),
            serve_hidden: opts.serve_hidden,
            follow_symlinks: opts.follow_symlinks,
            precompressed: opts.precompressed.clone(),
            small_max,
        });
        let cache = cache_on.then(|| Arc::new(Cache::new(opts.cache.max_bytes, root)));
        let watcher = cache.as_ref().and_then(cache::watch);
        Ok(Arc::new(StaticFiles {
            opts,
            resolver,
            watching: watcher.is_some(),
            _watcher: watcher,
            cache,
            epoch: Instant::now(),
        }))
    }

    /// Answers `req` for `rel_path`, the raw (still percent-encoded) part of
    /// the request path below the route's prefix, starting with `/`.
    pub async fn serve(&self, req: &http::request::Parts, rel_path: &str) -> Response<Body> {
        match req.method {
            Method::GET | Method::HEAD => {}
            Method::OPTIONS => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                r.headers_mut().insert(header::ALLOW, ALLOW);
                return r;
            }
            _ => {
                let mut r = error(StatusCode::METHOD_NOT_ALLOWED);
                r.headers_mut().insert(header::ALLOW, ALLOW);
                return r;
            }
        }
        let rel_path = if rel_path.is_empty() {
            // The route prefix itself names the root directory: `/docs`
            // must become `/docs/` so relative links in the index resolve.
            if !req.uri.path().ends_with('/') {
                return redirect_to_slash(req);
            }
            "/"
        } else {
            rel_path
        };
        // Already-normal paths (the common case) are their own cache key:
        // no decoding, no allocation.
        let normalized;
        let key: &str = if path::is_already_normal(rel_path) {
            rel_path
        } else {
            match path::normalize(rel_path) {
                Ok(p) => {
                    if !self.opts.serve_hidden && p.has_hidden_segment() {
                        return error(StatusCode::NOT_FOUND);
                    }
                    normalized = p;
                    normalized.key()
                }
                Err(_) => return error(StatusCode::BAD_REQUEST),
            }
        };

        if let Some(cache) = &self.cache
            && let Some(entry) = cache.get(key)
        {
            if self.still_fresh(&entry).await {
                return self.respond_cached(req, &entry).await;
            }
            cache.remove_if_same(key, &entry);
        }
        self.miss(req, key).await
    }

    /// True unless the entry needs a stat check and the check fails. Checks
    /// only entries inotify can't vouch for, at most once per second each.
    async fn still_fresh(&self, entry: &Arc<CachedFile>) -> bool {
        let Some(rv) = &entry.revalidate else {
            return true;
        };
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = rv.last_check_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < 1000
            || rv
                .last_check_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return true;
        }
        let e = Arc::clone(entry);
        tokio::task::spawn_blocking(move || {
            e.revalidate
                .as_ref()
                .is_none_or(|rv| Revalidate::still_valid(&rv.deps))
        })
        .await
        .unwrap_or(false)
    }

    async fn miss(&self, req: &http::request::Parts, key: &str) -> Response<Body> {
        let gen0 = self.cache.as_ref().map_or(0, |c| c.generation());
        let has_range = req.method == Method::GET && req.headers.contains_key(header::RANGE);
        // Sidecar codings the client takes, best first; none for ranges,
        // which are always served from the identity.
        let accepted = if has_range || self.opts.precompressed.is_empty() {
            Vec::new()
        } else {
            let mut pref: Vec<(u16, usize, Encoding)> = self
                .opts
                .precompressed
                .iter()
                .enumerate()
                .map(|(i, &e)| (compress::accept_q(&req.headers, e), i, e))
                .filter(|&(q, _, _)| q > 0)
                .collect();
            pref.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            pref.into_iter().map(|(_, _, e)| e).collect()
        };
        let resolver = Arc::clone(&self.resolver);
        let key_owned = key.to_owned();
        let resolved = match tokio::task::spawn_blocking(move || {
            resolver.resolve(&key_owned, &accepted)
        })
        .await
        {
            Ok(r) => r,
            Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR),
        };
        match resolved {
            Resolved::NotFound => error(StatusCode::NOT_FOUND),
            Resolved::Forbidden => error(StatusCode::FORBIDDEN),
            Resolved::Redirect => redirect_to_slash(req),
            Resolved::Listing(dir) => {
                if self.opts.browse {
                    self.listing(req, key, dir).await
                } else {
                    error(StatusCode::FORBIDDEN)
                }
            }
            Resolved::Small(small) => {
                let (entry, stable) = self.build_entry(*small);
                let entry = Arc::new(entry);
                if let Some(cache) = &self.cache
                    && stable
                {
                    cache.insert(key, &entry, gen0);
                }
                self.respond_cached(req, &entry).await
            }
            Resolved::Large(large) => self.respond_large(req, *large, has_range),
        }
    }

    fn compressible(&self, essence: &str, len: u64) -> bool {
        let c = &self.opts.compress;
        c.enabled
            && !c.encodings.is_empty()
            && len >= c.min_size
            && compress::type_listed(essence, &c.types)
    }

    /// Turns a freshly read small file into an immutable cache entry, and
    /// says whether it may be cached: a file that changed while being read
    /// is served (its headers are derived from the bytes read) but not kept.
    fn build_entry(&self, f: SmallFile) -> (CachedFile, bool) {
        let essence = mime::essence_for(&f.name);
        let content_type = mime::content_type_header(&essence);
        let variant = |body: Bytes, file, md: &std::fs::Metadata, etag: HeaderValue| {
            let mtime = md.modified().unwrap_or(std::time::UNIX_EPOCH);
            Variant {
                content_length: HeaderValue::from(body.len()),
                etag,
                last_modified: http_date(mtime),
                modified: validators::unix_secs(mtime),
                body,
                file,
            }
        };
        let len = f.data.len() as u64;
        let etag = validators::etag_from_hash(weir_http::hash::stable_hash(&f.data), len);
        let identity = variant(f.data, f.file, &f.meta, etag);
        let sidecars: Vec<(Encoding, Variant)> = f
            .sidecars
            .into_iter()
            .map(|(enc, body, md)| {
                let base = validators::etag_from_hash(
                    weir_http::hash::stable_hash(&body),
                    body.len() as u64,
                );
                let etag = validators::etag_with_encoding(&base, enc);
                (enc, variant(body, None, &md, etag))
            })
            .collect();
        let compress_on_the_fly = self.compressible(&essence, len);
        let vary = !sidecars.is_empty() || compress_on_the_fly;
        let revalidate = (!self.watching || f.via_symlink).then(|| Revalidate {
            last_check_ms: (self.epoch.elapsed().as_millis() as u64).into(),
            deps: f.deps,
        });
        let entry = CachedFile::new(
            content_type,
            identity,
            sidecars,
            compress_on_the_fly,
            vary,
            revalidate,
        );
        (entry, f.stable)
    }

    /// The variant of a cached file to send for this request.
    async fn pick_variant<'e>(
        &self,
        req: &http::request::Parts,
        e: &'e CachedFile,
    ) -> (&'e Variant, Option<Encoding>) {
        let h = &req.headers;
        if (req.method == Method::GET && h.contains_key(header::RANGE))
            || !h.contains_key(header::ACCEPT_ENCODING)
        {
            return (&e.identity, None);
        }
        // A sidecar the client takes beats compressing ourselves; failing
        // that, on-the-fly compression (as for large files).
        if !e.sidecars.is_empty()
            && let Some(enc) = compress::negotiate(h, e.sidecars.iter().map(|(enc, _)| *enc))
            && let Some((_, v)) = e.sidecars.iter().find(|(x, _)| *x == enc)
        {
            return (v, Some(enc));
        }
        if !e.compress_on_the_fly {
            return (&e.identity, None);
        }
        let Some(enc) = compress::negotiate(h, self.opts.compress.encodings.iter().copied()) else {
            return (&e.identity, None);
        };
        let slot = &e.otf[enc.index()];
        let v = match slot.get() {
            Some(v) => v,
            None => {
                slot.get_or_init(|| async {
                    let body = e.identity.body.clone();
                    let fast = !e.is_cached();
                    let out = tokio::task::spawn_blocking(move || {
                        compress::compress_once(&body, enc, fast)
                    })
                    .await;
                    match out {
                        Ok(Ok(c)) if c.len() < e.identity.body.len() => {
                            if let Some(cache) = &self.cache {
                                cache.charge(e, c.len() as u64);
                            }
                            let body = Bytes::from(c);
                            Some(Variant {
                                content_length: HeaderValue::from(body.len()),
                                etag: validators::etag_with_encoding(&e.identity.etag, enc),
                                last_modified: e.identity.last_modified.clone(),
                                modified: e.identity.modified,
                                body,
                                file: None,
                            })
                        }
                        _ => None,
                    }
                })
                .await
            }
        };
        match v {
            Some(v) => (v, Some(enc)),
            None => (&e.identity, None),
        }
    }

    async fn respond_cached(&self, req: &http::request::Parts, e: &CachedFile) -> Response<Body> {
        let (v, enc) = self.pick_variant(req, e).await;
        let rep = Rep {
            content_type: &e.content_type,
            etag: &v.etag,
            last_modified: &v.last_modified,
            modified: v.modified,
            len: Some((v.body.len() as u64, &v.content_length)),
            encoding: enc,
            vary: e.vary,
        };
        rep.respond(req, Source::Memory(&v.body, v.file.as_ref()))
    }

    fn respond_large(
        &self,
        req: &http::request::Parts,
        f: LargeFile,
        has_range: bool,
    ) -> Response<Body> {
        let essence = mime::essence_for(&f.name);
        let content_type = mime::content_type_header(&essence);
        let len = f.meta.len();
        let otf = f.sidecar.is_none() && self.compressible(&essence, len);
        let vary = f.any_sidecar || otf;
        let identity_etag = etag_of(&f.meta);
        if let Some((enc, file, md)) = f.sidecar {
            let etag = validators::etag_with_encoding(&etag_of(&md), enc);
            let mtime = md.modified().unwrap_or(std::time::UNIX_EPOCH);
            let rep = Rep {
                content_type: &content_type,
                etag: &etag,
                last_modified: &http_date(mtime),
                modified: validators::unix_secs(mtime),
                len: Some((md.len(), &HeaderValue::from(md.len()))),
                encoding: Some(enc),
                vary,
            };
            return rep.respond(req, Source::File(file, cache::Fingerprint::of(&md)));
        }
        let mtime = f.meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        let last_modified = http_date(mtime);
        let otf_enc = if otf && !has_range {
            compress::negotiate(&req.headers, self.opts.compress.encodings.iter().copied())
        } else {
            None
        };
        if let Some(enc) = otf_enc {
            let etag = validators::etag_with_encoding(&identity_etag, enc);
            let rep = Rep {
                content_type: &content_type,
                etag: &etag,
                last_modified: &last_modified,
                modified: validators::unix_secs(mtime),
                len: None,
                encoding: Some(enc),
                vary,
            };
            let fp = cache::Fingerprint::of(&f.meta);
            return rep.respond(req, Source::Compress(f.file, fp, len, enc));
        }
        let rep = Rep {
            content_type: &content_type,
            etag: &identity_etag,
            last_modified: &last_modified,
            modified: validators::unix_secs(mtime),
            len: Some((len, &HeaderValue::from(len))),
            encoding: None,
            vary,
        };
        let fp = cache::Fingerprint::of(&f.meta);
        rep.respond(req, Source::File(f.file, fp))
    }

    async fn listing(&self, req: &http::request::Parts, key: &str, dir: PathBuf) -> Response<Body> {
        let serve_hidden = self.opts.serve_hidden;
        let follow = self.opts.follow_symlinks;
        let root = self.resolver.root.clone();
        let entries = tokio::task::spawn_blocking(move || {
            listing::read_dir(&dir, serve_hidden, follow, &root)
        })
        .await;
        let entries = match entries {
            Ok(Ok(e)) => e,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return error(StatusCode::FORBIDDEN);
            }
            _ => return error(StatusCode::NOT_FOUND),
        };
        let (body, ct) = if listing::prefers_json(&req.headers) {
            (
                listing::json(&entries),
                HeaderValue::from_static("application/json; charset=utf-8"),
            )
        } else {
            (
                listing::html(key, &entries, key == "/"),
                HeaderValue::from_static("text/html; charset=utf-8"),
            )
        };
        let len = body.len();
        let mut r = Response::new(if req.method == Method::HEAD {
            Body::empty()
        } else {
            Body::from(body)
        });
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, ct);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(header::VARY, HeaderValue::from_static("accept"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    }

    /// Number of cached entries (for tests and metrics).
    pub fn cached_entries(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.len())
    }

    /// Whether inotify watches the root (otherwise stat revalidation is used).
    pub fn is_watching(&self) -> bool {
        self.watching
    }
}

/// Where the selected representation's bytes come from.
enum Source<'a> {
    /// Cached bytes, and the file they were read from when large.
    Memory(&'a Bytes, Option<&'a Arc<std::fs::File>>),
    /// An open file and the `fstat` its headers were built from.
    File(std::fs::File, cache::Fingerprint),
    /// Identity file of this length, compressed while streaming.
    Compress(std::fs::File, cache::Fingerprint, u64, Encoding),
}

/// The selected representation's metadata.
struct Rep<'a> {
    content_type: &'a HeaderValue,
    etag: &'a HeaderValue,
    last_modified: &'a HeaderValue,
    modified: u64,
    /// Length and its header value; `None` when compressing on the fly.
    len: Option<(u64, &'a HeaderValue)>,
    encoding: Option<Encoding>,
    vary: bool,
}

impl Rep<'_> {
    fn respond(&self, req: &http::request::Parts, src: Source<'_>) -> Response<Body> {
        let v = Validators {
            etag: Some(self.etag.as_bytes()),
            last_modified: Some(self.modified),
        };
        let outcome = weir_http::conditional::evaluate(&req.method, &req.headers, &v);
        match outcome {
            Outcome::Proceed | Outcome::IgnoreRange => {}
            Outcome::NotModified => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NOT_MODIFIED;
                let h = r.headers_mut();
                h.insert(header::ETAG, self.etag.clone());
                h.insert(header::LAST_MODIFIED, self.last_modified.clone());
                if self.vary {
                    h.insert(header::VARY, VARY_AE);
                }
                return r;
            }
            Outcome::PreconditionFailed => return error(StatusCode::PRECONDITION_FAILED),
        }
        let head = req.method == Method::HEAD;
        let mut r = Response::new(Body::empty());
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, self.content_type.clone());
        h.insert(header::ETAG, self.etag.clone());
        h.insert(header::LAST_MODIFIED, self.last_modified.clone());
        if self.vary {
            h.insert(header::VARY, VARY_AE);
        }
        if let Some(enc) = self.encoding {
            h.insert(header::CONTENT_ENCODING, enc.header_value());
        }
        let Some((len, len_hv)) = self.len else {
            // Streaming compression: length unknown, no ranges.
            if !head && let Source::Compress(file, fp, len, enc) = src {
                let identity = resolve::file_body(file, fp, vec![Segment::File { start: 0, len }]);
                *r.body_mut() = compress::compress_body(stream_body(identity), enc, Some(len));
            }
            return r;
        };
        // Ranges only on identity representations.
        let range_hdr = match (self.encoding, req.method == Method::GET) {
            (None, true) => req.headers.get(header::RANGE),
            _ => None,
        };
        if self.encoding.is_none() {
            h.insert(header::ACCEPT_RANGES, BYTES);
        }
        let decision = match range_hdr {
            Some(rh) if outcome == Outcome::Proceed => range::parse(rh, len),
            _ => RangeDecision::Ignore,
        };
        match decision {
            RangeDecision::Ignore => {
                h.insert(header::CONTENT_LENGTH, len_hv.clone());
                if !head {
                    *r.body_mut() = match src {
                        Source::Memory(b, file) => {
                            zero_copy(&mut r, b, file, 0);
                            Body::full(b.clone())
                        }
                        Source::File(f, fp) => stream_body(resolve::file_body(
                            f,
                            fp,
                            vec![Segment::File { start: 0, len }],
                        )),
                        Source::Compress(..) => Body::empty(),
                    };
                }
            }
            RangeDecision::Unsatisfiable => return range::unsatisfiable(len),
            RangeDecision::Ranges(ranges) => {
                *r.status_mut() = StatusCode::PARTIAL_CONTENT;
                let multipart = range::partial_fields(r.headers_mut(), &ranges, len);
                if !head {
                    *r.body_mut() = match (multipart, src) {
                        (None, Source::Memory(b, file)) => {
                            let one = ranges[0];
                            let part = b.slice(one.start as usize..=one.end as usize);
                            zero_copy(&mut r, &part, file, one.start);
                            Body::full(part)
                        }
                        (None, Source::File(f, fp)) => stream_body(resolve::file_body(
                            f,
                            fp,
                            vec![Segment::File {
                                start: ranges[0].start,
                                len: ranges[0].len(),
                            }],
                        )),
                        (Some(mp), Source::Memory(b, _)) => Body::full(mp.assemble(&ranges, b)),
                        (Some(mp), Source::File(f, fp)) => {
                            let mut segs = Vec::with_capacity(ranges.len() * 2 + 1);
                            for (head, rg) in mp.part_heads.into_iter().zip(&ranges) {
                                segs.push(Segment::Bytes(head));
                                segs.push(Segment::File {
                                    start: rg.start,
                                    len: rg.len(),
                                });
                            }
                            segs.push(Segment::Bytes(mp.tail));
                            stream_body(resolve::file_body(f, fp, segs))
                        }
                        (_, Source::Compress(..)) => Body::empty(),
                    };
                }
            }
        }
        r
    }
}

/// Tags a response whose body is `bytes`, read from `file` at `offset`, so
/// a plain-TCP connection sends it with `sendfile` (`server::zero_copy`).
fn zero_copy(
    r: &mut Response<Body>,
    bytes: &Bytes,
    file: Option<&Arc<std::fs::File>>,
    offset: u64,
) {
    if let Some(file) = file
        && bytes.len() >= weir_http::file_region::MIN_LEN
    {
        r.extensions_mut()
            .insert(weir_http::file_region::FileRegion {
                bytes: bytes.clone(),
                file: file.clone(),
                offset,
            });
    }
}

fn stream_body<S>(s: S) -> Body
where
    S: futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    Body::stream(http_body_util::StreamBody::new(s.map_ok(Frame::data)))
}

fn etag_of(md: &std::fs::Metadata) -> HeaderValue {
    use std::os::unix::fs::MetadataExt;
    validators::etag_from_meta(cache::Fingerprint::mtime_ns(md), md.ino(), md.len())
}

fn http_date(t: std::time::SystemTime) -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(t)).expect("HTTP dates are ASCII")
}

/// A directory asked without its slash: 308 to the same URI with a `/`
/// appended to the path, query kept. The one rule for every directory
/// (static, or run by its `index.php`): 308 keeps the method and body
/// (RFC 9110 §15.4.9), so a form posted to `/app` reaches `/app/`'s script
/// as a POST instead of a bodiless GET, which a 301 makes of it in every
/// browser; for GET and HEAD the two are the same to every client.
pub fn redirect_to_slash(req: &http::request::Parts) -> Response<Body> {
    let p = req.uri.path();
    // Never produce `//host/...` (a protocol-relative URL, i.e. an open
    // redirect): collapse leading slashes and backslashes to one `/`.
    let trimmed = p.trim_start_matches(['/', '\\']);
    let mut loc = String::with_capacity(p.len() + 2 + req.uri.query().map_or(0, |q| q.len() + 1));
    loc.push('/');
    loc.push_str(trimmed);
    if !loc.ends_with('/') {
        loc.push('/');
    }
    if let Some(q) = req.uri.query() {
        loc.push('?');
        loc.push_str(q);
    }
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
    match HeaderValue::from_str(&loc) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
        }
        Err(_) => return error(StatusCode::BAD_REQUEST),
    }
    r
}

/// A short plain-text error response; the site layer may swap the body.
fn error(status: StatusCode) -> Response<Body> {
    let body: &'static str = match status {
        StatusCode::BAD_REQUEST => "400 Bad Request\n",
        StatusCode::FORBIDDEN => "403 Forbidden\n",
        StatusCode::NOT_FOUND => "404 Not Found\n",
        StatusCode::METHOD_NOT_ALLOWED => "405 Method Not Allowed\n",
        StatusCode::PRECONDITION_FAILED => "412 Precondition Failed\n",
        _ => "500 Internal Server Error\n",
    };
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    let h: &mut HeaderMap = r.headers_mut();
    h.insert(header::CONTENT_TYPE, TEXT_PLAIN);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    r
}
