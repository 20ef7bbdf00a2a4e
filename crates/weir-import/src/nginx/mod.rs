//! nginx configs into weir's: `http`, `server`, `location` (with nginx's
//! matching order reproduced as weir's first-match routes), `upstream`,
//! `stream`, and the directives inside them, each reported as mapped,
//! approximated or without equivalent.
//!
//! Reads files only; never writes, never starts a server, and never emits
//! a weir key for a directive it cannot honour (those are reported).

pub mod parse;
mod rewrite;
mod scope;
mod site;

pub(crate) use site::fcgi_value;

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Origin};
use crate::report::Report;
use crate::toml::{Table, V};
use crate::{Imported, Options};

use parse::{Directive, Reader};
use scope::Scope;

/// One `upstream NAME { … }`.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub at: Origin,
    pub servers: Vec<UpServer>,
    /// weir's `balance` and `hash_key`.
    pub balance: Option<(String, Option<String>)>,
}

#[derive(Debug, Clone)]
pub(crate) struct UpServer {
    pub addr: String,
    pub weight: i64,
    pub max_fails: i64,
    pub fail_timeout: String,
}

/// What the whole config defines, read before the servers.
pub(crate) struct Globals {
    pub upstreams: HashMap<String, Upstream>,
    /// `limit_req_zone`: zone name to (weir key, rate).
    pub req_zones: HashMap<String, (V, String)>,
    /// `limit_conn_zone`: zone name to weir key.
    pub conn_zones: HashMap<String, V>,
    /// `map` blocks, in order.
    pub maps: Vec<rewrite::Map>,
}

/// Imports the nginx config at `main` (with everything it includes).
pub fn import(main: &Path, opts: &Options) -> Result<Imported, Error> {
    let mut reader = Reader::new(main, opts.sysroot.clone());
    let top = reader.file(main, None)?;
    let mut report = Report::default();
    for (at, name) in &reader.stock_used {
        report.approx(
            at,
            format!("include {name}"),
            "",
            format!(
                "{name} is not beside the config: read as nginx's packages install it (Debian 12)"
            ),
        );
    }
    let mut server_tables: Vec<Table> = Vec::new();
    let mut server = Table::new("server", false);
    let mut tcp_tables: Vec<Table> = Vec::new();

    // A file of `server { … }` blocks alone (a sites-enabled file) is read
    // as the inside of `http`.
    let (main_level, http_blocks): (Vec<&Directive>, Vec<Vec<Directive>>) =
        if top.iter().any(|d| d.name == "http") {
            (
                top.iter().filter(|d| d.name != "http").collect(),
                top.iter()
                    .filter(|d| d.name == "http")
                    .filter_map(|d| d.block.clone())
                    .collect(),
            )
        } else if top
            .iter()
            .any(|d| d.name == "server" || d.name == "upstream")
        {
            (
                top.iter()
                    .filter(|d| !scope::is_http_level(&d.name))
                    .collect(),
                vec![
                    top.iter()
                        .filter(|d| scope::is_http_level(&d.name))
                        .cloned()
                        .collect(),
                ],
            )
        } else {
            (top.iter().collect(), Vec::new())
        };

    for d in &main_level {
        match d.name.as_str() {
            "http" => {}
            "events" => events(d, &mut report, &mut server),
            "stream" => stream(d, &mut report, &mut tcp_tables),
            _ => main_directive(d, &mut report, &mut server),
        }
    }
    for http in &http_blocks {
        let mut globals = Globals {
            upstreams: HashMap::new(),
            req_zones: HashMap::new(),
            conn_zones: HashMap::new(),
            maps: Vec::new(),
        };
        let mut scope = Scope::default();
        // Declarations first: a server may use an upstream defined after it.
        for d in http {
            match d.name.as_str() {
                "upstream" => {
                    if let Some(u) = upstream(d, &mut report) {
                        globals.upstreams.insert(d.arg(0).to_string(), u);
                    }
                }
                "limit_req_zone" => limit_req_zone(d, &mut report, &mut globals),
                "limit_conn_zone" => limit_conn_zone(d, &mut report, &mut globals),
                "map" => globals.maps.push(rewrite::map(d)),
                _ => {}
            }
        }
        let mut seen = scope::Seen::default();
        for d in http {
            match d.name.as_str() {
                "server" | "upstream" | "limit_req_zone" | "limit_conn_zone" | "map" => {}
                "client_max_body_size" => {
                    if let Some(v) = scope::size(d.arg(0)) {
                        let mut limits = server_limits(&server);
                        limits.push(("body".into(), v));
                        server.set("limits", V::T(limits));
                        report.mapped(&d.at, d.text(), "server.limits.body");
                    } else {
                        report.none(
                            &d.at,
                            d.text(),
                            "weir has no unlimited body size: set server.limits.body to the largest body you accept",
                        );
                    }
                }
                "keepalive_timeout"
                | "client_header_timeout"
                | "client_body_timeout"
                | "send_timeout" => timeout(d, &mut report, &mut server),
                _ => scope.apply(d, &mut seen, &mut report, &reader, scope::Level::Http),
            }
        }
        let mut sites = site::Sites::default();
        for d in http {
            if d.name == "server" {
                sites.server(d, &scope, &globals, &mut report, &reader);
            }
        }
        server_tables.extend(sites.tables);
        for m in &globals.maps {
            map_report(m, &sites.map_uses, &mut report);
        }
    }

    let main_name = reader.display(main);
    report.baseline(
        "nginx's own pages",
        "error and redirect answers carry weir's own short bodies (and Content-Type), not nginx's HTML pages",
    );
    let head = vec![
        format!("weir.toml made by `weir import nginx {}`.", main.display()),
        "Each part says where it came from; the report on stderr says what differs.".into(),
    ];
    let mut tables = Vec::new();
    if !server.keys.is_empty() {
        server.comments.push(format!("{main_name}: main context"));
        tables.push(server);
    }
    tables.extend(server_tables);
    tables.extend(tcp_tables);
    // nginx expands no environment variables in its config.
    let env = crate::env::Env::new(opts.env.clone());
    crate::finish(crate::Kind::Nginx, main, head, tables, report, &env, opts)
}

