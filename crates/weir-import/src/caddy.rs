//! Caddyfiles into weir's config: the global options block, snippets and
//! `import`, site blocks (one weir site per address), named and path
//! matchers, and the directives a site is made of (`root`, `file_server`,
//! `encode`, `reverse_proxy`, `php_fastcgi`, `header`, `redir`, `respond`,
//! `try_files`, `basic_auth`, `handle`, `handle_path`, `route`, `tls`,
//! `log`), with Caddy's directive order reproduced as weir's route order.
//!
//! Reads files only; never writes a weir key for what it cannot honour.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Origin};
use crate::report::Report;
use crate::toml::{Table, V};
use crate::{Imported, Options};

/// One word of a Caddyfile.
#[derive(Debug, Clone)]
struct Tok {
    text: String,
    at: Origin,
}

/// A line (its words) and the block it opens.
#[derive(Debug, Clone)]
struct Line {
    words: Vec<Tok>,
    block: Option<Vec<Line>>,
}

impl Line {
    fn name(&self) -> &str {
        self.words.first().map_or("", |t| t.text.as_str())
    }
    fn at(&self) -> &Origin {
        &self.words[0].at
    }
    fn text(&self) -> String {
        let mut s: Vec<String> = self.words.iter().map(|w| w.text.clone()).collect();
        if self.block.is_some() {
            s.push("{ … }".into());
        }
        s.join(" ")
    }
    fn args(&self) -> Vec<&str> {
        self.words[1..].iter().map(|t| t.text.as_str()).collect()
    }
}

fn lex(file: &str, src: &str) -> Result<Vec<(Vec<Tok>, bool)>, Error> {
    // Each line as its words, with whether it ended a line (vs `{`/`}` alone).
    let mut lines: Vec<(Vec<Tok>, bool)> = Vec::new();
    let mut cur: Vec<Tok> = Vec::new();
    let b = src.as_bytes();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let at = |line, col| Origin {
        file: file.to_string(),
        line,
        col,
    };
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            if !cur.is_empty() {
                lines.push((std::mem::take(&mut cur), true));
            }
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c == b' ' || c == b'\t' || c == b'\r' {
            i += 1;
            col += 1;
            continue;
        }
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = at(line, col);
        let mut w = String::new();
        if c == b'"' || c == b'`' {
            let q = c;
            i += 1;
            col += 1;
            loop {
                if i >= b.len() {
                    return Err(Error::new(start, "unterminated quoted string"));
                }
                let d = b[i];
                if q == b'"' && d == b'\\' && i + 1 < b.len() && b[i + 1] == b'"' {
                    w.push('"');
                    i += 2;
                    col += 2;
                    continue;
                }
                i += 1;
                if d == b'\n' {
                    line += 1;
                    col = 1;
                } else {
                    col += 1;
                }
                if d == q {
                    break;
                }
                w.push(d as char);
            }
            // Re-read as UTF-8: bytes were pushed one by one.
            let w = String::from_utf8_lossy(&w.chars().map(|c| c as u8).collect::<Vec<_>>())
                .into_owned();
            cur.push(Tok { text: w, at: start });
            continue;
        }
        let s = i;
        while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
        }
        w.push_str(&src[s..i]);
        col += src[s..i].chars().count();
        cur.push(Tok { text: w, at: start });
    }
    if !cur.is_empty() {
        lines.push((cur, true));
    }
    Ok(lines)
}

/// The host of a site address (`https://h:443`, `h:8080`, `[::1]`).
fn address_host(a: &str) -> &str {
    let a = a
        .strip_prefix("http://")
        .or_else(|| a.strip_prefix("https://"))
        .unwrap_or(a);
    if let Some(r) = a.strip_prefix('[') {
        return r.split(']').next().unwrap_or("");
    }
    match a.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => a,
    }
}

fn ip_name(a: &str) -> bool {
    address_host(a).parse::<std::net::IpAddr>().is_ok()
}

/// Whether a site block is named by a host name (not an IP, not a bare port).
fn has_named_sites(top: &[Line]) -> bool {
    top.iter()
        .filter(|l| l.block.is_some() && !l.name().is_empty())
        .flat_map(|l| l.words.iter().flat_map(|w| w.text.split(',')))
        .map(str::trim)
        .any(|a| {
            let h = address_host(a);
            !a.is_empty() && !a.starts_with('(') && !h.is_empty() && !ip_name(a)
        })
}

/// Caddy's request placeholders and weir's names for them.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("host", "host"),
    ("http.request.host", "host"),
    ("hostport", "http_host"),
    ("http.request.hostport", "http_host"),
    ("uri", "uri"),
    ("http.request.uri", "uri"),
    ("path", "path"),
    ("http.request.uri.path", "path"),
    ("query", "query"),
    ("http.request.uri.query", "query"),
    ("scheme", "scheme"),
    ("http.request.scheme", "scheme"),
    ("method", "method"),
    ("http.request.method", "method"),
    ("remote_host", "client_ip"),
    ("http.request.remote.host", "client_ip"),
    ("client_ip", "client_ip"),
    ("http.vars.client_ip", "client_ip"),
];

