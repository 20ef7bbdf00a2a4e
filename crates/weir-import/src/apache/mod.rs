//! Apache httpd configs into weir's: `Listen` and `<VirtualHost>` into
//! sites, `DocumentRoot` with the `<Directory>` sections over it,
//! `<Location>`, `Alias`, `ProxyPass` (Apache's path mapping reproduced
//! with and without trailing slashes, `!` exclusions), `<Proxy balancer://>`,
//! PHP through `SetHandler proxy:fcgi`, `Redirect*` and the `RewriteRule`
//! forms weir expresses, TLS, Basic authentication, headers, logs,
//! `mod_deflate` and `mod_expires`; `.htaccess` files read when asked.
//! Each directive is reported as mapped, approximated or without equivalent.
//!
//! Reads files only; never writes, never starts a server, and never emits
//! a weir key for a directive it cannot honour (those are reported).

mod dir;
pub mod parse;

use crate::regex::{regex_escape, unsupported_regex};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Origin};
use crate::report::Report;
use crate::toml::{Table, V};
use crate::{Imported, Options};

use dir::{Access, Dir, Key, Scope, Unit};
use parse::{Directive, Reader};

/// A `<Proxy balancer://NAME>`.
#[derive(Debug, Clone, Default)]
struct Balancer {
    /// (address as weir writes it, loadfactor).
    members: Vec<(String, i64)>,
    lbmethod: Option<(String, Origin, String)>,
}

/// What Apache's translation maps a path prefix to.
#[derive(Debug, Clone)]
enum Map {
    /// `ProxyPass /x !`: not proxied (files under the DocumentRoot).
    Exclude,
    /// `ProxyPass /x URL`: the URL's path and the weir `proxy` value.
    Proxy { url_path: String, proxy: V },
    /// `ProxyPassMatch REGEX URL` / `RewriteRule … [P]`: groups filled.
    ProxyRegex { rewrite: String, proxy: V },
    /// `Alias /x /dir`.
    Alias { target: String },
}

#[derive(Debug, Clone)]
struct Mapping {
    at: Origin,
    text: String,
    /// A prefix, or a regex for `ProxyRegex`.
    prefix: String,
    map: Map,
}

/// A `<Location>` or `<LocationMatch>`.
#[derive(Debug, Clone)]
struct Loc {
    at: Origin,
    text: String,
    pattern: Key,
    /// The plain prefix, for a `<Location>`.
    prefix: Option<String>,
    dir: Dir,
    proxy: Option<Mapping>,
    status_handler: bool,
}

/// What the server config and one vhost say.
#[derive(Debug, Clone, Default)]
struct Host {
    at: Option<Origin>,
    names: Vec<String>,
    docroot: Option<(String, Origin)>,
    dir: Dir,
    /// `<Directory>` sections: (path, is regex, settings, where).
    dirs: Vec<(String, Dir, Origin)>,
    locs: Vec<Loc>,
    maps: Vec<Mapping>,
    rewrites: Vec<Directive>,
    ssl: bool,
    cert: Option<String>,
    key: Option<String>,
    preserve_host: Option<bool>,
    proxy_timeout: Option<String>,
    /// `ProxyPassReverse`: where, as written, and its `(from, to)` pairs
    /// (none when weir cannot follow it; the reason then).
    reverse: Vec<(Origin, String, Result<Reverse, String>)>,
    access_log: Option<V>,
}

/// Everything read before the sites.
struct Globals {
    balancers: HashMap<String, Balancer>,
    /// `LogFormat` nicknames.
    formats: HashMap<String, String>,
    /// `Listen`: (address as weir writes it, port, https).
    listens: Vec<(String, u16, bool)>,
}

/// Imports the Apache config at `main` (with everything it includes).
pub fn import(main: &Path, opts: &Options) -> Result<Imported, Error> {
    let mut reader = Reader::new(
        main,
        opts.sysroot.clone(),
        crate::env::Env::new(opts.env.clone()),
    );
    let top = reader.file(main, None)?;
    let mut report = Report::default();
    let mut g = Globals {
        balancers: HashMap::new(),
        formats: HashMap::new(),
        listens: Vec::new(),
    };
    let mut server = Table::new("server", false);
    let mut main_host = Host::default();
    let mut vhosts: Vec<Host> = Vec::new();
    let mut vhost_dirs: Vec<&Directive> = Vec::new();

    // Declarations first: a vhost may use a balancer or format defined after it.
    for d in &top {
        declare(d, &mut g, &mut report);
    }
    for d in &top {
        if d.is("VirtualHost") {
            vhost_dirs.push(d);
            continue;
        }
        if !host_directive(d, &mut main_host, &g, &mut report) {
            server_directive(d, &mut server, &mut report);
        }
    }
    for v in &vhost_dirs {
        let mut h = Host {
            at: Some(v.at.clone()),
            ..Host::default()
        };
        for d in v.block.iter().flatten() {
            declare(d, &mut g, &mut report);
        }
        for d in v.block.iter().flatten() {
            if !host_directive(d, &mut h, &g, &mut report) {
                report.none(&d.at, d.text(), "not known to weir import");
            }
        }
        vhosts.push(h);
    }

    let mut tables: Vec<Table> = Vec::new();
    let mut names_seen: Vec<String> = Vec::new();
    let mut ports_done: Vec<u16> = Vec::new();
    for (v, h) in vhost_dirs.iter().zip(&vhosts) {
        let mut addrs = Vec::new();
        for a in &v.args {
            let (ip, port) = split_addr(a);
            let port = port.unwrap_or(80);
            let listen = g
                .listens
                .iter()
                .find(|(l, p, _)| *p == port && (ip.is_none() || l.starts_with(ip.unwrap_or(""))))
                .map(|(l, _, _)| l.clone())
                .unwrap_or_else(|| match ip {
                    Some(i) => format!("{i}:{port}"),
                    None => format!("0.0.0.0:{port}"),
                });
            if !g.listens.is_empty() && !g.listens.iter().any(|(_, p, _)| *p == port) {
                report.approx(&v.at, v.text(), "listen", format!("no Listen names port {port}: Apache would not answer there; the site listens on it all the same"));
            }
            addrs.push((listen, port));
        }
        if addrs.is_empty() {
            report.none(&v.at, v.text(), "a VirtualHost needs an address");
            continue;
        }
        let merged = merge_hosts(&main_host, h);
        let first_on_port = !ports_done.contains(&addrs[0].1);
        ports_done.push(addrs[0].1);
        let t = site(
            &merged,
            &addrs,
            first_on_port,
            &reader,
            opts,
            &mut report,
            &mut names_seen,
        );
        report.mapped(&v.at, v.text(), "site(s)");
        tables.extend(t);
    }
    // The main server answers on the ports no vhost takes.
    let free: Vec<(String, u16)> = g
        .listens
        .iter()
        .filter(|(_, p, _)| !ports_done.contains(p))
        .map(|(l, p, _)| (l.clone(), *p))
        .collect();
    for (l, p) in free {
        let t = site(
            &main_host,
            &[(l, p)],
            true,
            &reader,
            opts,
            &mut report,
            &mut names_seen,
        );
        tables.extend(t);
    }

    let main_name = reader.files.display(main);
    report.baseline(
        "Apache's own pages",
        "error and redirect answers carry weir's own short bodies (and Content-Type), not Apache's HTML pages",
    );
    let head = vec![
        format!("weir.toml made by `weir import apache {}`.", main.display()),
        "Each part says where it came from; the report on stderr says what differs.".into(),
    ];
    let mut out = Vec::new();
    if !server.keys.is_empty() {
        server.comments.push(format!("{main_name}: server config"));
        out.push(server);
    }
    out.extend(tables);
    crate::finish(
        crate::Kind::Apache,
        main,
        head,
        out,
        report,
        &reader.env,
        opts,
    )
}

/// `*:80`, `1.2.3.4:80`, `[::1]:443`, `_default_:443`, `80`.
fn split_addr(a: &str) -> (Option<&str>, Option<u16>) {
    if let Ok(p) = a.parse::<u16>() {
        return (None, Some(p));
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        match rest.split_once("]:") {
            Some((h, p)) => (&a[..h.len() + 2], p.parse().ok()),
            None => (a, None),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().ok()),
            None => (a, None),
        }
    };
    let host = match host {
        "*" | "_default_" | "0.0.0.0" => None,
        h => Some(h),
    };
    (host, port)
}

