//! nginx `server` blocks into weir sites: `listen` and `server_name` into
//! site names and addresses, `location`s into routes in the order nginx
//! would pick them, and each location's handler (`root`/`alias` with
//! `try_files`, `proxy_pass`, `fastcgi_pass`, `return`, `rewrite … redirect`)
//! with the filters in force there.
//!
//! nginx's choice of location: an exact (`=`) match wins; else the longest
//! prefix; if that one is `^~` it wins, else the first regex (`~`, `~*`) in
//! file order that matches, else that longest prefix. weir takes the first
//! route that matches, so the routes are written as: exact matches, the
//! `^~` prefixes no plain prefix lies under (longest first), the regexes in
//! file order, then the other prefixes longest first (`/` last, as the
//! site's own handler).

use crate::regex::{regex_escape, unsupported_regex};
use std::collections::HashSet;

use super::parse::{Directive, Reader};
use super::rewrite;
use super::scope::{self, Level, LimitRef, Scope, Seen};
use super::{Globals, Upstream, upstream_addr};
use crate::error::Origin;
use crate::report::Report;
use crate::toml::{Table, V};

/// One key of a weir table and its value.
type Key = (String, V);

/// The sites made so far.
#[derive(Default)]
pub struct Sites {
    pub tables: Vec<Table>,
    names: HashSet<String>,
    /// Filters go on every route, none on the site (a site written once
    /// per value of a `map`: the copies must not share the site's).
    split_filters: bool,
    /// Where each `map`'s variable is used: its name to `file:line directive`.
    pub map_uses: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct Listen {
    addr: String,
    port: u16,
    ssl: bool,
    default: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mod {
    Exact,
    Prefix,
    NoRegex,
    Regex { ci: bool },
}

#[derive(Debug, Clone)]
enum H {
    Static,
    Proxy(Directive),
    FastCgi(Directive),
    Return(Directive),
}

#[derive(Debug, Clone)]
struct Loc {
    m: Mod,
    uri: String,
    at: Origin,
    scope: Scope,
    handler: H,
    try_files: Option<Directive>,
    alias: Option<String>,
    /// `rewrite` and `if` inside it before its `return`, in order.
    phase: Vec<Directive>,
}

/// One server, read.
struct Server {
    at: Origin,
    listens: Vec<Listen>,
    names: Vec<String>,
    scope: Scope,
    ret: Option<Directive>,
    /// `rewrite` and `if` at server level before its `return`, in order.
    phase: Vec<Directive>,
    try_files: Option<Directive>,
    locs: Vec<Loc>,
}

/// A route to write: its path match, its keys, and where it came from.
struct Unit {
    comment: String,
    pattern: Option<(String, V)>,
    handler: Vec<(String, V)>,
    filters: Vec<(String, V)>,
    compress: Option<V>,
    /// An internal rewrite reaching the site's own handler: its keys and
    /// filters are added once they are known; the rewrite is reported then.
    fallback: Option<(Directive, Option<String>)>,
}

/// `listen` as weir writes an address (`80` → `0.0.0.0:80`).
pub fn listen_addr(a: &str) -> String {
    if let Ok(p) = a.parse::<u16>() {
        return format!("0.0.0.0:{p}");
    }
    if a.starts_with('[') {
        return if a.contains("]:") {
            a.to_string()
        } else {
            format!("{a}:80")
        };
    }
    let a = a.replace("localhost", "127.0.0.1");
    let a = a
        .strip_prefix("*:")
        .map(|p| format!("0.0.0.0:{p}"))
        .unwrap_or(a);
    if a.contains(':') {
        a
    } else {
        format!("{a}:80")
    }
}

/// Upstreams as weir's `to`.
pub fn upstream_list(u: &Upstream) -> V {
    let all_one = u.servers.iter().all(|s| s.weight == 1);
    let items: Vec<V> = u
        .servers
        .iter()
        .map(|s| {
            if all_one {
                V::s(s.addr.clone())
            } else {
                V::T(vec![
                    ("addr".into(), V::s(s.addr.clone())),
                    ("weight".into(), V::I(s.weight)),
                ])
            }
        })
        .collect();
    V::A(items)
}

impl Sites {
    pub fn server(
        &mut self,
        d: &Directive,
        http: &Scope,
        g: &Globals,
        report: &mut Report,
        reader: &Reader,
    ) {
        // The maps this server uses: the server is written once per value
        // of their variables, each copy's routes under its condition.
        let mut variants: Vec<(rewrite::Cond, Directive)> =
            vec![(rewrite::Cond::default(), d.clone())];
        for m in &g.maps {
            let mut used = Vec::new();
            rewrite::uses(d, &m.var, &mut used);
            if used.is_empty() {
                continue;
            }
            for u in &used {
                self.map_uses.push((
                    m.var.clone(),
                    format!("{}:{} {}", u.at.file, u.at.line, if_text(u)),
                ));
            }
            // `Connection $connection_upgrade`: weir passes upgrades itself.
            let upgrade_only = used.iter().all(|u| {
                u.name == "proxy_set_header" && u.arg(0).eq_ignore_ascii_case("connection")
            });
            if upgrade_only || m.unsupported.is_some() {
                continue;
            }
            let mut next = Vec::new();
            for (c, vd) in &variants {
                for (mc, val) in &m.values {
                    if let Some(both) = c.and(mc) {
                        next.push((both, rewrite::substitute(vd, &m.var, val)));
                    }
                }
                next.push((c.clone(), rewrite::substitute(vd, &m.var, &m.default)));
            }
            variants = next;
        }
        if variants.len() > MAX_VARIANTS {
            report.none(&d.at, "server { … }", format!("its maps' values make {} copies of the site, more than weir import writes ({MAX_VARIANTS}): write the routes by hand", variants.len()));
            variants = vec![(rewrite::Cond::default(), d.clone())];
        }
        let (_, base) = variants.pop().expect("the defaults' copy");
        let s = self.read(&base, http, report, reader);
        let copies: Vec<(rewrite::Cond, Server)> = variants
            .into_iter()
            .map(|(c, vd)| {
                let mut scratch = Report::default();
                (c, self.read(&vd, http, &mut scratch, reader))
            })
            .collect();
        self.emit(&s, &copies, g, report, reader);
    }

    /// One server block, read.
    fn read(&self, d: &Directive, http: &Scope, report: &mut Report, reader: &Reader) -> Server {
        let mut s = Server {
            at: d.at.clone(),
            listens: Vec::new(),
            names: Vec::new(),
            scope: http.child(),
            ret: None,
            phase: Vec::new(),
            try_files: None,
            locs: Vec::new(),
        };
        let mut seen = Seen::default();
        let body = d.block.clone().unwrap_or_default();
        for x in &body {
            match x.name.as_str() {
                "listen" => {
                    let a = x.arg(0);
                    if a.starts_with("unix:") {
                        report.none(&x.at, x.text(), "weir listens on TCP addresses");
                        continue;
                    }
                    let mut addr = listen_addr(a);
                    // A host name: nginx listens on the addresses it resolves to at start.
                    if let Some((h, p)) = addr.rsplit_once(':')
                        && !h.starts_with('[')
                        && h.parse::<std::net::IpAddr>().is_err()
                    {
                        report.approx(
                            &x.at,
                            x.text(),
                            "listen",
                            format!("weir listens on every address of port {p}; nginx on those {h} resolves to when it starts"),
                        );
                        addr = format!("0.0.0.0:{p}");
                    }
                    let port = addr
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(80);
                    let rest = &x.args[1..];
                    let ssl = rest.iter().any(|o| o == "ssl" || o == "quic");
                    s.listens.push(Listen {
                        addr,
                        port,
                        ssl,
                        default: rest.iter().any(|o| o == "default_server" || o == "default"),
                    });
                    if rest.iter().any(|o| o == "proxy_protocol") {
                        report.none(&x.at, x.text(), "set `proxy_protocol = true` and `trusted_sources` on the site by hand (nginx's set_real_ip_from)");
                    } else if rest.iter().any(|o| o.starts_with("ipv6only=off")) {
                        report.approx(
                            &x.at,
                            x.text(),
                            "listen",
                            "weir's IPv6 sockets are IPv6 only: add an IPv4 address too",
                        );
                    } else {
                        report.mapped(&x.at, x.text(), "listen");
                    }
                }
                "server_name" => {
                    for n in &x.args {
                        if n.starts_with('~') || n.ends_with(".*") {
                            report.none(&x.at, format!("server_name {n}"), "weir matches exact names and `*.name` one label deep, not regexes or trailing wildcards: add a site per name");
                        } else if let Some(base) = n.strip_prefix('.') {
                            s.names.push(base.to_string());
                            s.names.push(format!("*.{base}"));
                            report.approx(
                                &x.at,
                                format!("server_name {n}"),
                                "two sites",
                                "weir's `*.name` matches one label; nginx's `.name` any depth",
                            );
                        } else if n == "_" || n.is_empty() || n == "\"\"" {
                            s.names.push(String::new());
                        } else if n.trim_start_matches("*.").contains('*') {
                            report
                                .refuse(&x.at, format!("invalid server name or wildcard \"{n}\""));
                        } else if n.starts_with("*.") && n[2..].contains('*') {
                            report.none(
                                &x.at,
                                format!("server_name {n}"),
                                "weir's wildcards are `*.name` only",
                            );
                        } else {
                            s.names.push(n.to_ascii_lowercase());
                        }
                    }
                    report.mapped(&x.at, x.text(), "site names");
                }
                "location" => location(x, &s.scope, &mut s.locs, report, reader, false),
                "return" => {
                    if s.ret.is_none() {
                        s.ret = Some(x.clone());
                    } else {
                        report.mapped(
                            &x.at,
                            x.text(),
                            "never reached: a return comes first (as in nginx)",
                        );
                    }
                }
                "rewrite" | "if" => {
                    if s.ret.is_none() {
                        s.phase.push(x.clone());
                    } else {
                        report.mapped(
                            &x.at,
                            if_text(x),
                            "never reached: a return comes first (as in nginx)",
                        );
                    }
                }
                "try_files" => s.try_files = Some(x.clone()),
                "set" => report.none(&x.at, x.text(), "weir has no variables"),
                "ssl_certificate" | "ssl_certificate_key" => {
                    s.scope.apply(x, &mut seen, report, reader, Level::Server)
                }
                _ => s.scope.apply(x, &mut seen, report, reader, Level::Server),
            }
        }
        if s.listens.is_empty() {
            s.listens.push(Listen {
                addr: "0.0.0.0:80".into(),
                port: 80,
                ssl: false,
                default: false,
            });
        }
        if s.names.is_empty() {
            s.names.push(String::new());
        }
        s
    }

    fn emit(
        &mut self,
        s: &Server,
        copies: &[(rewrite::Cond, Server)],
        g: &Globals,
        report: &mut Report,
        reader: &Reader,
    ) {
        for ssl in [false, true] {
            let group: Vec<&Listen> = s.listens.iter().filter(|l| l.ssl == ssl).collect();
            if group.is_empty() {
                continue;
            }
            let port = group[0].port;
            for (i, name) in s.names.iter().enumerate() {
                let site_name = if name.is_empty() {
                    if group[0].addr.starts_with("0.0.0.0:") {
                        format!(":{port}")
                    } else {
                        group[0].addr.clone()
                    }
                } else {
                    format!("{name}:{port}")
                };
                if !self.names.insert(site_name.clone()) {
                    report.none(&s.at, format!("server ({site_name})"), "a server with the same name on the same port comes earlier: nginx ignores this one (\"conflicting server name\")");
                    continue;
                }
                let default = i == 0 && group.iter().any(|l| l.default);
                self.split_filters = !copies.is_empty();
                let mut tables = self.site(s, &site_name, &group, ssl, default, g, report, reader);
                let key = format!("site.\"{site_name}\"");
                let mut conditional = Vec::new();
                for (cond, cs) in copies {
                    let mut scratch = Report::default();
                    let ct = self.site(
                        cs,
                        &site_name,
                        &group,
                        ssl,
                        default,
                        g,
                        &mut scratch,
                        reader,
                    );
                    conditional.extend(as_routes(ct, cond, &key));
                }
                self.split_filters = false;
                let rest = tables.split_off(1);
                tables.extend(conditional);
                tables.extend(rest);
                self.tables.extend(tables);
            }
        }
        let names: Vec<&str> = s
            .names
            .iter()
            .map(|n| if n.is_empty() { "_" } else { n.as_str() })
            .collect();
        report.mapped(&s.at, format!("server ({})", names.join(" ")), "site(s)");
    }

    #[allow(clippy::too_many_arguments)]
    fn site(
        &self,
        s: &Server,
        site_name: &str,
        group: &[&Listen],
        ssl: bool,
        default: bool,
        g: &Globals,
        report: &mut Report,
        reader: &Reader,
    ) -> Vec<Table> {
        let key = format!("site.\"{site_name}\"");
        let mut t = Table::new(key.clone(), false);
        let names: Vec<&str> = s
            .names
            .iter()
            .filter(|n| !n.is_empty())
            .map(String::as_str)
            .collect();
        t.comments.push(format!(
            "{}:{} server (listen {}{})",
            s.at.file,
            s.at.line,
            group
                .iter()
                .map(|l| l.addr.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if names.is_empty() {
                String::new()
            } else {
                format!("; server_name {}", names.join(" "))
            }
        ));
        let addrs: Vec<V> = group.iter().map(|l| V::s(l.addr.clone())).collect();
        t.set(
            "listen",
            if addrs.len() == 1 {
                addrs[0].clone()
            } else {
                V::A(addrs)
            },
        );
        if default {
            t.set("default", V::B(true));
        }
        if ssl {
            match (&s.scope.ssl_cert, &s.scope.ssl_key) {
                (Some(c), Some(k)) => t.set(
                    "tls",
                    V::T(vec![
                        ("cert".into(), V::s(c.clone())),
                        ("key".into(), V::s(k.clone())),
                    ]),
                ),
                _ => {
                    report.none(&s.at, format!("server ({site_name})"), "listens with ssl but has no ssl_certificate and ssl_certificate_key: weir's automatic HTTPS would take over; add `tls` by hand");
                    t.set("tls", V::T(vec![("issuer".into(), V::s("internal"))]));
                }
            }
        }
        let server_name = names.first().copied().unwrap_or("");
        let port = group[0].port;
        let origin_host = if (port == 80 && !ssl) || (port == 443 && ssl) {
            "{scheme}://{host}".to_string()
        } else {
            format!("{{scheme}}://{{host}}:{port}")
        };
        let cx = Cx {
            g,
            reader,
            server_name,
            origin_host: &origin_host,
        };

        // The units: every location in weir's order, `/` last as the site's own handler.
        let mut order: Vec<&Loc> = Vec::new();
        let exact: Vec<&Loc> = s.locs.iter().filter(|l| l.m == Mod::Exact).collect();
        let mut prefixes: Vec<&Loc> = s
            .locs
            .iter()
            .filter(|l| matches!(l.m, Mod::Prefix | Mod::NoRegex))
            .collect();
        prefixes.sort_by_key(|l| std::cmp::Reverse(l.uri.len()));
        let regexes: Vec<&Loc> = s
            .locs
            .iter()
            .filter(|l| matches!(l.m, Mod::Regex { .. }))
            .collect();
        let shadowed = |l: &Loc| {
            prefixes.iter().any(|p| {
                p.m == Mod::Prefix && p.uri.len() > l.uri.len() && p.uri.starts_with(&l.uri)
            })
        };
        // Every `^~` goes before the regexes; one with plain prefixes under
        // it matches only the paths outside them (those are the regexes' first).
        let mut exclude: Vec<(&Loc, String)> = Vec::new();
        let early: Vec<&Loc> = prefixes
            .iter()
            .copied()
            .filter(|l| l.m == Mod::NoRegex)
            .collect();
        for l in &early {
            let under: Vec<&str> = prefixes
                .iter()
                .filter(|p| {
                    p.m == Mod::Prefix && p.uri.len() > l.uri.len() && p.uri.starts_with(&l.uri)
                })
                .map(|p| &p.uri[l.uri.len()..])
                .collect();
            if shadowed(l) {
                exclude.push((
                    *l,
                    format!("^{}{}", regex_escape(&l.uri), not_starting(&under)),
                ));
            }
        }
        order.extend(&exact);
        order.extend(&early);
        order.extend(&regexes);
        order.extend(prefixes.iter().copied().filter(|p| p.m == Mod::Prefix));
        let root_loc = order
            .iter()
            .position(|l| l.m == Mod::Prefix && l.uri == "/")
            .map(|i| order.remove(i));

        // PHP: a regex location with fastcgi_pass, folded into the site's `php`
        // when no other location could take a .php path before it in weir.
        let php_loc = regexes
            .iter()
            .copied()
            .find(|l| matches!(l.handler, H::FastCgi(_)));
        let fallback_scope = root_loc.map_or(&s.scope, |l| &l.scope);
        let fallback_tf = root_loc.map_or(s.try_files.as_ref(), |l| l.try_files.as_ref());
        let mut fold_php = false;
        if let Some(p) = php_loc {
            let last_regex = regexes.last().is_some_and(|l| std::ptr::eq(*l, p));
            let plain_others = prefixes.iter().any(|l| l.m == Mod::Prefix && l.uri != "/");
            let same_root = p.scope.root == fallback_scope.root;
            let fallback_static =
                root_loc.is_none_or(|l| matches!(l.handler, H::Static) && l.alias.is_none());
            fold_php = last_regex && !plain_others && same_root && fallback_static;
        }

        let plan = Plan {
            s,
            root_loc,
            php_loc,
            fold_php,
        };
        // The server's `rewrite` and `if` run in order before any location.
        let redirect_units = self.phase(&s.phase, None, &plan, &cx, report);

        // A server-level `return` answers every request the directives
        // before it leave, before any location.
        if let Some(r) = &s.ret
            && let Some((k, v)) = ret(r, &s.scope, &cx, report)
        {
            t.set(k, v);
            report.mapped(&r.at, r.text(), format!("site {k}"));
            for l in &s.locs {
                report.mapped(
                    &l.at,
                    format!("location {}", l.uri),
                    if redirect_units.iter().any(|u| u.handler.iter().any(|(k, _)| k == "rewrite")) {
                        "only through the server's rewrites: its return answers the rest (as in nginx)"
                    } else {
                        "never reached: the server's return answers first (as in nginx)"
                    },
                );
            }
            let mut out = vec![t];
            for mut u in redirect_units {
                if let Some((d, approx)) = u.fallback.take() {
                    // No location: nginx serves the file from the server's root.
                    if root_loc
                        .is_some_and(|l| !matches!(l.handler, H::Static) || l.alias.is_some())
                    {
                        report.none(&d.at, d.text(), "it reaches `location /`, which the server's return leaves unwritten: write the route by hand");
                        continue;
                    }
                    let sc = root_loc.map_or(&s.scope, |l| &l.scope);
                    u.handler
                        .insert(0, ("root".into(), root_of(sc, report, &d.at)));
                    u.filters = filters(sc, &cx, report, false);
                    let to = "route path_regex + rewrite, answered with the server's files";
                    match approx {
                        Some(a) => report.approx(&d.at, d.text(), to, a),
                        None => report.mapped(&d.at, d.text(), to),
                    }
                }
                out.push(route_table(&key, &u, false));
            }
            return out;
        }

        // Static settings of the site, read by every static route.
        let idx = s
            .scope
            .index
            .clone()
            .unwrap_or_else(|| vec!["index.html".into()]);
        let php_index: Vec<String> = idx
            .iter()
            .filter(|i| i.ends_with(".php"))
            .cloned()
            .collect();
        let html_index: Vec<String> = idx
            .iter()
            .filter(|i| !i.ends_with(".php"))
            .cloned()
            .collect();
        if html_index != ["index.html"] && !html_index.is_empty() {
            t.set("index", V::strs(html_index.clone()));
        }
        if s.scope.autoindex {
            t.set("browse", V::B(true));
        }
        if let Some(a) = &s.scope.access_log {
            t.set("access_log", a.clone());
        }
        if !s.scope.errors.is_empty()
            && let Some(root) = &s.scope.root
        {
            let e: Vec<(String, V)> = s
                .scope
                .errors
                .iter()
                .map(|(c, u)| (c.to_string(), V::S(format!("{root}{u}"))))
                .collect();
            t.set("errors", V::T(e));
        }
        let site_compress = compress(&s.scope);
        t.set("compress", site_compress.clone());

        let mut units: Vec<Unit> = Vec::new();
        for l in &order {
            if fold_php && php_loc.is_some_and(|p| std::ptr::eq(p, *l)) {
                report.mapped(
                    &l.at,
                    format!("location {} {}", modifier(l.m), l.uri),
                    "site php",
                );
                continue;
            }
            units.extend(self.phase(&l.phase, Some(l), &plan, &cx, report));
            let excl = exclude
                .iter()
                .find(|(e, _)| std::ptr::eq(*e, *l))
                .map(|(_, r)| r.clone());
            if let Some(u) = self.unit(l, &cx, report, php_loc.filter(|_| !fold_php), excl) {
                units.push(u);
            }
        }
        // `location /`'s own rewrites come after every other location's routes.
        if let Some(l) = root_loc {
            units.extend(self.phase(&l.phase, Some(l), &plan, &cx, report));
        }
        let fallback_php = php_loc.is_some()
            && (fold_php
                || !php_index.is_empty()
                || fallback_tf
                    .is_some_and(|tf| tf.args.last().is_some_and(|a| a.starts_with("/index.php"))));

        // The site's own handler.
        let mut fb_handler: Vec<(String, V)> = Vec::new();
        let mut fb_comment = format!("{}:{} server", s.at.file, s.at.line);
        let mut fb_route: Option<(Key, Vec<Key>)> = None;
        match root_loc.map(|l| &l.handler) {
            Some(H::Proxy(d)) => {
                let l = root_loc.unwrap();
                fb_comment = format!("{}:{} location /", l.at.file, l.at.line);
                if let Some((keys, pat)) = proxy(d, l, &cx, report) {
                    fb_handler.extend(keys.iter().filter(|(k, _)| k == "proxy").cloned());
                    // A path rewrite or request fields are a route's keys:
                    // the site keeps the proxy for validity, a last route
                    // `/` answers with all of them.
                    if pat.is_some() || keys.iter().any(|(k, _)| k != "proxy") {
                        let pat = pat.unwrap_or(("path".into(), V::s("/")));
                        fb_route = Some((pat, keys));
                    }
                }
            }
            Some(H::Return(d)) => {
                let l = root_loc.unwrap();
                fb_comment = format!("{}:{} location /", l.at.file, l.at.line);
                if let Some((k, v)) = ret(d, &l.scope, &cx, report) {
                    report.mapped(&d.at, d.text(), format!("site {k}"));
                    fb_handler.push((k.into(), v));
                }
            }
            Some(H::FastCgi(d)) => {
                let l = root_loc.unwrap();
                fb_comment = format!("{}:{} location /", l.at.file, l.at.line);
                fb_handler.push(("root".into(), root_of(&l.scope, report, &l.at)));
                fb_handler.push((
                    "fastcgi".into(),
                    fcgi_value(fastcgi_to(d, &cx, report), Vec::new()),
                ));
            }
            _ => {
                if let Some(l) = root_loc {
                    fb_comment = format!("{}:{} location /", l.at.file, l.at.line);
                    report.mapped(&l.at, "location /", "the site's own handler");
                }
                fb_handler.push(("root".into(), root_of(fallback_scope, report, &s.at)));
                if let Some(a) = root_loc.and_then(|l| l.alias.as_ref()) {
                    fb_handler[0].1 = V::s(a.trim_end_matches('/'));
                }
                if fallback_php {
                    let p = php_loc.unwrap();
                    let H::FastCgi(d) = &p.handler else {
                        unreachable!()
                    };
                    let to = fastcgi_to(d, &cx, report);
                    let front = fallback_tf
                        .and_then(|tf| tf.args.last())
                        .is_some_and(|a| a.starts_with("/index.php"));
                    let mut php = Vec::new();
                    if !front {
                        php.push(("front_controller".into(), V::s("")));
                    }
                    if !php_index.is_empty() && php_index != ["index.php"] {
                        php.push(("index".into(), V::strs(php_index.clone())));
                    }
                    path_info(&p.scope, front, report, &p.at);
                    only_some_scripts(p, report);
                    let env = fastcgi_env(&p.scope, report);
                    if !env.is_empty() {
                        php.push(("env".into(), V::T(env)));
                    }
                    fb_handler.push(("php".into(), fcgi_value(to, php)));
                    if let Some(tf) = fallback_tf {
                        report.mapped(
                            &tf.at,
                            tf.text(),
                            if front {
                                "php front_controller \"/index.php\""
                            } else {
                                "php with no front controller"
                            },
                        );
                    }
                } else if let Some(tf) = fallback_tf
                    && let Some(v) = try_files(tf, report)
                {
                    fb_handler.push(("try_files".into(), v));
                }
            }
        }
        let fb_filters = filters(
            fallback_scope,
            &cx,
            report,
            root_loc.is_some_and(|l| matches!(l.handler, H::Proxy(_))),
        );
        let fb_compress = compress(fallback_scope);

        let serves_files = fb_handler.iter().any(|(k, _)| k == "root")
            || units
                .iter()
                .any(|u| u.handler.iter().any(|(k, _)| k == "root"));
        if serves_files {
            report.baseline(
                "static files",
                "weir answers a directory asked without its slash with 308 and a relative Location (nginx: 301, absolute), adds `; charset=utf-8` to textual types, and refuses dot-files (.git, .env) nginx would serve (`serve_hidden = true` serves them)",
            );
        }
        // Internal rewrites that reach the site's own handler take its keys.
        let mut all_units: Vec<Unit> = Vec::new();
        for mut u in redirect_units.into_iter().chain(units) {
            if let Some((d, approx)) = u.fallback.take() {
                let keys = match &fb_route {
                    None => fb_handler.clone(),
                    Some((_, keys)) if !keys.iter().any(|(k, _)| k == "rewrite") => keys.clone(),
                    Some(_) => {
                        report.none(&d.at, d.text(), "it reaches `location /`, whose proxy_pass changes the path itself: weir rewrites a path once");
                        continue;
                    }
                };
                let mut handler: Vec<Key> =
                    keys.into_iter().filter(|(k, _)| k != "rewrite").collect();
                handler.extend(u.handler);
                u.handler = handler;
                u.filters = fb_filters.clone();
                u.compress = Some(fb_compress.clone());
                match approx {
                    Some(a) => report.approx(
                        &d.at,
                        d.text(),
                        "route path_regex + rewrite, answered by the site's own handler",
                        a,
                    ),
                    None => report.mapped(
                        &d.at,
                        d.text(),
                        "route path_regex + rewrite, answered by the site's own handler",
                    ),
                }
            }
            all_units.push(u);
        }
        // Redirects by `rewrite` run before nginx's access checks: they carry none.
        let uniform = !self.split_filters
            && all_units
                .iter()
                .filter(|u| u.compress.is_some())
                .all(|u| u.filters == fb_filters);
        let mut route_tables = Vec::new();
        for u in &all_units {
            let mut rt = route_table(&key, u, uniform);
            if let Some(c) = &u.compress
                && *c != site_compress
            {
                rt.set("compress", c.clone());
            }
            route_tables.push(rt);
        }
        for (k, v) in &fb_handler {
            t.set(k, v.clone());
        }
        if fb_compress != site_compress {
            t.set("compress", fb_compress.clone());
        }
        if uniform {
            for (k, v) in &fb_filters {
                t.set(k, v.clone());
            }
        }
        if let Some(((pk, pv), keys)) = &fb_route {
            let mut rt = Table::new(format!("{key}.route"), true);
            rt.comments.push(fb_comment.clone());
            rt.set(pk, pv.clone());
            for (k, v) in keys {
                rt.set(k, v.clone());
            }
            if !uniform {
                for (k, v) in &fb_filters {
                    rt.set(k, v.clone());
                }
            }
            route_tables.push(rt);
        } else if !uniform && !fb_filters.is_empty() {
            let mut rt = Table::new(format!("{key}.route"), true);
            rt.comments.push(format!("{fb_comment} (its own access rules and headers, which nginx does not add to the other locations')"));
            rt.set("path", V::s("/"));
            for (k, v) in fb_handler.iter().chain(fb_filters.iter()) {
                rt.set(k, v.clone());
            }
            route_tables.push(rt);
        }
        if t.get("root").is_some() && t.get("proxy").is_some() {
            t.keys.retain(|(k, _)| k != "root");
        }
        let mut out = vec![t];
        out.extend(route_tables);
        out
    }

    /// One location as a route.
    fn unit(
        &self,
        l: &Loc,
        cx: &Cx<'_>,
        report: &mut Report,
        php_loc: Option<&Loc>,
        exclude: Option<String>,
    ) -> Option<Unit> {
        let what = format!("location {} {}", modifier(l.m), l.uri).replace("  ", " ");
        let mut pattern = match l.m {
            Mod::Exact => (
                "path_regex".to_string(),
                V::S(format!("^{}$", regex_escape(&l.uri))),
            ),
            Mod::Prefix | Mod::NoRegex => ("path".to_string(), V::s(l.uri.clone())),
            Mod::Regex { ci } => {
                if let Some(why) = unsupported_regex(&l.uri) {
                    report.none(&l.at, what, format!("weir's regexes have no {why}"));
                    return None;
                }
                (
                    "path_regex".to_string(),
                    V::S(if ci {
                        format!("(?i){}", l.uri)
                    } else {
                        l.uri.clone()
                    }),
                )
            }
        };
        if let Some(re) = &exclude {
            pattern = ("path_regex".to_string(), V::s(re.clone()));
        }
        let mut handler = Vec::new();
        let is_proxy = matches!(l.handler, H::Proxy(_));
        match &l.handler {
            H::Return(d) => match ret(d, &l.scope, cx, report) {
                Some((k, v)) => {
                    report.mapped(&d.at, d.text(), format!("route {k}"));
                    handler.push((k.to_string(), v));
                }
                None => return None,
            },
            H::Proxy(d) => {
                let (keys, pat) = proxy(d, l, cx, report)?;
                handler = keys;
                if let Some(p) = pat {
                    if exclude.is_some() {
                        report.approx(&l.at, what.clone(), "route", "a plain location lies under it: weir sends the paths under that one here too");
                    }
                    pattern = p;
                }
            }
            H::FastCgi(d) => {
                let to = fastcgi_to(d, cx, report);
                handler.push(("root".into(), root_of(&l.scope, report, &l.at)));
                let is_php = php_loc.is_some_and(|p| std::ptr::eq(p, l)) || l.uri.contains("php");
                if is_php {
                    path_info(&l.scope, false, report, &l.at);
                }
                let env = fastcgi_env(&l.scope, report);
                let extra = if env.is_empty() {
                    Vec::new()
                } else {
                    vec![("env".into(), V::T(env))]
                };
                let v = fcgi_value(to, extra);
                handler.push((if is_php { "php" } else { "fastcgi" }.into(), v));
            }
            H::Static => {
                let denies_all = l
                    .scope
                    .access
                    .first()
                    .is_some_and(|(allow, a)| !allow && a == "all")
                    && l.scope.access.len() == 1;
                if denies_all {
                    handler.push(("respond".into(), V::I(403)));
                } else {
                    match &l.alias {
                        Some(a) => {
                            handler.push(("root".into(), V::s(a.trim_end_matches('/'))));
                            match l.m {
                                Mod::Prefix | Mod::NoRegex if exclude.is_none() => handler.push(("strip_prefix".into(), V::B(true))),
                                _ => report.none(&l.at, format!("alias {a}"), "alias in a regex or exact location: write the route's `rewrite` by hand"),
                            }
                        }
                        None => handler.push(("root".into(), root_of(&l.scope, report, &l.at))),
                    }
                    if let Some(tf) = &l.try_files
                        && let Some(v) = try_files(tf, report)
                    {
                        handler.push(("try_files".into(), v));
                    }
                }
            }
        }
        report.mapped(&l.at, what.clone(), "route");
        let mut filters = filters(&l.scope, cx, report, is_proxy);
        if handler
            .iter()
            .any(|(k, v)| k == "respond" && *v == V::I(403))
        {
            filters.retain(|(k, _)| k != "deny" && k != "allow");
        }
        Some(Unit {
            comment: format!("{}:{} {}", l.at.file, l.at.line, what),
            pattern: Some(pattern),
            handler,
            filters,
            compress: Some(compress(&l.scope)),
            fallback: None,
        })
    }
}

/// Most copies of a site written for the values of its maps.
const MAX_VARIANTS: usize = 64;

/// Keys of a site that no route takes.
const SITE_ONLY: &[&str] = &[
    "listen",
    "default",
    "tls",
    "index",
    "browse",
    "access_log",
    "errors",
    "http_redirect",
];

/// A copy of a site written for one value of its maps, as routes under
/// that value's condition (the copy's own handler last).
fn as_routes(tables: Vec<Table>, cond: &rewrite::Cond, key: &str) -> Vec<Table> {
    let mut it = tables.into_iter();
    let Some(site) = it.next() else {
        return Vec::new();
    };
    let mut own = Table::new(format!("{key}.route"), true);
    own.comments = site.comments.clone();
    own.keys = site
        .keys
        .into_iter()
        .filter(|(k, _)| !SITE_ONLY.contains(&k.as_str()))
        .collect();
    let mut out: Vec<Table> = it.collect();
    if own.keys.iter().any(|(k, _)| k != "compress") {
        out.push(own);
    }
    out.into_iter().filter_map(|t| under(t, cond)).collect()
}

/// A route of a map's copy, narrowed to the value's condition; `None`
/// when no request meets both.
fn under(mut t: Table, cond: &rewrite::Cond) -> Option<Table> {
    let mine = match t.get("match") {
        Some(V::T(m)) => rewrite::Cond {
            matches: m.clone(),
            ..rewrite::Cond::default()
        },
        _ => rewrite::Cond::default(),
    };
    let both = mine.and(&rewrite::Cond {
        path_regex: None,
        ..cond.clone()
    })?;
    if let Some(re) = &cond.path_regex {
        // A path the value holds for: the route's own path must allow it.
        let exact = re
            .strip_prefix("(?i)")
            .unwrap_or(re)
            .strip_prefix('^')
            .and_then(|r| r.strip_suffix('$'))
            .map(unescape)
            .filter(|p| !p.contains(['(', '[', '*', '+', '?', '|']));
        match (t.get("path").cloned(), t.get("path_regex").cloned(), exact) {
            (None, None, _) => t.set("path_regex", V::s(re.clone())),
            (Some(V::S(p)), _, Some(e)) => {
                if !e.starts_with(p.trim_end_matches('*')) {
                    return None;
                }
                t.keys.retain(|(k, _)| k != "path");
                t.set("path_regex", V::s(re.clone()));
            }
            (_, Some(V::S(r)), Some(e)) => {
                let caps = regex_lite::Regex::new(&r).ok()?.captures(&e).map(|c| {
                    c.iter()
                        .map(|m| m.map_or(String::new(), |m| m.as_str().to_string()))
                        .collect::<Vec<_>>()
                })?;
                for (_, v) in t.keys.iter_mut() {
                    fill_groups(v, &caps);
                }
                t.set("path_regex", V::s(re.clone()));
            }
            _ => return None,
        }
    }
    t.comments.push(format!("when {}", cond_text(cond)));
    if !both.matches.is_empty() {
        t.set("match", V::T(both.matches));
    }
    Some(t)
}

/// A regex-escaped literal, unescaped.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if c == '\\' && !esc {
            esc = true;
            continue;
        }
        esc = false;
        out.push(c);
    }
    out
}

