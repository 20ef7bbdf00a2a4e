//! One config writer per server, all configured alike: the same number of
//! workers/threads (`--workers`, one per server CPU when pinned), keep-alive
//! on with no per-connection request cap and a 65 s idle timeout, access
//! logs off (to a file in the features-on row), sendfile on where it exists,
//! the same certificate, TLS 1.2 and 1.3, listening on 127.0.0.1 only.
//! nginx serves files through `open_file_cache`, as a tuned nginx does
//! (weir serves small files from memory). Each writer puts its config in the run folder
//! so a reader can check it, and returns the command that starts the server in
//! the foreground (so we hold its PID and stop it by PID).
//!
//! As proxies they do the same work per request: each sends the backend the
//! forwarding fields Caddy sends by default, X-Forwarded-For, -Proto and
//! -Host, and no others (weir's `Forwarded` and `Via` are turned off; nginx
//! and HAProxy are told to add the three; Varnish adds X-Forwarded-For
//! itself), and each keeps up to [`UPSTREAM_IDLE`] idle upstream
//! connections, weir's default pool, so none reconnects to the backend
//! more than another.
//!
//! As caches ([`Role::Cache`]) each keeps 256 MiB of responses in memory and
//! keeps a response the backend gives no freshness for 2 minutes, Varnish's
//! default TTL, then answers stale while one request refreshes it:
//! weir `cache = { default_ttl = "2m", grace = "10s" }` (Varnish's default
//! grace; weir's own default is none, RFC 9111 §4.2.4) with `[cache] memory`,
//! Varnish `-s malloc,256m` with its built-in VCL only, nginx `proxy_cache`
//! with `proxy_cache_valid 200 2m`, `proxy_cache_lock` and stale answers
//! while one request refreshes (`proxy_cache_use_stale updating`), its cache
//! files opened through `open_file_cache`. Varnish has no TLS: its users put
//! a TLS terminator in front, and [`ServerKind::HaproxyVarnish`] is that
//! chain, HAProxy speaking the PROXY protocol v2 to Varnish. State that
//! should live in memory (Varnish's working directory, which its manual says
//! belongs on a RAM-backed file system, and nginx's cache files) goes in the
//! run's temporary folder, [`ServerSetup::tmp`].
//!
//! In front of PHP ([`Role::Php`]) each server gets its own php-fpm master,
//! started before it as its [`Companion`] from the same generated pool
//! ([`php_fpm_config`]): a static pool of [`PHP_CHILDREN`] children on a
//! Unix socket in the temporary folder. A kept FastCGI connection holds a
//! php-fpm child for as long as it is open, so a server keeps at most one
//! per child in all, and only if it can make a request wait for a free one:
//! weir (`max_conns`, `keep_conn`) and Apache (`max`, per process) keep them; nginx,
//! which opens a new connection whenever none is idle and cannot queue,
//! connects per request (see [`nginx_config`]).
//! As TLS passthroughs ([`Role::Passthrough`]) weir and HAProxy read the
//! client hello's SNI and pass the stream on without terminating TLS.
//!
//! As compressing proxies ([`Role::Compress`]) each turns compression on
//! as its users do and keeps its own default level: nginx `gzip on` with
//! `gzip_types application/json` (level 1), Caddy `encode gzip zstd`
//! (gzip level 5), weir `compress = true`.
//!
//! In front of an app ([`Role::App`]) every server has the same
//! [`APP_INSTANCES`] processes of `weir-bench backend` behind it: weir
//! starts them itself (`app = …`, on ports it chooses); nginx and HAProxy
//! get them as [`Companion`]s on [`app_ports`], with their proxy configs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::CompareError;

/// The server name the `tcp` scenario's client sends (SNI and Host), and
/// the name its fronts route by.
pub const TCP_HOST: &str = "tcp.test";

/// The children of the `php` scenario's php-fpm pool (`pm = static`), and
/// the most FastCGI connections each server keeps to it.
pub const PHP_CHILDREN: usize = 4;

/// The `app` scenario's app processes behind every server, each one
/// `weir-bench backend` thread: one per CPU of the 2-CPU machines the
/// seeds ran on, and weir's supervisor balances over more than one.
pub const APP_INSTANCES: usize = 2;

/// Idle upstream connections every proxy keeps: weir's default `max_idle`
/// (docs/config.md). nginx's `keepalive` counts per worker, as weir's pool
/// does per worker thread.
pub const UPSTREAM_IDLE: usize = 1024;

/// Client keep-alive idle timeout, seconds, of every server.
pub const KEEPALIVE_SECS: u64 = 65;

/// HAProxy's `maxconn`: above `most`, the largest case's connections (the
/// backend side shares pooled connections). It asks for about 2 × maxconn
/// descriptors; `no strict-limits` makes a shortfall a warning.
pub fn haproxy_maxconn(most: usize) -> usize {
    (most + most / 10).max(1000)
}

/// The servers `compare` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerKind {
    /// weir itself.
    Weir,
    /// A second weir build (`--weir-b`), to measure `weir` against: an
    /// A/B of two versions with the same configs, rounds and ratios.
    WeirB,
    /// nginx.
    Nginx,
    /// Apache httpd, event MPM.
    Apache,
    /// Caddy.
    Caddy,
    /// HAProxy (proxy only).
    Haproxy,
    /// Varnish (proxy and cache, no TLS).
    Varnish,
    /// lighttpd.
    Lighttpd,
    /// HAProxy terminating TLS in front of a caching Varnish, over the PROXY
    /// protocol v2: two processes measured as one server.
    #[serde(rename = "haproxy-varnish")]
    HaproxyVarnish,
}

/// Where the weir builds of a comparison are.
#[derive(Debug, Clone, Copy)]
pub struct Weirs<'a> {
    /// `weir`: the build every ratio is of.
    pub weir: &'a Path,
    /// `weir-b`, if the comparison has it.
    pub weir_b: Option<&'a Path>,
}

/// What a server is asked to do in a case.
#[derive(Debug, Clone)]
pub enum Role {
    /// Serve files from this directory.
    Static(PathBuf),
    /// Proxy to this upstream address.
    Proxy(std::net::SocketAddr),
    /// Proxy to this upstream address and cache its responses.
    Cache(std::net::SocketAddr),
    /// Proxy to this upstream address and compress its answers for a
    /// client that accepts a coding.
    Compress(std::net::SocketAddr),
    /// Name-based virtual hosts on the one port: (host name, its root).
    Sites(Vec<(String, PathBuf)>),
    /// Serve the PHP pages of this directory through a php-fpm pool of the
    /// server's own ([`php_fpm_socket`]).
    Php(PathBuf),
    /// Pass TLS connections whose SNI is [`TCP_HOST`] to this address
    /// without terminating them (the case is TLS; the front is not).
    Passthrough(std::net::SocketAddr),
    /// Proxy to [`APP_INSTANCES`] processes of this `weir-bench` binary's
    /// `backend` ([`app_args`]): run by weir as its app, by the harness
    /// for the others ([`app_ports`]).
    App(PathBuf),
}

/// The ports of the app processes the harness starts behind a server on
/// `port` (weir chooses its own): right above it, where the other
/// scenarios' backend listens, which the `app` scenario does not start.
pub fn app_ports(port: u16) -> Vec<u16> {
    (1..=APP_INSTANCES as u16).map(|i| port + i).collect()
}

/// The arguments of one app process listening on `listen`: the body and
/// thread count are the same whoever starts it.
pub fn app_args(listen: &str) -> Vec<String> {
    [
        "backend",
        "--listen",
        listen,
        "--size",
        "164",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec()
}

/// Everything a config writer needs.
#[derive(Debug, Clone)]
pub struct ServerSetup {
    /// Folder for this server's config, logs and runtime files.
    pub dir: PathBuf,
    /// Listen port on 127.0.0.1.
    pub port: u16,
    /// Terminate TLS on the port.
    pub tls: bool,
    /// Static files or proxy.
    pub role: Role,
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// Certificate and key in one PEM (HAProxy).
    pub combined: PathBuf,
    /// Workers or threads.
    pub workers: usize,
    /// weir's `server.accept`, when not its default.
    pub weir_accept: Option<String>,
    /// Extra keys for weir's site (`--weir-site-keys`).
    pub weir_site_keys: Option<String>,
    /// Extra top-level sections for weir's config (`--weir-sections`).
    pub weir_sections: Option<String>,
    /// Write an access log line per request to this file (features-on row).
    pub access_log: Option<PathBuf>,
    /// The most connections any case of the run opens at once.
    pub max_connections: usize,
    /// The connections this case opens (Apache sizes its threads to them).
    pub connections: usize,
    /// The run's temporary folder, RAM-backed where the machine has
    /// `/dev/shm`: Varnish's working directories and nginx's cache files.
    pub tmp: PathBuf,
}

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The config file written.
    pub config: PathBuf,
    /// A command that checks the config (non-zero exit = rejected).
    pub validate: Option<Vec<String>>,
    /// Where the server's standard output goes instead of its log (HAProxy
    /// writes its access log there).
    pub stdout: Option<PathBuf>,
    /// Processes started before the server, each ready on its port, and
    /// stopped after it: part of the server as measured.
    pub companions: Vec<Companion>,
}

/// A process a server needs behind it (the chain's Varnish, php-fpm).
#[derive(Debug, Clone)]
pub struct Companion {
    /// Its name, for logs and messages.
    pub name: String,
    /// How to start it.
    pub launch: Launch,
    /// Where it listens once ready.
    pub ready: Ready,
}

/// Where a process listens once it is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// A port on 127.0.0.1.
    Port(u16),
    /// A Unix socket.
    Unix(PathBuf),
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ready::Port(p) => write!(f, "127.0.0.1:{p}"),
            Ready::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The port of the chain's Varnish, behind HAProxy on `port` (the backend
/// is on `port + 1`).
pub fn chain_varnish_port(port: u16) -> u16 {
    port + 2
}

