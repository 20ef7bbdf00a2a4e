//! The `weir-bench` command line: `load`, `backend`, `hold`, `relay` and
//! `compare`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

use weir_bench::{backend, compare, hold, load, relay};

#[derive(Parser)]
#[command(
    name = "weir-bench",
    version,
    about = "Honest HTTP benchmarks: load generator, test backend, server comparison"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load-test one URL (closed loop with -c, open loop with --rate).
    Load(LoadArgs),
    /// Run a small fast upstream app (fixed body, optional delay).
    Backend(BackendArgs),
    /// Run scenarios against weir and its competitors, side by side.
    Compare(CompareArgs),
    /// Open N connections (one GET each, keep-alive) and hold them idle.
    Hold(HoldArgs),
    /// Copy bytes between each client and its own upstream connection, with
    /// no HTTP at all: the fastest any proxy could be on this machine.
    Relay(RelayArgs),
    /// weir's per-round ratio to each competitor over the rounds of several
    /// compare runs together, with the interval of its median (Markdown).
    Pool(PoolArgs),
}

#[derive(Args)]
struct PoolArgs {
    /// Run folders written by `compare --out` (each holds a summary.json).
    #[arg(required = true)]
    runs: Vec<std::path::PathBuf>,
}

#[derive(Args)]
struct RelayArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: std::net::SocketAddr,
    /// Upstream address every connection is relayed to.
    #[arg(long)]
    to: std::net::SocketAddr,
    /// Threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Args)]
struct HoldArgs {
    /// Target URL (http:// or https://); its path is requested once per connection.
    url: String,
    /// Connections to open and hold.
    #[arg(short = 'c', long, default_value_t = 100)]
    connections: usize,
    /// How long to hold them idle once all are open.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    hold: Duration,
    /// Connections opened at once.
    #[arg(long, default_value_t = 200)]
    parallel: usize,
    /// Limit for connect + handshake + answer of one connection.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    timeout: Duration,
    /// `Host` header (default: the URL's host and port).
    #[arg(long)]
    host: Option<String>,
    /// Accept any TLS certificate.
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Trust this CA certificate file (PEM).
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// TLS server name (default: the URL's host).
    #[arg(long)]
    sni: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Parses "10s", "500ms", "2m", "1h" or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("bad duration `{s}`"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in `{s}` (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Args)]
struct LoadArgs {
    /// Target URL (http:// or https://).
    url: String,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// Generator threads.
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// Measured duration (default 10s unless -n is given).
    #[arg(short = 'd', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Total number of requests to send (instead of a duration).
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Open loop: total requests per second, latency measured from intended send times.
    #[arg(long)]
    rate: Option<f64>,
    /// Close the connection after each request.
    #[arg(long)]
    no_keepalive: bool,
    /// Request method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Extra header `Name: value` (repeatable; `Host: x` overrides the URL's host).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Send this file as the request body.
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// Use HTTP/2 (ALPN over TLS, prior knowledge over cleartext).
    #[arg(long)]
    h2: bool,
    /// Use HTTP/3 over QUIC (https:// URLs; ALPN h3; TLS via -k/--cacert/--sni).
    #[arg(long, conflicts_with = "h2")]
    http3: bool,
    /// Concurrent streams (requests in flight) per HTTP/2 or HTTP/3 connection.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Accept any TLS certificate.
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Trust this CA certificate file (PEM).
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// TLS server name (default: the URL's host).
    #[arg(long)]
    sni: Option<String>,
    /// Responses later than this count as timeout errors.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    timeout: Duration,
    /// Warm-up excluded from the results.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    warmup: Duration,
    /// Copy HTTP/1.1 bodies into the generator's memory, as a client that
    /// keeps them would (default over cleartext: dropped in the kernel with
    /// MSG_TRUNC, counted but never copied)
    #[arg(long)]
    copy_bodies: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BackendArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: std::net::SocketAddr,
    /// Response body size in bytes.
    #[arg(long, default_value_t = 164)]
    size: usize,
    /// Delay before each response, in milliseconds.
    #[arg(long, default_value_t = 0)]
    delay: u64,
    /// Threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// On SIGTERM, print the requests answered so far, go on serving this
    /// many milliseconds, print the count again and exit: a second count
    /// higher than the first means a request arrived after the SIGTERM.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    term_grace: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    compare::limits::raise_nofile();
    match cli.cmd {
        Cmd::Load(a) => run_load(a),
        Cmd::Backend(a) => {
            let b = backend::start(&backend::BackendConfig {
                listen: a.listen,
                size: a.size,
                delay: Duration::from_millis(a.delay),
                threads: a.threads,
            })?;
            eprintln!(
                "weir-bench backend listening on {} ({} byte body, {} ms delay)",
                b.addr, a.size, a.delay
            );
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                term.recv().await;
                let at_term = b.requests.load(std::sync::atomic::Ordering::SeqCst);
                println!("weir-bench backend: SIGTERM after {at_term} requests");
                if a.term_grace > 0 {
                    tokio::time::sleep(Duration::from_millis(a.term_grace)).await;
                    let at_exit = b.requests.load(std::sync::atomic::Ordering::SeqCst);
                    println!("weir-bench backend: exiting after {at_exit} requests");
                }
                Ok::<_, std::io::Error>(())
            })?;
            Ok(())
        }
        Cmd::Compare(a) => run_compare(a),
        Cmd::Hold(a) => run_hold(a),
        Cmd::Pool(a) => {
            let pooled = compare::pool::pool(&a.runs)?;
            if pooled.is_empty() {
                anyhow::bail!("no round of weir and a competitor to pool in these runs");
            }
            print!("{}", compare::pool::markdown(&pooled));
            Ok(())
        }
        Cmd::Relay(a) => {
            let addr = relay::start(&relay::RelayConfig {
                listen: a.listen,
                to: a.to,
                threads: a.threads,
            })?;
            eprintln!("weir-bench relay listening on {addr}, relaying to {}", a.to);
            loop {
                std::thread::park();
            }
        }
    }
}

