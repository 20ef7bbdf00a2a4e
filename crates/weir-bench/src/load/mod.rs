//! The load generator behind `weir-bench load`.
//!
//! One OS thread per `--threads`, each running a current-thread tokio runtime
//! that drives its share of the connections. A thread owns its [`ThreadStats`]
//! and touches no lock or atomic per request; live progress is published by a
//! timer every 250 ms and the stats are merged once at the end. Closed loops
//! (`-c`) send the next request when the previous response ends; open loops
//! (`--rate`) send on a fixed schedule and measure latency from each request's
//! intended send time, so stalls are not hidden by coordinated omission.
//!
//! ```no_run
//! use weir_bench::load::{LoadConfig, run};
//! let mut cfg = LoadConfig::new("http://127.0.0.1:8080/");
//! cfg.connections = 100;
//! let report = run(&cfg).unwrap();
//! println!("{}", report.human());
//! ```

pub mod h1;
pub mod h2;
pub mod h3;
pub mod report;
pub mod stats;
pub mod tls;

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

pub use report::LoadReport;
pub use stats::{ErrorKind, ThreadStats};

/// Errors that stop a run before it starts.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The URL could not be parsed or has an unsupported scheme.
    #[error("bad URL `{0}`: {1}")]
    BadUrl(String, String),
    /// The host did not resolve.
    #[error("cannot resolve `{0}`: {1}")]
    Resolve(String, String),
    /// A `-H` header is not `Name: value`.
    #[error("bad header `{0}`: expected `Name: value`")]
    BadHeader(String),
    /// The options contradict each other.
    #[error("invalid options: {0}")]
    Options(String),
    /// HTTPS without `--insecure` or `--cacert`.
    #[error("HTTPS needs --insecure or --cacert FILE")]
    NoTrustAnchor,
    /// The CA file could not be read.
    #[error("cannot read CA file {0}: {1}")]
    CaFile(String, String),
    /// The SNI name is not a valid DNS name or IP address.
    #[error("invalid TLS server name `{0}`")]
    BadServerName(String),
    /// The body file could not be read.
    #[error("cannot read body file {0}: {1}")]
    BodyFile(String, String),
    /// A worker thread could not be started.
    #[error("cannot start generator thread: {0}")]
    Thread(String),
}

/// Everything `weir-bench load` can be told.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target URL (`http://` or `https://`).
    pub url: String,
    /// Concurrent connections.
    pub connections: usize,
    /// Generator threads (each with its own runtime).
    pub threads: usize,
    /// Measured duration (after warm-up); default 10 s unless `requests` is set.
    pub duration: Option<Duration>,
    /// Stop after this many requests (sent during the measured window).
    pub requests: Option<u64>,
    /// Open loop: total requests per second over all connections.
    pub rate: Option<f64>,
    /// Reuse connections (HTTP/1.1 keep-alive).
    pub keepalive: bool,
    /// Request method.
    pub method: String,
    /// Extra headers; a `Host` header here overrides the URL's.
    pub headers: Vec<(String, String)>,
    /// Request body.
    pub body: Vec<u8>,
    /// Use HTTP/2 (ALPN over TLS, prior knowledge over cleartext).
    pub h2: bool,
    /// Use HTTP/3 (QUIC, https:// only; `streams` requests per connection).
    pub http3: bool,
    /// Concurrent streams per HTTP/2 or HTTP/3 connection.
    pub streams: usize,
    /// Accept any server certificate.
    pub insecure: bool,
    /// Trust this CA file (PEM).
    pub cacert: Option<PathBuf>,
    /// TLS server name (default: the URL's host).
    pub sni: Option<String>,
    /// A response later than this counts as a timeout error.
    pub timeout: Duration,
    /// Warm-up time excluded from the results.
    pub warmup: Duration,
    /// Print a live progress line on stderr.
    pub progress: bool,
    /// Copy every HTTP/1.1 body byte into the generator's buffer, as a
    /// client that keeps the body would. Off: over cleartext TCP a body of
    /// known length is dropped in the kernel (`h1::Discard`), so at large
    /// sizes the run measures the server, not the generator's copying.
    pub copy_bodies: bool,
}

