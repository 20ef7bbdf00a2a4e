//! `weir-bench compare`: runs named scenarios against weir and the real
//! competitors, one server at a time on loopback, and writes a run folder
//! with every config, raw JSON per repeat, a Markdown table and an SVG chart
//! per scenario.
//!
//! Method: each server is started by hand (foreground, stopped by PID),
//! checked (status and exact body) before measuring, warmed up, measured;
//! `repeats` rounds, each running every server of the case once, so the
//! machine's drift over minutes (±15 % on a shared VM) lands on every server
//! alike and the ratios hold; the order changes from round to round
//! ([`round_order`]), so no server always runs first or after the same one. A round during which the hypervisor
//! stole more than `max_stolen_pct` of the CPU (`/proc/stat`) is measured
//! again, all of it. The tables show the median and min–max spread, server
//! CPU and memory (idle before load, peak during; PSS, the headline, and RSS)
//! from /proc, the generator's own CPU and the CPU stolen. With `--pin` the
//! server runs on one CPU set and the generator on the disjoint rest, the
//! same for every server, so a ratio is work per request per core. A server
//! whose binary is missing is reported as "not installed", loudly, never
//! silently dropped. In the caching scenarios the backend's request count
//! ([`crate::backend::REQUESTS_PATH`]) is read around every repeat, so a
//! server that did not answer from its cache fails instead of being
//! measured as a cache. In the `app` scenario the app's processes are part
//! of every server: weir's children, the others' companions.

pub mod cert;
pub mod idle;
pub mod limits;
pub mod pool;
pub mod process;
pub mod procstat;
pub mod report;
pub mod scenarios;
pub mod servers;
pub mod startup;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::load::{self, LoadConfig, LoadReport};
use idle::{IdleCase, IdleRow};
use process::Running;
use scenarios::{Amount, Case, Scenario};
use servers::{Role, ServerKind, ServerSetup};
use startup::StartupRow;

/// Errors that stop a comparison.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A file or folder could not be written.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// The certificate could not be generated.
    #[error("cannot generate the certificate: {0}")]
    Cert(String),
    /// The load generator refused the options.
    #[error(transparent)]
    Load(#[from] load::LoadError),
    /// `--require` was given and a server is missing: its name, the
    /// binary looked for, and how to install it.
    #[error("{0} is not installed ({1} not found): {2}")]
    Required(String, String, String),
    /// A server does not take part in this kind of case.
    #[error("not applicable: {0}")]
    NotApplicable(String),
    /// The backend could not be started.
    #[error("cannot start weir-bench backend: {0}")]
    Backend(String),
    /// The pinned mode cannot be set up.
    #[error("cannot pin: {0}")]
    Pin(String),
    /// A port the run needs is taken.
    #[error("port {0} on 127.0.0.1 is in use; choose another with --port")]
    PortInUse(u16),
}

impl CompareError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, e: std::io::Error) -> CompareError {
        CompareError::Io(path.to_path_buf(), e)
    }
}

/// Options of a comparison.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// Servers to compare.
    pub servers: Vec<ServerKind>,
    /// Measured repeats per case (median reported).
    pub repeats: usize,
    /// Measured duration per repeat.
    pub duration: Duration,
    /// Warm-up before each repeat.
    pub warmup: Duration,
    /// The pinned mode's CPU sets (`--pin`); `None`: every process shares
    /// every CPU.
    pub pin: Option<limits::CpuSplit>,
    /// Smoke-test sizes.
    pub quick: bool,
    /// Run folder.
    pub out: PathBuf,
    /// The weir binary.
    pub weir: PathBuf,
    /// A second weir build, run as the server `weir-b` (`--weir-b`).
    pub weir_b: Option<PathBuf>,
    /// Fail instead of skipping missing servers.
    pub require: bool,
    /// Server port; the backend uses `port + 1`, the chain's Varnish
    /// `port + 2` ([`servers::chain_varnish_port`]).
    pub port: u16,
    /// Workers/threads per server.
    pub workers: usize,
    /// weir's `server.accept` (`None`: weir's default).
    pub weir_accept: Option<String>,
    /// weir-b's, when it differs from weir's (an A/B of two placements).
    pub weir_b_accept: Option<String>,
    /// TOML lines added to weir's site, not weir-b's (an A/B of a feature).
    pub weir_site_keys: Option<String>,
    /// TOML lines added to weir-b's site (the same feature, set up otherwise).
    pub weir_b_site_keys: Option<String>,
    /// Top-level TOML sections added to weir's config, not weir-b's.
    pub weir_sections: Option<String>,
    /// A round in which the hypervisor stole more than this share of the
    /// machine's CPU (percent) during any server's measured seconds is
    /// measured again, all of its servers, up to `stolen_retries` times.
    pub max_stolen_pct: f64,
    /// How many times one round may be measured again for stolen CPU.
    pub stolen_retries: usize,
    /// The generator copies HTTP/1.1 bodies into its memory instead of
    /// dropping them in the kernel (`load::LoadConfig::copy_bodies`).
    pub copy_bodies: bool,
    /// The command line, recorded in the report.
    pub command: String,
}

#[cfg(test)]
impl CompareConfig {
    /// A full (not `--quick`) run of `scenario` with the CLI's defaults.
    pub(crate) fn for_tests(scenario: Scenario) -> CompareConfig {
        CompareConfig {
            scenarios: vec![scenario],
            servers: Vec::new(),
            repeats: 5,
            duration: Duration::from_secs(4),
            warmup: Duration::from_secs(1),
            pin: None,
            quick: false,
            out: "out".into(),
            weir: "weir".into(),
            weir_b: None,
            require: false,
            port: 28080,
            workers: 2,
            weir_accept: None,
            weir_b_accept: None,
            weir_site_keys: None,
            weir_b_site_keys: None,
            weir_sections: None,
            max_stolen_pct: 10.0,
            stolen_retries: 2,
            copy_bodies: false,
            command: String::new(),
        }
    }
}

impl CompareConfig {
    /// The weir builds this comparison runs.
    pub fn weirs(&self) -> servers::Weirs<'_> {
        servers::Weirs {
            weir: &self.weir,
            weir_b: self.weir_b.as_deref(),
        }
    }

    /// The extra site keys a server runs with (weir's only).
    pub fn site_keys_for(&self, server: servers::ServerKind) -> Option<String> {
        match server {
            servers::ServerKind::Weir => self.weir_site_keys.clone(),
            servers::ServerKind::WeirB => self.weir_b_site_keys.clone(),
            _ => None,
        }
    }

    /// The extra top-level sections a server runs with (weir's only).
    pub fn sections_for(&self, server: servers::ServerKind) -> Option<String> {
        match server {
            servers::ServerKind::Weir => self.weir_sections.clone(),
            _ => None,
        }
    }

    /// The `server.accept` a weir build runs with (`None` for the others,
    /// which ignore it).
    pub fn accept_for(&self, server: servers::ServerKind) -> Option<String> {
        match server {
            servers::ServerKind::WeirB if self.weir_b_accept.is_some() => {
                self.weir_b_accept.clone()
            }
            _ => self.weir_accept.clone(),
        }
    }
}

