//! HAProxy's config syntax read into sections of lines, as
//! `cfgparse.c` reads it: a line is words separated by blanks, `#` starts a
//! comment, `\` escapes the next character (`\ `, `\#`, `\\`, `\"`, `\'`),
//! `"…"` keeps blanks (with the same escapes) and `'…'` keeps everything;
//! a section keyword (`global`, `defaults`, `frontend`, `backend`,
//! `listen`, `userlist`, …) starts a section that runs to the next one.
//!
//! Owns only syntax: never decides what a keyword means.

use crate::error::{Error, Origin};

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

/// Parses a whole config shown as `file`.
pub fn parse(file: &str, text: &str) -> Result<Vec<Section>, Error> {
    let mut out: Vec<Section> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let Some(line) = words(file, n + 1, raw)? else {
            continue;
        };
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
    Ok(out)
}

/// One line's words, or `None` for a blank or comment line.
fn words(file: &str, line_no: usize, raw: &str) -> Result<Option<Line>, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_escapes_comments() {
        let s = parse(
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
        let e = parse("h.cfg", "frontend fe\n  bind \"oops\n").unwrap_err();
        assert_eq!(e.to_string(), "h.cfg:2:8: unmatched \" quote");
        let e = parse("h.cfg", "\n  bind :80\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "h.cfg:2:3: unknown keyword `bind` out of section"
        );
    }
}
