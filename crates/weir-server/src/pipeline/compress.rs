//! The compression response filter: the answers of proxies, apps, FastCGI
//! scripts and fixed answers are compressed with gzip, brotli or zstd as
//! the client's `Accept-Encoding` and the site's or route's `compress`
//! allow (Caddy's `encode`, nginx's `gzip`), streaming, flushed whenever
//! the handler's body waits. A cache's origin answers pass it before they
//! are stored ([`Compressing`]), so the cache keeps the variant it serves.
//!
//! Never touches static files (they negotiate their own, precompressed
//! sidecars included), a range, an answer already encoded or marked
//! `no-transform`, an answer without a body (HEAD, 204, 304), a tunnel, or
//! an event stream; never buffers a body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use weir_config::files::CompressOptions;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::encoding::{self, Encoding};

use super::content_length;
use super::{Exchange, ResponseFilter};

static VARY_AE: HeaderValue = HeaderValue::from_static("Accept-Encoding");

/// Compression as a response filter, registered for a route or site whose
/// `compress` applies to its handler (`response::chain`).
pub(super) struct Compress(pub Arc<CompressOptions>);

impl ResponseFilter for Compress {
    fn response(&self, ex: &Exchange<'_>, resp: &mut Response<Body>) {
        filter(&self.0, &ex.req.parts.method, &ex.req.parts.headers, resp);
    }
}

/// Compresses `resp` for the request (`method`, `req`) if `opts` and the
/// client allow it; adds `Vary: Accept-Encoding` to any answer whose
/// coding depends on it.
pub(super) fn filter(
    opts: &CompressOptions,
    method: &Method,
    req: &HeaderMap,
    resp: &mut Response<Body>,
) {
    if !eligible(opts, method, resp) {
        return;
    }
    add_vary(resp.headers_mut());
    // Ranges are served from the identity (a byte range of a compressed
    // stream made per request would have no stable meaning).
    if *method == Method::HEAD || req.contains_key(header::RANGE) {
        return;
    }
    let Some(enc) = encoding::negotiate_streamed(req, opts.encodings.iter().copied()) else {
        return;
    };
    encode(resp, enc);
}

/// Whether the answer itself may be compressed, whoever asks.
fn eligible(opts: &CompressOptions, method: &Method, resp: &Response<Body>) -> bool {
    use http_body::Body as _;
    let status = resp.status();
    let h = resp.headers();
    opts.enabled
        && !opts.encodings.is_empty()
        && *method != Method::CONNECT
        && !status.is_informational()
        && !matches!(
            status,
            StatusCode::NO_CONTENT | StatusCode::PARTIAL_CONTENT | StatusCode::NOT_MODIFIED
        )
        && !h.contains_key(header::CONTENT_ENCODING)
        && !h.contains_key(header::CONTENT_RANGE)
        && !no_transform(h)
        && listed_type(h, &opts.types)
        && content_length(h).is_none_or(|n| n > 0 && n >= opts.min_size)
        && (*method == Method::HEAD || !resp.body().is_end_stream())
}

/// `Cache-Control: no-transform` (RFC 9111 §5.2.2.6): no intermediary may
/// change the body's coding.
fn no_transform(h: &HeaderMap) -> bool {
    h.get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
}

/// The answer's media type is one `compress` lists; an event stream never
/// is (each event must reach the client as it is sent).
fn listed_type(h: &HeaderMap, types: &[String]) -> bool {
    let Some(ct) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    !essence.eq_ignore_ascii_case("text/event-stream") && encoding::type_listed(essence, types)
}

fn add_vary(h: &mut HeaderMap) {
    let already = h
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|f| {
            let f = f.trim();
            f == "*" || f.eq_ignore_ascii_case("accept-encoding")
        });
    if !already {
        h.append(header::VARY, VARY_AE.clone());
    }
}

/// Turns the answer into its `enc` coding: length unknown until the end
/// (chunked, or the end of the stream), no ranges of it, and a weak ETag
/// (as nginx makes it): the bytes differ from the identity's, but a
/// conditional request still matches the resource's validator upstream.
fn encode(resp: &mut Response<Body>, enc: Encoding) {
    let h = resp.headers_mut();
    let len = content_length(h);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::ACCEPT_RANGES);
    h.insert(header::CONTENT_ENCODING, enc.header_value());
    if let Some(tag) = h.get(header::ETAG)
        && !tag.as_bytes().starts_with(b"W/")
    {
        let mut weak = Vec::with_capacity(tag.len() + 2);
        weak.extend_from_slice(b"W/");
        weak.extend_from_slice(tag.as_bytes());
        match HeaderValue::from_bytes(&weak) {
            Ok(v) => {
                h.insert(header::ETAG, v);
            }
            Err(_) => {
                h.remove(header::ETAG);
            }
        }
    }
    let body = std::mem::take(resp.body_mut());
    *resp.body_mut() = encoding::compress_body(body, enc, len);
}

