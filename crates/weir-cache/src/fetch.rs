//! Going upstream for the cache: the request a shared fetch sends (only
//! what the key names can shape a shared response), the stored object made
//! from the answer, and the task that pumps its body into the store while
//! clients read it.
//!
//! Never answers a client itself: [`crate::respond`] does.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response};
use http_body::Body as _;
use weir_config::cache::{CachePolicy, SetCookie};
use weir_http::body::Body;

use crate::control::CacheControl;
use crate::key;
use crate::object::{Fill, ObjBody, Object};
use crate::rules::{self, Freshness};
use crate::store::Store;

/// Request fields a shared fetch never sends: the client's own
/// conditionals and ranges (the cache asks for the whole response and
/// answers those itself), and fields that are not in the key but that
/// applications read to build links or routes, which would let one client
/// poison what every other one gets.
static NOT_FORWARDED: [HeaderName; 16] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-server"),
    HeaderName::from_static("x-forwarded-scheme"),
    HeaderName::from_static("x-forwarded-port"),
    HeaderName::from_static("x-forwarded-prefix"),
    HeaderName::from_static("x-host"),
    HeaderName::from_static("x-original-url"),
    HeaderName::from_static("x-rewrite-url"),
    HeaderName::from_static("x-http-method-override"),
    HeaderName::from_static("x-method-override"),
];

/// The GET a shared fetch sends for `parts` (a HEAD is fetched as a GET so
/// that its answer can be stored), with `Accept-Encoding` reduced to the
/// one coding the key holds, and the stored response's validators when
/// revalidating.
pub fn upstream_request(parts: &Parts, policy: &CachePolicy, stale: Option<&Object>) -> Parts {
    let mut up = Request::builder()
        .method(Method::GET)
        .uri(parts.uri.clone())
        .version(parts.version)
        .body(())
        .expect("parts of a valid request")
        .into_parts()
        .0;
    let mut h = HeaderMap::with_capacity(parts.headers.len() + 2);
    for (name, value) in &parts.headers {
        if NOT_FORWARDED.contains(name)
            || name == header::ACCEPT_ENCODING
            || (!policy.honour_request && (name == header::CACHE_CONTROL || name == header::PRAGMA))
        {
            continue;
        }
        h.append(name.clone(), value.clone());
    }
    let ae = key::accept_encoding(&parts.headers);
    if !ae.is_empty() {
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(ae));
    }
    if let Some(o) = stale {
        if let Some(e) = &o.etag {
            h.insert(header::IF_NONE_MATCH, e.clone());
        }
        if let Some(lm) = o.headers.get(header::LAST_MODIFIED) {
            h.insert(header::IF_MODIFIED_SINCE, lm.clone());
        }
    }
    up.headers = h;
    up
}

/// The fields a response is stored with: without the tags field (kept
/// apart), the cookies the policy strips, the fields a qualified `private`
/// or `no-cache` names, and `Age` (computed when served).
fn stored_headers(resp: &HeaderMap, cc: &CacheControl, policy: &CachePolicy) -> HeaderMap {
    let mut h = resp.clone();
    h.remove(&policy.tags_header);
    h.remove(header::AGE);
    if policy.set_cookie == SetCookie::Strip {
        h.remove(header::SET_COOKIE);
    }
    for f in &cc.strip_fields {
        if let Ok(n) = HeaderName::from_bytes(f.as_bytes()) {
            h.remove(n);
        }
    }
    h
}

pub(crate) fn tags(resp: &HeaderMap, policy: &CachePolicy) -> Box<[Box<str>]> {
    resp.get_all(&policy.tags_header)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split([' ', ',', '\t']))
        .filter(|t| !t.is_empty())
        .map(Box::from)
        .collect()
}

/// Everything about a response to store but its body.
pub struct Head {
    pub obj: Object,
    /// The body as it came, for the pump.
    pub body: Body,
}