/// One (scenario, case, server) result, aggregated over repeats. Read back
/// by `pool` from older runs too, whose summaries lack later fields.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Case label.
    pub case: String,
    /// Server name.
    pub server: String,
    /// "ok", "not installed", "config rejected: …", "failed: …".
    pub status: String,
    /// Repeats measured.
    pub repeats: usize,
    /// Successful req/s of each repeat, in round order (the `n`th of every
    /// server's was measured in the same round).
    pub rps_by_round: Vec<f64>,
    /// Median successful req/s.
    pub rps_median: f64,
    /// Lowest req/s.
    pub rps_min: f64,
    /// Highest req/s.
    pub rps_max: f64,
    /// Median p50 latency, ms.
    pub p50_ms: f64,
    /// Median p99 latency, ms.
    pub p99_ms: f64,
    /// Median p99 corrected for coordinated omission, ms.
    pub p99_corrected_ms: f64,
    /// Median mean latency, ms (ab's "time per request").
    pub mean_ms: f64,
    /// The longest response of any repeat, ms (ab's "longest request").
    #[serde(default)]
    pub max_ms: f64,
    /// Median 2xx/3xx responses.
    pub ok_responses: u64,
    /// Median other responses.
    pub non_2xx: u64,
    /// Median client-side errors (all kinds).
    pub client_errors: u64,
    /// The most non-2xx responses of any repeat (a clean run has none).
    pub non_2xx_max: u64,
    /// The most client-side errors of any repeat.
    pub client_errors_max: u64,
    /// Median requests still unanswered at the end of a repeat (in the
    /// latency figures at their wait so far).
    pub unanswered: u64,
    /// Median server CPU, cores.
    pub server_cpu: f64,
    /// Median backend CPU, cores (proxy scenario).
    pub backend_cpu: Option<f64>,
    /// Server PSS before load, MiB (summed over its process tree).
    pub pss_idle_mib: f64,
    /// Highest server PSS during load, MiB.
    pub pss_peak_mib: f64,
    /// Server RSS before load, MiB.
    pub rss_idle_mib: f64,
    /// Highest server RSS during load, MiB.
    pub rss_peak_mib: f64,
    /// Median generator CPU, cores.
    pub generator_cpu: f64,
    /// The generator was CPU-bound in some repeat.
    pub generator_cpu_bound: bool,
    /// Share of the machine's CPU time the hypervisor took during the
    /// measured seconds, percent: median and highest over the repeats.
    pub stolen_pct: f64,
    pub stolen_pct_max: f64,
    /// Rounds measured again because the hypervisor stole more than
    /// `--max-stolen` of the CPU during one of their repeats.
    pub rounds_remeasured: usize,
    /// Caching scenarios: the most requests the backend answered during
    /// one repeat's load (warm-up and measured), each a miss; every other
    /// response was a hit. `None` elsewhere and for `weir-static`.
    pub backend_requests_max: Option<u64>,
    /// Median bytes received per response (head, body and chunk framing):
    /// in `compress`, how much each server's coding made of the body.
    pub bytes_per_response: f64,
}

/// One repeat's raw record.
#[derive(Debug, Serialize)]
struct RepeatRecord<'a> {
    server: &'a str,
    scenario: &'a str,
    case: &'a str,
    repeat: usize,
    /// When the repeat's load began (Unix time, ms): shows the rounds' order.
    started_unix_ms: u128,
    server_cpu_cores: f64,
    backend_cpu_cores: Option<f64>,
    pss_peak_bytes: u64,
    rss_peak_bytes: u64,
    /// Bytes of access log the server wrote during the repeat (features-on row).
    access_log_bytes: Option<u64>,
    /// Requests the backend answered during the load (caching scenarios: misses).
    backend_requests: Option<u64>,
    /// Share of the machine's CPU time stolen by the hypervisor, percent.
    machine_stolen_pct: f64,
    load: &'a LoadReport,
}

/// What the run folder's summary.json holds.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Date and host.
    pub run: String,
    /// Exact command.
    pub command: String,
    /// Server versions.
    pub versions: Vec<(String, String)>,
    /// CPUs.
    pub cpus: usize,
    /// Pinned?
    pub pinned: bool,
    /// "pinned" (server and generator on disjoint CPU sets) or "shared".
    pub mode: String,
    /// The server's CPUs in the pinned mode.
    pub server_cpus: Vec<usize>,
    /// The generator's (and backend's) CPUs in the pinned mode.
    pub generator_cpus: Vec<usize>,
    /// Workers/threads each server ran with.
    pub workers: usize,
    /// The certificate's key type ("RSA-2048").
    pub certificate: String,
    /// What the memory figures are ("pss": /proc/PID/smaps_rollup summed over
    /// the process tree, the headline; RSS beside it).
    pub memory: String,
    /// The least the concurrency scenario is measured, seconds.
    pub concurrency_min_measure_s: f64,
    /// Idle upstream connections every proxy may keep.
    pub upstream_idle_pool: usize,
    /// Client keep-alive idle timeout of every server, seconds.
    pub keepalive_s: u64,
    /// HAProxy's `maxconn`.
    pub haproxy_maxconn: usize,
    /// Did the generator copy response bodies (`--copy-bodies`)? Runs made
    /// before the option existed copied them.
    pub generator_copies_bodies: bool,
    /// Repeats.
    pub repeats: usize,
    /// Seconds measured per repeat.
    pub duration_s: f64,
    /// Seconds of warm-up per repeat.
    pub warmup_s: f64,
    /// All rows of the load scenarios.
    pub rows: Vec<Row>,
    /// Rows of the `startup` scenario.
    pub startup: Vec<StartupRow>,
    /// Rows of the `idle` scenario.
    pub idle: Vec<IdleRow>,
    /// weir's ratio to each competitor of the load scenarios, by medians
    /// and per round, with the per-round median's interval.
    pub ratios: Vec<report::Ratio>,
}

/// `YYYY-MM-DD-hostname`, the default run folder name.
pub fn run_name() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86400) as i64;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let host =
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "host".into());
    format!("{y:04}-{m:02}-{d:02}-{}", host.trim())
}

/// The default weir binary: next to this executable, else `weir` on PATH.
pub fn default_weir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        for cand in [dir.join("weir"), dir.join("../weir")] {
            if cand.is_file() {
                return cand;
            }
        }
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("weir"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("weir"))
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn write(path: &Path, text: &str) -> Result<(), CompareError> {
    std::fs::write(path, text).map_err(|e| CompareError::io(path, e))
}

/// Makes `dir` readable by the unprivileged users servers drop to.
fn open_perms(path: &Path, dir: bool) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode(if dir { 0o755 } else { 0o644 }),
    );
}

/// Writes the docroot files and the certificate into the run folder;
/// returns the docroot, cert, key and combined paths and the key's type.
#[allow(clippy::type_complexity)]
fn prepare_assets(
    out: &Path,
) -> Result<(PathBuf, PathBuf, PathBuf, PathBuf, String), CompareError> {
    let docroot = out.join("docroot");
    std::fs::create_dir_all(&docroot).map_err(|e| CompareError::io(&docroot, e))?;
    open_perms(out, true);
    open_perms(&docroot, true);
    for (name, size) in scenarios::FILES {
        let p = docroot.join(name);
        write(
            &p,
            &String::from_utf8(expected_file(size)).unwrap_or_default(),
        )?;
        open_perms(&p, false);
    }
    // The backend's body, for weir serving it as a file beside the caches.
    let (name, size) = scenarios::CACHED_PAGE;
    let p = docroot.join(name);
    write(
        &p,
        &String::from_utf8(crate::backend::text_body(size)).unwrap_or_default(),
    )?;
    open_perms(&p, false);
    let certs = out.join("tls");
    std::fs::create_dir_all(&certs).map_err(|e| CompareError::io(&certs, e))?;
    open_perms(&certs, true);
    let g = cert::generate()?;
    let (c, k, both) = (
        certs.join("cert.pem"),
        certs.join("key.pem"),
        certs.join("combined.pem"),
    );
    write(&c, &g.cert_pem)?;
    write(&k, &g.key_pem)?;
    write(&both, &format!("{}{}", g.cert_pem, g.key_pem))?;
    for p in [&c, &k, &both] {
        open_perms(p, false);
    }
    Ok((docroot, c, k, both, g.key_type))
}

/// The bytes of a static file of `size`: an HTML-ish page for small sizes.
pub fn expected_file(size: usize) -> Vec<u8> {
    let head = b"<!DOCTYPE html><html><head><title>weir-bench</title></head><body><p>";
    let tail = b"</p></body></html>\n";
    if size < head.len() + tail.len() {
        return vec![b'x'; size];
    }
    let mut v = head.to_vec();
    v.extend((0..size - head.len() - tail.len()).map(|i| b'a' + (i % 26) as u8));
    v.extend_from_slice(tail);
    v
}

