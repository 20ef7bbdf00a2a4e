//! HAProxy configs into weir's: `global`, `defaults` (named ones too, with
//! `from`), `frontend`, `backend`, `listen` and `userlist`. An HTTP
//! frontend becomes a site per group of `bind` lines (plain, or TLS with
//! its `crt`); its `http-request` rules, `redirect`s and `use_backend`
//! rules become routes in HAProxy's order (the first that matches answers,
//! as HAProxy's first matching rule does) and its `default_backend` the
//! site's proxy. A `mode tcp` frontend becomes a `[tcp]` listener, or
//! passthrough sites when it routes on `req.ssl_sni`. Stick tables with
//! `track-sc0` and a `deny` on their rate become `limit`s. HAProxy's
//! forwarding behaviour is reproduced, not its words: it sends neither
//! `Forwarded` nor `Via`, and `option forwardfor` appends one
//! `X-Forwarded-For` field to what the client sent.
//!
//! Reads the config file only; never writes, never starts a server, and
//! never emits a weir key for a directive it cannot honour (those are reported).

mod cond;
pub mod parse;

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Origin};
use crate::report::Report;
use crate::toml::{Table, V};
use crate::{Imported, Options};

use cond::{Acl, Cond};
use parse::{Line, Section};

/// Imports the HAProxy config at `main`.
pub fn import(main: &Path, opts: &Options) -> Result<Imported, Error> {
    let shown = main.file_name().map_or_else(
        || main.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let text = std::fs::read_to_string(main).map_err(|e| {
        Error::new(
            Origin {
                file: shown.clone(),
                line: 1,
                col: 1,
            },
            format!("cannot read {}: {e}", main.display()),
        )
    })?;
    let mut env = crate::env::Env::new(opts.env.clone());
    let mut report = Report::default();
    let sections = parse::parse(&shown, &text, &mut env, &mut report)?;
    let mut cx = Cx {
        report,
        server: Table::new("server", false),
        sites: Vec::new(),
        tcp: Vec::new(),
        names: Vec::new(),
        logs: Vec::new(),
        crt_base: None,
        config_dir: main
            .parent()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()))
            .map(|d| d.display().to_string()),
        relative_to: None,
        users: HashMap::new(),
        backends: HashMap::new(),
        timeouts_from: None,
        _opts: opts.clone(),
    };
    for s in sections.iter().filter(|s| s.kind == "global") {
        cx.global(s);
    }
    for s in sections.iter().filter(|s| s.kind == "userlist") {
        cx.userlist(s);
    }
    // Each proxy with the lines of the defaults it inherits first.
    let mut last_defaults: Option<&Section> = None;
    let mut named: HashMap<&str, &Section> = HashMap::new();
    let mut proxies: Vec<(&Section, Vec<Line>)> = Vec::new();
    for s in &sections {
        match s.kind.as_str() {
            "defaults" => {
                if !s.name.is_empty() {
                    named.insert(s.name.as_str(), s);
                }
                last_defaults = Some(s);
            }
            "frontend" | "backend" | "listen" => {
                let from = s
                    .args
                    .iter()
                    .position(|a| a == "from")
                    .and_then(|i| s.args.get(i + 1))
                    .and_then(|n| named.get(n.as_str()).copied())
                    .or(last_defaults);
                let mut lines: Vec<Line> = from
                    .map(|d| d.lines.iter().filter(|l| inherited(l.kw())).cloned().collect())
                    .unwrap_or_default();
                lines.extend(s.lines.iter().cloned());
                proxies.push((s, lines));
            }
            "global" | "userlist" => {}
            other => cx.report.none(
                &s.at,
                format!("{other} {}", s.name),
                match other {
                    "cache" => "weir's cache is `cache = true` on a site or route (RFC 9111, docs/cache.md); see `http-request cache-use`",
                    "resolvers" => "none needed: weir resolves upstream names itself (`dns_ttl`)",
                    "peers" => "weir shares limits between instances with [cluster] (Redis), not HAProxy's peers",
                    _ => "not known to weir import",
                },
            ),
        }
    }
    for (s, lines) in &proxies {
        if s.kind != "frontend" {
            let b = cx.backend(s, lines);
            cx.backends.insert(s.name.clone(), b);
        }
    }
    for (s, lines) in &proxies {
        if s.kind != "backend" {
            cx.frontend(s, lines);
        }
    }
    for (s, _) in &proxies {
        if s.kind == "backend" && !cx.backends.get(&s.name).is_some_and(|b| b.used) {
            cx.report.none(
                &s.at,
                format!("backend {}", s.name),
                "no frontend uses it, so no weir site does",
            );
        }
    }
    for s in sections.iter().filter(|s| s.kind == "defaults") {
        for l in &s.lines {
            if !cx.report.items.iter().any(|i| i.at == l.at) {
                cx.report.mapped(
                    &l.at,
                    l.text(),
                    "nothing: no frontend or backend here uses it",
                );
            }
        }
    }
    cx.report.baseline(
        "HAProxy's own pages",
        "the answers weir makes itself (deny, 503, 502, 504, auth) carry weir's own short bodies, not HAProxy's HTML",
    );
    if !cx.backends.is_empty() {
        cx.report.baseline(
            "HAProxy's retries",
            "weir tries another server when connecting fails (2 more times) and ejects a server that keeps failing for a while; HAProxy retries the same server (`retries 3`) and moves to another only with `option redispatch`",
        );
        cx.report.baseline(
            "no server reachable",
            "weir answers 502 Bad Gateway when no server accepts the connection (503 once health checks have marked them all down); HAProxy answers 503 after its retries",
        );
        cx.report.baseline(
            "a client's forwarding fields",
            "weir drops the X-Forwarded-For, Forwarded and Via a client sends unless a `request_headers` rule names them (as `option forwardfor` does); HAProxy passes them on",
        );
        cx.report.baseline(
            "request bodies",
            "weir refuses request bodies over server.limits.body (1MiB by default) with 413; HAProxy has no limit: raise it if you accept uploads",
        );
    }
    let head = vec![
        format!(
            "weir.toml made by `weir import haproxy {}`.",
            main.display()
        ),
        "Each part says where it came from; the report on stderr says what differs.".into(),
    ];
    let mut tables = Vec::new();
    if !cx.server.keys.is_empty() {
        cx.server
            .comments
            .push(format!("{shown}: global and defaults"));
        tables.push(cx.server.clone());
    }
    tables.extend(cx.sites.iter().cloned());
    tables.extend(cx.tcp.iter().cloned());
    crate::finish(
        crate::Kind::Haproxy,
        main,
        head,
        tables,
        cx.report,
        &env,
        opts,
    )
}

/// Keywords a proxy takes from its `defaults` section.
fn inherited(kw: &str) -> bool {
    matches!(
        kw,
        "mode"
            | "timeout"
            | "option"
            | "no"
            | "balance"
            | "log"
            | "default-server"
            | "retries"
            | "http-check"
            | "cookie"
            | "compression"
            | "errorfile"
            | "maxconn"
            | "default_backend"
            | "hash-type"
            | "http-reuse"
            | "fullconn"
    )
}

/// A HAProxy time (`5000` is milliseconds, `5s`, `1m`, `2h`, `1d`, `100us`) as weir writes it.
fn time(t: &str) -> Option<String> {
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..split].parse().ok()?;
    let ms = match &t[split..] {
        "" | "ms" => n,
        "us" => n.div_ceil(1000),
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        "d" => n * 86_400_000,
        _ => return None,
    };
    Some(if ms % 60_000 == 0 && ms >= 60_000 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// Why a named backend is not in the output.
fn missing_backend(name: &str) -> &'static str {
    if name.contains("%[") {
        "a backend named at run time (`%[…]`): weir routes only to backends its config names"
    } else {
        "no such backend"
    }
}

/// A `bind` address as a weir listen address, or why not.
fn bind_addr(a: &str) -> Result<String, String> {
    if a.starts_with("quic4@") || a.starts_with("quic6@") || a.starts_with("quic@") {
        return Err(
            "a QUIC bind: weir answers HTTP/3 itself on the UDP port of each TLS site's address"
                .into(),
        );
    }
    let a = mptcp(a);
    if a.starts_with("unix@")
        || a.starts_with('/')
        || a.starts_with("abns@")
        || a.starts_with("fd@")
        || a.starts_with("sockpair@")
    {
        return Err("weir listens on TCP addresses only".into());
    }
    let (v6, a) = match a.strip_prefix("ipv6@") {
        Some(r) => (true, r),
        None => (false, a.strip_prefix("ipv4@").unwrap_or(a)),
    };
    let (host, port) = a.rsplit_once(':').ok_or("no port")?;
    if port.contains('-') || port.parse::<u16>().is_err() {
        return Err(format!(
            "`{port}` is not one port (weir listens on single ports)"
        ));
    }
    Ok(match host {
        "" | "*" | "0.0.0.0" if !v6 => format!("0.0.0.0:{port}"),
        "" | "::" | "*" => format!("[::]:{port}"),
        h if h.contains(':') => format!("[{}]:{port}", h.trim_matches(|c| c == '[' || c == ']')),
        h => format!("{h}:{port}"),
    })
}

/// The address of a Multipath TCP one (`mptcp@`, `mptcp4@`, `mptcp6@`):
/// weir speaks plain TCP, which every MPTCP peer falls back to.
fn mptcp(a: &str) -> &str {
    ["mptcp@", "mptcp4@", "mptcp6@"]
        .iter()
        .find_map(|p| a.strip_prefix(p))
        .unwrap_or(a)
}

/// A `server` address as a weir upstream, or why not.
fn server_addr(a: &str) -> Result<String, String> {
    let a = mptcp(a);
    if let Some(p) = a.strip_prefix("unix@") {
        return Ok(format!("unix:{p}"));
    }
    if a.starts_with('/') {
        return Ok(format!("unix:{a}"));
    }
    let a = a
        .strip_prefix("ipv4@")
        .or_else(|| a.strip_prefix("ipv6@"))
        .unwrap_or(a);
    match a.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() && !h.is_empty() => {
            if h.contains(':') && !h.starts_with('[') {
                Ok(format!("[{h}]:{p}"))
            } else {
                Ok(a.to_string())
            }
        }
        _ => Err(
            "no port: HAProxy then uses the port the client connected to; weir needs one".into(),
        ),
    }
}

/// Header rules: `set`, `add`, `remove`, as weir applies them (in that order).
#[derive(Debug, Clone, Default, PartialEq)]
struct Ops {
    set: Vec<(String, V)>,
    add: Vec<(String, V)>,
    remove: Vec<String>,
}

