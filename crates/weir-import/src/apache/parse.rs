//! Apache's config syntax read into a tree: one directive a line (lines
//! joined by a final `\`), quoted arguments, `#` comments, `<Section args>`
//! … `</Section>` blocks; `Include`/`IncludeOptional` (globs, relative to
//! `ServerRoot`), `Define` and `${VAR}` (with Debian's `envvars`), and
//! `<IfModule>`/`<IfDefine>` decided from the modules `LoadModule` loads.
//!
//! Reads files only; knows nothing of what a directive means beyond the
//! few that decide which lines are read.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Origin};
use crate::nginx::parse::Reader as Files;

/// One directive, or a section with its body.
#[derive(Debug, Clone)]
pub struct Directive {
    /// As written (`ProxyPass`, `VirtualHost` for `<VirtualHost …>`).
    pub name: String,
    pub args: Vec<String>,
    pub at: Origin,
    /// A section's body.
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    /// The `i`th argument, or "".
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", String::as_str)
    }

    /// The name in lower case, for matching.
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }

    /// The directive as the report shows it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        if self.block.is_some() {
            s.push('<');
        }
        s.push_str(&self.name);
        for a in &self.args {
            s.push(' ');
            if a.is_empty() || a.contains(' ') {
                s.push('"');
                s.push_str(a);
                s.push('"');
            } else {
                s.push_str(a);
            }
        }
        if self.block.is_some() {
            s.push('>');
        }
        s
    }
}

/// Modules every httpd has built in (`<IfModule>` on them holds).
const BUILT_IN: &[&str] = &[
    "core",
    "http_core",
    "so",
    "log_config",
    "logio",
    "unixd",
    "version",
    "watchdog",
    "mpm_event",
];

/// What Debian's `/etc/apache2/envvars` sets, for a config read without it.
const DEBIAN_ENVVARS: &[(&str, &str)] = &[
    ("APACHE_RUN_USER", "www-data"),
    ("APACHE_RUN_GROUP", "www-data"),
    ("APACHE_PID_FILE", "/var/run/apache2/apache2.pid"),
    ("APACHE_RUN_DIR", "/var/run/apache2"),
    ("APACHE_LOCK_DIR", "/var/lock/apache2"),
    ("APACHE_LOG_DIR", "/var/log/apache2"),
];

/// Reads a config and everything it includes.
pub struct Reader {
    pub files: Files,
    pub server_root: PathBuf,
    defines: HashMap<String, String>,
    /// Modules loaded so far (`rewrite`, `ssl`…); before any `LoadModule`
    /// every `<IfModule>` holds (a vhost file read alone).
    modules: HashSet<String>,
    any_load: bool,
    depth: usize,
    /// Inside a false `<IfModule>`/`<IfDefine>`: lines are skipped.
    skipping: usize,
    /// `${NAME}` neither defined nor in envvars: the process's environment.
    pub env: crate::env::Env,
}

/// The module a name given to `<IfModule>` or `LoadModule` means.
fn module_id(n: &str) -> String {
    let n = n.trim_start_matches('!');
    let n = n.strip_prefix("mod_").unwrap_or(n);
    let n = n.strip_suffix(".c").unwrap_or(n);
    let n = n.strip_suffix("_module").unwrap_or(n);
    n.to_string()
}

impl Reader {
    pub fn new(main: &Path, sysroot: Option<PathBuf>, env: crate::env::Env) -> Reader {
        let files = Files::new(main, sysroot);
        let server_root = files.conf_dir.clone();
        let mut r = Reader {
            files,
            server_root,
            defines: HashMap::new(),
            modules: HashSet::new(),
            any_load: false,
            depth: 0,
            skipping: 0,
            env,
        };
        r.envvars();
        r
    }

