//! The named scenarios, each reproducing a seed document's comparison, as
//! lists of cases (one load shape each).

use std::time::Duration;

use super::servers::ServerKind;
pub use super::servers::{APP_INSTANCES, PHP_CHILDREN, TCP_HOST};

/// A scenario name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// 164-byte page, c100, HTTP and HTTPS (seed 000).
    Static,
    /// Small response from `weir-bench backend` behind each proxy (seeds 002, 003).
    Proxy,
    /// 164 B, 4 KiB, 256 KiB, 1 MiB bodies (seed 001: results flip near 256 KiB).
    Sizes,
    /// HTTPS keep-alive at c1000, c5000, c10000 (seed 003's clean-run table).
    Concurrency,
    /// 1000, 5000, 10000 requests at c50, c100, c200 without keep-alive, like ab (seed 004).
    Ab,
    /// Time from spawning the server to its first 200, with 10 name-based sites.
    Startup,
    /// Server memory per idle HTTPS keep-alive connection (10,000 held open).
    Idle,
    /// Caching proxies in front of a backend that takes 5 ms, every request a
    /// hit (seed 002's `varnish_cache`), and weir serving the same body as a file.
    Cache,
    /// HTTPS: HAProxy in front of a caching Varnish (PROXY protocol v2)
    /// against weir terminating TLS and caching alone (seed 002's
    /// `haproxy_proxy-varnish_cache`).
    Chain,
    /// A small PHP page through PHP-FPM: weir, nginx and Apache, each in
    /// front of the same php-fpm pool.
    Php,
    /// HTTPS passed through by SNI without terminating TLS (weir's
    /// `passthrough`, HAProxy `mode tcp`) to a TLS backend.
    Tcp,
    /// HTTPS keep-alive at c5000 and c10000 through each server to a small
    /// app on the same machine, weir running the app itself (`app = …`)
    /// (seed 003's Tako rows).
    App,
    /// A 20 KiB JSON answer through each proxy, compressed for a client that
    /// accepts `br, gzip` (nginx `gzip on`, Caddy `encode`, weir `compress`).
    Compress,
    /// Seed 001's table in its tools' shape: nginx and Caddy (and weir)
    /// serving a page and proxying to a backend over HTTPS, closed loop at
    /// several concurrencies.
    #[serde(rename = "seed-001")]
    Seed001,
    /// Seed 004's table in its tools' shapes: nginx and Apache (and weir)
    /// under ab, hey, wrk and a JMeter-like ramp, with mean and longest
    /// latency and failed requests.
    #[serde(rename = "seed-004")]
    Seed004,
}

