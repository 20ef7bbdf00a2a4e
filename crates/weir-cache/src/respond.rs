//! Answers from a stored response: `Age` and `Cache-Status` (RFC 9211),
//! the client's own conditional request (304), `HEAD`, and byte ranges of
//! a complete body. Never goes upstream and never changes the store.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use weir_http::body::Body;
use weir_static::range::{self, RangeDecision};

use crate::object::{ObjBody, Object};

pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// `Cache-Status` of a response served from the store.
pub fn hit(ttl: i64, detail: Option<&str>) -> HeaderValue {
    let mut s = format!("weir; hit; ttl={ttl}");
    if let Some(d) = detail {
        s.push_str("; detail=");
        s.push_str(d);
    }
    HeaderValue::from_maybe_shared(Bytes::from(s)).expect("tokens and digits")
}

/// `Cache-Status` of a response that went upstream: why (`fwd`), whether
/// it was stored, whether this request waited on another's fetch.
pub fn forward(
    fwd: &str,
    fwd_status: Option<u16>,
    stored: bool,
    collapsed: bool,
    detail: Option<&str>,
) -> HeaderValue {
    let mut s = format!("weir; fwd={fwd}");
    if let Some(st) = fwd_status {
        s.push_str("; fwd-status=");
        s.push_str(itoa::Buffer::new().format(st));
    }
    if stored {
        s.push_str("; stored");
    }
    if collapsed {
        s.push_str("; collapsed");
    }
    if let Some(d) = detail {
        s.push_str("; detail=");
        s.push_str(d);
    }
    HeaderValue::from_maybe_shared(Bytes::from(s)).expect("tokens and digits")
}

/// RFC 9110 §13.1.2, §13.1.3: whether the client's validators match the
/// stored response (If-None-Match by weak comparison, else If-Modified-Since).
fn not_modified(req: &HeaderMap, obj: &Object) -> bool {
    let mut inm = req.get_all(header::IF_NONE_MATCH).iter().peekable();
    if inm.peek().is_some() {
        let Some(etag) = &obj.etag else { return false };
        let tag = weak_opaque(etag.as_bytes());
        return inm.any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .map(str::trim)
                    .any(|t| t == "*" || weak_opaque(t.as_bytes()) == tag)
            })
        });
    }
    let Some(lm) = obj.last_modified else {
        return false;
    };
    req.get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| httpdate::parse_http_date(s).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .is_some_and(|since| lm <= since.as_secs())
}

fn weak_opaque(b: &[u8]) -> &[u8] {
    b.strip_prefix(b"W/").unwrap_or(b)
}

/// RFC 9110 §13.1.5: a Range is honoured only when If-Range (if any)
/// names this response: a strong ETag, or exactly its Last-Modified.
fn if_range_allows(req: &HeaderMap, obj: &Object) -> bool {
    let Some(v) = req.get(header::IF_RANGE) else {
        return true;
    };
    let b = v.as_bytes();
    if b.starts_with(b"\"") {
        return obj.etag.as_ref().is_some_and(|e| e.as_bytes() == b);
    }
    if b.starts_with(b"W/") {
        return false;
    }
    let since = v
        .to_str()
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    since.is_some_and(|t| obj.last_modified == Some(t.as_secs()))
}

/// The answer to `req` from `obj`; `None` when the object's body has
/// already moved on past its first bytes (too large to keep), so the
/// request must fetch for itself.
pub fn from_object(
    req: &Parts,
    obj: &Object,
    now: u64,
    status: HeaderValue,
) -> Option<Response<Body>> {
    let mut headers = obj.headers.clone();
    headers.insert(header::AGE, HeaderValue::from(obj.fresh.age(now)));
    headers.insert(CACHE_STATUS.clone(), status);
    let head = req.method == Method::HEAD;
    if (req.method == Method::GET || head)
        && obj.status == StatusCode::OK
        && not_modified(&req.headers, obj)
    {
        for f in [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONTENT_RANGE,
        ] {
            headers.remove(f);
        }
        return Some(build(StatusCode::NOT_MODIFIED, headers, Body::empty()));
    }
    if let Some(len) = obj.body_len() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if head {
        return Some(build(obj.status, headers, Body::empty()));
    }
    match &obj.body {
        ObjBody::Complete(b) => {
            if obj.status == StatusCode::OK
                && let Some(r) = req.headers.get(header::RANGE)
                && if_range_allows(&req.headers, obj)
            {
                return Some(ranges(r, b, headers));
            }
            let mut r = build(obj.status, headers, Body::full(b.clone()));
            if let Some((file, offset)) = &obj.file
                && b.len() >= weir_http::file_region::MIN_LEN
            {
                r.extensions_mut()
                    .insert(weir_http::file_region::FileRegion {
                        bytes: b.clone(),
                        file: file.clone(),
                        offset: *offset,
                    });
            }
            Some(r)
        }
        ObjBody::Filling(f) => {
            let reader = f.reader(obj.body_len())?;
            Some(build(obj.status, headers, Body::stream(reader)))
        }
        // Read back into memory first (`Store::load`).
        ObjBody::OnDisk(_) => None,
    }
}

fn build(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// Byte ranges of a complete body (RFC 9110 §14), with the same abuse
/// limits as static files.
fn ranges(range: &HeaderValue, body: &Bytes, mut headers: HeaderMap) -> Response<Body> {
    let len = body.len() as u64;
    match range::parse(range, len) {
        RangeDecision::Ignore => build(StatusCode::OK, headers, Body::full(body.clone())),
        RangeDecision::Unsatisfiable => {
            headers.insert(header::CONTENT_RANGE, range::unsatisfied_range(len));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
            build(StatusCode::RANGE_NOT_SATISFIABLE, headers, Body::empty())
        }
        RangeDecision::Ranges(rs) if rs.len() == 1 => {
            let r = rs[0];
            headers.insert(header::CONTENT_RANGE, range::content_range(r, len));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(r.len()));
            let part = body.slice(r.start as usize..=r.end as usize);
            build(StatusCode::PARTIAL_CONTENT, headers, Body::full(part))
        }
        RangeDecision::Ranges(rs) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .cloned()
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            let m = range::multipart(&rs, len, &ct);
            let mut out = BytesMut::with_capacity(m.body_len as usize);
            for (r, h) in rs.iter().zip(&m.part_heads) {
                out.extend_from_slice(h);
                out.extend_from_slice(&body[r.start as usize..=r.end as usize]);
            }
            out.extend_from_slice(&m.tail);
            headers.insert(header::CONTENT_TYPE, m.content_type);
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(m.body_len));
            build(
                StatusCode::PARTIAL_CONTENT,
                headers,
                Body::full(out.freeze()),
            )
        }
    }
}
