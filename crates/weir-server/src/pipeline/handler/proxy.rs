//! The reverse-proxy handler (`proxy`): every request to the site's or
//! route's upstreams through `weir_proxy::Proxy`, tunnels included.

use std::sync::Arc;

use http::Response;

use weir_http::body::Body;

use super::{Handle, Owns, Req};

pub(in crate::pipeline) struct Proxied(pub Arc<weir_proxy::Proxy>);

impl Handle for Proxied {
    async fn serve(&self, req: Req<'_>, body: Body) -> Response<Body> {
        // Boxed: the proxy's future is large, and hyper moves the request
        // future into place on every request; static requests must not pay
        // for copying it.
        Box::pin(self.0.serve(req.parts, body, req.conn, req.path)).await
    }

    fn tunnels(&self) -> bool {
        true
    }

    fn owns(&self) -> Owns<'_> {
        Owns {
            proxy: Some(&self.0),
            ..Owns::default()
        }
    }
}
