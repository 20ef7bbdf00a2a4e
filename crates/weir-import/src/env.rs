//! Environment placeholders, expanded as each server expands them when it
//! reads its config (Caddy's `{$NAME}`, `{$NAME:default}` and `{env.NAME}`,
//! HAProxy's `"${NAME}"` and `"${NAME-default}"`, Apache's `${NAME}`),
//! from the environment at import time. Every expansion is kept for the
//! report; an unset variable without a default is an error naming it.
//!
//! Owns the lookup and the record only: each server's reader finds its own
//! placeholders, and nothing here reads a file.

use std::collections::HashMap;

use crate::error::{Error, Origin};
use crate::report::Report;

/// Where variables come from, and what was expanded.
#[derive(Debug, Default)]
pub struct Env {
    /// `None`: the process's environment.
    vars: Option<HashMap<String, String>>,
    used: Vec<Expansion>,
}

#[derive(Debug)]
struct Expansion {
    at: Origin,
    written: String,
    name: String,
    value: String,
    defaulted: bool,
}

impl Env {
    pub fn new(vars: Option<HashMap<String, String>>) -> Env {
        Env {
            vars,
            used: Vec::new(),
        }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        match &self.vars {
            Some(v) => v.get(name).cloned(),
            None => std::env::var(name).ok(),
        }
    }

    /// The value of `name` (or `default`), recorded as the expansion of
    /// `written` at `at`; unset without a default is an error.
    pub fn expand(
        &mut self,
        at: &Origin,
        written: &str,
        name: &str,
        default: Option<&str>,
    ) -> Result<String, Error> {
        let (value, defaulted) = match (self.lookup(name), default) {
            (Some(v), _) => (v, false),
            (None, Some(d)) => (d.to_string(), true),
            (None, None) => {
                return Err(Error::new(
                    at.clone(),
                    format!(
                        "{written}: the environment variable {name} is not set; \
                         set it as the server's environment has it and import again"
                    ),
                ));
            }
        };
        self.used.push(Expansion {
            at: at.clone(),
            written: written.to_string(),
            name: name.to_string(),
            value: value.clone(),
            defaulted,
        });
        Ok(value)
    }

    /// Whether `name` is set (HAProxy's `.if defined(NAME)`).
    pub fn is_set(&self, name: &str) -> bool {
        self.lookup(name).is_some()
    }

    /// One report line per expansion: the value is written into weir.toml,
    /// where the original server read it at each start.
    pub fn report(&self, report: &mut Report) {
        for e in &self.used {
            let shown = if secret(&e.name) {
                format!("(hidden, {} characters)", e.value.chars().count())
            } else {
                format!("{:?}", e.value)
            };
            let source = if e.defaulted {
                "unset, its default"
            } else {
                "from the environment"
            };
            report.approx(
                &e.at,
                e.written.clone(),
                "",
                format!(
                    "{} {source} at import time: {shown} is written into weir.toml; \
                     the server read it at each start",
                    e.name
                ),
            );
        }
    }
}

/// Names whose values the report does not print.
fn secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "PASS",
        "SECRET",
        "TOKEN",
        "KEY",
        "CREDENTIAL",
        "AUTH",
        "HASH",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// Replaces, in `text`, each placeholder that starts with `open` and ends
/// with `close` (`{$`…`}`), its inside split into a name and a default at
/// the first `sep` (when given). Lines are kept, so origins stay true.
pub fn replace(
    env: &mut Env,
    file: &str,
    text: &str,
    open: &str,
    close: char,
    sep: Option<char>,
) -> Result<String, Error> {
    if !text.contains(open) {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut missing: Vec<(Error, String)> = Vec::new();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        // Comment lines are left as they are: an unset name there changes nothing.
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        let mut rest = line;
        while let Some(s) = rest.find(open) {
            out.push_str(&rest[..s]);
            let after = &rest[s + open.len()..];
            let Some(e) = after.find(close) else {
                out.push_str(&rest[s..]);
                rest = "";
                break;
            };
            let inner = &after[..e];
            let (name, default) = match sep.and_then(|c| inner.split_once(c)) {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            if !valid_name(name) {
                out.push_str(open);
                rest = after;
                continue;
            }
            let at = Origin {
                file: file.to_string(),
                line: n + 1,
                col: line[..line.len() - rest.len() + s].chars().count() + 1,
            };
            let written = format!("{open}{inner}{close}");
            match env.expand(&at, &written, name, default) {
                Ok(v) => out.push_str(&v),
                Err(e) => {
                    if !missing.iter().any(|(_, n): &(Error, String)| n == name) {
                        missing.push((e, name.to_string()));
                    }
                }
            }
            rest = &after[e + close.len_utf8()..];
        }
        out.push_str(rest);
    }
    // Every unset name at once, so one run of the import lists them all.
    match missing.len() {
        0 => Ok(out),
        1 => Err(missing.remove(0).0),
        _ => {
            let names: Vec<&str> = missing.iter().map(|(_, n)| n.as_str()).collect();
            Err(Error::new(
                missing[0].0.at.clone(),
                format!(
                    "the environment variables {} are not set; set them as the server's environment has them (an empty value is allowed) and import again",
                    names.join(", ")
                ),
            ))
        }
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::new(Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ))
    }

    #[test]
    fn caddy_placeholders_with_defaults() {
        let mut e = env(&[("DOMAIN", "example.com")]);
        let out = replace(
            &mut e,
            "Caddyfile",
            "{$DOMAIN} {\n  bind :{$PORT:8080} {$X\n}\n",
            "{$",
            '}',
            Some(':'),
        )
        .unwrap();
        assert_eq!(out, "example.com {\n  bind :8080 {$X\n}\n");
        let mut r = Report::default();
        e.report(&mut r);
        assert_eq!(r.items.len(), 2);
        assert_eq!((r.items[1].at.line, r.items[1].at.col), (2, 9));
        assert!(r.items[1].directive == "{$PORT:8080}");
    }

    #[test]
    fn unset_is_an_error_naming_it() {
        let mut e = env(&[]);
        let err = replace(&mut e, "Caddyfile", "a {$USERS}\n", "{$", '}', Some(':')).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Caddyfile:1:3: {$USERS}: the environment variable USERS is not set; set it as the server's environment has it and import again"
        );
    }

    #[test]
    fn secrets_are_not_printed() {
        let mut e = env(&[("ADMIN_PASSWORD_HASH", "$2a$14$abc")]);
        replace(&mut e, "C", "{$ADMIN_PASSWORD_HASH}", "{$", '}', None).unwrap();
        let mut r = Report::default();
        e.report(&mut r);
        assert!(r.to_string().contains("(hidden, 10 characters)"), "{r}");
    }
}
