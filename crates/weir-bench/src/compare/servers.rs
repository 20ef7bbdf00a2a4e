//! One config writer per server, all configured alike: 2 workers/threads,
//! keep-alive on with no per-connection request cap, access logs off,
//! sendfile on where it exists, the same certificate, TLS 1.2 and 1.3,
//! listening on 127.0.0.1 only. Each writer puts its config in the run folder
//! so a reader can check it, and returns the command that starts the server in
//! the foreground (so we hold its PID and stop it by PID).
//!
//! As proxies they do the same work per request: each sends the backend the
//! forwarding fields Caddy sends by default, X-Forwarded-For, -Proto and
//! -Host, and no others (weir's `Forwarded` and `Via` are turned off; nginx
//! and HAProxy are told to add the three; Varnish adds X-Forwarded-For
//! itself).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::CompareError;

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
    /// Varnish (proxy only, no TLS).
    Varnish,
    /// lighttpd.
    Lighttpd,
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
    /// Name-based virtual hosts on the one port: (host name, its root).
    Sites(Vec<(String, PathBuf)>),
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
}

impl ServerKind {
    /// All servers, in table order.
    pub const ALL: [ServerKind; 8] = [
        ServerKind::Weir,
        ServerKind::WeirB,
        ServerKind::Nginx,
        ServerKind::Apache,
        ServerKind::Caddy,
        ServerKind::Haproxy,
        ServerKind::Varnish,
        ServerKind::Lighttpd,
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
            ServerKind::Haproxy => find("haproxy"),
            ServerKind::Varnish => find("varnishd"),
            ServerKind::Lighttpd => find("lighttpd"),
        }
    }

    /// Can it serve files?
    pub fn serves_static(self) -> bool {
        !matches!(self, ServerKind::Haproxy | ServerKind::Varnish)
    }

    /// Is it in the proxy scenario?
    pub fn proxies(self) -> bool {
        matches!(
            self,
            ServerKind::Weir
                | ServerKind::WeirB
                | ServerKind::Nginx
                | ServerKind::Caddy
                | ServerKind::Haproxy
                | ServerKind::Varnish
        )
    }

    /// Can it terminate TLS?
    pub fn tls(self) -> bool {
        self != ServerKind::Varnish
    }

    /// The version string the binary reports.
    pub fn version(self, weirs: Weirs<'_>) -> String {
        let bin = self.binary(weirs);
        let arg: &[&str] = match self {
            ServerKind::Weir | ServerKind::WeirB => &["--version"],
            ServerKind::Haproxy | ServerKind::Lighttpd | ServerKind::Apache => &["-v"],
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
        std::fs::create_dir_all(&s.dir).map_err(|e| CompareError::io(&s.dir, e))?;
        let bin = self.binary(weirs);
        let d = s.dir.display().to_string();
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
                (
                    "haproxy.cfg",
                    haproxy_config(s)?,
                    vec!["-db".into(), "-f".into(), c],
                    vec![],
                    None,
                )
            }
            ServerKind::Varnish => {
                let c = s.dir.join("default.vcl").display().to_string();
                let Role::Proxy(_) = s.role else {
                    return Err(CompareError::NotApplicable("varnish only proxies".into()));
                };
                (
                    "default.vcl",
                    varnish_config(s)?,
                    vec![
                        "-F".into(),
                        "-a".into(),
                        format!("127.0.0.1:{}", s.port),
                        "-f".into(),
                        c,
                        "-n".into(),
                        format!("/tmp/weir-bench-varnish-{}", s.port),
                        "-s".into(),
                        "malloc,256m".into(),
                        "-T".into(),
                        "127.0.0.1:0".into(),
                        "-p".into(),
                        "thread_pools=2".into(),
                    ],
                    vec![],
                    None,
                )
            }
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
        };
        let config = s.dir.join(file);
        std::fs::write(&config, text).map_err(|e| CompareError::io(&config, e))?;
        Ok(Launch {
            program: bin,
            args,
            env,
            config,
            validate,
        })
    }
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
    let site = |o: &mut String, name: &str, what: String| {
        let _ = write!(
            o,
            "\n[site.\"{name}\"]\nlisten = [\"127.0.0.1:{}\"]\n{what}\n",
            s.port
        );
        if s.tls {
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
            format!("proxy = {{ to = [\"{up}\"], forwarded = false, via = false }}"),
        ),
        Role::Sites(sites) => {
            for (name, root) in sites {
                site(&mut o, name, format!("root = \"{}\"", root.display()));
            }
        }
    }
    o
}

