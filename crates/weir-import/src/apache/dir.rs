//! Apache's per-directory settings (`<Directory>`, `<Location>`,
//! `<Files>`, `.htaccess`, and the same directives at server and vhost
//! level) read into one [`Dir`], and `Redirect*`/`RewriteRule` read into
//! weir routes (redirects) or a front controller (`try_files`, `php`).
//!
//! Reads directives; never reads files other than htpasswd files, and
//! never writes a weir key for what weir would do differently unreported.

use super::parse::Directive;
use crate::error::Origin;
use crate::regex::{regex_escape, unsupported_regex};
use crate::report::Report;
use crate::toml::V;

/// One key of a weir table.
pub type Key = (String, V);

/// A route to write: where it came from, its path match, its keys.
#[derive(Debug, Clone)]
pub struct Unit {
    pub comment: String,
    pub pattern: Option<Key>,
    pub keys: Vec<Key>,
}

/// Who may come in (`Require`, or `Allow`/`Deny` of mod_access_compat).
#[derive(Debug, Clone, PartialEq)]
pub enum Access {
    All,
    Nobody,
    Ips(Vec<String>),
    ValidUser(Option<Vec<String>>),
}

/// A `Header`/`RequestHeader` rule weir can write.
#[derive(Debug, Clone)]
pub struct HeaderRule {
    /// `set`, `add` or `remove`.
    pub op: &'static str,
    pub name: String,
    pub value: String,
    pub request: bool,
}

/// The front controller a rewrite set makes (`RewriteCond !-f` + `RewriteRule . /index.php`).
#[derive(Debug, Clone)]
pub struct Front {
    pub target: String,
    /// `!-d` among the conditions: a directory is served before it.
    pub dirs: bool,
    pub at: Origin,
}

/// The settings of one scope.
#[derive(Debug, Clone, Default)]
pub struct Dir {
    pub browse: Option<bool>,
    pub index: Option<Vec<String>>,
    pub access: Option<(Access, Origin)>,
    pub auth_name: Option<String>,
    pub auth_basic: bool,
    pub auth_file: Option<(String, Origin)>,
    pub headers: Vec<HeaderRule>,
    pub errors: Vec<(u16, String)>,
    /// `ExpiresDefault` as a max-age in seconds.
    pub expires: Option<u64>,
    pub expires_on: bool,
    /// `ExpiresByType`: (type, seconds).
    pub expires_by_type: Vec<(String, u64, Origin)>,
    /// `AddOutputFilterByType DEFLATE` types.
    pub deflate: Vec<String>,
    /// `SetHandler proxy:fcgi://…` for `.php` files: the FastCGI address.
    pub php: Option<(String, Origin)>,
    /// `AllowOverride`: which `.htaccess` directive classes count.
    pub allow_override: Option<Vec<String>>,
    /// `<Files>`/`<FilesMatch>` with `Require all denied`: path regexes answered 403.
    pub denied_files: Vec<(String, Origin)>,
    /// Redirects in order (`Redirect*`, `RewriteRule … [R]`).
    pub redirects: Vec<Unit>,
    pub front: Option<Front>,
}

impl Dir {
    /// `self` with `child`'s settings over it (Apache's merge).
    pub fn merged(&self, child: &Dir) -> Dir {
        let mut d = self.clone();
        macro_rules! over {
            ($($f:ident),*) => { $( if child.$f.is_some() { d.$f = child.$f.clone(); } )* };
        }
        over!(
            browse,
            index,
            access,
            auth_name,
            auth_file,
            expires,
            php,
            allow_override,
            front
        );
        d.auth_basic |= child.auth_basic;
        d.expires_on |= child.expires_on;
        d.headers.extend(child.headers.iter().cloned());
        d.errors.extend(child.errors.iter().cloned());
        d.expires_by_type
            .extend(child.expires_by_type.iter().cloned());
        d.deflate.extend(child.deflate.iter().cloned());
        d.redirects.extend(child.redirects.iter().cloned());
        d.denied_files.extend(child.denied_files.iter().cloned());
        d
    }
}

/// Stands for `{scheme}://{host}[:port]` in a redirect target until the
/// site's port is known ([`Scope::origin`]).
pub const ORIGIN: &str = "\u{1}";

/// Where the directives of a scope apply.
pub struct Scope<'a> {
    /// The URL path this scope's relative rewrite patterns start from
    /// (`/` for a DocumentRoot's `.htaccess`, `/blog/` under it), or
    /// `None` at server and vhost level, where patterns see the whole path.
    pub per_dir: Option<&'a str>,
    /// `{scheme}://{host}[:port]`: Apache makes a local redirect target absolute with it.
    pub origin: &'a str,
    pub server_name: &'a str,
    /// In a `.htaccess`: the `AllowOverride` classes in force.
    pub overrides: Option<&'a [String]>,
}

/// The `AllowOverride` class of a directive in a `.htaccess`.
fn override_class(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "authtype" | "authname" | "authuserfile" | "authgroupfile" | "require"
        | "authbasicprovider" => "authconfig",
        "directoryindex" | "expiresactive" | "expiresdefault" | "expiresbytype" => "indexes",
        "order" | "allow" | "deny" | "satisfy" => "limit",
        "options" => "options",
        _ => "fileinfo",
    }
}

