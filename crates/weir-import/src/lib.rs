//! `weir import`: another server's config read and written as a weir.toml,
//! with a [`Report`] of every directive (mapped, approximated, or without
//! an equivalent). nginx is read (`include` with globs, `http`, `server`,
//! `location` in nginx's matching order, `upstream`, `stream`), and Caddyfiles
//! (site blocks, snippets and `import`, matchers, `handle`, the common
//! directives), HAProxy configs (`frontend`/`backend`/`listen`, ACLs
//! and `use_backend`, `http-request` rules, stick tables, `mode tcp`),
//! and Apache's (`Include` with globs, `<VirtualHost>`, `<Directory>`,
//! `<Location>`, `ProxyPass`, balancers, the common `RewriteRule` forms,
//! `.htaccess` files when asked).
//!
//! ```no_run
//! let out = weir_import::import(weir_import::Kind::Nginx, "/etc/nginx/nginx.conf".as_ref(),
//!                               &weir_import::Options::default()).unwrap();
//! print!("{}", out.toml);
//! eprintln!("{}", out.report);
//! ```
//!
//! Every import ends the same way ([`finish`]): environment placeholders
//! reported ([`env`]), access directives marked and, when one could not be
//! kept exactly, every site written to refuse its requests ([`access`]),
//! unless [`Options::allow_open`].
//!
//! Reads the input files only: never writes a file, never validates the
//! output (the binary does that with weir-config), and never writes a
//! weir key for something weir would do differently without saying so.

pub mod access;
pub mod apache;
pub mod caddy;
pub mod env;
pub mod error;
mod glob;
pub mod haproxy;
pub mod htpasswd;
pub mod nginx;
mod regex;
pub mod report;
pub mod toml;

use std::path::{Path, PathBuf};

pub use error::{Error, Origin};
pub use report::{Item, Outcome, Report};

/// The server whose config is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nginx,
    Caddy,
    Haproxy,
    Apache,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nginx => "nginx",
            Kind::Caddy => "caddy",
            Kind::Haproxy => "haproxy",
            Kind::Apache => "apache",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "nginx" => Kind::Nginx,
            "caddy" => Kind::Caddy,
            "haproxy" => Kind::Haproxy,
            "apache" | "apache2" | "httpd" => Kind::Apache,
            _ => return None,
        })
    }
}

/// How files are read.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Absolute paths in the config (includes, htpasswd files) are read
    /// under this directory: a copy of a server's `/etc` elsewhere.
    pub sysroot: Option<PathBuf>,
    /// Apache: read the `.htaccess` files under each DocumentRoot (where
    /// AllowOverride lets Apache read them) into the routes.
    pub htaccess: bool,
    /// Write the sites whose access rules could not be kept exactly as
    /// approximated, instead of refusing their requests.
    pub allow_open: bool,
    /// The variables placeholders expand to; `None`: the process's environment.
    pub env: Option<std::collections::HashMap<String, String>>,
}

/// The weir.toml text and the report.
#[derive(Debug)]
pub struct Imported {
    pub toml: String,
    pub report: Report,
    /// The access directives that could not be kept exactly (`file:line:
    /// directive`); unless `allow_open`, every site of `toml` refuses its requests.
    pub access_lost: Vec<String>,
}

/// A site left with no handler and no route (every one of its locations
/// or routes reported as without equivalent) answers 503 and says why,
/// rather than being dropped or serving something it never did.
fn unserved(tables: &mut [toml::Table]) {
    const HANDLERS: &[&str] = &[
        "root",
        "proxy",
        "php",
        "fastcgi",
        "redirect",
        "respond",
        "app",
        "passthrough",
    ];
    let routed: Vec<String> = tables
        .iter()
        .filter(|t| t.array && t.header.ends_with(".route"))
        .map(|t| t.header.trim_end_matches(".route").to_string())
        .collect();
    for t in tables.iter_mut() {
        if t.array
            || !access::is_site(&t.header)
            || routed.contains(&t.header)
            || t.keys.iter().any(|(k, _)| HANDLERS.contains(&k.as_str()))
        {
            continue;
        }
        t.set(
            "respond",
            toml::V::T(vec![
                ("status".into(), toml::V::I(503)),
                (
                    "body".into(),
                    toml::V::s(
                        "weir import could not carry over what this site serves; see the report\n",
                    ),
                ),
            ]),
        );
        t.comments.push(
            "weir import: nothing this site serves could be carried over (see the report): it answers 503".into(),
        );
    }
}