/// Balancers and log formats, wherever they are.
fn declare(d: &Directive, g: &mut Globals, report: &mut Report) {
    if d.is("Proxy") && d.arg(0).starts_with("balancer://") {
        let name = d
            .arg(0)
            .trim_start_matches("balancer://")
            .trim_end_matches('/')
            .to_string();
        let mut b = g.balancers.remove(&name).unwrap_or_default();
        for x in d.block.iter().flatten() {
            if x.is("BalancerMember") {
                member(x, &x.args, &mut b, report);
            } else if x.is("ProxySet") {
                proxyset(x, &x.args, &mut b, report);
            } else if x.is("Require") && x.args.iter().any(|a| a == "granted") {
                report.mapped(&x.at, x.text(), "none needed");
            } else {
                report.none(&x.at, x.text(), "not known to weir import in a balancer");
            }
        }
        report.mapped(&d.at, d.text(), "proxy `to` and `balance`");
        g.balancers.insert(name, b);
    } else if d.is("BalancerMember") && d.arg(0).starts_with("balancer://") {
        let name = d
            .arg(0)
            .trim_start_matches("balancer://")
            .trim_end_matches('/')
            .to_string();
        let b = g.balancers.entry(name).or_default();
        member(d, &d.args[1..], b, report);
    } else if d.is("ProxySet") && d.arg(0).starts_with("balancer://") {
        let name = d
            .arg(0)
            .trim_start_matches("balancer://")
            .trim_end_matches('/')
            .to_string();
        let b = g.balancers.entry(name).or_default();
        proxyset(d, &d.args[1..], b, report);
    } else if d.is("LogFormat") && d.args.len() >= 2 {
        g.formats.insert(d.arg(1).to_string(), d.arg(0).to_string());
    } else if d.is("Listen") {
        let a = d.arg(0);
        let (ip, port) = split_addr(a);
        let Some(port) = port else {
            report.none(&d.at, d.text(), "not an address weir reads");
            return;
        };
        let addr = match ip {
            Some(i) => format!("{}:{port}", i.replace("localhost", "127.0.0.1")),
            None => format!("0.0.0.0:{port}"),
        };
        let https = d.arg(1).eq_ignore_ascii_case("https") || port == 443;
        if !g.listens.iter().any(|(l, _, _)| *l == addr) {
            g.listens.push((addr, port, https));
        }
        report.mapped(&d.at, d.text(), "site listen");
    }
}

fn member(d: &Directive, args: &[String], b: &mut Balancer, report: &mut Report) {
    let url = args.first().map_or("", String::as_str);
    let Some(addr) = url_addr(url) else {
        report.none(&d.at, d.text(), "not an http:// or https:// member");
        return;
    };
    let mut weight = 1;
    for a in args.get(1..).unwrap_or(&[]) {
        if let Some(w) = a.strip_prefix("loadfactor=") {
            weight = w.parse().unwrap_or(1);
        } else if let Some(st) = a.strip_prefix("status=") {
            if st.contains('H') {
                report.none(&d.at, d.text(), "weir has no hot standby: the member is left out of `to` (put it in if it should take traffic with the others)");
                return;
            }
            if st.contains('D') || st.contains('S') {
                report.mapped(&d.at, d.text(), "left out of `to` (disabled or stopped)");
                return;
            }
        } else if a.starts_with("route=") || a.starts_with("retry=") || a.starts_with("timeout=") {
            report.approx(
                &d.at,
                d.text(),
                "proxy to",
                format!("`{a}` is left out: weir's passive health and timeouts are per proxy"),
            );
        }
    }
    b.members.push((addr, weight));
    report.mapped(&d.at, d.text(), "proxy to");
}

fn proxyset(d: &Directive, args: &[String], b: &mut Balancer, report: &mut Report) {
    for a in args {
        if let Some(m) = a.strip_prefix("lbmethod=") {
            let (w, how) = match m {
                "byrequests" => ("round_robin", ""),
                "bybusyness" => ("least_conn", ""),
                "bytraffic" => (
                    "round_robin",
                    "weir has no by-traffic balancing: requests are counted, not bytes",
                ),
                "heartbeat" => ("round_robin", "weir has no heartbeat balancing"),
                _ => ("round_robin", "unknown lbmethod"),
            };
            b.lbmethod = Some((w.to_string(), d.at.clone(), how.to_string()));
            if how.is_empty() {
                report.mapped(&d.at, d.text(), format!("proxy balance = \"{w}\""));
            } else {
                report.approx(&d.at, d.text(), format!("proxy balance = \"{w}\""), how);
            }
        } else if a.starts_with("stickysession=") {
            report.approx(&d.at, d.text(), "proxy", "weir's stickiness is its own cookie (`sticky_cookie`): the application's session cookie does not pick the member");
        } else {
            report.none(&d.at, format!("ProxySet {a}"), "no weir equivalent");
        }
    }
}

/// `http://host:port/path` → weir's upstream address (`https://` kept).
fn url_addr(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let (default, prefix) = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ws" => (80, ""),
        "https" | "wss" => (443, "https://"),
        _ => return None,
    };
    let addr = if hostport.contains(':') && !hostport.ends_with(']') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default}")
    };
    Some(format!("{prefix}{addr}"))
}

/// `rewrite_location` pairs `(from, to)`, and how weir differs if it does.
type Reverse = (Vec<(String, String)>, Option<String>);

/// `ProxyPassReverse PATH URL` as `rewrite_location` pairs: a Location
/// starting with URL (or with a balancer member's URL) becomes the
/// client's scheme and Host, then PATH, as Apache builds it.
fn reverse_rules(path: &str, url: &str, g: &Globals) -> Result<Reverse, String> {
    if path.is_empty() || url.is_empty() {
        return Err("needs a path and a URL".into());
    }
    let to = format!("{{scheme}}://{{http_host}}{path}");
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("`{url}` is not a URL"));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "http" | "https" | "ws" | "wss" => Ok((vec![(url.to_string(), to)], None)),
        "balancer" => {
            let (name, tail) = rest.split_once('/').map_or((rest, ""), |(n, t)| (n, t));
            let b = g
                .balancers
                .get(name)
                .ok_or_else(|| format!("no <Proxy balancer://{name}> with members"))?;
            let mut out = Vec::new();
            for (m, _) in &b.members {
                let (base, default) = match m.strip_prefix("https://") {
                    Some(a) => (format!("https://{a}"), ":443"),
                    None => (format!("http://{m}"), ":80"),
                };
                // An upstream on its scheme's port usually leaves the port out.
                if let Some(short) = base.strip_suffix(default) {
                    out.push((format!("{short}/{tail}"), to.clone()));
                }
                out.push((format!("{base}/{tail}"), to.clone()));
            }
            // mod_proxy keeps the member URL's slash after PATH's.
            let note = path.ends_with('/').then(|| {
                format!("Apache joins `{path}` and the rest of a member's URL with two slashes (`{path}/a`); weir with one (`{path}a`)")
            });
            Ok((out, note))
        }
        _ => Err(format!("weir proxies HTTP, not {scheme}")),
    }
}

/// Server-wide directives weir has a place for.
fn server_directive(d: &Directive, server: &mut Table, report: &mut Report) {
    let set_timeout = |server: &mut Table, k: &str, v: String| {
        let mut t = match server.get("timeouts") {
            Some(V::T(t)) => t.clone(),
            _ => Vec::new(),
        };
        t.retain(|(x, _)| x != k);
        t.push((k.into(), V::S(v)));
        server.set("timeouts", V::T(t));
    };
    match d.name.to_ascii_lowercase().as_str() {
        "timeout" => {
            set_timeout(server, "body", format!("{}s", d.arg(0)));
            set_timeout(server, "write", format!("{}s", d.arg(0)));
            report.approx(&d.at, d.text(), "server.timeouts body, write", "Apache's Timeout is also the proxy's wait for an answer (weir's proxy response_timeout stays 60s unless ProxyTimeout says)");
        }
        "keepalivetimeout" => {
            set_timeout(server, "keepalive", format!("{}s", d.arg(0)));
            report.mapped(&d.at, d.text(), "server.timeouts.keepalive");
        }
        "requestreadtimeout" => {
            if let Some(h) = d.args.iter().find_map(|a| a.strip_prefix("header=")) {
                let secs = h.split([',', '-']).next().unwrap_or("20");
                set_timeout(server, "header", format!("{secs}s"));
                report.approx(&d.at, d.text(), "server.timeouts.header", "weir has no minimum rate: the first number is the whole head's timeout");
            } else {
                report.approx(&d.at, d.text(), "server.timeouts.body", "weir has no minimum rate: its body timeout is the one Timeout sets");
            }
        }
        "keepalive" | "maxkeepaliverequests" | "hostnamelookups" | "accessfilename"
        | "defaultruntimedir" | "pidfile" | "mutex" | "serverroot" | "startservers"
        | "minsparethreads" | "maxsparethreads" | "threadlimit" | "threadsperchild"
        | "maxrequestworkers" | "maxconnectionsperchild" | "serverlimit" | "loadmodule"
        | "define" | "undefine" | "traceenable" | "enablesendfile" | "enablemmap"
        | "listenbacklog" | "typesconfig" | "mimemagicfile" | "indexoptions" | "addicon"
        | "addiconbyencoding" | "addiconbytype" | "defaulticon" | "readmename"
        | "headername" | "indexignore" | "adddescription" | "languagepriority"
        | "forcelanguagepriority" | "addlanguage" | "addcharset" | "addtype"
        | "addhandler" | "addoutputfilter" | "browsermatch" | "setenvif"
        | "setenvifnocase" | "servertokens" | "serversignature" | "extendedstatus"
        | "proxystatus" | "serveradmin" | "usecanonicalname" | "deflatecompressionlevel"
        | "sslrandomseed" | "sslsessioncache" | "sslsessioncachetimeout"
        | "sslpassphrasedialog" | "sslcryptodevice" | "sslstaplingcache" => {
            report.mapped(&d.at, d.text(), "none needed: weir does this itself or has no such part")
        }
        "user" | "group" => report.none(
            &d.at,
            d.text(),
            "weir runs as the user that starts it: use the systemd unit's User= (packaging/weir.service runs as weir)",
        ),
        "errorlog" | "loglevel" => report.approx(
            &d.at,
            d.text(),
            "weir's error log",
            "weir writes its error log to standard error (the journal under systemd), not to a file",
        ),
        _ => report.none(&d.at, d.text(), "not known to weir import"),
    }
}

