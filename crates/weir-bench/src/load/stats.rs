//! Per-thread measurements of a load run, and merging them at the end.
//!
//! Each generator thread owns one [`ThreadStats`] and mutates it without locks
//! or atomics; the threads' stats are merged once, after the run. Latencies are
//! recorded in microseconds in HdrHistograms (3 significant digits, up to 1 h).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a histogram can hold, in microseconds (one hour).
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram in microseconds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("static histogram bounds are valid")
}

/// Why a request or a connection attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// TCP connect failed (refused, unreachable, or took longer than the timeout).
    Connect,
    /// No complete response within the timeout.
    Timeout,
    /// The server reset or closed the connection before the response was complete.
    Reset,
    /// The TLS handshake or a TLS record failed.
    Tls,
    /// The response was not valid HTTP (bad head, bad chunk, h2 protocol error).
    Protocol,
}

/// Error counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// Failed TCP connects.
    pub connect: u64,
    /// Responses later than the timeout (counted here, never as successes).
    pub timeout: u64,
    /// Connections reset or closed mid-request.
    pub reset: u64,
    /// TLS failures.
    pub tls: u64,
    /// Malformed responses.
    pub protocol: u64,
}

impl ErrorCounts {
    /// Adds one error of `kind`.
    pub fn add(&mut self, kind: ErrorKind) {
        match kind {
            ErrorKind::Connect => self.connect += 1,
            ErrorKind::Timeout => self.timeout += 1,
            ErrorKind::Reset => self.reset += 1,
            ErrorKind::Tls => self.tls += 1,
            ErrorKind::Protocol => self.protocol += 1,
        }
    }

    /// All errors together.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.reset + self.tls + self.protocol
    }

    fn merge(&mut self, other: &ErrorCounts) {
        self.connect += other.connect;
        self.timeout += other.timeout;
        self.reset += other.reset;
        self.tls += other.tls;
        self.protocol += other.protocol;
    }
}

/// What one generator thread measured.
pub struct ThreadStats {
    /// Latency of each response: from the actual send in a closed loop, from the
    /// intended send time in an open loop.
    pub latency: Histogram<u64>,
    /// Service time (actual send to response end); recorded in open loops only.
    pub service: Histogram<u64>,
    /// TCP connect times.
    pub connect: Histogram<u64>,
    /// TLS handshake times.
    pub tls: Histogram<u64>,
    /// Responses by status code (index = status, 0..600).
    pub status: Vec<u64>,
    /// Bytes received in measured responses (head + body).
    pub bytes: u64,
    /// Errors during the measured window.
    pub errors: ErrorCounts,
    /// Connections opened (whole run, warm-up included).
    pub connections: u64,
    /// Requests still unanswered when the run ended (sent, or waiting for
    /// their connection to open); also in `latency`, at their wait so far.
    pub unanswered: u64,
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats {
            latency: new_histogram(),
            service: new_histogram(),
            connect: new_histogram(),
            tls: new_histogram(),
            status: vec![0; 600],
            bytes: 0,
            errors: ErrorCounts::default(),
            connections: 0,
            unanswered: 0,
        }
    }
}

impl ThreadStats {
    /// Records one complete response.
    pub fn record_response(
        &mut self,
        status: u16,
        bytes: u64,
        latency_us: u64,
        service_us: Option<u64>,
    ) {
        self.status[usize::from(status).min(599)] += 1;
        self.bytes += bytes;
        self.latency.saturating_record(latency_us.max(1));
        if let Some(s) = service_us {
            self.service.saturating_record(s.max(1));
        }
    }

    /// A request still waiting when the run ended, after `wait_us`: a
    /// lower bound of its latency. Leaving it out (as wrk does) hides a
    /// server that stalls: one that answers nothing on most connections
    /// would show only the fast answers of the others.
    pub fn record_unanswered(&mut self, wait_us: u64) {
        self.unanswered += 1;
        self.latency.saturating_record(wait_us.max(1));
    }

    /// Successful responses (2xx and 3xx).
    pub fn successes(&self) -> u64 {
        self.status[200..400].iter().sum()
    }

    /// All complete responses.
    pub fn responses(&self) -> u64 {
        self.status.iter().sum()
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &ThreadStats) {
        // Histograms share bounds, so `add` cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        let _ = self.connect.add(&other.connect);
        let _ = self.tls.add(&other.tls);
        for (a, b) in self.status.iter_mut().zip(&other.status) {
            *a += b;
        }
        self.bytes += other.bytes;
        self.errors.merge(&other.errors);
        self.connections += other.connections;
        self.unanswered += other.unanswered;
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Summarises a microsecond histogram in milliseconds.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// Corrects a closed-loop latency histogram for coordinated omission.
///
/// In a closed loop a connection sends its next request only after the
/// previous response, so a stall of `D` hides the `D / interval` requests that
/// an open-loop client would have sent meanwhile. Like wrk2 and HdrHistogram's
/// `copyCorrectedForCoordinatedOmission`, each sample longer than the expected
/// interval is backfilled with `value - k * interval` samples. The expected
/// interval is the median latency: what a connection's send interval would be
/// without stalls (the mean would be inflated by the very stalls we correct).
pub fn correct_coordinated_omission(h: &Histogram<u64>) -> Histogram<u64> {
    if h.is_empty() {
        return h.clone();
    }
    let interval = h.value_at_quantile(0.5).max(1);
    h.clone_correct(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correction_backfills_stalls_only() {
        let mut h = new_histogram();
        for _ in 0..99 {
            h.record(100).unwrap();
        }
        h.record(100_000).unwrap();
        let c = correct_coordinated_omission(&h);
        // One 100 ms stall at a 100 µs interval hides ~999 requests.
        assert!(c.len() > 1000, "corrected count {}", c.len());
        assert!(Percentiles::of(&c).p90 > 10.0);
        assert!(Percentiles::of(&h).p90 < 1.0);
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = ThreadStats::default();
        let mut b = ThreadStats::default();
        a.record_response(200, 10, 5, None);
        b.record_response(500, 20, 7, None);
        b.errors.add(ErrorKind::Reset);
        a.merge(&b);
        assert_eq!(a.responses(), 2);
        assert_eq!(a.successes(), 1);
        assert_eq!(a.bytes, 30);
        assert_eq!(a.errors.reset, 1);
        assert_eq!(a.latency.len(), 2);
    }
}
