//! A site's or route's `response_headers` rules (`set`, `add`, `remove`)
//! as a response filter: the smallest one, and the example
//! docs/architecture.md shows. Values are filled from the request.

use std::sync::Arc;

use http::Response;

use weir_config::traffic;
use weir_http::body::Body;

use super::{Exchange, ResponseFilter};

/// The rules of one layer's filters config.
pub(super) struct ResponseHeaders(pub Arc<traffic::Filters>);

impl ResponseFilter for ResponseHeaders {
    fn response(&self, ex: &Exchange<'_>, resp: &mut Response<Body>) {
        super::filter::apply(
            &self.0.response_headers,
            resp.headers_mut(),
            Some(ex.req),
            &[],
        );
    }
}