/// `{1}`… in a route's values, filled with what the path matched.
fn fill_groups(v: &mut V, caps: &[String]) {
    match v {
        V::S(s) => {
            for (i, c) in caps.iter().enumerate().skip(1).take(9) {
                *s = s.replace(&format!("{{{i}}}"), c);
            }
        }
        V::A(a) => a.iter_mut().for_each(|x| fill_groups(x, caps)),
        V::T(t) => t.iter_mut().for_each(|(_, x)| fill_groups(x, caps)),
        _ => {}
    }
}

/// A condition as the output's comments say it.
fn cond_text(c: &rewrite::Cond) -> String {
    let mut parts = Vec::new();
    if let Some(re) = &c.path_regex {
        parts.push(format!("the path matches {re}"));
    }
    for (k, v) in &c.matches {
        parts.push(format!("{k} {}", crate::toml::inline(v)));
    }
    parts.join(" and ")
}

/// A unit as a route table (its filters too unless the site holds them).
fn route_table(key: &str, u: &Unit, uniform: bool) -> Table {
    let mut rt = Table::new(format!("{key}.route"), true);
    rt.comments.push(u.comment.clone());
    if let Some((k, v)) = &u.pattern {
        rt.set(k, v.clone());
    }
    for (k, v) in &u.handler {
        rt.set(k, v.clone());
    }
    if !uniform {
        for (k, v) in &u.filters {
            rt.set(k, v.clone());
        }
    }
    rt
}