/// The placeholders of a word in weir's names, or the first one weir has
/// no equivalent of. `{upstream_hostport}` is left for `reverse_proxy`.
fn weir_placeholders(word: &str) -> Result<String, String> {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(s) = rest.find('{') {
        out.push_str(&rest[..s]);
        let after = &rest[s + 1..];
        let end = after.find('}');
        let name = end.map(|e| &after[..e]);
        match name {
            Some(n)
                if !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) =>
            {
                if n == "upstream_hostport" || n == "http.reverse_proxy.upstream.hostport" {
                    out.push_str("{upstream_hostport}");
                } else if let Some((_, w)) = PLACEHOLDERS.iter().find(|(c, _)| *c == n) {
                    out.push('{');
                    out.push_str(w);
                    out.push('}');
                } else {
                    return Err(format!("{{{n}}}"));
                }
                rest = &after[n.len() + 1..];
            }
            _ => {
                // Not a placeholder (a JSON body, a lone brace): kept as written.
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Every word's placeholders in weir's names; a line that uses one weir
/// has no equivalent of is left out and reported.
fn translate_placeholders(lines: Vec<Line>, report: &mut Report) -> Vec<Line> {
    let mut out = Vec::new();
    'line: for mut l in lines {
        for i in 0..l.words.len() {
            let w = &l.words[i].text;
            if w == "{" || w == "}" || !w.contains('{') {
                continue;
            }
            match weir_placeholders(w) {
                Ok(t) => l.words[i].text = t,
                Err(p) => {
                    report.none(
                        l.at(),
                        l.text(),
                        format!("the placeholder {p} has no weir equivalent (weir's are {{host}}, {{http_host}}, {{uri}}, {{path}}, {{query}}, {{scheme}}, {{method}}, {{client_ip}})"),
                    );
                    continue 'line;
                }
            }
        }
        if let Some(b) = l.block.take() {
            l.block = Some(translate_placeholders(b, report));
        }
        out.push(l);
    }
    out
}

/// Lines into a tree by their `{` and `}` words.
fn tree(file: &str, lines: Vec<(Vec<Tok>, bool)>) -> Result<Vec<Line>, Error> {
    let mut stack: Vec<(Vec<Line>, Option<Vec<Tok>>)> = vec![(Vec::new(), None)];
    for (mut words, _) in lines {
        // A `}` opening the line closes a block; `{` ending it opens one.
        while words.first().is_some_and(|w| w.text == "}") {
            let at = words.remove(0).at;
            let (body, head) = stack.pop().unwrap();
            let Some(head) = head else {
                return Err(Error::new(at, "unexpected `}`"));
            };
            stack.last_mut().unwrap().0.push(Line {
                words: head,
                block: Some(body),
            });
        }
        if words.is_empty() {
            continue;
        }
        if words.last().is_some_and(|w| w.text == "{") {
            let open = words.pop().unwrap();
            if words.is_empty() {
                // The global options block has no words before its `{`.
                words.push(Tok {
                    text: String::new(),
                    at: open.at,
                });
            }
            stack.push((Vec::new(), Some(words)));
            continue;
        }
        if let Some(i) = words.iter().position(|w| w.text == "{" || w.text == "}") {
            // `handle /x { respond "hi" }` on one line.
            let (head, rest) = words.split_at(i);
            if rest[0].text == "{" && rest.last().is_some_and(|w| w.text == "}") {
                let inner: Vec<Tok> = rest[1..rest.len() - 1].to_vec();
                let body = if inner.is_empty() {
                    Vec::new()
                } else {
                    vec![Line {
                        words: inner,
                        block: None,
                    }]
                };
                stack.last_mut().unwrap().0.push(Line {
                    words: head.to_vec(),
                    block: Some(body),
                });
                continue;
            }
            return Err(Error::new(
                rest[0].at.clone(),
                format!("`{}` must end its line or stand alone", rest[0].text),
            ));
        }
        stack
            .last_mut()
            .unwrap()
            .0
            .push(Line { words, block: None });
    }
    if stack.len() > 1 {
        let at = stack.last().unwrap().1.as_ref().unwrap()[0].at.clone();
        return Err(Error::new(
            at,
            format!("{file}: a block opened here is never closed"),
        ));
    }
    Ok(stack.pop().unwrap().0)
}

struct Reader {
    dir: PathBuf,
    main: PathBuf,
    snippets: HashMap<String, Vec<Line>>,
    depth: usize,
    env: crate::env::Env,
}

impl Reader {
    fn display(&self, p: &Path) -> String {
        p.strip_prefix(&self.dir)
            .map_or_else(|_| p.display().to_string(), |r| r.display().to_string())
    }

    fn file(&mut self, p: &Path, from: Option<&Origin>) -> Result<Vec<Line>, Error> {
        let shown = self.display(p);
        let src = std::fs::read_to_string(p).map_err(|e| {
            Error::new(
                from.cloned().unwrap_or(Origin {
                    file: shown.clone(),
                    line: 1,
                    col: 1,
                }),
                format!("cannot read {}: {e}", p.display()),
            )
        })?;
        // Caddy substitutes `{$NAME}` before it parses; `{env.NAME}` is read
        // at run time, from the same environment.
        let src = crate::env::replace(&mut self.env, &shown, &src, "{$", '}', Some(':'))?;
        let src = crate::env::replace(&mut self.env, &shown, &src, "{env.", '}', None)?;
        tree(&shown, lex(&shown, &src)?)
    }

    /// Snippets taken out, `import` spliced in, at every depth.
    fn expand(&mut self, lines: Vec<Line>, report: &mut Report) -> Result<Vec<Line>, Error> {
        let mut out = Vec::new();
        for l in lines {
            let name = l.name().to_string();
            if name.starts_with('(')
                && name.ends_with(')')
                && let Some(block) = l.block
            {
                self.snippets
                    .insert(name[1..name.len() - 1].to_string(), block);
                continue;
            }
            if name == "import" && l.words.len() >= 2 {
                if self.depth > 16 {
                    return Err(Error::new(l.at().clone(), "imports nested too deeply"));
                }
                let target = l.words[1].text.clone();
                let args: Vec<String> = l.words[2..].iter().map(|w| w.text.clone()).collect();
                let body = match self.snippets.get(&target) {
                    Some(b) => b.clone(),
                    None => {
                        let p = self.main.parent().unwrap_or(Path::new(".")).join(&target);
                        if crate::glob::has_wildcard(&target) {
                            // A glob: its files in name order; none is no error (Caddy warns).
                            let mut all = Vec::new();
                            for f in crate::glob::expand_glob(&p) {
                                all.extend(self.file(&f, Some(l.at()))?);
                            }
                            all
                        } else {
                            self.file(&p, Some(l.at()))?
                        }
                    }
                };
                let body = substitute(body, &args);
                self.depth += 1;
                let r = self.expand(body, report);
                self.depth -= 1;
                report.mapped(l.at(), l.text(), "spliced in");
                out.extend(r?);
                continue;
            }
            let block = match l.block {
                Some(b) => Some(self.expand(b, report)?),
                None => None,
            };
            out.push(Line {
                words: l.words,
                block,
            });
        }
        Ok(out)
    }
}

/// `{args[0]}`, `{args.0}` in an imported snippet.
fn substitute(lines: Vec<Line>, args: &[String]) -> Vec<Line> {
    lines
        .into_iter()
        .map(|mut l| {
            for w in &mut l.words {
                for (i, a) in args.iter().enumerate() {
                    w.text = w
                        .text
                        .replace(&format!("{{args[{i}]}}"), a)
                        .replace(&format!("{{args.{i}}}"), a);
                }
            }
            l.block = l.block.map(|b| substitute(b, args));
            l
        })
        .collect()
}

/// Imports the Caddyfile at `path`.
pub fn import(path: &Path, opts: &Options) -> Result<Imported, Error> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let mut r = Reader {
        dir,
        main: path.to_path_buf(),
        snippets: HashMap::new(),
        depth: 0,
        env: crate::env::Env::new(opts.env.clone()),
    };
    let mut report = Report::default();
    let top = r.file(path, None)?;
    let mut top = r.expand(top, &mut report)?;
    let mut tables: Vec<Table> = Vec::new();
    let mut acme = Table::new("tls.acme", false);
    let mut tls = Table::new("tls", false);
    let mut admin = Table::new("admin", false);
    let mut server = Table::new("server", false);
    // A file of one site with no braces: its first line (after any global
    // options and snippets) is the address, the rest its body.
    if let Some(i) = top.iter().position(|l| !l.name().is_empty())
        && top[i].block.is_none()
    {
        let first = top.remove(i);
        let body: Vec<Line> = top.drain(i..).collect();
        top.push(Line {
            words: first.words,
            block: Some(body),
        });
    }
    let mut names: Vec<String> = Vec::new();
    let mut first_site: Option<Origin> = None;
    for l in &top {
        if l.name().is_empty() {
            for o in l.block.iter().flatten() {
                global(o, &mut report, &mut acme, &mut tls, &mut admin, &mut server);
            }
            continue;
        }
        let Some(body) = &l.block else {
            report.none(l.at(), l.text(), "not a site block");
            continue;
        };
        let addrs: Vec<String> = l
            .words
            .iter()
            .flat_map(|w| w.text.split(','))
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        for a in addrs {
            // `http://` alone keeps its scheme's slashes.
            let name = match a.strip_suffix("://") {
                Some(_) => a.clone(),
                None => a.trim_end_matches('/').to_string(),
            };
            if names.contains(&name) {
                report.none(
                    l.at(),
                    format!("site {name}"),
                    "the same address comes earlier",
                );
                continue;
            }
            if ip_name(&name) && has_named_sites(&top) {
                report.none(
                    l.at(),
                    name.clone(),
                    "Caddy serves an IP-named site on every address, by its Host; a weir site named by IP \
                     listens on that address only, which the named sites' ports already take: add a \
                     route matching `host` on a named site by hand",
                );
                continue;
            }
            names.push(name.clone());
            first_site.get_or_insert_with(|| l.at().clone());
            let body = translate_placeholders(body.clone(), &mut report);
            tables.extend(site(&name, l.at(), &body, &mut report));
        }
    }
    if let Some(at) = &first_site {
        tables.extend(catch_alls(&names, at, &mut report));
        report.baseline(
            "Caddy's own pages",
            "Caddy answers the errors of its handlers (404, 401, 502…) with an empty body and no Content-Type, and file_server's redirects with a short HTML link; weir's error and redirect answers carry weir's own short bodies",
        );
    }
    // Caddy refuses on-demand TLS without a permission (`ask`), as weir does.
    if tls.get("on_demand").is_none() {
        let on_demand = V::T(vec![("on_demand".into(), V::B(true))]);
        if tables.iter().any(|t| t.get("tls") == Some(&on_demand))
            && let Some(i) = report.items.iter().find(|i| i.directive == "on_demand")
        {
            let at = i.at.clone();
            report.refuse(
                &at,
                "on-demand TLS cannot be enabled without a permission module to prevent abuse (no on_demand_tls `ask`)",
            );
        }
    }
    let mut all = Vec::new();
    for t in [server, admin, tls, acme] {
        if !t.keys.is_empty() {
            all.push(t);
        }
    }
    all.extend(tables);
    let head = vec![
        format!("weir.toml made by `weir import caddy {}`.", path.display()),
        "Each part says where it came from; the report on stderr says what differs.".into(),
    ];
    crate::finish(crate::Kind::Caddy, path, head, all, report, &r.env, opts)
}

/// The plain-HTTP ports the sites listen on (`http://…`, `…:80`, `:N`)
/// without a catch-all site: Caddy answers a Host no site names there
/// with an empty 200, where weir would hand it to the port's first site.
fn catch_alls(names: &[String], at: &Origin, report: &mut Report) -> Vec<Table> {
    let port_of = |n: &str| -> Option<(String, bool)> {
        let (plain, rest) = match n.strip_prefix("http://") {
            Some(r) => (true, r),
            None => (false, n.strip_prefix("https://").unwrap_or(n)),
        };
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                (h, p.to_string())
            }
            _ if plain => (rest, "80".to_string()),
            _ => return None,
        };
        let plain = plain || port == "80" || (host.is_empty() && !n.starts_with("https://"));
        plain.then_some((port, host.is_empty()))
    };
    let mut ports: Vec<String> = Vec::new();
    let mut covered: Vec<String> = Vec::new();
    for n in names {
        if let Some((port, catch_all)) = port_of(n) {
            if catch_all {
                covered.push(port.clone());
            }
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
    }
    let mut out = Vec::new();
    for p in ports.into_iter().filter(|p| !covered.contains(p)) {
        let mut t = Table::new(format!("site.\":{p}\""), false);
        t.comments.push(format!(
            "Caddy's empty 200 for a Host no site on port {p} names"
        ));
        t.set("respond", V::I(200));
        t.set("compress", V::B(false));
        report.mapped(
            at,
            format!("a Host no site names on port {p}"),
            format!("site \":{p}\" respond = 200 (Caddy's empty 200)"),
        );
        out.push(t);
    }
    out
}

