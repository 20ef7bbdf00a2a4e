//! nginx's config syntax read into a tree of directives, as
//! `ngx_conf_file.c` reads it: words, `"…"` and `'…'` strings with their
//! escapes, `#` comments, `${var}` inside words, `;`-ended directives and
//! `{…}` blocks, and `include` (with globs, relative to the main file's
//! directory) spliced in where it stands.
//!
//! Owns only syntax: never decides what a directive means.

use std::path::{Path, PathBuf};

use crate::error::{Error, Origin};

/// One directive: `name args…;` or `name args… { block }`.
#[derive(Debug, Clone)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub at: Origin,
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    /// The first argument, or "".
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", String::as_str)
    }

    /// `name args…` as written (for the report and comments).
    pub fn text(&self) -> String {
        let mut s = self.name.clone();
        for a in &self.args {
            s.push(' ');
            if a.is_empty() || a.contains(char::is_whitespace) || a.contains(';') {
                s.push('"');
                s.push_str(a);
                s.push('"');
            } else {
                s.push_str(a);
            }
        }
        s
    }
}

/// Where files are read from.
pub struct Reader {
    /// The main file's directory: relative includes and display names start here.
    pub conf_dir: PathBuf,
    /// Absolute paths are read under this directory instead (a copy of `/etc`).
    pub sysroot: Option<PathBuf>,
    depth: usize,
    /// Includes read from nginx's stock copies: where, and the name.
    pub stock_used: Vec<(Origin, String)>,
}

/// The files nginx's packages install beside nginx.conf (Debian 12's
/// nginx-common), for a config published without them: nginx never runs
/// without these, so they are read as the package has them.
const STOCK: &[(&str, &str)] = &[
    ("mime.types", include_str!("stock/mime.types")),
    ("fastcgi_params", include_str!("stock/fastcgi_params")),
    ("fastcgi.conf", include_str!("stock/fastcgi.conf")),
    ("proxy_params", include_str!("stock/proxy_params")),
];

/// Includes nested deeper than this are a loop.
const MAX_DEPTH: usize = 32;

impl Reader {
    pub fn new(main: &Path, sysroot: Option<PathBuf>) -> Reader {
        let conf_dir = main
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        Reader {
            conf_dir,
            sysroot,
            depth: 0,
            stock_used: Vec::new(),
        }
    }

    /// The name a file is shown by: relative to the main file's directory
    /// when under it, else as the config names it.
    pub fn display(&self, p: &Path) -> String {
        if let Ok(rel) = p.strip_prefix(&self.conf_dir)
            && !rel.as_os_str().is_empty()
        {
            return rel.display().to_string();
        }
        if let Some(root) = &self.sysroot
            && let Ok(rest) = p.strip_prefix(root)
        {
            return Path::new("/").join(rest).display().to_string();
        }
        p.display().to_string()
    }

    /// Where a path in the config is read from.
    pub fn real(&self, p: &Path) -> PathBuf {
        match &self.sysroot {
            Some(root) if p.is_absolute() && !p.starts_with(root) => {
                root.join(p.strip_prefix("/").unwrap_or(p))
            }
            _ => p.to_path_buf(),
        }
    }

    /// A path as written in the config, resolved as nginx resolves it
    /// (relative to the main file's directory), and where it is read from.
    pub fn resolve(&self, written: &str) -> PathBuf {
        let p = Path::new(written);
        if p.is_absolute() {
            self.real(p)
        } else {
            self.conf_dir.join(p)
        }
    }

    /// Reads and parses one file.
    pub fn file(&mut self, path: &Path, from: Option<&Origin>) -> Result<Vec<Directive>, Error> {
        let shown = self.display(path);
        let text = std::fs::read_to_string(path).map_err(|e| {
            let at = from.cloned().unwrap_or(Origin {
                file: shown.clone(),
                line: 1,
                col: 1,
            });
            Error::new(at, format!("cannot read {}: {e}", path.display()))
        })?;
        self.text(&shown, &text)
    }

    /// Parses config text shown as `file`.
    pub fn text(&mut self, file: &str, text: &str) -> Result<Vec<Directive>, Error> {
        let mut lx = Lexer::new(file, text);
        let list = self.block(&mut lx, false)?;
        Ok(list)
    }