/// `if (…) { … }` or the directive, as the report names it.
fn if_text(d: &Directive) -> String {
    if d.name == "if" {
        format!("if {} {{ … }}", d.args.join(" "))
    } else {
        d.text()
    }
}

/// Whether a `rewrite` is a redirect (its replacement a URL, or its flag
/// `redirect` or `permanent`).
fn is_redirect(d: &Directive) -> bool {
    matches!(d.arg(2), "redirect" | "permanent")
        || d.arg(1).starts_with("http://")
        || d.arg(1).starts_with("https://")
        || d.arg(1).starts_with("$scheme")
}

/// How a server's locations were laid out, for the locations an internal
/// rewrite reaches.
struct Plan<'a> {
    s: &'a Server,
    root_loc: Option<&'a Loc>,
    php_loc: Option<&'a Loc>,
    fold_php: bool,
}

/// Where a rewritten URI is answered.
enum Dest<'a> {
    Loc(&'a Loc),
    /// The site's own handler (`location /`, or no location at all).
    Fallback,
}

impl<'a> Plan<'a> {
    fn dest(&self, l: &'a Loc) -> Dest<'a> {
        let is = |o: Option<&Loc>| o.is_some_and(|o| std::ptr::eq(o, l));
        if is(self.root_loc) || (self.fold_php && is(self.php_loc)) {
            Dest::Fallback
        } else {
            Dest::Loc(l)
        }
    }

    /// The location nginx picks for a rewritten URI (`repl`, nginx's
    /// spelling), when every URI the replacement can make lands in the same one.
    fn resolve(&self, repl: &str) -> Result<Dest<'a>, String> {
        let path = repl.split('?').next().unwrap_or("");
        if !path.starts_with('/') {
            return Err("the new URI's location depends on the captured text".into());
        }
        let locs = &self.s.locs;
        let prefixes = || {
            locs.iter()
                .filter(|l| matches!(l.m, Mod::Prefix | Mod::NoRegex))
        };
        if !path.contains('$') {
            if let Some(l) = locs.iter().find(|l| l.m == Mod::Exact && l.uri == path) {
                return Ok(self.dest(l));
            }
            let best = prefixes()
                .filter(|l| path.starts_with(&l.uri))
                .max_by_key(|l| l.uri.len());
            if let Some(l) = best
                && l.m == Mod::NoRegex
            {
                return Ok(self.dest(l));
            }
            for l in locs.iter().filter(|l| matches!(l.m, Mod::Regex { .. })) {
                let Mod::Regex { ci } = l.m else { continue };
                let re = if ci {
                    format!("(?i){}", l.uri)
                } else {
                    l.uri.clone()
                };
                let re = regex_lite::Regex::new(&re)
                    .map_err(|_| format!("`location ~ {}` is not a regex weir reads", l.uri))?;
                if re.is_match(path) {
                    return Ok(self.dest(l));
                }
            }
            return Ok(best.map_or(Dest::Fallback, |l| self.dest(l)));
        }
        let lit = &path[..path.find('$').unwrap_or(path.len())];
        let ambiguous = "the new URI's location depends on the captured text";
        if locs.iter().any(|l| {
            matches!(l.m, Mod::Exact | Mod::Prefix | Mod::NoRegex)
                && l.uri.len() > lit.len()
                && l.uri.starts_with(lit)
        }) {
            return Err(ambiguous.into());
        }
        let best = prefixes()
            .filter(|l| lit.starts_with(&l.uri))
            .max_by_key(|l| l.uri.len());
        if let Some(l) = best
            && l.m == Mod::NoRegex
        {
            return Ok(self.dest(l));
        }
        if locs.iter().any(|l| matches!(l.m, Mod::Regex { .. })) {
            return Err(format!("{ambiguous} (a regex location could match it)"));
        }
        Ok(best.map_or(Dest::Fallback, |l| self.dest(l)))
    }
}