fn global(
    o: &Line,
    report: &mut Report,
    acme: &mut Table,
    tls: &mut Table,
    admin: &mut Table,
    server: &mut Table,
) {
    let a = o.args();
    match o.name() {
        "default_bind" if a.len() == 1 => {
            server.set("bind", V::s(a[0].trim_start_matches("tcp/")));
            report.mapped(o.at(), o.text(), "[server] bind");
        }
        "on_demand_tls" => {
            let mut od = Vec::new();
            for x in o.block.iter().flatten() {
                match (x.name(), x.args().as_slice()) {
                    ("ask", [url]) => {
                        od.push(("ask".to_string(), V::s(*url)));
                        report.mapped(x.at(), x.text(), "[tls.on_demand] ask");
                    }
                    _ => report.none(
                        x.at(),
                        x.text(),
                        "weir's on-demand limits are burst, refill and name_interval in [tls.on_demand]",
                    ),
                }
            }
            if !od.is_empty() {
                tls.set("on_demand", V::T(od));
            }
        }
        "email" if a.len() == 1 => {
            acme.set("email", V::s(a[0]));
            report.mapped(o.at(), o.text(), "[tls.acme] email");
        }
        "acme_ca" if a.len() == 1 => {
            acme.set("directory", V::s(a[0]));
            report.mapped(o.at(), o.text(), "[tls.acme] directory");
        }
        "admin" if a.first() == Some(&"off") => {
            admin.set("listen", V::s("off"));
            report.mapped(o.at(), o.text(), "[admin] listen = \"off\"");
        }
        "admin" if a.len() == 1 => {
            let addr = a[0].trim_start_matches("tcp/");
            match addr.strip_prefix("localhost:") {
                // weir's admin address is an IP; localhost is its loopback.
                Some(port) => {
                    admin.set("listen", V::s(format!("127.0.0.1:{port}")));
                    report.approx(
                        o.at(),
                        o.text(),
                        "[admin] listen",
                        "on 127.0.0.1 only; Caddy also listens on ::1 when localhost resolves to it",
                    );
                }
                None => {
                    admin.set("listen", V::s(addr));
                    report.mapped(o.at(), o.text(), "[admin] listen");
                }
            }
        }
        "servers" => {
            let protocols = o.block.iter().flatten().any(|x| x.name() == "protocols");
            if protocols {
                tls.set("http3", V::B(false));
            }
            report.approx(o.at(), o.text(), "weir's own server settings", "weir's timeouts and protocols are set in [server]; only HTTP/3 follows `protocols`");
        }
        "debug" => report.mapped(o.at(), o.text(), "weir run --log-level debug"),
        "auto_https" => report.none(
            o.at(),
            o.text(),
            "weir's automatic HTTPS is per site: give a site `tls` files, or an `http://` name",
        ),
        _ => report.none(o.at(), o.text(), "not known to weir import"),
    }
}

/// A Caddy matcher as weir route keys: `path`/`path_regex` and `match`.
#[derive(Debug, Clone, Default, PartialEq)]
struct Matcher {
    paths: Vec<String>,
    regex: Option<String>,
    cond: Vec<(String, V)>,
}

fn matcher_of(def: &[Line], at: &Origin, report: &mut Report) -> Option<Matcher> {
    let mut m = Matcher::default();
    for l in def {
        let a = l.args();
        match l.name() {
            "path" => m.paths.extend(a.iter().map(|p| p.to_string())),
            "path_regexp" => m.regex = a.last().map(|r| r.to_string()),
            "method" => m.cond.push(("method".into(), V::strs(a.clone()))),
            "host" => m.cond.push(("host".into(), V::strs(a.clone()))),
            "remote_ip" | "client_ip" => m.cond.push((
                "client".into(),
                V::strs(a.iter().filter(|x| **x != "forwarded").copied()),
            )),
            "header" if a.len() == 2 => m
                .cond
                .push(("header".into(), V::T(vec![(a[0].to_string(), V::s(a[1]))]))),
            "query" => {
                let t = a
                    .iter()
                    .filter_map(|q| q.split_once('='))
                    .map(|(k, v)| (k.to_string(), V::s(v)))
                    .collect();
                m.cond.push(("query".into(), V::T(t)));
            }
            "protocol" if a.len() == 1 => m.cond.push(("protocol".into(), V::s(a[0]))),
            _ => {
                report.none(l.at(), l.text(), "a matcher weir's routes cannot express (they match path, method, host, header, query, client and protocol)");
                let _ = at;
                return None;
            }
        }
    }
    Some(m)
}