    fn block(&mut self, lx: &mut Lexer<'_>, inner: bool) -> Result<Vec<Directive>, Error> {
        let mut out = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let mut start: Option<Origin> = None;
        loop {
            let (tok, at) = lx.next()?;
            match tok {
                Tok::Eof => {
                    if inner {
                        return Err(Error::new(at, "unexpected end of file, expecting \"}\""));
                    }
                    if !words.is_empty() {
                        return Err(Error::new(
                            start.unwrap_or(at),
                            "unexpected end of file, expecting \";\" or \"}\"",
                        ));
                    }
                    return Ok(out);
                }
                Tok::Word(w) => {
                    if words.is_empty() {
                        start = Some(at);
                    }
                    words.push(w);
                }
                Tok::Semi => {
                    if words.is_empty() {
                        return Err(Error::new(at, "unexpected \";\""));
                    }
                    let name = words.remove(0);
                    let d = Directive {
                        name,
                        args: std::mem::take(&mut words),
                        at: start.take().unwrap_or(at),
                        block: None,
                    };
                    if d.name == "include" {
                        out.extend(self.include(&d)?);
                    } else {
                        out.push(d);
                    }
                }
                Tok::Open => {
                    if words.is_empty() {
                        return Err(Error::new(at, "unexpected \"{\""));
                    }
                    let name = words.remove(0);
                    let dat = start.take().unwrap_or(at);
                    let args = std::mem::take(&mut words);
                    let block = self.block(lx, true)?;
                    out.push(Directive {
                        name,
                        args,
                        at: dat,
                        block: Some(block),
                    });
                }
                Tok::Close => {
                    if !words.is_empty() {
                        return Err(Error::new(at, "unexpected \"}\", expecting \";\""));
                    }
                    if !inner {
                        return Err(Error::new(at, "unexpected \"}\""));
                    }
                    return Ok(out);
                }
            }
        }
    }

    /// `include PATTERN;`: every file the glob names, in name order (as
    /// glob(3) gives them to nginx); a pattern without wildcards must exist.
    fn include(&mut self, d: &Directive) -> Result<Vec<Directive>, Error> {
        if d.args.len() != 1 {
            return Err(Error::new(
                d.at.clone(),
                "invalid number of arguments in \"include\" directive",
            ));
        }
        if self.depth >= MAX_DEPTH {
            return Err(Error::new(
                d.at.clone(),
                "includes nested too deeply (an include loop?)",
            ));
        }
        let pattern = self.resolve(&d.args[0]);
        let files = if crate::glob::has_wildcard(&d.args[0]) {
            crate::glob::expand_glob(&pattern)
        } else {
            vec![pattern]
        };
        let mut out = Vec::new();
        self.depth += 1;
        for f in files {
            let stock = (!f.exists())
                .then(|| {
                    let name = f.file_name()?.to_str()?;
                    let written = Path::new(&d.args[0]).file_name()?.to_str()?;
                    (name == written)
                        .then(|| STOCK.iter().find(|(n, _)| *n == name))
                        .flatten()
                })
                .flatten();
            let r = match stock {
                Some((name, text)) => {
                    self.stock_used.push((d.at.clone(), d.args[0].clone()));
                    self.text(&format!("(nginx's stock {name})"), text)
                }
                None => self.file(&f, Some(&d.at)),
            };
            match r {
                Ok(list) => out.extend(list),
                Err(e) => {
                    self.depth -= 1;
                    return Err(e);
                }
            }
        }
        self.depth -= 1;
        Ok(out)
    }
}

enum Tok {
    Word(String),
    Semi,
    Open,
    Close,
    Eof,
}

struct Lexer<'a> {
    file: &'a str,
    src: &'a [u8],
    pos: usize,
    line: usize,
    col: usize,
}