impl Ops {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    fn table(&self) -> V {
        let mut t = Vec::new();
        if !self.set.is_empty() {
            t.push(("set".into(), V::T(self.set.clone())));
        }
        if !self.add.is_empty() {
            t.push(("add".into(), V::T(self.add.clone())));
        }
        if !self.remove.is_empty() {
            t.push(("remove".into(), V::strs(self.remove.clone())));
        }
        V::T(t)
    }

    /// `option forwardfor`: one more field with the client's address, after
    /// the rules (a removal of the same field before it becomes a `set`).
    fn forward_for(&mut self, name: &str) {
        let v = V::s("{client_ip}");
        if let Some(i) = self
            .remove
            .iter()
            .position(|r| r.eq_ignore_ascii_case(name))
        {
            self.remove.remove(i);
            self.set.push((name.to_string(), v));
        } else if !self.set.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
            self.add.push((name.to_string(), v));
        }
    }
}

/// A header rule's value: HAProxy's log-format with the samples weir has.
fn header_value(v: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find("%[") {
        out.push_str(&rest[..i].replace('{', "{{"));
        let end = rest[i..].find(']')? + i;
        let sample = &rest[i + 2..end];
        out.push_str(match sample {
            "src" => "{client_ip}",
            "path" => "{path}",
            "query" => "{query}",
            "method" => "{method}",
            "req.hdr(host)" | "hdr(host)" => "{host}",
            _ => return None,
        });
        rest = &rest[end + 1..];
    }
    if rest.contains('%') {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

/// Keys of a table, in order.
type Keys = Vec<(String, V)>;

/// A backend's handler keys and its request and response header rules.
type BackendKeys = (Keys, Ops, Ops);

/// One backend, ready to be written wherever a frontend uses it.
#[derive(Debug, Clone)]
struct Backend {
    at: Origin,
    tcp: bool,
    /// The `proxy` table's keys (or a `[tcp]`'s, for `mode tcp`).
    proxy: Vec<(String, V)>,
    req: Ops,
    resp: Ops,
    /// `option forwardfor`'s field name, when the backend sets it.
    forwardfor: Option<String>,
    has_servers: bool,
    used: bool,
}

/// What a rule answers with.
#[derive(Debug, Clone)]
enum Handler {
    Backend(String),
    Keys(Vec<(String, V)>),
}

/// One route in the making.
#[derive(Debug, Clone)]
struct Route {
    cond: Cond,
    comment: String,
    handler: Handler,
    filters: Vec<(String, V)>,
}

/// A stick table's period, from `store http_req_rate(10s)` and its kin.
#[derive(Debug, Clone, Default)]
struct Stick {
    period: Option<String>,
    size: Option<i64>,
    at: Option<Origin>,
}

struct Cx {
    report: Report,
    server: Table,
    sites: Vec<Table>,
    tcp: Vec<Table>,
    names: Vec<String>,
    /// Global `log` targets as weir access-log keys.
    logs: Vec<Vec<(String, V)>>,
    crt_base: Option<String>,
    /// The directory holding the config file.
    config_dir: Option<String>,
    /// Where relative file names start (`default-path config`: the
    /// config's directory; HAProxy's default is its working directory).
    relative_to: Option<String>,
    /// userlist name → users and hashes weir reads.
    users: HashMap<String, Vec<(String, V)>>,
    backends: HashMap<String, Backend>,
    /// The frontend whose `timeout client` made server.timeouts.
    timeouts_from: Option<String>,
    _opts: Options,
}

fn limits_key(server: &Table, key: &str) -> Vec<(String, V)> {
    match server.get(key) {
        Some(V::T(t)) => t.clone(),
        _ => Vec::new(),
    }
}

/// `[server.TABLE] KEY = v`.
fn server_set(server: &mut Table, table: &str, key: &str, v: V) {
    let mut t = limits_key(server, table);
    if let Some(slot) = t.iter_mut().find(|(k, _)| k == key) {
        slot.1 = v;
    } else {
        t.push((key.to_string(), v));
    }
    server.set(table, V::T(t));
}

impl Cx {
    fn global(&mut self, s: &Section) {
        for l in &s.lines {
            let r = &mut self.report;
            match l.kw() {
                "log" => match log_target(l) {
                    Some(t) => {
                        self.logs.push(t);
                        r.mapped(&l.at, l.text(), "the access_log of proxies with `option httplog` and `log global`");
                    }
                    None => r.none(&l.at, l.text(), "weir logs to a file, stdout or syslog (udp:// or a Unix socket)"),
                },
                "maxconn" => match l.arg(1).parse::<i64>() {
                    Ok(n) => {
                        server_set(&mut self.server, "limits", "connections", V::I(n));
                        r.approx(&l.at, l.text(), "server.limits.connections", "past it weir closes new connections at accept; HAProxy leaves them waiting in the kernel's backlog");
                    }
                    Err(_) => r.none(&l.at, l.text(), "not a number"),
                },
                "nbthread" => match l.arg(1).parse::<i64>() {
                    Ok(n) => {
                        self.server.set("workers", V::I(n));
                        r.mapped(&l.at, l.text(), "server.workers");
                    }
                    Err(_) => r.none(&l.at, l.text(), "not a number"),
                },
                "hard-stop-after" => match time(l.arg(1)) {
                    Some(t) => {
                        self.server.set("grace_period", V::S(t));
                        r.approx(&l.at, l.text(), "server.grace_period", "weir lets requests in flight finish for this long after SIGTERM; HAProxy bounds an old process's life after a reload too, where weir reloads in place");
                    }
                    None => r.none(&l.at, l.text(), "not a time"),
                },
                "user" | "group" | "uid" | "gid" => r.none(&l.at, l.text(), "weir runs as the user that starts it: use the systemd unit's User= (packaging/weir.service runs as weir)"),
                "chroot" => r.none(&l.at, l.text(), "weir does not chroot; the systemd unit confines it (ProtectSystem=, ReadWritePaths=)"),
                "daemon" | "master-worker" | "pidfile" => r.mapped(&l.at, l.text(), "none needed: systemd runs and tracks weir (Type=notify)"),
                "stats" => r.none(&l.at, l.text(), "weir's runtime state is its admin API ([admin], 127.0.0.1:2019) and /metrics"),
                "crt-base" => {
                    self.crt_base = Some(l.arg(1).trim_end_matches('/').to_string());
                    r.mapped(&l.at, l.text(), "the `tls` paths of `crt` files");
                }
                "ca-base" => r.mapped(&l.at, l.text(), "none needed: weir verifies upstreams against the system's roots"),
                k if k.starts_with("ssl-default-bind-ciphers") || k == "ssl-default-bind-ciphersuites" || k == "ssl-default-server-ciphers" || k == "ssl-default-server-ciphersuites" => r.approx(&l.at, l.text(), "weir's TLS", "weir speaks TLS 1.2 and 1.3 with rustls's cipher suites (all AEAD, forward secret), not an OpenSSL list"),
                "ssl-default-bind-options" | "ssl-default-server-options" => {
                    if l.words.iter().any(|w| w == "ssl-min-ver") && l.words.iter().any(|w| w == "TLSv1.2" || w == "TLSv1.3") || l.words.iter().any(|w| w == "no-tlsv11") {
                        r.approx(&l.at, l.text(), "weir's TLS", "weir speaks TLS 1.2 and 1.3 only and never uses session tickets' HAProxy options; the other options have no equivalent");
                    } else {
                        r.approx(&l.at, l.text(), "weir's TLS", "weir speaks TLS 1.2 and 1.3 only");
                    }
                }
                "ssl-dh-param-file" | "tune.ssl.default-dh-param" => r.mapped(&l.at, l.text(), "none needed: rustls uses no finite-field DH"),
                k if k.starts_with("tune.") => r.mapped(&l.at, l.text(), "none needed: weir sizes its buffers itself"),
                "default-path" if l.arg(1) == "config" => {
                    self.relative_to = self.config_dir.clone();
                    r.mapped(&l.at, l.text(), "relative `crt` paths start at the config's directory");
                }
                "default-path" | "zero-warning" | "strict-limits" | "ulimit-n" | "spread-checks" | "nbproc" | "cpu-map" | "expose-experimental-directives" => r.mapped(&l.at, l.text(), "none needed"),
                "lua-load" | "lua-prepend-path" => r.none(&l.at, l.text(), "weir runs no Lua"),
                _ => r.none(&l.at, l.text(), "not known to weir import"),
            }
        }
    }

    fn userlist(&mut self, s: &Section) {
        let mut users = Vec::new();
        for l in &s.lines {
            match (l.kw(), l.arg(2)) {
                ("user", "password") => {
                    let h = l.arg(3);
                    if h.starts_with("$2a$") || h.starts_with("$2b$") || h.starts_with("$2y$") || h.starts_with("$argon2") {
                        users.push((l.arg(1).to_string(), V::s(h)));
                        self.report.mapped(&l.at, format!("user {} password …", l.arg(1)), "basic_auth users");
                    } else {
                        self.report.stricter(&l.at, format!("user {} password …", l.arg(1)), "refused by weir, which reads bcrypt and argon2 hashes only (this is crypt(3)'s MD5, SHA or DES): make one with `weir hash-password`");
                    }
                    if l.words.iter().any(|w| w == "groups") {
                        self.report.none(&l.at, format!("user {} groups", l.arg(1)), "weir has no groups of users: a basic_auth lets in every user of its list");
                    }
                }
                ("user", "insecure-password") => self.report.stricter(&l.at, format!("user {} insecure-password …", l.arg(1)), "weir stores no plain passwords: make a hash with `weir hash-password` and put it in basic_auth users"),
                ("group", _) => self.report.none(&l.at, l.text(), "weir has no groups of users: a basic_auth lets in every user of its list"),
                _ => self.report.none(&l.at, l.text(), "not known to weir import"),
            }
        }
        self.users.insert(s.name.clone(), users);
    }

    fn backend(&mut self, s: &Section, lines: &[Line]) -> Backend {
        let mut b = Backend {
            at: s.at.clone(),
            tcp: lines
                .iter()
                .rev()
                .find(|l| l.kw() == "mode")
                .is_some_and(|l| l.arg(1) == "tcp"),
            proxy: Vec::new(),
            req: Ops::default(),
            resp: Ops::default(),
            forwardfor: None,
            has_servers: false,
            used: false,
        };
        let frontend_only = s.kind == "listen";
        let mut to = Vec::new();
        let mut checks = false;
        let mut check_at: Option<Origin> = None;
        let mut health: Vec<(String, V)> = Vec::new();
        let mut hc_path: Option<String> = None;
        let mut hc_method = "OPTIONS".to_string();
        let mut httpchk = false;
        let mut defaults: Vec<String> = Vec::new();
        let mut max_conns: Option<i64> = None;
        let mut tls_verify: Option<bool> = None;
        let mut sticky_cookie: Option<String> = None;
        let set = |b: &mut Backend, k: &str, v: V| {
            if let Some(slot) = b.proxy.iter_mut().find(|(x, _)| x == k) {
                slot.1 = v;
            } else {
                b.proxy.push((k.to_string(), v));
            }
        };
        for l in lines {
            let r = &mut self.report;
            match l.kw() {
                "mode" => r.mapped(&l.at, l.text(), if l.arg(1) == "tcp" { "[tcp] / passthrough" } else { "proxy" }),
                "default-server" => {
                    defaults = l.words[1..].to_vec();
                    r.mapped(&l.at, l.text(), "the settings of every server");
                }
                "server" => {
                    let mut words: Vec<String> = defaults.clone();
                    words.extend(l.words[3..].iter().cloned());
                    let addr = match server_addr(l.arg(2)) {
                        Ok(a) => a,
                        Err(why) => {
                            r.none(&l.at, l.text(), why);
                            continue;
                        }
                    };
                    let mut weight = 1;
                    let mut ssl = false;
                    let mut h2 = false;
                    let mut skip: Option<&str> = None;
                    let mut notes: Vec<String> = Vec::new();
                    let mut i = 0;
                    while i < words.len() {
                        let w = words[i].as_str();
                        let next = words.get(i + 1).map_or("", String::as_str);
                        match w {
                            "weight" => {
                                weight = next.parse().unwrap_or(1);
                                i += 1;
                            }
                            "check" => {
                                checks = true;
                                check_at.get_or_insert(l.at.clone());
                            }
                            "inter" | "fall" | "rise" => {
                                let key = match w {
                                    "inter" => "interval",
                                    k => k,
                                };
                                let v = if w == "inter" { time(next).map(V::S) } else { next.parse().ok().map(V::I) };
                                if let Some(v) = v
                                    && !health.iter().any(|(k, _)| k == key)
                                {
                                    health.push((key.into(), v));
                                }
                                i += 1;
                            }
                            "backup" => skip = Some("weir has no backup servers: it is left out of `to` (put it in if it should take traffic with the others)"),
                            "disabled" => skip = Some("disabled: left out of `to`, as HAProxy sends it nothing"),
                            "maxconn" => {
                                max_conns = next.parse().ok();
                                i += 1;
                            }
                            "ssl" => ssl = true,
                            "verify" => {
                                tls_verify = Some(next != "none");
                                if next != "none" {
                                    notes.push("weir verifies against the system's roots, not `ca-file`".into());
                                }
                                i += 1;
                            }
                            "ca-file" | "sni" | "crt" => {
                                notes.push(format!("`{w} {next}` has no weir equivalent"));
                                i += 1;
                            }
                            "proto" => {
                                h2 = next == "h2";
                                i += 1;
                            }
                            "send-proxy" => set(&mut b, "send_proxy_protocol", V::s("v1")),
                            "send-proxy-v2" => set(&mut b, "send_proxy_protocol", V::s("v2")),
                            "cookie" => i += 1,
                            "resolvers" | "init-addr" | "resolve-prefer" => {
                                i += 1;
                            }
                            "no-check" => {}
                            "port" | "addr" | "slowstart" | "minconn" | "maxqueue" | "on-error" | "observe" | "error-limit" | "agent-check" | "agent-port" | "agent-inter" | "fastinter" | "downinter" | "pool-max-conn" | "alpn" | "check-sni" => {
                                notes.push(format!("`{w}` has no weir equivalent"));
                                if !matches!(w, "agent-check") {
                                    i += 1;
                                }
                            }
                            "check-ssl" => notes.push("`check-ssl` has no weir equivalent (checks use the upstream's scheme)".into()),
                            other => notes.push(format!("`{other}` is not known to weir import")),
                        }
                        i += 1;
                    }
                    if let Some(why) = skip {
                        if why.starts_with("disabled") {
                            r.mapped(&l.at, l.text(), "left out of `to`");
                        } else {
                            r.none(&l.at, l.text(), why);
                        }
                        continue;
                    }
                    let scheme = match (ssl, h2) {
                        (true, _) => "https://",
                        (false, true) => "h2c://",
                        _ => "",
                    };
                    let addr = if addr.starts_with("unix:") { addr } else { format!("{scheme}{addr}") };
                    if ssl && tls_verify.is_none() {
                        // HAProxy verifies only when asked (`verify required`), unless the global default says so.
                        tls_verify = Some(false);
                    }
                    to.push(if weight == 1 {
                        V::s(addr)
                    } else {
                        V::T(vec![("addr".into(), V::s(addr)), ("weight".into(), V::I(weight))])
                    });
                    b.has_servers = true;
                    if notes.is_empty() {
                        r.mapped(&l.at, l.text(), "proxy `to`");
                    } else {
                        r.approx(&l.at, l.text(), "proxy `to`", notes.join("; "));
                    }
                }
                "balance" => {
                    let (algo, key, how): (&str, Option<String>, Option<&str>) = match l.arg(1) {
                        "roundrobin" | "static-rr" => ("round_robin", None, None),
                        "leastconn" => ("least_conn", None, None),
                        "first" => ("first", None, None),
                        "random" => {
                            if l.arg(1).contains('(') {
                                ("random", None, Some("weir draws one or two servers, not N"))
                            } else {
                                ("p2c", None, None)
                            }
                        }
                        "source" => ("ip_hash", None, Some("weir hashes the client address on its own ring: clients land on other servers than HAProxy's")),
                        "uri" => ("hash", Some("uri".to_string()), Some("weir's hash is consistent with its own ring: keys land on other servers than HAProxy's")),
                        a if a.starts_with("hdr(") => (
                            "hash",
                            Some(format!("header:{}", a.trim_start_matches("hdr(").trim_end_matches(')'))),
                            Some("weir's hash is consistent with its own ring: keys land on other servers than HAProxy's"),
                        ),
                        a if a.starts_with("random(") => ("random", None, Some("weir draws one or two servers, not N")),
                        _ => {
                            r.none(&l.at, l.text(), "weir balances round_robin, least_conn, random, p2c, first, ip_hash or hash (uri, header, cookie)");
                            continue;
                        }
                    };
                    if algo != "round_robin" {
                        set(&mut b, "balance", V::s(algo));
                    }
                    let to_s = match &key {
                        Some(k) => {
                            set(&mut b, "hash_key", V::s(k.clone()));
                            format!("proxy balance = \"{algo}\", hash_key = \"{k}\"")
                        }
                        None => format!("proxy balance = \"{algo}\""),
                    };
                    match how {
                        Some(w) => r.approx(&l.at, l.text(), to_s, w),
                        None => r.mapped(&l.at, l.text(), to_s),
                    }
                }
                "option" => match l.arg(1) {
                    "httpchk" => {
                        httpchk = true;
                        match l.words.len() {
                            2 => {}
                            3 => hc_path = Some(l.arg(2).to_string()),
                            _ => {
                                hc_method = l.arg(2).to_string();
                                hc_path = Some(l.arg(3).to_string());
                            }
                        }
                        // The report names the `option httpchk` line, not a server's.
                        check_at = Some(l.at.clone());
                    }
                    "forwardfor" => {
                        let name = forwardfor(l, r);
                        b.forwardfor = Some(name);
                    }
                    "redispatch" | "abortonclose" | "prefer-last-server" | "http-server-close" | "http-keep-alive" | "splice-auto" | "splice-request" | "splice-response" | "allbackups" | "log-health-checks" | "tcp-check" | "tcpka" | "srvtcpka" | "clitcpka" | "http-pretend-keepalive" | "persist" => {
                        r.mapped(&l.at, l.text(), "none needed: weir's own behaviour")
                    }
                    "httpclose" => r.approx(&l.at, l.text(), "weir keeps connections alive", "weir keeps client and upstream connections alive"),
                    "httplog" | "tcplog" | "dontlognull" | "http-ignore-probes" | "socket-stats" | "dontlog-normal" | "log-separate-errors" | "http-buffer-request" | "http-use-htx" => {}
                    _ => r.none(&l.at, l.text(), "not known to weir import"),
                },
                "http-check" => match (l.arg(1), l.arg(2)) {
                    ("expect", "status") => match l.arg(3).parse::<i64>() {
                        Ok(n) => {
                            health.push(("status".into(), V::I(n)));
                            r.mapped(&l.at, l.text(), "proxy health status");
                        }
                        Err(_) => r.none(&l.at, l.text(), "weir's check expects one status"),
                    },
                    ("expect", "string") => {
                        health.push(("body".into(), V::s(l.arg(3))));
                        r.mapped(&l.at, l.text(), "proxy health body");
                    }
                    ("send", _) => {
                        let mut i = 2;
                        let mut extra = false;
                        while i < l.words.len() {
                            match l.arg(i) {
                                "meth" => hc_method = l.arg(i + 1).to_string(),
                                "uri" => hc_path = Some(l.arg(i + 1).to_string()),
                                "ver" => {}
                                _ => extra = true,
                            }
                            i += 2;
                        }
                        if extra {
                            r.approx(&l.at, l.text(), "proxy health path", "weir's check sends no extra fields (hdr) and uses the upstream's Host");
                        } else {
                            r.mapped(&l.at, l.text(), "proxy health path");
                        }
                    }
                    _ => r.none(&l.at, l.text(), "weir's check expects a status or a text in the body"),
                },
                "timeout" => {
                    let key = match l.arg(1) {
                        "connect" => Some("connect_timeout"),
                        "server" if !b.tcp => Some("response_timeout"),
                        "server" => Some("idle_timeout"),
                        "queue" => Some("queue_timeout"),
                        "check" => None,
                        "client" | "http-request" | "http-keep-alive" | "client-fin" => continue,
                        "tunnel" => {
                            r.none(&l.at, l.text(), "weir has no separate idle timeout for WebSocket tunnels");
                            continue;
                        }
                        _ => {
                            r.none(&l.at, l.text(), "not known to weir import");
                            continue;
                        }
                    };
                    let Some(t) = time(l.arg(2)) else {
                        r.none(&l.at, l.text(), "not a time");
                        continue;
                    };
                    match key {
                        Some("response_timeout") => {
                            set(&mut b, "response_timeout", V::S(t));
                            r.approx(&l.at, l.text(), "proxy response_timeout", "weir waits this long for the response head; HAProxy's bounds every wait for the server (the body too)");
                        }
                        Some("idle_timeout") => {
                            set(&mut b, "idle_timeout", V::S(t));
                            r.mapped(&l.at, l.text(), "idle_timeout");
                        }
                        Some(k) => {
                            set(&mut b, k, V::S(t));
                            r.mapped(&l.at, l.text(), format!("proxy {k}"));
                        }
                        None => {
                            health.push(("timeout".into(), V::S(t)));
                            r.mapped(&l.at, l.text(), "proxy health timeout");
                        }
                    }
                }
                "cookie" => {
                    sticky_cookie = Some(l.arg(1).to_string());
                    r.approx(&l.at, l.text(), "proxy sticky_cookie", "weir sets its own value in the cookie (not the servers' `cookie` names) and its own attributes");
                }
                "stick-table" | "stick" => r.approx(&l.at, l.text(), "proxy balance = \"ip_hash\"", "weir keeps a client on one server by hashing its address (while that server is up), not by remembering its first server"),
                "http-request" | "http-response" if frontend_only => {}
                "http-request" => {
                    if let Err(why) = header_rule(l, &mut b.req) {
                        r.none(&l.at, l.text(), why);
                    } else {
                        r.mapped(&l.at, l.text(), "request_headers of the routes using it");
                    }
                }
                "http-response" => {
                    if let Err(why) = header_rule(l, &mut b.resp) {
                        r.none(&l.at, l.text(), why);
                    } else {
                        r.approx(&l.at, l.text(), "response_headers of the routes using it", "weir changes the answers it makes itself (502, 503, 504) too; HAProxy only the server's");
                    }
                }
                "retries" => match l.arg(1).parse::<i64>() {
                    Ok(n) => {
                        set(&mut b, "retries", V::I(n));
                        r.approx(&l.at, l.text(), "proxy retries", "weir tries other servers, HAProxy the same one");
                    }
                    Err(_) => r.none(&l.at, l.text(), "not a number"),
                },
                "http-reuse" | "hash-type" | "fullconn" | "log" | "maxconn" | "errorfile" | "compression" | "default_backend" | "acl" | "use_backend" | "bind" | "tcp-request" | "capture" | "monitor-uri" | "stats" | "redirect" | "http-after-response" | "unique-id-format" | "unique-id-header" => {
                    // Frontend keywords in a `listen`/defaults: the frontend reads them.
                    if !frontend_only && !matches!(l.kw(), "log" | "maxconn" | "errorfile" | "compression" | "default_backend") {
                        r.mapped(&l.at, l.text(), "none needed");
                    }
                }
                "no" => {}
                _ => r.none(&l.at, l.text(), "not known to weir import"),
            }
        }
        if lines
            .iter()
            .any(|l| l.kw() == "stick-table" || l.kw() == "stick")
            && !lines.iter().any(|l| l.kw() == "balance")
        {
            set(&mut b, "balance", V::s("ip_hash"));
        }
        if !to.is_empty() {
            b.proxy.insert(
                0,
                (
                    "to".into(),
                    // One plain address is written alone; a table (a weight) stays in a list.
                    if to.len() == 1 && matches!(to[0], V::S(_)) {
                        to.remove(0)
                    } else {
                        V::A(to)
                    },
                ),
            );
        }
        if let Some(n) = max_conns {
            set(&mut b, "max_conns", V::I(n));
            set(&mut b, "queue", V::I(1024));
            if let Some(at) = lines
                .iter()
                .find(|l| l.kw() == "server" && l.words.iter().any(|w| w == "maxconn"))
                .map(|l| l.at.clone())
            {
                self.report.approx(&at, "server … maxconn", "proxy max_conns, queue = 1024", "weir's maxconn is one per backend (the last server's) and queues at most 1024 requests; HAProxy's is per server with an unbounded queue");
            }
        }
        if let Some(v) = tls_verify {
            set(&mut b, "tls_verify", V::B(v));
        }
        if let Some(c) = sticky_cookie {
            set(&mut b, "sticky_cookie", V::s(c));
        }
        if checks {
            let mut h = Vec::new();
            // weir's check has no body to search in an answer to HEAD, and
            // never tunnels: those keep GET.
            let expects_body = health.iter().any(|(k, _)| k == "body");
            let method_lost = hc_method.eq_ignore_ascii_case("CONNECT")
                || (hc_method.eq_ignore_ascii_case("HEAD") && expects_body);
            let method_kept = !b.tcp && httpchk && !method_lost;
            if b.tcp || !httpchk {
                h.push(("tcp".to_string(), V::B(true)));
            } else {
                h.push((
                    "path".to_string(),
                    V::s(hc_path.clone().unwrap_or_else(|| "/".into())),
                ));
                if method_kept && hc_method != "GET" {
                    h.push(("method".to_string(), V::s(hc_method.clone())));
                }
            }
            h.extend(
                health
                    .iter()
                    .filter(|(k, _)| {
                        (!b.tcp && httpchk) || !matches!(k.as_str(), "status" | "body")
                    })
                    .cloned(),
            );
            set(&mut b, "health", V::T(h));
            if let Some(at) = &check_at {
                if httpchk && !method_kept {
                    self.report.approx(
                        at,
                        "option httpchk",
                        "proxy health",
                        format!("weir checks with GET; HAProxy sends {hc_method}"),
                    );
                } else {
                    self.report.mapped(
                        at,
                        if httpchk {
                            "option httpchk"
                        } else {
                            "server … check"
                        },
                        "proxy health",
                    );
                }
            }
        } else if httpchk && let Some(at) = &check_at {
            self.report
                .mapped(at, "option httpchk", "nothing: no server has `check`");
        }
        if !b.tcp {
            // HAProxy sends none of these; option forwardfor adds X-Forwarded-For itself.
            set(&mut b, "x_forwarded", V::B(false));
            set(&mut b, "forwarded", V::B(false));
            set(&mut b, "via", V::B(false));
        }
        b
    }

    fn frontend(&mut self, s: &Section, lines: &[Line]) {
        let tcp = lines
            .iter()
            .rev()
            .find(|l| l.kw() == "mode")
            .is_some_and(|l| l.arg(1) == "tcp");
        if tcp {
            self.tcp_frontend(s, lines);
            return;
        }
        let r = &mut self.report;
        let mut acls: HashMap<String, Vec<Acl>> = HashMap::new();
        // (TLS crt or None, listen addresses, bind lines)
        let mut groups: Vec<(Option<String>, Vec<String>, Origin)> = Vec::new();
        let mut site_keys: Vec<(String, V)> = Vec::new();
        let mut req = Ops::default();
        let mut resp = Ops::default();
        let mut ff: Option<String> = None;
        let mut default_backend: Option<(String, Origin)> = None;
        let mut terminal: Vec<Route> = Vec::new();
        let mut cond_filters: Vec<Route> = Vec::new();
        let mut uses: Vec<Route> = Vec::new();
        let mut redirects: Vec<Route> = Vec::new();
        let mut limits: Vec<V> = Vec::new();
        let mut allow: Vec<String> = Vec::new();
        let mut deny: Vec<String> = Vec::new();
        let mut httplog = false;
        let mut log_global = false;
        let mut stick = Stick::default();
        let mut track: Option<V> = None;
        let mut client_timeout: Option<(String, Origin)> = None;
        for l in lines {
            let cond_at = l.words.iter().position(|w| w == "if" || w == "unless");
            let (body, cond_words) = match cond_at {
                Some(i) => (&l.words[..i], &l.words[i..]),
                None => (&l.words[..], &l.words[l.words.len()..]),
            };
            let conds = || cond::condition(cond_words, &acls);
            let comment = format!("{}:{} {}", l.at.file, l.at.line, l.text());
            match l.kw() {
                "mode" => r.mapped(&l.at, l.text(), "a site"),
                "bind" => {
                    let mut addrs = Vec::new();
                    let mut ok = true;
                    for a in l.arg(1).split(',') {
                        match bind_addr(a) {
                            Ok(x) => addrs.push(x),
                            Err(why) => {
                                r.none(&l.at, l.text(), why);
                                ok = false;
                            }
                        }
                    }
                    if !ok {
                        continue;
                    }
                    let mut crt: Option<String> = None;
                    let mut notes = Vec::new();
                    let mut i = 2;
                    while i < l.words.len() {
                        let w = l.arg(i);
                        let next = l.arg(i + 1);
                        match w {
                            "ssl" => {}
                            "crt" => {
                                let p = match (&self.crt_base, next.starts_with('/')) {
                                    (Some(b), false) => format!("{b}/{next}"),
                                    _ => next.to_string(),
                                };
                                crt = Some(match &self.relative_to {
                                    Some(d) if !p.starts_with('/') => format!("{d}/{p}"),
                                    _ => p,
                                });
                                i += 1;
                            }
                            "alpn" => {
                                if !next.split(',').any(|p| p == "h2") {
                                    notes.push(format!("weir offers h2 and http/1.1 over TLS; `alpn {next}` offers fewer"));
                                }
                                i += 1;
                            }
                            "name" | "process" | "thread" | "maxconn" | "backlog" | "id" | "nice" | "level" | "mode" | "user" | "group" | "tcp-ut" | "interface" | "ssl-min-ver" | "ssl-max-ver" | "ciphers" | "ciphersuites" | "curves" => {
                                if matches!(w, "ciphers" | "ciphersuites" | "curves" | "ssl-max-ver") {
                                    notes.push(format!("`{w}`: weir uses rustls's own TLS settings"));
                                }
                                i += 1;
                            }
                            "v4v6" | "v6only" | "transparent" | "defer-accept" | "tfo" | "allow-0rtt" | "strict-sni" | "prefer-client-ciphers" | "no-sslv3" | "no-tlsv10" | "no-tlsv11" | "no-tls-tickets" | "npn" => {
                                if matches!(w, "allow-0rtt" | "transparent") {
                                    notes.push(format!("`{w}` has no weir equivalent here"));
                                }
                            }
                            "accept-proxy" => {
                                site_keys.push(("proxy_protocol".into(), V::B(true)));
                                site_keys.push(("trusted_sources".into(), V::strs(["0.0.0.0/0", "::/0"])));
                            }
                            other => notes.push(format!("`{other}` is not known to weir import")),
                        }
                        i += 1;
                    }
                    if let Some(c) = &crt
                        && (c.ends_with('/') || !c.contains('.'))
                    {
                        notes.push("a directory of certificates: weir takes one certificate per site (add a site per name)".into());
                    }
                    let key = crt.clone();
                    match groups.iter_mut().find(|g| g.0 == key) {
                        Some(g) => g.1.extend(addrs),
                        None => groups.push((key, addrs, l.at.clone())),
                    }
                    if notes.is_empty() {
                        r.mapped(&l.at, l.text(), if crt.is_some() { "listen, tls = { cert, key } (the PEM holds both)" } else { "listen" });
                    } else {
                        r.approx(&l.at, l.text(), "listen", notes.join("; "));
                    }
                }
                "acl" => {
                    acls.entry(l.arg(1).to_string()).or_default().push(cond::acl(&l.words[2..]));
                    r.mapped(&l.at, l.text(), "the routes whose rules use it");
                }
                "default_backend" => {
                    default_backend = Some((l.arg(1).to_string(), l.at.clone()));
                }
                "use_backend" => match conds() {
                    Ok(cs) => {
                        let mut approx = Vec::new();
                        let mut ok = true;
                        for c in cs {
                            if !c.routable() {
                                ok = false;
                                continue;
                            }
                            approx.extend(c.approx.iter().cloned());
                            uses.push(Route {
                                cond: c,
                                comment: comment.clone(),
                                handler: Handler::Backend(l.arg(1).to_string()),
                                filters: Vec::new(),
                            });
                        }
                        if !ok {
                            r.none(&l.at, l.text(), "weir's routes match paths, hosts, methods, clients, protocols and headers only");
                        } else if approx.is_empty() {
                            r.mapped(&l.at, l.text(), "a route");
                        } else {
                            approx.dedup();
                            r.approx(&l.at, l.text(), "a route", approx.join("; "));
                        }
                    }
                    Err(why) => r.none(&l.at, l.text(), why),
                },
                "redirect" | "http-request" if l.kw() == "redirect" || l.arg(1) == "redirect" => {
                    let off = if l.kw() == "redirect" { 1 } else { 2 };
                    let Some((to, status, note)) = redirect(&body[off..]) else {
                        r.none(&l.at, l.text(), "weir redirects to a location, a prefix or a scheme, without cookie options");
                        continue;
                    };
                    let target = if l.kw() == "redirect" { &mut redirects } else { &mut terminal };
                    match conds() {
                        Ok(cs) if cs.iter().all(Cond::routable) => {
                            let approx: Vec<String> = cs.iter().flat_map(|c| c.approx.clone()).chain(note.clone()).collect();
                            for c in cs {
                                target.push(Route {
                                    cond: c,
                                    comment: comment.clone(),
                                    handler: Handler::Keys(vec![("redirect".into(), V::T(vec![("to".into(), V::s(to.clone())), ("status".into(), V::I(status))]))]),
                                    filters: Vec::new(),
                                });
                            }
                            // A Host compared without its port matches more requests, and
                            // the Location's port is the answer's wording: the redirect
                            // still happens wherever HAProxy's does.
                            let widens = approx.iter().all(|a| a.contains("without its port") || a.contains("drops a port"));
                            if approx.is_empty() {
                                r.mapped(&l.at, l.text(), "a route's redirect");
                            } else if widens {
                                r.approx_closed(&l.at, l.text(), "a route's redirect", approx.join("; "));
                            } else {
                                r.approx(&l.at, l.text(), "a route's redirect", approx.join("; "));
                            }
                        }
                        Ok(_) => r.none(&l.at, l.text(), "weir's routes match paths, hosts, methods, clients, protocols and headers only"),
                        Err(why) => r.none(&l.at, l.text(), why),
                    }
                }
                "http-request" => match l.arg(1) {
                    "deny" | "reject" | "tarpit" => {
                        let status: i64 = body
                            .iter()
                            .position(|w| w == "deny_status")
                            .and_then(|i| body.get(i + 1))
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(403);
                        let mut note: Vec<String> = Vec::new();
                        if l.arg(1) == "tarpit" {
                            note.push("weir answers at once; HAProxy's tarpit holds the client for `timeout tarpit` first".into());
                        }
                        if l.arg(1) == "reject" {
                            note.push("weir answers 403; HAProxy's reject closes the connection without an answer".into());
                        }
                        let cs = match conds() {
                            Ok(c) => c,
                            Err(why) => {
                                r.none(&l.at, l.text(), why);
                                continue;
                            }
                        };
                        if let [c] = cs.as_slice() {
                            if let Some((kind, n)) = &c.rate {
                                let mut lim: Vec<(String, V)> = Vec::new();
                                lim.push(("key".into(), track.clone().unwrap_or_else(|| V::s("client"))));
                                if kind == "connections" {
                                    lim.push(("connections".into(), V::I(*n as i64)));
                                    note.push("weir counts requests in progress, HAProxy connections".into());
                                } else {
                                    let period = stick.period.clone().unwrap_or_else(|| "10s".into());
                                    lim.push(("window".into(), V::S(period)));
                                    lim.push((kind.clone(), V::I(*n as i64)));
                                    note.push("weir's window slides; HAProxy's rate is estimated over its period".into());
                                }
                                lim.push(("status".into(), V::I(status)));
                                if let Some(sz) = stick.size {
                                    lim.push(("size".into(), V::I(sz)));
                                }
                                note.push("weir adds `Retry-After` to the refusal".into());
                                limits.push(V::T(lim));
                                r.approx(&l.at, l.text(), "limit", note.join("; "));
                                continue;
                            }
                            if status == 403 && note.is_empty() {
                                if let Some(cl) = c.clients.as_ref().filter(|_| Cond { clients: None, ..c.clone() }.is_empty()) {
                                    deny.extend(cl.iter().cloned());
                                    r.mapped(&l.at, l.text(), "deny");
                                    continue;
                                }
                                if let Some(cl) = c.not_clients.as_ref().filter(|_| Cond { not_clients: None, ..c.clone() }.is_empty()) {
                                    allow.extend(cl.iter().cloned());
                                    r.mapped(&l.at, l.text(), "allow");
                                    continue;
                                }
                            }
                        }
                        if !cs.iter().all(Cond::routable) {
                            r.none(&l.at, l.text(), "weir's routes match paths, hosts, methods, clients, protocols and headers only");
                            continue;
                        }
                        let approx: Vec<String> = cs.iter().flat_map(|c| c.approx.clone()).chain(note).collect();
                        for c in cs {
                            let c = if c.is_empty() { Cond { path: Some(("path", "/".into())), ..c } } else { c };
                            terminal.push(Route {
                                cond: c,
                                comment: comment.clone(),
                                handler: Handler::Keys(vec![("respond".into(), V::I(status))]),
                                filters: Vec::new(),
                            });
                        }
                        if approx.is_empty() {
                            r.mapped(&l.at, l.text(), "a route's respond");
                        } else {
                            r.approx(&l.at, l.text(), "a route's respond", approx.join("; "));
                        }
                    }
                    "return" => {
                        let mut status = 200;
                        let mut ct: Option<String> = None;
                        let mut text: Option<String> = None;
                        let mut bad = false;
                        let mut i = 2;
                        while i < body.len() {
                            match body[i].as_str() {
                                "status" => status = body.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(200),
                                "content-type" => ct = body.get(i + 1).cloned(),
                                "string" => text = body.get(i + 1).cloned(),
                                _ => bad = true,
                            }
                            i += 2;
                        }
                        match conds() {
                            Ok(cs) if !bad && cs.iter().all(Cond::routable) => {
                                let mut resp_v = vec![("status".to_string(), V::I(status))];
                                if let Some(t) = text {
                                    resp_v.push(("body".into(), V::S(t)));
                                }
                                if let Some(c) = ct {
                                    resp_v.push(("content_type".into(), V::S(c)));
                                }
                                for c in cs {
                                    let c = if c.is_empty() { Cond { path: Some(("path", "/".into())), ..c } } else { c };
                                    terminal.push(Route {
                                        cond: c,
                                        comment: comment.clone(),
                                        handler: Handler::Keys(vec![("respond".into(), V::T(resp_v.clone()))]),
                                        filters: Vec::new(),
                                    });
                                }
                                r.mapped(&l.at, l.text(), "a route's respond");
                            }
                            Ok(_) => r.none(&l.at, l.text(), "weir answers a status, a string and a content type (no files, log-format or headers), on routes matching paths, hosts, methods, clients, protocols and headers"),
                            Err(why) => r.none(&l.at, l.text(), why),
                        }
                    }
                    "auth" => {
                        let realm = body.iter().position(|w| w == "realm").and_then(|i| body.get(i + 1)).cloned();
                        let cs = match conds() {
                            Ok(c) => c,
                            Err(why) => {
                                r.none(&l.at, l.text(), why);
                                continue;
                            }
                        };
                        let list = cs.iter().find_map(|c| c.no_auth.clone());
                        let Some(list) = list.filter(|_| cs.len() == 1) else {
                            r.none(&l.at, l.text(), "weir asks for credentials when a route's `basic_auth` is not met: write `http-request auth if !{ http_auth(LIST) }` (with a path or host ACL if you like)");
                            continue;
                        };
                        let users = self.users.get(&list).cloned().unwrap_or_default();
                        let mut ba = Vec::new();
                        if let Some(rl) = realm {
                            ba.push(("realm".to_string(), V::S(rl)));
                        }
                        ba.push(("users".to_string(), V::T(users.clone())));
                        if users.is_empty() {
                            // weir needs a user: one whose hash matches no password refuses everyone.
                            ba.retain(|(k, _)| k != "users");
                            ba.push(("users".to_string(), V::T(vec![(
                                "nobody".to_string(),
                                V::s(crate::htpasswd::REFUSE_ALL_HASH),
                            )])));
                            r.approx_closed(&l.at, l.text(), "basic_auth", format!("userlist {list} has no user weir can read: everyone is refused"));
                        }
                        let rest = Cond { no_auth: None, ..cs[0].clone() };
                        let charset = "weir's challenge says `Basic realm=\"…\", charset=\"UTF-8\"` (RFC 7617); HAProxy's has no charset";
                        if rest.is_empty() {
                            site_keys.push(("basic_auth".into(), V::T(ba)));
                            r.approx_closed(&l.at, l.text(), "basic_auth", charset);
                        } else if rest.routable() {
                            cond_filters.push(Route {
                                cond: rest,
                                comment: comment.clone(),
                                handler: Handler::Keys(Vec::new()),
                                filters: vec![("basic_auth".into(), V::T(ba))],
                            });
                            r.approx_closed(&l.at, l.text(), "routes with basic_auth", charset);
                        } else {
                            r.none(&l.at, l.text(), "weir's routes match paths, hosts, methods, clients, protocols and headers only");
                        }
                    }
                    "set-header" | "add-header" | "del-header" => {
                        if cond_words.is_empty() {
                            match header_rule(l, &mut req) {
                                Ok(()) => r.mapped(&l.at, l.text(), "request_headers"),
                                Err(why) => r.none(&l.at, l.text(), why),
                            }
                            continue;
                        }
                        let mut ops = Ops::default();
                        let fake = Line { words: body.to_vec(), ..l.clone() };
                        if let Err(why) = header_rule(&fake, &mut ops) {
                            r.none(&l.at, l.text(), why);
                            continue;
                        }
                        match conds() {
                            Ok(cs) if cs.iter().all(Cond::routable) => {
                                for c in cs {
                                    cond_filters.push(Route {
                                        cond: c,
                                        comment: comment.clone(),
                                        handler: Handler::Keys(Vec::new()),
                                        filters: vec![("request_headers".into(), ops.table())],
                                    });
                                }
                                r.mapped(&l.at, l.text(), "routes with request_headers");
                            }
                            Ok(_) => r.none(&l.at, l.text(), "weir's routes match paths, hosts, methods, clients, protocols and headers only"),
                            Err(why) => r.none(&l.at, l.text(), why),
                        }
                    }
                    a if a.starts_with("track-sc") => {
                        let key = match l.arg(2) {
                            "src" => Some(V::s("client")),
                            "path" => Some(V::s("path")),
                            "hdr(host)" | "req.hdr(host)" => Some(V::s("site")),
                            k if k.starts_with("req.hdr(") || k.starts_with("hdr(") => Some(V::S(format!("header:{}", &k[k.find('(').unwrap() + 1..k.len() - 1]))),
                            k if k.starts_with("req.cook(") => Some(V::S(format!("cookie:{}", &k["req.cook(".len()..k.len() - 1]))),
                            _ => None,
                        };
                        match key {
                            Some(k) if cond_words.is_empty() => {
                                track = Some(k);
                                r.mapped(&l.at, l.text(), "the key of the limit that reads it");
                            }
                            _ => r.none(&l.at, l.text(), "weir counts limits per client address, header, cookie, path or site, for every request"),
                        }
                    }
                    "cache-use" => r.none(&l.at, l.text(), "weir's cache is `cache = true` on the site or route (RFC 9111, docs/cache.md)"),
                    _ => r.none(&l.at, l.text(), "not known to weir import"),
                },
                "tcp-request" if l.arg(1) == "connection" && l.arg(2).starts_with("track-sc") && l.arg(3) == "src" => {
                    track = Some(V::s("client"));
                    r.mapped(&l.at, l.text(), "the key of the limit that reads it");
                }
                "http-response" | "http-after-response" => {
                    if !cond_words.is_empty() {
                        r.none(&l.at, l.text(), "weir changes response fields for every answer of a site or route");
                        continue;
                    }
                    match header_rule(l, &mut resp) {
                        Ok(()) if l.kw() == "http-after-response" => r.mapped(&l.at, l.text(), "response_headers"),
                        Ok(()) => r.approx(&l.at, l.text(), "response_headers", "weir changes the answers it makes itself (redirects, refusals, 502-504) too; HAProxy's http-response only the server's"),
                        Err(why) => r.none(&l.at, l.text(), why),
                    }
                }
                "option" => match l.arg(1) {
                    "forwardfor" => ff = Some(forwardfor(l, r)),
                    "httplog" => {
                        httplog = true;
                    }
                    "dontlognull" => r.mapped(&l.at, l.text(), "none needed: weir logs requests, not empty connections"),
                    "http-ignore-probes" => r.mapped(&l.at, l.text(), "none needed: weir closes connections that send nothing without an answer"),
                    "http-server-close" | "http-keep-alive" | "splice-auto" | "socket-stats" | "redispatch" | "abortonclose" | "prefer-last-server" | "http-buffer-request" | "clitcpka" | "tcpka" | "log-health-checks" | "contstats" => {
                        r.mapped(&l.at, l.text(), "none needed: weir's own behaviour")
                    }
                    "httpclose" => r.approx(&l.at, l.text(), "weir keeps connections alive", "weir keeps client and upstream connections alive"),
                    "httpchk" | "tcplog" | "allbackups" | "tcp-check" | "srvtcpka" | "persist" | "splice-request" | "splice-response" | "http-pretend-keepalive" => {}
                    _ => r.none(&l.at, l.text(), "not known to weir import"),
                },
                "log" => {
                    if l.arg(1) == "global" {
                        log_global = true;
                    } else {
                        match log_target(l) {
                            Some(t) => {
                                self.logs.push(t);
                                log_global = true;
                                r.mapped(&l.at, l.text(), "access_log with option httplog");
                            }
                            None => r.none(&l.at, l.text(), "weir logs to a file, stdout or syslog (udp:// or a Unix socket)"),
                        }
                    }
                }
                "timeout" => {
                    let Some(t) = time(l.arg(2)) else {
                        if !matches!(l.arg(1), "connect" | "server" | "queue" | "check" | "tunnel") {
                            r.none(&l.at, l.text(), "not a time");
                        }
                        continue;
                    };
                    match l.arg(1) {
                        "client" => client_timeout = Some((t, l.at.clone())),
                        "http-request" => {
                            server_set(&mut self.server, "timeouts", "header", V::S(t));
                            r.mapped(&l.at, l.text(), "server.timeouts.header");
                        }
                        "http-keep-alive" => {
                            server_set(&mut self.server, "timeouts", "keepalive", V::S(t));
                            r.mapped(&l.at, l.text(), "server.timeouts.keepalive");
                        }
                        "connect" | "server" | "queue" | "check" | "tunnel" => {}
                        _ => r.none(&l.at, l.text(), "not known to weir import"),
                    }
                }
                "stick-table" => {
                    let mut i = 1;
                    while i < l.words.len() {
                        match l.arg(i) {
                            "size" => {
                                let v = l.arg(i + 1);
                                let (n, m) = match v.chars().last() {
                                    Some('k') => (&v[..v.len() - 1], 1000),
                                    Some('m') => (&v[..v.len() - 1], 1_000_000),
                                    _ => (v, 1),
                                };
                                stick.size = n.parse::<i64>().ok().map(|n| n * m);
                            }
                            "store" => {
                                let v = l.arg(i + 1);
                                for st in v.split(',') {
                                    if let Some(p) = st.split_once('(').map(|(_, p)| p.trim_end_matches(')')) {
                                        stick.period = time(p);
                                    }
                                }
                            }
                            _ => {}
                        }
                        i += 2;
                    }
                    stick.at = Some(l.at.clone());
                    r.mapped(&l.at, l.text(), "the window and size of the limit that reads it");
                }
                "maxconn" => r.approx(&l.at, l.text(), "server.limits.connections (for the process)", "weir limits client connections for the whole process, not per frontend"),
                "compression" => match l.arg(1) {
                    "algo" => {
                        let enc: Vec<String> = l.words[2..].iter().filter(|a| *a == "gzip").cloned().collect();
                        if enc.is_empty() {
                            r.none(&l.at, l.text(), "weir compresses with br, zstd and gzip");
                        } else {
                            site_keys.retain(|(k, _)| k != "compress");
                            site_keys.push(("compress".into(), V::T(vec![("encodings".into(), V::strs(enc))])));
                            r.approx(&l.at, l.text(), "compress", "weir compresses answers of 1KiB and more only (`min_size`) and adds `Vary: Accept-Encoding`; deflate is not offered");
                        }
                    }
                    "type" => {
                        let types = V::strs(l.words[2..].iter().map(|t| if t.ends_with('/') { format!("{t}*") } else { t.clone() }));
                        if let Some((_, V::T(t))) = site_keys.iter_mut().find(|(k, _)| k == "compress") {
                            t.push(("types".into(), types));
                        }
                        r.mapped(&l.at, l.text(), "compress types");
                    }
                    _ => r.none(&l.at, l.text(), "not known to weir import"),
                },
                "monitor-uri" => {
                    terminal.push(Route {
                        cond: Cond { path: Some(("path_regex", format!("^{}$", cond::re_escape(l.arg(1))))), ..Cond::default() },
                        comment: comment.clone(),
                        handler: Handler::Keys(vec![("respond".into(), V::I(200))]),
                        filters: Vec::new(),
                    });
                    r.approx(&l.at, l.text(), "a route's respond = 200", "weir's 200 has its own short body");
                }
                "stats" => r.none(&l.at, l.text(), "weir's runtime state is its admin API ([admin], 127.0.0.1:2019) and /metrics, not an HTML page"),
                "errorfile" => r.none(&l.at, l.text(), "the file is a whole HTTP answer; weir's `errors` takes a page (the body) per status: make one from it"),
                "capture" | "unique-id-format" | "unique-id-header" | "declare" => r.none(&l.at, l.text(), "weir logs with its own fields (see access_log formats; `request_id = true` for an ID)"),
                "tcp-request" => r.none(&l.at, l.text(), "not known to weir import"),
                "balance" | "retries" | "default-server" | "http-check" | "cookie" | "server" | "hash-type" | "http-reuse" | "fullconn" | "no" | "stick" => {}
                _ => r.none(&l.at, l.text(), "not known to weir import"),
            }
        }
        if s.kind == "listen" && default_backend.is_none() {
            default_backend = Some((s.name.clone(), s.at.clone()));
        }
        // Process-wide timeouts from the first frontend's `timeout client`.
        if let Some((t, at)) = client_timeout {
            match &self.timeouts_from {
                None => {
                    self.timeouts_from = Some(s.name.clone());
                    let ts = limits_key(&self.server, "timeouts");
                    for k in ["header", "body", "write", "keepalive"] {
                        if !ts.iter().any(|(x, _)| x == k) {
                            server_set(&mut self.server, "timeouts", k, V::S(t.clone()));
                        }
                    }
                    self.report.approx(&at, "timeout client", "server.timeouts (header, body, write, keepalive)", "weir has a timeout per phase (request head, body, each write, idle keep-alive), each set to it; HAProxy's bounds any wait for the client");
                }
                Some(f) if *f != s.name => {
                    self.report.approx(
                        &at,
                        format!("timeout client (frontend {})", s.name),
                        "server.timeouts",
                        format!("weir's are for the whole process: frontend {f}'s are used"),
                    );
                }
                _ => {}
            }
        }
        let r = &mut self.report;
        if httplog && log_global {
            if let Some(t) = self.logs.first() {
                site_keys.push(("access_log".into(), V::T(t.clone())));
                for l in lines
                    .iter()
                    .filter(|l| l.kw() == "option" && l.arg(1) == "httplog")
                {
                    r.approx(&l.at, l.text(), "access_log", "weir writes the combined format (HAProxy's httplog has timers, termination state and queue counts)");
                }
            }
        } else if httplog {
            for l in lines
                .iter()
                .filter(|l| l.kw() == "option" && l.arg(1) == "httplog")
            {
                r.mapped(&l.at, l.text(), "nothing: no `log` target");
            }
        }
        for l in lines
            .iter()
            .filter(|l| l.kw() == "log" && l.arg(1) == "global")
        {
            r.mapped(&l.at, l.text(), "access_log's target");
        }
        if !limits.is_empty() {
            site_keys.push(("limit".into(), V::A(limits)));
        }
        if !allow.is_empty() {
            site_keys.push(("allow".into(), V::strs(allow)));
        }
        if !deny.is_empty() {
            site_keys.push(("deny".into(), V::strs(deny)));
        }
        // The backends' own header rules go where only their requests pass.
        let front_ff = ff.clone();
        // `what`: the directive that names the backend, as the report shows it.
        let backend_keys =
            |this: &mut Cx, name: &str, at: &Origin, what: &str| -> Option<BackendKeys> {
                let Some(b) = this.backends.get_mut(name) else {
                    this.report.none(at, what, missing_backend(name));
                    return None;
                };
                b.used = true;
                if b.tcp {
                    this.report.none(
                        &b.at,
                        format!("backend {name} (mode tcp)"),
                        "an HTTP frontend cannot use a TCP backend",
                    );
                    return None;
                }
                if !b.has_servers {
                    return Some((
                        vec![("respond".into(), V::I(503))],
                        Ops::default(),
                        Ops::default(),
                    ));
                }
                let mut req = b.req.clone();
                if front_ff.is_none()
                    && let Some(n) = &b.forwardfor
                {
                    req.forward_for(n);
                }
                Some((
                    vec![("proxy".into(), V::T(b.proxy.clone()))],
                    req,
                    b.resp.clone(),
                ))
            };
        let default = match &default_backend {
            Some((d, at)) => {
                // A `listen` section is its own default backend.
                let what = if *at == s.at {
                    format!("{} {d}", s.kind)
                } else {
                    format!("default_backend {d}")
                };
                let k = backend_keys(self, d, at, &what);
                if k.is_some() {
                    self.report.mapped(at, what, "the site's proxy");
                }
                k
            }
            None => None,
        };
        let r = &mut self.report;
        if let Some(n) = &ff {
            req.forward_for(n);
        }
        // Routes in HAProxy's order: http-request answers, conditional
        // filters (with the handler each request would reach), redirects,
        // use_backend rules.
        let mut routes: Vec<Route> = terminal;
        let mut filter_routes = Vec::new();
        for f in &cond_filters {
            for u in &uses {
                if f.cond.disjoint(&u.cond) {
                    continue;
                }
                match f.cond.and(&u.cond) {
                    Ok(c) => filter_routes.push(Route {
                        cond: c,
                        comment: format!("{} and {}", f.comment, u.comment),
                        handler: u.handler.clone(),
                        filters: f.filters.clone(),
                    }),
                    Err(why) => r.approx(
                        &s.at,
                        format!("{} with {}", f.comment, u.comment),
                        "",
                        format!(
                            "{why}: a request matching both reaches the backend of the first rule"
                        ),
                    ),
                }
            }
            match &default_backend {
                Some((d, _)) => filter_routes.push(Route {
                    cond: f.cond.clone(),
                    comment: f.comment.clone(),
                    handler: Handler::Backend(d.clone()),
                    filters: f.filters.clone(),
                }),
                None => filter_routes.push(Route {
                    cond: f.cond.clone(),
                    comment: f.comment.clone(),
                    handler: Handler::Keys(vec![("respond".into(), V::I(503))]),
                    filters: f.filters.clone(),
                }),
            }
        }
        if cond_filters.len() > 1 {
            r.approx(&s.at, format!("frontend {}: conditional rules", s.name), "routes", "weir's first matching route answers: a request matching two conditional rules gets the first one's only");
        }
        routes.extend(filter_routes);
        routes.extend(redirects);
        routes.extend(uses);
        let mut route_tables: Vec<(Cond, String, Keys)> = Vec::new();
        for rt in routes {
            let mut keys = rt.cond.route_keys();
            match &rt.handler {
                Handler::Keys(k) => keys.extend(k.iter().cloned()),
                Handler::Backend(name) => {
                    let at = s.at.clone();
                    let what = format!("{} {}: use_backend {name}", s.kind, s.name);
                    let Some((h, rq, rs)) = backend_keys(self, name, &at, &what) else {
                        continue;
                    };
                    keys.extend(h);
                    if !rq.is_empty() {
                        keys.push(("request_headers".into(), rq.table()));
                    }
                    if !rs.is_empty() {
                        keys.push(("response_headers".into(), rs.table()));
                    }
                }
            }
            for (k, v) in rt.filters {
                if k == "request_headers"
                    && let Some(slot) = keys.iter_mut().find(|(x, _)| x == "request_headers")
                {
                    // The rule's own fields after the backend's.
                    if let (V::T(a), V::T(b)) = (&mut slot.1, v) {
                        for (op, fields) in b {
                            match (a.iter_mut().find(|(x, _)| *x == op), fields) {
                                (Some((_, V::T(have))), V::T(more)) => have.extend(more),
                                (Some((_, V::A(have))), V::A(more)) => have.extend(more),
                                (_, fields) => a.push((op, fields)),
                            }
                        }
                    }
                    continue;
                }
                keys.push((k, v));
            }
            route_tables.push((rt.cond, rt.comment, keys));
        }
        let mut own: Vec<(String, V)> = Vec::new();
        match default {
            Some((h, rq, rs)) if route_tables.is_empty() || (rq.is_empty() && rs.is_empty()) => {
                own.extend(h);
                merge_ops(&mut req, &rq);
                merge_ops(&mut resp, &rs);
            }
            Some((mut h, rq, rs)) => {
                // Its own header rules must not reach the other routes.
                if !rq.is_empty() {
                    h.push(("request_headers".into(), rq.table()));
                }
                if !rs.is_empty() {
                    h.push(("response_headers".into(), rs.table()));
                }
                let mut keys = vec![("path".to_string(), V::s("/"))];
                keys.extend(h);
                route_tables.push((Cond::default(), format!("default_backend {} (its own header rules, which HAProxy adds to its requests only)", default_backend.as_ref().map_or("", |d| d.0.as_str())), keys));
            }
            None => {
                if default_backend.is_none() {
                    own.push(("respond".into(), V::I(503)));
                    self.report.approx(
                        &s.at,
                        format!("frontend {} without default_backend", s.name),
                        "respond = 503",
                        "weir's 503 has its own body",
                    );
                }
            }
        }
        if !req.is_empty() {
            site_keys.push(("request_headers".into(), req.table()));
        }
        if !resp.is_empty() {
            site_keys.push(("response_headers".into(), resp.table()));
        }
        if groups.is_empty() {
            self.report.none(
                &s.at,
                format!("{} {}", s.kind, s.name),
                "no `bind` weir can listen on",
            );
            return;
        }
        for (crt, addrs, at) in &groups {
            let port = addrs[0].rsplit(':').next().unwrap_or("80").to_string();
            let mut name = format!(":{port}");
            if self.names.contains(&name) {
                name = addrs[0].clone();
            }
            if self.names.contains(&name) {
                name = format!("{}-{}", s.name, addrs[0]);
            }
            self.names.push(name.clone());
            let key = format!("site.\"{name}\"");
            let mut t = Table::new(key.clone(), false);
            t.comments.push(format!(
                "{}:{} {} {} (bind {})",
                at.file,
                s.at.line,
                s.kind,
                s.name,
                addrs.join(", ")
            ));
            t.set(
                "listen",
                if addrs.len() == 1 {
                    V::s(addrs[0].clone())
                } else {
                    V::strs(addrs.clone())
                },
            );
            if let Some(c) = crt {
                t.set(
                    "tls",
                    V::T(vec![
                        ("cert".into(), V::s(c.clone())),
                        ("key".into(), V::s(c.clone())),
                    ]),
                );
            }
            for (k, v) in own.iter().chain(site_keys.iter()) {
                t.set(k, v.clone());
            }
            self.sites.push(t);
            for (_, comment, keys) in &route_tables {
                let mut rt = Table::new(format!("{key}.route"), true);
                rt.comments.push(comment.clone());
                for (k, v) in keys {
                    rt.set(k, v.clone());
                }
                self.sites.push(rt);
            }
        }
    }

    fn tcp_frontend(&mut self, s: &Section, lines: &[Line]) {
        let mut listens: Vec<String> = Vec::new();
        let mut acls: HashMap<String, Vec<Acl>> = HashMap::new();
        let mut sni: Vec<(Vec<String>, String, Origin)> = Vec::new();
        let mut default: Option<(String, Origin)> = None;
        let mut idle: Option<String> = None;
        for l in lines {
            let r = &mut self.report;
            match l.kw() {
                "mode" => r.mapped(&l.at, l.text(), "[tcp] / passthrough"),
                "bind" => {
                    if l.words.iter().any(|w| w == "ssl") {
                        r.none(&l.at, l.text(), "weir's [tcp] listeners do not terminate TLS: pass it through with a site's `passthrough`, or let the upstream terminate it");
                        continue;
                    }
                    for a in l.arg(1).split(',') {
                        match bind_addr(a) {
                            Ok(x) => {
                                listens.push(x);
                                r.mapped(&l.at, l.text(), "listen");
                            }
                            Err(why) => r.none(&l.at, l.text(), why),
                        }
                    }
                }
                "acl" => {
                    acls.entry(l.arg(1).to_string()).or_default().push(cond::acl(&l.words[2..]));
                    r.mapped(&l.at, l.text(), "the passthrough sites whose rules use it");
                }
                "use_backend" => {
                    let i = l.words.iter().position(|w| w == "if");
                    let hosts = i.and_then(|i| sni_hosts(&l.words[i + 1..], &acls));
                    match hosts {
                        Some(h) => {
                            sni.push((h, l.arg(1).to_string(), l.at.clone()));
                            r.mapped(&l.at, l.text(), "a passthrough site per name");
                        }
                        None => r.none(&l.at, l.text(), "weir routes TCP streams on the TLS server name only (`req.ssl_sni`), to passthrough sites"),
                    }
                }
                "default_backend" => default = Some((l.arg(1).to_string(), l.at.clone())),
                "tcp-request" if l.arg(1) == "inspect-delay" || (l.arg(1) == "content" && l.words.iter().any(|w| w.contains("req_ssl_hello_type") || w.contains("req.ssl_hello_type"))) => {
                    r.mapped(&l.at, l.text(), "none needed: weir reads the whole ClientHello (within server.timeouts.header)")
                }
                "timeout" if l.arg(1) == "client" => {
                    if let Some(t) = time(l.arg(2)) {
                        idle = Some(t);
                        r.approx(&l.at, l.text(), "idle_timeout", "weir closes a stream idle both ways this long; HAProxy's counts each side");
                    }
                }
                "option" if l.arg(1) == "tcplog" => r.approx(&l.at, l.text(), "weir's stream log", "weir logs every stream to its error log (client, upstream, bytes, duration), not in HAProxy's tcplog format"),
                "log" | "option" | "timeout" | "balance" | "retries" | "default-server" | "no" | "maxconn" | "errorfile" | "compression" | "http-check" | "cookie" | "hash-type" | "http-reuse" | "fullconn" => {}
                _ => r.none(&l.at, l.text(), "not known to weir import for a mode tcp frontend"),
            }
        }
        if listens.is_empty() {
            self.report.none(
                &s.at,
                format!("{} {}", s.kind, s.name),
                "no `bind` weir can listen on",
            );
            return;
        }
        let listen_v = if listens.len() == 1 {
            V::s(listens[0].clone())
        } else {
            V::strs(listens.clone())
        };
        let stream_of = |this: &mut Cx, name: &str, at: &Origin| -> Option<Vec<(String, V)>> {
            let Some(b) = this.backends.get_mut(name) else {
                this.report
                    .none(at, format!("backend {name}"), missing_backend(name));
                return None;
            };
            b.used = true;
            if !b.tcp {
                this.report.none(
                    at,
                    format!("backend {name}"),
                    "a mode tcp frontend needs a mode tcp backend",
                );
                return None;
            }
            let mut keys: Vec<(String, V)> = b
                .proxy
                .iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "to" | "balance"
                            | "connect_timeout"
                            | "idle_timeout"
                            | "retries"
                            | "health"
                            | "send_proxy_protocol"
                            | "max_conns"
                    )
                })
                .cloned()
                .collect();
            if keys
                .iter()
                .any(|(k, v)| k == "balance" && *v == V::s("hash"))
            {
                keys.retain(|(k, _)| k != "balance");
            }
            Some(keys)
        };
        if sni.is_empty() {
            let Some((d, at)) = default else {
                self.report.none(
                    &s.at,
                    format!("{} {}", s.kind, s.name),
                    "no backend to send streams to",
                );
                return;
            };
            let Some(mut keys) = stream_of(self, &d, &at) else {
                return;
            };
            let what = if at == s.at {
                format!("{} {d}", s.kind)
            } else {
                format!("default_backend {d}")
            };
            self.report.mapped(&at, what, "to");
            if let Some(t) = idle
                && !keys.iter().any(|(k, _)| k == "idle_timeout")
            {
                keys.push(("idle_timeout".into(), V::S(t)));
            }
            let mut t = Table::new(format!("tcp.\"{}\"", s.name), false);
            t.comments
                .push(format!("{}:{} {} {}", s.at.file, s.at.line, s.kind, s.name));
            t.set("listen", listen_v);
            for (k, v) in keys {
                t.set(&k, v);
            }
            self.tcp.push(t);
            return;
        }
        for (hosts, b, at) in sni {
            let Some(keys) = stream_of(self, &b, &at) else {
                continue;
            };
            for h in hosts {
                if self.names.contains(&h) {
                    continue;
                }
                self.names.push(h.clone());
                let mut t = Table::new(format!("site.\"{h}\""), false);
                t.comments.push(format!(
                    "{}:{} use_backend {b} (req.ssl_sni)",
                    at.file, at.line
                ));
                t.set("listen", listen_v.clone());
                t.set("passthrough", V::T(keys.clone()));
                self.sites.push(t);
            }
        }
        if let Some((d, at)) = default {
            self.report.none(&at, format!("default_backend {d}"), "weir answers TLS for other names itself on a passthrough port: a passthrough site is named by its host; add a site for each name the backend serves");
        }
    }
}