/// Reads one directive of a per-directory scope; `false` when it is not one.
pub fn directive(
    d: &Directive,
    dir: &mut Dir,
    sc: &Scope<'_>,
    rewrites: &mut Vec<Directive>,
    report: &mut Report,
) -> bool {
    if let Some(allowed) = sc.overrides {
        let class = override_class(&d.name);
        if !allowed.iter().any(|a| a == "all" || a == class) {
            report.none(&d.at, d.text(), format!("AllowOverride does not allow {class} here: Apache answers 500 for every request under this directory; left out"));
            return true;
        }
    }
    let lname = d.name.to_ascii_lowercase();
    match lname.as_str() {
        "options" => {
            for o in &d.args {
                let (sign, name) = match o.as_bytes().first() {
                    Some(b'+') => (Some(true), &o[1..]),
                    Some(b'-') => (Some(false), &o[1..]),
                    _ => (None, o.as_str()),
                };
                match name.to_ascii_lowercase().as_str() {
                    "indexes" => dir.browse = Some(sign != Some(false)),
                    "all" => dir.browse = Some(true),
                    "none" => dir.browse = Some(false),
                    _ => {}
                }
            }
            if sign_free_reset(d) && !d.args.iter().any(|o| o.eq_ignore_ascii_case("indexes")) {
                dir.browse = Some(false);
            }
            let rest: Vec<&String> = d
                .args
                .iter()
                .filter(|o| {
                    let n = o.trim_start_matches(['+', '-']).to_ascii_lowercase();
                    !matches!(n.as_str(), "indexes" | "none" | "followsymlinks" | "symlinksifownermatch")
                        && !o.starts_with('-')
                })
                .collect();
            if d.args.iter().any(|o| o.trim_start_matches('+').eq_ignore_ascii_case("indexes")) {
                report.approx(&d.at, d.text(), "browse = true", "weir's directory listing has its own format (HTML, or JSON on request), not mod_autoindex's");
            } else if rest.is_empty() {
                report.mapped(&d.at, d.text(), "weir's static defaults (symlinks inside the root are followed)");
            } else {
                report.none(&d.at, d.text(), format!("weir has no {}: CGI, server-side includes and content negotiation are not built in", rest.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
            }
        }
        "allowoverride" => {
            let list: Vec<String> = d
                .args
                .iter()
                .map(|a| a.split('=').next().unwrap_or(a).to_ascii_lowercase())
                .collect();
            dir.allow_override = Some(if list == ["none"] { Vec::new() } else { list });
            report.mapped(&d.at, d.text(), "which .htaccess directives --htaccess reads");
        }
        "allowoverridelist" => {
            report.mapped(&d.at, d.text(), "which .htaccess directives --htaccess reads")
        }
        "require" => require(d, dir, report),
        "order" | "satisfy" => report.approx(
            &d.at,
            d.text(),
            "allow/deny",
            "mod_access_compat's order: weir checks deny, then allow",
        ),
        "allow" | "deny" => {
            let allow = lname == "allow";
            let from: Vec<String> = d.args.iter().skip(1).cloned().collect();
            let acc = if from.iter().any(|f| f.eq_ignore_ascii_case("all")) {
                if allow { Access::All } else { Access::Nobody }
            } else if allow {
                Access::Ips(from.iter().map(|a| cidr(a)).collect())
            } else {
                report.none(&d.at, d.text(), "weir's deny lists are written as `deny = [...]` by hand: a partial Deny from is not carried over");
                return true;
            };
            dir.access = Some((acc, d.at.clone()));
            report.approx(&d.at, d.text(), "allow/deny", "mod_access_compat, read as Require");
        }
        "authtype" => {
            if d.arg(0).eq_ignore_ascii_case("basic") {
                dir.auth_basic = true;
                report.mapped(&d.at, d.text(), "basic_auth");
            } else if d.arg(0).eq_ignore_ascii_case("none") {
                dir.auth_basic = false;
                report.mapped(&d.at, d.text(), "no basic_auth");
            } else {
                report.none(&d.at, d.text(), "weir checks Basic authentication only (or `forward_auth` to a service of your own)");
            }
        }
        "authname" => {
            dir.auth_name = Some(d.arg(0).to_string());
            report.mapped(&d.at, d.text(), "basic_auth realm");
        }
        "authuserfile" => {
            dir.auth_file = Some((d.arg(0).to_string(), d.at.clone()));
            report.mapped(&d.at, d.text(), "basic_auth users");
        }
        "authbasicprovider" if d.arg(0) == "file" => {
            report.mapped(&d.at, d.text(), "basic_auth users")
        }
        "header" | "requestheader" => header(d, dir, report),
        "errordocument" => {
            let code = d.arg(0).parse::<u16>().unwrap_or(0);
            let target = d.arg(1);
            if code >= 400 && target.starts_with('/') && !target.contains(['?', '$']) {
                dir.errors.push((code, target.to_string()));
                report.approx(&d.at, d.text(), format!("errors {code}"), "the page is read once at start-up from under the DocumentRoot, and sent with the error status (Apache serves it as a request of its own)");
            } else {
                report.none(&d.at, d.text(), "weir's error pages are files: a text message or a URL to redirect to has no equivalent");
            }
        }
        "directoryindex" => {
            if d.arg(0).eq_ignore_ascii_case("disabled") {
                dir.index = Some(Vec::new());
            } else {
                dir.index = Some(d.args.clone());
            }
            report.mapped(&d.at, d.text(), "index");
        }
        "expiresactive" => {
            dir.expires_on = d.arg(0).eq_ignore_ascii_case("on");
            report.mapped(&d.at, d.text(), "Cache-Control");
        }
        "expiresdefault" => match expires_secs(&d.args) {
            Some(s) => {
                dir.expires = Some(s);
                report.approx(&d.at, d.text(), "response_headers set Cache-Control", "weir sends `Cache-Control: max-age=N` without an `Expires` field, on every answer of the scope");
            }
            None => report.none(&d.at, d.text(), "only `access plus N units` has a weir equivalent (a fixed max-age)"),
        },
        "expiresbytype" => match expires_secs(&d.args[1..]) {
            Some(s) if !extensions(d.arg(0)).is_empty() => {
                dir.expires_by_type.push((d.arg(0).to_ascii_lowercase(), s, d.at.clone()));
                report.approx(&d.at, d.text(), "a route by extension with Cache-Control", "chosen by the path's extension, not the answer's type; weir sends `Cache-Control: max-age=N` without `Expires`");
            }
            _ => report.none(&d.at, d.text(), "weir sets fields by path, not by the answer's type: write a route whose path_regex names the type's extensions, with response_headers"),
        },
        "addoutputfilterbytype" => {
            if d.arg(0).eq_ignore_ascii_case("deflate") {
                dir.deflate.extend(d.args[1..].iter().map(|t| t.to_ascii_lowercase()));
                report.approx(&d.at, d.text(), "compress", "weir also compresses with gzip only for these types, and adds `Vary: Accept-Encoding`; it keeps a strong ETag weak (W/) where Apache appends -gzip");
            } else {
                report.none(&d.at, d.text(), "weir has no output filters but compression");
            }
        }
        "sethandler" | "addhandler" => {
            let h = d.arg(0);
            if let Some(addr) = fcgi_handler(h) {
                dir.php = Some((addr, d.at.clone()));
                report.mapped(&d.at, d.text(), "php");
            } else if h.eq_ignore_ascii_case("none") {
                report.mapped(&d.at, d.text(), "static files");
            } else {
                report.none(&d.at, d.text(), format!("weir has no `{h}` handler"));
            }
        }
        "rewriteengine" | "rewritecond" | "rewriterule" | "rewritebase" | "rewriteoptions" => {
            rewrites.push(d.clone());
        }
        "redirect" | "redirectpermanent" | "redirecttemp" | "redirectmatch" => {
            if let Some(u) = redirect(d, sc, report) {
                dir.redirects.push(u);
            }
        }
        "adddefaultcharset" => {
            if d.arg(0).eq_ignore_ascii_case("off") {
                report.approx(&d.at, d.text(), "static files", "weir adds `; charset=utf-8` to textual types");
            } else {
                report.approx(&d.at, d.text(), "static files", "weir adds `; charset=utf-8` to textual types (not to every answer)");
            }
        }
        "setenvif" | "setenvifnocase" if d.arg(0).trim_start_matches('^').trim_end_matches('$').eq_ignore_ascii_case("authorization") => {
            report.mapped(&d.at, d.text(), "none needed: weir passes every request field to PHP as HTTP_*")
        }
        "php_value" | "php_flag" | "php_admin_value" | "php_admin_flag" => report.none(
            &d.at,
            d.text(),
            "mod_php settings go in PHP-FPM's pool (`php_admin_value[name] = value`) or php.ini",
        ),
        "addcharset" | "addlanguage" | "languagepriority" | "forcelanguagepriority" => {
            report.mapped(&d.at, d.text(), "none needed: weir has no content negotiation (MultiViews)")
        }
        "addtype" | "addencoding" | "defaulttype"
        | "forcetype" | "removetype" => report.approx(
            &d.at,
            d.text(),
            "weir's MIME types",
            "weir names types from its own built-in table",
        ),
        _ => return false,
    }
    true
}

/// `Options` without +/- replaces the set (Indexes off unless named).
fn sign_free_reset(d: &Directive) -> bool {
    d.args.iter().any(|o| !o.starts_with(['+', '-']))
}

fn require(d: &Directive, dir: &mut Dir, report: &mut Report) {
    let (neg, args) = if d.arg(0).eq_ignore_ascii_case("not") {
        (true, &d.args[1..])
    } else {
        (false, &d.args[..])
    };
    let kind = args.first().map_or("", String::as_str).to_ascii_lowercase();
    if neg {
        report.none(
            &d.at,
            d.text(),
            "weir's `deny` lists addresses: write `deny = [...]` by hand",
        );
        return;
    }
    let acc = match kind.as_str() {
        "all"
            if args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case("granted")) =>
        {
            Access::All
        }
        "all" => Access::Nobody,
        "ip" => Access::Ips(args[1..].iter().map(|a| cidr(a)).collect()),
        "local" => Access::Ips(vec!["127.0.0.0/8".into(), "::1".into()]),
        "valid-user" => Access::ValidUser(None),
        "user" => Access::ValidUser(Some(args[1..].to_vec())),
        _ => {
            report.none(
                &d.at,
                d.text(),
                "weir allows by address or Basic authentication only",
            );
            return;
        }
    };
    // Several Require lines outside a container are RequireAny.
    if let Some((prev, _)) = &dir.access
        && *prev != acc
        && !matches!(prev, Access::All | Access::Nobody)
        && !matches!(acc, Access::All | Access::Nobody)
    {
        report.approx(
            &d.at,
            d.text(),
            "allow and basic_auth",
            "Apache lets in who passes any of the Require lines; weir asks for all of them",
        );
        if let (Access::Ips(a), Access::Ips(b)) = (prev, &acc) {
            let mut all = a.clone();
            all.extend(b.iter().cloned());
            dir.access = Some((Access::Ips(all), d.at.clone()));
            return;
        }
    } else {
        report.mapped(&d.at, d.text(), "allow/deny/basic_auth");
    }
    if matches!(acc, Access::ValidUser(_)) {
        dir.auth_basic = true;
    }
    dir.access = Some((acc, d.at.clone()));
}

/// Apache's partial addresses (`10.1`) as CIDRs.
fn cidr(a: &str) -> String {
    if a.contains('/') || a.contains(':') {
        return a.to_string();
    }
    let parts: Vec<&str> = a.split('.').filter(|p| !p.is_empty()).collect();
    if parts.len() < 4 && parts.iter().all(|p| p.parse::<u8>().is_ok()) {
        let mut full: Vec<&str> = parts.clone();
        while full.len() < 4 {
            full.push("0");
        }
        return format!("{}/{}", full.join("."), parts.len() * 8);
    }
    a.to_string()
}

fn header(d: &Directive, dir: &mut Dir, report: &mut Report) {
    let request = d.is("RequestHeader");
    let mut args: Vec<&str> = d.args.iter().map(String::as_str).collect();
    let mut always = false;
    if matches!(
        args.first().map(|a| a.to_ascii_lowercase()).as_deref(),
        Some("always" | "onsuccess")
    ) {
        always = args[0].eq_ignore_ascii_case("always");
        args.remove(0);
    }
    let action = args
        .first()
        .map_or(String::new(), |a| a.to_ascii_lowercase());
    let mut name = args.get(1).copied().unwrap_or("").to_string();
    let value = args.get(2).copied().unwrap_or("").to_string();
    let extra = args.get(3).copied();
    if let Some(n) = name.strip_suffix(':') {
        // `Header set Name: value`, a common slip: no field name holds a colon.
        report.approx(
            &d.at,
            d.text(),
            "response_headers",
            format!("written as the field `{n}`; the colon cannot be part of a field name"),
        );
        name = n.to_string();
    }
    let op = match action.as_str() {
        "set" | "setifempty" => "set",
        "append" | "add" | "merge" => "add",
        "unset" => "remove",
        _ => {
            report.none(
                &d.at,
                d.text(),
                format!("weir's header rules set, add and remove; `{action}` has no equivalent"),
            );
            return;
        }
    };
    if extra.is_some_and(|e| !e.eq_ignore_ascii_case("early"))
        || (op != "remove" && extra.is_some())
    {
        report.none(&d.at, d.text(), "weir's header rules have no conditions (env=, expr=): write a route with `match` by hand");
        return;
    }
    if value.contains('%') {
        report.none(
            &d.at,
            d.text(),
            "weir's header values have no %{…} format specifiers",
        );
        return;
    }
    dir.headers.push(HeaderRule {
        op,
        name,
        value,
        request,
    });
    let to = if request {
        "request_headers"
    } else {
        "response_headers"
    };
    if request {
        report.mapped(&d.at, d.text(), format!("{to} {op}"));
    } else if action == "merge" || action == "setifempty" {
        report.approx(
            &d.at,
            d.text(),
            format!("{to} {op}"),
            format!("weir has no `{action}`: the value is added as it is"),
        );
    } else if !always && op != "remove" {
        report.approx(&d.at, d.text(), format!("{to} {op}"), "weir writes it on every answer; Apache without `always` leaves it off its own error answers");
    } else {
        report.mapped(&d.at, d.text(), format!("{to} {op}"));
    }
}

/// `proxy:fcgi://127.0.0.1:9000` or `proxy:unix:/run/php.sock|fcgi://localhost` as weir's php address.
pub fn fcgi_handler(h: &str) -> Option<String> {
    let rest = h.strip_prefix("proxy:")?;
    if let Some(u) = rest.strip_prefix("unix:") {
        let (sock, after) = u.split_once('|')?;
        after.starts_with("fcgi://").then(|| format!("unix:{sock}"))
    } else {
        let hp = rest.strip_prefix("fcgi://")?;
        let hp = hp.split('/').next().unwrap_or(hp);
        Some(if hp.contains(':') {
            hp.to_string()
        } else {
            format!("{hp}:8000")
        })
    }
}

/// `access plus 1 month 2 days` (or `A2592000`) in seconds.
fn expires_secs(args: &[String]) -> Option<u64> {
    let words: Vec<String> = args
        .iter()
        .flat_map(|a| {
            a.split_whitespace()
                .map(str::to_ascii_lowercase)
                .collect::<Vec<_>>()
        })
        .collect();
    if words.len() == 1 {
        return words[0].strip_prefix('a').and_then(|n| n.parse().ok());
    }
    if !matches!(words.first().map(String::as_str), Some("access" | "now")) {
        return None;
    }
    let mut i = 1;
    if words.get(1).map(String::as_str) == Some("plus") {
        i = 2;
    }
    let mut total = 0u64;
    while i + 1 < words.len() + 1 && i < words.len() {
        let n: u64 = words[i].parse().ok()?;
        let unit = words.get(i + 1)?;
        let mul = match unit.trim_end_matches('s') {
            "year" => 31_536_000,
            "month" => 2_592_000,
            "week" => 604_800,
            "day" => 86_400,
            "hour" => 3_600,
            "minute" => 60,
            "second" => 1,
            _ => return None,
        };
        total += n * mul;
        i += 2;
    }
    Some(total)
}

/// The extensions weir can tell a MIME type by.
pub fn extensions(t: &str) -> &'static [&'static str] {
    match t.to_ascii_lowercase().as_str() {
        "image/jpeg" | "image/jpg" => &["jpg", "jpeg"],
        "image/png" => &["png"],
        "image/gif" => &["gif"],
        "image/webp" => &["webp"],
        "image/avif" => &["avif"],
        "image/svg+xml" => &["svg"],
        "image/x-icon" | "image/vnd.microsoft.icon" => &["ico"],
        "text/css" => &["css"],
        "text/javascript" | "application/javascript" | "application/x-javascript" => &["js"],
        "text/html" => &["html", "htm"],
        "application/json" => &["json"],
        "application/pdf" => &["pdf"],
        "font/woff" | "application/font-woff" => &["woff"],
        "font/woff2" => &["woff2"],
        "video/mp4" => &["mp4"],
        _ => &[],
    }
}

