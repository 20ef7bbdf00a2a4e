//! The response-filter phase: what every response of a site gets on its way
//! out, whichever handler made it. First the site's base ([`finish`]): a
//! custom error page for 4xx/5xx, the `Server` field, the site's extra
//! headers, and `Alt-Svc` where HTTP/3 is offered. Then the filters
//! registered for the answer's route or site ([`ResponseFilters`]), in
//! order: compression, what limits count of the answer and their
//! `RateLimit` fields, header rules.
//!
//! A filter is one type implementing [`ResponseFilter`] in a module of its
//! own, and one line in [`chain`], the registration table (here, so the
//! filters' modules need only the trait, in `pipeline`): the lists are
//! built there once at config load, so a request pays one call per filter
//! its route or site has, and nothing for the filters it has not. Filters
//! change heads and error bodies, or wrap a body; none buffers one.

use std::sync::Arc;

use http::Response;
use http::header::{self, HeaderValue};

use weir_config::SiteConfig;
use weir_config::files::CompressOptions;
use weir_http::body::Body;

use super::filter::{self, Filters};
use super::{ResponseFilter, ResponseFilters};

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

/// The registration table: the response filters of an answer whose handler
/// is compressed by `compress` (`None`: it is not, or compresses by
/// itself), under the request filters of its route and of its site.
/// Compression runs first, so the layers' fields and rules see the coded
/// answer; then each layer, the route's before the site's, so the site has
/// the last word.
pub(super) fn chain(
    compress: Option<&Arc<CompressOptions>>,
    route: Option<&Arc<Filters>>,
    site: Option<&Arc<Filters>>,
) -> ResponseFilters {
    let mut list: Vec<Box<dyn ResponseFilter>> = Vec::new();
    if let Some(opts) = compress.filter(|o| o.enabled && !o.encodings.is_empty()) {
        list.push(Box::new(super::compress::Compress(opts.clone())));
    }
    for (layer, f) in [(filter::ROUTE, route), (filter::SITE, site)] {
        let Some(f) = f else { continue };
        if !f.limiters.is_empty() {
            list.push(Box::new(filter::LimitFields {
                limiters: f.limiters.clone(),
                layer,
            }));
        }
        if !f.cfg.response_headers.is_empty() {
            list.push(Box::new(super::response_headers::ResponseHeaders(
                f.cfg.clone(),
            )));
        }
    }
    ResponseFilters::new(list)
}