impl ServerKind {
    /// All servers, in table order.
    pub const ALL: [ServerKind; 9] = [
        ServerKind::Weir,
        ServerKind::WeirB,
        ServerKind::Nginx,
        ServerKind::Apache,
        ServerKind::Caddy,
        ServerKind::Haproxy,
        ServerKind::Varnish,
        ServerKind::Lighttpd,
        ServerKind::HaproxyVarnish,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Weir => "weir",
            ServerKind::WeirB => "weir-b",
            ServerKind::Nginx => "nginx",
            ServerKind::Apache => "apache",
            ServerKind::Caddy => "caddy",
            ServerKind::Haproxy => "haproxy",
            ServerKind::Varnish => "varnish",
            ServerKind::Lighttpd => "lighttpd",
            ServerKind::HaproxyVarnish => "haproxy-varnish",
        }
    }

    /// Parses a name from `--servers`.
    pub fn parse(s: &str) -> Option<ServerKind> {
        ServerKind::ALL.into_iter().find(|k| k.name() == s.trim())
    }

    /// The binary (weir's is given by `--weir`, weir-b's by `--weir-b`).
    pub fn binary(self, weirs: Weirs<'_>) -> PathBuf {
        match self {
            ServerKind::Weir => weirs.weir.to_path_buf(),
            ServerKind::WeirB => weirs
                .weir_b
                .map_or_else(|| PathBuf::from("weir-b"), Path::to_path_buf),
            ServerKind::Nginx => find("nginx"),
            ServerKind::Apache => find("apache2"),
            ServerKind::Caddy => find("caddy"),
            ServerKind::Haproxy | ServerKind::HaproxyVarnish => find("haproxy"),
            ServerKind::Varnish => find("varnishd"),
            ServerKind::Lighttpd => find("lighttpd"),
        }
    }

    /// Every binary it needs: the chain needs Varnish's beside HAProxy's.
    pub fn binaries(self, weirs: Weirs<'_>) -> Vec<PathBuf> {
        match self {
            ServerKind::HaproxyVarnish => {
                vec![self.binary(weirs), ServerKind::Varnish.binary(weirs)]
            }
            _ => vec![self.binary(weirs)],
        }
    }

    /// How to install it, for `--require`'s refusal: the Debian packages
    /// bench/setup installs, or the build for weir.
    pub fn install_hint(self) -> String {
        let pkg = match self {
            ServerKind::Weir | ServerKind::WeirB => {
                return "build it with `cargo build --release -p weir` or give its path with --weir / --weir-b"
                    .into()
            }
            ServerKind::Nginx => "nginx",
            ServerKind::Apache => "apache2",
            ServerKind::Caddy => "caddy",
            ServerKind::Haproxy => "haproxy",
            ServerKind::Varnish => "varnish",
            ServerKind::Lighttpd => "lighttpd lighttpd-mod-openssl",
            ServerKind::HaproxyVarnish => "haproxy varnish",
        };
        format!("install it with `apt-get install {pkg}` (or run bench/setup)")
    }

    /// Can it serve files?
    pub fn serves_static(self) -> bool {
        !matches!(
            self,
            ServerKind::Haproxy | ServerKind::Varnish | ServerKind::HaproxyVarnish
        )
    }

    /// Can it write an access log to a file by itself? Varnish logs to
    /// shared memory and needs `varnishncsa` beside it to write a file.
    pub fn logs_to_file(self) -> bool {
        self != ServerKind::Varnish
    }

    /// Is it in the proxy scenario?
    pub fn proxies(self) -> bool {
        matches!(
            self,
            ServerKind::Weir
                | ServerKind::WeirB
                | ServerKind::Nginx
                | ServerKind::Apache
                | ServerKind::Caddy
                | ServerKind::Haproxy
                | ServerKind::Varnish
        )
    }

    /// Can it cache responses by itself, as its users configure it?
    /// Apache's fair form is mod_cache with its shared-memory store
    /// (mod_cache_socache); Caddy's cache plugin (not in Debian's build)
    /// and HAProxy's small-object cache are left out. The chain caches in
    /// its Varnish.
    pub fn caches(self) -> bool {
        matches!(
            self,
            ServerKind::Weir
                | ServerKind::WeirB
                | ServerKind::Nginx
                | ServerKind::Apache
                | ServerKind::Varnish
                | ServerKind::HaproxyVarnish
        )
    }

    /// Can it serve PHP through FastCGI, as its users run it?
    pub fn serves_php(self) -> bool {
        matches!(
            self,
            ServerKind::Weir | ServerKind::WeirB | ServerKind::Nginx | ServerKind::Apache
        )
    }

    /// Can it compress what it proxies, as its users turn it on? (Apache's
    /// mod_deflate is left out, as its cache is.)
    pub fn compresses(self) -> bool {
        matches!(
            self,
            ServerKind::Weir | ServerKind::WeirB | ServerKind::Nginx | ServerKind::Caddy
        )
    }

    /// Can it pass TLS through by SNI without terminating it?
    pub fn passes_tls_through(self) -> bool {
        matches!(
            self,
            ServerKind::Weir | ServerKind::WeirB | ServerKind::Haproxy
        )
    }

    /// Is it in the `app` scenario, in front of an app's processes? (weir
    /// runs the app itself; the others front the harness's.)
    pub fn fronts_apps(self) -> bool {
        matches!(
            self,
            ServerKind::Weir
                | ServerKind::WeirB
                | ServerKind::Nginx
                | ServerKind::Apache
                | ServerKind::Caddy
                | ServerKind::Haproxy
        )
    }

    /// Can it terminate TLS?
    pub fn tls(self) -> bool {
        self != ServerKind::Varnish
    }

    /// The version string the binary reports.
    pub fn version(self, weirs: Weirs<'_>) -> String {
        if self == ServerKind::HaproxyVarnish {
            return format!(
                "{} + {}",
                ServerKind::Haproxy.version(weirs),
                ServerKind::Varnish.version(weirs)
            );
        }
        let bin = self.binary(weirs);
        let arg: &[&str] = match self {
            ServerKind::Weir | ServerKind::WeirB => &["--version"],
            ServerKind::Haproxy
            | ServerKind::HaproxyVarnish
            | ServerKind::Lighttpd
            | ServerKind::Apache => &["-v"],
            ServerKind::Nginx => &["-v"],
            ServerKind::Caddy => &["version"],
            ServerKind::Varnish => &["-V"],
        };
        match std::process::Command::new(&bin).args(arg).output() {
            Ok(o) => {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                let line = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim();
                line.chars().take(100).collect()
            }
            Err(_) => "unknown".into(),
        }
    }

    /// Writes the config into `s.dir` and returns how to start the server.
    pub fn prepare(self, s: &ServerSetup, weirs: Weirs<'_>) -> Result<Launch, CompareError> {
        if matches!(s.role, Role::Cache(_)) && !self.caches() {
            return Err(CompareError::NotApplicable(format!(
                "{} does not cache",
                self.name()
            )));
        }
        if matches!(s.role, Role::Php(_)) && !self.serves_php() {
            return Err(CompareError::NotApplicable(format!(
                "{} is not in front of PHP here",
                self.name()
            )));
        }
        if matches!(s.role, Role::Passthrough(_)) && !self.passes_tls_through() {
            return Err(CompareError::NotApplicable(format!(
                "{} does not pass TLS through",
                self.name()
            )));
        }
        if matches!(s.role, Role::Compress(_)) && !self.compresses() {
            return Err(CompareError::NotApplicable(format!(
                "{} does not compress here",
                self.name()
            )));
        }
        if matches!(s.role, Role::App(_)) && !self.fronts_apps() {
            return Err(CompareError::NotApplicable(format!(
                "{} is not in front of the app here",
                self.name()
            )));
        }
        if self == ServerKind::HaproxyVarnish {
            return chain_launch(s, weirs);
        }
        std::fs::create_dir_all(&s.dir).map_err(|e| CompareError::io(&s.dir, e))?;
        let bin = self.binary(weirs);
        let d = s.dir.display().to_string();
        // HAProxy logs through syslog; `log stdout` and this file stand in
        // for a local syslog daemon.
        let stdout = match self {
            ServerKind::Haproxy => s.access_log.clone(),
            _ => None,
        };
        let (file, text, args, env, validate): Prepared = match self {
            ServerKind::Weir | ServerKind::WeirB => {
                let cfg = s.dir.join("weir.toml");
                let c = cfg.display().to_string();
                (
                    "weir.toml",
                    weir_config(s),
                    vec!["run".into(), "--config".into(), c.clone()],
                    vec![],
                    Some(vec![
                        bin.display().to_string(),
                        "validate".into(),
                        "--config".into(),
                        c,
                    ]),
                )
            }
            ServerKind::Nginx => {
                // Every round starts with an empty cache, as Varnish's and
                // weir's memory does.
                if let Role::Cache(_) = s.role {
                    let _ = std::fs::remove_dir_all(nginx_cache_dir(s));
                }
                let c = s.dir.join("nginx.conf").display().to_string();
                (
                    "nginx.conf",
                    nginx_config(s),
                    vec!["-p".into(), format!("{d}/"), "-c".into(), c.clone()],
                    vec![],
                    Some(vec![
                        bin.display().to_string(),
                        "-t".into(),
                        "-p".into(),
                        format!("{d}/"),
                        "-c".into(),
                        c,
                    ]),
                )
            }
            ServerKind::Apache => {
                let c = s.dir.join("apache2.conf").display().to_string();
                (
                    "apache2.conf",
                    apache_config(s),
                    vec!["-f".into(), c, "-DFOREGROUND".into()],
                    vec![],
                    None,
                )
            }
            ServerKind::Caddy => {
                let c = s.dir.join("Caddyfile").display().to_string();
                (
                    "Caddyfile",
                    caddy_config(s),
                    vec![
                        "run".into(),
                        "--config".into(),
                        c,
                        "--adapter".into(),
                        "caddyfile".into(),
                    ],
                    vec![
                        ("GOMAXPROCS".into(), s.workers.to_string()),
                        ("XDG_DATA_HOME".into(), format!("{d}/caddy-data")),
                        ("XDG_CONFIG_HOME".into(), format!("{d}/caddy-config")),
                        ("HOME".into(), d.clone()),
                    ],
                    None,
                )
            }
            ServerKind::Haproxy => {
                let c = s.dir.join("haproxy.cfg").display().to_string();
                let text = match s.role {
                    Role::Passthrough(_) => haproxy_tcp_config(s)?,
                    _ => haproxy_config(s)?,
                };
                (
                    "haproxy.cfg",
                    text,
                    vec!["-db".into(), "-f".into(), c],
                    vec![],
                    None,
                )
            }
            ServerKind::Varnish => (
                "default.vcl",
                varnish_config(s)?,
                varnish_args(s, s.port, false),
                vec![],
                None,
            ),
            ServerKind::Lighttpd => {
                let c = s.dir.join("lighttpd.conf").display().to_string();
                let v = vec![
                    bin.display().to_string(),
                    "-tt".into(),
                    "-f".into(),
                    c.clone(),
                ];
                (
                    "lighttpd.conf",
                    lighttpd_config(s)?,
                    vec!["-D".into(), "-f".into(), c],
                    vec![],
                    Some(v),
                )
            }
            ServerKind::HaproxyVarnish => unreachable!("the chain returned above"),
        };
        let config = s.dir.join(file);
        std::fs::write(&config, text).map_err(|e| CompareError::io(&config, e))?;
        let companions = match &s.role {
            Role::Php(_) => vec![php_fpm_companion(s)?],
            Role::App(bin) if !matches!(self, ServerKind::Weir | ServerKind::WeirB) => {
                app_companions(bin, s.port)
            }
            _ => vec![],
        };
        Ok(Launch {
            program: bin,
            args,
            env,
            config,
            validate,
            stdout,
            companions,
        })
    }
}

/// The php-fpm binary: `php-fpm` on PATH, else the newest of Debian's
/// versioned `php-fpmX.Y` in /usr/sbin; `php-fpm` (not installed) if none.
pub fn php_fpm_binary() -> PathBuf {
    let plain = find("php-fpm");
    if plain.is_file() {
        return plain;
    }
    let mut versioned: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/sbin")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version: Vec<u32> = name
                .strip_prefix("php-fpm")?
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            Some((version, e.path()))
        })
        .collect();
    versioned.sort();
    versioned.pop().map_or(plain, |(_, p)| p)
}