/// The request's `Accept-Encoding` reduced to the one coding weir would
/// answer with (or removed), so that a cache keys on what it will store:
/// `gzip, br` and `br, gzip` select one variant, and a coding `compress`
/// does not offer never names one.
pub(super) fn narrow_accept_encoding(opts: &CompressOptions, req: &mut HeaderMap) {
    if !req.contains_key(header::ACCEPT_ENCODING) {
        return;
    }
    match encoding::negotiate_streamed(req, opts.encodings.iter().copied()) {
        Some(enc) => {
            req.insert(header::ACCEPT_ENCODING, enc.header_value());
        }
        None => {
            req.remove(header::ACCEPT_ENCODING);
        }
    }
}

/// A cache's origin whose answers pass the compression filter before the
/// cache stores them.
pub(super) struct Compressing {
    pub proxy: Arc<weir_proxy::Proxy>,
    pub opts: Arc<CompressOptions>,
}

impl weir_cache::Origin for Compressing {
    fn fetch<'a>(
        &'a self,
        parts: &'a mut http::request::Parts,
        body: Body,
        conn: &'a ConnInfo,
        path: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send + 'a>> {
        Box::pin(async move {
            let mut resp = self.proxy.serve(parts, body, conn, path).await;
            filter(&self.opts, &parts.method, &parts.headers, &mut resp);
            resp
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::BodyExt;

    const TEXT: &str = "weir compresses what it proxies. ";

    fn answer(ct: &str, len: usize) -> Response<Body> {
        let body = TEXT.repeat(len / TEXT.len() + 1)[..len].to_string();
        let mut r = Response::new(Body::full(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        r.headers_mut()
            .insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        r.headers_mut()
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        r
    }

    fn asks(ae: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(ae).unwrap());
        h
    }

    fn run(req: &HeaderMap, method: Method, mut resp: Response<Body>) -> Response<Body> {
        filter(&CompressOptions::default(), &method, req, &mut resp);
        resp
    }

    async fn bytes(r: Response<Body>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_listed_answer_is_compressed_for_a_client_that_asks() {
        let r = run(
            &asks("br;q=1, gzip;q=0.8"),
            Method::GET,
            answer("text/html; charset=utf-8", 5000),
        );
        let h = r.headers();
        assert_eq!(h[header::CONTENT_ENCODING], "br");
        assert_eq!(h[header::VARY], "Accept-Encoding");
        assert_eq!(h[header::ETAG], "W/\"v1\"");
        assert!(!h.contains_key(header::CONTENT_LENGTH));
        assert!(!h.contains_key(header::ACCEPT_RANGES));
        let body = bytes(r).await;
        assert!(!body.is_empty() && body.len() < 5000 / 4, "{}", body.len());
    }

    #[tokio::test]
    async fn a_client_that_does_not_ask_gets_the_identity_with_vary() {
        let r = run(
            &HeaderMap::new(),
            Method::GET,
            answer("application/json", 5000),
        );
        assert!(!r.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(r.headers()[header::VARY], "Accept-Encoding");
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "5000");
        assert_eq!(r.headers()[header::ETAG], "\"v1\"");
        assert_eq!(bytes(r).await.len(), 5000);
    }

    #[test]
    fn what_is_never_compressed() {
        let ae = asks("gzip");
        let untouched = |r: Response<Body>, method: Method, req: &HeaderMap| {
            let r = run(req, method, r);
            !r.headers().contains_key(header::CONTENT_ENCODING)
        };
        // Too small, unlisted, an event stream, no type at all.
        assert!(untouched(answer("text/plain", 100), Method::GET, &ae));
        assert!(untouched(answer("image/png", 5000), Method::GET, &ae));
        assert!(untouched(
            answer("text/event-stream", 5000),
            Method::GET,
            &ae
        ));
        let mut r = answer("text/plain", 5000);
        r.headers_mut().remove(header::CONTENT_TYPE);
        assert!(untouched(r, Method::GET, &ae));
        // Already encoded: left as it is, never twice.
        let mut r = answer("text/plain", 5000);
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let r = run(&asks("br"), Method::GET, r);
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
        // no-transform, 206, 304, 204, HEAD, a range request, CONNECT.
        let mut r = answer("text/plain", 5000);
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, No-Transform"),
        );
        assert!(untouched(r, Method::GET, &ae));
        for s in [
            StatusCode::PARTIAL_CONTENT,
            StatusCode::NOT_MODIFIED,
            StatusCode::NO_CONTENT,
            StatusCode::SWITCHING_PROTOCOLS,
        ] {
            let mut r = answer("text/plain", 5000);
            *r.status_mut() = s;
            assert!(untouched(r, Method::GET, &ae), "{s}");
        }
        assert!(untouched(answer("text/plain", 5000), Method::HEAD, &ae));
        let mut ranged = ae.clone();
        ranged.insert(header::RANGE, HeaderValue::from_static("bytes=0-9"));
        assert!(untouched(answer("text/plain", 5000), Method::GET, &ranged));
        assert!(untouched(answer("text/plain", 5000), Method::CONNECT, &ae));
        // A client that refuses every coding weir has.
        assert!(untouched(
            answer("text/plain", 5000),
            Method::GET,
            &asks("deflate, br;q=0")
        ));
        // Turned off.
        let mut r = answer("text/plain", 5000);
        let off = CompressOptions {
            enabled: false,
            ..Default::default()
        };
        filter(&off, &Method::GET, &ae, &mut r);
        assert!(!r.headers().contains_key(header::CONTENT_ENCODING));
        assert!(!r.headers().contains_key(header::VARY));
    }

    #[tokio::test]
    async fn a_streamed_answer_of_unknown_length_is_compressed() {
        let mut r = answer("application/json", 5000);
        r.headers_mut().remove(header::CONTENT_LENGTH);
        let body = std::mem::take(r.body_mut());
        *r.body_mut() = Body::stream(body);
        let r = run(&asks("zstd"), Method::GET, r);
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "zstd");
        let body = bytes(r).await;
        assert!(!body.is_empty() && body.len() < 5000);
    }

    #[test]
    fn vary_is_merged_not_repeated() {
        let mut r = answer("text/plain", 5000);
        r.headers_mut().insert(
            header::VARY,
            HeaderValue::from_static("Origin, accept-encoding"),
        );
        let r = run(&asks("gzip"), Method::GET, r);
        let vary: Vec<_> = r.headers().get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["Origin, accept-encoding"]);
        let mut r = answer("text/plain", 5000);
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Origin"));
        let r = run(&asks("gzip"), Method::GET, r);
        let vary: Vec<_> = r.headers().get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["Origin", "Accept-Encoding"]);
    }