fn run_hold(a: HoldArgs) -> Result<()> {
    let mut cfg = hold::HoldConfig::new(&a.url);
    cfg.connections = a.connections;
    cfg.hold = a.hold;
    cfg.parallel = a.parallel;
    cfg.timeout = a.timeout;
    cfg.host = a.host;
    cfg.insecure = a.insecure;
    cfg.cacert = a.cacert;
    cfg.sni = a.sni;
    let (r, ()) = hold::run(&cfg, |r| {
        eprintln!(
            "holding {} of {} connections idle ({} established)",
            r.served.saturating_sub(r.closed_by_server),
            r.requested,
            r.established
        );
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{}: {} requested, {} established, {} served, {} closed by the server while held, {} open at the end\n\
             opened in {:.2} s, held {:.2} s; errors: {} connect, {} TLS, {} timeout, {} closed, {} bad answer, {} not attempted",
            r.url,
            r.requested,
            r.established,
            r.served,
            r.closed_by_server,
            r.open_at_end,
            r.open_secs,
            r.held_secs,
            r.errors.connect,
            r.errors.tls,
            r.errors.timeout,
            r.errors.closed,
            r.errors.bad_answer,
            r.errors.not_attempted
        );
    }
    Ok(())
}

fn run_load(a: LoadArgs) -> Result<()> {
    let mut cfg = load::LoadConfig::new(&a.url).progress_if_tty();
    cfg.connections = a.connections;
    cfg.threads = a.threads;
    cfg.duration = a.duration;
    cfg.requests = a.requests;
    cfg.rate = a.rate;
    cfg.keepalive = !a.no_keepalive;
    cfg.method = a.method;
    cfg.headers = a
        .headers
        .iter()
        .map(|h| load::LoadConfig::parse_header(h))
        .collect::<Result<_, _>>()?;
    if let Some(p) = &a.body_file {
        cfg.body =
            std::fs::read(p).with_context(|| format!("reading body file {}", p.display()))?;
    }
    cfg.h2 = a.h2;
    cfg.http3 = a.http3;
    cfg.streams = a.streams;
    cfg.insecure = a.insecure;
    cfg.cacert = a.cacert;
    cfg.sni = a.sni;
    cfg.timeout = a.timeout;
    cfg.warmup = a.warmup;
    cfg.copy_bodies = a.copy_bodies;
    let report = load::run(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.human());
    }
    Ok(())
}