/// What became of a `map`: the site copies made for its values, or why
/// none could be, naming where its variable is used.
fn map_report(m: &rewrite::Map, uses: &[(String, String)], report: &mut Report) {
    let here: Vec<&str> = uses
        .iter()
        .filter(|(v, _)| *v == m.var)
        .map(|(_, w)| w.as_str())
        .collect();
    if here.is_empty() {
        report.mapped(
            &m.at,
            m.text.clone(),
            "not used by any server: nothing to write",
        );
        return;
    }
    let used = format!("used at {}", here.join("; "));
    if here.iter().all(|w| {
        w.contains("proxy_set_header Connection") || w.contains("proxy_set_header connection")
    }) {
        report.mapped(
            &m.at,
            m.text.clone(),
            format!("none needed: weir passes WebSocket upgrades itself ({used})"),
        );
        return;
    }
    if let Some(why) = &m.unsupported {
        report.none(&m.at, m.text.clone(), format!("{why}; {used}"));
        return;
    }
    let to = format!(
        "the site written again for each of its {} values, under `match` (or `path_regex`), before the default's ({used})",
        m.values.len()
    );
    let mut approx: Vec<String> = m
        .values
        .iter()
        .filter_map(|(c, _)| c.approx.clone())
        .collect();
    approx.dedup();
    if m.values.iter().any(|(c, _)| {
        c.path_regex
            .as_deref()
            .map(|r| r.trim_start_matches("(?i)"))
            .is_some_and(|r| r.contains(['(', '[', '*', '+', '?', '|']) || !r.ends_with('$'))
    }) {
        approx.push("a regex value applies to the routes without a path of their own; the others keep the default there".into());
    }
    if approx.is_empty() {
        report.mapped(&m.at, m.text.clone(), to);
    } else {
        report.approx(&m.at, m.text.clone(), to, approx.join("; "));
    }
}

fn server_limits(server: &Table) -> Vec<(String, V)> {
    match server.get("limits") {
        Some(V::T(t)) => t.clone(),
        _ => Vec::new(),
    }
}