/// A directive of the server config or a vhost; `false` when it is neither.
fn host_directive(d: &Directive, h: &mut Host, g: &Globals, report: &mut Report) -> bool {
    let sc = Scope {
        per_dir: None,
        origin: dir::ORIGIN,
        server_name: h.names.first().map_or("", String::as_str),
        overrides: None,
    };
    let lname = d.name.to_ascii_lowercase();
    match lname.as_str() {
        "servername" => {
            let n = d.arg(0);
            let n = n.split("://").last().unwrap_or(n);
            let n = n.rsplit_once(':').map_or(n, |(h, _)| h);
            h.names.insert(0, n.to_ascii_lowercase());
            report.mapped(&d.at, d.text(), "site name");
        }
        "serveralias" => {
            for n in &d.args {
                if (n.contains('*') && !n.starts_with("*.")) || n.get(1..).is_some_and(|r| r.contains('*')) {
                    report.none(&d.at, format!("ServerAlias {n}"), "weir's wildcards are `*.name` one label deep");
                } else if n.starts_with("*.") {
                    h.names.push(n.to_ascii_lowercase());
                    report.approx(&d.at, format!("ServerAlias {n}"), "site", "weir's `*.name` matches one label; Apache's any depth");
                } else {
                    h.names.push(n.to_ascii_lowercase());
                }
            }
            report.mapped(&d.at, d.text(), "site names");
        }
        "documentroot" => {
            h.docroot = Some((d.arg(0).trim_end_matches('/').to_string(), d.at.clone()));
            report.mapped(&d.at, d.text(), "root");
        }
        "directory" | "directorymatch" => {
            let regex = lname == "directorymatch" || d.arg(0) == "~";
            if regex {
                report.none(&d.at, d.text(), "regex directories: write a route with `path_regex` by hand");
                return true;
            }
            let mut x = Dir::default();
            let mut rw = Vec::new();
            let path = d.arg(0).trim_end_matches('/').to_string();
            let sc2 = Scope {
                per_dir: Some("/"),
                ..sc
            };
            section_body(d, &mut x, &sc2, &mut rw, report);
            x.front = None;
            // Per-directory rewrites are read when the directory's URL is known.
            h.dirs.push((if path.is_empty() { "/".into() } else { path }, x, d.at.clone()));
            if !rw.is_empty() {
                h.rewrites.extend(rw.into_iter().map(|mut r| {
                    r.args.push(format!("__dir={}", d.arg(0).trim_end_matches('/')));
                    r
                }));
            }
        }
        "location" | "locationmatch" => {
            let regex = lname == "locationmatch" || d.arg(0) == "~";
            let raw = if d.arg(0) == "~" { d.arg(1) } else { d.arg(0) };
            let (pattern, prefix) = if regex {
                if let Some(why) = unsupported_regex(raw) {
                    report.none(&d.at, d.text(), format!("weir's regexes have no {why}"));
                    return true;
                }
                (("path_regex".to_string(), V::s(raw)), None)
            } else if raw == "/" {
                (("path".to_string(), V::s("/")), Some("/".to_string()))
            } else if raw.ends_with('/') {
                (("path".to_string(), V::s(raw)), Some(raw.to_string()))
            } else if raw.contains(['*', '?', '[']) {
                report.none(&d.at, d.text(), "wildcard locations: write a route with `path` (a glob) by hand");
                return true;
            } else {
                (("path".to_string(), V::S(format!("{raw}/*"))), Some(raw.to_string()))
            };
            let mut x = Dir::default();
            let mut rw = Vec::new();
            let mut proxy = None;
            let mut status_handler = false;
            let base = prefix.clone().map(|p| if p.ends_with('/') { p } else { format!("{p}/") });
            let sc2 = Scope {
                per_dir: base.as_deref().or(Some("/")),
                ..sc
            };
            for y in d.block.iter().flatten() {
                if y.is("ProxyPass") && prefix.is_some() {
                    let mut args = vec![prefix.clone().unwrap()];
                    args.extend(y.args.iter().cloned());
                    let fake = Directive {
                        args,
                        ..y.clone()
                    };
                    proxy = proxy_pass(&fake, g, report);
                } else if y.is("ProxyPassReverse") {
                    let path = prefix.clone().unwrap_or_default();
                    let rules = reverse_rules(&path, y.arg(0), g);
                    h.reverse.push((y.at.clone(), y.text(), rules));
                } else if y.is("SetHandler") && y.arg(0).eq_ignore_ascii_case("server-status") {
                    status_handler = true;
                    report.none(&y.at, y.text(), "weir's status is its admin API's metrics ([admin], /metrics), not mod_status's page: the location answers as the site does");
                } else if !dir::directive(y, &mut x, &sc2, &mut rw, report) {
                    report.none(&y.at, y.text(), "not known to weir import in a Location");
                }
            }
            if !rw.is_empty() {
                dir::rewrites(&rw, &mut x, &sc2, report);
            }
            h.locs.push(Loc {
                at: d.at.clone(),
                text: d.text(),
                pattern,
                prefix,
                dir: x,
                proxy,
                status_handler,
            });
        }
        "files" | "filesmatch" => {
            let mut x = Dir::default();
            let mut rw = Vec::new();
            section_body(d, &mut x, &sc, &mut rw, report);
            files_section(d, &x, &mut h.dir, report);
        }
        "proxypass" => {
            if let Some(m) = proxy_pass(d, g, report) {
                h.maps.push(m);
            }
        }
        "proxypassmatch" => {
            if let Some(m) = proxy_pass_match(d, g, h, report) {
                h.maps.push(m);
            }
        }
        "proxypassreverse" => {
            let rules = reverse_rules(d.arg(0), d.arg(1), g);
            h.reverse.push((d.at.clone(), d.text(), rules));
        }
        "proxypreservehost" => {
            h.preserve_host = Some(d.arg(0).eq_ignore_ascii_case("on"));
            report.mapped(&d.at, d.text(), "proxy host");
        }
        "proxyrequests" => {
            if d.arg(0).eq_ignore_ascii_case("off") {
                report.mapped(&d.at, d.text(), "none needed: weir is no forward proxy");
            } else {
                report.none(&d.at, d.text(), "weir is no forward proxy");
            }
        }
        "proxytimeout" => {
            h.proxy_timeout = Some(format!("{}s", d.arg(0)));
            report.mapped(&d.at, d.text(), "proxy response_timeout");
        }
        "proxyvia" => {
            if d.arg(0).eq_ignore_ascii_case("off") {
                report.mapped(&d.at, d.text(), "proxy via = false");
            } else {
                report.approx(&d.at, d.text(), "proxy via = false", "weir's `via = true` is written by hand");
            }
        }
        "proxyaddheaders" => report.mapped(&d.at, d.text(), "proxy x_forwarded"),
        "proxy" if d.arg(0).starts_with("balancer://") => {}
        "listen" => {}
        "balancermember" | "proxyset" => {}
        "proxy" => report.mapped(&d.at, d.text(), "none needed: weir is no forward proxy"),
        "alias" => {
            let (from, to) = (d.arg(0), d.arg(1));
            h.maps.push(Mapping {
                at: d.at.clone(),
                text: d.text(),
                prefix: from.to_string(),
                map: Map::Alias {
                    target: to.to_string(),
                },
            });
            report.mapped(&d.at, d.text(), "route root with strip_prefix");
        }
        "scriptalias" | "aliasmatch" | "scriptaliasmatch" => {
            report.none(&d.at, d.text(), "weir runs no CGI scripts and has no regex aliases: write a route by hand")
        }
        "sslengine" => {
            h.ssl = d.arg(0).eq_ignore_ascii_case("on");
            report.mapped(&d.at, d.text(), "tls");
        }
        "sslcertificatefile" => {
            h.cert = Some(d.arg(0).to_string());
            report.mapped(&d.at, d.text(), "tls cert");
        }
        "sslcertificatekeyfile" => {
            h.key = Some(d.arg(0).to_string());
            report.mapped(&d.at, d.text(), "tls key");
        }
        "sslcertificatechainfile" => report.approx(&d.at, d.text(), "tls cert", "weir reads the chain from the certificate file: append this file to it"),
        "sslprotocol" | "sslciphersuite" | "sslhonorcipherorder" | "sslcompression"
        | "sslsessiontickets" | "sslusestapling" | "sslopensslconfcmd" => report.approx(
            &d.at,
            d.text(),
            "weir's TLS",
            "weir speaks TLS 1.2 and 1.3 only, with rustls's cipher suites",
        ),
        "sslverifyclient" | "sslcacertificatefile" | "sslcacertificatepath" | "sslverifydepth"
        | "sslproxyengine" | "sslproxyverify" | "sslproxycheckpeername" | "sslproxycheckpeercn"
        | "sslcarevocationfile" | "sslcarevocationpath" | "ssloptions" => {
            report.none(&d.at, d.text(), "weir has no client certificates here")
        }
        "customlog" | "transferlog" => {
            let path = d.arg(0);
            if path.starts_with('|') {
                report.none(&d.at, d.text(), "weir writes logs to a file, stdout or syslog, not to a program");
                return true;
            }
            if path.contains("${") {
                report.none(&d.at, d.text(), "its path names a variable nothing here defines (Debian's envvars is not beside the main file): write `access_log` by hand");
                return true;
            }
            let fmt = if lname == "transferlog" { "common" } else { d.arg(1) };
            let (format, how) = log_format(fmt, g);
            if d.arg(2).starts_with("env=") || d.arg(2).starts_with("expr=") {
                report.none(&d.at, d.text(), "weir logs every request or those its `if` (a status test) picks");
                return true;
            }
            h.access_log = Some(V::T(vec![
                ("path".into(), V::s(path)),
                ("format".into(), V::S(format)),
            ]));
            match how {
                None => report.mapped(&d.at, d.text(), "access_log"),
                Some(w) => report.approx(&d.at, d.text(), "access_log", w),
            }
        }
        "logformat" => report.mapped(&d.at, d.text(), "access_log format where used"),
        "rewriteengine" | "rewritecond" | "rewriterule" | "rewritebase" | "rewriteoptions" => {
            h.rewrites.push(d.clone())
        }
        "rewritemap" => report.none(&d.at, d.text(), "weir has no rewrite maps"),
        "errorlog" | "loglevel" => report.approx(
            &d.at,
            d.text(),
            "weir's error log",
            "weir writes its error log to standard error (the journal under systemd), not to a file",
        ),
        "serveradmin" | "usecanonicalname" => report.mapped(&d.at, d.text(), "none needed: weir's pages name no admin"),
        "setenv" | "passenv" | "unsetenv" => report.none(&d.at, d.text(), "weir passes fixed variables to PHP with `php = { env = { … } }`, written by hand"),
        "protocols" => {
            if d.args.iter().any(|p| p == "h2" || p == "h2c") {
                report.mapped(&d.at, d.text(), "none needed: weir speaks HTTP/2 (and HTTP/1.1) by default");
            } else {
                report.approx(&d.at, d.text(), "weir's protocols", "weir offers HTTP/2 by ALPN whatever this says");
            }
        }
        _ => {
            let mut rw = Vec::new();
            let mut x = std::mem::take(&mut h.dir);
            let done = dir::directive(d, &mut x, &sc, &mut rw, report);
            h.dir = x;
            h.rewrites.extend(rw);
            return done;
        }
    }
    true
}