impl LoadConfig {
    /// Defaults: 10 connections, 1 thread, 10 s, keep-alive, GET, 2 s timeout.
    pub fn new(url: &str) -> LoadConfig {
        LoadConfig {
            url: url.to_string(),
            connections: 10,
            threads: 1,
            duration: None,
            requests: None,
            rate: None,
            keepalive: true,
            method: "GET".into(),
            headers: Vec::new(),
            body: Vec::new(),
            h2: false,
            http3: false,
            streams: 1,
            insecure: false,
            cacert: None,
            sni: None,
            timeout: Duration::from_secs(2),
            warmup: Duration::ZERO,
            progress: false,
            copy_bodies: false,
        }
    }

    /// Prints progress only when stderr is a terminal.
    pub fn progress_if_tty(mut self) -> LoadConfig {
        self.progress = std::io::stderr().is_terminal();
        self
    }

    /// Parses `Name: value` into a header. The name must be an HTTP token
    /// and the value free of control characters: both go into the request
    /// bytes as they are, so a CR or LF would split the request.
    pub fn parse_header(s: &str) -> Result<(String, String), LoadError> {
        let bad = || LoadError::BadHeader(s.to_string());
        let (name, value) = s.split_once(':').ok_or_else(bad)?;
        let name = name.trim();
        let value = value.trim();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty()
            || !name.bytes().all(token)
            || value.bytes().any(|b| b.is_ascii_control() && b != b'\t')
        {
            return Err(bad());
        }
        Ok((name.to_string(), value.to_string()))
    }
}

/// A parsed target URL.
#[derive(Debug, Clone)]
pub struct Target {
    /// `true` for https.
    pub tls: bool,
    /// Host as written in the URL (no brackets for IPv6).
    pub host: String,
    /// Port.
    pub port: u16,
    /// `host[:port]` for the Host header / `:authority`.
    pub authority: String,
    /// Path and query.
    pub path: String,
    /// Resolved address.
    pub addr: SocketAddr,
}

impl Target {
    /// Parses and resolves `url`.
    pub fn parse(url: &str) -> Result<Target, LoadError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| LoadError::BadUrl(url.into(), e.to_string()))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            other => {
                return Err(LoadError::BadUrl(
                    url.into(),
                    format!("unsupported scheme {other:?}"),
                ));
            }
        };
        let auth = uri
            .authority()
            .ok_or_else(|| LoadError::BadUrl(url.into(), "no host".into()))?;
        let host = auth
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = auth.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| LoadError::Resolve(host.clone(), e.to_string()))?
            .next()
            .ok_or_else(|| LoadError::Resolve(host.clone(), "no address".into()))?;
        Ok(Target {
            tls,
            host,
            port,
            authority: auth.as_str().to_string(),
            path,
            addr,
        })
    }
}

/// What every connection of a run shares (read-only).
pub struct Plan {
    /// The configuration.
    pub cfg: LoadConfig,
    /// The target.
    pub target: Target,
    /// TLS client config and server name, for https.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// QUIC client config and server name, for `--http3`.
    pub quic: Option<(quinn::ClientConfig, String)>,
    /// Pre-serialised HTTP/1.1 request.
    pub h1_request: Vec<u8>,
    /// The request is HEAD (responses have no body).
    pub head: bool,
    /// When the run started.
    pub start: Instant,
    /// When measuring starts (end of warm-up).
    pub measure_start: Instant,
    /// When sending stops (duration mode).
    pub end: Option<Instant>,
    /// Per-connection (or per-stream) interval in an open loop.
    pub interval: Option<Duration>,
}

