//! The `php`/`fastcgi` handler: the script the path names (or the front
//! controller) through FastCGI, another file of the root as a static file.

use std::sync::Arc;

use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;
use weir_http::trace::{Current, Kind};
use weir_static::StaticFiles;

use super::{At, Handle, Owns, Req};
use crate::pipeline::SiteError;

pub(in crate::pipeline) struct FastCgi {
    app: Arc<weir_fastcgi::FastCgi>,
    files: Arc<StaticFiles>,
}

impl FastCgi {
    /// The application the previous config ran with the same settings in
    /// this site (its idle connections with it), or a new one.
    pub fn build(
        cfg: &Arc<weir_config::fastcgi::FastCgiConfig>,
        at: &At<'_>,
    ) -> Result<Self, SiteError> {
        let files = at.files(&cfg.files)?;
        let same = at.b.find_previous(Some(at.site), |h| {
            h.owns().fastcgi.filter(|a| a.cfg == *cfg).cloned()
        });
        let app = same.unwrap_or_else(|| {
            Arc::new(weir_fastcgi::FastCgi::new(
                cfg.clone(),
                at.proxy(&cfg.upstream),
                at.b.workers,
            ))
        });
        Ok(FastCgi { app, files })
    }
}

impl Handle for FastCgi {
    async fn serve(&self, req: Req<'_>, body: Body) -> Response<Body> {
        // Boxed, as the proxy's.
        Box::pin(fastcgi(&self.app, &self.files, req, body)).await
    }

    fn owns(&self) -> Owns<'_> {
        Owns {
            proxy: Some(self.app.proxy()),
            fastcgi: Some(&self.app),
            ..Owns::default()
        }
    }
}

async fn fastcgi(
    app: &Arc<weir_fastcgi::FastCgi>,
    files: &StaticFiles,
    req: Req<'_>,
    body: Body,
) -> Response<Body> {
    use weir_fastcgi::Resolved;
    let raw = req.path();
    match &*app.resolve(req.conn.worker, raw).await {
        Resolved::Script {
            script_name,
            path_info,
            filename,
        } => {
            let script = weir_fastcgi::params::Script {
                script_name,
                path_info,
                filename,
                root: &app.cfg.root,
            };
            let span = req.parts.extensions.get::<Current>().map(|c| {
                let mut s = c.child("fastcgi", Kind::Client);
                s.attr("weir.fastcgi.script", script_name);
                s
            });
            let resp = app
                .run(&script, req.parts, body, req.conn, req.client)
                .await;
            if let Some(mut s) = span {
                let status = resp.status().as_u16();
                s.error = status >= 500;
                s.attr("http.response.status_code", i64::from(status));
                s.end();
            }
            resp
        }
        Resolved::Static => {
            let raw = raw.to_string();
            files.serve(req.parts, &raw).await
        }
        // The static files' rule, so a directory gets the same answer
        // whether a script or a file serves it.
        Resolved::AddSlash => weir_static::redirect_to_slash(req.parts),
        Resolved::NotFound => error(StatusCode::NOT_FOUND),
        Resolved::BadPath => error(StatusCode::BAD_REQUEST),
    }
}