/// Directives of the main context.
fn main_directive(d: &Directive, report: &mut Report, server: &mut Table) {
    match d.name.as_str() {
        "worker_processes" => {
            if d.arg(0) == "auto" {
                report.mapped(&d.at, d.text(), "server.workers (default: one per core)");
            } else if let Ok(n) = d.arg(0).parse::<i64>() {
                server.set("workers", V::I(n));
                report.mapped(&d.at, d.text(), "server.workers");
            }
        }
        "user" => report.none(
            &d.at,
            d.text(),
            "weir runs as the user that starts it: use the systemd unit's User= (packaging/weir.service runs as weir)",
        ),
        "pid" => report.mapped(&d.at, d.text(), "none needed: systemd tracks weir (Type=notify)"),
        "error_log" => report.approx(
            &d.at,
            d.text(),
            "weir's error log",
            "weir writes its error log to standard error (the journal under systemd), not to a file",
        ),
        "worker_rlimit_nofile" | "pcre_jit" | "thread_pool" | "timer_resolution"
        | "worker_cpu_affinity" | "worker_priority" | "daemon" | "master_process"
        | "working_directory" | "lock_file" => report.mapped(
            &d.at,
            d.text(),
            "none needed: weir sets this itself",
        ),
        "load_module" => report.none(&d.at, d.text(), "weir has no dynamic modules; its features are built in"),
        "env" => report.none(&d.at, d.text(), "weir passes its environment to apps (`app.env`) and PHP (`php.env`) per site"),
        _ => report.none(&d.at, d.text(), "not known to weir import"),
    }
}

fn events(d: &Directive, report: &mut Report, server: &mut Table) {
    for e in d.block.iter().flatten() {
        match e.name.as_str() {
            "worker_connections" => {
                report.approx(
                    &e.at,
                    e.text(),
                    "server.limits.connections (default 16384)",
                    "weir limits client connections for the whole process (16384 by default), not per worker, and counts no upstream connections",
                );
                let _ = server;
            }
            "use" | "multi_accept" | "accept_mutex" | "accept_mutex_delay" => report.mapped(
                &e.at,
                e.text(),
                "none needed: weir uses epoll with SO_REUSEPORT",
            ),
            _ => report.none(&e.at, e.text(), "not known to weir import"),
        }
    }
}

fn timeout(d: &Directive, report: &mut Report, server: &mut Table) {
    let key = match d.name.as_str() {
        "keepalive_timeout" => "keepalive",
        "client_header_timeout" => "header",
        "client_body_timeout" => "body",
        _ => "write",
    };
    let Some(v) = scope::duration(d.arg(0)) else {
        report.none(&d.at, d.text(), "not a duration weir reads");
        return;
    };
    let mut t = match server.get("timeouts") {
        Some(V::T(t)) => t.clone(),
        _ => Vec::new(),
    };
    t.push((key.into(), V::S(v)));
    server.set("timeouts", V::T(t));
    if d.name == "keepalive_timeout" && d.args.len() > 1 {
        report.approx(
            &d.at,
            d.text(),
            "server.timeouts.keepalive",
            "weir sends no Keep-Alive header (the second argument)",
        );
    } else {
        report.mapped(&d.at, d.text(), format!("server.timeouts.{key}"));
    }
}

