//! Counters the request path writes and a scrape reads: each worker adds to
//! its own slot (a cache line of its own, so workers never contend), and a
//! reader sums the slots. Counts are exact: every add is an atomic add, on
//! a line only its worker writes (under the shared runtime two threads may
//! share a slot; the add stays exact, only slower).
//!
//! Owns the numbers only: never names a site (its owner does), never
//! formats for Prometheus (the admin API does), never allocates on add.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Method, StatusCode};

use crate::worker::{PerWorker, Worker};

/// `N` counters per worker.
pub struct Counts<const N: usize> {
    slots: PerWorker<[AtomicU64; N]>,
}

impl<const N: usize> Counts<N> {
    pub fn new(workers: usize) -> Self {
        Counts {
            slots: PerWorker::new(workers, || std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    #[inline]
    pub fn add(&self, w: Worker, i: usize, n: u64) {
        self.slots.get(w)[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i`, summed over the workers.
    pub fn sum(&self, i: usize) -> u64 {
        self.slots
            .iter()
            .map(|s| s[i].load(Ordering::Relaxed))
            .sum()
    }
}

/// The methods counted by name; any other is `OTHER`.
pub const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "OTHER",
];
/// Status classes: 1xx to 5xx.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Upper bounds of the duration histogram's buckets, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

const REQ: usize = 0;
const HIST: usize = REQ + METHODS.len() * CLASSES.len();
/// Past the last bucket (`+Inf` only).
const OVER: usize = HIST + BUCKETS.len();
const SUM_US: usize = OVER + 1;
const BYTES_IN: usize = SUM_US + 1;
const BYTES_OUT: usize = BYTES_IN + 1;
const REQUEST_COUNTERS: usize = BYTES_OUT + 1;

fn method_index(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::PATCH => 5,
        Method::OPTIONS => 6,
        Method::CONNECT => 7,
        Method::TRACE => 8,
        _ => 9,
    }
}

/// One site's or route's requests: by method and status class, their
/// duration, and the bytes of bodies whose length was known.
pub struct RequestCounts {
    c: Counts<REQUEST_COUNTERS>,
}

/// A histogram as a scrape reads it.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Cumulative counts, one per bucket of [`BUCKETS`].
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    /// The `q` quantile (0..1) in seconds, as Prometheus'
    /// `histogram_quantile` estimates it (linear within the bucket).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (i, &cum) in self.buckets.iter().enumerate() {
            if cum as f64 >= rank {
                let in_bucket = (cum - below) as f64;
                let frac = if in_bucket > 0.0 {
                    (rank - below as f64) / in_bucket
                } else {
                    0.0
                };
                return Some(lower + (BUCKETS[i] - lower) * frac);
            }
            below = cum;
            lower = BUCKETS[i];
        }
        // In the open bucket: the last bound is all that is known.
        Some(BUCKETS[BUCKETS.len() - 1])
    }
}

impl RequestCounts {
    pub fn new(workers: usize) -> Self {
        RequestCounts {
            c: Counts::new(workers),
        }
    }

    /// Counts one answered request.
    #[inline]
    pub fn record(
        &self,
        w: Worker,
        method: &Method,
        status: StatusCode,
        took: Duration,
        bytes_in: Option<u64>,
        bytes_out: Option<u64>,
    ) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.c
            .add(w, REQ + method_index(method) * CLASSES.len() + class, 1);
        let us = took.as_micros().min(u64::MAX as u128) as u64;
        let bucket = BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BUCKETS.len());
        self.c.add(w, HIST + bucket, 1);
        self.c.add(w, SUM_US, us);
        if let Some(n) = bytes_in {
            self.c.add(w, BYTES_IN, n);
        }
        if let Some(n) = bytes_out {
            self.c.add(w, BYTES_OUT, n);
        }
    }

    /// Requests of `METHODS[method]` answered with a status of `CLASSES[class]`.
    pub fn requests(&self, method: usize, class: usize) -> u64 {
        self.c.sum(REQ + method * CLASSES.len() + class)
    }

    pub fn total(&self) -> u64 {
        (0..METHODS.len() * CLASSES.len())
            .map(|i| self.c.sum(REQ + i))
            .sum()
    }

    /// Requests answered with a 5xx status.
    pub fn errors(&self) -> u64 {
        (0..METHODS.len()).map(|m| self.requests(m, 4)).sum()
    }

    pub fn duration(&self) -> Histogram {
        let mut cum = 0;
        let buckets = (0..BUCKETS.len())
            .map(|i| {
                cum += self.c.sum(HIST + i);
                cum
            })
            .collect();
        Histogram {
            buckets,
            count: cum + self.c.sum(OVER),
            sum_seconds: self.c.sum(SUM_US) as f64 / 1e6,
        }
    }

    pub fn bytes_in(&self) -> u64 {
        self.c.sum(BYTES_IN)
    }

    pub fn bytes_out(&self) -> u64 {
        self.c.sum(BYTES_OUT)
    }
}

/// Connection-level counts: opened and closed by protocol, TLS handshakes.
pub struct ConnCounts {
    c: Counts<8>,
}

/// What a connection speaks, for [`ConnCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Http1 = 0,
    Http2 = 1,
    Http3 = 2,
}

pub const PROTOS: [&str; 3] = ["http1", "http2", "http3"];
const OPENED: usize = 0;
const CLOSED: usize = 3;
const TLS_OK: usize = 6;
const TLS_FAILED: usize = 7;

impl ConnCounts {
    pub fn new(workers: usize) -> Self {
        ConnCounts {
            c: Counts::new(workers),
        }
    }

    pub fn opened(&self, w: Worker, p: Proto) {
        self.c.add(w, OPENED + p as usize, 1);
    }

    pub fn closed(&self, w: Worker, p: Proto) {
        self.c.add(w, CLOSED + p as usize, 1);
    }

    pub fn handshake(&self, w: Worker, ok: bool) {
        self.c.add(w, if ok { TLS_OK } else { TLS_FAILED }, 1);
    }

    /// Connections of `PROTOS[p]` open now.
    pub fn open(&self, p: usize) -> u64 {
        self.c
            .sum(OPENED + p)
            .saturating_sub(self.c.sum(CLOSED + p))
    }

    pub fn total(&self, p: usize) -> u64 {
        self.c.sum(OPENED + p)
    }

    pub fn handshakes(&self) -> (u64, u64) {
        (self.c.sum(TLS_OK), self.c.sum(TLS_FAILED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_exact_across_workers() {
        let r = RequestCounts::new(3);
        for i in 0..1000 {
            let status = if i % 10 == 0 {
                StatusCode::BAD_GATEWAY
            } else {
                StatusCode::OK
            };
            r.record(
                Worker::new(i % 3),
                &Method::GET,
                status,
                Duration::from_micros(700),
                None,
                Some(10),
            );
        }
        r.record(
            Worker::new(0),
            &Method::from_bytes(b"PROPFIND").unwrap(),
            StatusCode::NOT_FOUND,
            Duration::from_secs(20),
            Some(5),
            None,
        );
        assert_eq!(r.total(), 1001);
        assert_eq!(r.requests(0, 1), 900);
        assert_eq!(r.requests(0, 4), 100);
        assert_eq!(r.requests(9, 3), 1);
        assert_eq!(r.errors(), 100);
        assert_eq!(r.bytes_out(), 10_000);
        assert_eq!(r.bytes_in(), 5);
        let h = r.duration();
        assert_eq!(h.count, 1001);
        // 700 µs falls in the 1 ms bucket; 20 s only in +Inf.
        assert_eq!(h.buckets[0], 0);
        assert_eq!(h.buckets[1], 1000);
        assert_eq!(*h.buckets.last().unwrap(), 1000);
        assert!((h.sum_seconds - (0.7 + 20.0)).abs() < 1e-6);
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket() {
        let r = RequestCounts::new(1);
        let w = Worker::new(0);
        for _ in 0..50 {
            r.record(
                w,
                &Method::GET,
                StatusCode::OK,
                Duration::from_micros(400),
                None,
                None,
            );
        }
        for _ in 0..50 {
            r.record(
                w,
                &Method::GET,
                StatusCode::OK,
                Duration::from_millis(7),
                None,
                None,
            );
        }
        let h = r.duration();
        // Half the requests are at most 0.5 ms.
        assert!((h.quantile(0.5).unwrap() - 0.0005).abs() < 1e-9);
        // The 99th is in the (5 ms, 10 ms] bucket.
        let p99 = h.quantile(0.99).unwrap();
        assert!(p99 > 0.005 && p99 <= 0.01, "{p99}");
        assert_eq!(RequestCounts::new(1).duration().quantile(0.5), None);
    }

    #[test]
    fn open_connections_are_opened_minus_closed() {
        let c = ConnCounts::new(2);
        c.opened(Worker::new(0), Proto::Http1);
        c.opened(Worker::new(1), Proto::Http1);
        c.opened(Worker::new(1), Proto::Http2);
        c.closed(Worker::new(0), Proto::Http1);
        c.handshake(Worker::new(1), true);
        c.handshake(Worker::new(0), false);
        assert_eq!(c.open(0), 1);
        assert_eq!(c.open(1), 1);
        assert_eq!(c.total(0), 2);
        assert_eq!(c.handshakes(), (1, 1));
    }
}
