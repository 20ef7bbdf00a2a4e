//! The request-head phase: the limits every request is held to whatever
//! protocol brought it (target length 414, field count and size 431,
//! declared body size 413), and the answers that come before any site
//! (ACME HTTP-01 tokens, so a redirect to HTTPS cannot hide them), and the
//! request's host as the later phases read it. Reads the head only; never
//! reads the body.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_config::Limits;
use weir_http::body::Body;
use weir_http::response::error;

/// The answer to a request past `limits`, if it is.
pub(super) fn check(limits: &Limits, parts: &http::request::Parts) -> Option<Response<Body>> {
    let target_len = parts.uri.path_and_query().map_or(0, |p| p.as_str().len());
    let fields = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().len(), v.len()));
    if let Some(status) = over_limits(limits, target_len, parts.headers.len(), fields) {
        return Some(closing(error(status)));
    }
    if let Some(len) = parts.headers.get(header::CONTENT_LENGTH)
        && len
            .to_str()
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|n| n > limits.body)
    {
        return Some(closing(error(StatusCode::PAYLOAD_TOO_LARGE)));
    }
    None
}

/// The key authorization for an ACME HTTP-01 token this request asks for.
pub(super) fn acme(
    challenges: &weir_tls::Challenges,
    parts: &http::request::Parts,
) -> Option<Response<Body>> {
    let token = parts
        .uri
        .path()
        .strip_prefix("/.well-known/acme-challenge/")?;
    let key_auth = challenges.http01(token)?;
    let mut r = Response::new(Body::full(Bytes::from(key_auth)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Some(r)
}

/// The limits on a request head hyper does not enforce for us: the
/// answer when the target (`target_len` bytes) or the `count` fields
/// (each a name's and a value's length) are past them.
fn over_limits(
    limits: &Limits,
    target_len: usize,
    count: usize,
    fields: impl Iterator<Item = (usize, usize)>,
) -> Option<StatusCode> {
    if target_len > limits.uri {
        return Some(StatusCode::URI_TOO_LONG);
    }
    let too_many = count > limits.headers;
    let size = target_len + fields.map(|(n, v)| n + v + 4).sum::<usize>();
    (too_many || size > limits.header_size).then_some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
}

fn closing(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The request's host without port: the URI authority (HTTP/2, absolute
/// form) or the Host header.
pub(super) fn request_host(parts: &http::request::Parts) -> &str {
    let raw = parts
        .uri
        .host()
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("");
    strip_port(raw)
}

pub(super) fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split(']').next().map_or(h, |s| &h[..s.len() + 1]);
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    }
}
