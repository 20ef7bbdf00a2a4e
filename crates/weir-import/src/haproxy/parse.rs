//! HAProxy's config syntax read into sections of lines, as
//! `cfgparse.c` reads it: a line is words separated by blanks, `#` starts a
//! comment, `\` escapes the next character (`\ `, `\#`, `\\`, `\"`, `\'`),
//! `"…"` keeps blanks (with the same escapes) and `'…'` keeps everything;
//! a section keyword (`global`, `defaults`, `frontend`, `backend`,
//! `listen`, `userlist`, …) starts a section that runs to the next one.
//!
//! Environment variables in double quotes (`"${NAME}"`, `"$NAME"`,
//! `"${NAME-default}"`) are expanded and the conditional blocks (`.if`,
//! `.elif`, `.else`, `.endif`) decided at import time, as HAProxy decides
//! them when it reads its config; an `.alert` in a block that holds stops
//! the import as it stops HAProxy.
//!
//! Owns only syntax: never decides what a keyword means.

use crate::env::Env;
use crate::error::{Error, Origin};
use crate::report::Report;

/// One line: its words, where it starts, and each word's column.
#[derive(Debug, Clone)]
pub struct Line {
    pub words: Vec<String>,
    pub at: Origin,
    pub cols: Vec<usize>,
}

impl Line {
    /// The keyword (first word).
    pub fn kw(&self) -> &str {
        self.arg(0)
    }

    /// Word `i` (0 is the keyword), or "".
    pub fn arg(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }

    /// Where word `i` is.
    pub fn at_word(&self, i: usize) -> Origin {
        Origin {
            col: self.cols.get(i).copied().unwrap_or(self.at.col),
            ..self.at.clone()
        }
    }

    /// The words as written (for the report and comments).
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (i, w) in self.words.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            if w.is_empty() || w.contains(char::is_whitespace) {
                s.push('"');
                s.push_str(w);
                s.push('"');
            } else {
                s.push_str(w);
            }
        }
        s
    }
}

/// `frontend NAME`, `backend NAME`, `listen NAME`, `defaults [NAME]`,
/// `global`, `userlist NAME`, … with the lines under it.
#[derive(Debug, Clone)]
pub struct Section {
    pub kind: String,
    /// The section's name ("" for `global` and an unnamed `defaults`).
    pub name: String,
    /// The section line's words after the name (`from DEFAULTS`, an address).
    pub args: Vec<String>,
    pub at: Origin,
    pub lines: Vec<Line>,
}

/// The keywords that start a section.
pub const SECTIONS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "peers",
    "resolvers",
    "mailers",
    "cache",
    "program",
    "http-errors",
    "ring",
    "log-forward",
    "fcgi-app",
];

/// The HAProxy whose `.if version_atleast(…)` and `feature(…)` the import
/// answers for: the current LTS, with what weir itself does (QUIC, TLS).
const ASSUMED_VERSION: &str = "3.0";
const ASSUMED_FEATURES: &[&str] = &[
    "OPENSSL",
    "QUIC",
    "ZLIB",
    "LIBCRYPT",
    "PCRE2",
    "PCRE2_JIT",
    "LUA",
    "PROMEX",
    "TPROXY",
    "LINUX_SPLICE",
    "GETADDRINFO",
    "THREAD",
    "CPU_AFFINITY",
    "PRCTL",
    "NS",
    "TFO",
    "SYSTEMD",
];

/// One `.if` level: whether its lines are read, and whether a branch was taken.
struct Level {
    reading: bool,
    taken: bool,
    parent: bool,
}