impl Scenario {
    /// All scenarios, in report order.
    pub const ALL: [Scenario; 15] = [
        Scenario::Static,
        Scenario::Proxy,
        Scenario::Sizes,
        Scenario::Concurrency,
        Scenario::Ab,
        Scenario::Startup,
        Scenario::Idle,
        Scenario::Cache,
        Scenario::Chain,
        Scenario::Php,
        Scenario::Tcp,
        Scenario::App,
        Scenario::Compress,
        Scenario::Seed001,
        Scenario::Seed004,
    ];

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Static => "static",
            Scenario::Proxy => "proxy",
            Scenario::Sizes => "sizes",
            Scenario::Concurrency => "concurrency",
            Scenario::Ab => "ab",
            Scenario::Startup => "startup",
            Scenario::Idle => "idle",
            Scenario::Cache => "cache",
            Scenario::Chain => "chain",
            Scenario::Php => "php",
            Scenario::Tcp => "tcp",
            Scenario::App => "app",
            Scenario::Compress => "compress",
            Scenario::Seed001 => "seed-001",
            Scenario::Seed004 => "seed-004",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|k| k.name() == s.trim())
    }

    /// What the scenario reproduces, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Scenario::Static => {
                "164-byte index.html, 100 keep-alive connections, HTTP and HTTPS (seed 000)."
            }
            Scenario::Proxy => {
                "164-byte response from `weir-bench backend` through each proxy, 100 keep-alive connections, HTTP and HTTPS \
                 (seeds 002 and 003). Every proxy sends the backend X-Forwarded-For, -Proto and -Host (Caddy's \
                 defaults) and no other forwarding field, and keeps up to 1,024 idle upstream connections. Varnish \
                 passes every request (no caching) and has no TLS. The `http + log` row is the features-on proxy, \
                 as proxies run in production: every proxy writes an access log line per request to a file \
                 (weir's JSON log, nginx's `access_log`, HAProxy's `option httplog`, Caddy's `log`, Apache's `CustomLog`); Varnish, which \
                 logs to shared memory for `varnishncsa` to write out, is not in that row."
            }
            Scenario::Sizes => {
                "Static bodies of 164 B, 4 KiB, 256 KiB and 1 MiB over HTTP, 100 keep-alive connections (seed 001). \
                 The generator counts the bodies' bytes and drops them in the kernel (MSG_TRUNC) rather than copying \
                 them, so at 256 KiB and 1 MiB the servers are measured, not its copying (`--copy-bodies` copies them)."
            }
            Scenario::Concurrency => {
                "HTTPS keep-alive at 1000, 5000, 10000 and 19000 connections, 10 s request timeout (seed 003's \
                 clean-run table). c19000 stands in for seed 003's c20000: a process here may hold at most 20,000 \
                 descriptors (a hard limit that cannot be raised on this machine), and a one-process server needs a \
                 few beside its connections. Measured for at least 15 s after the warm-up whatever `--duration` \
                 says: in shorter runs the opening handshake storm dominates and the ratios swing."
            }
            Scenario::Ab => {
                "Fixed request counts (1000, 5000, 10000) at 50, 100 and 200 connections, a new connection per request, \
                 as `ab` does without -k (seed 004)."
            }
            Scenario::Startup => {
                "Start-up time: from just before spawning the server (config of 10 name-based virtual hosts on one port, \
                 each with its own root holding the 164-byte page) to the first complete 200 with the right body for \
                 one of the sites, polling a connect every ~1 ms, then a GET with that site's Host. Monotonic clock; \
                 the server is stopped by PID between repeats."
            }
            Scenario::Idle => {
                "Memory per idle connection: HTTPS keep-alive connections, each completing a TLS handshake and one GET \
                 for the 164-byte page, then held open and idle (`weir-bench hold`, 200 opened at a time). The PSS \
                 (proportional set size, /proc/PID/smaps_rollup) of all the server's processes is sampled before, and \
                 2 s after every connection is up; PSS counts a page shared by a master and its workers once, where \
                 summed RSS counts it per process (RSS is kept beside it). HAProxy terminates TLS and proxies to \
                 `weir-bench backend` (its memory alone is counted); Varnish has no TLS."
            }
            Scenario::Cache => {
                "Caching reverse proxies in front of `weir-bench backend`, which answers the 164-byte body after 5 ms \
                 and says nothing of freshness, 100 keep-alive connections over HTTP (seed 002's `varnish_cache`). \
                 Each server keeps responses 2 minutes (Varnish's default TTL) in 256 MiB of memory: weir \
                 `cache = { default_ttl = \"2m\", grace = \"10s\" }`, Varnish's built-in VCL with `-s malloc,256m`, nginx `proxy_cache` \
                 with `proxy_cache_valid 200 2m` and `proxy_cache_lock`, Apache mod_cache with its shared-memory store \
                 (mod_cache_socache, `CacheDefaultExpire 120`, `CacheLock On`). Every measured request is a hit: before \
                 measuring, a first GET fills the cache and a second must come from it (the backend counts no request \
                 for it); the backend's count over the whole load (warm-up and measured) is in the table below and a \
                 repeat with more than a handful of misses fails. `weir-static` is weir serving the same 164 bytes as \
                 a static file: its `weir ÷ this` is weir's cache over weir's own file serving (target ≥ 0.90)."
            }
            Scenario::Chain => {
                "HTTPS, 100 keep-alive connections: HAProxy terminating TLS and sending each request over the PROXY \
                 protocol v2 to a caching Varnish (`-a …,PROXY`, built-in VCL, `-s malloc,256m`) in front of \
                 `weir-bench backend` (5 ms per answer), as seed 002's `haproxy_proxy-varnish_cache`, against weir \
                 terminating TLS and caching alone (`cache = { default_ttl = \"2m\", grace = \"10s\" }`). The chain's CPU and memory \
                 are both processes'. Every measured request is a hit, checked as in `cache` (target: weir ≥ 2 × the chain)."
            }
            Scenario::Php => {
                "`GET /index.php?n=1`, a PHP page of one `echo` (17 bytes), 100 keep-alive connections over HTTP, \
                 through PHP-FPM: each server in front of its own php-fpm master started for its run, all with the \
                 same generated pool (`pm = static`, 4 children, a Unix socket, opcache as the distribution ships it); \
                 the pool's CPU and memory are counted as the server's. A kept FastCGI connection holds a child: weir \
                 `php = { to = \"unix:…\", max_conns = 4, keep_conn = true }` and Apache's event MPM with `proxy_fcgi`, `enablereuse=on` \
                 and `max` (4 ÷ processes each) keep at most one per child and make a request wait for a free one; \
                 nginx, which cannot make a request wait, connects per request (`fastcgi_pass` to an `upstream`, no \
                 `fastcgi_keep_conn`: kept connections beyond the children wait for one until they time out) \
                 (target: weir ≥ nginx)."
            }
            Scenario::Tcp => {
                "HTTPS keep-alive GETs of the 164-byte page with SNI `tcp.test`, 100 connections, passed through without \
                 terminating TLS to a TLS backend (weir serving the file with the run's certificate, its own process, \
                 its CPU in the backend column): weir `passthrough = { to = … }` against HAProxy `mode tcp` choosing \
                 its backend by `req.ssl_sni`. `backend-direct` is the same backend config measured directly on the \
                 front's port: its `weir ÷ this` is what the passthrough costs (target: weir ≥ HAProxy)."
            }
            Scenario::App => {
                "HTTPS keep-alive GETs of `/` through each server to a small app on the same machine, at 5000 and \
                 10000 connections, 10 s request timeout, 10 s warm-up and 30 s measured at least whatever \
                 `--warmup` and `--duration` say (seed 003's Tako rows). The app is `weir-bench backend` (164-byte \
                 answer), 2 instances of 1 thread each behind every server, balanced round-robin: weir starts and \
                 supervises them itself (`app = { run = \"weir-bench backend --listen 127.0.0.1:$PORT …\", \
                 instances = 2 }`, each instance on a port weir chose, in traffic once `GET /` answers), and its \
                 app proxy has weir's default proxy settings (it also sends `Forwarded` and `Via`); nginx, Apache, Caddy and HAProxy \
                 front the same 2 processes, started by the harness before them and stopped after them each round, \
                 with their `proxy` configs (an `upstream` / `backend` of the 2). So what is compared is the whole \
                 stack a user runs, proxy and app: the app's processes are counted in every server's CPU and memory \
                 (weir's as its children, the others' as their companions), and in the pinned mode they \
                 run on the server's CPUs. Every level must end with no non-2xx answer and no client error in any \
                 repeat (the table below the main one)."
            }
            Scenario::Compress => {
                "A 20 KiB JSON answer (`application/json`, a list of user records) from `weir-bench backend` \
                 through each proxy, 100 keep-alive connections over HTTP, every request sent with \
                 `Accept-Encoding: br, gzip` as browsers send it; each proxy compresses as its users turn it on, at \
                 its own default level: nginx `gzip on; gzip_types application/json;` (gzip level 1), Caddy \
                 `encode gzip zstd` (gzip level 5; Caddy has no brotli encoder), weir `compress = true` (gzip \
                 level 2: at equal qvalue its streams take gzip over brotli). Each answer must come back encoded; `bytes/resp` is what \
                 the generator received per response, head and chunk framing included, so a server that \
                 compressed less shows it there (target: weir ≥ 0.8 × nginx)."
            }
            Scenario::Seed001 => {
                "Seed 001's comparison (nginx against Caddy, each as its users configure it, Caddy with its \
                 defaults) in the shape of the `wrk`/`hey` runs it discusses: a closed loop over HTTPS keep-alive \
                 connections at 10, 100 and 500 connections, the 164-byte page served as a file (`static`) and the \
                 164-byte answer of `weir-bench backend` through each as a reverse proxy (`proxy`, the seed's \
                 `reverse_proxy` to a hello container), weir beside them. The load is weir-bench's own generator in \
                 that shape, not wrk, hey or vegeta (the seed's own 500 req/s vegeta attack measures latency at a \
                 rate every server sustains; the closed loop measures how far each goes)."
            }
            Scenario::Seed004 => {
                "Seed 004's comparison (nginx against Apache's event MPM on Debian 12, the 164-byte page over HTTP), \
                 in its tools' shapes, with weir beside them: `ab` (its three runs, `ab -n 1000 -c 50`, \
                 `-n 5000 -c 100`, `-n 10000 -c 200`: a new connection per request), `hey` (`hey -n 10000 -c 50`: \
                 a fixed count over kept connections), `wrk` (`wrk -t1 -c100`: a closed loop for the run's \
                 duration) and a JMeter-like ramp (thread groups of 10, 50, 100 and 200 users one after \
                 another, each a closed loop for the run's duration). The seed reports requests/s, mean time per \
                 request, the longest request and failed requests: they are the table below the main one. The \
                 load is weir-bench's own generator in those shapes, not the tools themselves."
            }
        }
    }

    /// Does `server` take part?
    pub fn applies_to(self, server: ServerKind) -> bool {
        match self {
            Scenario::Seed001 => matches!(
                server,
                ServerKind::Weir | ServerKind::WeirB | ServerKind::Nginx | ServerKind::Caddy
            ),
            Scenario::Seed004 => matches!(
                server,
                ServerKind::Weir | ServerKind::WeirB | ServerKind::Nginx | ServerKind::Apache
            ),
            Scenario::Proxy => server.proxies(),
            Scenario::Idle => server.serves_static() || server == ServerKind::Haproxy,
            // The chain is the TLS-capable Varnish: in the chain, not here.
            Scenario::Cache => server.caches() && server != ServerKind::HaproxyVarnish,
            Scenario::Chain => matches!(
                server,
                ServerKind::Weir | ServerKind::WeirB | ServerKind::HaproxyVarnish
            ),
            Scenario::Php => matches!(
                server,
                ServerKind::Weir | ServerKind::WeirB | ServerKind::Nginx | ServerKind::Apache
            ),
            Scenario::Tcp => matches!(
                server,
                ServerKind::Weir | ServerKind::WeirB | ServerKind::Haproxy
            ),
            Scenario::App => server.fronts_apps(),
            Scenario::Compress => server.compresses(),
            _ => server.serves_static(),
        }
    }

    /// Does `server` take part as a proxy in front of `weir-bench backend`?
    /// (`tcp`'s backend is weir with TLS, [`Scenario::tls_backend`].)
    pub fn proxied(self, server: ServerKind) -> bool {
        match self {
            Scenario::Proxy
            | Scenario::Cache
            | Scenario::Chain
            | Scenario::Compress
            | Scenario::Seed001 => true,
            Scenario::Idle => !server.serves_static(),
            _ => false,
        }
    }

    /// Is the scenario's backend weir serving the docroot over TLS (the
    /// passthrough's), rather than `weir-bench backend`?
    pub fn tls_backend(self) -> bool {
        self == Scenario::Tcp
    }

    /// Do the servers cache the backend's responses, every measured request
    /// a hit?
    pub fn caches(self) -> bool {
        matches!(self, Scenario::Cache | Scenario::Chain)
    }

    /// How long the backend takes to answer: in the caching scenarios a
    /// miss costs (a hit must not wait for it), elsewhere nothing.
    pub fn backend_delay(self) -> Duration {
        if self.caches() {
            CACHE_BACKEND_DELAY
        } else {
            Duration::ZERO
        }
    }

    /// The size of the backend's answers: the JSON document's in
    /// `compress`, elsewhere the 164-byte page's.
    pub fn backend_size(self) -> usize {
        match self {
            Scenario::Compress => COMPRESS_BODY,
            _ => 164,
        }
    }

    /// The ratios the scenario exists to check: (the row, the least weir's
    /// req/s over that row's should be). In `cache`, the `weir-static` row
    /// makes weir's ratio its cache over its own static-file rate.
    pub fn targets(self) -> &'static [(&'static str, f64)] {
        match self {
            Scenario::Cache => &[(WEIR_STATIC_ROW, 0.9)],
            Scenario::Chain => &[("haproxy-varnish", 2.0)],
            Scenario::Php => &[("nginx", 1.0)],
            Scenario::Tcp => &[("haproxy", 1.0)],
            Scenario::Compress => &[("nginx", 0.8)],
            _ => &[],
        }
    }
}