/// Runs the comparison and writes the run folder. Returns the summary.
pub fn run(cfg: &CompareConfig) -> Result<Summary, CompareError> {
    load::tls::install_crypto_provider();
    limits::raise_nofile();
    std::fs::create_dir_all(&cfg.out).map_err(|e| CompareError::io(&cfg.out, e))?;
    // Pinned before any thread starts: every thread of the generator
    // inherits the set, and so do the processes it spawns.
    if let Some(split) = &cfg.pin {
        limits::pin_current_thread(&split.generator).map_err(|e| {
            CompareError::Pin(format!("the generator to {:?}: {e}", split.generator))
        })?;
        eprintln!(
            "weir-bench compare: pinned: servers on CPU(s) {}, generator and backend on {}, {} worker(s) per server",
            limits::cpu_list(&split.server),
            limits::cpu_list(&split.generator),
            cfg.workers
        );
    }
    let (docroot, cert, key, combined, key_type) = prepare_assets(&cfg.out)?;
    let tmp = RunTmp::create()?;
    let mut versions = Vec::new();
    let mut missing = Vec::new();
    for &s in &cfg.servers {
        let absent = s
            .binaries(cfg.weirs())
            .into_iter()
            .find(|b| !servers::installed(b));
        if let Some(bin) = absent {
            if cfg.require {
                return Err(CompareError::Required(
                    s.name().into(),
                    bin.display().to_string(),
                    s.install_hint(),
                ));
            }
            eprintln!(
                "weir-bench compare: *** {} is NOT INSTALLED ({}) and will be reported as such; run bench/setup ***",
                s.name(),
                bin.display()
            );
            versions.push((s.name().to_string(), "not installed".into()));
            missing.push(s);
        } else {
            versions.push((s.name().to_string(), s.version(cfg.weirs())));
        }
    }
    // What a scenario needs beside its servers: php-fpm behind every server
    // of `php`.
    let php_fpm = servers::php_fpm_binary();
    let php_missing = cfg.scenarios.contains(&Scenario::Php) && !servers::installed(&php_fpm);
    if php_missing {
        if cfg.require {
            return Err(CompareError::Required(
                "php-fpm".into(),
                php_fpm.display().to_string(),
                "install it with `apt-get install php-fpm` (or run bench/setup)".into(),
            ));
        }
        eprintln!(
            "weir-bench compare: *** php-fpm is NOT INSTALLED ({}): every row of the php scenario will be reported as such; run bench/setup ***",
            php_fpm.display()
        );
        versions.push(("php-fpm".into(), "not installed".into()));
    } else if cfg.scenarios.contains(&Scenario::Php) {
        versions.push(("php-fpm".into(), php_fpm_version(&php_fpm)));
    }
    let php_root = if cfg.scenarios.contains(&Scenario::Php) {
        Some(prepare_php_root(&cfg.out)?)
    } else {
        None
    };
    // The app every server of `app` fronts is this binary's `backend`.
    let bench_exe = std::env::current_exe().map_err(|e| CompareError::Backend(e.to_string()))?;
    let server_cpu = cfg.pin.as_ref().map(|p| &p.server[..]);
    let generator_cpu = cfg.pin.as_ref().map(|p| &p.generator[..]);
    let backend_port = cfg.port + 1;
    let mut rows = Vec::new();
    let (mut startup_rows, mut idle_rows) = (Vec::new(), Vec::new());
    for &scenario in &cfg.scenarios {
        eprintln!("== scenario {}: {}", scenario.name(), scenario.describe());
        // The backend runs as its own process so its CPU is not the generator's.
        let needs_backend = cfg
            .servers
            .iter()
            .any(|&s| scenario.applies_to(s) && scenario.proxied(s) && !missing.contains(&s));
        let backend = if needs_backend {
            Some(start_backend(cfg, backend_port, scenario, generator_cpu)?)
        } else if scenario.tls_backend()
            && cfg
                .servers
                .iter()
                .any(|&s| scenario.applies_to(s) && !missing.contains(&s))
        {
            let assets = Assets {
                docroot: docroot.clone(),
                cert: cert.clone(),
                key: key.clone(),
                combined: combined.clone(),
                tmp: tmp.0.clone(),
            };
            Some(start_tls_backend(
                cfg,
                backend_port,
                &assets,
                generator_cpu,
            )?)
        } else {
            None
        };
        if scenario == Scenario::Startup {
            let r = run_startup(cfg, &missing, server_cpu, &tmp.0)?;
            write(
                &cfg.out.join("startup.md"),
                &report::startup_markdown(&r, cfg),
            )?;
            write(&cfg.out.join("startup.svg"), &report::startup_svg(&r))?;
            startup_rows.extend(r);
        }
        if scenario == Scenario::Idle {
            let assets = Assets {
                docroot: docroot.clone(),
                cert: cert.clone(),
                key: key.clone(),
                combined: combined.clone(),
                tmp: tmp.0.clone(),
            };
            let r = run_idle(cfg, &missing, server_cpu, &assets, backend_port);
            write(&cfg.out.join("idle.md"), &report::idle_markdown(&r, cfg))?;
            write(&cfg.out.join("idle.svg"), &report::idle_svg(&r))?;
            idle_rows.extend(r);
        }
        if matches!(scenario, Scenario::Startup | Scenario::Idle) {
            if let Some(b) = backend {
                b.stop();
            }
            continue;
        }
        for case in scenarios::cases(scenario, cfg.quick) {
            // Every entrant of the case, with its row so far: rows that are
            // settled (not installed, no TLS) are pushed at once.
            let mut contenders: Vec<Contender> = Vec::new();
            for &server in &cfg.servers {
                if !scenario.applies_to(server) {
                    continue;
                }
                let mut row = Row {
                    scenario: scenario.name().into(),
                    case: case.label.clone(),
                    server: server.name().into(),
                    ..Row::default()
                };
                if missing.contains(&server) {
                    row.status = "not installed".into();
                    rows.push(row);
                    continue;
                }
                if scenario == Scenario::Php && php_missing {
                    row.status = "not installed (php-fpm)".into();
                    rows.push(row);
                    continue;
                }
                if case.tls && !server.tls() {
                    row.status = "not applicable (no TLS)".into();
                    rows.push(row);
                    continue;
                }
                if case.access_log && !server.logs_to_file() {
                    row.status =
                        "not applicable (logs to shared memory; varnishncsa not run)".into();
                    rows.push(row);
                    continue;
                }
                let upstream = ([127, 0, 0, 1], backend_port).into();
                let role = match scenario {
                    Scenario::Proxy => Role::Proxy(upstream),
                    Scenario::Seed001 if case.proxy => Role::Proxy(upstream),
                    Scenario::Compress => Role::Compress(upstream),
                    Scenario::Cache | Scenario::Chain => Role::Cache(upstream),
                    Scenario::Php => Role::Php(php_root.clone().unwrap_or_default()),
                    Scenario::Tcp => Role::Passthrough(upstream),
                    Scenario::App => Role::App(bench_exe.clone()),
                    _ => Role::Static(docroot.clone()),
                };
                let setup = |name: &str, role: Role| {
                    let dir = cfg
                        .out
                        .join("configs")
                        .join(scenario.name())
                        .join(slug(&case.label))
                        .join(name);
                    ServerSetup {
                        access_log: case.access_log.then(|| dir.join("access.log")),
                        max_connections: scenarios::max_connections(),
                        connections: case.connections,
                        dir,
                        port: cfg.port,
                        tls: case.tls,
                        role,
                        cert: cert.clone(),
                        key: key.clone(),
                        combined: combined.clone(),
                        workers: cfg.workers,
                        weir_accept: cfg.accept_for(server),
                        weir_site_keys: cfg.site_keys_for(server),
                        weir_sections: cfg.sections_for(server),
                        tmp: tmp.0.clone(),
                    }
                };
                contenders.push(Contender {
                    server,
                    name: server.name().into(),
                    setup: setup(server.name(), role),
                    row,
                    measured: Measured::default(),
                });
                // weir's own static-file rate for the body it caches, in
                // the same rounds as the caches.
                if scenario == Scenario::Cache && server == ServerKind::Weir {
                    let name = scenarios::WEIR_STATIC_ROW;
                    contenders.push(Contender {
                        server,
                        name: name.into(),
                        setup: setup(name, Role::Static(docroot.clone())),
                        row: Row {
                            scenario: scenario.name().into(),
                            case: case.label.clone(),
                            server: name.into(),
                            ..Row::default()
                        },
                        measured: Measured::default(),
                    });
                }
                // The passthrough's backend measured directly, in the same
                // rounds: weir's ratio to it is what passing through costs.
                if scenario == Scenario::Tcp && server == ServerKind::Weir {
                    let name = scenarios::BACKEND_DIRECT_ROW;
                    contenders.push(Contender {
                        server,
                        name: name.into(),
                        setup: setup(name, tls_backend_role(&docroot)),
                        row: Row {
                            scenario: scenario.name().into(),
                            case: case.label.clone(),
                            server: name.into(),
                            ..Row::default()
                        },
                        measured: Measured::default(),
                    });
                }
            }
            let expected = match scenario {
                Scenario::Proxy | Scenario::Cache | Scenario::Chain | Scenario::App => {
                    crate::backend::text_body(case.body_size)
                }
                Scenario::Seed001 if case.proxy => crate::backend::text_body(case.body_size),
                Scenario::Compress => crate::backend::json_body(case.body_size),
                Scenario::Php => scenarios::PHP_BODY.as_bytes().to_vec(),
                _ => expected_file(case.body_size),
            };
            let backend_ref = backend.as_ref().map(|b| BackendRef {
                pid: b.pid,
                port: backend_port,
            });
            // Rounds: each runs every server once (started, checked, warmed
            // up, measured, stopped), so a slow minute of the machine falls
            // on all of them alike instead of on whichever ran then.
            for repeat in 0..cfg.repeats.max(1) {
                let mut attempt = 0;
                loop {
                    // This round's repeats, kept apart until the round is
                    // accepted: a round with too much stolen CPU is measured
                    // again for every server, so rounds stay paired.
                    let mut this_round: Vec<Measured> =
                        contenders.iter().map(|_| Measured::default()).collect();
                    for at in round_order(repeat, contenders.len()) {
                        let c = &mut contenders[at];
                        let m = &mut this_round[at];
                        if c.row.status.is_empty() {
                            eprintln!(
                                "-- {} / {} / {} (round {} of {}{})",
                                scenario.name(),
                                case.label,
                                c.name,
                                repeat + 1,
                                cfg.repeats.max(1),
                                if attempt > 0 {
                                    format!(", measured again: {attempt}")
                                } else {
                                    String::new()
                                }
                            );
                            let r = run_server_round(
                                cfg,
                                c.server,
                                &c.name,
                                &c.setup,
                                &case,
                                scenario,
                                &expected,
                                server_cpu,
                                backend_ref,
                                repeat,
                                m,
                            );
                            if let Err(status) = r {
                                eprintln!(
                                    "weir-bench compare: *** {} {}: {status} ***",
                                    c.name, case.label
                                );
                                c.row.status = status;
                            }
                        }
                    }
                    let stolen = this_round
                        .iter()
                        .flat_map(|m| m.stolen.iter().copied())
                        .fold(0.0, f64::max);
                    if remeasure(stolen, cfg.max_stolen_pct, attempt, cfg.stolen_retries) {
                        attempt += 1;
                        eprintln!(
                            "   round {}: the hypervisor stole {stolen:.1} % of the CPU (more than --max-stolen {:.0} %): measuring it again",
                            repeat + 1,
                            cfg.max_stolen_pct
                        );
                        for c in &contenders {
                            keep_discarded(cfg, scenario, &case.label, &c.name, repeat, attempt);
                        }
                        continue;
                    }
                    for (c, mut m) in contenders.iter_mut().zip(this_round) {
                        m.remeasured = usize::from(attempt > 0);
                        c.measured.append(m);
                    }
                    break;
                }
            }
            for c in contenders {
                rows.push(if c.row.status.is_empty() {
                    c.measured
                        .row(scenario, &case, &c.name, backend_ref.is_some())
                } else {
                    c.row
                });
            }
        }
        if let Some(b) = backend {
            b.stop();
        }
        let scenario_rows: Vec<Row> = rows
            .iter()
            .filter(|r| r.scenario == scenario.name())
            .cloned()
            .collect();
        let md = report::markdown(scenario, &scenario_rows, cfg);
        write(&cfg.out.join(format!("{}.md", scenario.name())), &md)?;
        write(
            &cfg.out.join(format!("{}.svg", scenario.name())),
            &report::svg(scenario, &scenario_rows),
        )?;
    }
    let summary = Summary {
        run: cfg
            .out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        command: cfg.command.clone(),
        versions,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        pinned: cfg.pin.is_some(),
        mode: if cfg.pin.is_some() {
            "pinned"
        } else {
            "shared"
        }
        .into(),
        server_cpus: cfg
            .pin
            .as_ref()
            .map(|p| p.server.clone())
            .unwrap_or_default(),
        generator_cpus: cfg
            .pin
            .as_ref()
            .map(|p| p.generator.clone())
            .unwrap_or_default(),
        workers: cfg.workers,
        certificate: key_type,
        memory: "pss".into(),
        concurrency_min_measure_s: scenarios::CONCURRENCY_MIN_MEASURE.as_secs_f64(),
        upstream_idle_pool: servers::UPSTREAM_IDLE,
        keepalive_s: servers::KEEPALIVE_SECS,
        haproxy_maxconn: servers::haproxy_maxconn(scenarios::max_connections()),
        generator_copies_bodies: cfg.copy_bodies,
        repeats: cfg.repeats,
        duration_s: cfg.duration.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
        ratios: report::ratios(&rows),
        rows,
        startup: startup_rows,
        idle: idle_rows,
    };
    let json = serde_json::to_string_pretty(&summary).unwrap_or_default();
    write(&cfg.out.join("summary.json"), &json)?;
    write(&cfg.out.join("README.md"), &report::readme(&summary, cfg))?;
    let names: Vec<&str> = cfg.scenarios.iter().map(|s| s.name()).collect();
    let page = report::html(&cfg.out, &summary.run, &names)
        .map_err(|e| CompareError::io(&cfg.out.join("report.html"), e))?;
    write(&cfg.out.join("report.html"), &page)?;
    Ok(summary)
}

