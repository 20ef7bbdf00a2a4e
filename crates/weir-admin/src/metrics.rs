//! `GET /metrics`: the server's counters in Prometheus' text format,
//! written by prometheus-client from a collector that sums the per-worker
//! counts at scrape time. Labels are the config's names (site, route as
//! written, upstream), never a request's path or Host, so the number of
//! series is bounded by the config.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use weir_http::metrics::{BUCKETS, CLASSES, METHODS, PROTOS};
use weir_proxy::counter;
use weir_server::Server;

pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

struct Weir(Arc<Server>);

impl std::fmt::Debug for Weir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Weir")
    }
}

/// The text of one scrape.
pub fn render(server: &Arc<Server>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Weir(server.clone())));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        tracing::error!("metrics: {e}");
    }
    out
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One metric family: its descriptor, then each series.
fn family<'a, F>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    ty: MetricType,
    mut each: F,
) -> Result<(), std::fmt::Error>
where
    F: FnMut(&mut MetricEncoder) -> Result<(), std::fmt::Error> + 'a,
{
    let mut m = enc.encode_descriptor(name, help, None, ty)?;
    each(&mut m)
}

fn counter(m: &mut MetricEncoder, labels: &Labels<'_>, v: u64) -> Result<(), std::fmt::Error> {
    m.encode_family(labels)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    m: &mut MetricEncoder,
    labels: &Labels<'_>,
    v: V,
) -> Result<(), std::fmt::Error> {
    m.encode_family(labels)?.encode_gauge(&v)
}

