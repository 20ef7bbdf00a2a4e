//! The `weir` command line: parse, validate, run. Errors end here as
//! `anyhow` with a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use weir_config::{self as config, Config};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "weir: web server, reverse proxy, load balancer and HTTP cache",
    long_about = "weir: one binary that is a web server, reverse proxy, load balancer and HTTP cache.\n\n\
                  With no command (or `weir run` with no config and no ./weir.toml) it serves a welcome page on http://127.0.0.1:8080."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum AppAction {
    /// Rolling restart: for each instance, start a new one, wait until it is
    /// ready, send it traffic, drain and stop the old one. A new instance
    /// that never gets ready is stopped and the old ones keep serving.
    Restart {
        /// The app's name: its site's name in the config.
        name: String,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Run the server from a config file (default: ./weir.toml, else the built-in welcome page on http://127.0.0.1:8080).
    Run {
        /// Path of the TOML config file.
        #[arg(short, long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Admin API address ("127.0.0.1:2019", a Unix socket path, or "off");
        /// overrides the config's [admin] listen.
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Make the running weir load its config again (or the one at --config),
    /// through its admin API; prints the errors of a refused config.
    Reload {
        /// Config file to load (default: the one the running weir was started with).
        #[arg(short, long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Admin API address of the running weir (default: the [admin] listen
        /// of --config or ./weir.toml, else 127.0.0.1:2019).
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
    },
    /// Act on an app the running weir runs (`app = …` on a site), through its admin API.
    App {
        #[command(subcommand)]
        action: AppAction,
        /// Config file of the running weir (to find its admin API; default ./weir.toml).
        #[arg(short, long, value_name = "PATH", global = true)]
        config: Option<PathBuf>,
        /// Admin API address of the running weir (default: the [admin] listen
        /// of --config or ./weir.toml, else 127.0.0.1:2019).
        #[arg(long, value_name = "ADDR", global = true)]
        admin: Option<String>,
    },
    /// Serve a directory as a static site, with no config file.
    FileServer {
        /// Directory to serve.
        #[arg(short, long, value_name = "DIR")]
        root: PathBuf,
        /// Address to listen on.
        #[arg(short, long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: String,
        /// Show directory listings for directories without an index file.
        #[arg(short, long)]
        browse: bool,
        /// Certificate chain (PEM) to serve HTTPS with; needs --tls-key.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// Private key (PEM) of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Write an access log (combined format) to standard output.
        #[arg(long)]
        access_log: bool,
        /// Open the admin API on this address (none by default).
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Reverse-proxy one address to one or more upstreams, with no config file.
    ReverseProxy {
        /// Address or host to listen on ("127.0.0.1:8080", ":8080", "example.com").
        #[arg(
            short,
            long,
            value_name = "ADDR_OR_HOST",
            default_value = "127.0.0.1:8080"
        )]
        from: String,
        /// Upstream ("127.0.0.1:9000", "http://app:8080", "https://api.example.com",
        /// "h2c://127.0.0.1:9000", "unix:/run/app.sock"); repeat for load balancing.
        #[arg(short, long, value_name = "UPSTREAM", required = true)]
        to: Vec<String>,
        /// Balancing: round_robin, least_conn, random, p2c, first, ip_hash, hash.
        #[arg(long, value_name = "MODE")]
        balance: Option<String>,
        /// Host header sent upstream: pass (default), upstream, or a literal value.
        #[arg(long, value_name = "HOST")]
        change_host: Option<String>,
        /// Accept any upstream TLS certificate.
        #[arg(long)]
        insecure_skip_verify: bool,
        /// Write an access log (combined format) to standard output.
        #[arg(long)]
        access_log: bool,
        /// Cache responses as RFC 9111 allows (in memory, 256 MiB; see
        /// `cache` in docs/config.md for more).
        #[arg(long)]
        cache: bool,
        /// Open the admin API on this address (none by default).
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
        #[command(flatten)]
        log: LogArgs,
    },
    /// Replace the running weir with the binary now installed at its path,
    /// with no connection refused: the new process takes over the listening
    /// sockets, the old one drains and exits (as SIGUSR2 does).
    Upgrade {
        /// Config file whose [admin] names the running weir's admin API.
        #[arg(short, long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// Admin API address of the running weir.
        #[arg(long, value_name = "ADDR")]
        admin: Option<String>,
    },
    /// Check a config file; prints every error as file:line:col: message.
    Validate {
        /// Path of the TOML config file.
        #[arg(short, long, value_name = "PATH")]
        config: PathBuf,
    },
    /// Write the weir.toml that does what an nginx config (with its
    /// includes), a Caddyfile, a haproxy.cfg or an Apache config does. The
    /// report on stderr lists each directive as mapped, approximated (and
    /// how weir differs) or without equivalent (and what to do). Exit 0:
    /// everything mapped; 3: something approximated or left out, none of it
    /// an access rule; 4: an access rule (authentication, allow/deny, an
    /// ACL's deny or redirect, a rate limit, client certificates, an HTTPS
    /// redirect) could not be kept exactly, and the sites written refuse
    /// every request unless --allow-open; 1: the input could not be read
    /// (file:line:col: message); 5: weir import wrote a config weir refuses
    /// (a bug of the importer: please report it with the input).
    Import {
        /// "nginx", "caddy", "haproxy" or "apache", or the config's path (the
        /// kind is then guessed and said).
        #[arg(value_name = "KIND|PATH")]
        kind: String,
        /// The config file: nginx.conf, a sites-enabled file, a Caddyfile,
        /// haproxy.cfg, apache2.conf.
        #[arg(value_name = "PATH")]
        path: Option<PathBuf>,
        /// Write the weir.toml to FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Read the config's absolute paths (includes, htpasswd files) under
        /// DIR, for a copy of another machine's /etc.
        #[arg(long, value_name = "DIR")]
        sysroot: Option<PathBuf>,
        /// Apache: read the .htaccess files under each DocumentRoot (where
        /// AllowOverride lets Apache read them) into the routes.
        #[arg(long)]
        htaccess: bool,
        /// When an access rule cannot be kept exactly, write the sites as
        /// approximated (they may let through what the original refused)
        /// instead of refusing every request. The exit status stays 4.
        #[arg(long)]
        allow_open: bool,
    },
    /// Install the local CA's root certificate into the system trust store
    /// (creating the CA if needed), so browsers and tools trust weir's
    /// certificates for localhost and private addresses.
    Trust(TrustArgs),
    /// Remove the local CA's root certificate from the system trust store.
    Untrust(TrustArgs),
    /// Print weir's version.
    Version,
    /// Hash a password for `basic_auth` (read from standard input, one
    /// line; prompts on a terminal).
    HashPassword {
        /// "bcrypt" or "argon2" (argon2id).
        #[arg(long, default_value = "bcrypt", value_parser = ["bcrypt", "argon2"])]
        algorithm: String,
        /// bcrypt's cost (4 to 31): each step doubles the work.
        #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

#[derive(Args, Clone)]
struct TrustArgs {
    /// Config file whose `tls.storage` holds the CA (default: ./weir.toml if present).
    #[arg(short, long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Storage directory holding the CA; overrides the config.
    #[arg(long, value_name = "DIR")]
    storage: Option<PathBuf>,
}

/// `weir import`: the weir.toml on stdout or in `output`, the report on
/// stderr, and the output checked by the config loader as `weir validate`
/// would check it here.
fn import(
    kind: &str,
    path: Option<PathBuf>,
    output: Option<PathBuf>,
    sysroot: Option<PathBuf>,
    htaccess: bool,
    allow_open: bool,
) -> anyhow::Result<ExitCode> {
    let (kind, path) = match (weir_import::Kind::parse(kind), path) {
        (Some(k), Some(p)) => (k, p),
        (Some(_), None) => anyhow::bail!("weir import {kind}: give the config's path"),
        (None, None) => {
            let p = PathBuf::from(kind);
            let Some(k) = weir_import::guess(&p) else {
                anyhow::bail!(
                    "{}: cannot tell which server's config this is; write `weir import nginx {}`",
                    p.display(),
                    p.display()
                );
            };
            eprintln!(
                "weir import: reading {} as a {} config",
                p.display(),
                k.name()
            );
            (k, p)
        }
        (None, Some(_)) => {
            anyhow::bail!("weir import: `{kind}` is not nginx, caddy, haproxy or apache")
        }
    };
    let opts = weir_import::Options {
        sysroot,
        htaccess,
        allow_open,
        env: None,
    };
    let out = match weir_import::import(kind, &path, &opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let shown = output
        .as_ref()
        .map_or_else(|| "weir.toml".to_string(), |o| o.display().to_string());
    let base = output
        .as_ref()
        .and_then(|o| o.parent())
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let check = config::load_str_with(&shown, &out.toml, &base, &weir_tls::CertFiles);
    match &output {
        Some(o) => {
            std::fs::write(o, &out.toml).with_context(|| format!("writing {}", o.display()))?
        }
        None => print!("{}", out.toml),
    }
    eprintln!("{}", out.report);
    let mut code = out.report.exit_code();
    if let Err(errs) = check {
        let (machine, text): (Vec<_>, Vec<_>) = errs.0.iter().partition(|d| d.machine);
        if !machine.is_empty() {
            // Paths that exist on the imported server may not exist here.
            eprintln!("weir validate on this machine (files the config names):");
            for d in &machine {
                eprintln!("  {d}");
            }
            code = code.max(3);
        }
        if !text.is_empty() {
            eprintln!(
                "weir import wrote a config weir refuses (a bug of the importer: please report it with the input):"
            );
            for d in &text {
                eprintln!("  {d}");
            }
            return Ok(ExitCode::from(5));
        }
    }
    if !out.access_lost.is_empty() {
        eprintln!(
            "{} access rule(s) could not be kept exactly: {}",
            out.access_lost.len(),
            if allow_open {
                "written as approximated (--allow-open)"
            } else {
                "every site written refuses every request (403); fix them by hand, or import again with --allow-open"
            }
        );
    }
    Ok(ExitCode::from(code))
}

/// Where Debian-family systems take extra roots from.
const SYSTEM_CA_FILE: &str = "/usr/local/share/ca-certificates/weir-local-ca.crt";

#[derive(Args, Clone)]
struct LogArgs {
    /// Error-log level (error, warn, info, debug, trace); overrides server.log_level.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each once: many of weir's errors already
/// name their cause in their own message ("cannot listen on ...: Address
/// already in use"), and anyhow's `{:#}` would print it a second time.
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    // Sockets handed over by an upgrading weir (or systemd): taken before
    // any thread starts, as it clears their environment variables.
    let inherited = weir_server::upgrade::Inherited::from_env();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match cli.command.unwrap_or(Command::Run {
        config: None,
        admin: None,
        log: LogArgs { log_level: None },
    }) {
        Command::Reload { config, admin } => reload(config, admin),
        Command::App {
            action: AppAction::Restart { name },
            config,
            admin,
        } => app_restart(&name, config, admin),
        Command::Upgrade { config, admin } => upgrade(config, admin),
        Command::Trust(args) => trust(&args, true),
        Command::Untrust(args) => trust(&args, false),
        Command::HashPassword { algorithm, cost } => hash_password(&algorithm, cost),
        Command::Import {
            kind,
            path,
            output,
            sysroot,
            htaccess,
            allow_open,
        } => import(&kind, path, output, sysroot, htaccess, allow_open),
        Command::Version => {
            println!("weir {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { config } => match config::load_file_with(&config, &weir_tls::CertFiles)
        {
            Ok(cfg) => {
                for w in cfg.warnings() {
                    eprintln!("{}: warning: {w}", config.display());
                }
                println!(
                    "{}: ok ({} sites, {} listeners)",
                    config.display(),
                    cfg.sites.len(),
                    cfg.listeners.len()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(errs) => {
                eprintln!("{errs}");
                eprintln!("{}: {} error(s)", config.display(), errs.0.len());
                Ok(ExitCode::FAILURE)
            }
        },
        Command::Run { config, admin, log } => {
            let path = config.or_else(|| {
                let p = PathBuf::from("weir.toml");
                p.exists().then_some(p)
            });
            let cfg = match &path {
                Some(p) => match config::load_file_with(p, &weir_tls::CertFiles) {
                    Ok(c) => c,
                    Err(errs) => {
                        eprintln!("{errs}");
                        anyhow::bail!("{}: {} error(s); not starting", p.display(), errs.0.len());
                    }
                },
                None => Config::builtin_welcome(),
            };
            let mut cfg = cfg;
            if let Some(a) = admin {
                cfg.admin = cli_admin(&a)?;
            }
            let path = path.map(|p| std::path::absolute(&p).unwrap_or(p));
            run(cfg, path, inherited, &log)
        }
        Command::FileServer {
            root,
            listen,
            browse,
            tls_cert,
            tls_key,
            access_log,
            admin,
            log,
        } => {
            let src = file_server_toml(&root, &listen, browse, tls_cert, tls_key, access_log)?;
            let cfg = match config::load_str_with(
                "<file-server>",
                &src,
                Path::new("."),
                &weir_tls::CertFiles,
            ) {
                Ok(c) => c,
                Err(errs) => {
                    // Point at the flags, not at a file the user never wrote.
                    let msgs: Vec<String> = errs.0.iter().map(|d| d.message.clone()).collect();
                    anyhow::bail!("{}", msgs.join("\n"));
                }
            };
            let mut cfg = cfg;
            cfg.admin = match admin {
                Some(a) => cli_admin(&a)?,
                None => config::admin::AdminConfig::off(),
            };
            run(cfg, None, inherited, &log)
        }
        Command::ReverseProxy {
            from,
            to,
            balance,
            change_host,
            insecure_skip_verify,
            access_log,
            cache,
            admin,
            log,
        } => {
            let src = reverse_proxy_toml(
                &from,
                &to,
                balance,
                change_host,
                insecure_skip_verify,
                access_log,
                cache,
            )?;
            let cfg = match config::load_str_with(
                "<reverse-proxy>",
                &src,
                Path::new("."),
                &weir_tls::CertFiles,
            ) {
                Ok(c) => c,
                Err(errs) => {
                    let msgs: Vec<String> = errs.0.iter().map(|d| d.message.clone()).collect();
                    anyhow::bail!("{}", msgs.join("\n"));
                }
            };
            let mut cfg = cfg;
            cfg.admin = match admin {
                Some(a) => cli_admin(&a)?,
                None => config::admin::AdminConfig::off(),
            };
            run(cfg, None, inherited, &log)
        }
    }
}

/// An admin address given with `--admin`: as if the config had named it.
fn cli_admin(a: &str) -> anyhow::Result<config::admin::AdminConfig> {
    let listen = config::admin::parse_listen(a).map_err(|e| anyhow::anyhow!("--admin: {e}"))?;
    if let config::admin::AdminListen::Tcp(addr) = &listen
        && !addr.ip().is_loopback()
    {
        anyhow::bail!(
            "--admin: {addr} is not a loopback address; name it in the config with admin.token"
        );
    }
    Ok(config::admin::AdminConfig {
        listen,
        explicit: true,
        token: None,
    })
}

/// The admin address and token `weir reload` talks to: `--admin`, else the
/// `[admin]` table of the config file (read as plain TOML: the file may be
/// the very config being fixed), else the default.
fn admin_target(
    config: Option<&Path>,
    admin: Option<String>,
) -> anyhow::Result<(config::admin::AdminListen, Option<String>)> {
    let path = config.map(Path::to_path_buf).or_else(|| {
        let p = PathBuf::from("weir.toml");
        p.exists().then_some(p)
    });
    let table = path
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| t.get("admin").and_then(|a| a.as_table()).cloned());
    let token = table
        .as_ref()
        .and_then(|t| t.get("token")?.as_str().map(str::to_string));
    let listen =
        match admin.or_else(|| {
            table
                .as_ref()
                .and_then(|t| t.get("listen")?.as_str().map(str::to_string))
        }) {
            Some(a) => config::admin::parse_listen(&a)
                .map_err(|e| anyhow::anyhow!("admin address: {e}"))?,
            None => config::admin::parse_listen(config::admin::DEFAULT_ADMIN)
                .expect("the default parses"),
        };
    Ok((listen, token))
}

fn upgrade(config: Option<PathBuf>, admin: Option<String>) -> anyhow::Result<ExitCode> {
    let (at, token) = admin_target(config.as_deref(), admin)?;
    if at == config::admin::AdminListen::Off {
        anyhow::bail!(
            "the admin API is off ([admin] listen = \"off\"): send SIGUSR2 to the weir process instead (kill -USR2 PID)"
        );
    }
    let (status, text) = weir_admin::client::post(&at, "/upgrade", String::new(), token.as_deref())
        .map_err(|e| {
            anyhow::anyhow!("{e}\n(without an admin API, send SIGUSR2: kill -USR2 PID)")
        })?;
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if status.is_success() && answer["ok"] == true {
        println!(
            "upgraded: process {} serves now; the old one drains and exits",
            answer["pid"]
        );
        return Ok(ExitCode::SUCCESS);
    }
    Ok(refused(
        status,
        &text,
        &answer,
        "upgrade failed; the running weir goes on serving",
    ))
}

/// Prints why the admin API said no: its `errors`, or its whole answer.
fn refused(
    status: http::StatusCode,
    text: &str,
    answer: &serde_json::Value,
    outcome: &str,
) -> ExitCode {
    match answer["errors"].as_array() {
        Some(errs) => {
            for e in errs {
                eprintln!("{}", e.as_str().unwrap_or_default());
            }
            eprintln!("{outcome}");
        }
        None => eprintln!("{outcome}: {status}: {}", text.trim()),
    }
    ExitCode::FAILURE
}

fn reload(config: Option<PathBuf>, admin: Option<String>) -> anyhow::Result<ExitCode> {
    let (at, token) = admin_target(config.as_deref(), admin)?;
    if at == config::admin::AdminListen::Off {
        anyhow::bail!(
            "the admin API is off ([admin] listen = \"off\"): send SIGHUP to the weir process instead (kill -HUP PID)"
        );
    }
    let body = match &config {
        Some(p) => {
            let abs = std::path::absolute(p).with_context(|| p.display().to_string())?;
            serde_json::json!({ "config": abs }).to_string()
        }
        None => String::new(),
    };
    let (status, text) = weir_admin::client::post(&at, "/reload", body, token.as_deref()).map_err(
        |e| anyhow::anyhow!("{e}\n(is weir running with its admin API there? Without one, send SIGHUP: kill -HUP PID)"),
    )?;
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if status.is_success() && answer["ok"] == true {
        let r = &answer["report"];
        println!(
            "reloaded: {} sites kept, {} new",
            r["sites_kept"], r["sites_new"]
        );
        for (key, what) in [
            ("listeners_added", "now listening on"),
            ("listeners_removed", "stopped listening on"),
        ] {
            for a in r[key].as_array().into_iter().flatten() {
                println!("{what} {}", a.as_str().unwrap_or_default());
            }
        }
        if let Some(n) = r["restart_needed"].as_array().filter(|n| !n.is_empty()) {
            let names: Vec<&str> = n.iter().filter_map(|v| v.as_str()).collect();
            println!("needs a restart to change: {}", names.join(", "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    Ok(refused(
        status,
        &text,
        &answer,
        "reload refused; the running config stays",
    ))
}

fn app_restart(
    name: &str,
    config: Option<PathBuf>,
    admin: Option<String>,
) -> anyhow::Result<ExitCode> {
    let (at, token) = admin_target(config.as_deref(), admin)?;
    if at == config::admin::AdminListen::Off {
        anyhow::bail!(
            "the admin API is off ([admin] listen = \"off\"): `weir app restart` needs it"
        );
    }
    // The name is a site's (a host or an address): a path segment as it is.
    let (status, text) = weir_admin::client::post(
        &at,
        &format!("/apps/{name}/restart"),
        String::new(),
        token.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}\n(is weir running with its admin API there?)"))?;
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if status.is_success() && answer["ok"] == true {
        let pids: Vec<String> = answer["app"]["pids"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string())
            .collect();
        if pids.is_empty() {
            // Scaled to zero (or between starts): the next start runs the
            // current settings anyway.
            println!(
                "app {name}: nothing to restart: no process runs (phase: {})",
                answer["app"]["phase"].as_str().unwrap_or("unknown")
            );
        } else {
            println!("app {name}: restarted; processes now {}", pids.join(", "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    match answer["error"].as_str() {
        Some(e) => eprintln!("app {name}: restart failed: {e}"),
        None => eprintln!("app {name}: restart failed: {status}: {}", text.trim()),
    }
    Ok(ExitCode::FAILURE)
}

/// The config `weir reverse-proxy` runs, as TOML so it goes through exactly
/// the same validation as a file.
fn reverse_proxy_toml(
    from: &str,
    to: &[String],
    balance: Option<String>,
    host: Option<String>,
    insecure: bool,
    access_log: bool,
    cache: bool,
) -> anyhow::Result<String> {
    let mut proxy = toml::Table::new();
    proxy.insert(
        "to".into(),
        toml::Value::Array(to.iter().map(|t| t.as_str().into()).collect()),
    );
    if let Some(b) = balance {
        proxy.insert("balance".into(), b.into());
    }
    if let Some(h) = host {
        proxy.insert("host".into(), h.into());
    }
    if insecure {
        proxy.insert("tls_verify".into(), false.into());
    }
    let mut site = toml::Table::new();
    site.insert("proxy".into(), proxy.into());
    // An address listens there for any host; a bare host name is a site name.
    let is_addr = from.starts_with(':')
        || from.parse::<std::net::SocketAddr>().is_ok()
        || from.parse::<u16>().is_ok();
    let name = if is_addr {
        site.insert("listen".into(), from.into());
        "*".to_string()
    } else {
        from.to_string()
    };
    if access_log {
        site.insert("access_log".into(), "stdout".into());
    }
    if cache {
        site.insert("cache".into(), true.into());
    }
    let mut sites = toml::Table::new();
    sites.insert(name, site.into());
    let mut doc = toml::Table::new();
    doc.insert("site".into(), sites.into());
    Ok(toml::to_string(&doc)?)
}

fn run(
    cfg: Config,
    path: Option<PathBuf>,
    mut inherited: weir_server::upgrade::Inherited,
    log: &LogArgs,
) -> anyhow::Result<ExitCode> {
    let level = log
        .log_level
        .clone()
        .unwrap_or_else(|| cfg.server.log_level.clone());
    init_logging(&level, cfg.server.log_json)?;
    tracing::info!(
        "weir {} starting from {}",
        env!("CARGO_PKG_VERSION"),
        cfg.source
    );
    // The admin socket is bound before serving: a named address that is
    // taken stops start-up; the default one only means no admin API.
    let admin_cfg = cfg.admin.clone();
    let admin = match weir_admin::Socket::bind(&admin_cfg, &mut inherited) {
        Ok(s) => s,
        Err(e) if admin_cfg.explicit => return Err(e.into()),
        Err(e) => {
            tracing::warn!(
                "{e}; running without an admin API (another weir?): reload with SIGHUP (kill -HUP {})",
                std::process::id()
            );
            None
        }
    };
    let mut admin_err = None;
    weir_server::run(cfg, path, inherited, |server| {
        if let Some(sock) = admin
            && let Err(e) = weir_admin::start(server.clone(), sock, admin_cfg.token.clone())
        {
            admin_err = Some(e);
        }
    })
    .context("server")?;
    if let Some(e) = admin_err {
        tracing::error!("{e}");
    }
    Ok(ExitCode::SUCCESS)
}

fn storage_dir(args: &TrustArgs) -> anyhow::Result<PathBuf> {
    if let Some(s) = &args.storage {
        return Ok(s.clone());
    }
    let path = args.config.clone().or_else(|| {
        let p = PathBuf::from("weir.toml");
        p.exists().then_some(p)
    });
    Ok(match path {
        Some(p) => match config::load_file_with(&p, &weir_tls::CertFiles) {
            Ok(c) => c.tls.storage,
            Err(errs) => anyhow::bail!("{errs}"),
        },
        None => weir_tls::storage::Storage::default_dir(),
    })
}

/// `weir trust` / `weir untrust`.
fn trust(args: &TrustArgs, install: bool) -> anyhow::Result<ExitCode> {
    use weir_tls::{internal_ca::LocalCa, storage::Storage};
    let dir = storage_dir(args)?;
    let target = Path::new(SYSTEM_CA_FILE);
    if install {
        let storage = Storage::open(&dir)?;
        let ca = LocalCa::load_or_create(&storage)?;
        println!(
            "local CA root: {}",
            storage.path("local-ca/root.pem").display()
        );
        if let Some(d) = target.parent() {
            std::fs::create_dir_all(d).with_context(|| d.display().to_string())?;
        }
        std::fs::write(target, ca.root_pem())
            .with_context(|| format!("writing {} (run as root?)", target.display()))?;
        println!("installed {}", target.display());
    } else {
        match std::fs::remove_file(target) {
            Ok(()) => println!("removed {}", target.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("{} was not installed", target.display());
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("removing {} (run as root?)", target.display()));
            }
        }
    }
    let out = std::process::Command::new("update-ca-certificates")
        .output()
        .context("running update-ca-certificates (is the ca-certificates package installed?)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("update-ca-certificates: {line}");
    }
    if !out.status.success() {
        anyhow::bail!(
            "update-ca-certificates failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    println!(
        "{} the weir local CA {} the system trust store",
        if install { "added" } else { "removed" },
        if install { "to" } else { "from" }
    );
    Ok(ExitCode::SUCCESS)
}

fn init_logging(level: &str, json: bool) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("WEIR_LOG") {
        Ok(f) => EnvFilter::try_new(f).context("WEIR_LOG")?,
        Err(_) => EnvFilter::try_new(format!("weir={level},warn"))
            .with_context(|| format!("log level `{level}`"))?,
    };
    // Colours only on a terminal (and not with NO_COLOR set): a log that
    // goes to a file, a pipe or journald must not carry escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

/// The config `weir file-server` runs, as TOML so it goes through exactly the
/// same validation as a file.
fn file_server_toml(
    root: &Path,
    listen: &str,
    browse: bool,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    access_log: bool,
) -> anyhow::Result<String> {
    let root = std::fs::canonicalize(root).with_context(|| format!("--root {}", root.display()))?;
    let mut site = toml::Table::new();
    site.insert("root".into(), root.display().to_string().into());
    site.insert("listen".into(), listen.into());
    site.insert("browse".into(), browse.into());
    if let (Some(c), Some(k)) = (cert, key) {
        let mut t = toml::Table::new();
        t.insert("cert".into(), c.display().to_string().into());
        t.insert("key".into(), k.display().to_string().into());
        site.insert("tls".into(), t.into());
        site.insert("http_redirect".into(), false.into());
    }
    if access_log {
        site.insert("access_log".into(), "stdout".into());
    }
    let mut sites = toml::Table::new();
    sites.insert("*".into(), site.into());
    let mut doc = toml::Table::new();
    doc.insert("site".into(), sites.into());
    Ok(toml::to_string(&doc)?)
}

/// `weir hash-password`: one line of standard input, hashed.
fn hash_password(algorithm: &str, cost: u32) -> anyhow::Result<ExitCode> {
    use std::io::{BufRead, IsTerminal, Write};
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password (shown as typed): ");
        std::io::stderr().flush()?;
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        anyhow::bail!("no password on standard input");
    }
    println!(
        "{}",
        weir_traffic::password::hash(algorithm, password, cost)?
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot listen on 127.0.0.1:80: {source}")]
    struct Bind {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated_and_a_new_one_is_kept() {
        let io = || std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        let e = anyhow::Error::new(Bind { source: io() });
        assert_eq!(
            error_chain(&e),
            "cannot listen on 127.0.0.1:80: Address already in use"
        );
        let e = anyhow::Error::new(io()).context("starting the server");
        assert_eq!(
            error_chain(&e),
            "starting the server: Address already in use"
        );
    }
}