fn merge_ops(into: &mut Ops, from: &Ops) {
    into.set.extend(from.set.iter().cloned());
    into.add.extend(from.add.iter().cloned());
    into.remove.extend(from.remove.iter().cloned());
}

/// The names of `{ req.ssl_sni -i a b }` or of ACLs on `req.ssl_sni`.
fn sni_hosts(words: &[String], acls: &HashMap<String, Vec<Acl>>) -> Option<Vec<String>> {
    let list: Vec<Acl> = if words.first().is_some_and(|w| w == "{") {
        let end = words.iter().position(|w| w == "}")?;
        if end + 1 != words.len() {
            return None;
        }
        vec![cond::acl(&words[1..end])]
    } else if words.len() == 1 {
        acls.get(&words[0])?.clone()
    } else {
        return None;
    };
    let mut out = Vec::new();
    for a in list {
        if !matches!(
            a.criterion.as_str(),
            "req.ssl_sni" | "req_ssl_sni" | "ssl_fc_sni"
        ) {
            return None;
        }
        out.extend(a.values.iter().map(|v| v.to_ascii_lowercase()));
    }
    Some(out)
}

/// `option forwardfor [except NET] [header NAME] [if-none]`: the field name.
fn forwardfor(l: &Line, r: &mut Report) -> String {
    let mut name = "X-Forwarded-For".to_string();
    let mut notes = Vec::new();
    let mut i = 2;
    while i < l.words.len() {
        match l.arg(i) {
            "header" => {
                name = l.arg(i + 1).to_string();
                i += 1;
            }
            "except" => {
                notes.push(format!(
                    "weir adds it for every client (HAProxy not for {})",
                    l.arg(i + 1)
                ));
                i += 1;
            }
            "if-none" => notes.push("weir adds it even when the client sent one".to_string()),
            _ => {}
        }
        i += 1;
    }
    let to = format!(
        "request_headers = {{ add = {{ {name} = \"{{client_ip}}\" }} }}, x_forwarded = false"
    );
    if notes.is_empty() {
        r.mapped(&l.at, l.text(), to);
    } else {
        r.approx(&l.at, l.text(), to, notes.join("; "));
    }
    name
}