/// Makes the object to store from an upstream response to `req`.
pub fn object(
    req: &Parts,
    extra: &str,
    resp: Response<Body>,
    cc: &CacheControl,
    policy: &CachePolicy,
    request_time: u64,
    response_time: u64,
) -> Head {
    let (rp, body) = resp.into_parts();
    let fresh = Freshness::new(
        rp.status,
        &rp.headers,
        cc,
        request_time,
        response_time,
        policy,
    );
    let vary = key::vary_names(&rp.headers)
        .into_iter()
        .map(|n| {
            let v = key::field_value(&req.headers, &n);
            (n, v)
        })
        .collect();
    let headers = stored_headers(&rp.headers, cc, policy);
    let (obj_body, body) = match body {
        Body::Empty => (ObjBody::Complete(Bytes::new()), Body::Empty),
        Body::Full(Some(b)) => (ObjBody::Complete(b), Body::Empty),
        Body::Full(None) => (ObjBody::Complete(Bytes::new()), Body::Empty),
        s @ Body::Stream(_) if s.is_end_stream() => (ObjBody::Complete(Bytes::new()), Body::Empty),
        s => (ObjBody::Filling(Arc::new(Fill::default())), s),
    };
    Head {
        obj: Object {
            status: rp.status,
            etag: headers.get(header::ETAG).cloned(),
            last_modified: rules::last_modified(&headers),
            headers,
            fresh,
            vary,
            extra: extra.into(),
            tags: tags(&rp.headers, policy),
            body: obj_body,
            file: None,
        },
        body,
    }
}

/// Moves an upstream body into the stored object's [`Fill`] as it
/// arrives, whoever reads it and however fast; once whole, the object is
/// replaced by one holding the body in one piece. A body that grows past
/// `[cache] max_object_size` leaves the store and only streams on to the
/// clients reading it.
pub async fn pump(store: Arc<Store>, primary: Arc<str>, obj: Arc<Object>, mut body: Body) {
    use http_body_util::BodyExt;
    let ObjBody::Filling(fill) = &obj.body else {
        return;
    };
    let limit = store.max_object_size();
    let mut kept = true;
    loop {
        if !kept && !std::future::poll_fn(|cx| fill.poll_room(cx)).await {
            // Nobody reads it and it is not kept: stop fetching.
            fill.finish(false);
            return;
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if kept && fill.received() + data.len() as u64 > limit {
                    kept = false;
                    fill.stop_keeping();
                    store.remove(&primary, &obj);
                    tracing::debug!(key = %primary, "cache: response larger than max_object_size, not kept");
                }
                fill.push(data);
            }
            Some(Err(e)) => {
                tracing::debug!(key = %primary, error = %e, "cache: upstream body failed");
                fill.finish(false);
                store.remove(&primary, &obj);
                return;
            }
            None => break,
        }
    }
    fill.finish(true);
    if let Some(whole) = fill.whole() {
        let mut headers = obj.headers.clone();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(whole.len()));
        headers.remove(header::TRANSFER_ENCODING);
        let done = obj.with(headers, obj.fresh, ObjBody::Complete(whole));
        store.replace(&primary, &obj, Arc::new(done));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_fetch_drops_unkeyed_and_conditional_fields() {
        let req = Request::builder()
            .method(Method::HEAD)
            .uri("/a")
            .header("host", "h")
            .header("x-forwarded-host", "evil.example")
            .header("x-original-url", "/admin")
            .header("if-none-match", "\"x\"")
            .header("range", "bytes=0-1")
            .header("accept-encoding", "gzip, deflate, br")
            .header("cache-control", "no-cache")
            .header("cookie", "a=1")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let up = upstream_request(&req, &CachePolicy::default(), None);
        assert_eq!(up.method, Method::GET);
        assert_eq!(up.headers["host"], "h");
        assert_eq!(up.headers["cookie"], "a=1");
        assert_eq!(up.headers["accept-encoding"], "br");
        for gone in [
            "x-forwarded-host",
            "x-original-url",
            "if-none-match",
            "range",
            "cache-control",
        ] {
            assert!(!up.headers.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn stored_fields_lose_tags_age_and_named_private_fields() {
        let mut resp = HeaderMap::new();
        resp.insert("surrogate-key", "a b".parse().unwrap());
        resp.insert("age", "5".parse().unwrap());
        resp.insert("x-user", "me".parse().unwrap());
        resp.insert(
            "cache-control",
            "max-age=5, private=\"x-user\"".parse().unwrap(),
        );
        let cc = CacheControl::parse(&resp);
        let p = CachePolicy::default();
        let h = stored_headers(&resp, &cc, &p);
        assert!(
            !h.contains_key("surrogate-key") && !h.contains_key("age") && !h.contains_key("x-user")
        );
        assert_eq!(&*tags(&resp, &p), &[Box::from("a"), Box::from("b")]);
    }
}