/// The body of a `<Directory>`/`<Files>`, nested `<Files>` folded in.
fn section_body(
    d: &Directive,
    x: &mut Dir,
    sc: &Scope<'_>,
    rw: &mut Vec<Directive>,
    report: &mut Report,
) {
    for y in d.block.iter().flatten() {
        if y.is("Files") || y.is("FilesMatch") {
            let mut inner = Dir::default();
            let mut rw2 = Vec::new();
            section_body(y, &mut inner, sc, &mut rw2, report);
            files_section(y, &inner, x, report);
            continue;
        }
        if !dir::directive(y, x, sc, rw, report) {
            report.none(&y.at, y.text(), "not known to weir import here");
        }
    }
}

/// A `<Files>`/`<FilesMatch>` folded into its scope where weir has the same:
/// PHP through FastCGI, the `.ht*` files refused.
fn files_section(d: &Directive, x: &Dir, into: &mut Dir, report: &mut Report) {
    let pat = if d.arg(0) == "~" { d.arg(1) } else { d.arg(0) };
    let php_like = pat.contains("php") || pat.contains("\\.ph");
    if let Some(php) = &x.php {
        if php_like {
            into.php = Some(php.clone());
            report.mapped(&d.at, d.text(), "php (scripts ending .php)");
        } else {
            report.none(
                &d.at,
                d.text(),
                "weir's php runs files ending `.php`: other names are not scripts",
            );
        }
        return;
    }
    if pat.contains(".ht") && matches!(x.access, Some((Access::Nobody, _))) {
        report.approx(
            &d.at,
            d.text(),
            "weir refuses dot-files",
            "weir answers 404 (not 403) for .htaccess, .htpasswd and every other dot-file",
        );
        return;
    }
    if matches!(x.access, Some((Access::Nobody, _))) && x.headers.is_empty() {
        let is_regex = d.is("FilesMatch") || d.arg(0) == "~";
        if unsupported_regex(pat).is_none() {
            into.denied_files
                .push((dir::files_regex(pat, is_regex), d.at.clone()));
            report.approx(&d.at, d.text(), "a route with path_regex answering 403", "weir matches the whole path (Apache the file's name), and refuses these names wherever they are asked, also under an Alias");
            return;
        }
    }
    if x.access.is_none() && x.headers.is_empty() {
        report.mapped(&d.at, d.text(), "nothing weir needs");
        return;
    }
    report.none(
        &d.at,
        d.text(),
        "weir's rules go by path: write a route with `path_regex` for these file names by hand",
    );
}

/// `ProxyPass PATH URL|!` as a mapping.
fn proxy_pass(d: &Directive, g: &Globals, report: &mut Report) -> Option<Mapping> {
    let (path, url) = (d.arg(0), d.arg(1));
    if url == "!" {
        report.mapped(&d.at, d.text(), "a route serving files before the proxy's");
        return Some(Mapping {
            at: d.at.clone(),
            text: d.text(),
            prefix: path.to_string(),
            map: Map::Exclude,
        });
    }
    let (proxy, url_path) = proxy_value(d, url, g, report)?;
    for extra in &d.args[2..] {
        report.approx(
            &d.at,
            d.text(),
            "proxy",
            format!("`{extra}` is left out: weir's connection settings are the proxy's own keys"),
        );
    }
    Some(Mapping {
        at: d.at.clone(),
        text: d.text(),
        prefix: path.to_string(),
        map: Map::Proxy { url_path, proxy },
    })
}

/// `ProxyPassMatch REGEX URL`: PHP through `fcgi://` into the site's php,
/// else a regex route with the groups in its rewrite.
fn proxy_pass_match(
    d: &Directive,
    g: &Globals,
    h: &mut Host,
    report: &mut Report,
) -> Option<Mapping> {
    let (re, url) = (d.arg(0), d.arg(1));
    if let Some(rest) = url.strip_prefix("fcgi://") {
        let hp = rest.split('/').next().unwrap_or(rest);
        if re.contains("php") {
            h.dir.php = Some((hp.to_string(), d.at.clone()));
            report.approx(&d.at, d.text(), "php", "weir's php runs scripts under the site's root (the URL's directory is not used) and serves other files itself");
        } else {
            report.none(
                &d.at,
                d.text(),
                "FastCGI for other than .php: write a route with `fastcgi` by hand",
            );
        }
        return None;
    }
    if let Some(why) = unsupported_regex(re) {
        report.none(&d.at, d.text(), format!("weir's regexes have no {why}"));
        return None;
    }
    let (proxy, url_path) = proxy_value(d, url, g, report)?;
    let mut rewrite = String::new();
    let b = url_path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
            rewrite.push('{');
            rewrite.push(b[i + 1] as char);
            rewrite.push('}');
            i += 2;
        } else {
            rewrite.push(b[i] as char);
            i += 1;
        }
    }
    if rewrite.is_empty() {
        rewrite = "{path}".into();
    }
    rewrite.push_str("{?query}");
    report.mapped(&d.at, d.text(), "route path_regex + proxy");
    Some(Mapping {
        at: d.at.clone(),
        text: d.text(),
        prefix: re.to_string(),
        map: Map::ProxyRegex { rewrite, proxy },
    })
}