impl Collector for Weir {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let counts = s.registry.all();
        family(
            &mut enc,
            "weir_requests",
            "Requests answered, by site, route, method and status class.",
            MetricType::Counter,
            |m| {
                for (site, route, c) in &counts {
                    for (mi, method) in METHODS.iter().enumerate() {
                        for (ci, class) in CLASSES.iter().enumerate() {
                            let n = c.requests(mi, ci);
                            if n > 0 {
                                let l = vec![
                                    ("site", site.as_str()),
                                    ("route", route.as_str()),
                                    ("method", *method),
                                    ("status", *class),
                                ];
                                counter(m, &l, n)?;
                            }
                        }
                    }
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_request_duration_seconds",
            "Time from a request's head to its response's head, by site and route.",
            MetricType::Histogram,
            |m| {
                for (site, route, c) in &counts {
                    let h = c.duration();
                    // The encoder adds the buckets up itself: give it each
                    // bucket's own count.
                    let mut below = 0;
                    let mut buckets: Vec<(f64, u64)> = BUCKETS
                        .iter()
                        .zip(&h.buckets)
                        .map(|(&le, &cum)| {
                            let own = cum - below;
                            below = cum;
                            (le, own)
                        })
                        .collect();
                    buckets.push((f64::INFINITY, h.count - below));
                    let l = vec![("site", site.as_str()), ("route", route.as_str())];
                    m.encode_family(&l)?.encode_histogram::<NoLabelSet>(
                        h.sum_seconds,
                        h.count,
                        &buckets,
                        None,
                    )?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_request_body_bytes",
            "Bytes of request bodies with a declared length, by site and route.",
            MetricType::Counter,
            |m| {
                for (site, route, c) in &counts {
                    counter(
                        m,
                        &vec![("site", site.as_str()), ("route", route.as_str())],
                        c.bytes_in(),
                    )?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_response_body_bytes",
            "Bytes of response bodies with a declared length, by site and route.",
            MetricType::Counter,
            |m| {
                for (site, route, c) in &counts {
                    counter(
                        m,
                        &vec![("site", site.as_str()), ("route", route.as_str())],
                        c.bytes_out(),
                    )?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_connections_open",
            "Client connections open now, by protocol.",
            MetricType::Gauge,
            |m| {
                for (i, p) in PROTOS.iter().enumerate() {
                    gauge(m, &vec![("protocol", *p)], s.conns.open(i))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_connections",
            "Client connections accepted, by protocol.",
            MetricType::Counter,
            |m| {
                for (i, p) in PROTOS.iter().enumerate() {
                    counter(m, &vec![("protocol", *p)], s.conns.total(i))?;
                }
                Ok(())
            },
        )?;
        let (ok, failed) = s.conns.handshakes();
        family(
            &mut enc,
            "weir_tls_handshakes",
            "TLS handshakes, by result.",
            MetricType::Counter,
            |m| {
                counter(m, &vec![("result", "ok")], ok)?;
                counter(m, &vec![("result", "failed")], failed)
            },
        )?;

        let ups = crate::upstreams(s);
        family(
            &mut enc,
            "weir_upstream_requests",
            "Attempts sent to an upstream (retries included).",
            MetricType::Counter,
            |m| {
                for u in &ups {
                    counter(m, &u.labels(), u.up.counts.sum(counter::REQUESTS))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_upstream_retries",
            "Attempts that were retries of a request another attempt failed.",
            MetricType::Counter,
            |m| {
                for u in &ups {
                    counter(m, &u.labels(), u.up.counts.sum(counter::RETRIES))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_upstream_errors",
            "Failed attempts, by kind.",
            MetricType::Counter,
            |m| {
                for u in &ups {
                    for (i, kind) in counter::ERRORS.iter().enumerate() {
                        let mut l = u.labels();
                        l.push(("kind", kind));
                        counter(m, &l, u.up.counts.sum(counter::FIRST_ERROR + i))?;
                    }
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_upstream_up",
            "1 when the upstream is healthy and in rotation, 0 otherwise.",
            MetricType::Gauge,
            |m| {
                for u in &ups {
                    gauge(m, &u.labels(), i64::from(u.in_rotation()))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_upstream_in_flight",
            "Requests in flight to the upstream.",
            MetricType::Gauge,
            |m| {
                for u in &ups {
                    gauge(m, &u.labels(), u.up.in_flight())?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_upstream_idle_connections",
            "Idle HTTP/1.1 connections pooled for the upstream, over all workers.",
            MetricType::Gauge,
            |m| {
                for u in &ups {
                    gauge(m, &u.labels(), u.proxy.idle_connections(u.idx))?;
                }
                Ok(())
            },
        )?;

        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let certs = s.certificates().certificates();
        family(
            &mut enc,
            "weir_certificate_expiry_seconds",
            "Seconds until the certificate expires (negative: expired).",
            MetricType::Gauge,
            |m| {
                for c in &certs {
                    if let Some(t) = c.not_after {
                        let names = c.names.join(",");
                        let l = vec![("names", names.as_str()), ("source", c.source)];
                        gauge(m, &l, t as i64 - now as i64)?;
                    }
                }
                Ok(())
            },
        )?;
        let cache = s.cache().summary();
        family(
            &mut enc,
            "weir_cache_requests",
            "Requests the cache answered, by result: hit, stale (served while refreshed), stale_error (served for a failing upstream), coalesced (waited on another request's fetch), miss, revalidated (a 304 renewed it), pass.",
            MetricType::Counter,
            |m| {
                for (r, n) in [
                    ("hit", cache.hits),
                    ("stale", cache.stale),
                    ("stale_error", cache.stale_on_error),
                    ("coalesced", cache.coalesced),
                    ("miss", cache.misses),
                    ("revalidated", cache.revalidated),
                    ("pass", cache.passes),
                ] {
                    counter(m, &vec![("result", r)], n)?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_cache_served_bytes",
            "Body bytes served from the cache.",
            MetricType::Counter,
            |m| counter(m, &vec![], cache.bytes_served),
        )?;
        family(
            &mut enc,
            "weir_cache_objects",
            "URLs held in the cache.",
            MetricType::Gauge,
            |m| gauge(m, &vec![], cache.urls as i64),
        )?;
        family(
            &mut enc,
            "weir_cache_bytes",
            "Bytes held in the cache's memory (bound: [cache] memory).",
            MetricType::Gauge,
            |m| gauge(m, &vec![], cache.bytes as i64),
        )?;
        family(
            &mut enc,
            "weir_cache_evictions",
            "Responses evicted to stay within [cache] memory.",
            MetricType::Counter,
            |m| counter(m, &vec![], cache.evictions),
        )?;
        family(
            &mut enc,
            "weir_cache_purged",
            "Responses removed by purges, bans and invalidations.",
            MetricType::Counter,
            |m| counter(m, &vec![], cache.purged),
        )?;
        let sites = s.sites();
        let limits: Vec<(String, String, &weir_traffic::limit::Limiter)> = sites
            .iter()
            .flat_map(|site| {
                site.limiters()
                    .into_iter()
                    .map(|(route, l)| (site.cfg.name.clone(), route, l))
            })
            .collect();
        type Read = fn(&weir_traffic::limit::Limiter) -> u64;
        let limit_families: [(&str, &str, MetricType, Read); 4] = [
            (
                "weir_limit_refused",
                "Requests a limit refused (in dry-run: would have refused), by site, route and limit.",
                MetricType::Counter,
                |l| l.refused(),
            ),
            (
                "weir_limit_delayed",
                "Requests a rate limit delayed to keep its rate.",
                MetricType::Counter,
                |l| l.delayed(),
            ),
            (
                "weir_limit_keys",
                "Keys a limit tracks now (bound: its `size`).",
                MetricType::Gauge,
                |l| l.keys() as u64,
            ),
            (
                "weir_limit_evicted",
                "Keys a full limit forgot, the least recently seen first.",
                MetricType::Counter,
                |l| l.evicted(),
            ),
        ];
        for (name, help, ty, read) in limit_families {
            let gauge_family = matches!(ty, MetricType::Gauge);
            family(&mut enc, name, help, ty, |m| {
                for (site, route, l) in &limits {
                    let labels = vec![
                        ("site", site.as_str()),
                        ("route", route.as_str()),
                        ("limit", l.cfg.name.as_str()),
                    ];
                    if gauge_family {
                        gauge(m, &labels, read(l) as i64)?;
                    } else {
                        counter(m, &labels, read(l))?;
                    }
                }
                Ok(())
            })?;
        }
        use weir_server::layer4::counter as sc;
        let relays: Vec<(&str, &weir_server::layer4::Relay)> = sites
            .iter()
            .filter_map(|site| site.relay.as_deref().map(|r| (site.cfg.name.as_str(), r)))
            .collect();
        family(
            &mut enc,
            "weir_stream_connections",
            "Connections relayed by a [tcp] listener or a TLS passthrough site.",
            MetricType::Counter,
            |m| {
                for (site, r) in &relays {
                    counter(m, &vec![("site", *site)], r.counts.sum(sc::CONNECTIONS))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_stream_refused",
            "Stream connections closed unrelayed: max_conns_per_client, or no upstream reachable.",
            MetricType::Counter,
            |m| {
                for (site, r) in &relays {
                    counter(m, &vec![("site", *site)], r.counts.sum(sc::REFUSED))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_stream_bytes",
            "Bytes relayed by finished streams: up (client to upstream) and down.",
            MetricType::Counter,
            |m| {
                for (site, r) in &relays {
                    counter(
                        m,
                        &vec![("site", *site), ("direction", "up")],
                        r.counts.sum(sc::BYTES_UP),
                    )?;
                    counter(
                        m,
                        &vec![("site", *site), ("direction", "down")],
                        r.counts.sum(sc::BYTES_DOWN),
                    )?;
                }
                Ok(())
            },
        )?;
        let apps: Vec<_> = sites.iter().filter_map(|site| site.app()).collect();
        family(
            &mut enc,
            "weir_app_instances_ready",
            "Instances of an app in rotation (ready).",
            MetricType::Gauge,
            |m| {
                for a in &apps {
                    gauge(m, &vec![("app", a.name.as_str())], a.ready() as i64)?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_app_starts",
            "Instance processes an app started (first starts, restarts, rolling restarts, wake-ups).",
            MetricType::Counter,
            |m| {
                for a in &apps {
                    counter(m, &vec![("app", a.name.as_str())], a.starts())?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_app_restarts",
            "Instances restarted because they exited or failed their health checks.",
            MetricType::Counter,
            |m| {
                for a in &apps {
                    counter(m, &vec![("app", a.name.as_str())], a.restarts())?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_app_failing",
            "1 while an app has no ready instance and its last start failed.",
            MetricType::Gauge,
            |m| {
                for a in &apps {
                    let failing = matches!(a.phase(), weir_apps::Phase::Failing(_));
                    gauge(m, &vec![("app", a.name.as_str())], i64::from(failing))?;
                }
                Ok(())
            },
        )?;
        family(
            &mut enc,
            "weir_app_refused",
            "1 while the release the config asks for was refused (rolled back) and an older one runs.",
            MetricType::Gauge,
            |m| {
                for a in &apps {
                    let refused = a.status().refused.is_some();
                    gauge(m, &vec![("app", a.name.as_str())], i64::from(refused))?;
                }
                Ok(())
            },
        )?;
        if let Some(c) = s.cluster() {
            let st = c.status();
            family(
                &mut enc,
                "weir_cluster_up",
                "1 while Redis is reachable and state is shared; 0 while this instance runs on local state.",
                MetricType::Gauge,
                |m| gauge(m, &vec![], i64::from(st.connected)),
            )?;
            family(
                &mut enc,
                "weir_cluster_instances",
                "Instances of the cluster heard of in the last seconds, this one included.",
                MetricType::Gauge,
                |m| gauge(m, &vec![], (c.others().len() + 1) as i64),
            )?;
            family(
                &mut enc,
                "weir_cluster_reconnects",
                "Times the connection to Redis came back after it was lost.",
                MetricType::Counter,
                |m| counter(m, &vec![], st.reconnects),
            )?;
            family(
                &mut enc,
                "weir_cluster_purges",
                "Cache purges sent to the other instances, and received from them.",
                MetricType::Counter,
                |m| {
                    counter(m, &vec![("direction", "sent")], st.purges_sent)?;
                    counter(m, &vec![("direction", "received")], st.purges_received)
                },
            )?;
            family(
                &mut enc,
                "weir_cluster_purges_queued",
                "Cache purges waiting for Redis to return.",
                MetricType::Gauge,
                |m| gauge(m, &vec![], st.purges_queued as i64),
            )?;
        }
        let (reloaded, refused) = s.reloads();
        family(
            &mut enc,
            "weir_reloads",
            "Config reloads, by result.",
            MetricType::Counter,
            |m| {
                counter(m, &vec![("result", "ok")], reloaded)?;
                counter(m, &vec![("result", "failed")], refused)
            },
        )?;
        family(
            &mut enc,
            "weir_access_log_dropped",
            "Access log lines dropped: a journal or syslog socket did not take them (full, missing or refusing), or a stuck writer already had 8 MiB waiting from their worker.",
            MetricType::Counter,
            |m| counter(m, &vec![], weir_server::access_log::dropped()),
        )?;
        if s.config().traces.is_some() {
            use std::sync::atomic::Ordering::Relaxed;
            family(
                &mut enc,
                "weir_trace_spans_exported",
                "Trace spans the OTLP collector accepted.",
                MetricType::Counter,
                |m| counter(m, &vec![], weir_http::trace::EXPORTED.load(Relaxed)),
            )?;
            family(
                &mut enc,
                "weir_trace_spans_dropped",
                "Trace spans dropped: the export queue was full or the collector failed.",
                MetricType::Counter,
                |m| counter(m, &vec![], weir_http::trace::DROPPED.load(Relaxed)),
            )?;
        }
        let started = s
            .started()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        family(
            &mut enc,
            "weir_start_time_seconds",
            "When this process started, in seconds since the Unix epoch.",
            MetricType::Gauge,
            |m| gauge(m, &vec![], started as i64),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The encoder is the crate's: check the shape it gives our families.
    #[test]
    fn a_counter_family_is_written_with_total_and_labels() {
        use super::*;
        #[derive(Debug)]
        struct One;
        impl Collector for One {
            fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
                family(&mut enc, "weir_x", "X.", MetricType::Counter, |m| {
                    counter(m, &vec![("site", "a")], 3)
                })
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(One));
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &r).unwrap();
        assert!(out.contains("# TYPE weir_x_total counter"), "{out}");
        assert!(out.contains("weir_x_total{site=\"a\"} 3"), "{out}");
    }
}