/// A location's own path match, as a route's.
fn loc_pattern(l: &Loc) -> (String, V) {
    match l.m {
        Mod::Exact => (
            "path_regex".to_string(),
            V::S(format!("^{}$", regex_escape(&l.uri))),
        ),
        Mod::Prefix | Mod::NoRegex => ("path".to_string(), V::s(l.uri.clone())),
        Mod::Regex { ci } => (
            "path_regex".to_string(),
            V::S(if ci {
                format!("(?i){}", l.uri)
            } else {
                l.uri.clone()
            }),
        ),
    }
}

/// Whether every path `re` matches is one `l` matches.
fn within(re: &str, l: &Loc) -> bool {
    match l.m {
        Mod::Prefix | Mod::NoRegex => {
            l.uri == "/" || rewrite::literal_prefix(re).is_some_and(|p| p.starts_with(&l.uri))
        }
        Mod::Regex { ci } => {
            let own = if ci {
                format!("(?i){}", l.uri)
            } else {
                l.uri.clone()
            };
            re == own
        }
        Mod::Exact => re == format!("^{}$", regex_escape(&l.uri)),
    }
}

impl Sites {
    /// Routes for the `rewrite` and `if` directives of a server (`loc`
    /// `None`) or of a location, in order: the first that acts answers, as
    /// in nginx's rewrite phase.
    fn phase(
        &self,
        dirs: &[Directive],
        loc: Option<&Loc>,
        plan: &Plan<'_>,
        cx: &Cx<'_>,
        report: &mut Report,
    ) -> Vec<Unit> {
        let mut out = Vec::new();
        // nginx's add_header and expires apply to these redirects and
        // returns too (the output filters run after the rewrite phase).
        let answer_filters: Vec<(String, V)> =
            response_headers(loc.map_or(&plan.s.scope, |l| &l.scope), cx, None)
                .map(|rh| ("response_headers".to_string(), rh))
                .into_iter()
                .collect();
        for (i, d) in dirs.iter().enumerate() {
            let last = i + 1 == dirs.len();
            if d.name == "rewrite" {
                if is_redirect(d) {
                    if let Some(mut u) = rewrite_redirect(d, cx, report) {
                        u.filters = answer_filters.clone();
                        if let Some(l) = loc
                            && !within(d.arg(0), l)
                        {
                            // Inside a location, the rewrite sees that location's paths only.
                            u.pattern = Some(loc_pattern(l));
                            report.none(&d.at, d.text(), format!("its regex also matches paths outside `location {} {}`: weir's route cannot test both", modifier(l.m), l.uri));
                            continue;
                        }
                        out.push(u);
                    }
                } else if let Some(u) =
                    self.internal(d, loc, &rewrite::Cond::default(), last, plan, cx, report)
                {
                    out.push(u);
                }
                continue;
            }
            // `if`
            let what = if_text(d);
            let test = match rewrite::if_test(&rewrite::if_args(d)) {
                Ok(t) => t,
                Err(why) => {
                    report.none(&d.at, what, why);
                    continue;
                }
            };
            let cond = match test {
                rewrite::Test::Never => {
                    report.mapped(&d.at, what, "never true here: nothing to write");
                    continue;
                }
                rewrite::Test::Always => rewrite::Cond::default(),
                rewrite::Test::When(c) => c,
            };
            let body = d.block.clone().unwrap_or_default();
            let [inner] = body.as_slice() else {
                report.none(&d.at, what, "weir writes an `if` holding one `return` or `rewrite` only: write the route by hand");
                continue;
            };
            let mut u = match inner.name.as_str() {
                "return" => match ret(inner, loc.map_or(&plan.s.scope, |l| &l.scope), cx, report) {
                    Some((k, v)) => Unit {
                        comment: format!("{}:{} {}", d.at.file, d.at.line, what),
                        pattern: None,
                        handler: vec![(k.to_string(), v)],
                        filters: answer_filters.clone(),
                        compress: None,
                        fallback: None,
                    },
                    None => continue,
                },
                "rewrite" if is_redirect(inner) => match rewrite_redirect(inner, cx, report) {
                    Some(_)
                        if cond.path_regex.is_some()
                            || loc.is_some_and(|l| !within(inner.arg(0), l)) =>
                    {
                        report.none(&d.at, what, "a rewrite's regex and the condition's (or its location's) path match together: weir's route has one");
                        continue;
                    }
                    Some(u) => Unit {
                        filters: answer_filters.clone(),
                        ..u
                    },
                    None => continue,
                },
                "rewrite" => match self.internal(inner, loc, &cond, true, plan, cx, report) {
                    Some(u) => u,
                    None => continue,
                },
                _ => {
                    report.none(
                        &d.at,
                        what,
                        format!(
                            "weir writes an `if` holding one `return` or `rewrite` only, not `{}`",
                            inner.name
                        ),
                    );
                    continue;
                }
            };
            // The route's path: the rewrite's, the condition's or the location's.
            if u.pattern.is_none() {
                u.pattern = match (&cond.path_regex, loc) {
                    (Some(re), None) => Some(("path_regex".into(), V::s(re.clone()))),
                    (Some(re), Some(l)) if l.m == Mod::Prefix && l.uri == "/" => {
                        Some(("path_regex".into(), V::s(re.clone())))
                    }
                    (Some(_), Some(l)) => {
                        report.none(&d.at, what, format!("a path condition inside `location {} {}`: weir's route has one path match", modifier(l.m), l.uri));
                        continue;
                    }
                    (None, Some(l)) => Some(loc_pattern(l)),
                    (None, None) if cond.matches.is_empty() => Some(("path".into(), V::s("/"))),
                    (None, None) => None,
                };
            }
            if !cond.matches.is_empty() && !u.handler.iter().any(|(k, _)| k == "match") {
                u.handler
                    .insert(0, ("match".into(), V::T(cond.matches.clone())));
            }
            match &cond.approx {
                Some(a) => report.approx(&d.at, what, "route with `match`", a.clone()),
                None => report.mapped(&d.at, what, "route with `match`"),
            }
            out.push(u);
        }
        out
    }