    /// Debian's `envvars` beside apache2.conf: `export NAME=value` lines,
    /// which apache2ctl puts in the environment for `${NAME}`.
    fn envvars(&mut self) {
        // A sites-available file read alone finds it one level up.
        let dir = &self.files.conf_dir;
        let Ok(text) = std::fs::read_to_string(dir.join("envvars"))
            .or_else(|_| std::fs::read_to_string(dir.join("../envvars")))
        else {
            return;
        };
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("export ") else {
                continue;
            };
            let Some((k, v)) = rest.split_once('=') else {
                continue;
            };
            let v = v.trim_matches('"').replace("$SUFFIX", "");
            if !v.contains('$') && !v.contains('`') {
                self.defines.insert(k.trim().to_string(), v);
            }
        }
    }

    /// Whether a module is loaded (for `<IfModule>`).
    pub fn has_module(&self, n: &str) -> bool {
        let id = module_id(n);
        !self.any_load || BUILT_IN.contains(&id.as_str()) || self.modules.contains(&id)
    }

    /// A path as written, relative to ServerRoot, read under the sysroot.
    pub fn resolve(&self, written: &str) -> PathBuf {
        let p = Path::new(written);
        if p.is_absolute() {
            self.files.real(p)
        } else {
            self.files.real(&self.server_root.join(p))
        }
    }

    /// Reads and parses one file.
    pub fn file(&mut self, path: &Path, from: Option<&Origin>) -> Result<Vec<Directive>, Error> {
        let shown = self.files.display(path);
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

    /// Parses config text shown as `file` (a main file or a `.htaccess`).
    pub fn text(&mut self, file: &str, text: &str) -> Result<Vec<Directive>, Error> {
        let lines = logical_lines(file, text)?;
        let mut i = 0;
        self.block(file, &lines, &mut i, None)
    }

    fn block(
        &mut self,
        file: &str,
        lines: &[(Origin, String)],
        i: &mut usize,
        open: Option<(&str, &Origin)>,
    ) -> Result<Vec<Directive>, Error> {
        let mut out = Vec::new();
        while *i < lines.len() {
            let (at, line) = &lines[*i];
            *i += 1;
            let line = self.expand(at, line)?;
            if let Some(rest) = line.strip_prefix("</") {
                let name = rest.trim_end_matches('>').trim();
                return match open {
                    Some((o, _)) if o.eq_ignore_ascii_case(name) => Ok(out),
                    Some((o, _)) => Err(Error::new(at.clone(), format!("</{name}> closes <{o}>"))),
                    None => Err(Error::new(
                        at.clone(),
                        format!("</{name}> without <{name}>"),
                    )),
                };
            }
            if let Some(rest) = line.strip_prefix('<') {
                let Some(inner) = rest.trim_end().strip_suffix('>') else {
                    return Err(Error::new(at.clone(), "a section must end with `>`"));
                };
                let words = split_args(inner, at)?;
                let name = words.first().cloned().unwrap_or_default();
                let args = words[1..].to_vec();
                // Conditional sections are decided before their body is
                // read: a false one's Defines, modules and includes do not count.
                let cond = if name.eq_ignore_ascii_case("IfModule") {
                    // Before any LoadModule (a vhost read alone) both ways hold.
                    let a = args.first().map_or("", String::as_str);
                    Some(!self.any_load || self.has_module(a) != a.starts_with('!'))
                } else if name.eq_ignore_ascii_case("IfDefine") {
                    let a = args.first().map_or("", String::as_str);
                    Some(self.defines.contains_key(a.trim_start_matches('!')) != a.starts_with('!'))
                } else if name.eq_ignore_ascii_case("IfVersion")
                    || name.eq_ignore_ascii_case("IfFile")
                    || name.eq_ignore_ascii_case("IfDirective")
                {
                    Some(true)
                } else {
                    None
                };
                let skip = cond == Some(false);
                if skip {
                    self.skipping += 1;
                }
                let body = self.block(file, lines, i, Some((name.as_str(), at)));
                if skip {
                    self.skipping -= 1;
                }
                let body = body?;
                match cond {
                    Some(true) => out.extend(body),
                    Some(false) => {}
                    None => out.push(Directive {
                        name,
                        args,
                        at: at.clone(),
                        block: Some(body),
                    }),
                }
                continue;
            }
            let words = split_args(&line, at)?;
            let Some(name) = words.first().cloned() else {
                continue;
            };
            let d = Directive {
                name,
                args: words[1..].to_vec(),
                at: at.clone(),
                block: None,
            };
            if self.skipping > 0 {
                continue;
            }
            if d.is("Include") || d.is("IncludeOptional") {
                out.extend(self.include(&d)?);
                continue;
            }
            if d.is("Define") {
                self.defines
                    .insert(d.arg(0).to_string(), d.arg(1).to_string());
            } else if d.is("UnDefine") {
                self.defines.remove(d.arg(0));
            } else if d.is("ServerRoot") {
                self.server_root = PathBuf::from(d.arg(0));
            } else if d.is("LoadModule") {
                self.any_load = true;
                self.modules.insert(module_id(d.arg(0)));
            }
            out.push(d);
        }
        match open {
            Some((name, at)) => Err(Error::new(
                at.clone(),
                format!("<{name}> is never closed in {file}"),
            )),
            None => Ok(out),
        }
    }

    /// `${NAME}` replaced by its `Define` (or envvars, or environment)
    /// value; an unknown one is an error, except in a skipped block, where
    /// it stays as written.
    fn expand(&mut self, at: &Origin, line: &str) -> Result<String, Error> {
        if !line.contains("${") {
            return Ok(line.to_string());
        }
        let mut out = String::new();
        let mut rest = line;
        while let Some(s) = rest.find("${") {
            out.push_str(&rest[..s]);
            let after = &rest[s + 2..];
            match after.find('}') {
                Some(e) if self.defines.contains_key(&after[..e]) => {
                    out.push_str(&self.defines[&after[..e]]);
                    rest = &after[e + 1..];
                }
                // Apache's names are letters, digits and `_`; `${HTTP:X}` (a
                // mistyped `%{HTTP:X}`) stays as written, as Apache leaves it.
                Some(e)
                    if self.skipping == 0
                        && !after[..e].is_empty()
                        && after[..e]
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                {
                    let name = &after[..e];
                    let written = format!("${{{name}}}");
                    // apache2ctl sets Debian's envvars; read alone, a vhost gets their defaults.
                    let debian = DEBIAN_ENVVARS
                        .iter()
                        .find(|(k, _)| *k == name)
                        .map(|(_, v)| *v);
                    out.push_str(&self.env.expand(at, &written, name, debian)?);
                    rest = &after[e + 1..];
                }
                _ => {
                    out.push_str("${");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    fn include(&mut self, d: &Directive) -> Result<Vec<Directive>, Error> {
        let optional = d.is("IncludeOptional");
        if self.depth > 32 {
            return Err(Error::new(
                d.at.clone(),
                "includes nested too deep (a loop?)",
            ));
        }
        let written = d.arg(0);
        let pattern = self.resolve(written);
        let mut paths = glob(&pattern);
        if paths.is_empty() && !written.contains(['*', '?', '[']) && !optional {
            return Err(Error::new(
                d.at.clone(),
                format!("cannot read {}: no such file", pattern.display()),
            ));
        }
        // A directory includes every file in it.
        let mut files = Vec::new();
        for p in paths.drain(..) {
            if p.is_dir() {
                let mut inner: Vec<PathBuf> = std::fs::read_dir(&p)
                    .map(|rd| rd.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default();
                inner.sort();
                files.extend(inner.into_iter().filter(|x| x.is_file()));
            } else {
                files.push(p);
            }
        }
        let mut out = Vec::new();
        self.depth += 1;
        for f in files {
            let r = self.file(&f, Some(&d.at));
            match r {
                Ok(v) => out.extend(v),
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

/// Lines joined at a final `\`, comments and blank lines dropped, each
/// with where it starts.
fn logical_lines(file: &str, text: &str) -> Result<Vec<(Origin, String)>, Error> {
    let mut out = Vec::new();
    let mut cur: Option<(Origin, String)> = None;
    for (n, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let col = raw.len() - trimmed.len() + 1;
        let trimmed = trimmed.trim_end();
        let (piece, more) = match trimmed.strip_suffix('\\') {
            Some(p) => (p, true),
            None => (trimmed, false),
        };
        match &mut cur {
            Some((_, s)) => {
                s.push(' ');
                s.push_str(piece.trim());
            }
            None => {
                if piece.is_empty() || piece.starts_with('#') {
                    continue;
                }
                cur = Some((
                    Origin {
                        file: file.to_string(),
                        line: n + 1,
                        col,
                    },
                    piece.to_string(),
                ));
            }
        }
        if !more {
            out.extend(cur.take());
        }
    }
    out.extend(cur.take());
    Ok(out)
}

/// A line's words: quoted (`"…"`, `'…'`, `\"` inside) or bare.
fn split_args(line: &str, at: &Origin) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else {
            return Ok(out);
        };
        let mut w = String::new();
        if c == '"' || c == '\'' {
            chars.next();
            let mut closed = false;
            while let Some(d) = chars.next() {
                if d == '\\' && chars.peek().is_some_and(|n| *n == c || *n == '\\') {
                    w.push(chars.next().unwrap());
                    continue;
                }
                if d == c {
                    closed = true;
                    break;
                }
                w.push(d);
            }
            if !closed {
                return Err(Error::new(at.clone(), "unterminated quoted string"));
            }
        } else {
            while let Some(&d) = chars.peek() {
                if d.is_whitespace() {
                    break;
                }
                w.push(d);
                chars.next();
            }
        }
        out.push(w);
    }
}

/// The files a glob names, sorted (`*`, `?` in any component).
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut cur = vec![PathBuf::from("/")];
    let comps: Vec<String> = pattern
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if !pattern.is_absolute() {
        cur = vec![PathBuf::new()];
    }
    for c in comps {
        let mut next = Vec::new();
        for base in &cur {
            if c.contains(['*', '?']) {
                let Ok(rd) = std::fs::read_dir(if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base.as_path()
                }) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.') && wild(c.as_bytes(), n.as_bytes()))
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
            } else {
                let p = base.join(&c);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        cur = next;
    }
    cur
}

/// `*` any run, `?` one byte.
fn wild(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wild(&p[1..], s) || (!s.is_empty() && wild(p, &s[1..])),
        (Some(b'?'), Some(_)) => wild(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => wild(&p[1..], &s[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_continuations_and_quotes() {
        let mut r = Reader::new(
            Path::new("/nonexistent/apache2.conf"),
            None,
            crate::env::Env::default(),
        );
        let t = r
            .text(
                "a.conf",
                "# c\nDefine ROOT /srv\n<VirtualHost *:80>\n  DocumentRoot \"${ROOT}/www\"\n  Header set X-A \"say \\\"hi\\\"\"\n  RewriteRule ^a$ \\\n     /b [R=301,L]\n</VirtualHost>\n<IfModule mod_nothing.c>\nX 1\n</IfModule>\n",
            )
            .unwrap();
        assert_eq!(t[0].name, "Define");
        let v = &t[1];
        assert!(v.is("virtualhost"));
        let b = v.block.as_ref().unwrap();
        assert_eq!(b[0].args, ["/srv/www"]);
        assert_eq!(b[1].args, ["set", "X-A", "say \"hi\""]);
        assert_eq!(b[2].args, ["^a$", "/b", "[R=301,L]"]);
        assert_eq!(b[2].at.line, 6);
        // No LoadModule yet: every IfModule holds.
        assert_eq!(t[2].name, "X");
        let e = r.text("b.conf", "<Directory />\nX\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "b.conf:1:1: <Directory> is never closed in b.conf"
        );
    }

    #[test]
    fn globs() {
        assert!(wild(b"*.conf", b"000-default.conf"));
        assert!(!wild(b"*.conf", b"x.load"));
    }
}
