//! HAProxy's ACLs (`acl NAME criterion [-i] values…`) and the conditions
//! of rules (`if`/`unless`, `!`, `||`, `{ anonymous ACL }`) turned into
//! weir's route conditions ([`Cond`]): a path pattern and `match` keys.
//! A condition weir cannot write exactly comes back as `Err(why)`.
//!
//! Never writes TOML and never reports: the caller decides what to do.

use std::collections::HashMap;

use crate::toml::V;

/// One ACL as written: criterion, `-i`, values.
#[derive(Debug, Clone)]
pub struct Acl {
    pub criterion: String,
    pub nocase: bool,
    pub values: Vec<String>,
    /// `-m str|beg|end|sub|reg|dir|dom|len|found|…`: how values match.
    pub method: Option<String>,
}

/// Parses `criterion [flags] values…` (the words after `acl NAME`, or inside `{ }`).
pub fn acl(words: &[String]) -> Acl {
    let mut a = Acl {
        criterion: words.first().cloned().unwrap_or_default(),
        nocase: false,
        values: Vec::new(),
        method: None,
    };
    let mut i = 1;
    while i < words.len() {
        match words[i].as_str() {
            "-i" => a.nocase = true,
            "-m" => {
                a.method = words.get(i + 1).cloned();
                i += 1;
            }
            "-f" | "-M" | "-u" => {
                a.values.push(format!(
                    "{} {}",
                    words[i],
                    words.get(i + 1).map_or("", |s| s)
                ));
                i += 1;
            }
            "--" => {
                a.values.extend(words[i + 1..].iter().cloned());
                break;
            }
            "-n" => {}
            w => a.values.push(w.to_string()),
        }
        i += 1;
    }
    a
}

/// What a request must be like for a rule: all of these hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cond {
    /// `path` (a plain prefix) or `path_regex`.
    pub path: Option<(&'static str, String)>,
    pub hosts: Option<Vec<String>>,
    pub methods: Option<Vec<String>>,
    pub clients: Option<Vec<String>>,
    pub protocol: Option<&'static str>,
    pub headers: Vec<(String, String)>,
    /// `!{ http_auth(LIST) }`: the client did not authenticate against LIST.
    pub no_auth: Option<String>,
    /// `{ sc_http_req_rate(0) gt 10 }` and its kin: (counter, bound).
    pub rate: Option<(String, u64)>,
    /// `!{ src … }`: the client is not in these.
    pub not_clients: Option<Vec<String>>,
    /// What differs from HAProxy, for the report.
    pub approx: Vec<String>,
}

impl Cond {
    pub fn is_empty(&self) -> bool {
        *self == Cond::default()
    }

    /// Both conditions at once, if weir can write that.
    pub fn and(&self, o: &Cond) -> Result<Cond, String> {
        fn one<T: Clone + PartialEq>(
            a: &Option<T>,
            b: &Option<T>,
            what: &str,
        ) -> Result<Option<T>, String> {
            match (a, b) {
                (Some(x), Some(y)) if x != y => Err(format!(
                    "weir's route matches one {what} list; these conditions need two"
                )),
                (Some(x), _) | (_, Some(x)) => Ok(Some(x.clone())),
                _ => Ok(None),
            }
        }
        // Two plain prefixes: the longer one, when it starts with the other.
        let path = match (&self.path, &o.path) {
            (Some(("path", a)), Some(("path", b))) if a.starts_with(b.as_str()) => {
                self.path.clone()
            }
            (Some(("path", a)), Some(("path", b))) if b.starts_with(a.as_str()) => o.path.clone(),
            _ => one(&self.path, &o.path, "path")?,
        };
        let mut c = Cond {
            path,
            hosts: one(&self.hosts, &o.hosts, "host")?,
            methods: one(&self.methods, &o.methods, "method")?,
            clients: one(&self.clients, &o.clients, "client")?,
            protocol: one(&self.protocol, &o.protocol, "protocol")?,
            headers: self.headers.clone(),
            no_auth: one(&self.no_auth, &o.no_auth, "http_auth")?,
            rate: one(&self.rate, &o.rate, "rate")?,
            not_clients: one(&self.not_clients, &o.not_clients, "src")?,
            approx: self.approx.clone(),
        };
        for h in &o.headers {
            if !c.headers.contains(h) {
                c.headers.push(h.clone());
            }
        }
        for a in &o.approx {
            if !c.approx.contains(a) {
                c.approx.push(a.clone());
            }
        }
        Ok(c)
    }