#[derive(Args)]
struct CompareArgs {
    /// Scenarios: static, proxy, sizes, concurrency, ab, startup, idle,
    /// cache, chain, php (needs php-fpm), tcp (TLS passthrough), app (an
    /// app weir runs itself, nginx, Apache, Caddy and HAProxy in front of
    /// the same), compress (a JSON answer compressed through each proxy),
    /// seed-001 (nginx and Caddy at several concurrencies, static and
    /// proxy), seed-004 (nginx and Apache in ab, hey, wrk and ramp shapes)
    /// (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "static,proxy,sizes,concurrency,ab,startup,idle,cache,chain,php,tcp,app,compress,seed-001,seed-004"
    )]
    scenarios: Vec<String>,
    /// Servers: weir, nginx, apache, caddy, haproxy, varnish, lighttpd,
    /// haproxy-varnish (HAProxy's TLS in front of a caching Varnish, the
    /// chain scenario's), and weir-b with `--weir-b` (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "weir,nginx,apache,caddy,haproxy,varnish,lighttpd,haproxy-varnish"
    )]
    servers: Vec<String>,
    /// Measured repeats per case (at least 3).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Measured duration per repeat (the concurrency scenario: at least
    /// 15 s; app: at least 30 s after at least 10 s of warm-up).
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    duration: Duration,
    /// Warm-up before each repeat.
    #[arg(long, value_parser = parse_duration, default_value = "3s")]
    warmup: Duration,
    /// Pinned mode: each server (its whole process tree) on one CPU set,
    /// the generator and the backend on the disjoint rest (on 2 CPUs, one
    /// each), every server alike, each with one worker per server CPU
    /// (overrides --workers).
    #[arg(long)]
    pin: bool,
    /// A ~2-minute smoke run: short durations, 3 repeats, trimmed cases, weir+nginx by default.
    #[arg(long)]
    quick: bool,
    /// Run folder (default bench/runs/<date>-<hostname>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The weir binary (default: next to weir-bench, else `weir` on PATH).
    #[arg(long)]
    weir: Option<PathBuf>,
    /// A second weir build, run as the server `weir-b` (add it to
    /// `--servers`): an A/B of two builds, each ratio weir ÷ weir-b.
    #[arg(long)]
    weir_b: Option<PathBuf>,
    /// Fail if a server is not installed instead of reporting it.
    #[arg(long)]
    require: bool,
    /// Server port on 127.0.0.1 (the backend, and tcp's TLS backend, use
    /// port+1, the chain's Varnish port+2).
    #[arg(long, default_value_t = 28080)]
    port: u16,
    /// Workers/threads per server (with --pin: one per server CPU).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// weir's `server.accept`: `hash` (the kernel's spread, weir's default)
    /// or `cpu` (each connection to the worker of the CPU that received
    /// it); `pack` and `adaptive` only for older builds that had them (an
    /// A/B against one), since weir refuses them now.
    #[arg(long, value_parser = ["hash", "cpu", "pack", "adaptive"])]
    weir_accept: Option<String>,
    /// weir-b's `server.accept`, when it should differ from weir's (for
    /// example `adaptive` on an older build against today's default).
    #[arg(long, value_parser = ["hash", "cpu", "pack", "adaptive"], requires = "weir_b")]
    weir_b_accept: Option<String>,
    /// TOML lines added to weir's site (not weir-b's), to measure what a
    /// feature costs against the same build without it, for example
    /// `'limit = [{ rate = "100000r/s" }]'`.
    #[arg(long, value_name = "TOML")]
    weir_site_keys: Option<String>,
    /// TOML lines added to weir-b's site, for an A/B of one feature set up
    /// two ways (for example a limit counted locally against one shared
    /// through `[cluster]`).
    #[arg(long, value_name = "TOML", requires = "weir_b")]
    weir_b_site_keys: Option<String>,
    /// Top-level TOML sections added to weir's config (not weir-b's), for
    /// example `'[cluster]\nredis = "redis://127.0.0.1:6379"\nkey = "…"'`;
    /// whatever they need (a Redis) is started by hand.
    #[arg(long, value_name = "TOML")]
    weir_sections: Option<String>,
    /// Measure a round again (every server of it) when the hypervisor stole
    /// more than this percentage of the machine's CPU during one of its
    /// repeats (shared VMs; 100 turns it off).
    #[arg(long, default_value_t = 10.0, value_parser = parse_percent)]
    max_stolen: f64,
    /// How many times one round may be measured again for stolen CPU.
    #[arg(long, default_value_t = 2)]
    stolen_retries: usize,
    /// The generator copies response bodies into its memory, as `load
    /// --copy-bodies` (default: dropped in the kernel over cleartext, so
    /// large files measure the servers, not the generator's copying)
    #[arg(long)]
    copy_bodies: bool,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a percentage from 0 to 100")),
    }
}