/// A proxy URL as weir's `to` (and `balance`), and the URL's path.
fn proxy_value(d: &Directive, url: &str, g: &Globals, report: &mut Report) -> Option<(V, String)> {
    let (url, unix) = match url.strip_prefix("unix:") {
        Some(u) => match u.split_once('|') {
            Some((sock, rest)) => (rest, Some(sock.to_string())),
            None => {
                report.none(&d.at, d.text(), "a unix: URL needs `|http://…`");
                return None;
            }
        },
        None => (url, None),
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        report.none(&d.at, d.text(), "not a URL weir proxies to");
        return None;
    };
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, String::new()),
    };
    let mut p: Vec<Key> = Vec::new();
    match scheme.to_ascii_lowercase().as_str() {
        "balancer" => {
            let Some(b) = g.balancers.get(hostport) else {
                report.none(
                    &d.at,
                    d.text(),
                    format!("no <Proxy balancer://{hostport}> with members"),
                );
                return None;
            };
            if b.members.is_empty() {
                report.none(
                    &d.at,
                    d.text(),
                    "the balancer has no member weir can send to",
                );
                return None;
            }
            let all_one = b.members.iter().all(|(_, w)| *w == 1);
            let to = b
                .members
                .iter()
                .map(|(a, w)| {
                    if all_one {
                        V::s(a.clone())
                    } else {
                        V::T(vec![
                            ("addr".into(), V::s(a.clone())),
                            ("weight".into(), V::I(*w)),
                        ])
                    }
                })
                .collect();
            p.push(("to".into(), V::A(to)));
            if let Some((m, _, _)) = &b.lbmethod
                && m != "round_robin"
            {
                p.push(("balance".into(), V::s(m.clone())));
            }
            p.push(("host".into(), V::s("upstream")));
        }
        "http" | "https" | "ws" | "wss" => {
            let addr = match &unix {
                Some(sock) => format!("unix:{sock}"),
                None => url_addr(url)?,
            };
            p.push(("to".into(), V::S(addr)));
            if unix.is_none() {
                // Apache's Host without ProxyPreserveHost: the URL's, default port left out.
                p.push(("host".into(), V::s(hostport)));
            }
            if scheme.eq_ignore_ascii_case("https") {
                report.approx(&d.at, d.text(), "proxy tls_verify = false", "Apache does not check the upstream's certificate unless SSLProxyVerify require; the import keeps that: set tls_verify = true once it is trusted");
                p.push(("tls_verify".into(), V::B(false)));
            }
        }
        "fcgi" => {
            report.none(
                &d.at,
                d.text(),
                "FastCGI by ProxyPass: write `php` or `fastcgi` on a route by hand",
            );
            return None;
        }
        _ => {
            report.none(&d.at, d.text(), format!("weir proxies HTTP, not {scheme}"));
            return None;
        }
    }
    // mod_proxy sends X-Forwarded-For/-Host/-Server; neither Forwarded nor Via.
    p.push(("forwarded".into(), V::B(false)));
    p.push(("via".into(), V::B(false)));
    report.approx(&d.at, d.text(), "proxy", "weir sends X-Forwarded-For, -Proto and -Host (Apache: -For, -Host and -Server), and replaces an untrusted client's X-Forwarded-For where Apache appends to it; an upstream's answer without Content-Type gets one from the path's extension in Apache (mod_mime), none in weir");
    Some((V::T(p), path))
}

/// A `LogFormat`/`CustomLog` format as weir's: a built-in name or a template.
fn log_format(f: &str, g: &Globals) -> (String, Option<String>) {
    let fmt = g.formats.get(f).map_or(f, String::as_str);
    let combined = "%h %l %u %t \"%r\" %>s %O \"%{Referer}i\" \"%{User-Agent}i\"";
    let common = "%h %l %u %t \"%r\" %>s %O";
    if fmt == combined || (f == "combined" && !g.formats.contains_key(f)) {
        return ("combined".into(), Some("weir's combined logs the body's length (%B), Apache's %O counts the head too; the user is `-`".into()));
    }
    if fmt == common || (f == "common" && !g.formats.contains_key(f)) {
        return ("common".into(), Some("weir's common logs the body's length (%B), Apache's %O counts the head too; the user is `-`".into()));
    }
    let mut out = String::new();
    let mut lost = Vec::new();
    let b = fmt.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' || c == b'}' {
            out.push(c as char);
            out.push(c as char);
            i += 1;
            continue;
        }
        if c != b'%' || i + 1 >= b.len() {
            out.push(c as char);
            i += 1;
            continue;
        }
        i += 1;
        let mut arg = None;
        if b[i] == b'{' {
            let end = fmt[i..].find('}').map_or(b.len(), |e| i + e);
            arg = Some(&fmt[i + 1..end.min(b.len())]);
            i = (end + 1).min(b.len());
        }
        while i < b.len() && (b[i] == b'>' || b[i] == b'<') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let spec = b[i] as char;
        i += 1;
        let v = match (spec, arg) {
            ('h' | 'a', _) => "{client_ip}".to_string(),
            ('l', _) => "-".to_string(),
            ('u', _) => "-".to_string(),
            ('t', None) => "[{time_local}]".to_string(),
            ('r', _) => "{method} {uri} {protocol}".to_string(),
            ('s', _) => "{status}".to_string(),
            ('b' | 'B' | 'O', _) => "{bytes_sent}".to_string(),
            ('I', _) => "{bytes_received}".to_string(),
            ('i', Some(h)) => format!("{{req.header.{h}}}"),
            ('o', Some(h)) => format!("{{resp.header.{h}}}"),
            ('C', Some(c)) => format!("{{cookie.{c}}}"),
            ('v' | 'V', _) => "{host}".to_string(),
            ('U', _) => "{path}".to_string(),
            ('q', _) => "{?query}".to_string(),
            ('m', _) => "{method}".to_string(),
            ('H', _) => "{protocol}".to_string(),
            ('T', _) | ('D', _) => {
                lost.push(format!(
                    "%{spec} (as {{request_time}}, seconds with milliseconds)"
                ));
                "{request_time}".to_string()
            }
            ('%', _) => "%".to_string(),
            (s, _) => {
                lost.push(format!("%{s}"));
                "-".to_string()
            }
        };
        out.push_str(&v);
    }
    let how = if lost.is_empty() {
        "translated to weir's variables; %u and %l are `-`".to_string()
    } else {
        format!(
            "translated to weir's variables; {} written otherwise",
            lost.join(", ")
        )
    };
    (out, Some(how))
}

/// The server config's settings with a vhost's over them.
fn merge_hosts(main: &Host, v: &Host) -> Host {
    let mut h = v.clone();
    if h.names.is_empty() {
        h.names = main.names.iter().take(1).cloned().collect();
    }
    if h.docroot.is_none() {
        h.docroot = main.docroot.clone();
    }
    h.dir = main.dir.merged(&v.dir);
    let mut dirs = main.dirs.clone();
    dirs.extend(v.dirs.iter().cloned());
    h.dirs = dirs;
    let mut rw = Vec::new();
    // Server-level per-directory rewrites still apply; server-context ones do not
    // (mod_rewrite's rules are not inherited by vhosts).
    rw.extend(
        main.rewrites
            .iter()
            .filter(|r| r.args.iter().any(|a| a.starts_with("__dir=")))
            .cloned(),
    );
    rw.extend(v.rewrites.iter().cloned());
    h.rewrites = rw;
    let mut locs = main.locs.clone();
    locs.extend(v.locs.iter().cloned());
    h.locs = locs;
    let mut maps = main.maps.clone();
    maps.extend(v.maps.iter().cloned());
    h.maps = maps;
    if h.access_log.is_none() {
        h.access_log = main.access_log.clone();
    }
    h.preserve_host = v.preserve_host.or(main.preserve_host);
    h.proxy_timeout = v.proxy_timeout.clone().or(main.proxy_timeout.clone());
    h
}

/// The site's filters from a scope's settings.
fn filters(x: &Dir, reader: &Reader, report: &mut Report) -> Vec<Key> {
    let mut f: Vec<Key> = Vec::new();
    match &x.access {
        Some((Access::Nobody, _)) => f.push(("deny".into(), V::strs(["0.0.0.0/0", "::/0"]))),
        Some((Access::Ips(ips), _)) => f.push(("allow".into(), V::strs(ips.clone()))),
        Some((Access::ValidUser(only), at)) => {
            let users = x.auth_file.as_ref().and_then(|(file, fat)| {
                let path = reader.resolve(file);
                crate::htpasswd::users(&path, "AuthUserFile", file, fat, report)
            });
            match users {
                Some(mut u) => {
                    if let Some(only) = only {
                        u.retain(|(n, _)| only.contains(n));
                    }
                    let mut t = Vec::new();
                    if let Some(r) = &x.auth_name {
                        t.push(("realm".to_string(), V::s(r.clone())));
                    }
                    t.push(("users".into(), V::T(u)));
                    f.push(("basic_auth".into(), V::T(t)));
                }
                None => {
                    report.none(
                        at,
                        "Require valid-user (no user weir can check)",
                        "everyone is denied until users are added",
                    );
                    f.push(("deny".into(), V::strs(["0.0.0.0/0", "::/0"])));
                }
            }
        }
        _ => {}
    }
    let mut rh: Vec<Key> = Vec::new();
    let mut qh: Vec<Key> = Vec::new();
    for (req, out) in [(false, &mut rh), (true, &mut qh)] {
        let mut set: Vec<Key> = Vec::new();
        let mut add: Vec<Key> = Vec::new();
        let mut remove: Vec<V> = Vec::new();
        if !req
            && x.expires_on
            && let Some(s) = x.expires
        {
            set.push(("Cache-Control".into(), V::S(format!("max-age={s}"))));
        }
        for r in x.headers.iter().filter(|r| r.request == req) {
            match r.op {
                "set" => {
                    set.retain(|(k, _)| !k.eq_ignore_ascii_case(&r.name));
                    set.push((r.name.clone(), V::s(r.value.clone())));
                }
                "add" => add.push((r.name.clone(), V::s(r.value.clone()))),
                _ => remove.push(V::s(r.name.clone())),
            }
        }
        if !set.is_empty() {
            out.push(("set".into(), V::T(set)));
        }
        if !add.is_empty() {
            out.push(("add".into(), V::T(add)));
        }
        if !remove.is_empty() {
            out.push(("remove".into(), V::A(remove)));
        }
    }
    if !qh.is_empty() {
        f.push(("request_headers".into(), V::T(qh)));
    }
    if !rh.is_empty() {
        f.push(("response_headers".into(), V::T(rh)));
    }
    f
}