/// One generator thread's mutable state, shared by its connections (`Rc`).
pub struct ThreadCtx {
    /// The plan.
    pub plan: Arc<Plan>,
    /// This thread's stats.
    pub stats: RefCell<ThreadStats>,
    /// Requests this thread may still send (`-n` mode).
    pub budget: Cell<Option<u64>>,
    /// Responses so far (for progress).
    pub done: Cell<u64>,
    /// Errors so far (for progress).
    pub failed: Cell<u64>,
}

impl ThreadCtx {
    /// Whether `now` is inside the measured window.
    pub fn measuring(&self, at: Instant) -> bool {
        at >= self.plan.measure_start
    }

    /// Whether connections should stop sending.
    pub fn stopped(&self, now: Instant) -> bool {
        if let Some(end) = self.plan.end
            && now >= end
        {
            return true;
        }
        self.budget.get() == Some(0)
    }

    /// Takes one request from the budget; false when there is none left.
    pub fn take(&self, now: Instant) -> bool {
        self.claim(now).is_some_and(|c| self.spend(c, now))
    }

    /// Reserves the next request before anything is done for it (such as
    /// opening a connection); `None` when the run is over. With `-n`, the
    /// reservation comes out of the budget at once, so other connections of
    /// this thread see it spent and do not open a connection for it too.
    pub fn claim(&self, now: Instant) -> Option<Claim> {
        if self.stopped(now) {
            return None;
        }
        let reserved = match self.budget.get() {
            Some(b) => {
                self.budget.set(Some(b - 1));
                true
            }
            None => false,
        };
        Some(Claim { reserved })
    }

    /// Gives back a claim whose request will not be sent.
    pub fn release(&self, claim: Claim) {
        if claim.reserved {
            self.budget.set(self.budget.get().map(|b| b + 1));
        }
    }

    /// Uses `claim` for a request intended at `intended`: false (and the
    /// claim released) when the run ended by then. A warm-up request is sent
    /// but gives its claim back: only measured requests count against `-n`.
    pub fn spend(&self, claim: Claim, intended: Instant) -> bool {
        if let Some(end) = self.plan.end
            && intended >= end
        {
            self.release(claim);
            return false;
        }
        if !self.measuring(intended) {
            self.release(claim);
        }
        true
    }

    /// Records an error that happened at `at` (ignored during warm-up).
    pub fn error(&self, kind: ErrorKind, at: Instant) {
        if self.measuring(at) {
            self.stats.borrow_mut().errors.add(kind);
            self.failed.set(self.failed.get() + 1);
        }
    }

    /// Records a request intended at `intended` that was still unanswered
    /// when the run ended at `end`. Counted whenever it was intended: one
    /// waiting since the warm-up waited through the whole measured window.
    pub fn unanswered(&self, intended: Instant, end: Instant) {
        let wait = end.saturating_duration_since(intended).as_micros() as u64;
        self.stats.borrow_mut().record_unanswered(wait);
    }

    /// Records a response to a request intended at `intended`, sent at `sent`.
    pub fn response(
        &self,
        status: u16,
        bytes: u64,
        intended: Instant,
        sent: Instant,
        done: Instant,
    ) {
        if !self.measuring(intended) {
            return;
        }
        let latency = done.duration_since(intended).as_micros() as u64;
        let service = self
            .plan
            .interval
            .map(|_| done.duration_since(sent).as_micros() as u64);
        self.stats
            .borrow_mut()
            .record_response(status, bytes, latency, service);
        self.done.set(self.done.get() + 1);
    }
}

/// One request reserved with [`ThreadCtx::claim`], to be used with
/// [`ThreadCtx::spend`] or given back with [`ThreadCtx::release`].
#[must_use = "a claim must be spent or released"]
#[derive(Debug)]
pub struct Claim {
    /// The claim took one request out of the `-n` budget.
    reserved: bool,
}