/// One entrant of a case: a server, under the name of its row (`weir-static`
/// is weir with another role), its setup and its measurements so far.
struct Contender {
    server: ServerKind,
    name: String,
    setup: ServerSetup,
    row: Row,
    measured: Measured,
}

/// The scenario's backend, as a round sees it.
#[derive(Debug, Clone, Copy)]
struct BackendRef {
    pid: u32,
    port: u16,
}

/// The requests `weir-bench backend` on `port` has answered so far.
fn backend_requests(port: u16) -> Result<u64, String> {
    let (status, body) = process::fetch(port, false, crate::backend::REQUESTS_PATH)
        .map_err(|e| format!("failed: the backend's request count: {e}"))?;
    String::from_utf8_lossy(&body)
        .trim()
        .parse()
        .ok()
        .filter(|_| status == 200)
        .ok_or_else(|| format!("failed: the backend's request count: {status} {body:?}"))
}

/// The run's temporary folder ([`ServerSetup::tmp`]): on `/dev/shm` (RAM)
/// where the machine has it, else in the system's temporary folder; named
/// for this process, so two runs never share one; removed when dropped.
struct RunTmp(PathBuf);

impl RunTmp {
    fn create() -> Result<RunTmp, CompareError> {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("weir-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| CompareError::io(&dir, e))?;
        // Varnish's and nginx's unprivileged processes work inside it.
        open_perms(&dir, true);
        Ok(RunTmp(dir))
    }
}

impl Drop for RunTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Starts `weir-bench backend` for `scenario`: its answer's size and delay.
fn start_backend(
    cfg: &CompareConfig,
    port: u16,
    scenario: Scenario,
    cpu: Option<&[usize]>,
) -> Result<Running, CompareError> {
    if !process::port_free(port) {
        return Err(CompareError::PortInUse(port));
    }
    let exe = std::env::current_exe().map_err(|e| CompareError::Backend(e.to_string()))?;
    let launch = servers::Launch {
        program: exe,
        args: vec![
            "backend".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--size".into(),
            scenario.backend_size().to_string(),
            "--delay".into(),
            scenario.backend_delay().as_millis().to_string(),
        ],
        env: vec![],
        config: PathBuf::new(),
        validate: None,
        stdout: None,
        companions: vec![],
    };
    let mut r = Running::start(&launch, &cfg.out.join("backend.log"), cpu)
        .map_err(|e| CompareError::Backend(e.to_string()))?;
    r.wait_ready(port, Duration::from_secs(5))
        .map_err(CompareError::Backend)?;
    Ok(r)
}

/// The `tcp` scenario's TLS backend's role: the docroot as the site
/// [`scenarios::TCP_HOST`], whose name the client sends.
fn tls_backend_role(docroot: &Path) -> Role {
    Role::Sites(vec![(scenarios::TCP_HOST.into(), docroot.to_path_buf())])
}

/// Starts the `tcp` scenario's backend: weir serving the docroot over TLS
/// with the run's certificate on `port`, as its own process (on the
/// generator's CPUs when pinned, as `weir-bench backend`), checked before
/// any front is measured. Its config is in `configs/tcp/backend`.
fn start_tls_backend(
    cfg: &CompareConfig,
    port: u16,
    assets: &Assets,
    cpu: Option<&[usize]>,
) -> Result<Running, CompareError> {
    if !process::port_free(port) {
        return Err(CompareError::PortInUse(port));
    }
    let setup = ServerSetup {
        dir: cfg.out.join("configs/tcp/backend"),
        port,
        tls: true,
        role: tls_backend_role(&assets.docroot),
        cert: assets.cert.clone(),
        key: assets.key.clone(),
        combined: assets.combined.clone(),
        workers: cfg.workers,
        weir_accept: None,
        weir_site_keys: None,
        weir_sections: None,
        access_log: None,
        max_connections: scenarios::max_connections(),
        connections: 100,
        tmp: assets.tmp.clone(),
    };
    let fail =
        |e: String| CompareError::Backend(format!("the tcp scenario's TLS backend (weir): {e}"));
    let launch = prepare_validated(ServerKind::Weir, &setup, cfg.weirs()).map_err(fail)?;
    let log = setup.dir.join("server.log");
    let mut r = Running::start(&launch, &log, cpu).map_err(|e| fail(e.to_string()))?;
    let checked = r.wait_ready(port, Duration::from_secs(10)).and_then(|()| {
        let (status, body) = process::fetch_as(port, true, scenarios::TCP_HOST, "/index.html")?;
        if status == 200 && body == expected_file(164) {
            Ok(())
        } else {
            Err(format!(
                "GET /index.html gave {status} with {} body bytes",
                body.len()
            ))
        }
    });
    if let Err(e) = checked {
        r.stop();
        return Err(fail(format!("{e}; log: {}", tail(&log))));
    }
    Ok(r)
}

/// The docroot of the `php` scenario, holding its page.
fn prepare_php_root(out: &Path) -> Result<PathBuf, CompareError> {
    let root = out.join(scenarios::PHP_ROOT);
    std::fs::create_dir_all(&root).map_err(|e| CompareError::io(&root, e))?;
    open_perms(&root, true);
    let (name, text) = scenarios::PHP_PAGE;
    let page = root.join(name);
    write(&page, text)?;
    open_perms(&page, false);
    Ok(root)
}

/// php-fpm's version line (`PHP 8.2.… (fpm-fcgi)`).
fn php_fpm_version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.chars().take(100).collect())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..]
        .join(" | ")
        .chars()
        .take(300)
        .collect()
}

