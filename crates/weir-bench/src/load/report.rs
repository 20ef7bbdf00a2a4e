//! The result of a load run: a serialisable [`LoadReport`] and its human table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Plan;
use super::stats::{ErrorCounts, Percentiles, ThreadStats, correct_coordinated_omission};

/// Error counts as they appear in JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    /// Failed TCP connects.
    pub connect: u64,
    /// Responses later than the timeout.
    pub timeout: u64,
    /// Connections reset/closed mid-request.
    pub reset: u64,
    /// TLS failures.
    pub tls: u64,
    /// Malformed responses.
    pub protocol: u64,
}

impl Errors {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.reset + self.tls + self.protocol
    }
}

impl From<ErrorCounts> for Errors {
    fn from(e: ErrorCounts) -> Self {
        Errors {
            connect: e.connect,
            timeout: e.timeout,
            reset: e.reset,
            tls: e.tls,
            protocol: e.protocol,
        }
    }
}

/// The generator's own CPU use during the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GeneratorCpu {
    /// CPU cores used (1.0 = one core fully busy); `None` if /proc was unreadable.
    pub cores: Option<f64>,
    /// Generator threads.
    pub threads: usize,
    /// The generator used (nearly) all the CPU its threads can use.
    pub cpu_bound: bool,
}

/// Everything a load run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Target URL.
    pub url: String,
    /// "HTTP/1.1" or "HTTP/2".
    pub protocol: String,
    /// Keep-alive on.
    pub keepalive: bool,
    /// "closed" or "open".
    pub mode: String,
    /// Open-loop target rate (req/s).
    pub rate: Option<f64>,
    /// Connections.
    pub connections: usize,
    /// Streams per connection (HTTP/2).
    pub streams: usize,
    /// Generator threads.
    pub threads: usize,
    /// Warm-up excluded, seconds.
    pub warmup_s: f64,
    /// Measured window, seconds.
    pub duration_s: f64,
    /// Successful (2xx/3xx) responses per second.
    pub requests_per_sec: f64,
    /// Successful (2xx/3xx) responses.
    pub successes: u64,
    /// All complete responses.
    pub responses: u64,
    /// Responses by status code.
    pub status: BTreeMap<u16, u64>,
    /// Errors by kind.
    pub errors: Errors,
    /// Bytes received.
    pub bytes: u64,
    /// Bytes received per second.
    pub bytes_per_sec: f64,
    /// Latency: closed loop from the actual send; open loop from the intended send time.
    pub latency_ms: Percentiles,
    /// Closed loop: latency corrected for coordinated omission (expected interval = median).
    pub latency_corrected_ms: Option<Percentiles>,
    /// Open loop: service time (actual send to response end).
    pub service_time_ms: Option<Percentiles>,
    /// TCP connect time, all connections (warm-up included).
    pub connect_ms: Percentiles,
    /// TLS handshake time, all connections (warm-up included).
    pub tls_handshake_ms: Option<Percentiles>,
    /// Connections opened.
    pub connections_opened: u64,
    /// Requests still unanswered when the run ended (included in the
    /// latency figures at their wait so far: a lower bound).
    #[serde(default)]
    pub unanswered: u64,
    /// Timeout used for requests, seconds.
    pub timeout_s: f64,
    /// Generator CPU.
    pub generator: GeneratorCpu,
    /// Warnings about the validity of this result.
    pub warnings: Vec<String>,
}