    /// An internal `rewrite` (`last`, `break` or no flag) as a route that
    /// rewrites the path and answers as the location nginx ends up in.
    #[allow(clippy::too_many_arguments)]
    fn internal(
        &self,
        d: &Directive,
        loc: Option<&Loc>,
        cond: &rewrite::Cond,
        last: bool,
        plan: &Plan<'_>,
        cx: &Cx<'_>,
        report: &mut Report,
    ) -> Option<Unit> {
        let (re, repl, flag) = (d.arg(0), d.arg(1), d.arg(2));
        let fail = |report: &mut Report, why: String| {
            report.none(&d.at, d.text(), why);
            None
        };
        if !matches!(flag, "" | "last" | "break") {
            return fail(report, format!("`{flag}` is not a flag of rewrite"));
        }
        if let Some(why) = unsupported_regex(re) {
            return fail(report, format!("weir's regexes have no {why}"));
        }
        if re.contains("(?<") || re.contains("(?P<") {
            return fail(
                report,
                "named captures: weir's rewrite takes {1}…{9}".into(),
            );
        }
        if flag.is_empty() && !last {
            return fail(report, "without a flag nginx goes on to the next directive with the new URI: weir rewrites a path once".into());
        }
        if cond.path_regex.is_some() {
            return fail(report, "the condition's path match and the rewrite's regex together: weir's route has one path match".into());
        }
        if let Some(l) = loc
            && !within(re, l)
        {
            return fail(
                report,
                format!(
                    "its regex also matches paths outside `location {} {}`: weir's route cannot test both",
                    modifier(l.m),
                    l.uri
                ),
            );
        }
        let (template, approx) = match rewrite::rewrite_template(repl, cx.server_name) {
            Ok(t) => t,
            Err(why) => return fail(report, format!("{why} has no weir placeholder")),
        };
        // `^(/a/…)…` → `$1…`: the new path starts with the group's fixed start.
        let mut known = repl.to_string();
        if let Some(rest) = repl.strip_prefix("$1")
            && let Some(group) = re.strip_prefix("^(")
            && let Some(lit) = rewrite::literal_prefix(&format!("^{group}"))
            && lit.starts_with('/')
        {
            known = format!("{lit}$1{rest}");
        }
        let dest = match (loc, flag) {
            (Some(l), "break") => Ok(plan.dest(l)),
            _ => plan.resolve(&known),
        };
        let dest = match dest {
            Ok(x) => x,
            Err(why) => return fail(report, why),
        };
        let mut handler = Vec::new();
        if !cond.matches.is_empty() {
            handler.push(("match".to_string(), V::T(cond.matches.clone())));
        }
        let comment = format!("{}:{} {}", d.at.file, d.at.line, d.text());
        let pattern = Some(("path_regex".to_string(), V::s(re)));
        let Dest::Loc(t) = dest else {
            handler.push(("rewrite".into(), V::S(template)));
            return Some(Unit {
                comment,
                pattern,
                handler,
                filters: Vec::new(),
                compress: None,
                fallback: Some((d.clone(), approx)),
            });
        };
        let same = loc.is_some_and(|l| std::ptr::eq(l, t));
        if !t.phase.is_empty() && !same {
            return fail(
                report,
                format!(
                    "it reaches `location {} {}`, which has rewrites of its own: weir rewrites a path once",
                    modifier(t.m),
                    t.uri
                ),
            );
        }
        let mut scratch = Report::default();
        let php = plan.php_loc.filter(|_| !plan.fold_php);
        // `break` ends the rewrite directives, the location's `return` among
        // them: its files answer.
        let mut content = t.clone();
        if same && flag == "break" && matches!(t.handler, H::Return(_)) {
            content.handler = H::Static;
        }
        let Some(u) = self.unit(&content, cx, &mut scratch, php, None) else {
            return fail(
                report,
                format!(
                    "`location {} {}`, which it reaches, is not written (see its own line)",
                    modifier(t.m),
                    t.uri
                ),
            );
        };
        if u.handler.iter().any(|(k, _)| k == "strip_prefix") {
            return fail(
                report,
                format!(
                    "it reaches `location {} {}`, whose alias maps the path itself: weir rewrites a path once",
                    modifier(t.m),
                    t.uri
                ),
            );
        }
        let own_rewrite = u.handler.iter().any(|(k, _)| k == "rewrite");
        if own_rewrite && !(same && flag == "break") {
            return fail(
                report,
                format!(
                    "it reaches `location {} {}`, whose proxy_pass URI changes the path itself: weir rewrites a path once",
                    modifier(t.m),
                    t.uri
                ),
            );
        }
        // After `break`, nginx passes the rewritten URI whole, ignoring proxy_pass's URI.
        handler.extend(u.handler.into_iter().filter(|(k, _)| k != "rewrite"));
        handler.push(("rewrite".into(), V::S(template)));
        let to = if same {
            "route path_regex + rewrite, answered here".to_string()
        } else {
            format!(
                "route path_regex + rewrite, answered as `location {} {}`",
                modifier(t.m),
                t.uri
            )
            .replace("  ", " ")
        };
        match approx {
            Some(a) => report.approx(&d.at, d.text(), to, a),
            None => report.mapped(&d.at, d.text(), to),
        }
        Some(Unit {
            comment,
            pattern,
            handler,
            filters: u.filters,
            compress: u.compress,
            fallback: None,
        })
    }
}

