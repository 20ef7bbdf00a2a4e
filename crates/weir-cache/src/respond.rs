//! Answers from a stored response: `Age` and `Cache-Status` (RFC 9211),
//! the client's own preconditions (304, 412), `HEAD`, and byte ranges of a
//! complete body, by the rules static files answer with
//! (`weir_http::conditional`, `weir_http::range`). Never goes upstream and
//! never changes the store.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use weir_http::body::Body;
use weir_http::conditional::{self, Outcome, Validators};
use weir_http::range::{self, RangeDecision};

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
    headers.insert(CACHE_STATUS.clone(), status.clone());
    let head = req.method == Method::HEAD;
    // RFC 9110 §13.2.1: preconditions apply only where the answer
    // without them would be 2xx.
    let outcome = if obj.status.is_success() {
        let v = Validators {
            etag: obj.etag.as_ref().map(HeaderValue::as_bytes),
            last_modified: obj.last_modified,
        };
        conditional::evaluate(&req.method, &req.headers, &v)
    } else {
        Outcome::Proceed
    };
    match outcome {
        Outcome::Proceed | Outcome::IgnoreRange => {}
        Outcome::NotModified => {
            conditional::not_modified_fields(&mut headers);
            return Some(build(StatusCode::NOT_MODIFIED, headers, Body::empty()));
        }
        Outcome::PreconditionFailed => {
            let mut r = weir_http::response::error(StatusCode::PRECONDITION_FAILED);
            r.headers_mut().insert(CACHE_STATUS.clone(), status);
            return Some(r);
        }
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
                && req.method == Method::GET
                && outcome == Outcome::Proceed
                && let Some(r) = req.headers.get(header::RANGE)
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

/// Byte ranges of a complete body (RFC 9110 §14), answered as static
/// files answer them.
fn ranges(range: &HeaderValue, body: &Bytes, mut headers: HeaderMap) -> Response<Body> {
    let len = body.len() as u64;
    match range::parse(range, len) {
        RangeDecision::Ignore => build(StatusCode::OK, headers, Body::full(body.clone())),
        RangeDecision::Unsatisfiable => {
            let mut r = range::unsatisfiable(len);
            if let Some(status) = headers.remove(&CACHE_STATUS) {
                r.headers_mut().insert(CACHE_STATUS.clone(), status);
            }
            r
        }
        RangeDecision::Ranges(rs) => {
            let part = match range::partial_fields(&mut headers, &rs, len) {
                None => body.slice(rs[0].start as usize..=rs[0].end as usize),
                Some(m) => m.assemble(&rs, body),
            };
            build(StatusCode::PARTIAL_CONTENT, headers, Body::full(part))
        }
    }
}