/// Apache's `$1`, `%{HTTP_HOST}`… in a redirect target as weir placeholders.
fn target(s: &str, server_name: &str) -> Result<String, String> {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' || c == b'}' {
            return Err(format!("the literal `{}`", c as char));
        }
        if c == b'$' && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
            if b[i + 1] == b'0' {
                return Err("`$0`".into());
            }
            out.push('{');
            out.push(b[i + 1] as char);
            out.push('}');
            i += 2;
            continue;
        }
        if c == b'%' && i + 1 < b.len() && b[i + 1] == b'{' {
            let end = s[i..].find('}').ok_or("`%{` without `}`")? + i;
            let var = &s[i + 2..end];
            match var.to_ascii_uppercase().as_str() {
                "HTTP_HOST" => out.push_str("{host}"),
                "SERVER_NAME" if !server_name.is_empty() => out.push_str(server_name),
                "SERVER_NAME" => out.push_str("{host}"),
                "REQUEST_URI" => out.push_str("{path}"),
                "QUERY_STRING" => out.push_str("{query}"),
                "REQUEST_SCHEME" => out.push_str("{scheme}"),
                "REMOTE_ADDR" => out.push_str("{client_ip}"),
                "REQUEST_METHOD" => out.push_str("{method}"),
                _ => return Err(format!("`%{{{var}}}`")),
            }
            i = end + 1;
            continue;
        }
        if c == b'%' && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
            return Err(format!(
                "the condition's back-reference `%{}`",
                b[i + 1] as char
            ));
        }
        let start = i;
        i += 1;
        while i < b.len() && !matches!(b[i], b'$' | b'%' | b'{' | b'}') {
            i += 1;
        }
        out.push_str(&s[start..i]);
    }
    Ok(out)
}