/// The php-fpm pool's socket of the server on `s.port`, in the run's
/// temporary folder.
pub fn php_fpm_socket(s: &ServerSetup) -> PathBuf {
    s.tmp.join(format!("php-fpm-{}.sock", s.port))
}

/// Running as root? php-fpm then needs `--allow-to-run-as-root` and a
/// pool user.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The php-fpm master every server of the `php` scenario has behind it:
/// `php-fpm.conf` beside the server's config, its socket and PID file in
/// the run's temporary folder, in the foreground, stopped by PID.
fn php_fpm_companion(s: &ServerSetup) -> Result<Companion, CompareError> {
    let conf = s.dir.join("php-fpm.conf");
    std::fs::write(&conf, php_fpm_config(s, is_root())).map_err(|e| CompareError::io(&conf, e))?;
    let socket = php_fpm_socket(s);
    // A socket left by a master that was killed would be in the way.
    let _ = std::fs::remove_file(&socket);
    let bin = php_fpm_binary();
    let mut args = vec![
        "--nodaemonize".to_string(),
        "--fpm-config".into(),
        conf.display().to_string(),
    ];
    if is_root() {
        args.push("--allow-to-run-as-root".into());
    }
    let mut validate = vec![bin.display().to_string(), "--test".into()];
    validate.extend(args[1..].iter().cloned());
    Ok(Companion {
        name: "php-fpm".into(),
        launch: Launch {
            program: bin,
            args,
            env: vec![],
            config: conf,
            validate: Some(validate),
            stdout: None,
            companions: vec![],
        },
        ready: Ready::Unix(socket),
    })
}

/// The app processes the harness starts behind nginx and HAProxy, one per
/// port of [`app_ports`]: what weir's `app` runs, with the port said.
fn app_companions(bin: &Path, port: u16) -> Vec<Companion> {
    app_ports(port)
        .into_iter()
        .enumerate()
        .map(|(i, p)| Companion {
            name: format!("app-{}", i + 1),
            launch: Launch {
                program: bin.to_path_buf(),
                args: app_args(&format!("127.0.0.1:{p}")),
                env: vec![],
                config: PathBuf::new(),
                validate: None,
                stdout: None,
                companions: vec![],
            },
            ready: Ready::Port(p),
        })
        .collect()
}

/// The php-fpm config: one static pool of [`PHP_CHILDREN`] children on a
/// Unix socket any server's workers may connect to (nginx's run as
/// `nobody`, Apache's as `www-data`), the environment cleared, everything
/// else (opcache on, from the distribution's php.ini) as installed. As
/// root the pool runs as root, which php-fpm allows only when told.
pub fn php_fpm_config(s: &ServerSetup, root: bool) -> String {
    let user = if root {
        "user = root\ngroup = root\n"
    } else {
        ""
    };
    format!(
        "; weir-bench: php-fpm, one static pool of {PHP_CHILDREN} children on a Unix socket, php.ini as installed.\n\
         [global]\npid = {tmp}/php-fpm-{p}.pid\nerror_log = {d}/php-fpm-error.log\ndaemonize = no\n\n\
         [www]\n{user}listen = {sock}\nlisten.backlog = 65535\nlisten.mode = 0666\n\
         pm = static\npm.max_children = {PHP_CHILDREN}\nclear_env = yes\n",
        tmp = s.tmp.display(),
        p = s.port,
        d = s.dir.display(),
        sock = php_fpm_socket(s).display(),
    )
}

/// FastCGI connections a server with a pool per worker process (Apache's
/// `max`) keeps per worker: [`PHP_CHILDREN`] in all.
fn php_conns_per_worker(workers: usize) -> usize {
    (PHP_CHILDREN / workers.max(1)).max(1)
}

/// Varnish's arguments, listening on 127.0.0.1:`port` (for the PROXY
/// protocol when `proxy_protocol`) with `default.vcl` of `s.dir`: in the
/// foreground, its working directory (the shared-memory log and compiled
/// VCL) in the run's RAM-backed temporary folder as its manual advises,
/// 256 MiB of malloc storage, one thread pool per worker (its default, 2,
/// with the default `--workers`), the common keep-alive timeout.
fn varnish_args(s: &ServerSetup, port: u16, proxy_protocol: bool) -> Vec<String> {
    vec![
        "-F".into(),
        "-a".into(),
        format!(
            "127.0.0.1:{port}{}",
            if proxy_protocol { ",PROXY" } else { "" }
        ),
        "-f".into(),
        s.dir.join("default.vcl").display().to_string(),
        "-n".into(),
        s.tmp.join(format!("varnish-{port}")).display().to_string(),
        "-s".into(),
        "malloc,256m".into(),
        "-T".into(),
        "127.0.0.1:0".into(),
        "-p".into(),
        format!("thread_pools={}", s.workers),
        "-p".into(),
        format!("timeout_idle={KEEPALIVE_SECS}"),
    ]
}

/// The chain: HAProxy on `s.port` (TLS when `s.tls`) sending every request
/// with a PROXY protocol v2 header to a caching Varnish on
/// [`chain_varnish_port`], started first as its [`Companion`].
fn chain_launch(s: &ServerSetup, weirs: Weirs<'_>) -> Result<Launch, CompareError> {
    let Role::Cache(_) = s.role else {
        return Err(CompareError::NotApplicable(
            "haproxy-varnish only caches".into(),
        ));
    };
    std::fs::create_dir_all(&s.dir).map_err(|e| CompareError::io(&s.dir, e))?;
    let vport = chain_varnish_port(s.port);
    let vcl = s.dir.join("default.vcl");
    std::fs::write(&vcl, varnish_config(s)?).map_err(|e| CompareError::io(&vcl, e))?;
    let varnish = Launch {
        program: ServerKind::Varnish.binary(weirs),
        args: varnish_args(s, vport, true),
        env: vec![],
        config: vcl,
        validate: None,
        stdout: None,
        companions: vec![],
    };
    let cfg = s.dir.join("haproxy.cfg");
    std::fs::write(&cfg, chain_haproxy_config(s, vport)).map_err(|e| CompareError::io(&cfg, e))?;
    Ok(Launch {
        program: ServerKind::HaproxyVarnish.binary(weirs),
        args: vec!["-db".into(), "-f".into(), cfg.display().to_string()],
        env: vec![],
        config: cfg,
        validate: None,
        stdout: None,
        companions: vec![Companion {
            name: "varnish".into(),
            launch: varnish,
            ready: Ready::Port(vport),
        }],
    })
}

/// A config file name and text, the server's arguments, env and validate command.
type Prepared = (
    &'static str,
    String,
    Vec<String>,
    Vec<(String, String)>,
    Option<Vec<String>>,
);

