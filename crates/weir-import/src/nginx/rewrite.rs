//! nginx's rewrite module and `map` in weir's terms: an `if` condition as
//! a route's `match` (or `path_regex`), a `rewrite` replacement as a
//! route's `rewrite` template, the location an internal rewrite reaches,
//! and a `map` as the values its variable takes with the condition under
//! which it takes each (the site is then written once per value).
//!
//! Pure: reads directives and answers questions about them; never builds
//! tables and never reports.

use super::parse::Directive;
use super::scope;
use crate::error::Origin;
use crate::regex::{regex_escape, unsupported_regex};
use crate::toml::V;

/// A condition as a weir route tests it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cond {
    /// The path must match this (from `$uri`).
    pub path_regex: Option<String>,
    /// Keys of the route's `match` table.
    pub matches: Vec<(String, V)>,
    /// How weir's test differs from nginx's, when it does.
    pub approx: Option<String>,
}

impl Cond {
    /// Both conditions at once; `None` when no request meets both.
    pub fn and(&self, o: &Cond) -> Option<Cond> {
        let mut c = self.clone();
        match (&c.path_regex, &o.path_regex) {
            (Some(a), Some(b)) if a != b => return None,
            (None, Some(b)) => c.path_regex = Some(b.clone()),
            _ => {}
        }
        for (k, v) in &o.matches {
            match c.matches.iter().find(|(ck, _)| ck == k) {
                Some((_, cv)) if k == "header" || k == "query" => {
                    let (V::T(a), V::T(b)) = (cv.clone(), v) else {
                        return None;
                    };
                    let mut merged = a.clone();
                    for (n, x) in b {
                        match a.iter().find(|(an, _)| an.eq_ignore_ascii_case(n)) {
                            Some((_, ax)) if ax != x => return None,
                            Some(_) => {}
                            None => merged.push((n.clone(), x.clone())),
                        }
                    }
                    let slot = c.matches.iter_mut().find(|(ck, _)| ck == k).unwrap();
                    slot.1 = V::T(merged);
                }
                Some((_, cv)) if cv != v => return None,
                Some(_) => {}
                None => c.matches.push((k.clone(), v.clone())),
            }
        }
        c.approx = match (&self.approx, &o.approx) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        Some(c)
    }
}

/// What an `if` tests, for a route.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// Holds for every request (a constant, after a map's value is put in).
    Always,
    /// Holds for none.
    Never,
    When(Cond),
}

/// The arguments of `if (…)` without their parentheses.
pub fn if_args(d: &Directive) -> Vec<String> {
    let mut a: Vec<String> = d.args.clone();
    if let Some(first) = a.first_mut() {
        if first == "(" {
            a.remove(0);
        } else if let Some(rest) = first.strip_prefix('(') {
            *first = rest.to_string();
        }
    }
    if let Some(last) = a.last_mut() {
        if last == ")" {
            a.pop();
        } else if let Some(rest) = last.strip_suffix(')') {
            *last = rest.to_string();
        }
    }
    a
}

/// nginx's truth of a value: neither empty nor "0".
fn truthy(v: &str) -> bool {
    !v.is_empty() && v != "0"
}

