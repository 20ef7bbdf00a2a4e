//! The welcome page a config without sites serves: `/` only, GET and HEAD.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::{error, method_not_allowed};

use super::{Handle, Req};

pub(in crate::pipeline) struct Welcome;

impl Handle for Welcome {
    async fn serve(&self, req: Req<'_>, _body: Body) -> Response<Body> {
        let parts = &*req.parts;
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return method_not_allowed();
        }
        if parts.uri.path() != "/" {
            return error(StatusCode::NOT_FOUND);
        }
        let body = if parts.method == Method::HEAD {
            Body::empty()
        } else {
            Body::full(Bytes::from_static(crate::welcome::PAGE.as_bytes()))
        };
        let mut r = Response::new(body);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        r.headers_mut().insert(
            header::CONTENT_LENGTH,
            HeaderValue::from(crate::welcome::PAGE.len()),
        );
        r
    }
}