/// The `cache` scenario's row of weir serving the backend's body as a
/// static file ([`CACHED_PAGE`]), measured in the same rounds as the caches.
pub const WEIR_STATIC_ROW: &str = "weir-static";

/// The `tcp` scenario's row of the TLS backend measured directly, without
/// a passthrough in front: weir's ratio to it is the passthrough's cost.
pub const BACKEND_DIRECT_ROW: &str = "backend-direct";

/// The `php` scenario's page (in its own root, [`PHP_ROOT`]) and what
/// `GET` [`PHP_PATH`] answers.
pub const PHP_PAGE: (&str, &str) = (
    "index.php",
    "<?php header('Content-Type: text/plain'); echo 'hello from php ', $_GET['n'] ?? 'world', \"\\n\";\n",
);

/// The folder of the run that holds [`PHP_PAGE`].
pub const PHP_ROOT: &str = "php-root";

/// The `php` scenario's request.
pub const PHP_PATH: &str = "/index.php?n=1";

/// The body [`PHP_PATH`] answers.
pub const PHP_BODY: &str = "hello from php 1\n";

/// The size of the `compress` scenario's JSON answer.
pub const COMPRESS_BODY: usize = 20 * 1024;

/// What the `compress` scenario's client accepts: a browser's codings,
/// brotli first.
pub const COMPRESS_ACCEPT: &str = "br, gzip";