/// One server's repeats so far.
#[derive(Default)]
struct Measured {
    reports: Vec<LoadReport>,
    cpus: Vec<f64>,
    bcpus: Vec<f64>,
    stolen: Vec<f64>,
    idle_pss: Vec<u64>,
    peak_pss: u64,
    idle_rss: Vec<u64>,
    peak_rss: u64,
    /// Rounds measured again for stolen CPU.
    remeasured: usize,
    /// Caching scenarios: requests the backend answered during each load.
    backend_requests: Vec<u64>,
}

impl Measured {
    /// Adds one round's repeat.
    fn append(&mut self, round: Measured) {
        self.reports.extend(round.reports);
        self.cpus.extend(round.cpus);
        self.bcpus.extend(round.bcpus);
        self.stolen.extend(round.stolen);
        self.idle_pss.extend(round.idle_pss);
        self.peak_pss = self.peak_pss.max(round.peak_pss);
        self.idle_rss.extend(round.idle_rss);
        self.peak_rss = self.peak_rss.max(round.peak_rss);
        self.remeasured += round.remeasured;
        self.backend_requests.extend(round.backend_requests);
    }

    /// The row: medians over the repeats, min–max of req/s, the highest peak.
    fn row(self, scenario: Scenario, case: &Case, server: &str, backend: bool) -> Row {
        let reports = &self.reports;
        let med = |f: &dyn Fn(&LoadReport) -> f64| median(reports.iter().map(f).collect());
        let rps: Vec<f64> = reports.iter().map(|r| r.requests_per_sec).collect();
        let idle = median(self.idle_rss.iter().map(|&b| b as f64).collect());
        let idle_pss = median(self.idle_pss.iter().map(|&b| b as f64).collect());
        Row {
            scenario: scenario.name().into(),
            case: case.label.clone(),
            server: server.into(),
            status: "ok".into(),
            repeats: reports.len(),
            rps_median: median(rps.clone()),
            rps_by_round: rps.clone(),
            rps_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
            rps_max: rps.iter().copied().fold(0.0, f64::max),
            p50_ms: med(&|r| r.latency_ms.p50),
            p99_ms: med(&|r| r.latency_ms.p99),
            p99_corrected_ms: med(&|r| r.latency_corrected_ms.map_or(r.latency_ms.p99, |p| p.p99)),
            mean_ms: med(&|r| r.latency_ms.mean),
            max_ms: reports.iter().map(|r| r.latency_ms.max).fold(0.0, f64::max),
            ok_responses: med(&|r| r.successes as f64) as u64,
            non_2xx: med(&|r| (r.responses - r.successes) as f64) as u64,
            client_errors: med(&|r| r.errors.total() as f64) as u64,
            non_2xx_max: reports
                .iter()
                .map(|r| r.responses.saturating_sub(r.successes))
                .max()
                .unwrap_or(0),
            client_errors_max: reports.iter().map(|r| r.errors.total()).max().unwrap_or(0),
            unanswered: med(&|r| r.unanswered as f64) as u64,
            server_cpu: median(self.cpus),
            backend_cpu: backend.then(|| median(self.bcpus)),
            pss_idle_mib: idle_pss / 1048576.0,
            pss_peak_mib: self.peak_pss as f64 / 1048576.0,
            rss_idle_mib: idle / 1048576.0,
            rss_peak_mib: self.peak_rss as f64 / 1048576.0,
            generator_cpu: med(&|r| r.generator.cores.unwrap_or(0.0)),
            generator_cpu_bound: reports.iter().any(|r| r.generator.cpu_bound),
            stolen_pct: median(self.stolen.clone()),
            stolen_pct_max: self.stolen.iter().copied().fold(0.0, f64::max),
            rounds_remeasured: self.remeasured,
            backend_requests_max: self.backend_requests.iter().copied().max(),
            bytes_per_response: med(&bytes_per_response),
        }
    }
}

/// What one response weighed on the wire, on average, in a repeat.
fn bytes_per_response(r: &LoadReport) -> f64 {
    r.bytes as f64 / r.responses.max(1) as f64
}

/// Whether a round whose repeats saw `stolen` % of the machine's CPU taken
/// by the hypervisor (the most of any of its servers) is measured again:
/// above `max`, while `attempt` (times already measured again) is below
/// `retries`. The last attempt is kept whatever it saw, and the report's
/// stolen column shows it.
fn remeasure(stolen: f64, max: f64, attempt: usize, retries: usize) -> bool {
    stolen > max && attempt < retries
}

/// Renames a discarded repeat's raw record `<server>-<n>.json` to
/// `<server>-<n>-stolen-<attempt>.json`, so the run folder keeps it and the
/// next attempt's record takes its name.
fn keep_discarded(
    cfg: &CompareConfig,
    scenario: Scenario,
    case: &str,
    server: &str,
    repeat: usize,
    attempt: usize,
) {
    let dir = raw_dir(cfg, scenario, case);
    let name = raw_name(server, repeat);
    let kept = name.replace(".json", &format!("-stolen-{attempt}.json"));
    let _ = std::fs::rename(dir.join(name), dir.join(kept));
}

/// The folder of one case's raw records.
fn raw_dir(cfg: &CompareConfig, scenario: Scenario, case: &str) -> PathBuf {
    cfg.out.join("raw").join(scenario.name()).join(slug(case))
}

/// The raw record's name of `server`'s (a row's name) repeat `repeat` (from 0).
fn raw_name(server: &str, repeat: usize) -> String {
    format!("{server}-{}.json", repeat + 1)
}

/// The order in which round `round` runs `n` servers: a Williams design.
///
/// A fixed order gives each server the same place in every round and the
/// same server before it, so whatever a place or a predecessor does to a
/// measurement (the backend still closing the last proxy's connections, a
/// machine that slows through a round) falls on one server every time and
/// becomes part of its ratio. In a Williams square each server runs first,
/// second, … equally often, and directly after each other server equally
/// often: over `n` rounds for an even `n`, over `2n` (the square and its
/// mirror) for an odd one. Rounds beyond that start the cycle again.
fn round_order(round: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    // The first row: 0, 1, n-1, 2, n-2, 3, …
    let first: Vec<usize> = (0..n)
        .map(|j| {
            if j % 2 == 1 {
                j.div_ceil(2)
            } else {
                (n - j / 2) % n
            }
        })
        .collect();
    let rows = if n.is_multiple_of(2) { n } else { 2 * n };
    let r = round % rows;
    let mut order: Vec<usize> = first.iter().map(|&f| (f + r % n) % n).collect();
    if r >= n {
        order.reverse();
    }
    order
}

