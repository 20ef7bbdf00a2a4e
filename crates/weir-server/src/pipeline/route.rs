//! The route phase: which site of the listener answers (by Host: exact name,
//! then wildcard, then catch-all, then the listener's default), then which
//! of its routes (by path, with the route's rewrite). Chooses only; never
//! answers.

use std::borrow::Cow;
use std::sync::Arc;

use super::handler::{Handler, Target};
use super::request_head::request_host;
use super::{Listener, Site};

/// The site that answers a request on `l`.
pub(super) fn site<'l>(l: &'l Listener, parts: &http::request::Parts) -> &'l Arc<Site> {
    // One site: no need to read the Host field at all.
    if l.sites.len() == 1 {
        &l.default
    } else {
        pick(l, request_host(parts))
    }
}

/// The route of `handler` a request takes.
pub(super) fn target<'h>(handler: &'h Handler, parts: &http::request::Parts) -> Target<'h> {
    let Handler::Routes { routes, fallback } = handler else {
        return Target::Handler(handler);
    };
    let path = parts.uri.path();
    match routes.iter().find(|r| r.cfg.pattern.matches(path)) {
        Some(r) => {
            let rewritten = match r.cfg.rewrite.apply(&r.cfg.pattern, path) {
                Cow::Owned(p) => Some(p),
                Cow::Borrowed(_) => None,
            };
            Target::Route(r, rewritten)
        }
        None => match fallback {
            Some(h) => Target::Handler(h),
            None => Target::NotFound,
        },
    }
}

/// The site for a host: exact name, then wildcard, then catch-all, then the default.
fn pick<'l>(l: &'l Listener, host: &str) -> &'l Arc<Site> {
    use weir_config::HostPattern as H;
    let rank = |s: &Arc<Site>| match s.cfg.host {
        H::Exact(_) => 0,
        H::Wildcard(_) => 1,
        H::Any => 2,
    };
    for r in 0..3 {
        if let Some(s) = l
            .sites
            .iter()
            .find(|s| rank(s) == r && s.cfg.host.matches(host))
        {
            return s;
        }
    }
    &l.default
}
