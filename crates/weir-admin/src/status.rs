//! The live status page (`GET /status`, plain HTML, CSS and a little
//! JavaScript, no build step) and the numbers it polls (`GET
//! /status.json`, also for machines). The page computes rates from two
//! polls, and keeps the last five minutes of them for its graphs; the
//! JSON holds counts since start-up, the same ones `/metrics` exports
//! (the latency histogram's cumulative buckets included, for the p99 of
//! each second).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use weir_http::metrics::{BUCKETS, Histogram, PROTOS};
use weir_server::Server;

pub const PAGE: &str = include_str!("status.html");

/// Certificates that expire within this many seconds are flagged.
const SOON: i64 = 14 * 24 * 3600;

fn ms(h: &Histogram, q: f64) -> Option<f64> {
    h.quantile(q).map(|s| (s * 1e6).round() / 1e3)
}

pub fn json(server: &Arc<Server>) -> serde_json::Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let started = server
        .started()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let counts = server.registry.all();
    let mut all = Histogram::default();
    let (mut total, mut errors) = (0u64, 0u64);
    let mut sites: Vec<serde_json::Value> = Vec::new();
    for (site, route, c) in &counts {
        let h = c.duration();
        total += c.total();
        errors += c.errors();
        if all.buckets.is_empty() {
            all.buckets = vec![0; h.buckets.len()];
        }
        for (a, b) in all.buckets.iter_mut().zip(&h.buckets) {
            *a += b;
        }
        all.count += h.count;
        all.sum_seconds += h.sum_seconds;
        sites.push(json!({
            "site": site,
            "route": route,
            "requests": c.total(),
            "errors": c.errors(),
            "p50_ms": ms(&h, 0.5),
            "p99_ms": ms(&h, 0.99),
        }));
    }
    let upstreams: Vec<_> = crate::upstreams(server)
        .iter()
        .map(|u| {
            json!({
                "site": u.site,
                "route": u.route,
                "name": u.up.cfg.name,
                "health": if u.healthy() { "up" } else { "down" },
                "state": u.up.admin_state(),
                "in_flight": u.up.in_flight(),
                "requests": u.up.counts.sum(weir_proxy::counter::REQUESTS),
            })
        })
        .collect();
    let certificates: Vec<_> = server
        .certificates()
        .certificates()
        .into_iter()
        .map(|c| {
            let left = c.not_after.map(|t| t as i64 - now as i64);
            json!({
                "names": c.names,
                "source": c.source,
                "issuer": c.issuer,
                "not_after": c.not_after,
                "expires_in_seconds": left,
                "expires_soon": left.is_some_and(|l| l < SOON),
            })
        })
        .collect();
    let connections: serde_json::Map<String, serde_json::Value> = PROTOS
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), json!(server.conns.open(i))))
        .collect();
    let (reloads_ok, reloads_failed) = server.reloads();
    // Cumulative, one per bound, then every request (`+Inf`).
    let mut counts_le = all.buckets.clone();
    counts_le.resize(BUCKETS.len(), all.count);
    counts_le.push(all.count);
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "now": now,
        "started": started,
        "requests": total,
        "errors": errors,
        "p50_ms": ms(&all, 0.5),
        "p99_ms": ms(&all, 0.99),
        // The histogram behind them, so the page can take the p99 of each
        // second from two polls.
        "duration_buckets_ms": BUCKETS.iter().map(|b| b * 1e3).collect::<Vec<_>>(),
        "duration_counts": counts_le,
        "connections": connections,
        "sites": sites,
        "upstreams": upstreams,
        "cache": server.cache().summary(),
        "certificates": certificates,
        "reloads": { "ok": reloads_ok, "failed": reloads_failed },
        "last_reload": server.last_reload(),
        "cluster": server.cluster().map(|c| c.status()),
    })
}