impl<'a> Lexer<'a> {
    fn new(file: &'a str, src: &'a str) -> Lexer<'a> {
        Lexer {
            file,
            src: src.as_bytes(),
            pos: 0,
            line: 1,
            col: 1,
        }
    }

    fn here(&self) -> Origin {
        Origin {
            file: self.file.to_string(),
            line: self.line,
            col: self.col,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        if b == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if b & 0xC0 != 0x80 {
            self.col += 1;
        }
        Some(b)
    }

    fn next(&mut self) -> Result<(Tok, Origin), Error> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\r' | b'\n') => {
                    self.bump();
                }
                Some(b'#') => {
                    while let Some(b) = self.peek() {
                        if b == b'\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                _ => break,
            }
        }
        let at = self.here();
        let Some(b) = self.peek() else {
            return Ok((Tok::Eof, at));
        };
        match b {
            b';' => {
                self.bump();
                Ok((Tok::Semi, at))
            }
            b'{' => {
                self.bump();
                Ok((Tok::Open, at))
            }
            b'}' => {
                self.bump();
                Ok((Tok::Close, at))
            }
            b'"' | b'\'' => {
                self.bump();
                let mut raw = Vec::new();
                loop {
                    match self.bump() {
                        None => {
                            return Err(Error::new(
                                at,
                                "unexpected end of file in a quoted string",
                            ));
                        }
                        Some(b'\\') => {
                            raw.push(b'\\');
                            if let Some(n) = self.bump() {
                                raw.push(n);
                            }
                        }
                        Some(q) if q == b => break,
                        Some(o) => raw.push(o),
                    }
                }
                match self.peek() {
                    // `)` ends an `if` condition: nginx reads it as a word of its own.
                    None | Some(b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{' | b'}' | b')') => {}
                    Some(_) => {
                        return Err(Error::new(
                            self.here(),
                            "unexpected character after a quoted string",
                        ));
                    }
                }
                Ok((Tok::Word(unescape(&raw)), at))
            }
            _ => {
                let mut raw = Vec::new();
                while let Some(c) = self.peek() {
                    match c {
                        b' ' | b'\t' | b'\r' | b'\n' | b';' | b'}' => break,
                        b'{' if raw.last() == Some(&b'$') => {
                            // `${var}`: the braces belong to the word.
                            while let Some(c) = self.bump() {
                                raw.push(c);
                                if c == b'}' {
                                    break;
                                }
                            }
                        }
                        b'{' => break,
                        b'\\' => {
                            self.bump();
                            raw.push(b'\\');
                            if let Some(n) = self.bump() {
                                raw.push(n);
                            }
                        }
                        _ => {
                            self.bump();
                            raw.push(c);
                        }
                    }
                }
                Ok((Tok::Word(unescape(&raw)), at))
            }
        }
    }
}

/// nginx's escapes: `\"`, `\'`, `\\`, `\t`, `\r`, `\n`; any other
/// backslash stays (regexes keep theirs).
fn unescape(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() {
            match raw[i + 1] {
                b'"' | b'\'' | b'\\' => {
                    out.push(raw[i + 1]);
                    i += 2;
                    continue;
                }
                b't' => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                b'r' => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                b'n' => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Vec<Directive> {
        Reader::new(Path::new("nginx.conf"), None)
            .text("nginx.conf", s)
            .unwrap()
    }

    #[test]
    fn words_quotes_escapes_comments_and_blocks() {
        let d = parse(
            "# top\nhttp {\n  server { listen 80; # c\n    return 200 \"a \\\"b\\\";\\n\";\n    location ~ \\.php$ { set ${x}y 'q'; }\n  }\n}\n",
        );
        assert_eq!(d.len(), 1);
        let http = d[0].block.as_ref().unwrap();
        let server = http[0].block.as_ref().unwrap();
        assert_eq!(server[0].name, "listen");
        assert_eq!((server[0].at.line, server[0].at.col), (3, 12));
        assert_eq!(server[1].args, ["200", "a \"b\";\n"]);
        assert_eq!(server[2].args, ["~", "\\.php$"]);
        let loc = server[2].block.as_ref().unwrap();
        assert_eq!(loc[0].args, ["${x}y", "q"]);
        // nginx's own `if` example: `)` right after a quoted regex.
        let d = parse("if ($http_cookie ~* \"id=([^;]+)(?:;|$)\") { set $id $1; }\n");
        assert_eq!(d[0].args, ["($http_cookie", "~*", "id=([^;]+)(?:;|$)", ")"]);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = Reader::new(Path::new("nginx.conf"), None)
            .text("nginx.conf", "http {\n  server {\n    listen 80\n  }\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "nginx.conf:4:3: unexpected \"}\", expecting \";\""
        );
        let e = Reader::new(Path::new("nginx.conf"), None)
            .text("nginx.conf", "http {\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("nginx.conf:2:1: unexpected end of file"),
            "{e}"
        );
    }

    #[test]
    fn includes_are_spliced_in_name_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("sites-enabled")).unwrap();
        std::fs::write(
            dir.join("nginx.conf"),
            "http { include sites-enabled/*; }\n",
        )
        .unwrap();
        std::fs::write(dir.join("sites-enabled/b"), "server { listen 2; }\n").unwrap();
        std::fs::write(dir.join("sites-enabled/a"), "server { listen 1; }\n").unwrap();
        let main = dir.join("nginx.conf");
        let mut r = Reader::new(&main, None);
        let d = r.file(&main, None).unwrap();
        let servers = d[0].block.as_ref().unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].at.file, "sites-enabled/a");
        assert_eq!(servers[1].block.as_ref().unwrap()[0].args, ["2"]);
    }
}