/// An `if` condition as a weir test; `Err` says why weir cannot test it.
pub fn if_test(args: &[String]) -> Result<Test, String> {
    let var = |s: &str| s.starts_with('$');
    match args {
        [v] if !v.contains('$') => Ok(if truthy(v) { Test::Always } else { Test::Never }),
        [v] if var(v) => {
            let name = &v[1..];
            let approx = Some(format!(
                "weir tests that it is there; nginx that `{v}` is neither empty nor \"0\""
            ));
            if let Some(h) = name.strip_prefix("http_") {
                Ok(Test::When(Cond {
                    matches: vec![(
                        "header".into(),
                        V::T(vec![(super::header_name(h), V::s("*"))]),
                    )],
                    approx,
                    ..Cond::default()
                }))
            } else if let Some(q) = name.strip_prefix("arg_") {
                Ok(Test::When(Cond {
                    matches: vec![("query".into(), V::T(vec![(q.to_string(), V::s("*"))]))],
                    approx,
                    ..Cond::default()
                }))
            } else {
                Err(format!(
                    "weir's routes cannot test `{v}` (they test the method, host, scheme, a header, a query argument or the path)"
                ))
            }
        }
        [l, op, r] => {
            let has_var = |s: &str| {
                s.as_bytes().windows(2).any(|w| {
                    w[0] == b'$' && (w[1].is_ascii_alphabetic() || w[1] == b'_' || w[1] == b'{')
                })
            };
            if matches!(op.as_str(), "=" | "!=") && has_var(r) && var(l) {
                return Err("weir's `match` compares with fixed values, not variables".to_string());
            }
            match op.as_str() {
                "=" | "!=" if !l.contains('$') => Ok(if (l == r) == (op == "=") {
                    Test::Always
                } else {
                    Test::Never
                }),
                "=" => eq_cond(l, r, false).map(Test::When),
                "~" | "~*" | "!~" | "!~*" if !l.contains('$') => {
                    let re = if op.contains('*') {
                        format!("(?i){r}")
                    } else {
                        r.clone()
                    };
                    let re = regex_lite::Regex::new(&re)
                        .map_err(|_| format!("`{r}` is not a regex weir reads"))?;
                    Ok(if re.is_match(l) != op.starts_with('!') {
                        Test::Always
                    } else {
                        Test::Never
                    })
                }
                "~" | "~*" if matches!(l.as_str(), "$uri" | "$document_uri") => {
                    if let Some(why) = unsupported_regex(r) {
                        return Err(format!("weir's regexes have no {why}"));
                    }
                    Ok(Test::When(Cond {
                        path_regex: Some(if op == "~*" {
                            format!("(?i){r}")
                        } else {
                            r.clone()
                        }),
                        ..Cond::default()
                    }))
                }
                "~" | "~*" => Err(
                    "weir's `match` compares exact values, not regexes (only the path, `$uri`, is matched by a regex)".to_string(),
                ),
                "!=" | "!~" | "!~*" => Err(
                    "weir's `match` has no negation: write the routes for the other values by hand"
                        .to_string(),
                ),
                _ => Err(format!("`{op}` is not an operator of nginx's if")),
            }
        }
        [op, _]
            if matches!(
                op.as_str(),
                "-f" | "!-f" | "-d" | "!-d" | "-e" | "!-e" | "-x" | "!-x"
            ) =>
        {
            Err(
                "weir's routes do not test files: its try_files and php look for files themselves"
                    .to_string(),
            )
        }
        _ => Err("not a condition weir import reads".to_string()),
    }
}

/// `$var` equal to `value` as a weir condition (`ci`: ignoring case, as
/// `map` compares strings).
pub fn eq_cond(var: &str, value: &str, ci: bool) -> Result<Cond, String> {
    let name = var.strip_prefix('$').unwrap_or(var);
    let case = ci.then(|| "nginx compares ignoring case; weir compares exactly".to_string());
    let one = |k: &str, v: V, approx: Option<String>| Cond {
        matches: vec![(k.to_string(), v)],
        approx,
        ..Cond::default()
    };
    match name {
        "request_method" => Ok(one("method", V::s(value.to_ascii_uppercase()), None)),
        "scheme" => match value.to_ascii_lowercase().as_str() {
            s @ ("http" | "https") => Ok(one("protocol", V::s(s), None)),
            _ => Err(format!("`$scheme` is never `{value}`")),
        },
        "host" | "http_host" | "server_name" if value.contains(':') => Err(format!(
            "weir's host match has no port (`{value}`)"
        )),
        "host" => Ok(one("host", V::s(value.to_ascii_lowercase()), None)),
        "http_host" => Ok(one(
            "host",
            V::s(value.to_ascii_lowercase()),
            Some("nginx compares the Host field as sent (with its port and case); weir the name alone".into()),
        )),
        "uri" | "document_uri" => Ok(Cond {
            path_regex: Some(format!(
                "{}^{}$",
                if ci { "(?i)" } else { "" },
                regex_escape(value)
            )),
            ..Cond::default()
        }),
        "request_uri" if value.contains('?') => Err(
            "weir matches the path and the query apart".to_string(),
        ),
        "request_uri" => Ok(Cond {
            path_regex: Some(format!(
                "{}^{}$",
                if ci { "(?i)" } else { "" },
                regex_escape(value)
            )),
            approx: Some(
                "weir compares the path; nginx's $request_uri also holds the query, so a request with one does not match in nginx".into(),
            ),
            ..Cond::default()
        }),
        _ if value.is_empty() => Err(format!(
            "an empty `${name}` is a missing field or argument in nginx; weir's `match` cannot test for one"
        )),
        n if n.starts_with("http_") => Ok(one(
            "header",
            V::T(vec![(super::header_name(&n[5..]), V::s(value))]),
            case,
        )),
        n if n.starts_with("arg_") => Ok(one(
            "query",
            V::T(vec![(n[4..].to_string(), V::s(value))]),
            case,
        )),
        _ => Err(format!(
            "weir's routes cannot test `${name}` (they test the method, host, scheme, a header, a query argument or the path)"
        )),
    }
}

