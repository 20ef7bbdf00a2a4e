//! The cache handler: a proxy with `cache` answers from the shared store,
//! or through the proxy (its answers compressed before they are stored
//! when `compress` applies, so the cache keeps the variant it serves).

use std::sync::Arc;

use http::Response;

use weir_config::files::CompressOptions;
use weir_http::body::Body;

use super::{At, Handle, Owns, Req};

pub(in crate::pipeline) struct Cached {
    proxy: Arc<weir_proxy::Proxy>,
    cache: weir_cache::Cache,
    compress: Option<Arc<CompressOptions>>,
}

impl Cached {
    /// The proxy for `cfg` behind the cache `at` puts in front of it.
    pub fn build(cfg: &Arc<weir_config::proxy::ProxyConfig>, at: &At<'_>) -> Self {
        let proxy = at.proxy(cfg);
        let compress = at.compress.cloned();
        let origin: Arc<dyn weir_cache::Origin> = match &compress {
            Some(opts) => Arc::new(crate::pipeline::compress::Compressing {
                proxy: proxy.clone(),
                opts: opts.clone(),
            }),
            None => proxy.clone(),
        };
        // Registered only where a cache policy is (`handlers!`).
        let policy = at.cache.cloned().unwrap_or_default();
        let cache = weir_cache::Cache::new(at.b.cache.clone(), policy, origin);
        Cached {
            proxy,
            cache,
            compress,
        }
    }
}

impl Handle for Cached {
    async fn serve(&self, req: Req<'_>, body: Body) -> Response<Body> {
        if let Some(opts) = &self.compress {
            crate::pipeline::compress::narrow_accept_encoding(opts, &mut req.parts.headers);
        }
        // A traced request's cache span: the lookup, and on a miss the
        // fetch, whose attempts hang under it.
        let span = crate::pipeline::trace::child_of(req.parts, "cache");
        // Boxed, as the proxy's.
        let resp = Box::pin(self.cache.serve(req.parts, body, req.conn, req.path)).await;
        if let Some(mut s) = span {
            let status = resp
                .headers()
                .get("cache-status")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            s.0.attr("weir.cache.hit", status.contains("; hit"));
            s.0.attr("weir.cache.status", status);
            s.0.attr(
                "http.response.status_code",
                i64::from(resp.status().as_u16()),
            );
            crate::pipeline::trace::end_child(req.parts, s);
        }
        resp
    }

    fn tunnels(&self) -> bool {
        true
    }

    /// Compressed before it stored them.
    fn filter_compresses(&self) -> bool {
        false
    }

    fn owns(&self) -> Owns<'_> {
        Owns {
            proxy: Some(&self.proxy),
            cache: Some(&self.cache),
            ..Owns::default()
        }
    }
}