    /// The route keys: (`path` or `path_regex`, value) and the `match` table.
    pub fn route_keys(&self) -> Vec<(String, V)> {
        let mut out = Vec::new();
        if let Some((k, v)) = &self.path {
            out.push((k.to_string(), V::s(v.clone())));
        }
        let mut m = Vec::new();
        if let Some(h) = &self.hosts {
            m.push(("host".to_string(), one_or_many(h)));
        }
        if let Some(x) = &self.methods {
            m.push(("method".to_string(), one_or_many(x)));
        }
        if let Some(x) = &self.clients {
            m.push(("client".to_string(), V::strs(x.clone())));
        }
        if let Some(p) = self.protocol {
            m.push(("protocol".to_string(), V::s(p)));
        }
        if !self.headers.is_empty() {
            m.push((
                "header".to_string(),
                V::T(
                    self.headers
                        .iter()
                        .map(|(k, v)| (k.clone(), V::s(v.clone())))
                        .collect(),
                ),
            ));
        }
        if !m.is_empty() {
            out.push(("match".to_string(), V::T(m)));
        }
        out
    }

    /// Both hold for no request at all (two plain prefixes neither of which
    /// starts with the other, or two exact host lists with nothing in common).
    pub fn disjoint(&self, o: &Cond) -> bool {
        let paths = matches!((&self.path, &o.path), (Some(("path", a)), Some(("path", b)))
            if !a.starts_with(b.as_str()) && !b.starts_with(a.as_str()));
        let hosts = matches!((&self.hosts, &o.hosts), (Some(a), Some(b))
            if !a.iter().any(|h| b.contains(h)) && !a.iter().chain(b).any(|h| h.starts_with('*')));
        paths || hosts
    }

    /// Only a path, host, method, client, protocol or header condition: a route.
    pub fn routable(&self) -> bool {
        self.no_auth.is_none() && self.rate.is_none() && self.not_clients.is_none()
    }
}

fn one_or_many(v: &[String]) -> V {
    if v.len() == 1 {
        V::s(v[0].clone())
    } else {
        V::strs(v.to_vec())
    }
}

/// A literal made safe inside a regex.
pub fn re_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn alternatives(vals: &[String], f: impl Fn(&str) -> String) -> String {
    if vals.len() == 1 {
        f(&vals[0])
    } else {
        format!(
            "(?:{})",
            vals.iter().map(|v| f(v)).collect::<Vec<_>>().join("|")
        )
    }
}

/// The criterion with its match method folded in, in the one spelling
/// [`positive`] reads: `path -m beg` is `path_beg`, `hdr(host) -m sub` is
/// `hdr_sub(host)`, `hdr_beg(x) -m str` is `hdr(x)`.
fn canonical(crit: &str, method: Option<&str>) -> Result<String, String> {
    const SUFFIXES: &[&str] = &[
        "_beg", "_end", "_sub", "_reg", "_dir", "_dom", "_len", "_cnt", "_found", "_str",
    ];
    let Some(m) = method else {
        return Ok(crit.to_string());
    };
    // The fetch and its argument: `req.hdr_sub(host)` → (`req.hdr`, `_sub`, `(host)`).
    let (name, arg) = match crit.find('(') {
        Some(i) => (&crit[..i], &crit[i..]),
        None => (crit, ""),
    };
    let base = SUFFIXES
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    match m {
        "str" => Ok(format!("{base}{arg}")),
        "beg" | "end" | "sub" | "reg" | "dir" | "dom" | "len" | "found" => {
            Ok(format!("{base}_{m}{arg}"))
        }
        other => Err(format!(
            "the ACL match method `-m {other}` has no weir route condition"
        )),
    }
}

