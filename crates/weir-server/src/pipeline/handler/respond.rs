//! A `respond` handler: a fixed status, body and content type; the
//! smallest handler, and the example docs/architecture.md shows.

use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};

use weir_http::body::Body;

use super::{Handle, Req};

pub(in crate::pipeline) struct Respond(pub weir_config::traffic::Respond);

impl Handle for Respond {
    async fn serve(&self, req: Req<'_>, _body: Body) -> Response<Body> {
        let r = &self.0;
        let mut resp = Response::new(if req.parts.method == Method::HEAD || r.body.is_empty() {
            Body::empty()
        } else {
            Body::full(r.body.clone())
        });
        *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
        if let Some(t) = &r.content_type {
            resp.headers_mut().insert(header::CONTENT_TYPE, t.clone());
        }
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(r.body.len()));
        resp
    }
}