/// One `map SOURCE $VAR { … }`.
#[derive(Debug, Clone)]
pub struct Map {
    pub at: Origin,
    pub text: String,
    /// Its variable, without the `$`.
    pub var: String,
    pub default: String,
    /// The value for each condition, in nginx's order (strings, then regexes).
    pub values: Vec<(Cond, String)>,
    /// Why weir cannot tell its values apart, if it cannot.
    pub unsupported: Option<String>,
}

/// Reads a `map` block.
pub fn map(d: &Directive) -> Map {
    let source = d.arg(0).to_string();
    let var = d.arg(1).trim_start_matches('$').to_string();
    let mut m = Map {
        at: d.at.clone(),
        text: format!("map {source} ${var}"),
        var,
        default: String::new(),
        values: Vec::new(),
        unsupported: None,
    };
    let mut strings = Vec::new();
    let mut regexes = Vec::new();
    fn fail(why: String, m: &mut Map) {
        if m.unsupported.is_none() {
            m.unsupported = Some(why);
        }
    }
    if d.args.len() != 2 || !d.arg(1).starts_with('$') {
        fail("not `map SOURCE $VARIABLE`".into(), &mut m);
    }
    if !source.starts_with('$') || source[1..].contains('$') {
        fail(
            format!("its source `{source}` is not one variable weir's routes can test"),
            &mut m,
        );
    }
    for e in d.block.iter().flatten() {
        let (key, value) = (e.name.as_str(), e.arg(0));
        match key {
            "default" => m.default = value.to_string(),
            "hostnames" => fail(
                "`hostnames` (wildcard names): write routes with `match = { host = … }` by hand"
                    .into(),
                &mut m,
            ),
            "volatile" => {}
            _ if e.args.len() != 1 => fail(format!("`{}` is not `KEY VALUE;`", e.text()), &mut m),
            _ if key.starts_with('~') => {
                let (ci, re) = match key.strip_prefix("~*") {
                    Some(r) => (true, r),
                    None => (false, &key[1..]),
                };
                if !matches!(source.as_str(), "$uri" | "$document_uri") {
                    fail(
                        format!(
                            "the regex `{key}`: weir's `match` compares exact values (only the path, `$uri`, is matched by a regex)"
                        ),
                        &mut m,
                    );
                } else if value.contains('$') {
                    fail(
                        format!("the value `{value}` of `{key}` uses variables or captures"),
                        &mut m,
                    );
                } else if let Some(why) = unsupported_regex(re) {
                    fail(
                        format!("the regex `{key}`: weir's regexes have no {why}"),
                        &mut m,
                    );
                } else {
                    let re = if ci {
                        format!("(?i){re}")
                    } else {
                        re.to_string()
                    };
                    regexes.push((
                        Cond {
                            path_regex: Some(re),
                            ..Cond::default()
                        },
                        value.to_string(),
                    ));
                }
            }
            _ => {
                let k = key.strip_prefix('\\').unwrap_or(key);
                match eq_cond(&source, k, true) {
                    Ok(c) => strings.push((c, value.to_string())),
                    Err(why) => fail(format!("`{k}`: {why}"), &mut m),
                }
            }
        }
    }
    m.values = strings;
    m.values.extend(regexes);
    m
}

/// Whether `text` names the variable `var` (`$var` or `${var}`).
pub fn names_var(text: &str, var: &str) -> bool {
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        if after.starts_with(&format!("{{{var}}}")) {
            return true;
        }
        if let Some(tail) = after.strip_prefix(var)
            && !tail.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            return true;
        }
        rest = after;
    }
    false
}

/// `text` with the variable `var` replaced by `value`.
pub fn put_var(text: &str, var: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let braced = format!("{{{var}}}");
        if let Some(tail) = after.strip_prefix(&braced) {
            out.push_str(value);
            rest = tail;
        } else if let Some(tail) = after.strip_prefix(var)
            && !tail.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            out.push_str(value);
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The directives under `d` (itself included) that name `var`.
pub fn uses<'a>(d: &'a Directive, var: &str, out: &mut Vec<&'a Directive>) {
    if d.args.iter().any(|a| names_var(a, var)) {
        out.push(d);
    }
    for x in d.block.iter().flatten() {
        uses(x, var, out);
    }
}

/// `d` with `var` replaced by `value` everywhere under it.
pub fn substitute(d: &Directive, var: &str, value: &str) -> Directive {
    Directive {
        name: d.name.clone(),
        args: d.args.iter().map(|a| put_var(a, var, value)).collect(),
        at: d.at.clone(),
        block: d
            .block
            .as_ref()
            .map(|b| b.iter().map(|x| substitute(x, var, value)).collect()),
    }
}