/// `http-request set-header NAME VALUE`, `add-header`, `del-header NAME`
/// (the words after the keyword; no condition) into `ops`.
fn header_rule(l: &Line, ops: &mut Ops) -> Result<(), String> {
    if l.words.iter().any(|w| w == "if" || w == "unless") {
        return Err("weir changes fields for every request of a site or route: conditional rules have no equivalent here".into());
    }
    let name = l.arg(2).to_string();
    match l.arg(1) {
        "set-header" | "add-header" => {
            let v = header_value(l.arg(3)).ok_or("the value uses HAProxy samples weir has no placeholder for (weir has %[src], %[path], %[query], %[method], %[req.hdr(host)])")?;
            let list = if l.arg(1) == "set-header" {
                &mut ops.set
            } else {
                &mut ops.add
            };
            list.push((name, V::S(v)));
            Ok(())
        }
        "del-header" => {
            if l.words.len() > 3 {
                return Err("`-m` matching of names has no weir equivalent".into());
            }
            ops.remove.push(name);
            Ok(())
        }
        "allow" => Err("weir has no rule that stops the others".into()),
        _ => Err("weir's header rules set, add and remove fields".into()),
    }
}

/// `redirect location|prefix|scheme X [code N] [drop-query]`: weir's `to`, status, and what differs.
fn redirect(w: &[String]) -> Option<(String, i64, Option<String>)> {
    let kind = w.first()?.as_str();
    let target = w.get(1)?.clone();
    let mut code = 302;
    let mut drop_query = false;
    let mut i = 2;
    while i < w.len() {
        match w[i].as_str() {
            "code" => {
                code = w.get(i + 1)?.parse().ok()?;
                i += 1;
            }
            "drop-query" => drop_query = true,
            "append-slash" | "set-cookie" | "clear-cookie" => return None,
            _ => {}
        }
        i += 1;
    }
    let tail = if drop_query { "{path}" } else { "{uri}" };
    let to = match kind {
        "location" => target.replace('{', "{{"),
        "prefix" => format!("{}{tail}", target.trim_end_matches('/').replace('{', "{{")),
        "scheme" => format!("{target}://{{host}}{tail}"),
        _ => return None,
    };
    let note = (kind == "scheme")
        .then(|| "weir's {host} drops a port the client put in Host; HAProxy keeps it".to_string());
    Some((to, code, note))
}