/// The importers' common end: a config that serves nothing refused, access
/// directives marked, the sites failed closed when one was lost (unless
/// `allow_open`), the file written.
fn finish(
    kind: Kind,
    main: &Path,
    mut head: Vec<String>,
    mut tables: Vec<toml::Table>,
    mut report: Report,
    env: &env::Env,
    opts: &Options,
) -> Result<Imported, Error> {
    if let Some((at, why)) = report.refused.first() {
        return Err(Error::new(
            at.clone(),
            format!("{why} ({} itself refuses this config)", kind.name()),
        ));
    }
    if !tables
        .iter()
        .any(|t| t.header.starts_with("site.") || t.header.starts_with("tcp."))
    {
        let what = match kind {
            Kind::Nginx => "no `server` in `http` or `stream`",
            Kind::Caddy => "no site block",
            Kind::Haproxy => "no frontend or listen section",
            Kind::Apache => "no VirtualHost and no main server with a Listen",
        };
        return Err(Error::new(
            Origin {
                file: main.file_name().map_or_else(
                    || main.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                ),
                line: 1,
                col: 1,
            },
            format!(
                "{what} that weir can serve: this file configures no server that answers requests \
                 (import the main config, which includes it)"
            ),
        ));
    }
    unserved(&mut tables);
    env.report(&mut report);
    access::classify(kind, &mut report);
    let lost = access::not_kept(&report);
    if !lost.is_empty() {
        let mut why = if opts.allow_open {
            "WARNING: written with --allow-open: these access rules are approximated or missing, \
             so the sites below may let through requests the original refused:"
                .to_string()
        } else {
            "REFUSED: every site below answers 403 to every request (`deny` of all addresses), \
             because these access rules could not be kept exactly; fix them by hand and remove \
             the deny, or import again with --allow-open:"
                .to_string()
        };
        for l in &lost {
            why.push_str("\n  ");
            why.push_str(l);
        }
        head.insert(0, why);
        if !opts.allow_open {
            access::fail_closed(&mut tables);
        }
    }
    Ok(Imported {
        toml: toml::write(&head, &tables),
        report,
        access_lost: lost,
    })
}

/// Imports the config of `kind` at `path`.
pub fn import(kind: Kind, path: &Path, opts: &Options) -> Result<Imported, Error> {
    match kind {
        Kind::Nginx => nginx::import(path, opts),
        Kind::Caddy => caddy::import(path, opts),
        Kind::Haproxy => haproxy::import(path, opts),
        Kind::Apache => apache::import(path, opts),
    }
}

/// The kind of config at `path`, from its name, then its first directives.
pub fn guess(path: &Path) -> Option<Kind> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name.starts_with("nginx") {
        return Some(Kind::Nginx);
    }
    if name.starts_with("caddyfile") || name.ends_with(".caddyfile") {
        return Some(Kind::Caddy);
    }
    if name.starts_with("haproxy") {
        return Some(Kind::Haproxy);
    }
    if name.starts_with("apache") || name.starts_with("httpd") {
        return Some(Kind::Apache);
    }
    let text = std::fs::read_to_string(path).ok()?;
    let lines = || {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
    };
    if lines().any(|l| {
        [
            "<VirtualHost",
            "DocumentRoot",
            "<Directory",
            "<IfModule",
            "LoadModule ",
            "ServerRoot",
            "ProxyPass ",
            "RewriteRule ",
        ]
        .iter()
        .any(|p| l.starts_with(p))
    }) {
        return Some(Kind::Apache);
    }
    if lines().any(|l| {
        l == "global"
            || l == "defaults"
            || l.starts_with("defaults ")
            || l.starts_with("frontend ")
            || l.starts_with("backend ")
    }) {
        return Some(Kind::Haproxy);
    }
    if lines().any(|l| {
        l.ends_with(';')
            || l.starts_with("server {")
            || l.starts_with("http {")
            || l.starts_with("location ")
    }) {
        return Some(Kind::Nginx);
    }
    if lines().any(|l| l.ends_with('{')) {
        return Some(Kind::Caddy);
    }
    None
}
