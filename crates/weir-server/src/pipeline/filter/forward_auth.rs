//! `forward_auth`: a sub-request to the auth service for each request; a
//! 2xx lets it through with the chosen fields of the answer, anything else
//! is the client's answer (nginx's `auth_request`, Caddy's
//! `forward_auth`).

use std::sync::Arc;

use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use weir_config::traffic;
use weir_http::body::Body;
use weir_http::response::error;
use weir_http::trace::{Current, Kind};

use super::{Checking, Layer, RequestFilter};
use crate::access_log::AuthStatus;

pub(in crate::pipeline) struct ForwardAuth {
    cfg: Arc<traffic::ForwardAuth>,
    proxy: Arc<weir_proxy::Proxy>,
}

impl ForwardAuth {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        let f = layer.cfg.forward_auth.as_ref()?;
        Some(ForwardAuth {
            cfg: f.clone(),
            proxy: weir_proxy::Proxy::after(f.upstream.clone(), layer.workers, &[]),
        })
    }
}

impl RequestFilter for ForwardAuth {
    fn check(&self, _req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        Ok(0)
    }

    fn waits(&self) -> bool {
        true
    }

    async fn wait(&self, req: &mut Checking<'_>) -> Result<(), Response<Body>> {
        static METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
        static URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
        static ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
        let (fa, parts) = (&self.cfg, &mut *req.parts);
        let (mut sub, ()) = http::Request::get(fa.path.as_str())
            .body(())
            .unwrap_or_default()
            .into_parts();
        for (name, v) in &parts.headers {
            let wanted = match &fa.headers {
                None => !not_forwarded(name),
                Some(list) => list.contains(name) || name == header::HOST,
            };
            if wanted {
                sub.headers.append(name.clone(), v.clone());
            }
        }
        // HTTP/2 and HTTP/3 carry the host in the URI.
        if !sub.headers.contains_key(header::HOST)
            && let Some(a) = parts.uri.authority()
            && let Ok(v) = HeaderValue::from_str(a.as_str())
        {
            sub.headers.insert(header::HOST, v);
        }
        sub.headers.insert(
            METHOD.clone(),
            HeaderValue::from_str(parts.method.as_str()).unwrap_or(HeaderValue::from_static("GET")),
        );
        let uri = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        if let Ok(v) = HeaderValue::from_str(uri) {
            sub.headers.insert(URI.clone(), v.clone());
            sub.headers.insert(ORIGINAL_URI.clone(), v);
        }
        // A traced request's auth call is a span; the proxy's attempts to
        // the auth service hang under it.
        let mut span = parts.extensions.get::<Current>().map(|c| {
            let mut s = c.child("forward_auth", Kind::Client);
            s.attr("http.request.method", "GET");
            s.attr("url.path", &fa.path);
            s
        });
        if let Some(s) = &span {
            sub.extensions.insert(s.current());
        }
        let answer = tokio::time::timeout(
            fa.timeout,
            self.proxy.serve(&mut sub, Body::empty(), req.conn, None),
        )
        .await;
        if let Some(mut s) = span.take() {
            match &answer {
                Ok(r) => {
                    s.attr("http.response.status_code", i64::from(r.status().as_u16()));
                    s.attr("weir.auth.allowed", r.status().is_success());
                    s.error = r.status().is_server_error();
                }
                Err(_) => {
                    s.attr("error.type", "timeout");
                    s.error = true;
                }
            }
            s.end();
        }
        let resp = match answer {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    "forward_auth: no answer from {} within {:?}",
                    fa.upstream.upstreams[0].name,
                    fa.timeout
                );
                req.outcome.auth = AuthStatus::Failed;
                return Err(error(StatusCode::GATEWAY_TIMEOUT));
            }
        };
        if !resp.status().is_success() {
            // weir's own 502/503/504: the service was not reached.
            req.outcome.auth = if resp.status().is_server_error() {
                AuthStatus::Failed
            } else {
                AuthStatus::Refused
            };
            return Err(resp);
        }
        req.outcome.auth = AuthStatus::Passed;
        for name in &fa.copy {
            parts.headers.remove(name);
            for v in resp.headers().get_all(name) {
                parts.headers.append(name.clone(), v.clone());
            }
        }
        Ok(())
    }
}

/// Fields never sent to the auth service: they describe the client's body
/// or connection, and the sub-request has neither.
fn not_forwarded(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "te"
            | "upgrade"
            | "expect"
            | "trailer"
            | "proxy-connection"
    )
}