/// Parses a whole config shown as `file`.
pub fn parse(
    file: &str,
    text: &str,
    env: &mut Env,
    report: &mut Report,
) -> Result<Vec<Section>, Error> {
    let mut out: Vec<Section> = Vec::new();
    let mut levels: Vec<Level> = Vec::new();
    let mut opened: Vec<Origin> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let reading = levels.last().is_none_or(|l| l.reading);
        // An `.elif` is read (its variables expanded) when no branch before it held.
        let expand = reading
            || (raw.trim_start().starts_with(".elif")
                && levels.last().is_some_and(|l| l.parent && !l.taken));
        let Some(line) = words(
            file,
            n + 1,
            raw,
            if expand { Some(&mut *env) } else { None },
        )?
        else {
            continue;
        };
        match line.kw() {
            ".if" => {
                let holds = reading && cond(&line, env)?;
                if reading {
                    report.approx(&line.at, line.text(), "", decided(holds));
                }
                levels.push(Level {
                    reading: holds,
                    taken: holds,
                    parent: reading,
                });
                opened.push(line.at.clone());
                continue;
            }
            ".elif" | ".else" => {
                let Some(l) = levels.last_mut() else {
                    return Err(Error::new(
                        line.at.clone(),
                        format!("`{}` without `.if`", line.kw()),
                    ));
                };
                let holds = l.parent && !l.taken && (line.kw() == ".else" || cond(&line, env)?);
                if l.parent && !l.taken {
                    report.approx(&line.at, line.text(), "", decided(holds));
                }
                l.reading = holds;
                l.taken |= holds;
                continue;
            }
            ".endif" => {
                if levels.pop().is_none() {
                    return Err(Error::new(line.at.clone(), "`.endif` without `.if`"));
                }
                opened.pop();
                continue;
            }
            _ if !reading => continue,
            ".alert" => {
                return Err(Error::new(
                    line.at.clone(),
                    format!("HAProxy stops here: .alert {}", line.words[1..].join(" ")),
                ));
            }
            ".diag" | ".notice" | ".warning" => continue,
            _ => {}
        }
        if SECTIONS.contains(&line.kw()) {
            let (name, args) = match line.kw() {
                "global" => (String::new(), line.words[1..].to_vec()),
                "defaults" if line.arg(1) == "from" || line.words.len() == 1 => {
                    (String::new(), line.words[1..].to_vec())
                }
                _ => {
                    if line.words.len() < 2 {
                        return Err(Error::new(
                            line.at.clone(),
                            format!("`{}` needs a name", line.kw()),
                        ));
                    }
                    (line.words[1].clone(), line.words[2..].to_vec())
                }
            };
            out.push(Section {
                kind: line.kw().to_string(),
                name,
                args,
                at: line.at.clone(),
                lines: Vec::new(),
            });
            continue;
        }
        match out.last_mut() {
            Some(s) => s.lines.push(line),
            None => {
                return Err(Error::new(
                    line.at.clone(),
                    format!("unknown keyword `{}` out of section", line.kw()),
                ));
            }
        }
    }
    if let Some(at) = opened.pop() {
        return Err(Error::new(at, "`.if` without `.endif`"));
    }
    Ok(out)
}

fn decided(holds: bool) -> String {
    format!(
        "decided at import time ({}), for HAProxy {ASSUMED_VERSION} with the import's environment; \
         weir.toml holds only the lines it keeps",
        if holds { "holds" } else { "does not hold" }
    )
}

/// An `.if`/`.elif` condition: terms joined by `&&` and `||` (`&&` first),
/// each maybe negated with `!`, in parentheses or a predicate call.
fn cond(line: &Line, env: &Env) -> Result<bool, Error> {
    let text = line.words[1..].join(" ");
    let mut p = CondParser {
        s: text.as_bytes(),
        i: 0,
        env,
    };
    let v = p.or();
    match v {
        Some(v) if p.rest().is_empty() => Ok(v),
        _ => Err(Error::new(
            line.at_word(1),
            format!("cannot read the condition `{text}`"),
        )),
    }
}

struct CondParser<'a> {
    s: &'a [u8],
    i: usize,
    env: &'a Env,
}

