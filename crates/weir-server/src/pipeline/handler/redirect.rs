//! A `redirect` handler: its status and a `Location` made from the request
//! (its template filled with the request's fields and the route's regex
//! groups).

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_config::traffic::RequestView;
use weir_http::body::Body;
use weir_http::response::error;

use super::{Handle, Req};

pub(in crate::pipeline) struct Redirect(pub weir_config::traffic::Redirect);

impl Handle for Redirect {
    async fn serve(&self, req: Req<'_>, _body: Body) -> Response<Body> {
        let parts = &*req.parts;
        let view = RequestView {
            parts,
            host: crate::pipeline::request_head::request_host(parts),
            client: req.client,
            tls: req.conn.tls,
        };
        let groups: smallvec::SmallVec<[&str; 4]> =
            req.captures.iter().map(String::as_str).collect();
        let mut to = String::new();
        self.0.to.render(&view, &groups, &mut to);
        let Ok(loc) = HeaderValue::from_str(&to) else {
            return error(StatusCode::BAD_REQUEST);
        };
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::FOUND);
        resp.headers_mut().insert(header::LOCATION, loc);
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        resp
    }
}
