//! `request_headers` rules (`set`, `add`, `remove`), applied after every
//! layer's checks; values filled from the request as it arrived (a
//! route's with its regex groups). [`apply`] is shared with the response
//! header rules.

use std::sync::Arc;

use http::Response;
use http::header::{HeaderName, HeaderValue};

use weir_config::traffic::{self, HeaderOps, RequestView};
use weir_http::body::Body;
use weir_proxy::forward::RuleForwarding;

use super::{Checking, Layer, RequestFilter};

pub(in crate::pipeline) struct RequestHeaders {
    cfg: Arc<traffic::Filters>,
    /// The forwarding fields these rules name: the proxy leaves them as the
    /// rules made them (weir_proxy::forward::RuleForwarding).
    forwarding: RuleForwarding,
}

impl RequestHeaders {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        let ops = &layer.cfg.request_headers;
        (!ops.is_empty()).then(|| RequestHeaders {
            cfg: layer.cfg.clone(),
            forwarding: RuleForwarding::of(
                ops.set
                    .iter()
                    .chain(&ops.add)
                    .map(|(n, _)| n)
                    .chain(&ops.remove),
            ),
        })
    }
}

impl RequestFilter for RequestHeaders {
    const REWRITES: bool = true;

    fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        let ops = &self.cfg.request_headers;
        let parts = &mut *req.parts;
        if !self.forwarding.is_empty() {
            let had = parts.extensions.get::<RuleForwarding>().copied();
            parts
                .extensions
                .insert(self.forwarding.union(had.unwrap_or_default()));
        }
        let fixed =
            |l: &[(HeaderName, traffic::Template)]| l.iter().all(|(_, t)| t.fixed().is_some());
        if fixed(&ops.set) && fixed(&ops.add) {
            // No placeholder: nothing to read from the request.
            apply(ops, &mut parts.headers, None, &[]);
            return Ok(0);
        }
        let captures: smallvec::SmallVec<[&str; 4]> =
            req.captures.iter().map(String::as_str).collect();
        // The values read the request's own fields: filled first, then set.
        let mut h = std::mem::take(&mut parts.headers);
        let before = http::request::Builder::new()
            .method(parts.method.clone())
            .uri(parts.uri.clone())
            .version(parts.version)
            .body(())
            .map(|r| r.into_parts().0);
        if let Ok(mut view_parts) = before {
            if let Some(host) = h.get(http::header::HOST) {
                view_parts.headers.insert(http::header::HOST, host.clone());
            }
            let view = RequestView {
                parts: &view_parts,
                host: crate::pipeline::request_head::request_host(&view_parts),
                client: req.client,
                tls: req.conn.tls,
            };
            apply(ops, &mut h, Some(&view), &captures);
        }
        parts.headers = h;
        Ok(0)
    }
}

/// `set`, `add`, `remove`, in that order; values filled from the request.
pub(in crate::pipeline) fn apply(
    ops: &HeaderOps,
    h: &mut http::HeaderMap,
    view: Option<&RequestView<'_>>,
    captures: &[&str],
) {
    if ops.is_empty() {
        return;
    }
    // `view` is `None` only when every value is fixed.
    let value = |t: &traffic::Template| match (t.fixed(), view) {
        (Some(v), _) => Some(v.clone()),
        (None, Some(view)) => {
            let mut s = String::new();
            t.render(view, captures, &mut s);
            HeaderValue::from_str(&s).ok()
        }
        (None, None) => None,
    };
    for (name, t) in &ops.set {
        match value(t) {
            Some(v) if !v.is_empty() => {
                h.insert(name.clone(), v);
            }
            // An empty value removes the field, as nginx's proxy_set_header does.
            _ => {
                h.remove(name);
            }
        }
    }
    for (name, t) in &ops.add {
        if let Some(v) = value(t) {
            h.append(name.clone(), v);
        }
    }
    for name in &ops.remove {
        h.remove(name);
    }
}