/// One ACL, as true.
fn positive(a: &Acl) -> Result<Cond, String> {
    let canonical = canonical(&a.criterion, a.method.as_deref())?;
    let a = &Acl {
        criterion: canonical,
        ..a.clone()
    };
    let mut c = Cond::default();
    if a.values
        .iter()
        .any(|v| v.starts_with("-f ") || v.starts_with("-M "))
    {
        return Err(
            "ACL values read from a file (`-f`): write them into the weir.toml by hand".into(),
        );
    }
    let ci = if a.nocase { "(?i)" } else { "" };
    let crit = a.criterion.as_str();
    let need_values = || {
        if a.values.is_empty() {
            Err(format!("`{crit}` without values matches nothing"))
        } else {
            Ok(())
        }
    };
    match crit {
        "path_beg" => {
            need_values()?;
            if a.values.len() == 1
                && !a.nocase
                && a.values[0].starts_with('/')
                && !a.values[0].contains('*')
            {
                c.path = Some(("path", a.values[0].clone()));
            } else {
                c.path = Some((
                    "path_regex",
                    format!("{ci}^{}", alternatives(&a.values, re_escape)),
                ));
            }
        }
        "path" => {
            need_values()?;
            c.path = Some((
                "path_regex",
                format!("{ci}^{}$", alternatives(&a.values, re_escape)),
            ));
        }
        "path_end" => {
            need_values()?;
            c.path = Some((
                "path_regex",
                format!("{ci}{}$", alternatives(&a.values, re_escape)),
            ));
        }
        "path_sub" => {
            need_values()?;
            c.path = Some((
                "path_regex",
                format!("{ci}{}", alternatives(&a.values, re_escape)),
            ));
        }
        "path_dir" => {
            need_values()?;
            c.path = Some((
                "path_regex",
                format!(
                    "{ci}(?:^|/){}(?:/|$)",
                    alternatives(&a.values, |v| re_escape(v.trim_matches('/')))
                ),
            ));
        }
        "path_reg" => {
            need_values()?;
            let alts = alternatives(&a.values, |v| v.to_string());
            if a.values
                .iter()
                .any(|v| v.contains("(?=") || v.contains("(?!") || v.contains("(?<"))
            {
                return Err("look-around is not in weir's regexes".into());
            }
            c.path = Some(("path_regex", format!("{ci}{alts}")));
        }
        "hdr(host)" | "req.hdr(host)" | "hdr(Host)" | "req.hdr(Host)" => {
            need_values()?;
            c.hosts = Some(a.values.iter().map(|v| v.to_ascii_lowercase()).collect());
            c.approx.push(if a.nocase {
                "weir compares the Host without its port (`example.com:8080` matches here, not in HAProxy)".into()
            } else {
                "weir compares the Host without its port and ignoring case (HAProxy without -i: exactly)".into()
            });
        }
        "hdr_dom(host)" | "req.hdr_dom(host)" => {
            need_values()?;
            let mut hosts = Vec::new();
            for v in &a.values {
                let v = v.to_ascii_lowercase();
                hosts.push(v.clone());
                hosts.push(format!("*.{v}"));
            }
            c.hosts = Some(hosts);
            c.approx
                .push("weir's `*.` is one label deep; HAProxy's hdr_dom matches any depth".into());
        }
        "hdr_end(host)" | "req.hdr_end(host)" if a.values.iter().all(|v| v.starts_with('.')) => {
            c.hosts = Some(
                a.values
                    .iter()
                    .map(|v| format!("*{}", v.to_ascii_lowercase()))
                    .collect(),
            );
            c.approx
                .push("weir's `*.` is one label deep; HAProxy's hdr_end matches any depth".into());
        }
        "src" => {
            need_values()?;
            c.clients = Some(a.values.clone());
        }
        "method" => {
            need_values()?;
            c.methods = Some(a.values.iter().map(|m| m.to_ascii_uppercase()).collect());
        }
        "ssl_fc" => c.protocol = Some("https"),
        "always_true" | "TRUE" | "path_found" | "url_found" => {}
        c2 if (c2.starts_with("hdr_found(") || c2.starts_with("req.hdr_found(")) => {
            let name = c2[c2.find('(').unwrap() + 1..].trim_end_matches(')');
            c.headers.push((name.to_string(), "*".to_string()));
        }
        "http_auth" => {
            return Err(
                "`http_auth` is only read as `!{ http_auth(LIST) }` in `http-request auth`".into(),
            );
        }
        c2 if c2.starts_with("http_auth(") => {
            return Err(
                "`http_auth(…)` is only read as `!{ http_auth(LIST) }` in `http-request auth`"
                    .into(),
            );
        }
        c2 if (c2.starts_with("hdr(") || c2.starts_with("req.hdr(")) && !a.nocase => {
            let name = c2[c2.find('(').unwrap() + 1..]
                .trim_end_matches(')')
                .to_string();
            if a.values.len() != 1 {
                return Err(format!(
                    "weir's header match takes one value; `{c2}` has {}",
                    a.values.len()
                ));
            }
            c.headers.push((name, a.values[0].clone()));
        }
        c2 if c2.starts_with("sc_http_req_rate(")
            || c2.starts_with("sc0_http_req_rate")
            || c2.starts_with("sc_http_err_rate(")
            || c2.starts_with("sc0_http_err_rate")
            || c2.starts_with("sc_conn_cur(")
            || c2.starts_with("sc0_conn_cur") =>
        {
            let kind = if c2.contains("http_req_rate") {
                "requests"
            } else if c2.contains("http_err_rate") {
                "errors"
            } else {
                "connections"
            };
            // `gt N` / `ge N`: refused past N (or from N).
            let (op, n) = match a.values.as_slice() {
                [op, n] => (op.as_str(), n.parse::<u64>().ok()),
                _ => ("", None),
            };
            let n = match (op, n) {
                ("gt", Some(n)) => n,
                ("ge", Some(n)) if n > 0 => n - 1,
                _ => return Err(format!("`{c2}` compared with `gt N` or `ge N` only")),
            };
            c.rate = Some((kind.to_string(), n));
        }
        c2 => {
            return Err(format!(
                "the `{c2}` criterion{} has no weir route condition",
                if a.nocase { " with -i" } else { "" }
            ));
        }
    }
    Ok(c)
}