impl CondParser<'_> {
    fn rest(&mut self) -> &str {
        self.skip();
        std::str::from_utf8(&self.s[self.i..]).unwrap_or("")
    }

    fn skip(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, t: &str) -> bool {
        self.skip();
        if self.s[self.i..].starts_with(t.as_bytes()) {
            self.i += t.len();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Option<bool> {
        let mut v = self.and()?;
        while self.eat("||") {
            v |= self.and()?;
        }
        Some(v)
    }

    fn and(&mut self) -> Option<bool> {
        let mut v = self.term()?;
        while self.eat("&&") {
            v &= self.term()?;
        }
        Some(v)
    }

    fn term(&mut self) -> Option<bool> {
        if self.eat("!") {
            return self.term().map(|v| !v);
        }
        if self.eat("(") {
            let v = self.or()?;
            return self.eat(")").then_some(v);
        }
        self.skip();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.' || *b == b'-')
        {
            self.i += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.i])
            .ok()?
            .to_string();
        if !self.eat("(") {
            // A bare word: a number (true unless 0) or a string (true unless empty).
            return Some(match word.parse::<i64>() {
                Ok(n) => n != 0,
                Err(_) => !word.is_empty(),
            });
        }
        let mut args = Vec::new();
        let mut cur = String::new();
        loop {
            match self.s.get(self.i).copied() {
                None => return None,
                Some(b')') => {
                    self.i += 1;
                    args.push(cur.trim().to_string());
                    break;
                }
                Some(b',') => {
                    self.i += 1;
                    args.push(std::mem::take(&mut cur).trim().to_string());
                }
                Some(b) => {
                    cur.push(b as char);
                    self.i += 1;
                }
            }
        }
        let arg = |n: usize| args.get(n).map_or("", String::as_str);
        Some(match word.as_str() {
            "defined" => self.env.is_set(arg(0)),
            "feature" => ASSUMED_FEATURES.contains(&arg(0)),
            "streq" => arg(0) == arg(1),
            "strneq" => arg(0) != arg(1),
            "strstr" => arg(0).contains(arg(1)),
            "version_atleast" => version(ASSUMED_VERSION) >= version(arg(0)),
            "version_before" => version(ASSUMED_VERSION) < version(arg(0)),
            "enabled" => true,
            _ => return None,
        })
    }
}

fn version(v: &str) -> Vec<u32> {
    v.split(['.', '-']).map_while(|p| p.parse().ok()).collect()
}

/// One line's words, or `None` for a blank or comment line.
fn words(
    file: &str,
    line_no: usize,
    raw: &str,
    mut env: Option<&mut Env>,
) -> Result<Option<Line>, Error> {
    let at = |col: usize| Origin {
        file: file.to_string(),
        line: line_no,
        col,
    };
    let chars: Vec<char> = raw.chars().collect();
    let mut words = Vec::new();
    let mut cols = Vec::new();
    let mut cur: Option<String> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        match c {
            ' ' | '\t' | '\r' => {
                if let Some(w) = cur.take() {
                    words.push(w);
                }
                i += 1;
            }
            '#' => break,
            '\\' => {
                let w = cur.get_or_insert_with(|| {
                    cols.push(col);
                    String::new()
                });
                match chars.get(i + 1) {
                    Some(n) => w.push(*n),
                    None => w.push('\\'),
                }
                i += 2;
            }
            '"' | '\'' => {
                let w = cur.get_or_insert_with(|| {
                    cols.push(col);
                    String::new()
                });
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => return Err(Error::new(at(col), format!("unmatched {c} quote"))),
                        Some(q) if *q == c => break,
                        Some('\\') if c == '"' && j + 1 < chars.len() => {
                            w.push(chars[j + 1]);
                            j += 2;
                        }
                        Some('$') if c == '"' && env.is_some() => {
                            let (name, default, end) = variable(&chars, j);
                            if name.is_empty() {
                                w.push('$');
                                j += 1;
                                continue;
                            }
                            let written: String = chars[j..end].iter().collect();
                            let env = env.as_deref_mut().expect("checked");
                            w.push_str(&env.expand(
                                &at(j + 1),
                                &written,
                                &name,
                                default.as_deref(),
                            )?);
                            j = end;
                        }
                        Some(x) => {
                            w.push(*x);
                            j += 1;
                        }
                    }
                }
                i = j + 1;
            }
            c => {
                cur.get_or_insert_with(|| {
                    cols.push(col);
                    String::new()
                })
                .push(c);
                i += 1;
            }
        }
    }
    if let Some(w) = cur.take() {
        words.push(w);
    }
    if words.is_empty() {
        return Ok(None);
    }
    Ok(Some(Line {
        at: at(cols[0]),
        words,
        cols,
    }))
}