impl LoadReport {
    /// Builds the report from merged stats.
    pub fn build(
        plan: &Plan,
        threads: usize,
        measured: Duration,
        s: &ThreadStats,
        cpu: Option<f64>,
    ) -> LoadReport {
        let secs = measured.as_secs_f64().max(1e-9);
        let open = plan.interval.is_some();
        let status: BTreeMap<u16, u64> = s
            .status
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(code, n)| (code as u16, *n))
            .collect();
        // A generator thread can use at most one core; the machine caps it too.
        let usable =
            threads.min(std::thread::available_parallelism().map_or(threads, |n| n.get())) as f64;
        let cpu_bound = cpu.is_some_and(|c| c >= 0.9 * usable);
        let mut warnings = Vec::new();
        if cpu_bound {
            warnings.push("generator CPU-bound: results are a lower bound".to_string());
        }
        if s.errors.timeout > 0 {
            warnings.push(format!(
                "{} responses took longer than the {:.1} s timeout and count as errors",
                s.errors.timeout,
                plan.cfg.timeout.as_secs_f64()
            ));
        }
        LoadReport {
            url: plan.cfg.url.clone(),
            protocol: if plan.cfg.http3 {
                "HTTP/3"
            } else if plan.cfg.h2 {
                "HTTP/2"
            } else {
                "HTTP/1.1"
            }
            .into(),
            keepalive: plan.cfg.keepalive,
            mode: if open { "open" } else { "closed" }.into(),
            rate: plan.cfg.rate,
            connections: plan.cfg.connections,
            streams: if plan.cfg.h2 || plan.cfg.http3 {
                plan.cfg.streams
            } else {
                1
            },
            threads,
            warmup_s: plan.cfg.warmup.as_secs_f64(),
            duration_s: secs,
            requests_per_sec: s.successes() as f64 / secs,
            successes: s.successes(),
            responses: s.responses(),
            status,
            errors: s.errors.into(),
            bytes: s.bytes,
            bytes_per_sec: s.bytes as f64 / secs,
            latency_ms: Percentiles::of(&s.latency),
            latency_corrected_ms: (!open)
                .then(|| Percentiles::of(&correct_coordinated_omission(&s.latency))),
            service_time_ms: open.then(|| Percentiles::of(&s.service)),
            connect_ms: Percentiles::of(&s.connect),
            tls_handshake_ms: plan.tls.is_some().then(|| Percentiles::of(&s.tls)),
            connections_opened: s.connections,
            unanswered: s.unanswered,
            timeout_s: plan.cfg.timeout.as_secs_f64(),
            generator: GeneratorCpu {
                cores: cpu,
                threads,
                cpu_bound,
            },
            warnings,
        }
    }

    /// The human-readable table.
    pub fn human(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{}  {} {}, {} loop{}, {} thread(s), {} connection(s){}",
            self.url,
            self.protocol,
            if self.keepalive {
                "keep-alive"
            } else {
                "no keep-alive"
            },
            self.mode,
            self.rate
                .map(|r| format!(" at {r:.0} req/s"))
                .unwrap_or_default(),
            self.threads,
            self.connections,
            if self.protocol == "HTTP/2" {
                format!(" x {} streams", self.streams)
            } else {
                String::new()
            },
        );
        let _ = writeln!(
            o,
            "  measured       {:.2} s (after {:.2} s warm-up)",
            self.duration_s, self.warmup_s
        );
        let _ = writeln!(
            o,
            "  requests/s     {:.1}   (2xx/3xx only)",
            self.requests_per_sec
        );
        let codes: Vec<String> = self
            .status
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        let _ = writeln!(
            o,
            "  responses      {}   [{}]",
            self.responses,
            codes.join(", ")
        );
        let _ = writeln!(
            o,
            "  errors         {}   (connect {}, timeout {}, reset {}, tls {}, protocol {})",
            self.errors.total(),
            self.errors.connect,
            self.errors.timeout,
            self.errors.reset,
            self.errors.tls,
            self.errors.protocol
        );
        let _ = writeln!(
            o,
            "  unanswered     {}   (still waiting at the end; in the latency at their wait so far)",
            self.unanswered
        );
        let _ = writeln!(
            o,
            "  throughput     {:.2} MiB/s ({} bytes)",
            self.bytes_per_sec / 1048576.0,
            self.bytes
        );
        let _ = writeln!(
            o,
            "  latency ms          p50       p90       p99     p99.9       max      mean"
        );
        let row = |o: &mut String, name: &str, p: &Percentiles| {
            let _ = writeln!(
                o,
                "    {name:<14} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                p.p50, p.p90, p.p99, p.p999, p.max, p.mean
            );
        };
        if self.mode == "open" {
            row(&mut o, "from intended", &self.latency_ms);
            if let Some(p) = &self.service_time_ms {
                row(&mut o, "service time", p);
            }
        } else {
            row(&mut o, "measured", &self.latency_ms);
            if let Some(p) = &self.latency_corrected_ms {
                row(&mut o, "CO-corrected", p);
            }
        }
        row(&mut o, "connect", &self.connect_ms);
        if let Some(p) = &self.tls_handshake_ms {
            row(&mut o, "TLS handshake", p);
        }
        let _ = writeln!(o, "  connections    {} opened", self.connections_opened);
        let _ = writeln!(
            o,
            "  generator CPU  {} of {} thread(s)",
            self.generator
                .cores
                .map_or("unknown".into(), |c| format!("{:.2} cores", c)),
            self.generator.threads
        );
        for w in &self.warnings {
            let _ = writeln!(o, "  WARNING: {w}");
        }
        o
    }
}
