//! The log phase: one access-log line per request for a site that keeps a
//! log, handed to the log's writer thread (the request counts are added
//! just before, in `Listener::handle`). Never writes to a file on the
//! request path.

use std::time::Duration;

use http::Response;
use http::header;

use crate::access_log::{AccessLog, Entry};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

use super::request_head::request_host;

/// Logs the request in `parts` and its response, which `took` to answer
/// with a body of `bytes` (as its `Content-Length` declared).
pub(super) fn record(
    log: &AccessLog,
    conn: &ConnInfo,
    parts: &http::request::Parts,
    resp: &Response<Body>,
    took: Duration,
    bytes: Option<u64>,
) {
    let field = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
    log.log(&Entry {
        peer: conn.peer,
        method: parts.method.as_str(),
        target: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        version: parts.version,
        status: resp.status().as_u16(),
        bytes,
        referer: field(header::REFERER),
        user_agent: field(header::USER_AGENT),
        host: request_host(parts),
        duration: took,
    });
}
