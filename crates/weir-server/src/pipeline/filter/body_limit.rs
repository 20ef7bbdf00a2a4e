//! `max_body`: a request that declares a body longer than the layer's
//! limit is answered 413 before the handler (a chunked body is counted as
//! it streams, by the handler phase's `request_body`).

use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;

use super::{Checking, Layer, RequestFilter};

pub(in crate::pipeline) struct BodyLimit(u64);

impl BodyLimit {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        layer.cfg.max_body.map(BodyLimit)
    }
}

impl RequestFilter for BodyLimit {
    fn check(&self, req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        match crate::pipeline::content_length(&req.parts.headers) {
            Some(n) if n > self.0 => Err(error(StatusCode::PAYLOAD_TOO_LARGE)),
            _ => Ok(0),
        }
    }
}
