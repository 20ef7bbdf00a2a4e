//! The log phase: one access-log line per request for a site that keeps a
//! log, handed to the log's writer thread (the request counts are added
//! just before, in `Listener::handle`). Never writes to a file on the
//! request path.

use std::time::Duration;

use http::Response;

use crate::access_log::{AccessLog, Entry, Outcome};
use weir_config::routes::PathPattern;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;

use super::Site;
use super::request_head::request_host;

/// What the log phase knows of a request besides its head and answer.
pub(super) struct Facts<'a> {
    pub client: std::net::IpAddr,
    pub route: Option<&'a PathPattern>,
    /// From the request head to the response head.
    pub took: Duration,
    /// The bodies' lengths as their `Content-Length` fields declared them.
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    /// What the limits and authentication did.
    pub outcome: Outcome,
    /// The name of the limit that decided `outcome.limit`.
    pub limit_name: Option<&'a str>,
}

/// The name of the limit `o` says decided (of the site's limits or the
/// route's, `route`).
pub(super) fn limit_name<'a>(
    site: &'a Site,
    route: Option<&'a super::filter::Filters>,
    o: &Outcome,
) -> Option<&'a str> {
    let (layer, i) = o.limit_at?;
    let filters = match usize::from(layer) {
        super::filter::SITE => site.filters.as_deref(),
        _ => route,
    }?;
    filters
        .limiters
        .get(usize::from(i))
        .map(|l| l.cfg.name.as_str())
}

/// Logs the request in `parts` and its response.
pub(super) fn record(
    log: &AccessLog,
    site: &Site,
    conn: &ConnInfo,
    parts: &http::request::Parts,
    resp: &Response<Body>,
    f: Facts<'_>,
) {
    log.log(&Entry {
        conn,
        client: f.client,
        parts,
        resp,
        host: request_host(parts),
        site: &site.cfg.name,
        route: f.route,
        took: f.took,
        bytes_in: f.bytes_in,
        bytes_out: f.bytes_out,
        request_id: super::request_id::of(site, &parts.headers),
        outcome: f.outcome,
        limit_name: f.limit_name,
    });
}