/// A `log` line's target as access-log keys.
fn log_target(l: &Line) -> Option<Vec<(String, V)>> {
    let t = l.arg(1);
    let facility = l
        .words
        .iter()
        .skip(2)
        .find(|w| w.starts_with("local") || matches!(w.as_str(), "daemon" | "user" | "syslog"))
        .cloned();
    let mut out = Vec::new();
    if t == "stdout" || t == "stderr" {
        out.push(("path".to_string(), V::s("stdout")));
        return Some(out);
    }
    if t.starts_with('/') {
        out.push(("syslog".to_string(), V::S(format!("unix://{t}"))));
    } else {
        let a = t
            .strip_prefix("udp@")
            .or_else(|| t.strip_prefix("ipv4@"))
            .unwrap_or(t);
        if a.contains('@') {
            return None;
        }
        let a = if a.contains(':') {
            a.to_string()
        } else {
            format!("{a}:514")
        };
        out.push(("syslog".to_string(), V::S(format!("udp://{a}"))));
    }
    if let Some(f) = facility {
        out.push(("facility".to_string(), V::S(f)));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time("5000").as_deref(), Some("5s"));
        assert_eq!(time("50000").as_deref(), Some("50s"));
        assert_eq!(time("1m").as_deref(), Some("1m"));
        assert_eq!(time("1500").as_deref(), Some("1500ms"));
        assert_eq!(time("4h").as_deref(), Some("240m"));
        assert_eq!(time("x"), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(bind_addr(":80").unwrap(), "0.0.0.0:80");
        assert_eq!(bind_addr("*:443").unwrap(), "0.0.0.0:443");
        assert_eq!(bind_addr(":::80").unwrap(), "[::]:80");
        assert_eq!(bind_addr("127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert!(bind_addr(":8000-8010").is_err());
        assert_eq!(server_addr("10.0.0.1:80").unwrap(), "10.0.0.1:80");
        assert_eq!(server_addr("/run/app.sock").unwrap(), "unix:/run/app.sock");
        assert!(server_addr("10.0.0.1").is_err());
    }

    #[test]
    fn forwardfor_after_a_removal_is_a_set() {
        let mut o = Ops {
            remove: vec!["x-forwarded-for".into()],
            ..Ops::default()
        };
        o.forward_for("X-Forwarded-For");
        assert!(o.remove.is_empty());
        assert_eq!(
            o.set,
            vec![("X-Forwarded-For".to_string(), V::s("{client_ip}"))]
        );
        let mut o = Ops::default();
        o.forward_for("X-Forwarded-For");
        assert_eq!(o.add.len(), 1);
    }

    #[test]
    fn header_values() {
        assert_eq!(header_value("%[src]").as_deref(), Some("{client_ip}"));
        assert_eq!(
            header_value("max-age=31536000").as_deref(),
            Some("max-age=31536000")
        );
        assert_eq!(header_value("%[ssl_fc_sni]"), None);
    }
}