/// Caddy's order of the directives weir maps (Caddy 2.6 sorts a site's
/// directives by it, whatever order they are written in; `handle_path`
/// sorts as `handle`).
fn rank(name: &str) -> usize {
    const ORDER: &[&[&str]] = &[
        &["tls"],
        &["root"],
        &["header"],
        &["redir"],
        &["try_files"],
        &["basic_auth", "basicauth"],
        &["encode"],
        &["handle", "handle_path"],
        &["route"],
        &["respond"],
        &["reverse_proxy"],
        &["php_fastcgi"],
        &["file_server"],
    ];
    ORDER
        .iter()
        .position(|o| o.contains(&name))
        .unwrap_or(ORDER.len())
}

/// Caddy 2.6's order among directives of one kind: a single path before
/// another when it is longer (`/a*` before `/a`); without single paths on
/// both, one with a matcher before one without. Not a total order: used
/// by [`stable_sort`] as Caddy uses it with Go's stable sort.
fn before(a: &Matcher, b: &Matcher) -> bool {
    let single = |m: &Matcher| (m.paths.len() == 1).then(|| m.paths[0].len());
    match (single(a), single(b)) {
        (Some(x), Some(y)) => x > y,
        _ => *a != Matcher::default() && *b == Matcher::default(),
    }
}

/// Go's `sort.SliceStable` for the few routes of a site (an insertion
/// sort, which is what Go runs for up to 20 elements): `less` need not be a
/// total order, as Caddy's is not.
fn stable_sort<T>(v: &mut [T], less: impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && less(&v[j], &v[j - 1]) {
            v.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// What a handler directive gives: keys of a route or site.
struct Handler {
    keys: Vec<(String, V)>,
    /// `handle_path`: strip the matched prefix.
    strip: bool,
    /// A file_server's site-wide settings (weir's static settings are the site's).
    files: Option<Vec<(String, V)>>,
}

#[derive(Default)]
struct SiteState {
    root: Option<String>,
    compress: Option<V>,
    headers: Vec<(String, String, V)>,
    basic_auth: Option<V>,
    try_files: Option<V>,
    tls: Option<V>,
    access_log: Option<V>,
}

fn site(name: &str, at: &Origin, body: &[Line], report: &mut Report) -> Vec<Table> {
    let key = format!("site.\"{name}\"");
    let mut t = Table::new(key.clone(), false);
    t.comments.push(format!("{}:{} {name}", at.file, at.line));
    let mut matchers: HashMap<String, Matcher> = HashMap::new();
    let mut st = SiteState::default();
    // Named matchers first: they may be used before they are defined.
    for l in body {
        if let Some(m) = l.name().strip_prefix('@') {
            let def = match &l.block {
                Some(b) => b.clone(),
                None => vec![Line {
                    words: l.words[1..].to_vec(),
                    block: None,
                }],
            };
            if let Some(mm) = matcher_of(&def, l.at(), report) {
                matchers.insert(m.to_string(), mm);
                report.mapped(l.at(), l.text(), "route conditions");
            }
        }
    }
    let mut lines: Vec<&Line> = body.iter().filter(|l| !l.name().starts_with('@')).collect();
    lines.sort_by_key(|l| rank(l.name()));
    let mut routes: Vec<(Matcher, Handler, String, usize, &Line)> = Vec::new();
    let mut own: Option<(Handler, usize, &Line)> = None;
    // The static-file settings of the site's file_servers (the first's).
    let mut files: Option<Vec<(String, V)>> = None;
    let mut filter_routes: Vec<(Matcher, SiteState, String)> = Vec::new();
    for l in lines {
        let (m, args) = split_matcher(l, &matchers, report);
        let Some(m) = m else { continue };
        let what = format!("{}:{} {}", l.at().file, l.at().line, l.text());
        match l.name() {
            "tls" | "root" | "header" | "encode" | "basic_auth" | "basicauth" | "try_files"
            | "log" => {
                if m != Matcher::default() && l.name() != "root" {
                    if matches!(l.name(), "basic_auth" | "basicauth" | "header") {
                        // A route of its own with the site's handler.
                        let mut scoped = SiteState::default();
                        setting(l, &args, &mut scoped, report);
                        report.approx_closed(l.at(), l.text(), "a route with the site's own handler", "paths it matches are answered by the site's own handler, not by another matched directive");
                        filter_routes.push((m, scoped, what));
                    } else {
                        report.none(
                            l.at(),
                            l.text(),
                            "weir applies this to the whole site: move it into a `handle` block",
                        );
                    }
                    continue;
                }
                setting(l, &args, &mut st, report);
            }
            _ => {
                // Lines come in Caddy's order: after an unmatched handler
                // that answers everything, only matched ones of its kind
                // (which Caddy sorts before it) are ever reached.
                if let Some((_, r, first)) = &own
                    && first.name() != "php_fastcgi"
                    && (rank(l.name()) > *r || m == Matcher::default())
                {
                    report.none(l.at(), l.text(), format!("never reached: Caddy runs `{}` (line {}) before it, and that answers every request", first.name(), first.at().line));
                    continue;
                }
                let Some(h) = handler(l, &args, &st, report) else {
                    continue;
                };
                if let Some(f) = &h.files {
                    files.get_or_insert_with(|| f.clone());
                }
                if m == Matcher::default() {
                    if own.is_none() {
                        own = Some((h, rank(l.name()), l));
                    }
                } else {
                    routes.push((m, h, what, rank(l.name()), l));
                }
            }
        }
    }
    // Caddy's directive order, then its order among directives of one kind.
    stable_sort(&mut routes, |a, b| {
        a.3 < b.3 || (a.3 == b.3 && before(&a.0, &b.0))
    });
    if let Some(tls) = st.tls.take() {
        t.set("tls", tls);
    }
    match own {
        Some((h, _, _)) => {
            for (k, v) in h.keys {
                t.set(&k, v);
            }
        }
        None => {
            // Caddy answers an empty 200 when nothing handles a request.
            t.set("respond", V::I(200));
        }
    }
    if let Some(a) = st.access_log.take() {
        t.set("access_log", a);
    }
    // Compression: off unless `encode` (weir compresses static files by default).
    t.set("compress", st.compress.clone().unwrap_or(V::B(false)));
    if let Some(tf) = &st.try_files
        && t.get("root").is_some()
        && t.get("php").is_none()
    {
        t.set("try_files", tf.clone());
    }
    if let Some(b) = st.basic_auth.take() {
        t.set("basic_auth", b);
    }
    if let Some(h) = header_ops(&st.headers) {
        t.set("response_headers", h);
    }
    if let Some(f) = files {
        for (k, v) in f {
            t.set(&k, v);
        }
    }
    let own_keys: Vec<(String, V)> = out_keys(&t);
    let mut filtered: Vec<(Matcher, Handler, String)> = Vec::new();
    for (m, sc, what) in filter_routes {
        let mut keys = own_keys.clone();
        push_access_and_headers(&mut keys, sc.basic_auth, &sc.headers);
        filtered.push((
            m,
            Handler {
                keys,
                strip: false,
                files: None,
            },
            what,
        ));
    }
    let mut out = vec![t];
    let routes = routes.into_iter().map(|(m, h, w, _, _)| (m, h, w));
    for (m, h, what) in filtered.into_iter().chain(routes) {
        let paths: Vec<Option<String>> = if m.paths.is_empty() {
            vec![None]
        } else {
            m.paths.iter().cloned().map(Some).collect()
        };
        for p in paths {
            let mut rt = Table::new(format!("{key}.route"), true);
            rt.comments.push(what.clone());
            match &p {
                // Caddy's path without `*` is the whole path, compared
                // ignoring case; weir's `path` is a prefix.
                Some(p) if !p.contains('*') && m.regex.is_none() => {
                    rt.set(
                        "path_regex",
                        V::s(format!("(?i)^{}$", crate::regex::regex_escape(p))),
                    );
                }
                Some(p) => rt.set("path", V::s(p.clone())),
                None => {}
            }
            if let Some(r) = &m.regex {
                rt.set("path_regex", V::s(r.clone()));
            }
            if !m.cond.is_empty() {
                rt.set("match", V::T(m.cond.clone()));
            }
            if h.strip {
                rt.set("strip_prefix", V::B(true));
            }
            for (k, v) in &h.keys {
                // Listings are a site's setting in weir.
                if k != "browse" {
                    rt.set(k, v.clone());
                }
            }
            out.push(rt);
        }
    }
    out
}

/// A block's `basic_auth` and its `header` rules as weir keys, shared by
/// matcher-scoped filters and `handle` blocks.
fn push_access_and_headers(
    keys: &mut Vec<(String, V)>,
    basic_auth: Option<V>,
    headers: &[(String, String, V)],
) {
    if let Some(b) = basic_auth {
        keys.push(("basic_auth".into(), b));
    }
    if let Some(h) = header_ops(headers) {
        keys.push(("response_headers".into(), h));
    }
}

/// `header` rules as weir's `response_headers = { set, add, remove }`.
fn header_ops(headers: &[(String, String, V)]) -> Option<V> {
    let mut ops: Vec<(String, Vec<(String, V)>)> = Vec::new();
    for (op, n, v) in headers {
        match ops.iter_mut().find(|(o, _)| o == op) {
            Some((_, list)) => list.push((n.clone(), v.clone())),
            None => ops.push((op.clone(), vec![(n.clone(), v.clone())])),
        }
    }
    if ops.is_empty() {
        return None;
    }
    let t: Vec<(String, V)> = ops
        .into_iter()
        .map(|(op, list)| {
            if op == "remove" {
                (op, V::A(list.into_iter().map(|(n, _)| V::S(n)).collect()))
            } else {
                (op, V::T(list))
            }
        })
        .collect();
    Some(V::T(t))
}

/// A site's handler keys, for a route that must answer as the site does.
fn out_keys(t: &Table) -> Vec<(String, V)> {
    t.keys
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "root" | "proxy" | "php" | "redirect" | "respond"
            )
        })
        .cloned()
        .collect()
}