fn nginx_config(s: &ServerSetup) -> String {
    let d = s.dir.display();
    let ssl = if s.tls { " ssl" } else { "" };
    let mut o = format!(
        "# weir-bench: nginx, {w} workers, keep-alive without a request cap, no access log.\n\
         worker_processes {w};\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log warn;\n\
         worker_rlimit_nofile 20000;\nevents {{ worker_connections 20000; multi_accept on; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n  keepalive_timeout 65;\n\
         \x20 types {{ text/html html; application/octet-stream bin; }}\n  default_type application/octet-stream;\n",
        w = s.workers
    );
    if let Role::Proxy(up) = &s.role {
        let _ = writeln!(o, "  upstream backend {{ server {up}; keepalive 64; }}");
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
        Role::Proxy(_) => server(
            &mut o,
            None,
            "    location / {\n      proxy_pass http://backend;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
             \x20     proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
             \x20     proxy_set_header X-Forwarded-Proto $scheme;\n\
             \x20     proxy_set_header X-Forwarded-Host $http_host;\n    }"
                .into(),
        ),
        Role::Sites(sites) => {
            for (name, root) in sites {
                server(&mut o, Some(name), format!("    root {};", root.display()));
            }
        }
    }
    o.push_str("}\n");
    o
}

fn apache_config(s: &ServerSetup) -> String {
    let d = s.dir.display();
    let m = "/usr/lib/apache2/modules";
    let mut o = format!(
        "# weir-bench: Apache event MPM, {w} processes x 64 threads, keep-alive without a request cap, no access log.\n\
         ServerRoot \"{d}\"\nServerName localhost\nDefaultRuntimeDir \"{d}\"\nPidFile \"{d}/apache.pid\"\n\
         ErrorLog \"{d}/apache-error.log\"\nLogLevel warn\nMutex posixsem\nUser www-data\nGroup www-data\n\
         LoadModule mpm_event_module {m}/mod_mpm_event.so\nLoadModule authz_core_module {m}/mod_authz_core.so\n\
         LoadModule mime_module {m}/mod_mime.so\nLoadModule dir_module {m}/mod_dir.so\n\
         StartServers {w}\nServerLimit {w}\nThreadsPerChild 64\nThreadLimit 64\nMaxRequestWorkers {mrw}\n\
         MinSpareThreads 64\nMaxSpareThreads {mrw}\nMaxConnectionsPerChild 0\n\
         KeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout 65\nEnableSendfile On\nTypesConfig /etc/mime.types\n\
         Listen 127.0.0.1:{p}\n",
        w = s.workers,
        mrw = s.workers * 64,
        p = s.port
    );
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
        Role::Proxy(_) => {}
    }
    o
}

fn caddy_config(s: &ServerSetup) -> String {
    let mut o = format!(
        "# weir-bench: Caddy with GOMAXPROCS={}, no access log (Caddy logs none unless asked).\n\
         {{\n  admin off\n  auto_https off\n}}\n",
        s.workers
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
        let _ = writeln!(o, "{body}\n}}");
    };
    match &s.role {
        Role::Static(root) => site(
            &mut o,
            "",
            format!("  root * {}\n  file_server", root.display()),
        ),
        Role::Proxy(up) => site(&mut o, "", format!("  reverse_proxy {up}")),
        Role::Sites(sites) => {
            for (name, root) in sites {
                site(
                    &mut o,
                    name,
                    format!("  root * {}\n  file_server", root.display()),
                );
            }
        }
    }
    o
}

fn haproxy_config(s: &ServerSetup) -> Result<String, CompareError> {
    let Role::Proxy(up) = &s.role else {
        return Err(CompareError::NotApplicable("haproxy only proxies".into()));
    };
    let ssl = if s.tls {
        format!(" ssl crt {}", s.combined.display())
    } else {
        String::new()
    };
    Ok(format!(
        "# weir-bench: HAProxy, {w} threads, keep-alive both sides, upstream reuse, no logs.\n\
         global\n  nbthread {w}\n  maxconn 9000\n  ssl-default-bind-options ssl-min-ver TLSv1.2\n\n\
         defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n  http-reuse always\n\n\
         frontend fe\n  bind 127.0.0.1:{p}{ssl}\n  default_backend be\n\n\
         backend be\n  option forwardfor\n  http-request set-header X-Forwarded-Proto {scheme}\n\
         \x20 http-request set-header X-Forwarded-Host %[req.hdr(host)]\n  server b1 {up}\n",
        w = s.workers,
        p = s.port,
        scheme = if s.tls { "https" } else { "http" },
    ))
}

fn varnish_config(s: &ServerSetup) -> Result<String, CompareError> {
    let Role::Proxy(up) = &s.role else {
        return Err(CompareError::NotApplicable("varnish only proxies".into()));
    };
    Ok(format!(
        "# weir-bench: Varnish as a pure proxy (every request passed, no caching), 2 thread pools.\n\
         vcl 4.1;\n\nbackend default {{\n  .host = \"{}\";\n  .port = \"{}\";\n}}\n\n\
         sub vcl_recv {{\n  set req.http.X-Forwarded-Proto = \"http\";\n  set req.http.X-Forwarded-Host = req.http.host;\n  return (pass);\n}}\n",
        up.ip(),
        up.port()
    ))
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
         server.max-keep-alive-requests = 1000000\nserver.max-keep-alive-idle = 65\nserver.max-fds = 20000\n\
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
