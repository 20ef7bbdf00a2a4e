//! The response-filter phase: what every response of a site gets on its way
//! out, whichever handler made it: a custom error page for 4xx/5xx, the
//! `Server` field, the site's extra headers, and `Alt-Svc` where HTTP/3 is
//! offered. Changes heads and error bodies only; never streams a body.

use http::Response;
use http::header::{self, HeaderValue};

use weir_config::SiteConfig;
use weir_http::body::Body;

static SERVER: HeaderValue = HeaderValue::from_static("weir");

/// What every response from a site gets: the Server header, the site's
/// extra headers, and its custom error page when it has one.
pub(super) fn finish(
    site: &SiteConfig,
    alt_svc: Option<&HeaderValue>,
    resp: &mut Response<Body>,
    head: bool,
) {
    let status = resp.status().as_u16();
    if status >= 400
        && let Some(page) = site.error_pages.get(&status)
    {
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(page.len()));
        h.remove(header::CONTENT_ENCODING);
        *resp.body_mut() = if head {
            Body::empty()
        } else {
            Body::full(page.clone())
        };
    }
    let h = resp.headers_mut();
    h.insert(header::SERVER, SERVER.clone());
    for (k, v) in &site.headers {
        h.insert(k.clone(), v.clone());
    }
    if let Some(v) = alt_svc {
        h.insert(header::ALT_SVC, v.clone());
    }
}
