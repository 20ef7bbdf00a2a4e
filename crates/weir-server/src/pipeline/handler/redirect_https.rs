//! The HTTP → HTTPS redirect of a TLS site's plain port: 308 to the same
//! host and target on `port`.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;

use super::{Handle, Req};

pub(in crate::pipeline) struct RedirectHttps {
    pub port: u16,
}

impl Handle for RedirectHttps {
    async fn serve(&self, req: Req<'_>, _body: Body) -> Response<Body> {
        let parts = &*req.parts;
        let host = crate::pipeline::request_head::request_host(parts);
        if host.is_empty() {
            return error(StatusCode::BAD_REQUEST);
        }
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let location = if self.port == 443 {
            format!("https://{host}{pq}")
        } else {
            format!("https://{host}:{}{pq}", self.port)
        };
        let Ok(loc) = HeaderValue::from_str(&location) else {
            return error(StatusCode::BAD_REQUEST);
        };
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
        r.headers_mut().insert(header::LOCATION, loc);
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        r
    }
}
