//! The `idle` scenario: what an idle HTTPS keep-alive connection costs a
//! server in memory. Each repeat starts a fresh server, samples the PSS
//! (and RSS) of its whole process tree at idle, opens N connections with
//! [`crate::hold`] (TLS handshake and one GET each, then held idle), samples
//! again 2 s after every attempt has ended, and closes them. PSS is the
//! headline: summed RSS counts pages shared by a master and its workers
//! once per process. The client
//! runs in this process; the server is a separate process with its own
//! descriptor limit.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::process::Running;
use super::procstat;
use super::servers::Launch;
use crate::hold::{self, HoldConfig, HoldReport};

/// One server's idle-connection memory, aggregated over repeats.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IdleRow {
    /// Case label ("c10000").
    pub case: String,
    /// Server name.
    pub server: String,
    /// "ok", "not installed", "config rejected: …", "failed: …".
    pub status: String,
    /// Repeats measured.
    pub repeats: usize,
    /// Connections asked for.
    pub connections: u64,
    /// Fewest connections established (TCP + TLS) in any repeat.
    pub established: u64,
    /// Fewest connections served (200 with the right body) in any repeat.
    pub served: u64,
    /// Fewest served connections still open when RSS was sampled.
    pub held: u64,
    /// Most failed connections in any repeat (all kinds).
    pub errors: u64,
    /// Median PSS before connecting, MiB (summed over the process tree).
    pub pss_idle_mib: f64,
    /// Median PSS with the connections held, MiB.
    pub pss_held_mib: f64,
    /// Median RSS before connecting, MiB.
    pub rss_idle_mib: f64,
    /// Median RSS with the connections held, MiB.
    pub rss_held_mib: f64,
    /// Median (held − idle PSS) / connections held, KiB.
    pub kib_per_conn: f64,
    /// Lowest KiB per connection (PSS).
    pub kib_min: f64,
    /// Highest KiB per connection (PSS).
    pub kib_max: f64,
    /// Median (held − idle RSS) / connections held, KiB.
    pub kib_per_conn_rss: f64,
}

/// One repeat's raw record.
#[derive(Debug, Serialize)]
pub struct IdleRecord {
    /// Server name.
    pub server: String,
    /// Repeat number, from 1.
    pub repeat: usize,
    /// PSS of the server's processes before connecting.
    pub pss_idle_bytes: u64,
    /// PSS of the server's processes with the connections held.
    pub pss_held_bytes: u64,
    /// RSS of the server's processes before connecting.
    pub rss_idle_bytes: u64,
    /// RSS of the server's processes with the connections held.
    pub rss_held_bytes: u64,
    /// Served connections still open at the held sample.
    pub held_at_sample: u64,
    /// (held − idle PSS) / held_at_sample, KiB.
    pub kib_per_conn: f64,
    /// (held − idle RSS) / held_at_sample, KiB.
    pub kib_per_conn_rss: f64,
    /// The holder's report at the end (after the sample).
    pub hold: HoldReport,
}

/// What the scenario asks of the holder, apart from the URL.
#[derive(Debug, Clone)]
pub struct IdleCase {
    /// Connections to hold.
    pub connections: usize,
    /// Path to GET on each.
    pub path: String,
    /// The body the GET must return.
    pub expected: Vec<u8>,
    /// Stop opening after this long.
    pub open_limit: Duration,
}