/// One ACL, as false.
fn negative(a: &Acl) -> Result<Cond, String> {
    let mut c = Cond::default();
    match a.criterion.as_str() {
        "ssl_fc" => c.protocol = Some("http"),
        "src" => c.not_clients = Some(a.values.clone()),
        crit if crit.starts_with("http_auth(") => {
            c.no_auth = Some(crit["http_auth(".len()..].trim_end_matches(')').to_string());
        }
        crit => {
            return Err(format!(
                "weir's routes cannot match the negation of `{crit}`"
            ));
        }
    }
    Ok(c)
}

/// A rule's condition (`if a b || !c { path_beg /x }`), as the routes that
/// together match it (one per alternative); none: always.
pub fn condition(words: &[String], acls: &HashMap<String, Vec<Acl>>) -> Result<Vec<Cond>, String> {
    let Some(kw) = words.first() else {
        return Ok(vec![Cond::default()]);
    };
    let unless = match kw.as_str() {
        "if" => false,
        "unless" => true,
        other => return Err(format!("`{other}`: expected `if` or `unless`")),
    };
    // Terms: (negated, the ACLs any of which is meant).
    let mut groups: Vec<Vec<(bool, Vec<Acl>)>> = vec![Vec::new()];
    let mut i = 1;
    let mut neg = false;
    while i < words.len() {
        let mut w = words[i].as_str();
        // `!name`, `!{ … }` and `! name` all negate.
        while let Some(rest) = w.strip_prefix('!') {
            neg = !neg;
            w = rest;
        }
        match w {
            "" => {}
            "||" | "or" => {
                groups.push(Vec::new());
                neg = false;
            }
            "{" => {
                let end = words[i..]
                    .iter()
                    .position(|x| x == "}")
                    .ok_or("`{` without `}`")?
                    + i;
                groups
                    .last_mut()
                    .unwrap()
                    .push((neg, vec![acl(&words[i + 1..end])]));
                neg = false;
                i = end;
            }
            name => {
                let list = acls
                    .get(name)
                    .cloned()
                    .or_else(|| predefined(name))
                    .ok_or_else(|| format!("ACL `{name}` is not defined"))?;
                groups.last_mut().unwrap().push((neg, list));
                neg = false;
            }
        }
        i += 1;
    }
    if unless {
        // `unless a` is `if !a`; only a single term is turned around.
        match groups.as_mut_slice() {
            [g] if g.len() == 1 => g[0].0 = !g[0].0,
            _ => return Err("`unless` with several terms has no weir route condition".into()),
        }
    }
    let mut out = Vec::new();
    for g in &groups {
        // AND of terms, each an OR of ACLs: distributed into alternatives.
        let mut alts = vec![Cond::default()];
        for (neg, list) in g {
            let mut next = Vec::new();
            if *neg && list.len() > 1 {
                return Err(
                    "the negation of an ACL defined several times has no weir route condition"
                        .into(),
                );
            }
            for a in list {
                let c = if *neg { negative(a)? } else { positive(a)? };
                for base in &alts {
                    next.push(base.and(&c)?);
                }
            }
            alts = next;
        }
        out.extend(alts);
    }
    Ok(out)
}

