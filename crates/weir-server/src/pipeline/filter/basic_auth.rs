//! `basic_auth`: a request without a known user's credentials is answered
//! 401 with the realm's challenge. A credential not seen before is hashed
//! on the blocking pool, once (`weir_traffic::password::Users`).

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_http::body::Body;
use weir_http::response::error;
use weir_traffic::password::{Check, Users};

use super::{Checking, Layer, RequestFilter};
use crate::access_log::AuthStatus;

pub(in crate::pipeline) struct BasicAuth(Arc<Users>);

impl BasicAuth {
    pub fn build(layer: &Layer<'_>) -> Option<Self> {
        let b = layer.cfg.basic_auth.as_ref()?;
        Some(BasicAuth(Arc::new(Users::new(b.clone()))))
    }
}

impl RequestFilter for BasicAuth {
    fn check(&self, _req: &mut Checking<'_>) -> Result<u64, Response<Body>> {
        Ok(0)
    }

    fn waits(&self) -> bool {
        true
    }

    async fn wait(&self, req: &mut Checking<'_>) -> Result<(), Response<Body>> {
        let users = &self.0;
        let ok = match users.check(&req.parts.headers) {
            Check::Known => true,
            Check::Refused => false,
            Check::Verify {
                digest,
                password,
                hash,
            } => {
                let (users, hash) = (users.clone(), hash.to_string());
                // Seconds of CPU at high costs: off the async threads.
                tokio::task::spawn_blocking(move || users.verify(digest, &password, &hash))
                    .await
                    .unwrap_or(false)
            }
        };
        if ok {
            req.outcome.auth = AuthStatus::Passed;
            return Ok(());
        }
        req.outcome.auth = AuthStatus::Refused;
        let mut r = error(StatusCode::UNAUTHORIZED);
        let realm = users.cfg.realm.replace('"', "'");
        if let Ok(v) = HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
        {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        Err(r)
    }
}