/// The backend's answer time in the caching scenarios.
pub const CACHE_BACKEND_DELAY: Duration = Duration::from_millis(5);

/// The path the caching scenarios request, and the docroot file (name,
/// size) that holds the backend's body for the `weir-static` row.
pub const CACHED_PAGE: (&str, usize) = ("cached.txt", 164);

/// The most requests the backend may answer during one repeat's load
/// (warm-up and measured) of a caching scenario, whose cache was filled
/// before it: a response is kept 2 minutes, so each 2 minutes of load may
/// refresh it once; twice that, and one more, allows a refresh to start
/// on two workers at once. More means the server did not answer from its
/// cache.
pub fn misses_allowed(load: Duration) -> u64 {
    2 * (1 + load.as_secs() / 120) + 1
}

/// How long a case runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// Measure for the run's `--duration`.
    Duration,
    /// Send exactly this many requests.
    Requests(u64),
}

/// One load shape within a scenario.
#[derive(Debug, Clone)]
pub struct Case {
    /// Short label, unique in the scenario ("https", "256 KiB", "c5000", "n5000 c100").
    pub label: String,
    /// HTTPS?
    pub tls: bool,
    /// Path requested.
    pub path: String,
    /// Expected body size (checked before measuring).
    pub body_size: usize,
    /// Connections.
    pub connections: usize,
    /// Generator threads.
    pub threads: usize,
    /// Keep-alive.
    pub keepalive: bool,
    /// Length of the case.
    pub amount: Amount,
    /// Request timeout.
    pub timeout: Duration,
    /// The servers write an access log line per request to a file.
    pub access_log: bool,
    /// The least a `Duration` case is measured, whatever `--duration` says.
    pub min_duration: Option<Duration>,
    /// The least warm-up before it is measured, whatever `--warmup` says.
    pub min_warmup: Option<Duration>,
    /// The name the client sends, as SNI and Host.
    pub host: &'static str,
    /// Headers the client sends beside Host, in every request.
    pub headers: Vec<(&'static str, &'static str)>,
    /// The answers must come back in a content coding (the server
    /// compresses them); the body checked is the identity's.
    pub encoded: bool,
    /// The servers proxy to `weir-bench backend` in this case of a
    /// scenario that mixes serving files and proxying (`seed-001`).
    pub proxy: bool,
}

