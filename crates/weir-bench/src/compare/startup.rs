//! The `startup` scenario: how long a server takes from being spawned to
//! serving its first complete 200, with a config of
//! [`STARTUP_SITES`](super::scenarios::STARTUP_SITES) name-based virtual
//! hosts. Measured from outside with a monotonic clock started just before
//! the spawn; the probe connects every ~1 ms and, once connected, sends one
//! GET with the site's Host and checks the whole body. Each repeat starts a
//! fresh process and stops it by PID.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::process::{self, Running};
use super::servers::Launch;

/// How long one start may take before it counts as failed.
const START_LIMIT: Duration = Duration::from_secs(10);

/// The site the probe asks for: the last one, so a server that only ever
/// answers from its first (default) site is caught by a 404, not timed.
pub fn probe_host(sites: usize) -> String {
    site_name(sites)
}

/// The host name of site `i` (1-based).
pub fn site_name(i: usize) -> String {
    format!("site{i}.test")
}

/// Site `i`'s page: the scenario's page of `size` bytes with `site{i}` written
/// over the start of its text, so every site's answer is distinct and a
/// Host routed to the wrong root fails the body check.
pub fn site_page(i: usize, size: usize) -> Vec<u8> {
    let mut page = super::expected_file(size);
    let tag = format!("site{i:02}-");
    let at = page.iter().position(|&b| b == b'a').unwrap_or(0);
    if page.len() >= at + tag.len() {
        page[at..at + tag.len()].copy_from_slice(tag.as_bytes());
    }
    page
}

/// One server's start-up times, aggregated over repeats.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StartupRow {
    /// Case label ("10 sites").
    pub case: String,
    /// Server name.
    pub server: String,
    /// "ok", "not installed", "config rejected: …", "failed: …".
    pub status: String,
    /// Repeats measured.
    pub repeats: usize,
    /// Median time to the first 200, ms.
    pub median_ms: f64,
    /// Fastest start, ms.
    pub min_ms: f64,
    /// Slowest start, ms.
    pub max_ms: f64,
    /// Every repeat, ms, in order.
    pub samples_ms: Vec<f64>,
    /// Connect attempts refused or failed before the first answer (median).
    pub probes: u64,
}

/// What one start measured.
#[derive(Debug, Clone, Copy)]
struct Start {
    elapsed: Duration,
    probes: u64,
}

/// Measures `repeats` starts of `launch`; `Err` is the row's status text.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    launch: &Launch,
    dir: &Path,
    port: u16,
    host: &str,
    path: &str,
    expected: &[u8],
    repeats: usize,
    cpu: Option<&[usize]>,
) -> Result<(Vec<f64>, u64), String> {
    let mut samples = Vec::new();
    let mut probes = Vec::new();
    for repeat in 0..repeats.max(1) {
        let log = dir.join(format!("server-{}.log", repeat + 1));
        let s = once(launch, &log, port, host, path, expected, cpu)?;
        let ms = s.elapsed.as_secs_f64() * 1000.0;
        eprintln!(
            "   repeat {}: first 200 after {ms:.1} ms ({} probes)",
            repeat + 1,
            s.probes
        );
        samples.push(ms);
        probes.push(s.probes as f64);
    }
    Ok((samples, super::median(probes) as u64))
}

/// Waits up to 2 s for the port to be released by the previous process.
fn wait_port_free(port: u16) -> Result<(), String> {
    let start = Instant::now();
    while !process::port_free(port) {
        if start.elapsed() > Duration::from_secs(2) {
            return Err(format!("failed: port {port} in use"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn once(
    launch: &Launch,
    log: &Path,
    port: u16,
    host: &str,
    path: &str,
    expected: &[u8],
    cpu: Option<&[usize]>,
) -> Result<Start, String> {
    wait_port_free(port)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t0 = Instant::now();
    let mut running =
        Running::start(launch, log, cpu).map_err(|e| format!("failed to start: {e}"))?;
    let result = poll(&mut running, t0, addr, host, path, expected);
    running.stop();
    result
}

/// Connects every ~1 ms until a GET gets the expected 200.
fn poll(
    running: &mut Running,
    t0: Instant,
    addr: SocketAddr,
    host: &str,
    path: &str,
    expected: &[u8],
) -> Result<Start, String> {
    let mut probes = 0u64;
    loop {
        probes += 1;
        let last = match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(tcp) => match process::fetch_on(tcp, false, host, path) {
                Ok((200, body)) if body == expected => {
                    return Ok(Start {
                        elapsed: t0.elapsed(),
                        probes,
                    });
                }
                Ok((status, body)) => format!(
                    "GET {path} (Host: {host}) gave {status} with {} body bytes, expected 200 with {}",
                    body.len(),
                    expected.len()
                ),
                Err(e) => e,
            },
            Err(e) => format!("connect: {e}"),
        };
        if let Some(why) = running.exited() {
            return Err(format!("failed to start: {why}; last probe: {last}"));
        }
        if t0.elapsed() > START_LIMIT {
            return Err(format!(
                "failed: no good answer within {START_LIMIT:?}; last probe: {last}"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