/// The matcher a directive's first argument names (`*`, `/path`, `@name`), and its other arguments.
fn split_matcher<'a>(
    l: &'a Line,
    named: &HashMap<String, Matcher>,
    report: &mut Report,
) -> (Option<Matcher>, Vec<&'a str>) {
    let args = l.args();
    match args.first() {
        Some(&"*") => (Some(Matcher::default()), args[1..].to_vec()),
        // Caddy reads a first argument starting with `/` as a path matcher
        // (`redir /old /new`); a lone one of `redir`, `try_files` or `root`
        // is the value itself.
        Some(a)
            if a.starts_with('/')
                && (args.len() > 1 || !matches!(l.name(), "redir" | "try_files" | "root")) =>
        {
            (
                Some(Matcher {
                    paths: vec![a.to_string()],
                    ..Matcher::default()
                }),
                args[1..].to_vec(),
            )
        }
        Some(a) if a.starts_with('@') => match named.get(&a[1..]) {
            Some(m) => (Some(m.clone()), args[1..].to_vec()),
            None => {
                report.none(
                    l.at(),
                    l.text(),
                    format!("the matcher {a} is not defined or not expressible"),
                );
                (None, Vec::new())
            }
        },
        _ => (Some(Matcher::default()), args),
    }
}

fn setting(l: &Line, args: &[&str], st: &mut SiteState, report: &mut Report) {
    match l.name() {
        "root" => {
            if let Some(r) = args.first() {
                st.root = Some(r.to_string());
                report.mapped(l.at(), l.text(), "root");
            }
        }
        "tls" => match args {
            ["internal"] => {
                st.tls = Some(V::T(vec![("issuer".into(), V::s("internal"))]));
                report.mapped(l.at(), l.text(), "tls = { issuer = \"internal\" }");
            }
            [cert, key] => {
                st.tls = Some(V::T(vec![
                    ("cert".into(), V::s(*cert)),
                    ("key".into(), V::s(*key)),
                ]));
                report.mapped(l.at(), l.text(), "tls");
            }
            [email] if email.contains('@') => report.approx(
                l.at(),
                l.text(),
                "[tls.acme] email",
                "weir has one ACME e-mail for every site: set [tls.acme] email",
            ),
            [] if l.block.iter().flatten().any(|o| o.name() == "on_demand") => {
                st.tls = Some(V::T(vec![("on_demand".into(), V::B(true))]));
                for o in l.block.iter().flatten() {
                    match o.name() {
                        "on_demand" => report.mapped(o.at(), o.text(), "tls = { on_demand = true }"),
                        _ => report.none(
                            o.at(),
                            o.text(),
                            "weir orders on-demand certificates from its [tls.acme] directory with its own challenges",
                        ),
                    }
                }
            }
            _ => report.none(l.at(), l.text(), "a tls form weir import does not read"),
        },
        "encode" => {
            let mut enc: Vec<String> = args
                .iter()
                .filter(|a| matches!(**a, "gzip" | "zstd" | "br"))
                .map(|a| a.to_string())
                .collect();
            let mut min_size = 512;
            for o in l.block.iter().flatten() {
                let a = o.args();
                match o.name() {
                    e @ ("gzip" | "zstd" | "br") => {
                        enc.push(e.to_string());
                        if !a.is_empty() {
                            report.approx(
                                o.at(),
                                o.text(),
                                "compress",
                                "weir's compression levels are its own",
                            );
                        }
                    }
                    "minimum_length" => match a.first().map(|n| n.parse::<i64>()) {
                        Some(Ok(n)) => {
                            min_size = n;
                            report.mapped(o.at(), o.text(), "compress min_size");
                        }
                        _ => report.none(o.at(), o.text(), "not a length in bytes"),
                    },
                    "prefer" => {
                        enc.sort_by_key(|e| a.iter().position(|p| p == e).unwrap_or(a.len()));
                        report.mapped(o.at(), o.text(), "compress encodings (in this order)");
                    }
                    _ => report.none(
                        o.at(),
                        o.text(),
                        "weir compresses by `types` and `min_size` only",
                    ),
                }
            }
            if enc.is_empty() {
                enc = vec!["zstd".into(), "gzip".into()];
            }
            // Caddy's default `match`: these types, from 512 bytes.
            let types = V::strs([
                "text/*",
                "application/json",
                "application/javascript",
                "application/xhtml+xml",
                "application/atom+xml",
                "application/rss+xml",
                "image/svg+xml",
            ]);
            st.compress = Some(V::T(vec![
                ("encodings".into(), V::strs(enc)),
                ("min_size".into(), V::I(min_size)),
                ("types".into(), types),
            ]));
            report.approx(
                l.at(),
                l.text(),
                "compress",
                "weir also sends `Vary: Accept-Encoding` on an answer it would compress to a client that did not ask for it (Caddy only on compressed answers)",
            );
        }
        "header"
            if args
                .first()
                .is_some_and(|a| a.starts_with('@') || a.starts_with('/')) =>
        {
            report.none(
                l.at(),
                l.text(),
                "a header rule under a matcher: write it on the route that matches those requests (`response_headers`)",
            );
        }
        "header" => {
            let args: &[&str] = match args.first() {
                Some(&"*") => &args[1..],
                _ => args,
            };
            let mut left_out: Vec<String> = Vec::new();
            let mut add = |spec: &str, value: Option<&str>, extra: bool| {
                if spec.starts_with('?') {
                    // A default: Caddy sets it only when the answer has none.
                    left_out.push(format!("{spec} (set only when absent)"));
                } else if extra {
                    left_out.push(format!("{spec} (a search and replace)"));
                } else if let Some(n) = spec.strip_prefix('-') {
                    st.headers
                        .push(("remove".into(), n.to_string(), V::B(true)));
                } else if let Some(n) = spec.strip_prefix('+') {
                    st.headers
                        .push(("add".into(), n.to_string(), V::s(value.unwrap_or(""))));
                } else {
                    st.headers.push((
                        "set".into(),
                        spec.trim_start_matches('>').to_string(),
                        V::s(value.unwrap_or("")),
                    ));
                }
            };
            if let Some(b) = &l.block {
                for h in b {
                    let a = h.args();
                    add(h.name(), a.first().copied(), a.len() > 1);
                }
            } else if let Some(n) = args.first() {
                add(n, args.get(1).copied(), args.len() > 2);
            }
            let mut why = "Caddy does not apply them to the errors its handlers answer (404, 401, 502…), which keep `Server` and get none of the fields; weir applies them to every answer".to_string();
            if !left_out.is_empty() {
                why = format!(
                    "left out, weir has no equivalent: {}; {why}",
                    left_out.join(", ")
                );
            }
            report.approx(l.at(), l.text(), "response_headers", why);
        }
        "basic_auth" | "basicauth" => {
            let mut users = Vec::new();
            let mut unchecked = Vec::new();
            for u in l.block.iter().flatten() {
                let a = u.args();
                if let Some(h) = a.first()
                    && (h.starts_with("$2") || h.starts_with("$argon2"))
                {
                    users.push((u.name().to_string(), V::s(*h)));
                } else {
                    unchecked.push(u);
                }
            }
            // A user left out of a list that still guards the path is refused.
            for u in unchecked {
                report.stricter(
                    u.at(),
                    format!("basic_auth user {}", u.name()),
                    "not a bcrypt or argon2 hash, which weir checks: refused (make one with `weir hash-password`)",
                );
            }
            if users.is_empty() {
                users.push(("nobody".into(), V::s(crate::htpasswd::REFUSE_ALL_HASH)));
                report.approx_closed(
                    l.at(),
                    l.text(),
                    "basic_auth",
                    "no user weir can check: everyone is refused",
                );
            } else {
                report.mapped(l.at(), l.text(), "basic_auth");
            }
            st.basic_auth = Some(V::T(vec![("users".into(), V::T(users))]));
        }
        "try_files" => {
            st.try_files = Some(V::strs(args.iter().copied()));
            report.mapped(l.at(), l.text(), "try_files");
        }
        "log" => {
            st.access_log = Some(V::T(vec![
                ("path".into(), V::s("stdout")),
                ("format".into(), V::s("json")),
            ]));
            report.approx(
                l.at(),
                l.text(),
                "access_log = stdout, json",
                "weir's JSON lines have their own fields",
            );
        }
        _ => {}
    }
}

