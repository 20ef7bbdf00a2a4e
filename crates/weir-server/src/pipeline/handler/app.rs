//! The `app` handler: an application weir runs, proxied to once an
//! instance is ready (503 saying why when none is).

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_http::body::Body;

use super::{At, Handle, Owns, Req};
use crate::pipeline::SiteError;

pub(in crate::pipeline) struct App(Arc<weir_apps::App>);

impl App {
    /// The app the previous config ran in this site if it can become this
    /// one (rolled to the new settings once the reload is in force,
    /// `Server::reload`), or a new one, started.
    pub fn build(cfg: &Arc<weir_config::app::AppConfig>, at: &At<'_>) -> Result<Self, SiteError> {
        let same = at.b.find_previous(Some(at.site), |h| {
            h.owns().app.filter(|a| a.can_become(cfg)).cloned()
        });
        if let Some(a) = same {
            return Ok(App(a));
        }
        weir_apps::App::start(
            cfg.clone(),
            &weir_config::proxy::ProxyConfig::defaults(),
            at.b.workers,
        )
        .map(App)
        .map_err(|source| SiteError::App {
            site: at.site.to_string(),
            source,
        })
    }
}

impl Handle for App {
    async fn serve(&self, req: Req<'_>, body: Body) -> Response<Body> {
        let app = &self.0;
        if let Err(why) = Box::pin(app.ready_for_request()).await {
            // Say why: starting, a full queue, or the last start's failure.
            let mut r = Response::new(Body::full(format!(
                "503 Service Unavailable: app \"{}\" has no ready instance ({why})\n",
                app.name
            )));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        // Boxed, as the proxy's.
        Box::pin(app.proxy.serve(req.parts, body, req.conn, req.path)).await
    }

    fn owns(&self) -> Owns<'_> {
        Owns {
            proxy: Some(&self.0.proxy),
            app: Some(&self.0),
            ..Owns::default()
        }
    }
}