fn run_compare(a: CompareArgs) -> Result<()> {
    use compare::scenarios::Scenario;
    use compare::servers::ServerKind;
    let scenarios = a
        .scenarios
        .iter()
        .map(|s| Scenario::parse(s).with_context(|| format!("unknown scenario `{s}`")))
        .collect::<Result<Vec<_>>>()?;
    let explicit_servers =
        std::env::args().any(|x| x == "--servers" || x.starts_with("--servers="));
    let servers = if a.quick && !explicit_servers {
        vec![ServerKind::Weir, ServerKind::Nginx]
    } else {
        a.servers
            .iter()
            .map(|s| ServerKind::parse(s).with_context(|| format!("unknown server `{s}`")))
            .collect::<Result<Vec<_>>>()?
    };
    match (servers.contains(&ServerKind::WeirB), &a.weir_b) {
        (true, None) => {
            bail!("--servers has weir-b but no --weir-b: give the path of the second weir build")
        }
        (false, Some(_)) => bail!("--weir-b is given but --servers has no weir-b"),
        _ => {}
    }
    let explicit_scen =
        std::env::args().any(|x| x == "--scenarios" || x.starts_with("--scenarios="));
    let scenarios = if a.quick && !explicit_scen {
        vec![
            Scenario::Static,
            Scenario::Proxy,
            Scenario::Ab,
            Scenario::Startup,
            Scenario::Idle,
        ]
    } else {
        scenarios
    };
    let (repeats, duration, warmup) = if a.quick {
        (3, Duration::from_millis(1500), Duration::from_millis(500))
    } else {
        if a.repeats < 3 {
            bail!("--repeats must be at least 3 (a median of fewer runs hides the noise)");
        }
        (a.repeats, a.duration, a.warmup)
    };
    let pin = if a.pin {
        Some(compare::limits::CpuSplit::of_this_process().map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let workers = match &pin {
        Some(p) => {
            let explicit =
                std::env::args().any(|x| x == "--workers" || x.starts_with("--workers="));
            if explicit && a.workers != p.server.len() {
                eprintln!(
                    "weir-bench compare: --pin: {} worker(s) per server, one per server CPU, not --workers {}",
                    p.server.len(),
                    a.workers
                );
            }
            p.server.len()
        }
        None => a.workers,
    };
    let min = compare::scenarios::CONCURRENCY_MIN_MEASURE;
    if scenarios.contains(&Scenario::Concurrency) && duration < min {
        eprintln!(
            "weir-bench compare: the concurrency scenario is measured for {} s, not {:.1} s: shorter runs measure the opening handshakes",
            min.as_secs(),
            duration.as_secs_f64()
        );
    }
    let cfg = compare::CompareConfig {
        scenarios,
        servers,
        repeats,
        duration,
        warmup,
        pin,
        quick: a.quick,
        // Absolute: the servers' configs name files in the run folder, and
        // each server runs from its own directory.
        out: std::path::absolute(
            a.out
                .unwrap_or_else(|| PathBuf::from("bench/runs").join(compare::run_name())),
        )?,
        weir: a.weir.unwrap_or_else(compare::default_weir),
        weir_b: a.weir_b,
        require: a.require,
        port: a.port,
        workers,
        weir_accept: a.weir_accept,
        weir_b_accept: a.weir_b_accept,
        weir_site_keys: a.weir_site_keys,
        weir_b_site_keys: a.weir_b_site_keys,
        weir_sections: a.weir_sections,
        max_stolen_pct: a.max_stolen,
        stolen_retries: a.stolen_retries,
        copy_bodies: a.copy_bodies,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let summary = compare::run(&cfg)?;
    for sc in &cfg.scenarios {
        let md = std::fs::read_to_string(cfg.out.join(format!("{}.md", sc.name())))?;
        println!("{md}");
    }
    eprintln!(
        "run folder: {} ({} rows)",
        cfg.out.display(),
        summary.rows.len() + summary.startup.len() + summary.idle.len()
    );
    Ok(())
}