/// HAProxy's predefined ACLs that weir can say.
fn predefined(name: &str) -> Option<Vec<Acl>> {
    let a = |c: &str, v: &[&str]| {
        Some(vec![Acl {
            criterion: c.into(),
            nocase: false,
            values: v.iter().map(|s| s.to_string()).collect(),
            method: None,
        }])
    };
    match name {
        "TRUE" => a("always_true", &[]),
        "LOCALHOST" => a("src", &["127.0.0.1/8", "::1"]),
        "METH_GET" => a("method", &["GET", "HEAD"]),
        "METH_POST" => a("method", &["POST"]),
        "METH_OPTIONS" => a("method", &["OPTIONS"]),
        "METH_HEAD" => a("method", &["HEAD"]),
        "METH_PUT" => a("method", &["PUT"]),
        "METH_DELETE" => a("method", &["DELETE"]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn conditions() {
        let mut acls = HashMap::new();
        acls.insert("api".into(), vec![acl(&w("path_beg /api/"))]);
        acls.insert("host_b".into(), vec![acl(&w("hdr(host) -i b.example"))]);
        let c = condition(&w("if api host_b"), &acls).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].path, Some(("path", "/api/".into())));
        assert_eq!(c[0].hosts, Some(vec!["b.example".into()]));
        let c = condition(&w("if api || { path_end .jpg .png }"), &acls).unwrap();
        assert_eq!(c[1].path, Some(("path_regex", "(?:\\.jpg|\\.png)$".into())));
        let c = condition(&w("if !{ ssl_fc }"), &acls).unwrap();
        assert_eq!(c[0].protocol, Some("http"));
        let c = condition(&w("unless { src 10.0.0.0/8 }"), &acls).unwrap();
        assert_eq!(c[0].not_clients, Some(vec!["10.0.0.0/8".into()]));
        assert!(condition(&w("if !api"), &acls).is_err());
        assert!(condition(&w("if nope"), &acls).is_err());
        let c = condition(&w("if { sc_http_req_rate(0) gt 20 }"), &acls).unwrap();
        assert_eq!(c[0].rate, Some(("requests".into(), 20)));
    }
}
