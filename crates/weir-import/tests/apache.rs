//! Every Apache config of `corpus/apache/` imported, the weir.toml
//! validated by weir's own config loader, and the report checked for what
//! each one must say.

mod support;

use support::{corpus, import_with, outcome, validate};
use weir_import::{Imported, Kind, Options, Outcome};

fn import(p: &str, sysroot: Option<&str>, htaccess: bool) -> Imported {
    import_with(Kind::Apache, p, sysroot, htaccess)
}

#[test]
fn debian_default_site() {
    let out = import(
        "apache/debian/etc/apache2/apache2.conf",
        Some("apache/debian"),
        false,
    );
    let cfg = validate(&out);
    let t = &out.toml;
    assert_eq!(cfg.sites.len(), 1, "{t}");
    assert!(
        t.contains("[site.\":80\"]\nlisten = \"0.0.0.0:80\"\nroot = \"/var/www/html\"\n"),
        "{t}"
    );
    assert!(t.contains("browse = true"), "{t}");
    // mods-enabled/dir.conf's DirectoryIndex, the .cgi and .pl left out.
    assert!(
        t.contains("index = [\"index.html\", \"index.xhtml\", \"index.htm\"]"),
        "{t}"
    );
    // mods-enabled/alias.conf's icons, and deflate.conf's types.
    assert!(
        t.contains("path = \"/icons/\"\nstrip_prefix = true\nroot = \"/usr/share/apache2/icons\""),
        "{t}"
    );
    assert!(t.contains("encodings = [\"gzip\"]"), "{t}");
    assert!(t.contains("\"text/html\""), "{t}");
    assert!(
        t.contains(
            "access_log = { path = \"/var/log/apache2/access.log\", format = \"combined\" }"
        ),
        "{t}"
    );
    assert!(
        t.contains("# sites-enabled/000-default.conf:1 VirtualHost"),
        "{t}"
    );
    // The ssl vhost is not enabled; ports.conf's Listen 443 is in a false IfModule.
    assert!(!t.contains("443"), "{t}");
    // The CGI directory is in a false IfDefine.
    assert!(!t.contains("cgi-bin"), "{t}");
    assert!(matches!(
        outcome(&out, "User www-data"),
        Outcome::NoEquivalent(_)
    ));
    assert!(matches!(
        outcome(&out, "Options Indexes FollowSymLinks"),
        Outcome::Approximated(_)
    ));
    assert!(matches!(
        outcome(&out, "<FilesMatch ^\\.ht>"),
        Outcome::Approximated(w) if w.contains("404")
    ));
    assert!(matches!(
        outcome(&out, "SetHandler server-status"),
        Outcome::NoEquivalent(_)
    ));
    assert_eq!(
        out.report.find("DocumentRoot").unwrap().at.file,
        "sites-enabled/000-default.conf"
    );
    assert_eq!(out.report.exit_code(), 3);
}

#[test]
fn default_ssl_site() {
    let out = import(
        "apache/debian/etc/apache2/sites-available/default-ssl.conf",
        Some("apache/debian"),
        false,
    );
    validate(&out);
    let t = &out.toml;
    assert!(t.contains("[site.\":443\"]"), "{t}");
    assert!(
        t.contains("tls = { cert = \"/etc/ssl/certs/ssl-cert-snakeoil.pem\", key = \"/etc/ssl/private/ssl-cert-snakeoil.key\" }"),
        "{t}"
    );
}

#[test]
fn reverse_proxy() {
    let out = import(
        "apache/reverse-proxy/etc/apache2/apache2.conf",
        Some("apache/reverse-proxy"),
        false,
    );
    let cfg = validate(&out);
    let t = &out.toml;
    assert_eq!(cfg.sites.len(), 2, "{t}");
    assert!(
        t.contains("[site.\"www.example.com:8080\"]\nlisten = \"127.0.0.1:8080\"\ndefault = true"),
        "{t}"
    );
    assert!(t.contains("[site.\"example.com:8080\"]"), "{t}");
    // Exclusion before the proxy it carves out of, both in written order.
    let pos = |s: &str| t.find(s).unwrap_or_else(|| panic!("no {s} in\n{t}"));
    assert!(
        pos("path = \"/app/static/\"\nroot = \"/srv/www\"")
            < pos("path = \"/app/\"\nrewrite = \"/\"")
    );
    assert!(
        t.contains("path_regex = \"^/v1(/.*)?$\"\nrewrite = \"/api/v1{1}{?query}\""),
        "{t}"
    );
    assert!(t.contains("to = [{ addr = \"127.0.0.1:9002\", weight = 3 }, { addr = \"127.0.0.1:9003\", weight = 1 }]"), "{t}");
    assert!(!t.contains("9004"), "the hot standby stays out");
    assert!(matches!(
        outcome(&out, "BalancerMember http://127.0.0.1:9004 status=+H"),
        Outcome::NoEquivalent(_)
    ));
    assert!(t.contains("host = \"127.0.0.1:9001\""), "{t}");
    assert!(
        t.contains("redirect = { to = \"{scheme}://{host}:8080/new{1}{?query}\", status = 301 }"),
        "{t}"
    );
    assert!(t.contains("path_regex = \"^/blog/([0-9]+)$\"\nredirect = { to = \"{scheme}://{host}:8080/articles/{1}{?query}\", status = 301 }"), "{t}");
    assert!(
        t.contains("basic_auth = { realm = \"staff\", users = { alice = \"$2y$05$"),
        "{t}"
    );
    assert!(!t.contains("bob"));
    assert!(
        t.contains("path = \"/app/internal/\"\nrewrite = \"/internal/\"\nproxy = "),
        "{t}"
    );
    assert!(t.contains("allow = [\"10.0.0.0/8\"]"), "{t}");
    assert_eq!(*outcome(&out, "ProxyPassReverse /app/"), Outcome::Mapped);
    assert!(matches!(
        outcome(&out, "ProxyPassReverse /images/"),
        Outcome::Approximated(w) if w.contains("two slashes")
    ));
    assert!(
        t.contains("rewrite_location = [{ from = \"http://127.0.0.1:9001/\", to = \"{scheme}://{http_host}/app/\" }, { from = \"http://127.0.0.1:9002/\", to = \"{scheme}://{http_host}/images/\" }"),
        "{t}"
    );
    assert!(matches!(
        outcome(&out, "Header set X-Static yes"),
        Outcome::Approximated(w) if w.contains("always")
    ));
    assert_eq!(
        *outcome(&out, "Header always set X-Frame-Options"),
        Outcome::Mapped
    );
}