/// Finds `name` on PATH (or in the sbin dirs Debian puts daemons in).
fn find(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    for dir in path.split(':').chain([
        "/usr/sbin",
        "/usr/local/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/bin",
    ]) {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

/// Is the binary present?
pub fn installed(bin: &Path) -> bool {
    bin.is_file()
}

fn weir_config(s: &ServerSetup) -> String {
    let mut o = format!("[server]\nworkers = {}\n", s.workers);
    if let Some(a) = &s.weir_accept {
        let _ = writeln!(o, "accept = \"{a}\"");
    }
    let _ = writeln!(o, "\n[server.timeouts]\nkeepalive = \"{KEEPALIVE_SECS}s\"");
    // weir's default connection limit (16,384) is below the largest case.
    let _ = writeln!(
        o,
        "\n[server.limits]\nconnections = {}",
        s.max_connections.max(16_384)
    );
    if let Role::Cache(_) = s.role {
        // Its default, said as Varnish's `-s malloc,256m` and nginx's
        // `max_size=256m` are.
        let _ = writeln!(o, "\n[cache]\nmemory = \"256MiB\"");
    }
    if let Some(sections) = &s.weir_sections {
        let _ = writeln!(o, "\n{sections}");
    }
    let site = |o: &mut String, name: &str, what: String| {
        let _ = write!(
            o,
            "\n[site.\"{name}\"]\nlisten = [\"127.0.0.1:{}\"]\n{what}\n",
            s.port
        );
        if let Some(keys) = &s.weir_site_keys {
            let _ = writeln!(o, "{keys}");
        }
        if let Some(log) = &s.access_log {
            let _ = writeln!(
                o,
                "access_log = {{ path = \"{}\", format = \"json\" }}",
                log.display()
            );
        }
        // A passthrough's TLS is the backend's.
        if s.tls && !matches!(s.role, Role::Passthrough(_)) {
            let _ = writeln!(
                o,
                "tls = {{ cert = \"{}\", key = \"{}\" }}",
                s.cert.display(),
                s.key.display()
            );
        }
    };
    match &s.role {
        Role::Static(root) => site(
            &mut o,
            "localhost",
            format!("root = \"{}\"", root.display()),
        ),
        // The forwarding fields every proxy here sends (module doc): weir's
        // X-Forwarded-* on, its Forwarded and Via off.
        Role::Proxy(up) => site(
            &mut o,
            "localhost",
            format!(
                "proxy = {{ to = [\"{up}\"], forwarded = false, via = false, max_idle = {UPSTREAM_IDLE} }}"
            ),
        ),
        Role::Compress(up) => site(
            &mut o,
            "localhost",
            format!(
                "proxy = {{ to = [\"{up}\"], forwarded = false, via = false, max_idle = {UPSTREAM_IDLE} }}\n\
                 compress = true"
            ),
        ),
        // The backend gives no freshness: 2 minutes, Varnish's default TTL,
        // and Varnish's default grace, which weir serves only when told.
        Role::Cache(up) => site(
            &mut o,
            "localhost",
            format!(
                "proxy = {{ to = [\"{up}\"], forwarded = false, via = false, max_idle = {UPSTREAM_IDLE} }}\n\
                 cache = {{ default_ttl = \"2m\", grace = \"10s\" }}"
            ),
        ),
        Role::Sites(sites) => {
            for (name, root) in sites {
                site(&mut o, name, format!("root = \"{}\"", root.display()));
            }
        }
        Role::Php(root) => site(
            &mut o,
            "bench",
            format!(
                "root = \"{}\"\nphp = {{ to = \"unix:{}\", max_conns = {PHP_CHILDREN}, keep_conn = true }}",
                root.display(),
                php_fpm_socket(s).display()
            ),
        ),
        Role::Passthrough(to) => site(
            &mut o,
            TCP_HOST,
            format!("passthrough = {{ to = \"{to}\" }}"),
        ),
        // The app's proxy has weir's defaults: `app` takes no proxy keys.
        Role::App(bin) => site(
            &mut o,
            "localhost",
            format!(
                "app = {{ run = \"'{}' {}\", instances = {APP_INSTANCES} }}",
                bin.display(),
                app_args("127.0.0.1:$PORT").join(" ")
            ),
        ),
    }
    o
}

/// nginx's `proxy_cache_path`, in the run's RAM-backed temporary folder.
fn nginx_cache_dir(s: &ServerSetup) -> PathBuf {
    s.tmp.join(format!("nginx-cache-{}", s.port))
}

fn nginx_config(s: &ServerSetup) -> String {
    let d = s.dir.display();
    let ssl = if s.tls { " ssl" } else { "" };
    let mut o = format!(
        "# weir-bench: nginx, {w} workers, keep-alive without a request cap, {log}.\n\
         worker_processes {w};\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         worker_rlimit_nofile 20000;\nevents {{ worker_connections 20000; multi_accept on; }}\n\
         http {{\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  keepalive_timeout {KEEPALIVE_SECS};\n\
         \x20 types {{ text/html html; application/octet-stream bin; }}\n  default_type application/octet-stream;\n",
        w = s.workers,
        log = if s.access_log.is_some() {
            "access log to a file"
        } else {
            "no access log"
        },
    );
    match &s.access_log {
        // Buffered as weir's log is (a 64 KiB buffer, written when idle).
        Some(log) => {
            let _ = writeln!(
                o,
                "  access_log {} combined buffer=64k flush=1s;",
                log.display()
            );
        }
        None => o.push_str("  access_log off;\n"),
    }
    // Descriptors and stat results kept between requests, as a user
    // tuning nginx for small static files sets them; a cache hit opens its
    // cache file through the same `open_file_cache`.
    let open_file_cache = "  open_file_cache max=10000 inactive=60s;\n  open_file_cache_valid 60s;\n\
                           \x20 open_file_cache_min_uses 1;\n  open_file_cache_errors on;\n";
    match &s.role {
        Role::Proxy(up) => {
            let _ = writeln!(
                o,
                "  upstream backend {{ server {up}; keepalive {UPSTREAM_IDLE}; }}"
            );
        }
        // `gzip on` at its default level (1) for the type the backend
        // answers; nginx has no brotli without a third-party module.
        Role::Compress(up) => {
            let _ = writeln!(
                o,
                "  upstream backend {{ server {up}; keepalive {UPSTREAM_IDLE}; }}\n  gzip on;\n  gzip_types application/json;"
            );
        }
        // The same upstream, one `server` per app process (round-robin).
        Role::App(_) => {
            let servers: String = app_ports(s.port)
                .iter()
                .map(|p| format!("server 127.0.0.1:{p}; "))
                .collect();
            let _ = writeln!(
                o,
                "  upstream backend {{ {servers}keepalive {UPSTREAM_IDLE}; }}"
            );
        }
        Role::Cache(up) => {
            let _ = writeln!(
                o,
                "  upstream backend {{ server {up}; keepalive {UPSTREAM_IDLE}; }}\n\
                 \x20 proxy_cache_path {} levels=1:2 keys_zone=weir_bench:10m max_size=256m use_temp_path=off;",
                nginx_cache_dir(s).display()
            );
            o.push_str(open_file_cache);
        }
        Role::Static(_) | Role::Sites(_) => o.push_str(open_file_cache),
        // No `keepalive` with `fastcgi_keep_conn`: a kept connection holds
        // a php-fpm child, and a busy nginx opens connections beyond its
        // kept ones (it cannot make a request wait for one); with every
        // child held by kept connections, such a connection waits in the
        // socket's backlog until `fastcgi_read_timeout` (60 s), as a burst
        // of 200 requests against 4 children showed. So one connection
        // per request, nginx's default and Debian's snippet.
        Role::Php(_) => {
            let _ = writeln!(
                o,
                "  upstream php {{ server unix:{}; }}",
                php_fpm_socket(s).display(),
            );
        }
        Role::Passthrough(_) => {}
    }
    let server = |o: &mut String, name: Option<&str>, body: String| {
        let _ = writeln!(o, "  server {{\n    listen 127.0.0.1:{}{ssl};", s.port);
        if let Some(name) = name {
            let _ = writeln!(o, "    server_name {name};");
        }
        if s.tls {
            let _ = writeln!(
                o,
                "    ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_session_cache shared:SSL:10m;",
                s.cert.display(),
                s.key.display()
            );
        }
        let _ = writeln!(o, "{body}\n  }}");
    };
    match &s.role {
        Role::Static(root) => server(&mut o, None, format!("    root {};", root.display())),
        Role::Proxy(_) | Role::Compress(_) | Role::App(_) => server(
            &mut o,
            None,
            "    location / {\n      proxy_pass http://backend;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
             \x20     proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
             \x20     proxy_set_header X-Forwarded-Proto $scheme;\n\
             \x20     proxy_set_header X-Forwarded-Host $http_host;\n    }"
                .into(),
        ),
        // Kept 2 minutes as Varnish keeps it; one request per key goes
        // upstream at a time (`proxy_cache_lock`, Varnish's and weir's
        // coalescing), and an expired entry is served while one request
        // refreshes it (Varnish's grace, weir's `grace`).
        Role::Cache(_) => server(
            &mut o,
            None,
            "    location / {\n      proxy_pass http://backend;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
             \x20     proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
             \x20     proxy_set_header X-Forwarded-Proto $scheme;\n\
             \x20     proxy_set_header X-Forwarded-Host $http_host;\n\
             \x20     proxy_cache weir_bench;\n      proxy_cache_valid 200 2m;\n      proxy_cache_lock on;\n\
             \x20     proxy_cache_use_stale updating;\n      proxy_cache_background_update on;\n    }"
                .into(),
        ),
        Role::Sites(sites) => {
            for (name, root) in sites {
                server(&mut o, Some(name), format!("    root {};", root.display()));
            }
        }
        // Debian's snippets/fastcgi-php.conf and fastcgi.conf, written out.
        Role::Php(root) => server(
            &mut o,
            None,
            format!(
                "    root {};\n    location ~ \\.php$ {{\n      try_files $fastcgi_script_name =404;\n\
                 \x20     fastcgi_pass php;\n{NGINX_FASTCGI_PARAMS}    }}",
                root.display()
            ),
        ),
        // Never asked: `prepare` refuses it.
        Role::Passthrough(_) => {}
    }
    o.push_str("}\n");
    o
}

/// nginx's `fastcgi.conf` (its `fastcgi_params` with SCRIPT_FILENAME).
const NGINX_FASTCGI_PARAMS: &str = "\
\x20     fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
      fastcgi_param SCRIPT_NAME $fastcgi_script_name;
      fastcgi_param REQUEST_URI $request_uri;
      fastcgi_param DOCUMENT_URI $document_uri;
      fastcgi_param DOCUMENT_ROOT $document_root;
      fastcgi_param SERVER_PROTOCOL $server_protocol;
      fastcgi_param REQUEST_SCHEME $scheme;
      fastcgi_param HTTPS $https if_not_empty;
      fastcgi_param GATEWAY_INTERFACE CGI/1.1;
      fastcgi_param SERVER_SOFTWARE nginx/$nginx_version;
      fastcgi_param REMOTE_ADDR $remote_addr;
      fastcgi_param REMOTE_PORT $remote_port;
      fastcgi_param SERVER_ADDR $server_addr;
      fastcgi_param SERVER_PORT $server_port;
      fastcgi_param SERVER_NAME $server_name;
      fastcgi_param REDIRECT_STATUS 200;
";

/// Apache's threads per process: the case's connections spread over its
/// processes, plus a quarter, at least 25 (its `ThreadsPerChild` default)
/// and at most [`APACHE_MAX_THREADS`]; beyond that the event MPM holds the
/// idle keep-alive connections without a thread each
/// ([`apache_async_factor`]). The headroom matters: when every thread of a
/// process is busy, the event MPM closes its idle keep-alive connections,
/// and a client whose next request is already on its way sees a reset.
pub fn apache_threads(connections: usize, workers: usize, max: usize) -> usize {
    let per_process = connections.div_ceil(workers.max(1));
    (per_process + per_process.div_ceil(4)).clamp(25, max)
}

/// The most threads an Apache process gets serving files: 10,000
/// connections in threads of their own would be 10,000 stacks.
pub const APACHE_MAX_THREADS: usize = 1024;

/// In front of the app every connection has a request waiting on the app,
/// each holding a thread (mod_proxy), so the threads cover them all, as
/// Apache's users size `MaxRequestWorkers` to the requests in flight.
pub const APACHE_APP_MAX_THREADS: usize = 8192;

/// The thread cap for `s`'s role.
fn apache_max_threads(s: &ServerSetup) -> usize {
    match s.role {
        Role::App(_) => APACHE_APP_MAX_THREADS,
        _ => APACHE_MAX_THREADS,
    }
}

/// `AsyncRequestWorkerFactor`: how many connections per idle thread an
/// event MPM process accepts (its default is 2), raised so that each
/// process takes its share of the case's connections.
pub fn apache_async_factor(connections: usize, workers: usize, max: usize) -> usize {
    let per_process = connections.div_ceil(workers.max(1));
    per_process
        .div_ceil(apache_threads(connections, workers, max))
        .max(2)
}