/// `Redirect [status] URL-path URL`, `RedirectMatch [status] regex URL`,
/// `RedirectPermanent`, `RedirectTemp` as a route.
fn redirect(d: &Directive, sc: &Scope<'_>, report: &mut Report) -> Option<Unit> {
    let mut args: Vec<&str> = d.args.iter().map(String::as_str).collect();
    let mut status = match d.name.to_ascii_lowercase().as_str() {
        "redirectpermanent" => 301,
        _ => 302,
    };
    if let Some(first) = args.first() {
        let s = match first.to_ascii_lowercase().as_str() {
            "permanent" => Some(301),
            "temp" => Some(302),
            "seeother" => Some(303),
            "gone" => Some(410),
            n => n.parse::<u16>().ok(),
        };
        if let Some(s) = s {
            status = s;
            args.remove(0);
        }
    }
    let is_match = d.is("RedirectMatch");
    let (from, to) = (args.first().copied().unwrap_or(""), args.get(1).copied());
    // In a <Location>/<Directory>/.htaccess, Redirect takes the scope's path.
    let from_path = match sc.per_dir {
        Some(base) if !is_match && to.is_none() => base.trim_end_matches('/').to_string(),
        _ => from.to_string(),
    };
    let to = if to.is_none() && sc.per_dir.is_some() {
        Some(from)
    } else {
        to
    };
    let comment = format!("{}:{} {}", d.at.file, d.at.line, d.text());
    let pattern = if is_match {
        if let Some(why) = unsupported_regex(from) {
            report.none(&d.at, d.text(), format!("weir's regexes have no {why}"));
            return None;
        }
        ("path_regex".to_string(), V::s(from))
    } else if from_path == "/" || from_path.is_empty() {
        ("path_regex".to_string(), V::s("^(/.*)$"))
    } else {
        // Whole segments: `/old` takes `/old` and `/old/…`, not `/older`.
        (
            "path_regex".to_string(),
            V::S(format!(
                "^{}(/.*)?$",
                regex_escape(from_path.trim_end_matches('/'))
            )),
        )
    };
    if status == 410 || (to.is_none() && !(300..400).contains(&status)) {
        report.mapped(&d.at, d.text(), format!("route respond = {status}"));
        return Some(Unit {
            comment,
            pattern: Some(pattern),
            keys: vec![("respond".into(), V::I(status as i64))],
        });
    }
    let Some(to) = to else {
        report.none(&d.at, d.text(), "a redirect without a target");
        return None;
    };
    if !matches!(status, 301 | 302 | 303 | 307 | 308) {
        report.none(
            &d.at,
            d.text(),
            format!("weir redirects with 301, 302, 303, 307 or 308, not {status}"),
        );
        return None;
    }
    let mut url = if is_match {
        match target(to, sc.server_name) {
            Ok(u) => u,
            Err(why) => {
                report.none(&d.at, d.text(), format!("{why} has no weir placeholder"));
                return None;
            }
        }
    } else {
        let base = to.trim_end_matches('/');
        if from_path == "/" {
            format!("{base}{{1}}")
        } else if to.ends_with('/') && !from.ends_with('/') {
            // `Redirect /a http://x/b/`: `/a/c` → `http://x/b//c`, as Apache.
            format!("{to}{{1}}")
        } else {
            format!("{base}{{1}}")
        }
    };
    // The request's query goes along (mod_alias appends it).
    if !url.contains('?') {
        url.push_str("{?query}");
    }
    if url.starts_with('/') {
        url = format!("{}{url}", sc.origin);
    }
    report.mapped(&d.at, d.text(), "route path_regex + redirect");
    Some(Unit {
        comment,
        pattern: Some(pattern),
        keys: vec![(
            "redirect".into(),
            V::T(vec![
                ("to".into(), V::S(url)),
                ("status".into(), V::I(status as i64)),
            ]),
        )],
    })
}