/// `upstream NAME { server ADDR [weight=N] [max_fails=N] [fail_timeout=T] [backup] [down]; least_conn; … }`.
fn upstream(d: &Directive, report: &mut Report) -> Option<Upstream> {
    let mut u = Upstream {
        at: d.at.clone(),
        servers: Vec::new(),
        balance: None,
    };
    for s in d.block.iter().flatten() {
        match s.name.as_str() {
            "server" => {
                let mut us = UpServer {
                    addr: upstream_addr(s.arg(0)),
                    weight: 1,
                    max_fails: 1,
                    fail_timeout: "10s".into(),
                };
                let mut skip = None;
                for a in &s.args[1..] {
                    if let Some(w) = a.strip_prefix("weight=") {
                        us.weight = w.parse().unwrap_or(1);
                    } else if let Some(m) = a.strip_prefix("max_fails=") {
                        us.max_fails = m.parse().unwrap_or(1);
                    } else if let Some(t) = a.strip_prefix("fail_timeout=") {
                        us.fail_timeout = scope::duration(t).unwrap_or_else(|| "10s".into());
                    } else if a == "backup" {
                        skip = Some(
                            "weir has no backup servers: it is left out of `to` (put it in if it should take traffic with the others)",
                        );
                    } else if a == "down" {
                        skip = Some("marked down: left out of `to`, as nginx sends it nothing");
                    } else if a.starts_with("max_conns=") {
                        // carried below as the proxy's max_conns
                    } else {
                        report.none(&s.at, s.text(), format!("`{a}` has no weir equivalent"));
                    }
                }
                match skip {
                    Some(why) if why.starts_with("marked") => {
                        report.mapped(&s.at, s.text(), "left out of `to`")
                    }
                    Some(why) => report.none(&s.at, s.text(), why),
                    None => {
                        report.mapped(&s.at, s.text(), "proxy `to`");
                        u.servers.push(us);
                    }
                }
            }
            "least_conn" => {
                u.balance = Some(("least_conn".into(), None));
                report.mapped(&s.at, s.text(), "proxy balance = \"least_conn\"");
            }
            "ip_hash" => {
                u.balance = Some(("ip_hash".into(), None));
                report.approx(
                    &s.at,
                    s.text(),
                    "proxy balance = \"ip_hash\"",
                    "weir hashes the whole client address; nginx hashes the first three octets of an IPv4 address",
                );
            }
            "random" => {
                if s.args.iter().any(|a| a == "two") {
                    u.balance = Some(("p2c".into(), None));
                    report.mapped(&s.at, s.text(), "proxy balance = \"p2c\"");
                } else {
                    u.balance = Some(("random".into(), None));
                    report.mapped(&s.at, s.text(), "proxy balance = \"random\"");
                }
            }
            "hash" => {
                let key = match s.arg(0) {
                    "$request_uri" | "$uri" => Some("uri".to_string()),
                    k => k
                        .strip_prefix("$http_")
                        .map(|h| format!("header:{}", header_name(h)))
                        .or_else(|| k.strip_prefix("$cookie_").map(|c| format!("cookie:{c}"))),
                };
                match key {
                    Some(k) => {
                        u.balance = Some(("hash".into(), Some(k.clone())));
                        report.approx(
                            &s.at,
                            s.text(),
                            format!("proxy balance = \"hash\", hash_key = \"{k}\""),
                            "weir's hash is consistent (as `consistent`), with its own ring: keys land on other servers than nginx's",
                        );
                    }
                    None => report.none(
                        &s.at,
                        s.text(),
                        "weir hashes on the URI, a header or a cookie only",
                    ),
                }
            }
            "keepalive" => {
                report.mapped(
                    &s.at,
                    s.text(),
                    "none needed: weir keeps upstream connections alive by default",
                );
            }
            "keepalive_timeout" | "keepalive_requests" | "keepalive_time" => report.mapped(
                &s.at,
                s.text(),
                "none needed: weir closes idle upstream connections after proxy idle_timeout (60s)",
            ),
            "zone" => report.mapped(
                &s.at,
                s.text(),
                "none needed: weir's upstream state is shared by its workers",
            ),
            _ => report.none(&s.at, s.text(), "not known to weir import"),
        }
    }
    if u.servers.is_empty() {
        report.none(&d.at, d.text(), "no server weir can send to is left in it");
        return None;
    }
    Some(u)
}

/// An upstream `server` address as weir writes it (nginx's default port is 80).
pub(crate) fn upstream_addr(a: &str) -> String {
    if a.starts_with("unix:") {
        return a.to_string();
    }
    let has_port = if let Some(rest) = a.strip_prefix('[') {
        rest.contains("]:")
    } else {
        a.contains(':')
    };
    if has_port {
        a.to_string()
    } else {
        format!("{a}:80")
    }
}

/// `$http_x_real_ip` → `X-Real-Ip`.
pub(crate) fn header_name(var: &str) -> String {
    var.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A limit key from nginx's zone key.
fn limit_key(k: &str) -> Option<V> {
    match k {
        "$binary_remote_addr" | "$remote_addr" => Some(V::s("client")),
        "$server_name" | "$host" => Some(V::s("site")),
        "$uri" | "$request_uri" => Some(V::s("path")),
        k => k
            .strip_prefix("$http_")
            .map(|h| V::S(format!("header:{}", header_name(h))))
            .or_else(|| {
                k.strip_prefix("$cookie_")
                    .map(|c| V::S(format!("cookie:{c}")))
            }),
    }
}

fn zone_arg<'a>(d: &'a Directive, name: &str) -> Option<&'a str> {
    d.args.iter().find_map(|a| a.strip_prefix(name))
}

fn limit_req_zone(d: &Directive, report: &mut Report, g: &mut Globals) {
    let zone = zone_arg(d, "zone=").map(|z| z.split(':').next().unwrap_or(z).to_string());
    let rate = zone_arg(d, "rate=").map(str::to_string);
    match (limit_key(d.arg(0)), zone, rate) {
        (Some(k), Some(z), Some(r)) if r.ends_with("r/s") || r.ends_with("r/m") => {
            report.mapped(&d.at, d.text(), "the `limit` of every limit_req using it");
            g.req_zones.insert(z, (k, r));
        }
        _ => report.none(
            &d.at,
            d.text(),
            "weir keys limits on the client address, a header, a cookie, the path or the site",
        ),
    }
}