fn apache_config(s: &ServerSetup) -> String {
    let d = s.dir.display();
    let m = "/usr/lib/apache2/modules";
    let max_threads = apache_max_threads(s);
    let tpc = apache_threads(s.connections, s.workers, max_threads);
    let mut o = format!(
        "# weir-bench: Apache event MPM, {w} processes x {tpc} threads (sized to the case's {c} connections), \
         keep-alive without a request cap, sendfile on, {log}.\n\
         ServerRoot \"{d}\"\nServerName localhost\nDefaultRuntimeDir \"{d}\"\nPidFile \"{d}/apache.pid\"\n\
         ErrorLog \"{d}/apache-error.log\"\nLogLevel warn\nMutex posixsem\nUser www-data\nGroup www-data\n\
         LoadModule mpm_event_module {m}/mod_mpm_event.so\nLoadModule authz_core_module {m}/mod_authz_core.so\n\
         LoadModule mime_module {m}/mod_mime.so\nLoadModule dir_module {m}/mod_dir.so\n\
         StartServers {w}\nServerLimit {w}\nThreadsPerChild {tpc}\nThreadLimit {tpc}\nMaxRequestWorkers {mrw}\n\
         MinSpareThreads {msp}\nMaxSpareThreads {mrw}\nMaxConnectionsPerChild 0\nAsyncRequestWorkerFactor {arf}\n\
         ListenBacklog 65535\n\
         KeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout {KEEPALIVE_SECS}\nEnableSendfile On\nEnableMMAP On\n\
         TypesConfig /etc/mime.types\n\
         Listen 127.0.0.1:{p}\n",
        w = s.workers,
        c = s.connections,
        mrw = s.workers * tpc,
        // Every process starts at once and none is reaped (MaxSpareThreads
        // is all of them); a low floor keeps the MPM from warning that it
        // cannot keep more spare threads than it may have.
        msp = tpc.min(25),
        arf = apache_async_factor(s.connections, s.workers, max_threads),
        p = s.port,
        log = if s.access_log.is_some() {
            "access log to a file"
        } else {
            "no access log"
        },
    );
    if let Some(log) = &s.access_log {
        // Buffered, as nginx's and weir's are (mod_log_config is built in).
        let _ = write!(
            o,
            "BufferedLogs On\n\
             LogFormat \"%h %l %u %t \\\"%r\\\" %>s %O \\\"%{{Referer}}i\\\" \\\"%{{User-Agent}}i\\\"\" combined\n\
             CustomLog \"{}\" combined\n",
            log.display()
        );
    }
    if s.tls {
        let _ = write!(
            o,
            "LoadModule socache_shmcb_module {m}/mod_socache_shmcb.so\nLoadModule ssl_module {m}/mod_ssl.so\n\
             SSLSessionCache \"shmcb:{d}/ssl_scache(512000)\"\nSSLEngine on\nSSLCertificateFile \"{}\"\n\
             SSLCertificateKeyFile \"{}\"\nSSLProtocol -all +TLSv1.2 +TLSv1.3\n",
            s.cert.display(),
            s.key.display()
        );
    }
    match &s.role {
        Role::Static(root) => {
            let _ = write!(
                o,
                "DocumentRoot \"{r}\"\n<Directory \"{r}\">\n  Require all granted\n</Directory>\n",
                r = root.display()
            );
        }
        Role::Sites(sites) => {
            for (name, root) in sites {
                let _ = write!(
                    o,
                    "<VirtualHost 127.0.0.1:{p}>\n  ServerName {name}\n  DocumentRoot \"{r}\"\n</VirtualHost>\n\
                     <Directory \"{r}\">\n  Require all granted\n</Directory>\n",
                    p = s.port,
                    r = root.display()
                );
            }
        }
        // As Debian's php-fpm.conf for Apache has it, with the reuse its
        // manual shows: `max` counts per child process, so the processes
        // keep one connection per php-fpm child in all, and a request
        // finding none free waits for one.
        Role::Php(root) => {
            let _ = write!(
                o,
                "LoadModule proxy_module {m}/mod_proxy.so\nLoadModule proxy_fcgi_module {m}/mod_proxy_fcgi.so\n\
                 DocumentRoot \"{r}\"\n<Directory \"{r}\">\n  Require all granted\n</Directory>\n\
                 <FilesMatch \\.php$>\n  SetHandler \"proxy:unix:{sock}|fcgi://localhost\"\n</FilesMatch>\n\
                 <Proxy \"fcgi://localhost\">\n  ProxySet enablereuse=on max={max}\n</Proxy>\n",
                r = root.display(),
                sock = php_fpm_socket(s).display(),
                max = php_conns_per_worker(s.workers),
            );
        }
        // mod_proxy_http keeps its connections to the backend (a pool per
        // process, `enablereuse` on by default) and sends X-Forwarded-For
        // and -Host itself (and -Server, which it cannot leave out);
        // -Proto is set as the others send it.
        Role::Proxy(up) | Role::Cache(up) => {
            apache_proxy_modules(&mut o, s);
            if let Role::Cache(_) = s.role {
                // mod_cache in its quick-handler form with the shared-memory
                // store: 256 MiB, 2 minutes for a response with no
                // freshness, one request per key upstream at a time (its
                // lock files in the default /tmp, which the www-data
                // children can write; the run's folder they cannot).
                if !s.tls {
                    let _ = writeln!(
                        o,
                        "LoadModule socache_shmcb_module {m}/mod_socache_shmcb.so"
                    );
                }
                let _ = write!(
                    o,
                    "LoadModule cache_module {m}/mod_cache.so\nLoadModule cache_socache_module {m}/mod_cache_socache.so\n\
                     CacheSocache \"shmcb:{d}/cache-shm(268435456)\"\nCacheSocacheMaxSize 102400\n\
                     CacheEnable socache /\nCacheQuickHandler On\nCacheDefaultExpire 120\nCacheIgnoreNoLastMod On\n\
                     CacheLock On\nCacheLockMaxAge 5\n"
                );
            }
            let _ = writeln!(
                o,
                "ProxyPass \"/\" \"http://{up}/\"\nProxyPassReverse \"/\" \"http://{up}/\""
            );
        }
        // The app's processes as a balancer's members, round-robin by
        // request (mod_lbmethod_byrequests, its default).
        Role::App(_) => {
            apache_proxy_modules(&mut o, s);
            let _ = write!(
                o,
                "LoadModule slotmem_shm_module {m}/mod_slotmem_shm.so\n\
                 LoadModule proxy_balancer_module {m}/mod_proxy_balancer.so\n\
                 LoadModule lbmethod_byrequests_module {m}/mod_lbmethod_byrequests.so\n<Proxy \"balancer://app\">\n"
            );
            for p in app_ports(s.port) {
                let _ = writeln!(o, "  BalancerMember \"http://127.0.0.1:{p}\"");
            }
            o.push_str("</Proxy>\nProxyPass \"/\" \"balancer://app/\"\nProxyPassReverse \"/\" \"balancer://app/\"\n");
        }
        Role::Compress(_) | Role::Passthrough(_) => {}
    }
    o
}

/// The modules and headers every Apache proxy role loads.
fn apache_proxy_modules(o: &mut String, s: &ServerSetup) {
    let m = "/usr/lib/apache2/modules";
    let _ = write!(
        o,
        "LoadModule proxy_module {m}/mod_proxy.so\nLoadModule proxy_http_module {m}/mod_proxy_http.so\n\
         LoadModule headers_module {m}/mod_headers.so\nRequestHeader set X-Forwarded-Proto \"{}\"\n",
        if s.tls { "https" } else { "http" }
    );
}