/// A `<Files>` name or `<FilesMatch>` regex (on a file's name) as a
/// regex on the whole path.
pub fn files_regex(pattern: &str, is_regex: bool) -> String {
    if !is_regex {
        let mut o = String::from("/");
        for c in pattern.chars() {
            match c {
                '*' => o.push_str("[^/]*"),
                '?' => o.push_str("[^/]"),
                c => o.push_str(&regex_escape(&c.to_string())),
            }
        }
        o.push('$');
        return o;
    }
    let mut o = match pattern.strip_prefix('^') {
        Some(rest) => format!("/{rest}"),
        None => pattern.to_string(),
    };
    if !o.ends_with('$') {
        o.push_str("[^/]*$");
    }
    o
}

/// One `RewriteCond` as read.
struct Cond {
    var: String,
    pattern: String,
    or: bool,
    text: String,
    at: Origin,
}

/// A rewrite condition weir can check: `match` entries, or a file test.
enum CondKind {
    NotFile,
    NotDir,
    /// `%{HTTPS} off`: plain HTTP only.
    Http,
    Host(String),
    /// `%{HTTP:Authorization} .`: always true for what weir passes on.
    Present,
}

fn cond_kind(c: &Cond) -> Option<CondKind> {
    let var = c.var.to_ascii_uppercase();
    let p = c.pattern.as_str();
    match var.as_str() {
        "%{REQUEST_FILENAME}" | "%{DOCUMENT_ROOT}%{REQUEST_URI}" | "%{SCRIPT_FILENAME}" => {
            match p {
                "!-f" => Some(CondKind::NotFile),
                "!-d" => Some(CondKind::NotDir),
                _ => None,
            }
        }
        "%{HTTPS}" => match p.to_ascii_lowercase().as_str() {
            "off" | "!on" | "!=on" | "^off$" | "!^on$" => Some(CondKind::Http),
            _ => None,
        },
        "%{SERVER_PORT}" if matches!(p, "80" | "^80$" | "=80") => Some(CondKind::Http),
        "%{REQUEST_SCHEME}" if matches!(p, "http" | "^http$" | "=http" | "!https") => {
            Some(CondKind::Http)
        }
        "%{HTTP_HOST}" => {
            let h = p.trim_start_matches('^').trim_end_matches('$');
            let plain = h.replace("\\.", ".");
            if !p.starts_with('!') && !plain.contains(['*', '(', '[', '|', '?', '+', '\\']) {
                Some(CondKind::Host(plain))
            } else {
                None
            }
        }
        v if v.starts_with("%{HTTP:") && p == "." => Some(CondKind::Present),
        _ => None,
    }
}