/// `compress` from `AddOutputFilterByType DEFLATE`; off without it, as Apache.
fn compress(x: &Dir) -> V {
    if x.deflate.is_empty() {
        return V::B(false);
    }
    let mut types = x.deflate.clone();
    types.dedup();
    V::T(vec![
        ("encodings".into(), V::strs(["gzip"])),
        ("min_size".into(), V::I(0)),
        ("types".into(), V::strs(types)),
    ])
}

/// One vhost (or the main server) as sites: one per name.
#[allow(clippy::too_many_arguments)]
fn site(
    h: &Host,
    addrs: &[(String, u16)],
    first_on_port: bool,
    reader: &Reader,
    opts: &Options,
    report: &mut Report,
    names_seen: &mut Vec<String>,
) -> Vec<Table> {
    let at = h.at.clone().unwrap_or(Origin {
        file: reader
            .files
            .display(&reader.files.conf_dir.join("apache2.conf")),
        line: 1,
        col: 1,
    });
    let port = addrs[0].1;
    let ssl = h.ssl;
    let origin = if (port == 80 && !ssl) || (port == 443 && ssl) {
        "{scheme}://{host}".to_string()
    } else {
        format!("{{scheme}}://{{host}}:{port}")
    };
    let server_name = h.names.first().cloned().unwrap_or_default();
    let docroot = h.docroot.clone().map(|(d, _)| d).unwrap_or_else(|| {
        report.approx(&at, "(no DocumentRoot: Apache's default)", "root", "no DocumentRoot: Apache serves its compiled-in default, written as Debian's /var/www/html");
        "/var/www/html".into()
    });
    let sc = Scope {
        per_dir: None,
        origin: dir::ORIGIN,
        server_name: &server_name,
        overrides: None,
    };

    // The <Directory> sections over the DocumentRoot, shortest first, make
    // the site's settings; those under it make routes.
    let mut dirs = h.dirs.clone();
    dirs.sort_by_key(|(p, _, _)| p.len());
    let mut site_dir = Dir::default();
    let mut sub_dirs: Vec<(String, Dir, Origin)> = Vec::new();
    let aliases: Vec<(String, String)> = h
        .maps
        .iter()
        .filter_map(|m| match &m.map {
            Map::Alias { target } => {
                Some((m.prefix.clone(), target.trim_end_matches('/').to_string()))
            }
            _ => None,
        })
        .collect();
    let mut alias_dirs: HashMap<String, Dir> = HashMap::new();
    for (p, x, dat) in &dirs {
        if under(&docroot, p) {
            site_dir = site_dir.merged(x);
        } else if let Some(rest) = p.strip_prefix(&docroot).filter(|r| r.starts_with('/')) {
            sub_dirs.push((format!("{rest}/"), x.clone(), dat.clone()));
        } else if let Some((url, _)) = aliases.iter().find(|(_, t)| under(t, p)) {
            let e = alias_dirs.entry(url.clone()).or_default();
            *e = e.merged(x);
        } else {
            report.mapped(
                dat,
                format!("<Directory {p}>"),
                "nothing: no request of this site reaches it",
            );
        }
    }
    let mut site_dir = site_dir.merged(&h.dir);

    // Per-directory and server-context rewrites, now that the URLs are known.
    let mut server_rw = Vec::new();
    let mut dir_rw: Vec<(String, Vec<Directive>)> = Vec::new();
    for r in &h.rewrites {
        match r.args.iter().find_map(|a| a.strip_prefix("__dir=")) {
            Some(p) => {
                let mut r = r.clone();
                r.args.retain(|a| !a.starts_with("__dir="));
                let url = if under(&docroot, p) {
                    Some("/".to_string())
                } else {
                    p.strip_prefix(&docroot)
                        .filter(|x| x.starts_with('/'))
                        .map(|x| format!("{x}/"))
                };
                match url {
                    Some(u) => match dir_rw.iter_mut().find(|(x, _)| *x == u) {
                        Some((_, v)) => v.push(r),
                        None => dir_rw.push((u, vec![r])),
                    },
                    None => report.none(
                        &r.at,
                        r.text(),
                        "its directory is not this site's DocumentRoot",
                    ),
                }
            }
            None => server_rw.push(r.clone()),
        }
    }
    let mut redirects: Vec<Unit> = Vec::new();
    if !server_rw.is_empty() {
        let mut x = Dir::default();
        dir::rewrites(&server_rw, &mut x, &sc, report);
        redirects.extend(x.redirects);
        if let Some(f) = x.front {
            site_dir.front = Some(f);
        }
    }
    redirects.extend(std::mem::take(&mut site_dir.redirects));

    // .htaccess files under the DocumentRoot.
    let mut ht_units: Vec<(String, Dir)> = Vec::new();
    htaccess(
        &docroot,
        &site_dir,
        &dirs,
        opts,
        &server_name,
        reader,
        report,
        &mut ht_units,
    );
    for (url, rw) in &dir_rw {
        let sc2 = Scope {
            per_dir: Some(url.as_str()),
            ..sc
        };
        let mut x = Dir::default();
        dir::rewrites(rw, &mut x, &sc2, report);
        if url == "/" {
            redirects.extend(std::mem::take(&mut x.redirects));
            if x.front.is_some() {
                site_dir.front = x.front;
            }
        } else {
            ht_units.push((url.clone(), x));
        }
    }
    let mut sub_units: Vec<(String, Dir)> = Vec::new();
    for (url, x) in ht_units {
        if url == "/" {
            redirects.extend(x.redirects.iter().cloned());
            site_dir = site_dir.merged(&Dir {
                redirects: Vec::new(),
                ..x
            });
        } else {
            sub_units.push((url, x));
        }
    }
    for (url, x, _) in sub_dirs {
        sub_units.push((url, x));
    }

    let mut t = Table::new(String::new(), false);
    let mut routes: Vec<Table> = Vec::new();
    let mut names = h.names.clone();
    if names.is_empty() {
        names.push(String::new());
    }
    let listen: Vec<V> = addrs.iter().map(|(a, _)| V::s(a.clone())).collect();
    t.set(
        "listen",
        if listen.len() == 1 {
            listen[0].clone()
        } else {
            V::A(listen)
        },
    );
    if first_on_port && !names[0].is_empty() {
        t.set("default", V::B(true));
        report.approx(&at, format!("(the first vhost on port {port}: {})", names[0]), "default = true", "Apache's first vhost on an address answers Hosts no other names; weir's catch-all site would take them first when there is one");
    }
    if ssl {
        match (&h.cert, &h.key) {
            (Some(c), Some(k)) => t.set(
                "tls",
                V::T(vec![
                    ("cert".into(), V::s(c.clone())),
                    ("key".into(), V::s(k.clone())),
                ]),
            ),
            _ => {
                report.none(&at, "SSLEngine on without SSLCertificateFile and SSLCertificateKeyFile", "weir's own certificate is used (`tls = { issuer = \"internal\" }`): add `tls` by hand");
                t.set("tls", V::T(vec![("issuer".into(), V::s("internal"))]));
            }
        }
    }
    t.set("root", V::s(docroot.clone()));

    // Static settings.
    let idx = site_dir
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
        .filter(|i| !i.ends_with(".php") && !i.ends_with(".cgi") && !i.ends_with(".pl"))
        .cloned()
        .collect();
    if html_index != ["index.html"] && !html_index.is_empty() {
        t.set("index", V::strs(html_index));
    }
    if site_dir.browse == Some(true) {
        t.set("browse", V::B(true));
    }
    if let Some(php) = &site_dir.php {
        let mut extra: Vec<Key> = Vec::new();
        match &site_dir.front {
            Some(f) if f.target.ends_with(".php") => {
                report.approx(
                    &f.at,
                    "(front controller: PATH_INFO)",
                    "php",
                    "Apache's rewrite to the front controller sends no PATH_INFO (PHP_SELF is the script); weir sends the request's path as PATH_INFO (PHP_SELF the script and the path), and an empty one when the path names the script (WordPress and Laravel route from REQUEST_URI either way)",
                );
                if f.target != "/index.php" {
                    extra.push(("front_controller".into(), V::s(f.target.clone())));
                }
                if !f.dirs {
                    report.approx(
                        &f.at,
                        "(front controller without `!-d`)",
                        "php",
                        "weir serves a directory's index before the front controller",
                    );
                }
            }
            _ => extra.push(("front_controller".into(), V::s(""))),
        }
        if !php_index.is_empty() && php_index != ["index.php"] {
            extra.push(("index".into(), V::strs(php_index.clone())));
        }
        let addr = V::s(php.0.clone());
        t.set(
            "php",
            if extra.is_empty() {
                addr
            } else {
                extra.insert(0, ("to".into(), addr));
                V::T(extra)
            },
        );
    } else if let Some(f) = &site_dir.front {
        let mut tf = vec![V::s("{path}")];
        if f.dirs {
            tf.push(V::s("{path}/"));
        }
        tf.push(V::s(f.target.clone()));
        if f.target.ends_with(".php") {
            report.none(&f.at, format!("(front controller {})", f.target), "the site runs no PHP (no SetHandler proxy:fcgi for .php): weir would serve the script's source; add `php = …` by hand");
        } else {
            t.set("try_files", V::A(tf));
        }
    }
    if let Some(a) = &h.access_log {
        t.set("access_log", a.clone());
    }
    if !site_dir.errors.is_empty() {
        let e: Vec<Key> = site_dir
            .errors
            .iter()
            .map(|(c, u)| (c.to_string(), V::S(format!("{docroot}{u}"))))
            .collect();
        t.set("errors", V::T(e));
    }
    t.set("compress", compress(&site_dir));

    let site_filters = filters(&site_dir, reader, report);
    for (k, v) in &site_filters {
        t.set(k, v.clone());
    }

    // Routes, in the order Apache's phases decide: redirects first (mod_alias
    // and mod_rewrite's redirects answer at translation), then the
    // Location and Directory scopes (with the handler the mapping gives
    // them), then the mappings in the order written.
    for u in &redirects {
        routes.push(unit_table(u, &origin));
    }
    let handler_for = |prefix: &str| -> Vec<Key> {
        for m in &h.maps {
            match &m.map {
                Map::Exclude if prefix.starts_with(&m.prefix) => {
                    return vec![("root".into(), V::s(docroot.clone()))];
                }
                Map::Proxy { url_path, proxy } if prefix.starts_with(&m.prefix) => {
                    let mut k: Vec<Key> = vec![(
                        "proxy".into(),
                        with_host(proxy, h.preserve_host, h.proxy_timeout.as_deref()),
                    )];
                    if !(m.prefix == "/" && (url_path.is_empty() || url_path == "/")) {
                        let tail = &prefix[m.prefix.len()..];
                        let mut r = format!(
                            "{}{}",
                            url_path.trim_end_matches('/'),
                            if m.prefix.ends_with('/') { "/" } else { "" }
                        );
                        r.push_str(tail);
                        k.push((
                            "rewrite".into(),
                            V::S(if r.is_empty() { "/".into() } else { r }),
                        ));
                    }
                    return k;
                }
                Map::Alias { target } if prefix.starts_with(m.prefix.trim_end_matches('/')) => {
                    return vec![
                        ("root".into(), V::s(target.trim_end_matches('/'))),
                        ("strip_prefix".into(), V::B(true)),
                    ];
                }
                _ => {}
            }
        }
        Vec::new()
    };
    for l in &h.locs {
        let mut rt = Table::new(String::new(), true);
        rt.comments
            .push(format!("{}:{} {}", l.at.file, l.at.line, l.text));
        let keys: Vec<Key> = match (&l.proxy, &l.prefix) {
            (Some(m), _) => match &m.map {
                Map::Proxy { url_path, proxy } => {
                    let mut k = vec![(
                        "proxy".into(),
                        with_host(proxy, h.preserve_host, h.proxy_timeout.as_deref()),
                    )];
                    let p = m.prefix.as_str();
                    if p.ends_with('/') && (url_path.ends_with('/') || url_path.is_empty()) {
                        if !(p == "/" && url_path.len() <= 1) {
                            k.push((
                                "rewrite".into(),
                                V::s(if url_path.is_empty() {
                                    "/"
                                } else {
                                    url_path.as_str()
                                }),
                            ));
                        }
                        rt.set("path", V::s(p));
                    } else {
                        rt.set(
                            "path_regex",
                            V::S(format!("^{}(/.*)?$", regex_escape(p.trim_end_matches('/')))),
                        );
                        k.push(("rewrite".into(), V::S(format!("{url_path}{{1}}{{?query}}"))));
                    }
                    report.mapped(&l.at, l.text.clone(), "route proxy");
                    k
                }
                _ => Vec::new(),
            },
            (None, Some(p)) => handler_for(p),
            (None, None) => Vec::new(),
        };
        if rt.get("path").is_none() && rt.get("path_regex").is_none() {
            rt.set(&l.pattern.0, l.pattern.1.clone());
        }
        let fl = filters(&l.dir, reader, report);
        if keys.is_empty() && fl.is_empty() && l.dir.redirects.is_empty() {
            if !l.status_handler {
                report.mapped(&l.at, l.text.clone(), "nothing weir needs");
            }
            continue;
        }
        for u in &l.dir.redirects {
            routes.push(unit_table(u, &origin));
        }
        if fl.is_empty() && keys.is_empty() {
            continue;
        }
        for (k, v) in keys {
            rt.set(&k, v);
        }
        if rt.get("proxy").is_none() && rt.get("root").is_none() {
            rt.set("root", V::s(docroot.clone()));
        }
        for (k, v) in fl {
            rt.set(&k, v);
        }
        report.mapped(&l.at, l.text.clone(), "route");
        routes.push(rt);
    }
    for (url, x) in &sub_units {
        for u in &x.redirects {
            routes.push(unit_table(u, &origin));
        }
        let fl = filters(x, reader, report);
        if fl.is_empty() && x.browse.is_none() && x.index.is_none() {
            continue;
        }
        let mut rt = Table::new(String::new(), true);
        rt.comments.push(format!(
            "<Directory {docroot}{}>",
            url.trim_end_matches('/')
        ));
        rt.set("path", V::S(format!("{}*", url)));
        let hk = handler_for(url);
        if hk.is_empty() {
            rt.set("root", V::s(docroot.clone()));
        }
        for (k, v) in hk {
            rt.set(&k, v);
        }
        if matches!(x.access, Some((Access::Nobody, _))) {
            rt.keys.retain(|(k, _)| k == "path");
            rt.set("respond", V::I(403));
        } else {
            for (k, v) in fl {
                rt.set(&k, v);
            }
        }
        routes.push(rt);
    }
    for (re, fat) in &site_dir.denied_files {
        let mut rt = Table::new(String::new(), true);
        rt.comments
            .push(format!("{}:{} files refused", fat.file, fat.line));
        rt.set("path_regex", V::s(re.clone()));
        rt.set("respond", V::I(403));
        routes.push(rt);
    }
    // Expires by type: a route per type's extensions, answered by the site's files.
    if site_dir.expires_on {
        for (ty, secs, eat) in &site_dir.expires_by_type {
            let exts = dir::extensions(ty);
            let mut rt = Table::new(String::new(), true);
            rt.comments
                .push(format!("{}:{} ExpiresByType {ty}", eat.file, eat.line));
            rt.set("path_regex", V::S(format!("(?i)\\.({})$", exts.join("|"))));
            rt.set("root", V::s(docroot.clone()));
            // A path of the type naming no file still reaches the front
            // controller, as in Apache (mod_expires only adds the field).
            for k in ["php", "try_files"] {
                if let Some(v) = t.get(k) {
                    rt.set(k, v.clone());
                }
            }
            let mut set = vec![("Cache-Control".to_string(), V::S(format!("max-age={secs}")))];
            for r in site_dir
                .headers
                .iter()
                .filter(|r| !r.request && r.op == "set")
            {
                if !r.name.eq_ignore_ascii_case("cache-control") {
                    set.push((r.name.clone(), V::s(r.value.clone())));
                }
            }
            rt.set("response_headers", V::T(vec![("set".into(), V::T(set))]));
            routes.push(rt);
        }
    }
    let mut site_proxy = None;
    for m in &h.maps {
        let mut rt = Table::new(String::new(), true);
        rt.comments
            .push(format!("{}:{} {}", m.at.file, m.at.line, m.text));
        match &m.map {
            Map::Exclude => {
                let p = &m.prefix;
                rt.set("path", V::s(p.clone()));
                rt.set("root", V::s(docroot.clone()));
            }
            Map::Proxy { url_path, proxy } => {
                let p = m.prefix.as_str();
                let pv = with_host(proxy, h.preserve_host, h.proxy_timeout.as_deref());
                if p == "/" && (url_path.is_empty() || url_path == "/") {
                    site_proxy = Some(pv);
                    continue;
                }
                if p.ends_with('/') && url_path.ends_with('/') {
                    rt.set("path", V::s(p));
                    rt.set("rewrite", V::s(url_path.clone()));
                } else if url_path.is_empty() {
                    // `ProxyPass /app http://b`: `/app/x` goes as `/x`.
                    rt.set(
                        "path_regex",
                        V::S(format!("^{}(/.*)$", regex_escape(p.trim_end_matches('/')))),
                    );
                    rt.set("rewrite", V::s("{1}{?query}"));
                    report.approx(&m.at, m.text.clone(), "route", format!("`{p}` alone (without a path after it) is not proxied: Apache would ask the upstream for an empty path"));
                } else {
                    // Apache maps whole segments: `/a` + `http://b/x` sends
                    // `/a` as `/x`, `/a/c` as `/x/c`, and leaves `/abc` alone.
                    rt.set(
                        "path_regex",
                        V::S(format!("^{}(/.*)?$", regex_escape(p.trim_end_matches('/')))),
                    );
                    rt.set("rewrite", V::S(format!("{url_path}{{1}}{{?query}}")));
                }
                rt.set("proxy", pv);
            }
            Map::ProxyRegex { rewrite, proxy } => {
                rt.set("path_regex", V::s(m.prefix.clone()));
                rt.set("rewrite", V::s(rewrite.clone()));
                rt.set(
                    "proxy",
                    with_host(proxy, h.preserve_host, h.proxy_timeout.as_deref()),
                );
            }
            Map::Alias { target } => {
                let p = m.prefix.as_str();
                rt.set(
                    "path",
                    V::S(if p.ends_with('/') {
                        p.to_string()
                    } else {
                        format!("{p}/*")
                    }),
                );
                rt.set("strip_prefix", V::B(true));
                rt.set("root", V::s(target.trim_end_matches('/')));
                if let Some(x) = alias_dirs.get(p) {
                    if x.browse.unwrap_or(false) != site_dir.browse.unwrap_or(false) {
                        report.approx(&m.at, m.text.clone(), "route", "whether the aliased directory is listed is the site's `browse` setting in weir, not its <Directory>'s Options");
                    }
                    if matches!(x.access, Some((Access::Nobody, _))) {
                        rt.keys.retain(|(k, _)| k == "path");
                        rt.set("respond", V::I(403));
                    }
                }
            }
        }
        routes.push(rt);
    }
    if let Some(pv) = site_proxy {
        t.set("proxy", pv);
        t.keys.retain(|(k, _)| {
            k != "root" && k != "try_files" && k != "php" && k != "browse" && k != "index"
        });
    }
    // ProxyPassReverse applies to every answer mod_proxy passes in its
    // vhost: each proxy of the site gets the whole list.
    let mut rewrites = Vec::new();
    for (at, text, rules) in &h.reverse {
        match rules {
            Ok((rules, note)) => {
                let to = "proxy rewrite_location (Location and Content-Location; the obsolete URI field is passed as it is)";
                match note {
                    Some(why) => report.approx(at, text.clone(), to, why.clone()),
                    None => report.mapped(at, text.clone(), to),
                }
                for (from, to) in rules {
                    rewrites.push(V::T(vec![
                        ("from".into(), V::s(from.clone())),
                        ("to".into(), V::s(to.clone())),
                    ]));
                }
            }
            Err(why) => report.none(at, text.clone(), why.clone()),
        }
    }
    if !rewrites.is_empty() {
        for keys in std::iter::once(&mut t.keys).chain(routes.iter_mut().map(|r| &mut r.keys)) {
            for (k, v) in keys.iter_mut() {
                if let (true, V::T(p)) = (k == "proxy", v) {
                    p.push(("rewrite_location".into(), V::A(rewrites.clone())));
                }
            }
        }
    }
    if t.get("root").is_some() {
        report.baseline("static files", "weir answers a directory asked without its slash with 308 and a relative Location (Apache: 301, absolute), adds `; charset=utf-8` to textual types, and refuses dot-files (.git, .env) Apache would serve (`serve_hidden = true` serves them)");
    }
    if site_dir.php.is_some() {
        let why = if site_dir.front.is_some() {
            "a `.php` path that names no script gets 404 in weir; Apache's `!-f` rewrite sends it to the front controller"
        } else {
            "a `.php` path that names no script gets 404 from weir itself (Apache hands it to PHP-FPM, which answers 404 \"File not found.\")"
        };
        report.approx(&at, "(PHP through SetHandler)", "php", why);
    }

    // One site per name.
    let mut out = Vec::new();
    for n in &names {
        let site_name = if n.is_empty() {
            if addrs[0].0.starts_with("0.0.0.0:") {
                format!(":{port}")
            } else {
                addrs[0].0.clone()
            }
        } else {
            format!("{n}:{port}")
        };
        if names_seen.contains(&site_name) {
            report.none(&at, format!("VirtualHost ({site_name})"), "a vhost with the same name on the same port comes earlier: Apache never picks this one");
            continue;
        }
        names_seen.push(site_name.clone());
        let key = format!("site.\"{site_name}\"");
        let mut st = t.clone();
        st.header = key.clone();
        st.comments.push(format!(
            "{}:{} VirtualHost ({}{})",
            at.file,
            at.line,
            addrs
                .iter()
                .map(|(a, _)| a.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if n.is_empty() {
                String::new()
            } else {
                format!("; ServerName {n}")
            }
        ));
        if n != &names[0] {
            st.keys.retain(|(k, _)| k != "default");
        }
        out.push(st);
        for r in &routes {
            let mut r = r.clone();
            r.header = format!("{key}.route");
            out.push(r);
        }
    }
    out
}

/// A proxy value with Apache's Host rule and timeout applied.
fn with_host(proxy: &V, preserve: Option<bool>, timeout: Option<&str>) -> V {
    let V::T(mut p) = proxy.clone() else {
        return proxy.clone();
    };
    if preserve == Some(true) {
        p.retain(|(k, _)| k != "host");
    }
    if let Some(t) = timeout {
        p.push(("response_timeout".into(), V::s(t)));
    }
    if p.len() == 1 {
        return p.remove(0).1;
    }
    V::T(p)
}

/// A redirect or refusal route, its targets made absolute with `origin`.
fn unit_table(u: &Unit, origin: &str) -> Table {
    fn fill(v: &V, origin: &str) -> V {
        match v {
            V::S(s) => V::S(s.replace(dir::ORIGIN, origin)),
            V::T(t) => V::T(
                t.iter()
                    .map(|(k, x)| (k.clone(), fill(x, origin)))
                    .collect(),
            ),
            V::A(a) => V::A(a.iter().map(|x| fill(x, origin)).collect()),
            other => other.clone(),
        }
    }
    let mut rt = Table::new(String::new(), true);
    rt.comments.push(u.comment.clone());
    if let Some((k, v)) = &u.pattern {
        rt.set(k, v.clone());
    }
    for (k, v) in &u.keys {
        rt.set(k, fill(v, origin));
    }
    rt
}

/// `dir` is `root` or above it.
fn under(root: &str, dir: &str) -> bool {
    let d = dir.trim_end_matches('/');
    (d.is_empty() && root.starts_with('/')) || root == d || root.starts_with(&format!("{d}/"))
}

/// The `.htaccess` files under the DocumentRoot: read into `out` (URL
/// prefix, settings) with `--htaccess` and where AllowOverride lets Apache
/// read them; else reported.
#[allow(clippy::too_many_arguments)]
fn htaccess(
    docroot: &str,
    site_dir: &Dir,
    dirs: &[(String, Dir, Origin)],
    opts: &Options,
    server_name: &str,
    reader: &Reader,
    report: &mut Report,
    out: &mut Vec<(String, Dir)>,
) {
    let real = reader.resolve(docroot);
    let mut found: Vec<PathBuf> = Vec::new();
    let mut stack = vec![(real.clone(), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && depth < 8 && found.len() < 200 {
                stack.push((p, depth + 1));
            } else if ft.is_file() && e.file_name() == ".htaccess" {
                found.push(p);
            }
        }
    }
    found.sort();
    for f in found {
        let rel_dir = f
            .parent()
            .and_then(|p| p.strip_prefix(&real).ok())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let url = if rel_dir.is_empty() {
            "/".to_string()
        } else {
            format!("/{rel_dir}/")
        };
        let fs_dir = format!("{docroot}{}", url.trim_end_matches('/'));
        // AllowOverride in force there: the longest <Directory> over it (None by default).
        let mut allowed: Option<Vec<String>> = site_dir.allow_override.clone();
        let mut best = 0;
        for (p, x, _) in dirs {
            if under(&fs_dir, p) && p.len() >= best && x.allow_override.is_some() {
                best = p.len();
                allowed = x.allow_override.clone();
            }
        }
        let allowed = allowed.unwrap_or_default();
        let shown = format!("{fs_dir}/.htaccess");
        let at = Origin {
            file: shown.clone(),
            line: 1,
            col: 1,
        };
        if allowed.is_empty() {
            report.mapped(
                &at,
                shown,
                "nothing: AllowOverride None, Apache does not read it either",
            );
            continue;
        }
        if !opts.htaccess {
            report.none(&at, shown, "exists and was not read: run `weir import apache --htaccess …` to carry its rules over");
            continue;
        }
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            Err(e) => {
                report.none(&at, shown, format!("cannot read it: {e}"));
                continue;
            }
        };
        let mut r2 = Reader::new(&f, None, crate::env::Env::default());
        let list = match r2.text(&shown, &text) {
            Ok(l) => l,
            Err(e) => {
                report.none(
                    &e.at,
                    shown.clone(),
                    format!("cannot parse it: {}", e.message),
                );
                continue;
            }
        };
        let sc = Scope {
            per_dir: Some(url.as_str()),
            origin: dir::ORIGIN,
            server_name,
            overrides: Some(allowed.as_slice()),
        };
        let mut x = Dir::default();
        let mut rw = Vec::new();
        for d in &list {
            if d.is("Files") || d.is("FilesMatch") {
                let mut inner = Dir::default();
                let mut rw2 = Vec::new();
                section_body(d, &mut inner, &sc, &mut rw2, report);
                files_section(d, &inner, &mut x, report);
                continue;
            }
            if !dir::directive(d, &mut x, &sc, &mut rw, report) {
                report.none(&d.at, d.text(), "not known to weir import in a .htaccess");
            }
        }
        dir::rewrites(&rw, &mut x, &sc, report);
        report.mapped(&at, shown, format!("the rules of {url}"));
        out.push((url, x));
    }
}