fn upstream(a: &str) -> String {
    if let Some(p) = a.strip_prefix("unix/") {
        return format!("unix:{p}");
    }
    if let Some(p) = a.strip_prefix(':') {
        return format!("127.0.0.1:{p}");
    }
    if a.starts_with("http://")
        || a.starts_with("https://")
        || a.starts_with("h2c://")
        || a.contains(':')
    {
        return a.to_string();
    }
    format!("{a}:80")
}

fn handler(l: &Line, args: &[&str], st: &SiteState, report: &mut Report) -> Option<Handler> {
    let mut keys: Vec<(String, V)> = Vec::new();
    let mut strip = false;
    let mut files = None;
    match l.name() {
        "reverse_proxy" => {
            let mut to: Vec<V> = args.iter().map(|a| V::S(upstream(a))).collect();
            let mut p: Vec<(String, V)> = Vec::new();
            let mut health: Vec<(String, V)> = Vec::new();
            let mut set: Vec<(String, V)> = Vec::new();
            for o in l.block.iter().flatten() {
                let a = o.args();
                match o.name() {
                    "to" => to.extend(a.iter().map(|x| V::S(upstream(x)))),
                    "lb_policy" => match a.first().copied() {
                        Some(b @ ("round_robin" | "least_conn" | "random" | "first" | "ip_hash")) => {
                            p.push(("balance".into(), V::s(b)));
                            report.mapped(o.at(), o.text(), "proxy balance");
                        }
                        Some("uri_hash") => {
                            p.push(("balance".into(), V::s("hash")));
                            p.push(("hash_key".into(), V::s("uri")));
                            report.approx(o.at(), o.text(), "proxy balance = \"hash\"", "another ring: keys land on other upstreams than Caddy's");
                        }
                        Some("header") if a.len() == 2 => {
                            p.push(("balance".into(), V::s("hash")));
                            p.push(("hash_key".into(), V::S(format!("header:{}", a[1]))));
                            report.approx(o.at(), o.text(), "proxy balance = \"hash\"", "another ring: keys land on other upstreams than Caddy's");
                        }
                        Some("cookie") => {
                            p.push(("sticky_cookie".into(), V::s(a.get(1).copied().unwrap_or("lb"))));
                            report.approx(o.at(), o.text(), "proxy sticky_cookie", "weir's cookie value is its own");
                        }
                        _ => report.none(o.at(), o.text(), "a policy weir has no equivalent of"),
                    },
                    "health_uri" => {
                        health.push(("path".into(), V::s(a.first().copied().unwrap_or("/"))));
                        report.mapped(o.at(), o.text(), "proxy health.path");
                    }
                    "health_interval" => {
                        health.push(("interval".into(), V::s(a.first().copied().unwrap_or("30s"))));
                        report.mapped(o.at(), o.text(), "proxy health.interval");
                    }
                    "health_timeout" => {
                        health.push(("timeout".into(), V::s(a.first().copied().unwrap_or("5s"))));
                        report.mapped(o.at(), o.text(), "proxy health.timeout");
                    }
                    "health_status" => {
                        if let Some(Ok(s)) = a.first().map(|s| s.parse::<i64>()) {
                            health.push(("status".into(), V::I(s)));
                            report.mapped(o.at(), o.text(), "proxy health.status");
                        }
                    }
                    "header_up" if a.len() == 2 && !a[0].starts_with('-') => {
                        if a[0].eq_ignore_ascii_case("host") && a[1] == "{upstream_hostport}" {
                            p.push(("host".into(), V::s("upstream")));
                        } else if a[1].contains('{') && !a[1].starts_with("{remote") && !a[1].starts_with("{host") {
                            report.none(o.at(), o.text(), "a placeholder weir has no equivalent of");
                            continue;
                        } else {
                            set.push((a[0].trim_start_matches('+').to_string(), V::S(a[1].replace("{remote_host}", "{client_ip}").replace("{remote}", "{client_ip}"))));
                        }
                        report.mapped(o.at(), o.text(), "request_headers");
                    }
                    "transport" => report.approx(o.at(), o.text(), "proxy", "weir's upstream transport settings are its own (write https:// or h2c:// upstreams)"),
                    _ => report.none(o.at(), o.text(), "not known to weir import"),
                }
            }
            if to.is_empty() {
                report.none(l.at(), l.text(), "no upstream");
                return None;
            }
            let mut proxy = vec![("to".to_string(), V::A(to))];
            proxy.extend(p);
            if !health.is_empty() {
                proxy.push(("health".into(), V::T(health)));
            }
            // Caddy sends X-Forwarded-*, but neither Forwarded nor Via.
            proxy.push(("forwarded".into(), V::B(false)));
            proxy.push(("via".into(), V::B(false)));
            keys.push(("proxy".into(), V::T(proxy)));
            if !set.is_empty() {
                keys.push((
                    "request_headers".into(),
                    V::T(vec![("set".into(), V::T(set))]),
                ));
            }
            report.approx(
                l.at(),
                l.text(),
                "proxy",
                "an upstream answer without Content-Type gets one sniffed from its first bytes in Caddy (Go's net/http), none in weir",
            );
        }
        "php_fastcgi" => {
            let Some(root) = &st.root else {
                report.none(
                    l.at(),
                    l.text(),
                    "php_fastcgi needs a `root` before it in weir",
                );
                return None;
            };
            keys.push(("root".into(), V::s(root.clone())));
            let to = V::A(args.iter().map(|a| V::S(upstream(a))).collect());
            keys.push(("php".into(), crate::nginx::fcgi_value(to, Vec::new())));
            report.approx(
                l.at(),
                l.text(),
                "php",
                "a path that names no file reaches index.php with an empty PATH_INFO in Caddy, with the path as PATH_INFO in weir; a `.php` path that names no script goes to index.php in Caddy and gets 404 in weir; a directory without index.php goes to index.php in Caddy, to its own index file (asked without its slash: a 308 first) in weir",
            );
        }
        "file_server" => {
            let mut root = st.root.clone();
            // Caddy's defaults: index.html then index.txt, no sidecar files.
            let mut index = V::strs(["index.html", "index.txt"]);
            let mut precompressed = V::A(Vec::new());
            let mut browse = args.first() == Some(&"browse");
            for o in l.block.iter().flatten() {
                let a = o.args();
                match o.name() {
                    "root" if a.len() == 1 => {
                        root = Some(a[0].to_string());
                        report.mapped(o.at(), o.text(), "root");
                    }
                    "index" => {
                        index = V::strs(a.iter().copied());
                        report.mapped(o.at(), o.text(), "index");
                    }
                    "browse" => browse = true,
                    "precompressed" => {
                        let enc: Vec<&str> = if a.is_empty() {
                            vec!["br", "zstd", "gzip"]
                        } else {
                            a.clone()
                        };
                        precompressed = V::strs(enc);
                        report.mapped(o.at(), o.text(), "precompressed");
                    }
                    _ => report.none(
                        o.at(),
                        o.text(),
                        "a file_server setting weir has no equivalent of",
                    ),
                }
            }
            let files = vec![
                ("index".to_string(), index),
                ("precompressed".to_string(), precompressed),
            ];
            report.baseline(
                "static files",
                "weir refuses dot-files (.git, .env) Caddy serves (`serve_hidden = true` serves them); a directory without an index file gets 308 to add its slash, then 403 (Caddy: 404); weir's 308 keeps the query (Caddy 2.6 drops it); weir adds `; charset=utf-8` to JSON, JavaScript and SVG too (Caddy to text/* only)",
            );
            let mut why = Vec::new();
            if browse {
                why.push("weir's listing is its own");
            }
            if root.is_none() {
                why.push("no root: Caddy serves the current directory, written as \".\" (weir.toml's directory)");
            }
            if why.is_empty() {
                report.mapped(l.at(), l.text(), "root (static files)");
            } else {
                report.approx(l.at(), l.text(), "root (static files)", why.join("; "));
            }
            let Some(root) = root else {
                keys.push(("root".into(), V::s(".")));
                return Some(Handler {
                    keys,
                    strip,
                    files: Some(files),
                });
            };
            keys.push(("root".into(), V::s(root)));
            if browse {
                keys.push(("browse".into(), V::B(true)));
            }
            return Some(Handler {
                keys,
                strip,
                files: Some(files),
            });
        }
        "redir" => {
            let to = args.first().copied().unwrap_or("/");
            let status = match args.get(1).copied() {
                None | Some("temporary") => 302,
                Some("permanent") => 301,
                Some(c) => match c.parse::<i64>() {
                    Ok(n) => n,
                    Err(_) => {
                        report.none(
                            l.at(),
                            l.text(),
                            "weir redirects with a status, not an HTML page",
                        );
                        return None;
                    }
                },
            };
            keys.push((
                "redirect".into(),
                V::T(vec![
                    (
                        "to".into(),
                        V::s(to.replace("{remote_host}", "{client_ip}")),
                    ),
                    ("status".into(), V::I(status)),
                ]),
            ));
            report.mapped(l.at(), l.text(), "redirect");
        }
        "respond" => {
            let (body, status) = match args {
                [] => (None, 200),
                [a] => match a.parse::<i64>() {
                    Ok(n) => (None, n),
                    Err(_) => (Some(a.to_string()), 200),
                },
                [b, s, ..] => (Some(b.to_string()), s.parse().unwrap_or(200)),
            };
            match body {
                None => keys.push(("respond".into(), V::I(status))),
                Some(b) => keys.push((
                    "respond".into(),
                    V::T(vec![
                        ("status".into(), V::I(status)),
                        ("body".into(), V::S(b)),
                    ]),
                )),
            }
            report.mapped(l.at(), l.text(), "respond");
        }
        "handle" | "handle_path" | "route" => {
            strip = l.name() == "handle_path";
            // The block's own terminal handler, with the site's root.
            let mut inner = SiteState {
                root: st.root.clone(),
                ..SiteState::default()
            };
            let mut lines: Vec<&Line> = l.block.iter().flatten().collect();
            lines.sort_by_key(|x| rank(x.name()));
            let mut found = None;
            for x in lines {
                let xa = x.args();
                let xa: Vec<&str> = if xa.first() == Some(&"*") {
                    xa[1..].to_vec()
                } else {
                    xa
                };
                let matched = xa.first().is_some_and(|a| {
                    a.starts_with('@') || (a.starts_with('/') && xa.len() > 1 && x.name() != "root")
                });
                if matched {
                    report.none(
                        x.at(),
                        x.text(),
                        "a matcher inside a block: weir's route takes the block's matcher only; write a route per matcher",
                    );
                    continue;
                }
                match x.name() {
                    "root" | "header" | "encode" | "basic_auth" | "basicauth" | "try_files" => {
                        setting(x, &xa, &mut inner, report)
                    }
                    _ if found.is_none() => found = handler(x, &xa, &inner, report),
                    _ => report.none(
                        x.at(),
                        x.text(),
                        "a second handler in one block: weir's routes have one",
                    ),
                }
            }
            let Some(h) = found else {
                report.none(l.at(), l.text(), "no handler weir can express in it");
                return None;
            };
            keys = h.keys;
            files = h.files;
            if let Some(tf) = inner.try_files
                && keys.iter().any(|(k, _)| k == "root")
                && !keys.iter().any(|(k, _)| k == "php")
            {
                keys.push(("try_files".into(), tf));
            }
            if let Some(c) = inner.compress {
                keys.push(("compress".into(), c));
            }
            push_access_and_headers(&mut keys, inner.basic_auth, &inner.headers);
            if l.name() == "route" {
                report.approx(l.at(), l.text(), "route", "weir runs a route's filters in its own fixed order, not the order written in `route`");
            } else {
                report.mapped(l.at(), l.text(), "route");
            }
        }
        _ => {
            report.none(l.at(), l.text(), "not known to weir import");
            return None;
        }
    }
    Some(Handler { keys, strip, files })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Imports `src` as a Caddyfile.
    fn imp(src: &str) -> Imported {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("Caddyfile");
        std::fs::write(&p, src).unwrap();
        import(&p, &Options::default()).unwrap()
    }

    /// The `path` (or `path_regex`) of each route of the output, in order.
    fn route_paths(toml: &str) -> Vec<String> {
        toml.split("[[")
            .skip(1)
            .map(|r| {
                r.lines()
                    .find(|l| l.starts_with("path"))
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn directives_answer_in_caddys_order_not_the_written_one() {
        // reverse_proxy is written first with the longer path; Caddy runs
        // handle (and handle_path, sorted as handle) before it, longer
        // paths first within the kind; route after handle.
        let out = imp(
            "http://a.test {\n\treverse_proxy /a/very/long/path/* 127.0.0.1:9\n\troute /r {\n\t\trespond \"r\"\n\t}\n\thandle /x {\n\t\trespond \"x\"\n\t}\n\thandle_path /longer/* {\n\t\trespond \"l\"\n\t}\n\tredir /old /new permanent\n\trespond \"own\"\n}\n",
        );
        assert_eq!(
            route_paths(&out.toml),
            [
                "path_regex = \"(?i)^/old$\"",
                "path = \"/longer/*\"",
                "path_regex = \"(?i)^/x$\"",
                "path_regex = \"(?i)^/r$\"",
            ],
            "{}",
            out.toml
        );
        // respond (no matcher) comes before reverse_proxy: it answers everything.
        assert!(matches!(
            &out.report.find("reverse_proxy /a/very").unwrap().outcome,
            crate::Outcome::NoEquivalent(w) if w.contains("never reached: Caddy runs `respond` (line 13)")
        ));
        assert!(!out.toml.contains("127.0.0.1:9"), "{}", out.toml);
        assert!(
            out.toml
                .contains("redirect = { to = \"/new\", status = 301 }")
        );
    }

    #[test]
    fn same_kind_sorts_by_path_as_caddy() {
        // Longer single paths first (`/a*` before `/a`, as Caddy 2.6.2's
        // `caddy adapt` shows); a named matcher keeps its place.
        let out = imp(
            "http://a.test {\n\t@m method POST\n\treverse_proxy @m 127.0.0.1:1\n\treverse_proxy /a* 127.0.0.1:2\n\treverse_proxy /a 127.0.0.1:3\n\treverse_proxy /abc/* 127.0.0.1:4\n\treverse_proxy 127.0.0.1:5\n}\n",
        );
        assert_eq!(
            route_paths(&out.toml),
            [
                "",
                "path = \"/abc/*\"",
                "path = \"/a*\"",
                "path_regex = \"(?i)^/a$\""
            ],
            "{}",
            out.toml
        );
        assert!(out.toml.contains("proxy = { to = [\"127.0.0.1:5\"]"));
    }

    #[test]
    fn a_second_unmatched_handler_is_reported_never_reached() {
        let out = imp(":8080 {\n\tfile_server\n\troot * /srv\n\treverse_proxy 127.0.0.1:9\n}\n");
        assert!(
            out.toml.contains("proxy = { to = [\"127.0.0.1:9\"]"),
            "{}",
            out.toml
        );
        assert!(!out.toml.contains("root"), "{}", out.toml);
        assert!(matches!(
            &out.report.find("file_server").unwrap().outcome,
            crate::Outcome::NoEquivalent(w) if w.contains("never reached")
        ));
    }

    #[test]
    fn redir_reads_a_path_matcher_and_defaults_to_302() {
        let out = imp(":8080 {\n\tredir /a /b\n\tredir /c /d 307\n\trespond \"x\"\n}\n");
        assert!(
            out.toml
                .contains("path_regex = \"(?i)^/a$\"\nredirect = { to = \"/b\", status = 302 }"),
            "{}",
            out.toml
        );
        assert!(
            out.toml
                .contains("path_regex = \"(?i)^/c$\"\nredirect = { to = \"/d\", status = 307 }"),
            "{}",
            out.toml
        );
        let out = imp(":8080 {\n\tredir /elsewhere\n}\n");
        assert!(
            out.toml
                .contains("redirect = { to = \"/elsewhere\", status = 302 }"),
            "{}",
            out.toml
        );
    }

    #[test]
    fn encode_takes_caddys_minimum_and_types() {
        let out = imp(":8080 {\n\troot * /srv\n\tencode gzip\n\tfile_server\n}\n");
        assert!(out.toml.contains("compress = { encodings = [\"gzip\"], min_size = 512, types = [\"text/*\", \"application/json\""), "{}", out.toml);
        let out = imp(
            ":8080 {\n\troot * /srv\n\tencode {\n\t\tgzip\n\t\tzstd\n\t\tminimum_length 100\n\t\tprefer zstd gzip\n\t}\n\tfile_server\n}\n",
        );
        assert!(
            out.toml
                .contains("compress = { encodings = [\"zstd\", \"gzip\"], min_size = 100,"),
            "{}",
            out.toml
        );
    }

    #[test]
    fn file_server_has_caddys_index_and_no_sidecars() {
        let out = imp(":8080 {\n\troot * /srv\n\tfile_server\n}\n");
        assert!(
            out.toml.contains("index = [\"index.html\", \"index.txt\"]"),
            "{}",
            out.toml
        );
        assert!(out.toml.contains("precompressed = []"), "{}", out.toml);
        let out = imp(
            ":8080 {\n\troot * /srv\n\tfile_server {\n\t\tindex home.html\n\t\tprecompressed gzip\n\t}\n}\n",
        );
        assert!(out.toml.contains("index = [\"home.html\"]"), "{}", out.toml);
        assert!(
            out.toml.contains("precompressed = [\"gzip\"]"),
            "{}",
            out.toml
        );
        // In a handle_path block too: weir's static settings are the site's.
        let out = imp(
            "http://a.test:8080 {\n\thandle_path /s/* {\n\t\troot * /srv\n\t\tfile_server\n\t}\n\treverse_proxy 127.0.0.1:9\n}\n",
        );
        assert!(
            out.toml.contains("index = [\"index.html\", \"index.txt\"]"),
            "{}",
            out.toml
        );
    }

    #[test]
    fn plain_http_ports_get_caddys_empty_200_for_other_hosts() {
        let out = imp(
            "{\n\tdefault_bind 127.0.0.1\n}\nhttp://a.test:8080, http://b.test {\n\trespond \"a\"\n}\nc.test {\n\trespond \"c\"\n}\n",
        );
        assert!(
            out.toml.contains("[server]\nbind = \"127.0.0.1\""),
            "{}",
            out.toml
        );
        assert!(
            out.toml.contains("[site.\":8080\"]\nrespond = 200"),
            "{}",
            out.toml
        );
        assert!(
            out.toml.contains("[site.\":80\"]\nrespond = 200"),
            "{}",
            out.toml
        );
        // HTTPS (c.test) has no catch-all: Caddy refuses the handshake.
        assert!(!out.toml.contains("[site.\":443\"]"), "{}", out.toml);
        // A catch-all of the Caddyfile's own is kept.
        let out = imp(":8080 {\n\trespond \"any\"\n}\nhttp://a.test:8080 {\n\trespond \"a\"\n}\n");
        assert_eq!(
            out.toml.matches("[site.\":8080\"]").count(),
            1,
            "{}",
            out.toml
        );
    }

    #[test]
    fn handle_blocks_keep_every_header_rule() {
        let out = imp(
            ":8080 {\n\thandle /x/* {\n\t\theader {\n\t\t\t-Server\n\t\t\t+Link \"<a>\"\n\t\t\tX-A b\n\t\t}\n\t\trespond \"x\"\n\t}\n}\n",
        );
        assert!(out.toml.contains("response_headers = { add = { Link = \"<a>\" }, set = { X-A = \"b\" }, remove = [\"Server\"] }") || out.toml.contains("response_headers = { remove = [\"Server\"], add = { Link = \"<a>\" }, set = { X-A = \"b\" } }"), "{}", out.toml);
    }
}