/// The send schedule of one connection (or one h2 stream).
pub struct Schedule {
    next: Option<Instant>,
    interval: Option<Duration>,
}

impl Schedule {
    /// Schedule for connection `index` of `total`: open loops stagger the
    /// first send across one interval so connections do not fire in bursts.
    pub fn new(plan: &Plan, index: usize, total: usize) -> Schedule {
        match plan.interval {
            Some(iv) => {
                let offset = iv.mul_f64(index as f64 / total.max(1) as f64);
                Schedule {
                    next: Some(plan.start + offset),
                    interval: Some(iv),
                }
            }
            None => Schedule {
                next: None,
                interval: None,
            },
        }
    }

    /// Waits for the next intended send time and returns it (closed loop: now).
    pub async fn next(&mut self) -> Instant {
        match (self.next, self.interval) {
            (Some(at), Some(iv)) => {
                if at > Instant::now() {
                    tokio::time::sleep_until(at.into()).await;
                }
                self.next = Some(at + iv);
                at
            }
            _ => Instant::now(),
        }
    }
}

/// The schedules of a multiplexed connection's stream slots: slot `s` of
/// connection `index` is lane `index * streams + s` of `total * streams`.
pub(crate) fn stream_schedules(ctx: &ThreadCtx, index: usize, total: usize) -> Vec<Schedule> {
    let streams = ctx.plan.cfg.streams;
    (0..streams)
        .map(|s| Schedule::new(&ctx.plan, index * streams + s, total * streams))
        .collect()
}

/// A fresh copy of the request template (method, URI, headers) for one stream.
pub(crate) fn clone_request(template: &http::Request<()>) -> http::Request<()> {
    let mut req = http::Request::new(());
    *req.method_mut() = template.method().clone();
    *req.uri_mut() = template.uri().clone();
    *req.headers_mut() = template.headers().clone();
    req
}