impl Case {
    /// How long the case is measured when the run asks for `asked`.
    pub fn measured_for(&self, asked: Duration) -> Duration {
        self.min_duration.map_or(asked, |m| asked.max(m))
    }

    /// How long the case is warmed up when the run asks for `asked`.
    pub fn warmed_for(&self, asked: Duration) -> Duration {
        self.min_warmup.map_or(asked, |m| asked.max(m))
    }
}

/// The least the concurrency scenario is measured after its warm-up: at
/// 10,000 connections the opening handshakes take seconds, and a shorter run
/// measures them rather than the serving.
pub const CONCURRENCY_MIN_MEASURE: Duration = Duration::from_secs(15);

/// The `app` scenario's warm-up and measured time, as seed 003 ran its
/// rows: with thousands of TLS connections opening, a shorter window
/// measures the handshakes and the app's start rather than the serving.
pub const APP_MIN_WARMUP: Duration = Duration::from_secs(10);
pub const APP_MIN_MEASURE: Duration = Duration::from_secs(30);

/// Static files the docroot holds: (name, size).
pub const FILES: [(&str, usize); 4] = [
    ("index.html", 164),
    ("4k.html", 4096),
    ("256k.bin", 256 * 1024),
    ("1m.bin", 1024 * 1024),
];

fn case(label: &str, tls: bool, path: &str, size: usize, conns: usize) -> Case {
    Case {
        label: label.into(),
        tls,
        path: path.into(),
        body_size: size,
        connections: conns,
        threads: 1,
        keepalive: true,
        amount: Amount::Duration,
        timeout: Duration::from_secs(2),
        access_log: false,
        min_duration: None,
        min_warmup: None,
        host: "localhost",
        headers: Vec::new(),
        encoded: false,
        proxy: false,
    }
}