#[test]
fn wordpress_with_its_htaccess() {
    let p = "apache/wordpress/etc/apache2/sites-enabled/wordpress.conf";
    // Without --htaccess the file is named and left.
    let out = import(p, Some("apache/wordpress"), false);
    validate(&out);
    assert!(matches!(
        outcome(&out, "/srv/www/wordpress/.htaccess"),
        Outcome::NoEquivalent(w) if w.contains("--htaccess")
    ));
    assert!(out.toml.contains("front_controller = \"\""), "{}", out.toml);
    let out = import(p, Some("apache/wordpress"), true);
    validate(&out);
    let t = &out.toml;
    assert!(
        t.contains("root = \"/srv/www/wordpress\"\nphp = \"unix:/run/php/php8.2-fpm.sock\"\n"),
        "{t}"
    );
    assert_eq!(
        *outcome(&out, "RewriteRule . /index.php [L]"),
        Outcome::Mapped
    );
    assert_eq!(
        out.report.find("RewriteRule . /index.php").unwrap().at.file,
        "/srv/www/wordpress/.htaccess"
    );
    assert_eq!(
        *outcome(&out, "RewriteRule .* - [E=HTTP_AUTHORIZATION"),
        Outcome::Mapped
    );
    assert!(
        t.contains("path_regex = '\\.phps$'") || t.contains("path_regex = '.+\\.phps$'"),
        "{t}"
    );
}

#[test]
fn laravel_with_its_htaccess() {
    let out = import("apache/laravel/laravel.conf", Some("apache/laravel"), true);
    validate(&out);
    let t = &out.toml;
    assert!(
        t.contains("[site.\"app.example.com:80\"]\nlisten = \"0.0.0.0:80\"\ndefault = true\n"),
        "{t}"
    );
    assert!(
        t.contains("match = { protocol = \"http\" }\nredirect = { to = \"https://{host}{1}{?query}\", status = 301 }"),
        "{t}"
    );
    assert!(t.contains("[site.\"app.example.com:443\"]"), "{t}");
    assert!(t.contains("php = \"unix:/run/php/php8.2-fpm.sock\""), "{t}");
    assert!(
        t.contains("Strict-Transport-Security = \"max-age=63072000\""),
        "{t}"
    );
    assert!(t.contains("path_regex = '(?i)\\.(png)$'"), "{t}");
    assert!(t.contains("Cache-Control = \"max-age=2592000\""), "{t}");
    assert!(matches!(
        outcome(&out, "RewriteRule ^ %1 [L,R=301]"),
        Outcome::NoEquivalent(_)
    ));
    assert_eq!(
        *outcome(&out, "RewriteRule ^ index.php [L]"),
        Outcome::Mapped
    );
    assert_eq!(out.report.exit_code(), 3);
}

#[test]
fn unreadable_input_names_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("apache2.conf");
    std::fs::write(&p, "Listen 80\nInclude missing.conf\n").unwrap();
    let e = weir_import::import(Kind::Apache, &p, &Options::default()).unwrap_err();
    assert!(
        e.to_string().starts_with("apache2.conf:2:1: cannot read "),
        "{e}"
    );
    std::fs::write(&p, "<VirtualHost *:80>\n  <Directory /x>\n</VirtualHost>\n").unwrap();
    let e = weir_import::import(Kind::Apache, &p, &Options::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "apache2.conf:3:1: </VirtualHost> closes <Directory>"
    );
}

#[test]
fn the_kind_is_guessed() {
    assert_eq!(
        weir_import::guess(&corpus("apache/laravel/laravel.conf")),
        Some(Kind::Apache)
    );
    assert_eq!(
        weir_import::guess(&corpus(
            "apache/debian/etc/apache2/sites-enabled/000-default.conf"
        )),
        Some(Kind::Apache)
    );
}