/// One round for one server: start it, check its answer, measure repeat
/// `repeat` (after its warm-up) into `into`, stop it.
#[allow(clippy::too_many_arguments)]
fn run_server_round(
    cfg: &CompareConfig,
    server: ServerKind,
    name: &str,
    setup: &ServerSetup,
    case: &Case,
    scenario: Scenario,
    expected: &[u8],
    cpu: Option<&[usize]>,
    backend: Option<BackendRef>,
    repeat: usize,
    into: &mut Measured,
) -> Result<(), String> {
    let launch = prepare_validated(server, setup, cfg.weirs())?;
    if let Some(log) = &setup.access_log {
        let _ = std::fs::remove_file(log);
    }
    let companion_ports = launch.companions.iter().filter_map(|c| match c.ready {
        servers::Ready::Port(p) => Some(p),
        servers::Ready::Unix(_) => None,
    });
    for port in std::iter::once(setup.port).chain(companion_ports) {
        if !process::port_free(port) {
            return Err(format!("failed: port {port} in use"));
        }
    }
    // A cache's misses are the backend's requests: counted around the checks
    // and the load.
    let cache_backend = match (&setup.role, backend) {
        (Role::Cache(_), Some(b)) => Some(b.port),
        _ => None,
    };
    let log = setup.dir.join("server.log");
    let mut running =
        Running::start(&launch, &log, cpu).map_err(|e| format!("failed to start: {e}"))?;
    let result = (|| {
        running
            .wait_ready(setup.port, Duration::from_secs(10))
            .map_err(|e| format!("failed to start: {e}; log: {}", tail(&log)))?;
        if let Some(cpus) = cpu {
            for pid in running.pids() {
                procstat::tree_confined(pid, cpus)
                    .map_err(|e| format!("failed: pinning did not take: {e}"))?;
            }
        }
        if let Role::App(_) = setup.role {
            wait_for_app(setup, case, expected, running.pid, server)?;
        }
        check_answer(setup, case, expected)?;
        if let Some(port) = cache_backend {
            // The first GET filled the cache; the second must come from it.
            let before = backend_requests(port)?;
            check_answer(setup, case, expected)?;
            let after = backend_requests(port)?;
            if after != before {
                return Err(format!(
                    "failed check: a second GET {} went to the backend: not answered from the cache",
                    case.path
                ));
            }
        }
        measure_repeat(
            cfg,
            name,
            setup,
            case,
            scenario,
            &running.pids(),
            backend,
            cache_backend,
            repeat,
            into,
        )
    })();
    running.stop();
    // The log only had to be written; kept, the features-on row's would fill
    // the disk (its size is in the raw record).
    if let Some(log) = &setup.access_log {
        let _ = std::fs::remove_file(log);
    }
    result
}