/// The request loop of one stream slot of a multiplexed connection (HTTP/2,
/// HTTP/3): waits for the schedule, takes a request from the budget, runs
/// `exchange` (which returns the status and body bytes) against the request
/// timeout and the end of the run, and records the outcome. Returns when the
/// run ends or the connection must be dropped: `classify` maps an error to
/// its kind and whether it is fatal to the connection; `timeout_fatal` says
/// whether a timed-out request abandons the connection too.
pub(crate) async fn stream_requests<F, Fut, E>(
    ctx: &ThreadCtx,
    sched: &mut Schedule,
    mut exchange: F,
    classify: impl Fn(&E) -> (ErrorKind, bool),
    timeout_fatal: bool,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(u16, u64), E>>,
{
    let plan = &*ctx.plan;
    loop {
        let intended = sched.next().await;
        if !ctx.take(intended) {
            return;
        }
        let sent = Instant::now();
        let deadline = sent + plan.cfg.timeout;
        let cutoff = plan.end.map_or(deadline, |e| e.max(intended).min(deadline));
        match tokio::time::timeout_at(cutoff.into(), exchange()).await {
            Err(_) => {
                // Cut by the end of the run: not an error, but still waiting.
                if cutoff != deadline {
                    ctx.unanswered(intended, cutoff);
                    return;
                }
                ctx.error(ErrorKind::Timeout, intended);
                if timeout_fatal {
                    return;
                }
            }
            Ok(Err(e)) => {
                let (kind, fatal) = classify(&e);
                ctx.error(kind, intended);
                if fatal {
                    return;
                }
            }
            Ok(Ok((status, bytes))) => ctx.response(status, bytes, intended, sent, Instant::now()),
        }
    }
}

/// A connected stream, plain or TLS.
pub enum Conn {
    /// Cleartext.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Opens a connection (TCP, then TLS if needed), recording connect and
/// handshake times and errors. `None` means the attempt failed (recorded).
pub async fn connect(ctx: &ThreadCtx) -> Option<Conn> {
    let plan = &ctx.plan;
    let t0 = Instant::now();
    let tcp =
        match tokio::time::timeout(plan.cfg.timeout, TcpStream::connect(plan.target.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) | Err(_) => {
                ctx.error(ErrorKind::Connect, t0);
                // Avoid a hot loop of refused connects.
                tokio::time::sleep(Duration::from_millis(10)).await;
                return None;
            }
        };
    let _ = tcp.set_nodelay(true);
    let t1 = Instant::now();
    {
        let mut st = ctx.stats.borrow_mut();
        st.connections += 1;
        st.connect
            .saturating_record(t1.duration_since(t0).as_micros().max(1) as u64);
    }
    let Some((config, name)) = &plan.tls else {
        return Some(Conn::Plain(tcp));
    };
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    match tokio::time::timeout(plan.cfg.timeout, connector.connect(name.clone(), tcp)).await {
        Ok(Ok(s)) => {
            let t2 = Instant::now();
            ctx.stats
                .borrow_mut()
                .tls
                .saturating_record(t2.duration_since(t1).as_micros().max(1) as u64);
            Some(Conn::Tls(Box::new(s)))
        }
        Ok(Err(e)) => {
            ctx.error(classify_io(&e, ErrorKind::Tls), t1);
            None
        }
        Err(_) => {
            ctx.error(ErrorKind::Timeout, t1);
            None
        }
    }
}

/// Runs `opening` (a connection being opened) until the end of a timed run.
/// Cut there (a server that accepts or handshakes slowly), it counts
/// `waiting` requests (one for HTTP/1.1, one per stream for HTTP/2 and
/// HTTP/3) as unanswered, each waiting since the attempt began.
pub(crate) async fn until_end<T>(
    ctx: &ThreadCtx,
    waiting: usize,
    opening: impl std::future::Future<Output = Option<T>>,
) -> Option<T> {
    let Some(end) = ctx.plan.end else {
        return opening.await;
    };
    let wanted = Instant::now();
    match tokio::time::timeout_at(end.into(), opening).await {
        Ok(conn) => conn,
        Err(_) => {
            for _ in 0..waiting {
                ctx.unanswered(wanted, end);
            }
            None
        }
    }
}

/// Maps an I/O error to an error kind; `other` for anything unrecognised.
pub fn classify_io(e: &std::io::Error, other: ErrorKind) -> ErrorKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::UnexpectedEof
        | K::NotConnected => ErrorKind::Reset,
        K::TimedOut => ErrorKind::Timeout,
        K::InvalidData if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) => ErrorKind::Tls,
        _ => other,
    }
}

/// Reads this process's user+system CPU time from /proc/self/stat.
pub fn self_cpu_time() -> Option<Duration> {
    crate::compare::procstat::cpu_time(std::process::id())
}