/// The path an internal `rewrite` makes, as a weir `rewrite` template;
/// with how it differs from nginx's, if it does.
pub fn rewrite_template(repl: &str, server_name: &str) -> Result<(String, Option<String>), String> {
    if let Some(path) = repl.strip_suffix('?') {
        return Ok((scope::template(path, server_name)?, None));
    }
    if repl.contains('?') {
        let t = scope::template(repl, server_name)?;
        return Ok((
            format!("{t}&{{query}}"),
            Some("nginx puts the request's query after its own only when there is one; weir's leaves a `&` when there is none".into()),
        ));
    }
    let t = scope::template(repl, server_name)?;
    Ok((format!("{t}{{?query}}"), None))
}

/// The fixed start of every path a regex matches (`^/a/b(.*)` → `/a/b`),
/// or `None` when it is not anchored.
pub fn literal_prefix(re: &str) -> Option<String> {
    let rest = re.strip_prefix('^')?;
    let mut out = String::new();
    // Where a plain group `(…)` opened: its text counts unless it has a
    // `|` or a quantifier after it.
    let mut group: Option<usize> = None;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        let lit = match c {
            '(' if group.is_none() && chars.peek() != Some(&'?') => {
                group = Some(out.len());
                continue;
            }
            ')' if group.is_some() => {
                if matches!(chars.peek(), Some('?' | '*' | '{' | '+')) {
                    out.truncate(group.unwrap_or(0));
                    break;
                }
                group = None;
                continue;
            }
            '|' => {
                if let Some(g) = group {
                    out.truncate(g);
                }
                break;
            }
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() => e,
                _ => break,
            },
            '.' | '[' | '(' | ')' | '*' | '+' | '?' | '{' | '}' | '$' | '^' => break,
            c => c,
        };
        if matches!(chars.peek(), Some('?' | '*' | '{')) {
            break;
        }
        out.push(lit);
    }
    if let Some(g) = group {
        // The group never closed in what was read: an alternative may follow.
        if rest[..].contains('|') {
            out.truncate(g);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn if_conditions() {
        assert_eq!(
            if_test(&args(&["$request_method", "=", "POST"])).unwrap(),
            Test::When(Cond {
                matches: vec![("method".into(), V::s("POST"))],
                ..Cond::default()
            })
        );
        assert_eq!(
            if_test(&args(&["$uri", "~*", "^/a/(.+)$"])).unwrap(),
            Test::When(Cond {
                path_regex: Some("(?i)^/a/(.+)$".into()),
                ..Cond::default()
            })
        );
        assert_eq!(if_test(&args(&["1"])).unwrap(), Test::Always);
        assert_eq!(if_test(&args(&["0"])).unwrap(), Test::Never);
        assert_eq!(if_test(&args(&[""])).unwrap(), Test::Never);
        assert_eq!(if_test(&args(&["a", "=", "b"])).unwrap(), Test::Never);
        assert!(if_test(&args(&["-f", "$request_filename"])).is_err());
        assert!(
            if_test(&args(&["$host", "!=", "a"]))
                .unwrap_err()
                .contains("negation")
        );
        assert!(if_test(&args(&["$http_user_agent", "~", "bot"])).is_err());
    }

    #[test]
    fn variables_found_and_replaced() {
        assert!(names_var("https://$new_uri", "new_uri"));
        assert!(!names_var("$new_uri2", "new_uri"));
        assert!(names_var("${new_uri}x", "new_uri"));
        assert_eq!(put_var("a$x-${x}$xy", "x", "1"), "a1-1$xy");
    }

    #[test]
    fn rewrite_queries_and_prefixes() {
        assert_eq!(
            rewrite_template("/new/$1", "").unwrap().0,
            "/new/{1}{?query}"
        );
        assert_eq!(rewrite_template("/new/$1?", "").unwrap().0, "/new/{1}");
        let (t, approx) = rewrite_template("/index.php?p=$1", "").unwrap();
        assert_eq!(t, "/index.php?p={1}&{query}");
        assert!(approx.is_some());
        assert_eq!(literal_prefix("^/a/b(.*)$").as_deref(), Some("/a/b"));
        assert_eq!(literal_prefix("^/a\\.php").as_deref(), Some("/a.php"));
        assert_eq!(literal_prefix("^/ab?").as_deref(), Some("/a"));
        assert_eq!(literal_prefix("/x"), None);
        assert_eq!(
            literal_prefix("^(/download/.*)/media/(\\w+)").as_deref(),
            Some("/download/")
        );
        assert_eq!(literal_prefix("^(/a|/b)").as_deref(), Some(""));
        assert_eq!(literal_prefix("^(/a)?/b").as_deref(), Some(""));
    }
}