/// What a site or route needs to know about its server.
struct Cx<'a> {
    g: &'a Globals,
    reader: &'a Reader,
    server_name: &'a str,
    /// `{scheme}://{host}[:port]`: nginx makes relative redirects absolute with it.
    origin_host: &'a str,
}

fn modifier(m: Mod) -> &'static str {
    match m {
        Mod::Exact => "=",
        Mod::Prefix => "",
        Mod::NoRegex => "^~",
        Mod::Regex { ci: false } => "~",
        Mod::Regex { ci: true } => "~*",
    }
}

/// A regex for the rest of a path that starts with none of `under`
/// (none of them empty): regex-lite has no look-ahead, so it is spelt out
/// one character at a time.
fn not_starting(under: &[&str]) -> String {
    let mut firsts: Vec<char> = under.iter().filter_map(|u| u.chars().next()).collect();
    firsts.sort_unstable();
    firsts.dedup();
    let class: String = firsts
        .iter()
        .map(|c| {
            if "\\]^-[".contains(*c) {
                format!("\\{c}")
            } else {
                c.to_string()
            }
        })
        .collect();
    let mut alts = vec!["$".to_string(), format!("[^{class}]")];
    for c in firsts {
        let rest: Vec<&str> = under.iter().filter_map(|u| u.strip_prefix(c)).collect();
        if rest.iter().any(|r| r.is_empty()) {
            continue;
        }
        alts.push(format!(
            "{}{}",
            regex_escape(&c.to_string()),
            not_starting(&rest)
        ));
    }
    format!("(?:{})", alts.join("|"))
}

fn location(
    d: &Directive,
    parent: &Scope,
    out: &mut Vec<Loc>,
    report: &mut Report,
    reader: &Reader,
    nested: bool,
) {
    let (m, uri) = match (d.arg(0), d.args.len()) {
        ("=", 2) => (Mod::Exact, d.arg(1)),
        ("^~", 2) => (Mod::NoRegex, d.arg(1)),
        ("~", 2) => (Mod::Regex { ci: false }, d.arg(1)),
        ("~*", 2) => (Mod::Regex { ci: true }, d.arg(1)),
        (u, 1) if u.starts_with('@') => {
            report.none(&d.at, format!("location {u}"), "weir has no named locations: a try_files or error_page that ends in one is not carried over");
            return;
        }
        (u, 1) if u.starts_with('=') => (Mod::Exact, &u[1..]),
        (u, 1) if u.starts_with("~*") => (Mod::Regex { ci: true }, &u[2..]),
        (u, 1) if u.starts_with('~') => (Mod::Regex { ci: false }, &u[1..]),
        (u, 1) => (Mod::Prefix, u),
        _ => {
            report.none(&d.at, d.text(), "not a location weir import reads");
            return;
        }
    };
    // nginx compares a prefix with the path as it is: one not starting with
    // `/` (`^~/x` written without its space) matches no request.
    if !matches!(m, Mod::Regex { .. }) && !uri.starts_with('/') {
        report.mapped(
            &d.at,
            d.text(),
            "nothing: nginx reads it as a prefix no request path has (a path starts with `/`)",
        );
        return;
    }
    if nested {
        report.approx(
            &d.at,
            format!("location {} {}", modifier(m), uri),
            "route",
            "nested location: written as a route of its own, in nginx's order among the others",
        );
    }
    let mut l = Loc {
        m,
        uri: uri.to_string(),
        at: d.at.clone(),
        scope: parent.child(),
        handler: H::Static,
        try_files: None,
        alias: None,
        phase: Vec::new(),
    };
    let mut seen = Seen::default();
    let mut nested_locs = Vec::new();
    let mut rets = None;
    let mut sets = Vec::new();
    for x in d.block.iter().flatten() {
        match x.name.as_str() {
            "proxy_pass" => l.handler = H::Proxy(x.clone()),
            "fastcgi_pass" => l.handler = H::FastCgi(x.clone()),
            "return" => {
                if rets.is_none() {
                    rets = Some(x.clone());
                } else {
                    report.mapped(
                        &x.at,
                        x.text(),
                        "never reached: a return comes first (as in nginx)",
                    );
                }
            }
            "rewrite" | "if" => {
                if rets.is_none() {
                    l.phase.push(x.clone());
                } else {
                    report.mapped(
                        &x.at,
                        if_text(x),
                        "never reached: a return comes first (as in nginx)",
                    );
                }
            }
            "try_files" => l.try_files = Some(x.clone()),
            "alias" => {
                l.alias = Some(x.arg(0).to_string());
                report.mapped(&x.at, x.text(), "route root with strip_prefix");
            }
            "location" => nested_locs.push(x.clone()),
            "internal" => report.approx(
                &x.at,
                x.text(),
                "route",
                "weir has no internal-only routes: clients can request it",
            ),
            "set" => sets.push(x.clone()),
            "include" => {}
            _ => l.scope.apply(x, &mut seen, report, reader, Level::Location),
        }
    }
    if let Some(r) = rets {
        l.handler = H::Return(r);
    }
    let fcgi = matches!(l.handler, H::FastCgi(_));
    for x in sets {
        if fcgi && x.arg(1).contains("$fastcgi_path_info") {
            report.mapped(&x.at, x.text(), "php (weir passes PATH_INFO itself)");
        } else {
            report.none(&x.at, x.text(), "weir has no variables");
        }
    }
    if fcgi && let Some(tf) = l.try_files.take() {
        if tf.arg(0) == "$fastcgi_script_name" || tf.arg(0) == "$uri" {
            report.mapped(
                &tf.at,
                tf.text(),
                "php (weir runs a script only if it exists under the root)",
            );
        } else {
            report.none(
                &tf.at,
                tf.text(),
                "weir's php decides which script runs itself",
            );
        }
    }
    let scope = l.scope.clone();
    out.push(l);
    for n in &nested_locs {
        location(n, &scope, out, report, reader, true);
    }
}

/// `return` as a site's or route's `redirect` or `respond`.
fn ret(d: &Directive, sc: &Scope, cx: &Cx<'_>, report: &mut Report) -> Option<(&'static str, V)> {
    let (code, arg) = match d.arg(0).parse::<u16>() {
        Ok(c) => (c, d.args.get(1).cloned()),
        Err(_) => (302, d.args.first().cloned()),
    };
    if matches!(code, 301 | 302 | 303 | 307 | 308) {
        let url = arg.unwrap_or_default();
        // A relative URL is made absolute as nginx's absolute_redirect does.
        let origin = if url.starts_with('/') {
            cx.origin_host
        } else {
            ""
        };
        return match scope::template(&url, cx.server_name) {
            Ok(to) => Some((
                "redirect",
                V::T(vec![
                    ("to".into(), V::S(format!("{origin}{to}"))),
                    ("status".into(), V::I(code as i64)),
                ]),
            )),
            Err(why) => {
                report.none(&d.at, d.text(), format!("{why} has no weir placeholder"));
                None
            }
        };
    }
    if code == 444 {
        report.approx(
            &d.at,
            d.text(),
            "respond = 444",
            "weir answers with status 444 rather than closing the connection",
        );
    }
    match arg {
        None => Some(("respond", V::I(code as i64))),
        Some(text) if !text.contains('$') => {
            let ct = sc
                .default_type
                .clone()
                .unwrap_or_else(|| "text/plain".into());
            report.approx(
                &d.at,
                d.text(),
                "respond",
                format!("nginx names the answer's type from the request's extension (`/x.html`: text/html), else default_type; weir always sends {ct}"),
            );
            Some((
                "respond",
                V::T(vec![
                    ("status".into(), V::I(code as i64)),
                    ("body".into(), V::S(text)),
                    ("content_type".into(), V::S(ct)),
                ]),
            ))
        }
        Some(_) => {
            report.none(
                &d.at,
                d.text(),
                "weir's respond bodies are fixed text, not variables",
            );
            None
        }
    }
}

/// `rewrite REGEX URL redirect|permanent` as a route of its own.
fn rewrite_redirect(d: &Directive, cx: &Cx<'_>, report: &mut Report) -> Option<Unit> {
    let (re, repl) = (d.arg(0), d.arg(1));
    if let Some(why) = unsupported_regex(re) {
        report.none(&d.at, d.text(), format!("weir's regexes have no {why}"));
        return None;
    }
    let status = if d.arg(2) == "permanent" { 301 } else { 302 };
    let (repl, keep_args) = match repl.strip_suffix('?') {
        Some(r) => (r.to_string(), false),
        None => (repl.to_string(), true),
    };
    let origin = if repl.starts_with('/') {
        cx.origin_host
    } else {
        ""
    };
    let mut url = repl.clone();
    if keep_args {
        if url.contains('?') {
            report.approx(
                &d.at,
                d.text(),
                "route redirect",
                "the request's own query is not appended after the new one",
            );
        } else {
            url.push_str("$is_args$args");
        }
    }
    match scope::template(&url, cx.server_name) {
        Ok(to) => {
            report.mapped(&d.at, d.text(), "route path_regex + redirect");
            Some(Unit {
                comment: format!("{}:{} {}", d.at.file, d.at.line, d.text()),
                pattern: Some(("path_regex".into(), V::s(re))),
                handler: vec![(
                    "redirect".into(),
                    V::T(vec![
                        ("to".into(), V::S(format!("{origin}{to}"))),
                        ("status".into(), V::I(status)),
                    ]),
                )],
                filters: Vec::new(),
                compress: None,
                fallback: None,
            })
        }
        Err(why) => {
            report.none(&d.at, d.text(), format!("{why} has no weir placeholder"));
            None
        }
    }
}

fn root_of(sc: &Scope, report: &mut Report, at: &Origin) -> V {
    match &sc.root {
        Some(r) => V::s(r.clone()),
        None => {
            report.approx(at, "(no root: nginx's default)", "root", "no root in force: nginx serves its prefix's html directory; written as Debian's /usr/share/nginx/html");
            V::s("/usr/share/nginx/html")
        }
    }
}

