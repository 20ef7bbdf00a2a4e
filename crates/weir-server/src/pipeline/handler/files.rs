//! The static-files handler (`root`): files under a root, through
//! `try_files` when the site or route has it. Negotiates its own coding
//! (precompressed sidecars), so the compression filter leaves it alone.

use std::sync::Arc;

use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;
use weir_static::StaticFiles;

use super::{At, Handle, Owns, Req};
use crate::pipeline::SiteError;

pub(in crate::pipeline) struct Files(Arc<StaticFiles>);

impl Files {
    pub fn build(opts: &weir_config::files::Options, at: &At<'_>) -> Result<Self, SiteError> {
        Ok(Files(at.files(opts)?))
    }
}

impl Handle for Files {
    async fn serve(&self, req: Req<'_>, _body: Body) -> Response<Body> {
        let path = req.path();
        let try_files = &self.0.options().try_files;
        if try_files.is_empty() {
            self.0.serve(req.parts, path).await
        } else {
            // Boxed: it holds a file lookup and an answer at once.
            Box::pin(self::try_files(&self.0, try_files, req.parts, path)).await
        }
    }

    fn filter_compresses(&self) -> bool {
        false
    }

    fn owns(&self) -> Owns<'_> {
        Owns {
            files: Some(&self.0),
            ..Owns::default()
        }
    }
}

/// nginx's and Caddy's `try_files`: each candidate (`{path}` the
/// request's) served in turn while it is not found; the last answers
/// whatever it gives, `=404` a status.
async fn try_files(
    files: &StaticFiles,
    candidates: &[String],
    parts: &http::request::Parts,
    path: &str,
) -> Response<Body> {
    let mut last = error(StatusCode::NOT_FOUND);
    for (i, c) in candidates.iter().enumerate() {
        if let Some(code) = c.strip_prefix('=') {
            return error(
                code.parse()
                    .ok()
                    .and_then(|n| StatusCode::from_u16(n).ok())
                    .unwrap_or(StatusCode::NOT_FOUND),
            );
        }
        let candidate = c.replace("{path}", path);
        last = files.serve(parts, &candidate).await;
        if last.status() != StatusCode::NOT_FOUND || i == candidates.len() - 1 {
            break;
        }
    }
    last
}