/// Runs one repeat against a fresh start of `launch`; `Err` is the status text.
pub fn repeat(
    launch: &Launch,
    log: &Path,
    port: u16,
    case: &IdleCase,
    cpu: Option<&[usize]>,
    repeat: usize,
    server: &str,
) -> Result<IdleRecord, String> {
    let mut running =
        Running::start(launch, log, cpu).map_err(|e| format!("failed to start: {e}"))?;
    let result = (|| {
        running
            .wait_ready(port, Duration::from_secs(10))
            .map_err(|e| format!("failed to start: {e}"))?;
        let (status, body) = super::process::fetch(port, true, &case.path)
            .map_err(|e| format!("failed check: {e}"))?;
        if status != 200 || body != case.expected {
            return Err(format!(
                "failed check: GET {} gave {status} with {} body bytes, expected 200 with {}",
                case.path,
                body.len(),
                case.expected.len()
            ));
        }
        // Let start-up allocations and the check's connection settle.
        std::thread::sleep(Duration::from_secs(1));
        let pid = running.pid;
        let idle = procstat::sample(&[pid]);
        let mut hc = HoldConfig::new(&format!("https://127.0.0.1:{port}{}", case.path));
        hc.connections = case.connections;
        hc.parallel = 200;
        hc.hold = Duration::from_secs(2);
        hc.open_limit = case.open_limit;
        hc.host = Some("localhost".into());
        hc.sni = Some("localhost".into());
        hc.insecure = true;
        hc.expect_body = Some(case.expected.clone());
        let (report, (held, at_sample)) = hold::run(&hc, |r| {
            (
                procstat::sample(&[pid]),
                r.served.saturating_sub(r.closed_by_server),
            )
        })
        .map_err(|e| format!("failed: {e}"))?;
        let per_conn = |held: u64, idle: u64| {
            if at_sample > 0 {
                held.saturating_sub(idle) as f64 / 1024.0 / at_sample as f64
            } else {
                0.0
            }
        };
        let kib = per_conn(held.pss, idle.pss);
        eprintln!(
            "   repeat {repeat}: {} of {} served, {} held; PSS {:.1} -> {:.1} MiB, {kib:.1} KiB per connection, {} errors",
            report.served,
            report.requested,
            at_sample,
            idle.pss as f64 / 1048576.0,
            held.pss as f64 / 1048576.0,
            report.errors.total()
        );
        Ok(IdleRecord {
            server: server.into(),
            repeat,
            pss_idle_bytes: idle.pss,
            pss_held_bytes: held.pss,
            rss_idle_bytes: idle.rss,
            rss_held_bytes: held.rss,
            held_at_sample: at_sample,
            kib_per_conn: kib,
            kib_per_conn_rss: per_conn(held.rss, idle.rss),
            hold: report,
        })
    })();
    running.stop();
    result
}

/// Aggregates the repeats of one server into its row.
pub fn aggregate(case: &str, server: &str, requested: usize, recs: &[IdleRecord]) -> IdleRow {
    let kib: Vec<f64> = recs.iter().map(|r| r.kib_per_conn).collect();
    let mib = |f: &dyn Fn(&IdleRecord) -> u64| {
        super::median(recs.iter().map(|r| f(r) as f64 / 1048576.0).collect())
    };
    IdleRow {
        case: case.into(),
        server: server.into(),
        status: "ok".into(),
        repeats: recs.len(),
        connections: requested as u64,
        established: recs.iter().map(|r| r.hold.established).min().unwrap_or(0),
        served: recs.iter().map(|r| r.hold.served).min().unwrap_or(0),
        held: recs.iter().map(|r| r.held_at_sample).min().unwrap_or(0),
        errors: recs
            .iter()
            .map(|r| r.hold.errors.total())
            .max()
            .unwrap_or(0),
        pss_idle_mib: mib(&|r| r.pss_idle_bytes),
        pss_held_mib: mib(&|r| r.pss_held_bytes),
        rss_idle_mib: mib(&|r| r.rss_idle_bytes),
        rss_held_mib: mib(&|r| r.rss_held_bytes),
        kib_per_conn: super::median(kib.clone()),
        kib_min: kib.iter().copied().fold(f64::INFINITY, f64::min),
        kib_max: kib.iter().copied().fold(0.0, f64::max),
        kib_per_conn_rss: super::median(recs.iter().map(|r| r.kib_per_conn_rss).collect()),
    }
}