/// Waits for a server's app: weir listens before its instances are ready
/// (it answers 503 until one is), so the first good answer may take the
/// app's start; then weir must be running all [`servers::APP_INSTANCES`]
/// of it, or it would be measured with fewer processes than the others.
fn wait_for_app(
    setup: &ServerSetup,
    case: &Case,
    expected: &[u8],
    pid: u32,
    server: ServerKind,
) -> Result<(), String> {
    let limit = Duration::from_secs(30);
    let start = Instant::now();
    while let Err(e) = check_answer(setup, case, expected) {
        if start.elapsed() > limit {
            return Err(format!("{e} (the app was not ready after {limit:?})"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !matches!(server, ServerKind::Weir | ServerKind::WeirB) {
        return Ok(());
    }
    loop {
        let apps = procstat::process_tree(pid).len() - 1;
        if apps == servers::APP_INSTANCES {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!(
                "failed check: weir runs {apps} app process(es), not {}",
                servers::APP_INSTANCES
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// GETs the case's path once and checks the status and the exact body;
/// for a case whose answers must be encoded, GETs it again with the case's
/// headers and checks that it comes back in a content coding and smaller.
fn check_answer(setup: &ServerSetup, case: &Case, expected: &[u8]) -> Result<(), String> {
    let (status, body) = process::fetch_as(setup.port, setup.tls, case.host, &case.path)
        .map_err(|e| format!("failed check: {e}"))?;
    if status != 200 || body != expected {
        return Err(format!(
            "failed check: GET {} gave {status} with {} body bytes, expected 200 with {}",
            case.path,
            body.len(),
            expected.len()
        ));
    }
    if case.encoded {
        let f = process::fetch_with(setup.port, setup.tls, case.host, &case.path, &case.headers)
            .map_err(|e| format!("failed check: {e}"))?;
        encoded_answer(&f, expected.len())?;
    }
    Ok(())
}

/// An answer that should have been compressed was: 200, a content coding,
/// and fewer bytes than the identity's `identity_len`.
fn encoded_answer(f: &process::Fetched, identity_len: usize) -> Result<(), String> {
    match &f.content_encoding {
        Some(coding) if f.status == 200 && f.body.len() < identity_len => Ok(()),
        coding => Err(format!(
            "failed check: not compressed: {} with Content-Encoding {coding:?} and {} body bytes \
             (the identity has {identity_len})",
            f.status,
            f.body.len()
        )),
    }
}

/// Measures one repeat of a running server (`pids`: its processes, each
/// with its tree; `name`: its row's). With `cache_backend`, the backend's
/// port behind a cache, the load may cost the backend at most
/// [`scenarios::misses_allowed`] requests.
#[allow(clippy::too_many_arguments)]
fn measure_repeat(
    cfg: &CompareConfig,
    name: &str,
    setup: &ServerSetup,
    case: &Case,
    scenario: Scenario,
    pids: &[u32],
    backend: Option<BackendRef>,
    cache_backend: Option<u16>,
    repeat: usize,
    into: &mut Measured,
) -> Result<(), String> {
    let backend_pid = backend.map(|b| b.pid);
    std::thread::sleep(Duration::from_millis(300));
    let idle = procstat::sample(pids);
    into.idle_pss.push(idle.pss);
    into.peak_pss = into.peak_pss.max(idle.pss);
    into.idle_rss.push(idle.rss);
    into.peak_rss = into.peak_rss.max(idle.rss);
    let raw_dir = raw_dir(cfg, scenario, &case.label);
    std::fs::create_dir_all(&raw_dir).map_err(|e| format!("failed: {e}"))?;
    let mut lc = load_config(cfg, setup, case);
    if let Amount::Requests(_) = case.amount {
        // A fixed request count cannot contain its own warm-up: warm up apart.
        let mut w = lc.clone();
        w.requests = None;
        w.duration = Some(cfg.warmup.max(Duration::from_millis(200)));
        w.warmup = Duration::ZERO;
        load::run(&w).map_err(|e| format!("failed: {e}"))?;
        lc.warmup = Duration::ZERO;
    }
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let requests_before = cache_backend.map(backend_requests).transpose()?;
    let sampler = Sampler::start(pids.to_vec(), backend_pid);
    let measure_from = Instant::now() + lc.warmup;
    let load_started = Instant::now();
    let report = load::run(&lc).map_err(|e| format!("failed: {e}"))?;
    let load_time = load_started.elapsed();
    let samples = sampler.finish();
    let backend_requests = match (cache_backend, requests_before) {
        (Some(port), Some(before)) => Some(backend_requests(port)?.saturating_sub(before)),
        _ => None,
    };
    let window: Vec<_> = samples.iter().filter(|s| s.at >= measure_from).collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let (cpu, bcpu, stolen) = match (window.first(), window.last()) {
        (Some(a), Some(b)) if b.at > a.at => {
            let dt = b.at.duration_since(a.at).as_secs_f64();
            (
                b.server.cpu.saturating_sub(a.server.cpu).as_secs_f64() / dt,
                b.backend.cpu.saturating_sub(a.backend.cpu).as_secs_f64() / dt,
                100.0 * b.steal.saturating_sub(a.steal).as_secs_f64() / (dt * cpus),
            )
        }
        _ => (0.0, 0.0, 0.0),
    };
    let rss_peak = samples.iter().map(|s| s.server.rss).max().unwrap_or(0);
    let pss_peak = samples.iter().map(|s| s.server.pss).max().unwrap_or(0);
    into.peak_rss = into.peak_rss.max(rss_peak);
    into.peak_pss = into.peak_pss.max(pss_peak);
    // A features-on row whose server wrote no log measured something else.
    let access_log_bytes = setup
        .access_log
        .as_ref()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()));
    if access_log_bytes == Some(0) {
        return Err("failed: the server wrote no access log".into());
    }
    into.cpus.push(cpu);
    into.bcpus.push(bcpu);
    into.stolen.push(stolen);
    into.backend_requests.extend(backend_requests);
    let rec = RepeatRecord {
        server: name,
        scenario: scenario.name(),
        case: &case.label,
        repeat,
        started_unix_ms,
        server_cpu_cores: cpu,
        backend_cpu_cores: backend_pid.map(|_| bcpu),
        pss_peak_bytes: pss_peak,
        rss_peak_bytes: rss_peak,
        access_log_bytes,
        backend_requests,
        machine_stolen_pct: stolen,
        load: &report,
    };
    let path = raw_dir.join(raw_name(name, repeat));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&rec).unwrap_or_default(),
    )
    .map_err(|e| format!("failed: {e}"))?;
    eprintln!(
        "   repeat {}: {:.0} req/s, p99 {:.2} ms, errors {}, server CPU {:.2}{}",
        repeat + 1,
        report.requests_per_sec,
        report.latency_ms.p99,
        report.errors.total(),
        cpu,
        backend_requests.map_or(String::new(), |n| format!(
            ", backend requests {n} (misses) for {} responses",
            report.responses
        ))
    );
    if let Some(n) = backend_requests {
        let allowed = scenarios::misses_allowed(load_time);
        if n > allowed {
            return Err(format!(
                "failed: not answered from the cache: the backend answered {n} requests during the load \
                 (at most {allowed} allowed)"
            ));
        }
    }
    into.reports.push(report);
    Ok(())
}

/// Writes `server`'s config for `setup` and runs its own config check;
/// `Err` is the row's status text.
fn prepare_validated(
    server: ServerKind,
    setup: &ServerSetup,
    weirs: servers::Weirs<'_>,
) -> Result<servers::Launch, String> {
    let launch = server.prepare(setup, weirs).map_err(|e| e.to_string())?;
    let checks = launch
        .companions
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.launch.validate.as_ref()?)))
        .chain(launch.validate.as_ref().map(|v| (server.name(), v)));
    for (name, v) in checks {
        let out = std::process::Command::new(&v[0])
            .args(&v[1..])
            .output()
            .map_err(|e| format!("failed: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first: String = err
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            return Err(if name == server.name() {
                format!("config rejected: {first}")
            } else {
                format!("config rejected ({name}): {first}")
            });
        }
    }
    Ok(launch)
}

/// The run's certificate and docroot paths, and its temporary folder.
struct Assets {
    docroot: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    combined: PathBuf,
    tmp: PathBuf,
}

/// The servers a scenario applies to, each with `Err(status)` when it
/// cannot be measured at all (missing binary, no TLS).
fn participants(
    cfg: &CompareConfig,
    scenario: Scenario,
    tls: bool,
    missing: &[ServerKind],
) -> Vec<(ServerKind, Result<(), String>)> {
    cfg.servers
        .iter()
        .filter(|&&s| scenario.applies_to(s))
        .map(|&s| {
            let ok = if missing.contains(&s) {
                Err("not installed".to_string())
            } else if tls && !s.tls() {
                Err("not applicable (no TLS)".to_string())
            } else {
                Ok(())
            };
            (s, ok)
        })
        .collect()
}

/// The `startup` scenario: writes the sites, then times each server's starts.
fn run_startup(
    cfg: &CompareConfig,
    missing: &[ServerKind],
    cpu: Option<&[usize]>,
    tmp: &Path,
) -> Result<Vec<StartupRow>, CompareError> {
    let case = scenarios::cases(Scenario::Startup, cfg.quick)
        .into_iter()
        .next()
        .ok_or_else(|| CompareError::NotApplicable("startup has no case".into()))?;
    let sites_dir = cfg.out.join("sites");
    let mut sites = Vec::new();
    for i in 1..=scenarios::STARTUP_SITES {
        let root = sites_dir.join(format!("site{i}"));
        std::fs::create_dir_all(&root).map_err(|e| CompareError::io(&root, e))?;
        open_perms(&sites_dir, true);
        open_perms(&root, true);
        let file = root.join(case.path.trim_start_matches('/'));
        let page = startup::site_page(i, case.body_size);
        std::fs::write(&file, &page).map_err(|e| CompareError::io(&file, e))?;
        open_perms(&file, false);
        sites.push((startup::site_name(i), root));
    }
    let host = startup::probe_host(scenarios::STARTUP_SITES);
    let page = startup::site_page(scenarios::STARTUP_SITES, case.body_size);
    let raw_dir = cfg.out.join("raw/startup").join(slug(&case.label));
    std::fs::create_dir_all(&raw_dir).map_err(|e| CompareError::io(&raw_dir, e))?;
    let mut rows = Vec::new();
    for (server, usable) in participants(cfg, Scenario::Startup, false, missing) {
        let mut row = StartupRow {
            case: case.label.clone(),
            server: server.name().into(),
            ..StartupRow::default()
        };
        eprintln!("-- startup / {} / {}", case.label, server.name());
        let setup = ServerSetup {
            dir: cfg
                .out
                .join("configs/startup")
                .join(slug(&case.label))
                .join(server.name()),
            port: cfg.port,
            tls: false,
            role: Role::Sites(sites.clone()),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            combined: PathBuf::new(),
            workers: cfg.workers,
            weir_accept: cfg.accept_for(server),
            weir_site_keys: cfg.site_keys_for(server),
            weir_sections: cfg.sections_for(server),
            access_log: None,
            max_connections: scenarios::max_connections(),
            connections: 1,
            tmp: tmp.to_path_buf(),
        };
        let measured = usable.and_then(|()| {
            let launch = prepare_validated(server, &setup, cfg.weirs())?;
            startup::measure(
                &launch,
                &setup.dir,
                setup.port,
                &host,
                &case.path,
                &page,
                cfg.repeats,
                cpu,
            )
        });
        match measured {
            Ok((samples, probes)) => {
                row.status = "ok".into();
                row.repeats = samples.len();
                row.median_ms = median(samples.clone());
                row.min_ms = samples.iter().copied().fold(f64::INFINITY, f64::min);
                row.max_ms = samples.iter().copied().fold(0.0, f64::max);
                row.samples_ms = samples;
                row.probes = probes;
            }
            Err(status) => {
                if status != "not installed" {
                    eprintln!(
                        "weir-bench compare: *** {} startup: {status} ***",
                        server.name()
                    );
                }
                row.status = status;
            }
        }
        let path = raw_dir.join(format!("{}.json", server.name()));
        write(
            &path,
            &serde_json::to_string_pretty(&row).unwrap_or_default(),
        )?;
        rows.push(row);
    }
    Ok(rows)
}

/// The `idle` scenario: memory per held HTTPS keep-alive connection.
fn run_idle(
    cfg: &CompareConfig,
    missing: &[ServerKind],
    cpu: Option<&[usize]>,
    assets: &Assets,
    backend_port: u16,
) -> Vec<IdleRow> {
    let mut rows = Vec::new();
    for case in scenarios::cases(Scenario::Idle, cfg.quick) {
        let raw_dir = cfg.out.join("raw/idle").join(slug(&case.label));
        for (server, usable) in participants(cfg, Scenario::Idle, case.tls, missing) {
            eprintln!("-- idle / {} / {}", case.label, server.name());
            let proxied = Scenario::Idle.proxied(server);
            let setup = ServerSetup {
                dir: cfg
                    .out
                    .join("configs/idle")
                    .join(slug(&case.label))
                    .join(server.name()),
                port: cfg.port,
                tls: true,
                role: if proxied {
                    Role::Proxy(([127, 0, 0, 1], backend_port).into())
                } else {
                    Role::Static(assets.docroot.clone())
                },
                cert: assets.cert.clone(),
                key: assets.key.clone(),
                combined: assets.combined.clone(),
                workers: cfg.workers,
                weir_accept: cfg.accept_for(server),
                weir_site_keys: cfg.site_keys_for(server),
                weir_sections: cfg.sections_for(server),
                access_log: None,
                max_connections: scenarios::max_connections(),
                connections: scenarios::cases(Scenario::Idle, cfg.quick)
                    .first()
                    .map_or(1, |c| c.connections),
                tmp: assets.tmp.clone(),
            };
            let icase = IdleCase {
                connections: case.connections,
                path: if proxied {
                    "/".into()
                } else {
                    case.path.clone()
                },
                expected: if proxied {
                    crate::backend::text_body(case.body_size)
                } else {
                    expected_file(case.body_size)
                },
                open_limit: if cfg.quick {
                    Duration::from_secs(30)
                } else {
                    Duration::from_secs(180)
                },
            };
            let measured = usable.and_then(|()| {
                let launch = prepare_validated(server, &setup, cfg.weirs())?;
                std::fs::create_dir_all(&raw_dir).map_err(|e| format!("failed: {e}"))?;
                let mut recs = Vec::new();
                for r in 1..=cfg.repeats.max(1) {
                    if !process::port_free(setup.port) {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    let log = setup.dir.join(format!("server-{r}.log"));
                    let rec =
                        idle::repeat(&launch, &log, setup.port, &icase, cpu, r, server.name())?;
                    let path = raw_dir.join(format!("{}-{r}.json", server.name()));
                    std::fs::write(
                        &path,
                        serde_json::to_string_pretty(&rec).unwrap_or_default(),
                    )
                    .map_err(|e| format!("failed: {e}"))?;
                    recs.push(rec);
                }
                Ok(recs)
            });
            let row = match measured {
                Ok(recs) => idle::aggregate(&case.label, server.name(), case.connections, &recs),
                Err(status) => {
                    if status != "not installed" {
                        eprintln!(
                            "weir-bench compare: *** {} idle: {status} ***",
                            server.name()
                        );
                    }
                    IdleRow {
                        case: case.label.clone(),
                        server: server.name().into(),
                        status,
                        connections: case.connections as u64,
                        ..IdleRow::default()
                    }
                }
            };
            rows.push(row);
        }
    }
    rows
}

/// Samples a process tree every 200 ms on a thread until stopped.
/// One reading of the sampler.
struct Tick {
    at: Instant,
    server: procstat::TreeSample,
    backend: procstat::TreeSample,
    /// The machine's stolen CPU time so far.
    steal: Duration,
}

impl Tick {
    fn now(server: &[u32], backend: Option<u32>) -> Tick {
        Tick {
            at: Instant::now(),
            server: procstat::sample(server),
            backend: backend.map(|b| procstat::sample(&[b])).unwrap_or_default(),
            steal: procstat::machine_steal().unwrap_or_default(),
        }
    }
}

struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Tick>>,
}

impl Sampler {
    fn start(server: Vec<u32>, backend: Option<u32>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut v = Vec::new();
            while !s.load(Ordering::Relaxed) {
                v.push(Tick::now(&server, backend));
                std::thread::sleep(Duration::from_millis(200));
            }
            v.push(Tick::now(&server, backend));
            v
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> Vec<Tick> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn load_config(cfg: &CompareConfig, setup: &ServerSetup, case: &Case) -> LoadConfig {
    let scheme = if setup.tls { "https" } else { "http" };
    let mut l = LoadConfig::new(&format!("{scheme}://127.0.0.1:{}{}", setup.port, case.path));
    l.connections = case.connections;
    l.threads = case.threads;
    l.keepalive = case.keepalive;
    l.insecure = true;
    l.sni = Some(case.host.into());
    l.headers = vec![("Host".into(), case.host.into())];
    l.headers.extend(
        case.headers
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string())),
    );
    l.timeout = case.timeout;
    l.warmup = case.warmed_for(cfg.warmup);
    l.copy_bodies = cfg.copy_bodies;
    match case.amount {
        Amount::Duration => l.duration = Some(case.measured_for(cfg.duration)),
        Amount::Requests(n) => l.requests = Some(n),
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_give_every_server_each_place_and_each_predecessor_equally_often() {
        for n in 1..=6usize {
            let rows = if n.is_multiple_of(2) { n } else { 2 * n };
            let mut place = vec![vec![0usize; n]; n];
            let mut after = vec![vec![0usize; n]; n];
            for round in 0..rows {
                let order = round_order(round, n);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n={n} round {round}");
                for (at, &s) in order.iter().enumerate() {
                    place[s][at] += 1;
                }
                for w in order.windows(2) {
                    after[w[1]][w[0]] += 1;
                }
                // The cycle starts again after `rows` rounds.
                assert_eq!(round_order(round + rows, n), order);
            }
            let per_place = rows / n;
            assert!(
                place.iter().flatten().all(|&c| c == per_place),
                "n={n}: {place:?}"
            );
            if n > 1 {
                let per_pair = rows / n;
                for (s, row) in after.iter().enumerate() {
                    for (p, &c) in row.iter().enumerate() {
                        let want = if s == p { 0 } else { per_pair };
                        assert_eq!(c, want, "n={n}: {s} after {p}: {after:?}");
                    }
                }
            }
        }
        // Not the fixed order any more: the first round is weir first, the
        // second is not.
        assert_eq!(round_order(0, 3)[0], 0);
        assert_ne!(round_order(1, 3)[0], 0);
        assert!(round_order(0, 0).is_empty());
    }

    #[test]
    fn a_round_with_too_much_stolen_cpu_is_measured_again_a_bounded_number_of_times() {
        assert!(!remeasure(4.0, 10.0, 0, 2), "under the bound: kept");
        assert!(!remeasure(10.0, 10.0, 0, 2), "at the bound: kept");
        assert!(remeasure(10.5, 10.0, 0, 2));
        assert!(remeasure(40.0, 10.0, 1, 2));
        assert!(!remeasure(40.0, 10.0, 2, 2), "retries spent: kept");
        assert!(
            !remeasure(40.0, 100.0, 0, 2),
            "--max-stolen 100 never retries"
        );
    }

    #[test]
    fn an_accepted_round_adds_its_repeat_and_keeps_the_highest_peak() {
        let round = |stolen: f64, peak: u64, remeasured: usize| Measured {
            cpus: vec![1.0],
            bcpus: vec![0.5],
            stolen: vec![stolen],
            idle_rss: vec![peak / 2],
            peak_rss: peak,
            remeasured,
            ..Measured::default()
        };
        let mut m = Measured::default();
        m.append(round(2.0, 300, 0));
        m.append(round(30.0, 200, 1));
        assert_eq!(m.stolen, vec![2.0, 30.0]);
        assert_eq!(m.cpus.len(), 2);
        assert_eq!(m.idle_rss, vec![150, 100]);
        assert_eq!(m.peak_rss, 300);
        assert_eq!(m.remeasured, 1);
    }

    fn config(warmup: Duration, duration: Duration) -> CompareConfig {
        CompareConfig {
            repeats: 3,
            duration,
            warmup,
            ..CompareConfig::for_tests(Scenario::App)
        }
    }

    #[test]
    fn an_app_level_is_warmed_up_10_s_and_measured_30_s_however_short_the_run_asks() {
        let cfg = config(Duration::from_secs(3), Duration::from_secs(15));
        let setup = ServerSetup {
            dir: "d".into(),
            port: 28080,
            tls: true,
            role: Role::App("weir-bench".into()),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            combined: PathBuf::new(),
            workers: 2,
            weir_accept: None,
            weir_site_keys: None,
            weir_sections: None,
            access_log: None,
            max_connections: 19_000,
            connections: 5000,
            tmp: PathBuf::new(),
        };
        let [c5000, _] = &scenarios::cases(Scenario::App, false)[..] else {
            panic!("two levels");
        };
        let l = load_config(&cfg, &setup, c5000);
        assert_eq!(l.url, "https://127.0.0.1:28080/");
        assert_eq!((l.connections, l.threads, l.keepalive), (5000, 2, true));
        assert_eq!(l.warmup, Duration::from_secs(10));
        assert_eq!(l.duration, Some(Duration::from_secs(30)));
        assert_eq!(l.timeout, Duration::from_secs(10));
        // Other scenarios keep the run's warm-up.
        let [http, _] = &scenarios::cases(Scenario::Static, false)[..] else {
            panic!("static: two cases");
        };
        assert_eq!(
            load_config(&cfg, &setup, http).warmup,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn a_row_keeps_the_worst_repeats_non_2xx_and_client_errors_beside_the_medians() {
        let report = |non_2xx: u64, timeouts: u64| LoadReport {
            responses: 100,
            successes: 100 - non_2xx,
            errors: load::report::Errors {
                timeout: timeouts,
                ..Default::default()
            },
            ..LoadReport::default()
        };
        let m = Measured {
            reports: vec![report(0, 0), report(0, 0), report(7, 2)],
            ..Measured::default()
        };
        let case = &scenarios::cases(Scenario::App, true)[0];
        let row = m.row(Scenario::App, case, "weir", false);
        assert_eq!((row.non_2xx, row.client_errors), (0, 0), "medians");
        assert_eq!((row.non_2xx_max, row.client_errors_max), (7, 2));
        assert_eq!(row.backend_cpu, None);
    }
}