/// The variable at `chars[j]` (a `$`): its name, its default, and where
/// it ends; `${NAME[*]}` (one argument per word) reads as `${NAME}`.
fn variable(chars: &[char], j: usize) -> (String, Option<String>, usize) {
    let name_char = |c: &char| c.is_ascii_alphanumeric() || *c == '_';
    if chars.get(j + 1) == Some(&'{') {
        let Some(close) = chars[j + 2..].iter().position(|c| *c == '}') else {
            return (String::new(), None, j + 1);
        };
        let inner: String = chars[j + 2..j + 2 + close].iter().collect();
        let inner = inner.strip_suffix("[*]").unwrap_or(&inner).to_string();
        let (name, default) = match inner.split_once('-') {
            Some((n, d)) => (n.to_string(), Some(d.to_string())),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| name_char(&c)) {
            return (String::new(), None, j + 1);
        }
        return (name, default, j + 3 + close);
    }
    let mut e = j + 1;
    while chars.get(e).is_some_and(name_char) {
        e += 1;
    }
    (chars[j + 1..e].iter().collect(), None, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_plain(file: &str, text: &str) -> Result<Vec<Section>, Error> {
        parse(
            file,
            text,
            &mut Env::new(Some(Default::default())),
            &mut Report::default(),
        )
    }

    #[test]
    fn variables_in_double_quotes_and_conditional_blocks() {
        let vars = [("PORT", "8443"), ("MODE", "edge")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut env = Env::new(Some(vars));
        let mut report = Report::default();
        let s = parse(
            "h.cfg",
            "frontend fe\n  bind \":${PORT}\" '${PORT}'\n  http-request set-header X-M \"$MODE-${NONE-dflt}\"\n.if defined(NONE)\n  bind :1\n.elif streq(\"$MODE\",edge) && version_atleast(2.4)\n  bind :2\n.else\n  bind :3\n.endif\n.if feature(QUIC)\n  bind quic4@:443\n.endif\n",
            &mut env,
            &mut report,
        )
        .unwrap();
        let words: Vec<Vec<String>> = s[0].lines.iter().map(|l| l.words.clone()).collect();
        assert_eq!(words[0], ["bind", ":8443", "${PORT}"]);
        assert_eq!(words[1], ["http-request", "set-header", "X-M", "edge-dflt"]);
        assert_eq!(words[2], ["bind", ":2"]);
        assert_eq!(words[3], ["bind", "quic4@:443"]);
        assert_eq!(words.len(), 4);
        let e = parse_plain("h.cfg", "frontend fe\n  bind \":${UNSET}\"\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("h.cfg:2:10: ${UNSET}: the environment variable UNSET is not set"),
            "{e}"
        );
        let e = parse_plain("h.cfg", "global\n.if 1\n.alert no\n.endif\n").unwrap_err();
        assert_eq!(e.to_string(), "h.cfg:3:1: HAProxy stops here: .alert no");
        assert!(parse_plain("h.cfg", "global\n.if 0\n").is_err());
    }

    #[test]
    fn quotes_escapes_comments() {
        let s = parse_plain(
            "h.cfg",
            "global\n  log /dev/log local0 # syslog\nfrontend fe\n    http-request set-header X-A \"a b\\\"c\" # x\n    acl p path_beg 'it''s' a\\ b \\#x\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].lines[0].words, ["log", "/dev/log", "local0"]);
        assert_eq!(s[1].name, "fe");
        let l = &s[1].lines[0];
        assert_eq!(l.words, ["http-request", "set-header", "X-A", "a b\"c"]);
        assert_eq!((l.at.line, l.at.col), (4, 5));
        assert_eq!(
            s[1].lines[1].words,
            ["acl", "p", "path_beg", "its", "a b", "#x"]
        );
    }

    #[test]
    fn errors_name_the_place() {
        let e = parse_plain("h.cfg", "frontend fe\n  bind \"oops\n").unwrap_err();
        assert_eq!(e.to_string(), "h.cfg:2:8: unmatched \" quote");
        let e = parse_plain("h.cfg", "\n  bind :80\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "h.cfg:2:3: unknown keyword `bind` out of section"
        );
    }
}