fn caddy_config(s: &ServerSetup) -> String {
    let mut o = format!(
        "# weir-bench: Caddy with GOMAXPROCS={}, {}.\n\
         {{\n  admin off\n  auto_https off\n  servers {{\n    timeouts {{\n      idle {KEEPALIVE_SECS}s\n    }}\n  }}\n}}\n",
        s.workers,
        if s.access_log.is_some() {
            "access log (JSON) to a file"
        } else {
            "no access log (Caddy logs none unless asked)"
        }
    );
    let site = |o: &mut String, name: &str, body: String| {
        let _ = writeln!(
            o,
            "\n{}{name}:{} {{\n  bind 127.0.0.1",
            if s.tls { "https://" } else { "http://" },
            s.port
        );
        if s.tls {
            let _ = writeln!(
                o,
                "  tls {} {} {{\n    protocols tls1.2 tls1.3\n  }}",
                s.cert.display(),
                s.key.display()
            );
        }
        if let Some(log) = &s.access_log {
            let _ = writeln!(
                o,
                "  log {{\n    output file {}\n    format json\n  }}",
                log.display()
            );
        }
        let _ = writeln!(o, "{body}\n}}");
    };
    match &s.role {
        Role::Static(root) => site(
            &mut o,
            "",
            format!("  root * {}\n  file_server", root.display()),
        ),
        // Caddy keeps 32 idle connections per upstream unless told otherwise.
        // (Never asked to cache: `prepare` refuses it.)
        Role::Proxy(up) | Role::Cache(up) => site(
            &mut o,
            "",
            format!(
                "  reverse_proxy {up} {{\n    transport http {{\n      keepalive_idle_conns {UPSTREAM_IDLE}\n      \
                 keepalive_idle_conns_per_host {UPSTREAM_IDLE}\n    }}\n  }}"
            ),
        ),
        // `encode` with its documented pair and their default levels.
        Role::Compress(up) => site(
            &mut o,
            "",
            format!(
                "  encode gzip zstd\n  reverse_proxy {up} {{\n    transport http {{\n      keepalive_idle_conns {UPSTREAM_IDLE}\n      \
                 keepalive_idle_conns_per_host {UPSTREAM_IDLE}\n    }}\n  }}"
            ),
        ),
        Role::Sites(sites) => {
            for (name, root) in sites {
                site(
                    &mut o,
                    name,
                    format!("  root * {}\n  file_server", root.display()),
                );
            }
        }
        // The app's processes, round-robin as the others balance them.
        Role::App(_) => site(
            &mut o,
            "",
            format!(
                "  reverse_proxy {} {{\n    lb_policy round_robin\n    transport http {{\n      keepalive_idle_conns {UPSTREAM_IDLE}\n      \
                 keepalive_idle_conns_per_host {UPSTREAM_IDLE}\n      max_conns_per_host {APP_SERVER_MAXCONN}\n    }}\n  }}",
                app_ports(s.port)
                    .iter()
                    .map(|p| format!("127.0.0.1:{p}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ),
        // Never asked: `prepare` refuses them.
        Role::Php(_) | Role::Passthrough(_) => {}
    }
    o
}

/// HAProxy's `maxconn` per app server (requests beyond it wait in its queue).
pub const APP_SERVER_MAXCONN: usize = 2048;

fn haproxy_config(s: &ServerSetup) -> Result<String, CompareError> {
    // The app's processes are the backend's servers (round-robin, HAProxy's default).
    let ups: Vec<std::net::SocketAddr> = match &s.role {
        Role::Proxy(up) => vec![*up],
        Role::App(_) => app_ports(s.port)
            .into_iter()
            .map(|p| ([127, 0, 0, 1], p).into())
            .collect(),
        _ => return Err(CompareError::NotApplicable("haproxy only proxies".into())),
    };
    // One HAProxy process holds every socket: at c10000 with no server
    // `maxconn` it would open an upstream socket per request in flight, past
    // this machine's 20,000 descriptors. Queueing in HAProxy above a server
    // maxconn is how its users protect an app.
    let limit = match &s.role {
        Role::App(_) => format!(" maxconn {APP_SERVER_MAXCONN}"),
        _ => String::new(),
    };
    let servers: String = ups
        .iter()
        .enumerate()
        .map(|(i, up)| {
            format!(
                "  server b{} {up} pool-max-conn {UPSTREAM_IDLE}{limit}\n",
                i + 1
            )
        })
        .collect();
    Ok(haproxy_text(
        s,
        "keep-alive both sides, upstream reuse",
        &format!(
            "backend be\n  option forwardfor\n  http-request set-header X-Forwarded-Proto {scheme}\n\
             \x20 http-request set-header X-Forwarded-Host %[req.hdr(host)]\n{servers}",
            scheme = if s.tls { "https" } else { "http" },
        ),
    ))
}

/// HAProxy passing TLS through: the frontend waits for the client hello
/// (`inspect-delay`) and sends the stream whose SNI is [`TCP_HOST`] to the
/// backend; connections are the clients', so the timeouts are the client
/// keep-alive's.
fn haproxy_tcp_config(s: &ServerSetup) -> Result<String, CompareError> {
    let Role::Passthrough(to) = &s.role else {
        return Err(CompareError::NotApplicable(
            "haproxy's tcp mode only passes TLS through".into(),
        ));
    };
    Ok(format!(
        "# weir-bench: HAProxy, {w} threads, TLS passed through by SNI (mode tcp), no logs.\n\
         global\n  nbthread {w}\n  maxconn {mc}\n  no strict-limits\n\n\
         defaults\n  mode tcp\n  maxconn {mc}\n\
         \x20 timeout connect 5s\n  timeout client {ka}s\n  timeout server {ka}s\n\n\
         frontend fe\n  bind 127.0.0.1:{p}\n  tcp-request inspect-delay 5s\n\
         \x20 tcp-request content accept if {{ req_ssl_hello_type 1 }}\n\
         \x20 use_backend b if {{ req.ssl_sni -i {TCP_HOST} }}\n\n\
         backend b\n  mode tcp\n  server tls1 {to}\n",
        w = s.workers,
        mc = haproxy_maxconn(s.max_connections),
        ka = KEEPALIVE_SECS,
        p = s.port,
    ))
}

/// The chain's HAProxy: Varnish on `varnish_port` learns the client's
/// address from the PROXY protocol v2 header (so no X-Forwarded-For) and
/// the scheme from X-Forwarded-Proto. HAProxy reuses a connection to
/// Varnish only for the client connection whose PROXY header opened it.
fn chain_haproxy_config(s: &ServerSetup, varnish_port: u16) -> String {
    haproxy_text(
        s,
        "keep-alive both sides, in front of a caching Varnish over the PROXY protocol v2",
        &format!(
            "backend be\n  http-request set-header X-Forwarded-Proto {scheme}\n\
             \x20 server varnish 127.0.0.1:{varnish_port} send-proxy-v2 pool-max-conn {UPSTREAM_IDLE}\n",
            scheme = if s.tls { "https" } else { "http" },
        ),
    )
}

/// HAProxy's config: `global`, `defaults` and the frontend every HAProxy
/// here has, with `backend` (a `backend be` section); `what` goes in the
/// title line.
fn haproxy_text(s: &ServerSetup, what: &str, backend: &str) -> String {
    let ssl = if s.tls {
        format!(" ssl crt {}", s.combined.display())
    } else {
        String::new()
    };
    let (global_log, defaults_log) = if s.access_log.is_some() {
        (
            "  log stdout format raw local0\n",
            "  log global\n  option httplog\n",
        )
    } else {
        ("", "")
    };
    format!(
        "# weir-bench: HAProxy, {w} threads, {what}, {log}.\n\
         global\n  nbthread {w}\n  maxconn {mc}\n  no strict-limits\n{global_log}\
         \x20 ssl-default-bind-options ssl-min-ver TLSv1.2\n\n\
         defaults\n  mode http\n  maxconn {mc}\n{defaults_log}\
         \x20 timeout connect 5s\n  timeout client {ka}s\n  timeout http-keep-alive {ka}s\n  timeout server 60s\n\
         \x20 http-reuse always\n\n\
         frontend fe\n  bind 127.0.0.1:{p}{ssl}\n  default_backend be\n\n{backend}",
        w = s.workers,
        mc = haproxy_maxconn(s.max_connections),
        ka = KEEPALIVE_SECS,
        log = if s.access_log.is_some() {
            "access log (httplog) to standard output, a file"
        } else {
            "no logs"
        },
        p = s.port,
    )
}

fn varnish_config(s: &ServerSetup) -> Result<String, CompareError> {
    match &s.role {
        Role::Proxy(up) => Ok(format!(
            "# weir-bench: Varnish as a pure proxy (every request passed, no caching), {} thread pool(s).\n\
             vcl 4.1;\n\nbackend default {{\n  .host = \"{}\";\n  .port = \"{}\";\n}}\n\n\
             sub vcl_recv {{\n  set req.http.X-Forwarded-Proto = \"http\";\n  set req.http.X-Forwarded-Host = req.http.host;\n  return (pass);\n}}\n",
            s.workers,
            up.ip(),
            up.port()
        )),
        // Only the backend: Varnish's built-in VCL does the rest, exactly as
        // `varnishd -b` would (GET and HEAD without Authorization or Cookie
        // looked up, responses kept for default_ttl, 2 minutes, plus 10 s of
        // grace), and the file stays in the run folder for a reader.
        Role::Cache(up) => Ok(format!(
            "# weir-bench: Varnish caching with its built-in VCL (as `varnishd -b {up}`), {} thread pool(s).\n\
             vcl 4.1;\n\nbackend default {{\n  .host = \"{}\";\n  .port = \"{}\";\n}}\n",
            s.workers,
            up.ip(),
            up.port()
        )),
        Role::Static(_)
        | Role::Sites(_)
        | Role::Php(_)
        | Role::Passthrough(_)
        | Role::App(_)
        | Role::Compress(_) => Err(CompareError::NotApplicable(
            "varnish does not compress; it only proxies".into(),
        )),
    }
}

fn lighttpd_config(s: &ServerSetup) -> Result<String, CompareError> {
    let (root, sites) = match &s.role {
        Role::Static(root) => (root, &[][..]),
        Role::Sites(sites) if !sites.is_empty() => (&sites[0].1, &sites[..]),
        _ => {
            return Err(CompareError::NotApplicable(
                "lighttpd is not in the proxy scenario".into(),
            ));
        }
    };
    let mut o = format!(
        "# weir-bench: lighttpd, {w} workers, keep-alive with a high request cap, no access log.\n\
         server.document-root = \"{}\"\nserver.bind = \"127.0.0.1\"\nserver.port = {}\nserver.max-worker = {w}\n\
         server.max-keep-alive-requests = 1000000\nserver.max-keep-alive-idle = {KEEPALIVE_SECS}\nserver.max-fds = 20000\n\
         server.max-connections = 10000\nserver.errorlog = \"{}/lighttpd-error.log\"\n\
         mimetype.assign = (\".html\" => \"text/html\", \".bin\" => \"application/octet-stream\")\n",
        root.display(),
        s.port,
        s.dir.display(),
        w = s.workers
    );
    if s.tls {
        let _ = write!(
            o,
            "server.modules += (\"mod_openssl\")\nssl.engine = \"enable\"\nssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\n\
             ssl.openssl.ssl-conf-cmd = (\"MinProtocol\" => \"TLSv1.2\")\n",
            s.cert.display(),
            s.key.display()
        );
    }
    for (name, root) in sites {
        let _ = writeln!(
            o,
            "$HTTP[\"host\"] == \"{name}\" {{\n  server.document-root = \"{}\"\n}}",
            root.display()
        );
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(role: Role, tls: bool, log: bool) -> ServerSetup {
        ServerSetup {
            dir: PathBuf::from("/run/x"),
            port: 28080,
            tls,
            role,
            cert: PathBuf::from("/run/tls/cert.pem"),
            key: PathBuf::from("/run/tls/key.pem"),
            combined: PathBuf::from("/run/tls/combined.pem"),
            workers: 1,
            weir_accept: None,
            weir_site_keys: None,
            weir_sections: None,
            access_log: log.then(|| PathBuf::from("/run/x/access.log")),
            max_connections: 10_000,
            connections: 100,
            tmp: PathBuf::from("/dev/shm/wb"),
        }
    }

    fn proxy(log: bool) -> ServerSetup {
        setup(Role::Proxy(([127, 0, 0, 1], 28081).into()), false, log)
    }

    fn cache(tls: bool) -> ServerSetup {
        setup(Role::Cache(([127, 0, 0, 1], 28081).into()), tls, false)
    }

    /// `cache(tls)` writing into a fresh folder of its own.
    fn cache_in(tag: &str, tls: bool) -> ServerSetup {
        let dir = std::env::temp_dir().join(format!("wb-{tag}-{}", std::process::id()));
        ServerSetup {
            tmp: dir.join("tmp"),
            dir,
            ..cache(tls)
        }
    }

    fn no_weir() -> Weirs<'static> {
        Weirs {
            weir: Path::new("/nonexistent/weir"),
            weir_b: None,
        }
    }

    fn statics() -> ServerSetup {
        setup(Role::Static(PathBuf::from("/run/docroot")), true, false)
    }

    /// Asserts every line of `want` is a line (trimmed) of `config`.
    fn has_lines(config: &str, want: &[&str]) {
        for w in want {
            assert!(
                config.lines().any(|l| l.trim() == *w),
                "missing `{w}` in:\n{config}"
            );
        }
    }

    #[test]
    fn every_proxy_keeps_weirs_idle_pool_and_the_same_keepalive() {
        assert_eq!(UPSTREAM_IDLE, 1024, "weir's default max_idle");
        let weir = weir_config(&proxy(false));
        assert!(weir.contains("max_idle = 1024"), "{weir}");
        has_lines(&weir, &["[server.timeouts]", "keepalive = \"65s\""]);
        let nginx = nginx_config(&proxy(false));
        assert!(nginx.contains("keepalive 1024;"), "{nginx}");
        assert!(!nginx.contains("keepalive 64;"), "{nginx}");
        has_lines(&nginx, &["keepalive_timeout 65;", "access_log off;"]);
        let haproxy = haproxy_config(&proxy(false)).unwrap();
        has_lines(
            &haproxy,
            &[
                "http-reuse always",
                "server b1 127.0.0.1:28081 pool-max-conn 1024",
                "timeout client 65s",
                "timeout http-keep-alive 65s",
            ],
        );
        let caddy = caddy_config(&proxy(false));
        has_lines(
            &caddy,
            &[
                "keepalive_idle_conns 1024",
                "keepalive_idle_conns_per_host 1024",
                "idle 65s",
            ],
        );
        let varnish = ServerKind::Varnish
            .prepare(
                &ServerSetup {
                    dir: std::env::temp_dir().join(format!("wb-varnish-{}", std::process::id())),
                    ..proxy(false)
                },
                Weirs {
                    weir: Path::new("/nonexistent/weir"),
                    weir_b: None,
                },
            )
            .unwrap();
        assert!(varnish.args.contains(&"timeout_idle=65".to_string()));
        assert!(varnish.args.contains(&"thread_pools=1".to_string()));
        let _ = std::fs::remove_dir_all(varnish.config.parent().unwrap());
    }

    #[test]
    fn nginx_serves_files_through_open_file_cache() {
        let nginx = nginx_config(&statics());
        has_lines(
            &nginx,
            &[
                "open_file_cache max=10000 inactive=60s;",
                "open_file_cache_valid 60s;",
                "open_file_cache_min_uses 1;",
                "open_file_cache_errors on;",
                "worker_processes 1;",
            ],
        );
        // Not in front of a backend, where there is no file to cache.
        assert!(!nginx_config(&proxy(false)).contains("open_file_cache"));
    }

    #[test]
    fn haproxy_takes_more_than_the_largest_case_without_strict_limits() {
        let haproxy = haproxy_config(&proxy(false)).unwrap();
        let mc = haproxy_maxconn(10_000);
        assert!(mc > 10_000, "{mc}");
        let global = haproxy.split("defaults").next().unwrap();
        has_lines(
            global,
            &["no strict-limits", &format!("maxconn {mc}"), "nbthread 1"],
        );
        let defaults = haproxy.split("defaults").nth(1).unwrap();
        has_lines(defaults, &[&format!("maxconn {mc}")]);
        assert!(!haproxy.contains("maxconn 9000"));
        assert!(!haproxy.contains("30s"), "{haproxy}");
    }

    #[test]
    fn the_features_on_row_logs_every_request_to_a_file() {
        let weir = weir_config(&proxy(true));
        assert!(
            weir.contains("access_log = { path = \"/run/x/access.log\", format = \"json\" }"),
            "{weir}"
        );
        let nginx = nginx_config(&proxy(true));
        has_lines(
            &nginx,
            &["access_log /run/x/access.log combined buffer=64k flush=1s;"],
        );
        assert!(!nginx.contains("access_log off"), "{nginx}");
        let haproxy = haproxy_config(&proxy(true)).unwrap();
        let global = haproxy.split("defaults").next().unwrap();
        has_lines(global, &["log stdout format raw local0"]);
        has_lines(&haproxy, &["log global", "option httplog"]);
        let caddy = caddy_config(&proxy(true));
        has_lines(&caddy, &["output file /run/x/access.log", "format json"]);
        // HAProxy's standard output is the log file; the others' is not redirected.
        let dir = std::env::temp_dir().join(format!("wb-logs-{}", std::process::id()));
        let weirs = Weirs {
            weir: Path::new("/nonexistent/weir"),
            weir_b: None,
        };
        for kind in [ServerKind::Haproxy, ServerKind::Nginx, ServerKind::Weir] {
            let s = ServerSetup {
                dir: dir.join(kind.name()),
                ..proxy(true)
            };
            let launch = kind.prepare(&s, weirs).unwrap();
            assert_eq!(
                launch.stdout.is_some(),
                kind == ServerKind::Haproxy,
                "{kind:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
        // And nothing is logged outside that row.
        for config in [
            weir_config(&proxy(false)),
            haproxy_config(&proxy(false)).unwrap(),
            caddy_config(&proxy(false)),
        ] {
            assert!(!config.contains("access_log =") && !config.contains("httplog"));
            assert!(!config.contains("output file"));
        }
        assert!(!ServerKind::Varnish.logs_to_file());
    }

    #[test]
    fn every_cache_keeps_256_mib_and_two_minutes() {
        let weir = weir_config(&cache(false));
        has_lines(
            &weir,
            &[
                "[cache]",
                "memory = \"256MiB\"",
                "cache = { default_ttl = \"2m\", grace = \"10s\" }",
            ],
        );
        assert!(weir.contains("max_idle = 1024"), "{weir}");
        // `[cache]` comes before the site's table, or TOML would put it in it.
        assert!(weir.find("[cache]") < weir.find("[site."), "{weir}");
        assert!(!weir_config(&proxy(false)).contains("cache"));

        let nginx = nginx_config(&cache(false));
        has_lines(
            &nginx,
            &[
                "proxy_cache_path /dev/shm/wb/nginx-cache-28080 levels=1:2 keys_zone=weir_bench:10m max_size=256m use_temp_path=off;",
                "upstream backend { server 127.0.0.1:28081; keepalive 1024; }",
                "proxy_cache weir_bench;",
                "proxy_cache_valid 200 2m;",
                "proxy_cache_lock on;",
                "proxy_cache_use_stale updating;",
                "proxy_cache_background_update on;",
                "proxy_http_version 1.1;",
                "open_file_cache max=10000 inactive=60s;",
                "access_log off;",
            ],
        );
        assert!(!nginx_config(&proxy(false)).contains("proxy_cache"));

        let varnish = varnish_config(&cache(false)).unwrap();
        assert!(varnish.contains(".port = \"28081\";"), "{varnish}");
        // The built-in VCL decides: nothing passed, nothing overridden.
        assert!(!varnish.contains("sub vcl_"), "{varnish}");
        assert!(
            varnish_config(&proxy(false))
                .unwrap()
                .contains("return (pass);")
        );
        let s = cache_in("varnish-cache", false);
        let launch = ServerKind::Varnish.prepare(&s, no_weir()).unwrap();
        let args = launch.args.join(" ");
        for want in [
            "-F",
            "-a 127.0.0.1:28080 ",
            "-s malloc,256m",
            "-p thread_pools=1",
            "-p timeout_idle=65",
        ] {
            assert!(args.contains(want), "{want} in {args}");
        }
        assert!(
            args.contains(&format!("-n {}", s.tmp.join("varnish-28080").display())),
            "{args}"
        );
        let _ = std::fs::remove_dir_all(&s.dir);
    }

    #[test]
    fn the_chain_is_haproxy_with_tls_speaking_proxy_v2_to_varnish() {
        let s = cache_in("chain", true);
        let launch = ServerKind::HaproxyVarnish.prepare(&s, no_weir()).unwrap();
        assert_eq!(launch.args[..2], ["-db".to_string(), "-f".to_string()]);
        let haproxy = std::fs::read_to_string(&launch.config).unwrap();
        has_lines(
            &haproxy,
            &[
                "bind 127.0.0.1:28080 ssl crt /run/tls/combined.pem",
                "server varnish 127.0.0.1:28082 send-proxy-v2 pool-max-conn 1024",
                "http-request set-header X-Forwarded-Proto https",
                "nbthread 1",
                "http-reuse always",
                "timeout client 65s",
            ],
        );
        // Varnish takes the client's address from the PROXY header.
        assert!(!haproxy.contains("forwardfor"), "{haproxy}");
        let [varnish] = &launch.companions[..] else {
            panic!("one companion: {:?}", launch.companions);
        };
        assert_eq!(varnish.ready, Ready::Port(chain_varnish_port(28080)));
        let args = varnish.launch.args.join(" ");
        assert!(args.contains("-a 127.0.0.1:28082,PROXY"), "{args}");
        assert!(args.contains("-s malloc,256m"), "{args}");
        let vcl = std::fs::read_to_string(&varnish.launch.config).unwrap();
        assert!(
            vcl.contains(".port = \"28081\";") && !vcl.contains("sub vcl_"),
            "{vcl}"
        );
        let _ = std::fs::remove_dir_all(&s.dir);
        assert_eq!(
            ServerKind::HaproxyVarnish.binaries(no_weir()),
            vec![find("haproxy"), find("varnishd")]
        );
    }

    #[test]
    fn only_caches_are_asked_to_cache() {
        for kind in ServerKind::ALL {
            let s = cache_in(&format!("refuse-{}", kind.name()), false);
            let r = kind.prepare(&s, no_weir());
            if kind.caches() {
                assert!(r.is_ok(), "{kind:?}: {:?}", r.err());
            } else {
                assert!(
                    matches!(r, Err(CompareError::NotApplicable(_))),
                    "{kind:?} would be measured as a cache it is not"
                );
            }
            let _ = std::fs::remove_dir_all(&s.dir);
        }
    }

    fn php(workers: usize) -> ServerSetup {
        ServerSetup {
            workers,
            ..setup(Role::Php(PathBuf::from("/run/php-root")), false, false)
        }
    }

    fn passthrough() -> ServerSetup {
        setup(
            Role::Passthrough(([127, 0, 0, 1], 28081).into()),
            true,
            false,
        )
    }

    #[test]
    fn the_php_pool_is_static_on_a_unix_socket_and_the_same_for_every_server() {
        let s = php(2);
        assert_eq!(
            php_fpm_socket(&s),
            PathBuf::from("/dev/shm/wb/php-fpm-28080.sock")
        );
        let fpm = php_fpm_config(&s, false);
        has_lines(
            &fpm,
            &[
                "[global]",
                "pid = /dev/shm/wb/php-fpm-28080.pid",
                "error_log = /run/x/php-fpm-error.log",
                "daemonize = no",
                "[www]",
                "listen = /dev/shm/wb/php-fpm-28080.sock",
                "listen.backlog = 65535",
                "listen.mode = 0666",
                "pm = static",
                "pm.max_children = 4",
                "clear_env = yes",
            ],
        );
        // opcache stays as the distribution's php.ini has it.
        assert!(!fpm.contains("opcache"), "{fpm}");
        assert!(!fpm.contains("user ="), "{fpm}");
        has_lines(&php_fpm_config(&s, true), &["user = root", "group = root"]);
        // [global] before the pool, or its keys would be the pool's.
        assert!(fpm.find("[global]") < fpm.find("[www]"));

        let dir = std::env::temp_dir().join(format!("wb-php-{}", std::process::id()));
        for kind in ServerKind::ALL {
            let s = ServerSetup {
                dir: dir.join(kind.name()),
                tmp: dir.join("tmp"),
                ..php(2)
            };
            let r = kind.prepare(&s, no_weir());
            if !kind.serves_php() {
                assert!(
                    matches!(r, Err(CompareError::NotApplicable(_))),
                    "{kind:?} is not in front of PHP"
                );
                continue;
            }
            let launch = r.unwrap();
            let [fpm] = &launch.companions[..] else {
                panic!("{kind:?}: one php-fpm: {:?}", launch.companions);
            };
            assert_eq!(fpm.name, "php-fpm");
            assert_eq!(fpm.ready, Ready::Unix(php_fpm_socket(&s)));
            assert_eq!(fpm.launch.program, php_fpm_binary());
            let args = fpm.launch.args.join(" ");
            assert!(
                args.starts_with(&format!(
                    "--nodaemonize --fpm-config {}",
                    s.dir.join("php-fpm.conf").display()
                )),
                "{args}"
            );
            assert_eq!(args.contains("--allow-to-run-as-root"), is_root());
            let validate = fpm.launch.validate.as_ref().unwrap();
            assert_eq!(validate[1], "--test");
            let written = std::fs::read_to_string(&fpm.launch.config).unwrap();
            assert_eq!(written, php_fpm_config(&s, is_root()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn servers_keep_at_most_one_fastcgi_connection_per_php_child() {
        let weir = weir_config(&php(2));
        has_lines(
            &weir,
            &[
                "[site.\"bench\"]",
                "root = \"/run/php-root\"",
                "php = { to = \"unix:/dev/shm/wb/php-fpm-28080.sock\", max_conns = 4, keep_conn = true }",
            ],
        );
        let nginx = nginx_config(&php(2));
        has_lines(
            &nginx,
            &[
                "worker_processes 2;",
                "upstream php { server unix:/dev/shm/wb/php-fpm-28080.sock; }",
                "root /run/php-root;",
                "location ~ \\.php$ {",
                "try_files $fastcgi_script_name =404;",
                "fastcgi_pass php;",
                "fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;",
                "fastcgi_param QUERY_STRING $query_string;",
                "fastcgi_param REQUEST_METHOD $request_method;",
                "fastcgi_param SCRIPT_NAME $fastcgi_script_name;",
                "access_log off;",
            ],
        );
        // Kept connections would hold children nginx cannot wait for.
        assert!(!nginx.contains("fastcgi_keep_conn"), "{nginx}");
        assert!(!nginx.contains("keepalive 2"), "{nginx}");
        assert!(apache_config(&php(1)).contains("ProxySet enablereuse=on max=4"));
        assert!(apache_config(&php(8)).contains("ProxySet enablereuse=on max=1"));
        let apache = apache_config(&php(2));
        has_lines(
            &apache,
            &[
                "LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so",
                "LoadModule proxy_module /usr/lib/apache2/modules/mod_proxy.so",
                "LoadModule proxy_fcgi_module /usr/lib/apache2/modules/mod_proxy_fcgi.so",
                "DocumentRoot \"/run/php-root\"",
                "<FilesMatch \\.php$>",
                "SetHandler \"proxy:unix:/dev/shm/wb/php-fpm-28080.sock|fcgi://localhost\"",
                "<Proxy \"fcgi://localhost\">",
                "ProxySet enablereuse=on max=2",
                "PidFile \"/run/x/apache.pid\"",
            ],
        );
        assert_eq!(php_conns_per_worker(0), 4);
    }

    #[test]
    fn the_passthrough_fronts_route_by_sni_without_terminating_tls() {
        let weir = weir_config(&passthrough());
        has_lines(
            &weir,
            &[
                "[site.\"tcp.test\"]",
                "passthrough = { to = \"127.0.0.1:28081\" }",
            ],
        );
        assert!(!weir.contains("tls ="), "the backend's TLS: {weir}");
        let haproxy = haproxy_tcp_config(&passthrough()).unwrap();
        has_lines(
            &haproxy,
            &[
                "nbthread 1",
                "mode tcp",
                "no strict-limits",
                "bind 127.0.0.1:28080",
                "tcp-request inspect-delay 5s",
                "tcp-request content accept if { req_ssl_hello_type 1 }",
                "use_backend b if { req.ssl_sni -i tcp.test }",
                "backend b",
                "server tls1 127.0.0.1:28081",
                "timeout client 65s",
                "timeout server 65s",
            ],
        );
        assert!(!haproxy.contains("ssl crt"), "{haproxy}");
        assert!(!haproxy.contains("mode http"), "{haproxy}");
        let dir = std::env::temp_dir().join(format!("wb-tcp-{}", std::process::id()));
        for kind in ServerKind::ALL {
            let s = ServerSetup {
                dir: dir.join(kind.name()),
                ..passthrough()
            };
            let r = kind.prepare(&s, no_weir());
            if kind.passes_tls_through() {
                let launch = r.unwrap();
                let text = std::fs::read_to_string(&launch.config).unwrap();
                assert!(text.contains("tcp.test"), "{kind:?}: {text}");
            } else {
                assert!(
                    matches!(r, Err(CompareError::NotApplicable(_))),
                    "{kind:?} does not pass TLS through"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_newest_php_fpm_is_found_or_named_as_missing() {
        let bin = php_fpm_binary();
        let name = bin.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("php-fpm"), "{bin:?}");
        // Either a binary that is there, or the bare name `installed` rejects.
        assert!(installed(&bin) || bin == Path::new("php-fpm"), "{bin:?}");
    }

    fn app() -> ServerSetup {
        setup(Role::App(PathBuf::from("/opt/wb/weir-bench")), true, false)
    }

    #[test]
    fn every_server_fronts_the_same_two_app_processes() {
        assert_eq!(app_ports(28080), [28081, 28082]);
        assert_eq!(
            app_args("127.0.0.1:28081").join(" "),
            "backend --listen 127.0.0.1:28081 --size 164 --threads 1"
        );
        let weir = weir_config(&app());
        has_lines(
            &weir,
            &[
                "[site.\"localhost\"]",
                "app = { run = \"'/opt/wb/weir-bench' backend --listen 127.0.0.1:$PORT --size 164 --threads 1\", instances = 2 }",
                "tls = { cert = \"/run/tls/cert.pem\", key = \"/run/tls/key.pem\" }",
            ],
        );
        // `app` is the site's handler: no proxy of the harness's beside it.
        assert!(!weir.contains("proxy ="), "{weir}");
        let nginx = nginx_config(&app());
        has_lines(
            &nginx,
            &[
                "upstream backend { server 127.0.0.1:28081; server 127.0.0.1:28082; keepalive 1024; }",
                "listen 127.0.0.1:28080 ssl;",
                "proxy_pass http://backend;",
                "proxy_http_version 1.1;",
                "proxy_set_header X-Forwarded-Proto $scheme;",
                "access_log off;",
            ],
        );
        assert!(!nginx.contains("open_file_cache"), "{nginx}");
        let haproxy = haproxy_config(&app()).unwrap();
        has_lines(
            &haproxy,
            &[
                "bind 127.0.0.1:28080 ssl crt /run/tls/combined.pem",
                "option forwardfor",
                "http-request set-header X-Forwarded-Proto https",
                "server b1 127.0.0.1:28081 pool-max-conn 1024 maxconn 2048",
                "server b2 127.0.0.1:28082 pool-max-conn 1024 maxconn 2048",
                "http-reuse always",
            ],
        );
        // The proxy scenario's HAProxy is unchanged: one server.
        let proxy = haproxy_config(&proxy(false)).unwrap();
        assert!(!proxy.contains("server b2"), "{proxy}");

        let dir = std::env::temp_dir().join(format!("wb-app-{}", std::process::id()));
        for kind in ServerKind::ALL {
            let s = ServerSetup {
                dir: dir.join(kind.name()),
                ..app()
            };
            let r = kind.prepare(&s, no_weir());
            if !kind.fronts_apps() {
                assert!(
                    matches!(r, Err(CompareError::NotApplicable(_))),
                    "{kind:?} is not in front of the app"
                );
                continue;
            }
            let launch = r.unwrap();
            if matches!(kind, ServerKind::Weir | ServerKind::WeirB) {
                // weir starts the app: the harness must not start it too.
                assert!(launch.companions.is_empty(), "{kind:?}");
                continue;
            }
            let names: Vec<&str> = launch.companions.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["app-1", "app-2"], "{kind:?}");
            for (c, port) in launch.companions.iter().zip([28081, 28082]) {
                assert_eq!(c.launch.program, Path::new("/opt/wb/weir-bench"));
                assert_eq!(c.launch.args, app_args(&format!("127.0.0.1:{port}")));
                assert_eq!(c.ready, Ready::Port(port));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Apache's event MPM gets a thread per connection of the case, up to
    /// a cap per process, and holds the rest as idle keep-alive
    /// connections; keep-alive and sendfile on, no cache outside `cache`.
    #[test]
    fn apache_is_sized_to_the_case_and_keeps_alive_with_sendfile() {
        let sized = |connections, workers| ServerSetup {
            connections,
            workers,
            ..statics()
        };
        let a = apache_config(&sized(100, 2));
        has_lines(
            &a,
            &[
                "LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so",
                "ServerLimit 2",
                "StartServers 2",
                "ThreadsPerChild 63",
                "ThreadLimit 63",
                "MaxRequestWorkers 126",
                "MinSpareThreads 25",
                "MaxSpareThreads 126",
                "AsyncRequestWorkerFactor 2",
                "KeepAlive On",
                "MaxKeepAliveRequests 0",
                "KeepAliveTimeout 65",
                "EnableSendfile On",
                "SSLEngine on",
                "SSLSessionCache \"shmcb:/run/x/ssl_scache(512000)\"",
            ],
        );
        assert!(!a.contains("mod_cache"), "{a}");
        assert!(!a.contains("CustomLog"), "{a}");
        // One process at c10000: 1024 threads, each idle one holding ten.
        let big = apache_config(&sized(10_000, 1));
        has_lines(
            &big,
            &[
                "ThreadsPerChild 1024",
                "MaxRequestWorkers 1024",
                "AsyncRequestWorkerFactor 10",
            ],
        );
        const M: usize = APACHE_MAX_THREADS;
        assert_eq!(apache_threads(1, 2, M), 25);
        assert_eq!(apache_threads(5000, 2, M), 1024);
        assert_eq!(apache_threads(10_000, 2, APACHE_APP_MAX_THREADS), 6250);
        assert!(
            apache_async_factor(5000, 2, M) * apache_threads(5000, 2, M)
                + apache_threads(5000, 2, M)
                >= 2500
        );
    }

    #[test]
    fn apache_proxies_caches_and_fronts_the_app_with_its_own_modules() {
        let p = apache_config(&proxy(false));
        has_lines(
            &p,
            &[
                "LoadModule proxy_module /usr/lib/apache2/modules/mod_proxy.so",
                "LoadModule proxy_http_module /usr/lib/apache2/modules/mod_proxy_http.so",
                "RequestHeader set X-Forwarded-Proto \"http\"",
                "ProxyPass \"/\" \"http://127.0.0.1:28081/\"",
            ],
        );
        assert!(!p.contains("CacheEnable"), "{p}");
        // The features-on row: a buffered combined log to the file.
        let logged = apache_config(&proxy(true));
        has_lines(
            &logged,
            &[
                "BufferedLogs On",
                "CustomLog \"/run/x/access.log\" combined",
            ],
        );
        // Its fair cache: mod_cache over shared memory, 256 MiB, 2 minutes.
        let c = apache_config(&cache(false));
        has_lines(
            &c,
            &[
                "LoadModule cache_module /usr/lib/apache2/modules/mod_cache.so",
                "LoadModule cache_socache_module /usr/lib/apache2/modules/mod_cache_socache.so",
                "CacheSocache \"shmcb:/run/x/cache-shm(268435456)\"",
                "CacheEnable socache /",
                "CacheQuickHandler On",
                "CacheDefaultExpire 120",
                "CacheIgnoreNoLastMod On",
                "CacheLock On",
            ],
        );
        let a = apache_config(&app());
        has_lines(
            &a,
            &[
                "<Proxy \"balancer://app\">",
                "BalancerMember \"http://127.0.0.1:28081\"",
                "BalancerMember \"http://127.0.0.1:28082\"",
                "ProxyPass \"/\" \"balancer://app/\"",
                "RequestHeader set X-Forwarded-Proto \"https\"",
            ],
        );
        assert!(ServerKind::Apache.proxies() && ServerKind::Apache.caches());
        assert!(!ServerKind::Apache.compresses());
    }

    #[test]
    fn caddy_keeps_its_defaults_in_front_of_the_app() {
        let c = caddy_config(&app());
        has_lines(
            &c,
            &[
                "reverse_proxy 127.0.0.1:28081 127.0.0.1:28082 {",
                "lb_policy round_robin",
                "keepalive_idle_conns 1024",
                "tls /run/tls/cert.pem /run/tls/key.pem {",
            ],
        );
        assert!(!c.contains("encode"), "{c}");
        assert!(ServerKind::Caddy.fronts_apps() && !ServerKind::Caddy.caches());
    }

    #[test]
    fn a_missing_server_says_what_to_install() {
        assert_eq!(
            ServerKind::Caddy.install_hint(),
            "install it with `apt-get install caddy` (or run bench/setup)"
        );
        assert!(
            ServerKind::Apache
                .install_hint()
                .contains("apt-get install apache2")
        );
        assert!(
            ServerKind::Weir
                .install_hint()
                .contains("cargo build --release -p weir")
        );
    }

    /// Each compressing proxy turns compression on as its users do, at its
    /// own default level; the others refuse the role.
    #[test]
    fn the_compressing_proxies_turn_it_on_as_their_users_do() {
        let s = setup(Role::Compress(([127, 0, 0, 1], 28081).into()), false, false);
        let weir = weir_config(&s);
        assert!(
            weir.contains("proxy = { to = [\"127.0.0.1:28081\"]"),
            "{weir}"
        );
        assert!(weir.contains("\ncompress = true\n"), "{weir}");
        let nginx = nginx_config(&s);
        assert!(
            nginx.contains("  gzip on;\n  gzip_types application/json;\n"),
            "{nginx}"
        );
        assert!(
            !nginx.contains("gzip_comp_level"),
            "nginx's default level: {nginx}"
        );
        assert!(nginx.contains("proxy_pass http://backend;"), "{nginx}");
        let caddy = caddy_config(&s);
        assert!(
            caddy.contains("  encode gzip zstd\n  reverse_proxy 127.0.0.1:28081"),
            "{caddy}"
        );
        // Without the role, nobody compresses.
        assert!(!nginx_config(&proxy(false)).contains("gzip"));
        assert!(!weir_config(&proxy(false)).contains("compress"));
        assert!(!caddy_config(&proxy(false)).contains("encode"));
        for kind in [ServerKind::Haproxy, ServerKind::Varnish, ServerKind::Apache] {
            let r = kind.prepare(&s, no_weir());
            assert!(
                matches!(r, Err(CompareError::NotApplicable(_))),
                "{kind:?}: {r:?}"
            );
        }
    }
}