/// The cases of `s`; `quick` trims them to a smoke test.
pub fn cases(s: Scenario, quick: bool) -> Vec<Case> {
    match s {
        Scenario::Static => vec![
            case("http", false, "/index.html", 164, 100),
            case("https", true, "/index.html", 164, 100),
        ],
        Scenario::Proxy => {
            let mut v = vec![
                case("http", false, "/", 164, 100),
                case("https", true, "/", 164, 100),
            ];
            if !quick {
                v.push(Case {
                    access_log: true,
                    ..case("http + log", false, "/", 164, 100)
                });
            }
            v
        }
        Scenario::Sizes => {
            let all: Vec<Case> = FILES
                .iter()
                .map(|(name, size)| {
                    case(&human_size(*size), false, &format!("/{name}"), *size, 100)
                })
                .collect();
            if quick {
                all.into_iter().take(2).collect()
            } else {
                all
            }
        }
        Scenario::Concurrency => {
            let conns: &[usize] = if quick {
                &[200]
            } else {
                &[1000, 5000, 10000, 19000]
            };
            conns
                .iter()
                .map(|&c| Case {
                    threads: 2,
                    timeout: Duration::from_secs(10),
                    min_duration: Some(CONCURRENCY_MIN_MEASURE),
                    ..case(&format!("c{c}"), true, "/index.html", 164, c)
                })
                .collect()
        }
        Scenario::Ab => {
            let ns: &[u64] = if quick { &[1000] } else { &[1000, 5000, 10000] };
            let cs: &[usize] = if quick { &[50] } else { &[50, 100, 200] };
            let mut v = Vec::new();
            for &n in ns {
                for &c in cs {
                    v.push(Case {
                        keepalive: false,
                        amount: Amount::Requests(n),
                        ..case(&format!("n{n} c{c}"), false, "/index.html", 164, c)
                    });
                }
            }
            v
        }
        Scenario::Startup => vec![case(
            &format!("{STARTUP_SITES} sites"),
            false,
            "/index.html",
            164,
            1,
        )],
        Scenario::Idle => {
            let n = if quick { 200 } else { 10_000 };
            vec![case(&format!("c{n}"), true, "/index.html", 164, n)]
        }
        Scenario::Cache | Scenario::Chain => {
            let (name, size) = CACHED_PAGE;
            let tls = s == Scenario::Chain;
            let label = if tls { "https" } else { "http" };
            vec![case(label, tls, &format!("/{name}"), size, 100)]
        }
        Scenario::Php => vec![case("http", false, PHP_PATH, PHP_BODY.len(), 100)],
        Scenario::Tcp => vec![Case {
            host: TCP_HOST,
            ..case("https", true, "/index.html", 164, 100)
        }],
        // Quick: a smoke test of the wiring, at a count and length that
        // measure nothing but that every server answers through its app.
        Scenario::App => {
            let conns: &[usize] = if quick { &[200] } else { &[5000, 10000] };
            conns
                .iter()
                .map(|&c| Case {
                    threads: 2,
                    timeout: Duration::from_secs(10),
                    min_duration: (!quick).then_some(APP_MIN_MEASURE),
                    min_warmup: (!quick).then_some(APP_MIN_WARMUP),
                    ..case(&format!("c{c}"), true, "/", 164, c)
                })
                .collect()
        }
        Scenario::Compress => vec![Case {
            headers: vec![("Accept-Encoding", COMPRESS_ACCEPT)],
            encoded: true,
            ..case(
                &format!("{} JSON", human_size(COMPRESS_BODY)),
                false,
                crate::backend::JSON_PATH,
                COMPRESS_BODY,
                100,
            )
        }],
        Scenario::Seed001 => {
            let conns: &[usize] = if quick { &[50] } else { &[10, 100, 500] };
            let mut v = Vec::new();
            for proxy in [false, true] {
                for &c in conns {
                    let (what, path) = if proxy {
                        ("proxy", "/")
                    } else {
                        ("static", "/index.html")
                    };
                    v.push(Case {
                        proxy,
                        threads: if c > 100 { 2 } else { 1 },
                        ..case(&format!("{what} c{c}"), true, path, 164, c)
                    });
                }
            }
            v
        }
        Scenario::Seed004 => {
            let mut v = Vec::new();
            // ab: the seed's three runs.
            let ab: &[(u64, usize)] = if quick {
                &[(1000, 50)]
            } else {
                &[(1000, 50), (5000, 100), (10000, 200)]
            };
            for &(n, c) in ab {
                v.push(Case {
                    keepalive: false,
                    amount: Amount::Requests(n),
                    ..case(&format!("ab n{n} c{c}"), false, "/index.html", 164, c)
                });
            }
            v.push(Case {
                amount: Amount::Requests(10_000),
                ..case("hey n10000 c50", false, "/index.html", 164, 50)
            });
            v.push(case("wrk c100", false, "/index.html", 164, 100));
            let ramp: &[usize] = if quick {
                &[10, 200]
            } else {
                &[10, 50, 100, 200]
            };
            for &c in ramp {
                v.push(case(&format!("ramp c{c}"), false, "/index.html", 164, c));
            }
            v
        }
    }
}

/// The most connections any case of a full run opens at once: a server
/// configured for fewer turns some away (HAProxy's `maxconn`).
pub fn max_connections() -> usize {
    Scenario::ALL
        .into_iter()
        .flat_map(|s| cases(s, false))
        .map(|c| c.connections)
        .max()
        .unwrap_or(0)
}

/// Name-based virtual hosts in the `startup` scenario's config.
pub const STARTUP_SITES: usize = 10;