/// Runs a load test and returns its report.
pub fn run(cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    if cfg.http3 && cfg.h2 {
        return Err(LoadError::Options(
            "--h2 and --http3 are mutually exclusive".into(),
        ));
    }
    if cfg.connections == 0 || cfg.threads == 0 || cfg.streams == 0 {
        return Err(LoadError::Options(
            "connections, threads and streams must be at least 1".into(),
        ));
    }
    if let Some(r) = cfg.rate
        && r <= 0.0
    {
        return Err(LoadError::Options("--rate must be positive".into()));
    }
    let target = Target::parse(&cfg.url)?;
    if cfg.http3 && !target.tls {
        return Err(LoadError::Options("--http3 needs an https:// URL".into()));
    }
    let sni = cfg.sni.clone().unwrap_or_else(|| target.host.clone());
    let tls = if target.tls {
        let alpn: &[&[u8]] = if cfg.http3 {
            &[b"h3"]
        } else if cfg.h2 {
            &[b"h2"]
        } else {
            &[b"http/1.1"]
        };
        Some((
            tls::client_config(cfg.insecure, cfg.cacert.as_deref(), alpn)?,
            tls::server_name(&sni)?,
        ))
    } else {
        None
    };
    let quic = match (&tls, cfg.http3) {
        (Some((config, _)), true) => {
            let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(config.clone())
                .map_err(|e| LoadError::Options(format!("TLS config unusable for QUIC: {e}")))?;
            let mut transport = quinn::TransportConfig::default();
            transport
                .stream_receive_window((1u32 << 20).into())
                .receive_window((1u32 << 24).into());
            let mut client = quinn::ClientConfig::new(Arc::new(crypto));
            client.transport_config(Arc::new(transport));
            Some((client, sni.clone()))
        }
        _ => None,
    };
    let threads = cfg.threads.min(cfg.connections);
    let duration = match (cfg.duration, cfg.requests) {
        (Some(d), _) => Some(d),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let lanes = cfg.connections * if cfg.h2 || cfg.http3 { cfg.streams } else { 1 };
    let interval = cfg.rate.map(|r| Duration::from_secs_f64(lanes as f64 / r));
    let start = Instant::now();
    let measure_start = start + cfg.warmup;
    let plan = Arc::new(Plan {
        h1_request: h1::serialize_request(cfg, &target),
        head: cfg.method.eq_ignore_ascii_case("HEAD"),
        cfg: cfg.clone(),
        target,
        tls,
        quic,
        start,
        measure_start,
        end: duration.map(|d| measure_start + d),
        interval,
    });

    let progress: Vec<Arc<(AtomicU64, AtomicU64)>> = (0..threads)
        .map(|_| Arc::new((AtomicU64::new(0), AtomicU64::new(0))))
        .collect();
    let mut handles = Vec::with_capacity(threads);
    for (t, prog) in progress.iter().enumerate() {
        let conns: Vec<usize> = (0..cfg.connections).filter(|c| c % threads == t).collect();
        let budget = cfg
            .requests
            .map(|n| n / threads as u64 + u64::from((t as u64) < n % threads as u64));
        let plan = plan.clone();
        let prog = prog.clone();
        let h = std::thread::Builder::new()
            .name(format!("weir-bench-{t}"))
            .spawn(move || thread_main(plan, conns, budget, prog))
            .map_err(|e| LoadError::Thread(e.to_string()))?;
        handles.push(h);
    }

    // The main thread samples CPU at the start of the measured window and
    // prints progress while the workers run.
    let mut cpu_start = None;
    let mut last_print = Instant::now();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if cpu_start.is_none() && now >= measure_start {
            cpu_start = Some((now, self_cpu_time()));
        }
        if cfg.progress && now.duration_since(last_print) >= Duration::from_secs(1) {
            last_print = now;
            let done: u64 = progress.iter().map(|p| p.0.load(Ordering::Relaxed)).sum();
            let failed: u64 = progress.iter().map(|p| p.1.load(Ordering::Relaxed)).sum();
            let elapsed = now.saturating_duration_since(measure_start).as_secs_f64();
            let phase = if now < measure_start {
                "warm-up"
            } else {
                "measuring"
            };
            eprint!(
                "\r\x1b[2K{phase} {elapsed:6.1}s  {:>10.0} resp/s  responses {done}  errors {failed}",
                if elapsed > 0.0 {
                    done as f64 / elapsed
                } else {
                    0.0
                }
            );
        }
    }
    let end = Instant::now();
    let cpu_end = self_cpu_time();
    if cfg.progress {
        eprint!("\r\x1b[2K");
    }
    let mut stats = ThreadStats::default();
    for h in handles {
        let s = h
            .join()
            .map_err(|_| LoadError::Thread("generator thread panicked".into()))?;
        stats.merge(&s);
    }
    let (measure_wall_start, cpu0) = cpu_start.unwrap_or((measure_start, None));
    let measured = match plan.end {
        Some(e) => e.min(end).saturating_duration_since(measure_start),
        None => end.saturating_duration_since(measure_start),
    };
    let cpu_cores = match (cpu0, cpu_end) {
        (Some(a), Some(b)) => {
            let wall = end.duration_since(measure_wall_start).as_secs_f64();
            (wall > 0.0).then(|| b.saturating_sub(a).as_secs_f64() / wall)
        }
        _ => None,
    };
    Ok(LoadReport::build(
        &plan, threads, measured, &stats, cpu_cores,
    ))
}

