//! The weir.toml the import writes: tables of keys with inline values and
//! `#` comments saying where each part came from. Writes TOML only; knows
//! nothing of what the keys mean.

use std::fmt::Write;

/// An inline TOML value.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    S(String),
    I(i64),
    B(bool),
    A(Vec<V>),
    T(Vec<(String, V)>),
}

impl V {
    pub fn s(s: impl Into<String>) -> V {
        V::S(s.into())
    }

    pub fn strs<I: IntoIterator<Item = S>, S: Into<String>>(v: I) -> V {
        V::A(v.into_iter().map(|s| V::S(s.into())).collect())
    }
}

/// `[header]` or `[[header]]` with its keys.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub header: String,
    pub array: bool,
    pub comments: Vec<String>,
    pub keys: Vec<(String, V)>,
}

impl Table {
    pub fn new(header: impl Into<String>, array: bool) -> Table {
        Table {
            header: header.into(),
            array,
            ..Table::default()
        }
    }

    pub fn set(&mut self, key: &str, v: V) {
        if let Some(slot) = self.keys.iter_mut().find(|(k, _)| k == key) {
            slot.1 = v;
        } else {
            self.keys.push((key.to_string(), v));
        }
    }

    /// Puts the keys named in `first` first, in that order; the others keep theirs.
    pub fn order(&mut self, first: &[&str]) {
        let rank = |k: &str| first.iter().position(|f| *f == k).unwrap_or(first.len());
        self.keys.sort_by_key(|(k, _)| rank(k));
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.keys.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// The order of a site's keys in the output: where, then what answers.
pub const SITE_ORDER: &[&str] = &[
    "listen",
    "default",
    "tls",
    "root",
    "proxy",
    "php",
    "fastcgi",
    "redirect",
    "respond",
    "index",
    "try_files",
    "browse",
];

/// The order of a route's keys: what it matches, how the path changes, what answers.
pub const ROUTE_ORDER: &[&str] = &[
    "path",
    "path_regex",
    "match",
    "strip_prefix",
    "rewrite",
    "root",
    "proxy",
    "php",
    "fastcgi",
    "redirect",
    "respond",
    "try_files",
];

/// The whole file, each site's and route's keys in their usual order.
pub fn write(head: &[String], tables: &[Table]) -> String {
    let tables: Vec<Table> = tables
        .iter()
        .cloned()
        .map(|mut t| {
            if t.header.starts_with("site.") {
                t.order(if t.array { ROUTE_ORDER } else { SITE_ORDER });
            }
            t
        })
        .collect();
    let mut out = String::new();
    for c in head {
        comment(&mut out, c);
    }
    for t in &tables {
        if t.keys.is_empty() && !t.array {
            continue;
        }
        out.push('\n');
        for c in &t.comments {
            comment(&mut out, c);
        }
        if t.array {
            let _ = writeln!(out, "[[{}]]", t.header);
        } else {
            let _ = writeln!(out, "[{}]", t.header);
        }
        for (k, v) in &t.keys {
            key(&mut out, k);
            out.push_str(" = ");
            value(&mut out, v);
            out.push('\n');
        }
    }
    out
}

fn comment(out: &mut String, c: &str) {
    for line in c.lines() {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
}

/// A key, quoted unless bare.
pub fn key(out: &mut String, k: &str) {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        out.push_str(k);
    } else {
        string(out, k);
    }
}

/// A string: literal ('…') when it holds backslashes and nothing a literal
/// string cannot, else basic ("…") with escapes.
pub fn string(out: &mut String, s: &str) {
    if s.contains('\\') && !s.contains('\'') && !s.chars().any(char::is_control) {
        out.push('\'');
        out.push_str(s);
        out.push('\'');
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A value as it is written inline.
pub fn inline(v: &V) -> String {
    let mut out = String::new();
    value(&mut out, v);
    out
}

fn value(out: &mut String, v: &V) {
    match v {
        V::S(s) => string(out, s),
        V::I(i) => {
            let _ = write!(out, "{i}");
        }
        V::B(b) => {
            let _ = write!(out, "{b}");
        }
        V::A(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value(out, x);
            }
            out.push(']');
        }
        V::T(t) => {
            out.push_str("{ ");
            for (i, (k, x)) in t.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                key(out, k);
                out.push_str(" = ");
                value(out, x);
            }
            out.push_str(" }");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let mut t = Table::new("site.\":80\"", false);
        t.set("root", V::s("/var/www"));
        t.set("path_regex", V::s("\\.php$"));
        t.set(
            "headers",
            V::T(vec![
                ("X-A".into(), V::s("say \"hi\"")),
                ("a b".into(), V::I(1)),
            ]),
        );
        let s = write(&["from nginx".into()], &[t]);
        assert_eq!(
            s,
            "# from nginx\n\n[site.\":80\"]\nroot = \"/var/www\"\npath_regex = '\\.php$'\nheaders = { X-A = \"say \\\"hi\\\"\", \"a b\" = 1 }\n"
        );
    }
}