/// "164 B", "4 KiB", "256 KiB", "1 MiB".
pub fn human_size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_measured_for_at_least_15_s_and_others_as_asked() {
        for quick in [false, true] {
            for c in cases(Scenario::Concurrency, quick) {
                assert_eq!(
                    c.measured_for(Duration::from_secs(4)),
                    Duration::from_secs(15)
                );
                assert_eq!(
                    c.measured_for(Duration::from_secs(30)),
                    Duration::from_secs(30)
                );
            }
        }
        for c in cases(Scenario::Static, false) {
            assert_eq!(
                c.measured_for(Duration::from_secs(4)),
                Duration::from_secs(4)
            );
        }
    }

    #[test]
    fn the_seed_scenarios_have_their_seeds_servers_and_tools_shapes() {
        use ServerKind::*;
        for k in ServerKind::ALL {
            assert_eq!(
                Scenario::Seed001.applies_to(k),
                matches!(k, Weir | WeirB | Nginx | Caddy),
                "{k:?}"
            );
            assert_eq!(
                Scenario::Seed004.applies_to(k),
                matches!(k, Weir | WeirB | Nginx | Apache),
                "{k:?}"
            );
        }
        assert_eq!(Scenario::parse("seed-001"), Some(Scenario::Seed001));
        assert_eq!(Scenario::parse("seed-004"), Some(Scenario::Seed004));
        let s1 = cases(Scenario::Seed001, false);
        let labels: Vec<&str> = s1.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "static c10",
                "static c100",
                "static c500",
                "proxy c10",
                "proxy c100",
                "proxy c500"
            ]
        );
        for c in &s1 {
            assert!(c.tls && c.keepalive, "{}", c.label);
            assert_eq!(c.proxy, c.label.starts_with("proxy"));
            assert_eq!(c.amount, Amount::Duration);
        }
        assert!(Scenario::Seed001.proxied(Nginx));
        let s4 = cases(Scenario::Seed004, false);
        let labels: Vec<&str> = s4.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "ab n1000 c50",
                "ab n5000 c100",
                "ab n10000 c200",
                "hey n10000 c50",
                "wrk c100",
                "ramp c10",
                "ramp c50",
                "ramp c100",
                "ramp c200"
            ]
        );
        for c in &s4 {
            assert!(!c.tls && !c.proxy, "{}", c.label);
            // ab alone opens a connection per request.
            assert_eq!(c.keepalive, !c.label.starts_with("ab"), "{}", c.label);
        }
        assert_eq!(s4[2].amount, Amount::Requests(10_000));
        assert_eq!(s4[3].amount, Amount::Requests(10_000));
        assert!(!Scenario::Seed004.proxied(Apache));
        assert!(cases(Scenario::Seed004, true).len() < s4.len());
    }

    #[test]
    fn the_proxy_has_one_logged_row_outside_quick_runs() {
        let logged = |quick| {
            cases(Scenario::Proxy, quick)
                .into_iter()
                .filter(|c| c.access_log)
                .count()
        };
        assert_eq!(logged(false), 1);
        assert_eq!(logged(true), 0);
        assert_eq!(max_connections(), 19_000);
    }

    #[test]
    fn the_caching_scenarios_are_one_c100_case_of_the_cached_page_behind_a_slow_backend() {
        for (s, tls, label) in [
            (Scenario::Cache, false, "http"),
            (Scenario::Chain, true, "https"),
        ] {
            for quick in [false, true] {
                let [c] = &cases(s, quick)[..] else {
                    panic!("{s:?}: one case");
                };
                assert_eq!((c.label.as_str(), c.tls), (label, tls));
                assert_eq!((c.path.as_str(), c.body_size), ("/cached.txt", 164));
                assert_eq!((c.connections, c.keepalive), (100, true));
            }
            assert!(s.caches());
            assert_eq!(s.backend_delay(), Duration::from_millis(5));
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::Proxy.backend_delay(), Duration::ZERO);
        let takes_part = |s: Scenario| -> Vec<ServerKind> {
            ServerKind::ALL
                .into_iter()
                .filter(|&k| s.applies_to(k))
                .collect()
        };
        assert_eq!(
            takes_part(Scenario::Cache),
            [
                ServerKind::Weir,
                ServerKind::WeirB,
                ServerKind::Nginx,
                ServerKind::Apache,
                ServerKind::Varnish
            ]
        );
        assert_eq!(
            takes_part(Scenario::Chain),
            [
                ServerKind::Weir,
                ServerKind::WeirB,
                ServerKind::HaproxyVarnish
            ]
        );
        assert!(!Scenario::Proxy.applies_to(ServerKind::HaproxyVarnish));
        assert_eq!(Scenario::Cache.targets(), &[(WEIR_STATIC_ROW, 0.9)]);
        assert_eq!(Scenario::Chain.targets(), &[("haproxy-varnish", 2.0)]);
    }

    #[test]
    fn a_cache_may_miss_a_handful_of_times_and_once_more_per_expiry() {
        assert_eq!(misses_allowed(Duration::from_secs(2)), 3);
        assert_eq!(misses_allowed(Duration::from_secs(18)), 3);
        assert_eq!(misses_allowed(Duration::from_secs(130)), 5);
    }

    #[test]
    fn php_and_tcp_are_one_c100_case_each_with_their_servers_and_targets() {
        let takes_part = |s: Scenario| -> Vec<ServerKind> {
            ServerKind::ALL
                .into_iter()
                .filter(|&k| s.applies_to(k))
                .collect()
        };
        let [php] = &cases(Scenario::Php, false)[..] else {
            panic!("php: one case");
        };
        assert_eq!((php.label.as_str(), php.tls), ("http", false));
        assert_eq!(php.path, "/index.php?n=1");
        assert_eq!(php.body_size, PHP_BODY.len());
        assert_eq!(
            (php.connections, php.keepalive, php.host),
            (100, true, "localhost")
        );
        assert!(PHP_PAGE.1.contains("$_GET['n']"));
        assert_eq!(
            takes_part(Scenario::Php),
            [
                ServerKind::Weir,
                ServerKind::WeirB,
                ServerKind::Nginx,
                ServerKind::Apache
            ]
        );
        assert_eq!(Scenario::Php.targets(), &[("nginx", 1.0)]);

        let [tcp] = &cases(Scenario::Tcp, true)[..] else {
            panic!("tcp: one case");
        };
        assert_eq!(
            (tcp.label.as_str(), tcp.tls, tcp.host),
            ("https", true, "tcp.test")
        );
        assert_eq!((tcp.path.as_str(), tcp.body_size), ("/index.html", 164));
        assert_eq!(
            takes_part(Scenario::Tcp),
            [ServerKind::Weir, ServerKind::WeirB, ServerKind::Haproxy]
        );
        assert_eq!(Scenario::Tcp.targets(), &[("haproxy", 1.0)]);
        assert!(Scenario::Tcp.tls_backend() && !Scenario::Php.tls_backend());
        for s in [Scenario::Php, Scenario::Tcp] {
            assert_eq!(Scenario::parse(s.name()), Some(s));
            assert!(!s.caches());
            assert!(takes_part(s).iter().all(|&k| !s.proxied(k)));
        }
        // Every other case still names localhost.
        for s in Scenario::ALL.into_iter().filter(|&s| s != Scenario::Tcp) {
            assert!(
                cases(s, false).iter().all(|c| c.host == "localhost"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn app_is_seed_003s_levels_warmed_10_s_and_measured_30_s_in_full_runs() {
        let full = cases(Scenario::App, false);
        let labels: Vec<&str> = full.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["c5000", "c10000"]);
        for c in &full {
            assert!(c.tls && c.keepalive, "{c:?}");
            assert_eq!(
                (c.path.as_str(), c.body_size, c.host),
                ("/", 164, "localhost")
            );
            assert_eq!((c.threads, c.timeout), (2, Duration::from_secs(10)));
            assert_eq!(c.measured_for(Duration::from_secs(15)), APP_MIN_MEASURE);
            assert_eq!(
                c.measured_for(Duration::from_secs(60)),
                Duration::from_secs(60)
            );
            assert_eq!(c.warmed_for(Duration::from_secs(3)), APP_MIN_WARMUP);
            assert_eq!(
                c.warmed_for(Duration::from_secs(20)),
                Duration::from_secs(20)
            );
        }
        assert_eq!(
            (APP_MIN_WARMUP, APP_MIN_MEASURE),
            (Duration::from_secs(10), Duration::from_secs(30))
        );
        // Quick: small and as short as the run asks.
        let [quick] = &cases(Scenario::App, true)[..] else {
            panic!("app --quick: one case");
        };
        assert_eq!((quick.label.as_str(), quick.connections), ("c200", 200));
        let short = Duration::from_millis(500);
        assert_eq!(
            (quick.measured_for(short), quick.warmed_for(short)),
            (short, short)
        );
        // No other scenario gets a longer warm-up than asked.
        for s in Scenario::ALL.into_iter().filter(|&s| s != Scenario::App) {
            assert!(
                cases(s, false).iter().all(|c| c.warmed_for(short) == short),
                "{s:?}"
            );
        }
        let takes_part: Vec<ServerKind> = ServerKind::ALL
            .into_iter()
            .filter(|&k| Scenario::App.applies_to(k))
            .collect();
        assert_eq!(
            takes_part,
            [
                ServerKind::Weir,
                ServerKind::WeirB,
                ServerKind::Nginx,
                ServerKind::Apache,
                ServerKind::Caddy,
                ServerKind::Haproxy
            ]
        );
        // The app is each server's own, not the scenario's shared backend.
        assert!(takes_part.iter().all(|&k| !Scenario::App.proxied(k)));
        assert!(!Scenario::App.caches() && !Scenario::App.tls_backend());
        assert!(Scenario::App.targets().is_empty());
        assert_eq!(Scenario::parse("app"), Some(Scenario::App));
        assert!(
            Scenario::App
                .describe()
                .contains("counted in every server's CPU and memory")
        );
        assert_eq!(max_connections(), 19_000);
    }

    #[test]
    fn compress_is_one_c100_case_of_20_kib_of_json_asked_for_in_br_or_gzip() {
        let [c] = &cases(Scenario::Compress, true)[..] else {
            panic!("compress: one case");
        };
        assert_eq!(c.label, "20 KiB JSON");
        assert_eq!((c.path.as_str(), c.body_size), ("/data.json", 20 * 1024));
        assert_eq!((c.tls, c.connections, c.keepalive), (false, 100, true));
        assert_eq!(c.headers, [("Accept-Encoding", "br, gzip")]);
        assert!(c.encoded);
        assert_eq!(Scenario::Compress.backend_size(), 20 * 1024);
        assert_eq!(Scenario::Proxy.backend_size(), 164);
        let takes_part: Vec<ServerKind> = ServerKind::ALL
            .into_iter()
            .filter(|&k| Scenario::Compress.applies_to(k))
            .collect();
        assert_eq!(
            takes_part,
            [
                ServerKind::Weir,
                ServerKind::WeirB,
                ServerKind::Nginx,
                ServerKind::Caddy
            ]
        );
        assert!(takes_part.iter().all(|&k| Scenario::Compress.proxied(k)));
        assert_eq!(Scenario::Compress.targets(), &[("nginx", 0.8)]);
        assert_eq!(Scenario::parse("compress"), Some(Scenario::Compress));
        // No other case sends a header of its own or expects a coding.
        for s in Scenario::ALL
            .into_iter()
            .filter(|&s| s != Scenario::Compress)
        {
            assert!(
                cases(s, false)
                    .iter()
                    .all(|c| c.headers.is_empty() && !c.encoded),
                "{s:?}"
            );
        }
    }
}
