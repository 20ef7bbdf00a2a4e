//! The route phase: which site of the listener answers (by Host: exact name,
//! then wildcard, then catch-all, then the listener's default), then which
//! of its routes (by path and conditions, with the route's rewrite).
//! Chooses only; never answers.

use std::borrow::Cow;
use std::sync::Arc;

use weir_config::routes::{PathPattern, PathRewrite};
use weir_config::traffic::RequestView;

use super::handler::{SiteHandler, Target};
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

/// The route of `handler` a request takes: the first whose path and
/// conditions match, with its rewrite applied and its regex groups.
pub(super) fn target<'h>(handler: &'h SiteHandler, view: &RequestView<'_>) -> Target<'h> {
    let SiteHandler::Routes { routes, fallback } = handler else {
        return handler.own().map_or(Target::NotFound, Target::Handler);
    };
    let path = view.parts.uri.path();
    let chosen = routes.iter().find(|r| {
        r.cfg.pattern.matches(path) && (r.cfg.matcher.is_empty() || r.cfg.matcher.matches(view))
    });
    match chosen {
        Some(r) => {
            let captures: Vec<String> = match &r.cfg.pattern {
                PathPattern::Regex(re) => re
                    .re
                    .captures(path)
                    .map(|c| {
                        c.iter()
                            .map(|m| m.map_or(String::new(), |m| m.as_str().to_string()))
                            .collect()
                    })
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            let rewritten = match &r.cfg.rewrite {
                PathRewrite::Template(t) => {
                    let groups: smallvec::SmallVec<[&str; 4]> =
                        captures.iter().map(String::as_str).collect();
                    let mut out = String::new();
                    t.render(view, &groups, &mut out);
                    Some(out)
                }
                rw => match rw.apply(&r.cfg.pattern, path) {
                    Cow::Owned(p) => Some(p),
                    Cow::Borrowed(_) => None,
                },
            };
            Target::Route {
                route: r,
                path: rewritten,
                captures,
            }
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