fn try_files(d: &Directive, report: &mut Report) -> Option<V> {
    let a: Vec<&str> = d.args.iter().map(String::as_str).collect();
    if a == ["$uri", "$uri/", "=404"] {
        report.mapped(&d.at, d.text(), "weir's static default");
        return None;
    }
    let mut out = Vec::new();
    for x in &a {
        if x.starts_with('@') {
            report.none(
                &d.at,
                d.text(),
                "weir's try_files ends in a file or a status, not a named location",
            );
            return None;
        }
        if x.starts_with('=') {
            out.push(V::s(*x));
            continue;
        }
        let p = x.replace("$uri", "{path}");
        if p.contains('$') {
            report.none(
                &d.at,
                d.text(),
                "weir's try_files knows `{path}` ($uri) only",
            );
            return None;
        }
        out.push(V::S(p));
    }
    if a.len() >= 2 && a[..2] == ["$uri", "=404"] {
        report.approx(
            &d.at,
            d.text(),
            "try_files",
            "weir serves a directory's index for {path}; nginx answers 404 for a directory here",
        );
    } else {
        report.mapped(&d.at, d.text(), "try_files");
    }
    Some(V::A(out))
}

fn fastcgi_to(d: &Directive, cx: &Cx<'_>, report: &mut Report) -> V {
    let a = d.arg(0);
    report.mapped(&d.at, d.text(), "php");
    if let Some(u) = cx.g.upstreams.get(a) {
        return upstream_list(u);
    }
    let addr = upstream_addr(a);
    if !addr.starts_with("unix:")
        && addr
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_err())
    {
        report.refuse(&d.at, format!("invalid port in upstream \"{a}\""));
    }
    V::s(addr)
}

/// `php`/`fastcgi` as weir writes it: the address alone when it is one
/// and nothing else is set, else a table with `to`.
pub fn fcgi_value(to: V, mut extra: Vec<(String, V)>) -> V {
    let to = match to {
        V::A(mut a) if a.len() == 1 => a.remove(0),
        other => other,
    };
    if extra.is_empty() && matches!(to, V::S(_)) {
        return to;
    }
    extra.insert(0, ("to".into(), to));
    V::T(extra)
}

/// How weir's `PATH_INFO` differs from what the location's fastcgi_params
/// send (`front`: a front controller answers paths that name no file).
fn path_info(sc: &Scope, front: bool, report: &mut Report, at: &Origin) {
    let sent = sc.fastcgi_params.iter().any(|(k, _, _)| k == "PATH_INFO");
    if !sent {
        report.approx(at, "(fastcgi_params: PATH_INFO)", "php", "nginx's fastcgi_params here send no PATH_INFO; weir sends one: empty when the path names the script, and the request's path when the front controller answers (as Caddy's php_fastcgi; WordPress and Laravel route from REQUEST_URI either way); without fastcgi_split_path_info nginx's SCRIPT_NAME is the whole path (`/index.php/x`), weir's the script's (`/index.php`)");
    } else if front {
        report.approx(at, "(fastcgi_params: PATH_INFO)", "php", "the front controller gets the request's path as PATH_INFO from weir; from nginx, after try_files … /index.php, an empty one");
    }
}

/// A PHP location whose regex names some scripts only (Laravel's
/// `^/index\.php(/|$)`): nginx serves other `.php` files as they are,
/// weir's `php` runs every script under the root.
fn only_some_scripts(l: &Loc, report: &mut Report) {
    let Mod::Regex { ci } = l.m else { return };
    let re = regex_lite::RegexBuilder::new(&l.uri)
        .case_insensitive(ci)
        .build();
    if re.is_ok_and(|re| !re.is_match("/other.php")) {
        report.approx(
            &l.at,
            format!("location {} {} (other .php files)", modifier(l.m), l.uri),
            "php",
            "weir runs every `.php` script under the root; nginx runs only those this location's regex names and serves the others as files (their source)",
        );
    }
}

/// fastcgi_param beyond the CGI variables weir sets itself, as `env`.
fn fastcgi_env(sc: &Scope, report: &mut Report) -> Vec<(String, V)> {
    const BUILT_IN: &[&str] = &[
        "SCRIPT_FILENAME",
        "QUERY_STRING",
        "REQUEST_METHOD",
        "CONTENT_TYPE",
        "CONTENT_LENGTH",
        "SCRIPT_NAME",
        "REQUEST_URI",
        "DOCUMENT_URI",
        "DOCUMENT_ROOT",
        "SERVER_PROTOCOL",
        "REQUEST_SCHEME",
        "HTTPS",
        "GATEWAY_INTERFACE",
        "SERVER_SOFTWARE",
        "REMOTE_ADDR",
        "REMOTE_PORT",
        "REMOTE_USER",
        "SERVER_ADDR",
        "SERVER_PORT",
        "SERVER_NAME",
        "REDIRECT_STATUS",
        "PATH_INFO",
        "PATH_TRANSLATED",
        "HTTP_PROXY",
    ];
    let mut env = Vec::new();
    for (k, v, p_at) in &sc.fastcgi_params {
        if BUILT_IN.contains(&k.as_str()) {
            continue;
        }
        if k == "HTTP_HOST" && v == "$host" {
            report.approx(
                p_at,
                format!("fastcgi_param {k} {v}"),
                "php",
                "weir sends the request's Host field as HTTP_HOST, with its port; nginx's $host has none",
            );
        } else if v.contains('$') {
            report.none(
                p_at,
                format!("fastcgi_param {k} {v}"),
                "weir's PHP env values are fixed text",
            );
        } else {
            env.push((k.clone(), V::s(v.clone())));
        }
    }
    env
}

/// `proxy_pass` as a proxy and, for a URI part, the path rewrite nginx does.
#[allow(clippy::type_complexity)]
fn proxy(
    d: &Directive,
    l: &Loc,
    cx: &Cx<'_>,
    report: &mut Report,
) -> Option<(Vec<(String, V)>, Option<(String, V)>)> {
    let url = d.arg(0);
    if url.contains('$') {
        report.none(
            &d.at,
            d.text(),
            "weir's upstreams are fixed addresses, not variables",
        );
        return None;
    }
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s, r),
        None => {
            report.none(&d.at, d.text(), "not an http:// or https:// URL");
            return None;
        }
    };
    let (hostport, uri) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let mut p: Vec<(String, V)> = Vec::new();
    let https = scheme == "https";
    let (to, proxy_host) = if let Some(u) = cx.g.upstreams.get(hostport) {
        if https {
            let list = u
                .servers
                .iter()
                .map(|s| V::S(format!("https://{}", s.addr)))
                .collect();
            (V::A(list), hostport.to_string())
        } else {
            (upstream_list(u), hostport.to_string())
        }
    } else if let Some(sock) = hostport.strip_prefix("unix:") {
        let sock = sock.trim_end_matches(':');
        (V::S(format!("unix:{sock}")), "localhost".to_string())
    } else {
        let default_port = if https { 443 } else { 80 };
        let addr = if hostport.contains(':') && !hostport.ends_with(']') {
            hostport.to_string()
        } else {
            format!("{hostport}:{default_port}")
        };
        let shown = addr
            .strip_suffix(&format!(":{default_port}"))
            .unwrap_or(&addr)
            .to_string();
        (
            V::S(if https {
                format!("https://{addr}")
            } else {
                addr
            }),
            shown,
        )
    };
    p.push(("to".into(), to));
    if let Some(u) = cx.g.upstreams.get(hostport) {
        if let Some((b, k)) = &u.balance {
            p.push(("balance".into(), V::s(b.clone())));
            if let Some(k) = k {
                p.push(("hash_key".into(), V::s(k.clone())));
            }
        }
        if u.servers.len() > 1 {
            let s0 = &u.servers[0];
            p.push((
                "passive".into(),
                V::T(vec![
                    ("failures".into(), V::I(s0.max_fails)),
                    ("window".into(), V::s(s0.fail_timeout.clone())),
                    ("cooldown".into(), V::s(s0.fail_timeout.clone())),
                ]),
            ));
            report.approx(&u.at, format!("upstream {hostport}"), "proxy passive", "weir counts failures in a row (nginx any within fail_timeout), ejects at most half of the servers at once and never the last one; settings of the first server apply to all");
        }
    }
    // Host: nginx sends $proxy_host unless told otherwise.
    let mut host = Some(proxy_host);
    let mut set: Vec<(String, V)> = Vec::new();
    let mut add: Vec<(String, V)> = Vec::new();
    for (name, value, at) in &l.scope.proxy_headers {
        let lname = name.to_ascii_lowercase();
        let text = format!("proxy_set_header {name} {value}");
        match (lname.as_str(), value.as_str()) {
            ("host", "$http_host") => {
                host = None;
                report.mapped(at, text, "proxy host = \"pass\" (the default)");
            }
            ("host", "$host") => {
                host = None;
                report.approx(at, text, "proxy host = \"pass\"", "weir passes the client's Host as it came, with its port ($http_host); $host has none");
            }
            ("host", "$proxy_host") => report.mapped(at, text, "proxy host"),
            ("x-forwarded-for", "$proxy_add_x_forwarded_for") => {
                add.push((name.clone(), V::s("{client_ip}")));
                report.approx(at, text, "route request_headers add X-Forwarded-For", "weir sends the client's address as a field of its own after a client's X-Forwarded-For; nginx joins both in one field");
            }
            ("upgrade", "$http_upgrade") | ("connection", _) => report.mapped(
                at,
                text,
                "none needed: weir passes WebSocket upgrades itself",
            ),
            _ => match scope::template(value, cx.server_name) {
                Ok(v) if lname == "host" => {
                    host = Some(v.clone());
                    if v.contains('{') {
                        report.none(
                            at,
                            text,
                            "weir's proxy host is `pass`, `upstream` or fixed text",
                        );
                        host = None;
                    } else {
                        report.mapped(at, text, "proxy host");
                    }
                }
                Ok(v) => {
                    set.push((name.clone(), V::S(v)));
                    report.mapped(at, text, "route request_headers");
                }
                Err(why) => report.none(at, text, format!("{why} has no weir placeholder")),
            },
        }
    }
    if let Some(h) = host {
        p.push(("host".into(), V::S(h)));
    }
    // Every X-Forwarded-* the config sets is a request header of its own
    // (`set` above), so weir adds none of its own.
    p.push(("x_forwarded".into(), V::B(false)));
    p.push(("forwarded".into(), V::B(false)));
    p.push(("via".into(), V::B(false)));
    if let Some(t) = &l.scope.proxy_connect_timeout {
        p.push(("connect_timeout".into(), V::s(t.clone())));
    }
    if let Some(t) = &l.scope.proxy_read_timeout {
        p.push(("response_timeout".into(), V::s(t.clone())));
    }
    if https && !l.scope.proxy_ssl_verify {
        p.push(("tls_verify".into(), V::B(false)));
        report.approx(&d.at, d.text(), "proxy tls_verify = false", "nginx does not verify upstream certificates unless proxy_ssl_verify on; the import keeps that: set tls_verify = true once the upstream's certificate is trusted");
    }
    let mut pattern = None;
    let mut keys = Vec::new();
    match uri {
        None => {}
        Some(u) => match l.m {
            Mod::Regex { .. } => {
                report.none(
                    &d.at,
                    d.text(),
                    "nginx refuses a URI part in a regex location",
                );
                return None;
            }
            Mod::Exact => {
                pattern = Some((
                    "path_regex".to_string(),
                    V::S(format!("^{}$", regex_escape(&l.uri))),
                ));
                keys.push(("rewrite".into(), V::S(format!("{u}{{?query}}"))));
            }
            Mod::Prefix | Mod::NoRegex => {
                if u.ends_with('/') {
                    keys.push(("rewrite".into(), V::s(u)));
                } else {
                    pattern = Some((
                        "path_regex".to_string(),
                        V::S(format!("^{}(.*)$", regex_escape(&l.uri))),
                    ));
                    keys.push(("rewrite".into(), V::S(format!("{u}{{1}}{{?query}}"))));
                }
            }
        },
    }
    // proxy_redirect: the location's own, else `default` (the proxy_pass
    // URL becomes the location's prefix, or "/" without a URI part).
    let mut redirects = l.scope.proxy_redirects.clone();
    if !l.scope.proxy_redirect_off && redirects.is_empty() {
        redirects.push(match uri {
            Some(_) => (url.to_string(), l.uri.clone()),
            None => (format!("{url}/"), "/".to_string()),
        });
    }
    if !redirects.is_empty() {
        // nginx's absolute_redirect makes a relative result absolute, and
        // so an upstream's own relative Location too.
        for (_, to) in redirects.iter_mut() {
            if to.starts_with('/') {
                *to = format!("{}{to}", cx.origin_host);
            }
        }
        redirects.push(("/".to_string(), format!("{}/", cx.origin_host)));
    }
    if redirects.is_empty() {
        report.mapped(&d.at, d.text(), "proxy");
    } else {
        p.push((
            "rewrite_location".into(),
            V::A(
                redirects
                    .into_iter()
                    .map(|(from, to)| {
                        V::T(vec![("from".into(), V::S(from)), ("to".into(), V::S(to))])
                    })
                    .collect(),
            ),
        ));
        report.approx(&d.at, d.text(), "proxy with rewrite_location (proxy_redirect)", "weir rewrites the upstream's Location and Content-Location; nginx's proxy_redirect rewrites Location and Refresh");
    }
    let proxy_v = if p.len() == 1 { p.remove(0).1 } else { V::T(p) };
    keys.insert(0, ("proxy".into(), proxy_v));
    let mut headers = Vec::new();
    if !set.is_empty() {
        headers.push(("set".into(), V::T(set)));
    }
    if !add.is_empty() {
        headers.push(("add".into(), V::T(add)));
    }
    if !headers.is_empty() {
        keys.push(("request_headers".into(), V::T(headers)));
    }
    Some((keys, pattern))
}