/// A `RewriteRule`'s pattern as a weir path regex, for the scope.
fn rule_regex(pattern: &str, per_dir: Option<&str>, nocase: bool) -> String {
    let ci = if nocase { "(?i)" } else { "" };
    match per_dir {
        None => format!("{ci}{pattern}"),
        Some(base) => {
            let base = regex_escape(base);
            if let Some(rest) = pattern.strip_prefix('^') {
                format!("{ci}^{base}{rest}")
            } else {
                format!("{ci}^{base}.*?{pattern}")
            }
        }
    }
}

/// The rewrite directives of one scope, in order: redirects as routes
/// (with the conditions weir can check as `match`), the front-controller
/// pattern as [`Front`]; the rest reported.
pub fn rewrites(list: &[Directive], dir: &mut Dir, sc: &Scope<'_>, report: &mut Report) {
    let mut on = false;
    let mut conds: Vec<Cond> = Vec::new();
    let mut base: Option<String> = None;
    for d in list {
        match d.name.to_ascii_lowercase().as_str() {
            "rewriteengine" => {
                on = d.arg(0).eq_ignore_ascii_case("on");
                report.mapped(&d.at, d.text(), "the rules below");
            }
            "rewritebase" => {
                base = Some(d.arg(0).to_string());
                report.mapped(&d.at, d.text(), "the rules' targets");
            }
            "rewriteoptions" => {
                report.none(&d.at, d.text(), "weir has no rule inheritance options")
            }
            "rewritecond" => {
                let flags = d.arg(2).to_ascii_lowercase();
                conds.push(Cond {
                    var: d.arg(0).to_string(),
                    pattern: d.arg(1).to_string(),
                    or: flags.contains("or"),
                    text: d.text(),
                    at: d.at.clone(),
                });
            }
            _ => {
                let cs = std::mem::take(&mut conds);
                if !on {
                    report.mapped(&d.at, d.text(), "nothing: RewriteEngine is off here");
                    continue;
                }
                rule(d, &cs, dir, sc, base.as_deref(), report);
            }
        }
    }
}