fn limit_conn_zone(d: &Directive, report: &mut Report, g: &mut Globals) {
    let zone = zone_arg(d, "zone=").map(|z| z.split(':').next().unwrap_or(z).to_string());
    match (limit_key(d.arg(0)), zone) {
        (Some(k), Some(z)) => {
            report.mapped(&d.at, d.text(), "the `limit` of every limit_conn using it");
            g.conn_zones.insert(z, k);
        }
        _ => report.none(
            &d.at,
            d.text(),
            "weir keys limits on the client address, a header, a cookie, the path or the site",
        ),
    }
}

/// `stream { upstream …; server { listen …; proxy_pass …; } }` → `[tcp."…"]`.
fn stream(d: &Directive, report: &mut Report, tables: &mut Vec<Table>) {
    let block = d.block.clone().unwrap_or_default();
    let mut ups: HashMap<String, Upstream> = HashMap::new();
    for s in &block {
        if s.name == "upstream"
            && let Some(u) = upstream(s, report)
        {
            ups.insert(s.arg(0).to_string(), u);
        }
    }
    let mut n = 0;
    for s in &block {
        match s.name.as_str() {
            "upstream" => {}
            "server" => {
                n += 1;
                let mut t = Table::new(String::new(), false);
                t.comments
                    .push(format!("{}:{} stream server", s.at.file, s.at.line));
                let mut listens = Vec::new();
                let mut name = format!("stream{n}");
                for x in s.block.iter().flatten() {
                    match x.name.as_str() {
                        "listen" => {
                            if x.args.iter().any(|a| a == "udp") {
                                report.none(&x.at, x.text(), "weir proxies TCP streams only");
                                continue;
                            }
                            let addr = site::listen_addr(x.arg(0));
                            if listens.is_empty() {
                                name = format!("port-{}", addr.rsplit(':').next().unwrap_or("0"));
                            }
                            listens.push(V::S(addr));
                            if x.args.iter().skip(1).any(|a| a == "ssl") {
                                report.none(&x.at, x.text(), "weir's [tcp] listeners do not terminate TLS: pass it through with a site's `passthrough`, or let the upstream terminate it");
                            } else {
                                report.mapped(&x.at, x.text(), "listen");
                            }
                        }
                        "proxy_pass" => {
                            let target = x.arg(0);
                            if let Some(u) = ups.get(target) {
                                t.set("to", site::upstream_list(u));
                                if let Some((b, _)) = &u.balance {
                                    t.set("balance", V::s(b.clone()));
                                }
                                report.mapped(&x.at, x.text(), "to");
                            } else if target.contains('$') {
                                report.none(
                                    &x.at,
                                    x.text(),
                                    "weir's upstreams are fixed addresses, not variables",
                                );
                            } else {
                                t.set("to", V::s(upstream_addr(target)));
                                report.mapped(&x.at, x.text(), "to");
                            }
                        }
                        "proxy_connect_timeout" => {
                            if let Some(v) = scope::duration(x.arg(0)) {
                                t.set("connect_timeout", V::S(v));
                                report.mapped(&x.at, x.text(), "connect_timeout");
                            }
                        }
                        "proxy_timeout" => {
                            if let Some(v) = scope::duration(x.arg(0)) {
                                t.set("idle_timeout", V::S(v));
                                report.mapped(&x.at, x.text(), "idle_timeout");
                            }
                        }
                        "proxy_protocol" if x.arg(0) == "on" => {
                            t.set("send_proxy_protocol", V::s("v1"));
                            report.mapped(&x.at, x.text(), "send_proxy_protocol = \"v1\"");
                        }
                        "proxy_next_upstream_tries" => {
                            if let Ok(n) = x.arg(0).parse::<i64>() {
                                t.set("retries", V::I((n - 1).max(0)));
                                report.mapped(&x.at, x.text(), "retries");
                            }
                        }
                        _ => report.none(&x.at, x.text(), "not known to weir import for streams"),
                    }
                }
                if listens.is_empty() || t.get("to").is_none() {
                    report.none(
                        &s.at,
                        s.text(),
                        "a stream server needs `listen` and `proxy_pass`",
                    );
                    continue;
                }
                t.header = format!("tcp.\"{name}\"");
                t.keys.insert(
                    0,
                    (
                        "listen".into(),
                        if listens.len() == 1 {
                            listens.remove(0)
                        } else {
                            V::A(listens)
                        },
                    ),
                );
                report.mapped(&s.at, "server", format!("[tcp.\"{name}\"]"));
                tables.push(t);
            }
            _ => report.none(&s.at, s.text(), "not known to weir import for streams"),
        }
    }
}
