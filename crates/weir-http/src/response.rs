//! The short plain-text answers any stage may give (400, 404, 405, 408, 412,
//! 413, 414, 416, 431, 501, 502). Builds responses only; never decides when to send them.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use crate::body::Body;

/// A short plain-text error response.
/// Marks an error answer whose text weir wrote (not an upstream's, not a
/// custom page), with that text: a request ID can be added to it.
#[derive(Clone, Copy, Debug)]
pub struct OwnError(pub &'static str);

pub fn error(status: StatusCode) -> Response<Body> {
    let text = match status {
        StatusCode::URI_TOO_LONG => "414 URI Too Long\n",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "431 Request Header Fields Too Large\n",
        StatusCode::PAYLOAD_TOO_LARGE => "413 Content Too Large\n",
        StatusCode::BAD_REQUEST => "400 Bad Request\n",
        StatusCode::REQUEST_TIMEOUT => "408 Request Timeout\n",
        StatusCode::NOT_FOUND => "404 Not Found\n",
        StatusCode::METHOD_NOT_ALLOWED => "405 Method Not Allowed\n",
        StatusCode::PRECONDITION_FAILED => "412 Precondition Failed\n",
        StatusCode::RANGE_NOT_SATISFIABLE => "416 Range Not Satisfiable\n",
        StatusCode::NOT_IMPLEMENTED => "501 Not Implemented\n",
        StatusCode::UNAUTHORIZED => "401 Unauthorized\n",
        StatusCode::FORBIDDEN => "403 Forbidden\n",
        StatusCode::TOO_MANY_REQUESTS => "429 Too Many Requests\n",
        StatusCode::SERVICE_UNAVAILABLE => "503 Service Unavailable\n",
        StatusCode::BAD_GATEWAY => "502 Bad Gateway\n",
        StatusCode::GATEWAY_TIMEOUT => "504 Gateway Timeout\n",
        _ => "error\n",
    };
    let mut r = Response::new(Body::full(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.extensions_mut().insert(OwnError(text));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    // A request that timed out may have left part of itself on the wire.
    if status == StatusCode::REQUEST_TIMEOUT {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// 405 for a method no handler of weir takes (CONNECT outside a proxy).
pub fn method_not_allowed() -> Response<Body> {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED);
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    r
}