fn rule(
    d: &Directive,
    conds: &[Cond],
    dir: &mut Dir,
    sc: &Scope<'_>,
    base: Option<&str>,
    report: &mut Report,
) {
    let (pat, subst) = (d.arg(0), d.arg(1));
    let flags: Vec<String> = d
        .arg(2)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .filter(|f| !f.is_empty())
        .collect();
    let has = |f: &str| {
        flags
            .iter()
            .any(|x| x == f || x.starts_with(&format!("{f}=")))
    };
    let nocase = has("nc") || has("nocase");
    let kinds: Vec<Option<CondKind>> = conds.iter().map(cond_kind).collect();
    if conds.iter().any(|c| c.or) {
        for c in conds {
            report.none(
                &c.at,
                c.text.clone(),
                "weir's route conditions all hold together: [OR] has no equivalent",
            );
        }
        report.none(&d.at, d.text(), "its conditions are joined by [OR]");
        return;
    }
    // `RewriteRule .* - [E=HTTP_AUTHORIZATION:%{HTTP:Authorization}]`.
    if subst == "-"
        && flags.iter().all(|f| {
            f.starts_with("e=http_authorization")
                || f.starts_with("e=http_x_xsrf_token")
                || f == "l"
        })
        && flags.iter().any(|f| f.starts_with("e="))
    {
        for c in conds {
            report.mapped(&c.at, c.text.clone(), "none needed");
        }
        report.mapped(
            &d.at,
            d.text(),
            "none needed: weir passes every request field to PHP as HTTP_*",
        );
        return;
    }
    // `RewriteRule ^index\.php$ - [L]`: the script itself is never rewritten.
    if subst == "-" && flags.iter().all(|f| f == "l" || f == "end") && conds.is_empty() {
        report.mapped(
            &d.at,
            d.text(),
            "none needed: an existing script runs as it is",
        );
        return;
    }
    if has("f") || has("forbidden") || has("g") || has("gone") {
        if !conds.is_empty() {
            report.none(
                &d.at,
                d.text(),
                "a refusal under conditions: write a route with `match` by hand",
            );
            return;
        }
        let status = if has("f") || has("forbidden") {
            403
        } else {
            410
        };
        report.mapped(&d.at, d.text(), format!("route respond = {status}"));
        dir.redirects.push(Unit {
            comment: format!("{}:{} {}", d.at.file, d.at.line, d.text()),
            pattern: Some((
                "path_regex".into(),
                V::S(rule_regex(pat, sc.per_dir, nocase)),
            )),
            keys: vec![("respond".into(), V::I(status))],
        });
        return;
    }
    let redirect = has("r")
        || has("redirect")
        || subst.starts_with("http://")
        || subst.starts_with("https://");
    if redirect {
        let mut m: Vec<Key> = Vec::new();
        for (c, k) in conds.iter().zip(&kinds) {
            match k {
                Some(CondKind::Http) => m.push(("protocol".into(), V::s("http"))),
                Some(CondKind::Host(h)) => m.push(("host".into(), V::s(h.clone()))),
                _ => {
                    report.none(&c.at, c.text.clone(), "weir's routes match on method, host, header, query, client and protocol: this condition has no equivalent");
                    report.none(
                        &d.at,
                        d.text(),
                        "a condition it depends on has no weir equivalent: left out",
                    );
                    return;
                }
            }
        }
        let status = flags
            .iter()
            .find_map(|f| f.strip_prefix("r=").or_else(|| f.strip_prefix("redirect=")))
            .map(|s| match s {
                "permanent" => 301,
                "temp" => 302,
                "seeother" => 303,
                n => n.parse().unwrap_or(302),
            })
            .unwrap_or(302);
        if !matches!(status, 301 | 302 | 303 | 307 | 308) {
            report.none(
                &d.at,
                d.text(),
                format!("weir redirects with 301, 302, 303, 307 or 308, not {status}"),
            );
            return;
        }
        if let Some(why) = unsupported_regex(pat) {
            report.none(&d.at, d.text(), format!("weir's regexes have no {why}"));
            return;
        }
        let mut url = match target(subst, sc.server_name) {
            Ok(u) => u,
            Err(why) => {
                report.none(&d.at, d.text(), format!("{why} has no weir placeholder"));
                return;
            }
        };
        // Per-directory: a relative target starts from RewriteBase (or the directory).
        if !url.starts_with('/') && !url.contains("://") && !url.starts_with('{') {
            let b = base.or(sc.per_dir).unwrap_or("/");
            url = format!("{}/{url}", b.trim_end_matches('/'));
        }
        // The query goes along unless the target has its own (QSA: both) or QSD.
        if !has("qsd") {
            if !url.contains('?') {
                url.push_str("{?query}");
            } else if has("qsa") {
                url.push_str("&{query}");
                report.approx(
                    &d.at,
                    d.text(),
                    "redirect",
                    "weir writes `&` even when the request had no query",
                );
            }
        }
        if url.starts_with('/') {
            url = format!("{}{url}", sc.origin);
        }
        for c in conds {
            report.mapped(&c.at, c.text.clone(), "route match");
        }
        report.mapped(&d.at, d.text(), "route path_regex + redirect");
        let mut keys = Vec::new();
        if !m.is_empty() {
            keys.push(("match".into(), V::T(m)));
        }
        keys.push((
            "redirect".into(),
            V::T(vec![
                ("to".into(), V::S(url)),
                ("status".into(), V::I(status)),
            ]),
        ));
        let re = rule_regex(pat, sc.per_dir, nocase);
        let pattern = if matches!(
            re.as_str(),
            "^" | "^(.*)$" | ".*" | "^.*$" | "^/?(.*)$" | "(.*)"
        ) && !re.contains('(')
        {
            None
        } else {
            Some(("path_regex".to_string(), V::S(re)))
        };
        dir.redirects.push(Unit {
            comment: format!("{}:{} {}", d.at.file, d.at.line, d.text()),
            pattern,
            keys,
        });
        return;
    }
    // The front controller: every path that names no file (nor directory) goes to one script.
    let file_tests: Vec<&CondKind> = kinds.iter().flatten().collect();
    let only_files = kinds
        .iter()
        .all(|k| matches!(k, Some(CondKind::NotFile | CondKind::NotDir)));
    let catch_all = matches!(
        pat,
        "." | "^" | "^(.*)$" | "^.*$" | "(.*)" | ".*" | "^/?(.*)$" | "^(.+)$" | "^/(.*)$"
    );
    if only_files
        && file_tests.iter().any(|k| matches!(k, CondKind::NotFile))
        && catch_all
        && !subst.contains('$')
    {
        let mut t = subst.split('?').next().unwrap_or(subst).to_string();
        if !t.starts_with('/') {
            let b = base.or(sc.per_dir).unwrap_or("/");
            t = format!("{}/{t}", b.trim_end_matches('/'));
        }
        let dirs = file_tests.iter().any(|k| matches!(k, CondKind::NotDir));
        for c in conds {
            report.mapped(&c.at, c.text.clone(), "try_files");
        }
        report.mapped(&d.at, d.text(), format!("front controller {t}"));
        dir.front = Some(Front {
            target: t,
            dirs,
            at: d.at.clone(),
        });
        return;
    }
    for c in conds {
        report.none(&c.at, c.text.clone(), "a condition of the rule below");
    }
    report.none(&d.at, d.text(), "weir rewrites within a route and never chooses a route again: write a route with `path_regex` and `rewrite` (or `redirect`) by hand");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_helpers() {
        assert_eq!(cidr("10.1"), "10.1.0.0/16");
        assert_eq!(cidr("192.168.0.0/16"), "192.168.0.0/16");
        assert_eq!(
            expires_secs(&["access plus 1 month".into()]),
            Some(2_592_000)
        );
        assert_eq!(
            expires_secs(&["access".into(), "plus".into(), "2".into(), "days".into()]),
            Some(172_800)
        );
        assert_eq!(expires_secs(&["A3600".into()]), Some(3600));
        assert_eq!(
            fcgi_handler("proxy:unix:/run/php/php8.2-fpm.sock|fcgi://localhost").as_deref(),
            Some("unix:/run/php/php8.2-fpm.sock")
        );
        assert_eq!(
            fcgi_handler("proxy:fcgi://127.0.0.1:9000").as_deref(),
            Some("127.0.0.1:9000")
        );
        assert_eq!(
            rule_regex("^old/(.*)$", Some("/blog/"), false),
            "^/blog/old/(.*)$"
        );
        assert_eq!(
            target("https://%{HTTP_HOST}$1", "").unwrap(),
            "https://{host}{1}"
        );
    }
}