/// Body of one generator thread.
fn thread_main(
    plan: Arc<Plan>,
    conns: Vec<usize>,
    budget: Option<u64>,
    progress: Arc<(AtomicU64, AtomicU64)>,
) -> ThreadStats {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-bench: cannot build runtime: {e}");
            let mut s = ThreadStats::default();
            s.errors.protocol += 1;
            return s;
        }
    };
    let total = plan.cfg.connections;
    let ctx = Rc::new(ThreadCtx {
        plan,
        stats: RefCell::new(ThreadStats::default()),
        budget: Cell::new(budget),
        done: Cell::new(0),
        failed: Cell::new(0),
    });
    let (h2, http3) = (ctx.plan.cfg.h2, ctx.plan.cfg.http3);
    // One task per connection, each with its own cooperative budget. They
    // were once futures joined in one task, and the generator itself then
    // added to what it measured: against `weir-bench backend`, one thread,
    // c100 p99 was 2.1-2.8 ms against 0.9 ms now, and at c10000 half of the
    // connects (finished in the kernel within a second, `ss` showed) were
    // seen only when the run ended, 5 s later, while busy connections were
    // being served.
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let tasks: Vec<_> = conns
            .into_iter()
            .map(|i| {
                let ctx = ctx.clone();
                tokio::task::spawn_local(async move {
                    if http3 {
                        h3::connection(&ctx, i, total).await
                    } else if h2 {
                        h2::connection(&ctx, i, total).await
                    } else {
                        h1::connection(&ctx, i, total).await
                    }
                })
            })
            .collect();
        let work = async {
            for t in tasks {
                let _ = t.await;
            }
        };
        let publisher = async {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                progress.0.store(ctx.done.get(), Ordering::Relaxed);
                progress.1.store(ctx.failed.get(), Ordering::Relaxed);
            }
        };
        tokio::select! {
            _ = work => {}
            _ = publisher => {}
        }
    });
    drop(rt);
    match Rc::try_unwrap(ctx) {
        Ok(ctx) => ctx.stats.into_inner(),
        Err(ctx) => std::mem::take(&mut *ctx.stats.borrow_mut()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_option_is_name_colon_value_trimmed() {
        let h = |s| LoadConfig::parse_header(s).ok();
        assert_eq!(
            h("Accept-Encoding: br, gzip"),
            Some(("Accept-Encoding".into(), "br, gzip".into()))
        );
        assert_eq!(h("x-a:b:c"), Some(("x-a".into(), "b:c".into())));
        assert_eq!(h("X-Empty:"), Some(("X-Empty".into(), "".into())));
        for bad in [
            "no colon",
            ": value",
            "Two Words: x",
            "X-A: one\r\nX-B: two",
            "X-A: nul\0",
            "X(A): y",
        ] {
            assert!(
                matches!(LoadConfig::parse_header(bad), Err(LoadError::BadHeader(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_request_is_serialised_once_with_every_header() {
        let mut cfg = LoadConfig::new("http://127.0.0.1:8080/data.json");
        cfg.headers = vec![LoadConfig::parse_header("Accept-Encoding: br, gzip").unwrap()];
        let target = Target::parse(&cfg.url).unwrap();
        let req = String::from_utf8(h1::serialize_request(&cfg, &target)).unwrap();
        assert_eq!(
            req,
            "GET /data.json HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept-Encoding: br, gzip\r\n\r\n"
        );
    }
}
