//! Request IDs (a site's `request_id`): each request gets one in the
//! site's field before the request filters, so the upstream, the access
//! log and weir's own log lines see it; a trusted proxy's ID is kept. The
//! answer carries it back when configured, and weir's own error pages
//! always show it. Never makes a system call per request: an ID is a
//! random prefix drawn once per thread and the thread's counter.

use std::cell::Cell;

use bytes::Bytes;
use http::Response;
use http::header::{self, HeaderMap, HeaderValue};

use weir_config::log_format::RequestIdConfig;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

thread_local! {
    /// (random prefix, next count) of this thread's IDs.
    static NEXT: Cell<(u64, u64)> = Cell::new((fastrand::u64(1..), 0));
}

/// A new ID: 32 lowercase hex digits (the shape of a W3C trace ID), unique
/// as long as no two threads draw the same 64-bit prefix.
pub(crate) fn generate() -> [u8; 32] {
    let (prefix, n) = NEXT.with(|c| {
        let (p, n) = c.get();
        c.set((p, n.wrapping_add(1)));
        (p, n)
    });
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, v) in [prefix, n].into_iter().enumerate() {
        for j in 0..16 {
            out[i * 16 + j] = H[((v >> (60 - 4 * j)) & 15) as usize];
        }
    }
    out
}

/// An ID a client or proxy sent is kept only if it is short printable text.
fn acceptable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_graphic())
}

/// The request phase: the site's requests get their IDs.
#[inline]
pub(super) fn on_request(site: &super::Site, conn: &ConnInfo, h: &mut HeaderMap) {
    if let Some(cfg) = &site.cfg.request_id {
        let peer = conn.peer.ip();
        assign(cfg, site.trusted.iter().any(|n| n.contains(&peer)), h);
    }
}

/// The response phase: the site's answers carry the IDs as configured.
#[inline]
pub(super) fn on_response(site: &super::Site, req: &HeaderMap, resp: &mut Response<Body>) {
    if let Some(cfg) = &site.cfg.request_id {
        respond(cfg, req, resp);
    }
}

/// The request's ID as the log names it: in the site's field, or in
/// `X-Request-ID` as it came when the site gives none.
pub(super) fn of<'a>(site: &super::Site, req: &'a HeaderMap) -> Option<&'a [u8]> {
    let name = site
        .cfg
        .request_id
        .as_ref()
        .map_or(&X_REQUEST_ID, |c| &c.header);
    req.get(name).map(HeaderValue::as_bytes)
}

static X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// Gives the request its ID: the one it came with when `trusted` (its
/// peer is one of the site's trusted proxies) and acceptable, else a new one.
pub(super) fn assign(cfg: &RequestIdConfig, trusted: bool, h: &mut HeaderMap) {
    if trusted && h.get(&cfg.header).is_some_and(acceptable) {
        return;
    }
    let id = generate();
    // Hex digits are always a valid field value.
    if let Ok(v) = HeaderValue::from_bytes(&id) {
        h.insert(cfg.header.clone(), v);
    }
}

/// Puts the request's ID in the answer: in its field when configured, and
/// in the text of weir's own error pages.
pub(super) fn respond(cfg: &RequestIdConfig, req: &HeaderMap, resp: &mut Response<Body>) {
    let Some(id) = req.get(&cfg.header) else {
        return;
    };
    if cfg.response {
        resp.headers_mut().insert(cfg.header.clone(), id.clone());
    }
    let Some(own) = resp.extensions().get::<weir_http::response::OwnError>() else {
        return;
    };
    // A custom error page (`errors`) replaced weir's text: left as it is.
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/plain"));
    if !plain {
        return;
    }
    let mut text = Vec::with_capacity(own.0.len() + 16 + id.len());
    text.extend_from_slice(own.0.as_bytes());
    text.extend_from_slice(b"request id: ");
    text.extend_from_slice(id.as_bytes());
    text.push(b'\n');
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    *resp.body_mut() = Body::full(Bytes::from(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_hex_and_trusted_ones_kept() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(
            a.iter()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(a[..16], b[..16], "one prefix per thread");
        let cfg = RequestIdConfig {
            header: http::HeaderName::from_static("x-request-id"),
            response: true,
        };
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("from-proxy"));
        assign(&cfg, true, &mut h);
        assert_eq!(h["x-request-id"], "from-proxy");
        assign(&cfg, false, &mut h);
        assert_eq!(h["x-request-id"].len(), 32);
        h.insert("x-request-id", HeaderValue::from_static("has space"));
        assign(&cfg, true, &mut h);
        assert_eq!(h["x-request-id"].len(), 32);

        let mut resp = weir_http::response::error(http::StatusCode::NOT_FOUND);
        respond(&cfg, &h, &mut resp);
        let id = h["x-request-id"].to_str().unwrap();
        assert_eq!(resp.headers()["x-request-id"], id);
        let want = format!("404 Not Found\nrequest id: {id}\n");
        assert_eq!(
            resp.headers()["content-length"],
            want.len().to_string().as_str()
        );
    }
}