    #[test]
    fn a_cache_keys_on_the_coding_it_will_store() {
        let gzip_only = CompressOptions {
            encodings: vec![Encoding::Gzip],
            ..Default::default()
        };
        let narrowed = |opts: &CompressOptions, ae: &str| {
            let mut h = asks(ae);
            narrow_accept_encoding(opts, &mut h);
            h.get(header::ACCEPT_ENCODING)
                .map(|v| v.to_str().unwrap().to_string())
        };
        let all = CompressOptions::default();
        assert_eq!(narrowed(&all, "gzip, br").as_deref(), Some("gzip"));
        assert_eq!(narrowed(&all, "br, gzip").as_deref(), Some("gzip"));
        assert_eq!(narrowed(&all, "br, gzip;q=0.5").as_deref(), Some("br"));
        assert_eq!(narrowed(&gzip_only, "gzip, br").as_deref(), Some("gzip"));
        assert_eq!(narrowed(&gzip_only, "br"), None);
        let mut none = HeaderMap::new();
        narrow_accept_encoding(&all, &mut none);
        assert!(none.is_empty());
    }

    /// The coding a stream gets: gzip over brotli at equal qvalue (as much
    /// saved for less CPU at the streaming levels); a qvalue the client
    /// gives, or a coding it alone accepts, always decides.
    #[tokio::test]
    async fn gzip_beats_brotli_at_equal_qvalue_and_qvalues_decide_first() {
        for (ae, want) in [
            ("br, gzip", "gzip"),
            ("gzip, br", "gzip"),
            ("gzip, deflate, br, zstd", "zstd"),
            ("br", "br"),
            ("br, gzip;q=0.9", "br"),
            ("gzip;q=0.5, br", "br"),
            ("br;q=0.5, gzip", "gzip"),
        ] {
            let r = run(&asks(ae), Method::GET, answer("application/json", 5000));
            assert_eq!(r.headers()[header::CONTENT_ENCODING], want, "{ae}");
        }
        // Brotli first in the site's own list of two: still gzip at a tie.
        let br_gzip = CompressOptions {
            encodings: vec![Encoding::Br, Encoding::Gzip],
            ..Default::default()
        };
        let mut r = answer("application/json", 5000);
        filter(&br_gzip, &Method::GET, &asks("br, gzip"), &mut r);
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
        let body = bytes(r).await;
        let mut d = flate2::read::GzDecoder::new(&body[..]);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut d, &mut out).unwrap();
        assert_eq!(out, TEXT.repeat(5000 / TEXT.len() + 1)[..5000]);
    }
}