/// nginx's gzip as weir's `compress`: off unless `gzip on`, then gzip only,
/// for text/html and `gzip_types`, from `gzip_min_length` (20) bytes.
fn compress(sc: &Scope) -> V {
    if !sc.gzip {
        return V::B(false);
    }
    let mut types = vec!["text/html".to_string()];
    if sc.gzip_types.iter().any(|t| t == "*") {
        return V::T(vec![("encodings".into(), V::strs(["gzip"]))]);
    }
    types.extend(sc.gzip_types.iter().cloned());
    V::T(vec![
        ("encodings".into(), V::strs(["gzip"])),
        ("min_size".into(), V::I(sc.gzip_min_length.unwrap_or(20))),
        ("types".into(), V::strs(types)),
    ])
}

/// The filter keys in force in a scope.
/// `add_header` and `expires` as `response_headers`; `report` names the
/// values weir cannot write (once: the callers that repeat pass `None`).
fn response_headers(sc: &Scope, cx: &Cx<'_>, mut report: Option<&mut Report>) -> Option<V> {
    let mut add = Vec::new();
    for h in &sc.headers {
        match scope::template(&h.value, cx.server_name) {
            Ok(v) => add.push((h.name.clone(), V::S(v))),
            Err(why) => {
                if let Some(r) = report.as_deref_mut() {
                    r.none(
                        &h.at,
                        format!("add_header {} {}", h.name, h.value),
                        format!("{why} has no weir placeholder"),
                    );
                }
            }
        }
    }
    let mut rh = Vec::new();
    if let Some(e) = &sc.expires {
        rh.push((
            "set".to_string(),
            V::T(vec![("Cache-Control".into(), V::s(e.clone()))]),
        ));
    }
    if !add.is_empty() {
        rh.push(("add".into(), V::T(add)));
    }
    (!rh.is_empty()).then_some(V::T(rh))
}

fn filters(sc: &Scope, cx: &Cx<'_>, report: &mut Report, _proxy: bool) -> Vec<(String, V)> {
    let mut f = Vec::new();
    // allow/deny: nginx's first match in order; weir's deny, then allow.
    if !sc.access.is_empty() {
        let a = &sc.access;
        let cidr = |s: &str| {
            if s == "all" {
                vec![V::s("0.0.0.0/0"), V::s("::/0")]
            } else {
                vec![V::s(s)]
            }
        };
        let last = a.last().unwrap();
        if last.1 == "all" && !last.0 && a[..a.len() - 1].iter().all(|x| x.0) {
            if a.len() == 1 {
                f.push(("deny".into(), V::A(cidr("all"))));
            } else {
                f.push((
                    "allow".into(),
                    V::A(a[..a.len() - 1].iter().flat_map(|x| cidr(&x.1)).collect()),
                ));
            }
        } else if a.iter().all(|x| !x.0 || x.1 == "all") {
            f.push((
                "deny".into(),
                V::A(a.iter().filter(|x| !x.0).flat_map(|x| cidr(&x.1)).collect()),
            ));
        } else {
            f.push((
                "deny".into(),
                V::A(
                    a.iter()
                        .filter(|x| !x.0 && x.1 != "all")
                        .flat_map(|x| cidr(&x.1))
                        .collect(),
                ),
            ));
            f.push((
                "allow".into(),
                V::A(
                    a.iter()
                        .filter(|x| x.0 && x.1 != "all")
                        .flat_map(|x| cidr(&x.1))
                        .collect(),
                ),
            ));
        }
    }
    match sc.basic_auth(cx.reader, report) {
        Some(Some(v)) => f.push(("basic_auth".into(), v)),
        Some(None) if !f.iter().any(|(k, _)| k == "deny") => {
            f.push(("deny".into(), V::A(vec![V::s("0.0.0.0/0"), V::s("::/0")])));
        }
        Some(None) | None => {}
    }
    let mut limits = Vec::new();
    for r in &sc.limit_refs {
        match r {
            LimitRef::Req {
                zone,
                burst,
                nodelay,
                delay,
                at,
                text,
            } => match cx.g.req_zones.get(zone) {
                Some((key, rate)) => {
                    let mut t = vec![];
                    if *key != V::s("client") {
                        t.push(("key".to_string(), key.clone()));
                    }
                    t.push(("rate".into(), V::s(rate.clone())));
                    if *burst > 0 {
                        t.push(("burst".into(), V::I(*burst as i64)));
                    }
                    if *nodelay {
                        t.push(("nodelay".into(), V::B(true)));
                    } else if let Some(dl) = delay {
                        t.push(("delay".into(), V::I(*dl as i64)));
                    }
                    t.push((
                        "status".into(),
                        V::I(sc.limit_req_status.unwrap_or(503) as i64),
                    ));
                    limits.push(V::T(t));
                    report.approx_closed(
                        at,
                        text.clone(),
                        "limit",
                        "weir's refusal carries Retry-After and its own body",
                    );
                }
                None => report.none(at, text.clone(), "no limit_req_zone of that name"),
            },
            LimitRef::Conn { zone, n, at, text } => match cx.g.conn_zones.get(zone) {
                Some(key) => {
                    let mut t = vec![];
                    if *key != V::s("client") {
                        t.push(("key".to_string(), key.clone()));
                    }
                    t.push(("connections".into(), V::I(*n as i64)));
                    t.push((
                        "status".into(),
                        V::I(sc.limit_conn_status.unwrap_or(503) as i64),
                    ));
                    limits.push(V::T(t));
                    report.approx(at, text.clone(), "limit", "weir counts requests in progress (from head to response head), nginx connections with a request being processed");
                }
                None => report.none(at, text.clone(), "no limit_conn_zone of that name"),
            },
        }
    }
    if !limits.is_empty() {
        f.push(("limit".into(), V::A(limits)));
    }
    f.retain(|(_, v)| *v != V::A(Vec::new()));
    if let Some(rh) = response_headers(sc, cx, Some(report)) {
        f.push(("response_headers".into(), rh));
    }
    if let Some(m) = &sc.max_body {
        f.push(("max_body".into(), m.clone()));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_but_not_those_under_it() {
        let re = format!(
            "^{}{}",
            regex_escape("/static/"),
            not_starting(&["deep/", "dx"])
        );
        assert_eq!(
            re,
            "^/static/(?:$|[^d]|d(?:$|[^ex]|e(?:$|[^e]|e(?:$|[^p]|p(?:$|[^/])))))"
        );
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(listen_addr("80"), "0.0.0.0:80");
        assert_eq!(listen_addr("[::]:443"), "[::]:443");
        assert_eq!(listen_addr("127.0.0.1"), "127.0.0.1:80");
        assert_eq!(listen_addr("localhost:8080"), "127.0.0.1:8080");
        assert_eq!(listen_addr("*:8080"), "0.0.0.0:8080");
    }
}
