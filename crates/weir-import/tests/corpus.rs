//! Every config of `corpus/` imported, the weir.toml validated by weir's
//! own config loader, and the report checked for what each one must say.

mod support;

use support::{import_with, outcome, validate};
use weir_import::{Imported, Kind, Options, Outcome};

fn import(p: &str, sysroot: Option<&str>) -> Imported {
    import_with(Kind::Nginx, p, sysroot, false)
}

fn import_kind(kind: Kind, p: &str, sysroot: Option<&str>) -> Imported {
    import_with(kind, p, sysroot, false)
}

#[test]
fn debian_default_site() {
    let out = import("nginx/debian/etc/nginx/nginx.conf", Some("nginx/debian"));
    let cfg = validate(&out);
    assert_eq!(cfg.sites.len(), 1, "{}", out.toml);
    assert!(
        out.toml.contains(
            "[site.\":80\"]\nlisten = [\"0.0.0.0:80\", \"[::]:80\"]\ndefault = true\nroot = \"/var/www/html\"\n"
        ),
        "{}",
        out.toml
    );
    assert!(out.toml.contains("root = \"/var/www/html\""));
    assert!(
        out.toml
            .contains("index = [\"index.html\", \"index.htm\", \"index.nginx-debian.html\"]")
    );
    assert!(
        out.toml.contains("# sites-enabled/default:21 server"),
        "{}",
        out.toml
    );
    assert!(matches!(
        outcome(&out, "user www-data"),
        Outcome::NoEquivalent(_)
    ));
    assert!(matches!(outcome(&out, "gzip on"), Outcome::Approximated(_)));
    assert!(
        matches!(outcome(&out, "ssl_protocols"), Outcome::Approximated(w) if w.contains("TLS 1.2 and 1.3"))
    );
    assert_eq!(*outcome(&out, "try_files $uri $uri/ =404"), Outcome::Mapped);
    assert_eq!(
        out.report.find("try_files").unwrap().at.file,
        "sites-enabled/default"
    );
    assert_eq!(out.report.exit_code(), 3);
}

#[test]
fn wordpress_runs_php_with_a_front_controller() {
    let out = import("nginx/wordpress/nginx.conf", None);
    validate(&out);
    // Two names, one site each; `.php` paths go to PHP before the static
    // regex, as nginx's order has it; other paths to index.php.
    assert!(out.toml.contains("[site.\"example.com:80\"]"));
    assert!(out.toml.contains("[site.\"www.example.com:80\"]"));
    assert!(
        out.toml
            .contains("php = \"unix:/run/php/php8.2-fpm.sock\"\n"),
        "{}",
        out.toml
    );
    let php = out.toml.find("path_regex = '\\.php$'").expect("php route");
    let assets = out
        .toml
        .find("path_regex = '(?i)\\.(js|css|png|jpg|jpeg|gif|ico)$'")
        .expect("assets route");
    assert!(php < assets, "{}", out.toml);
    assert!(out.toml.contains("Cache-Control = \"max-age=315360000\""));
    assert!(matches!(
        outcome(&out, "expires max"),
        Outcome::Approximated(_)
    ));
    assert_eq!(
        *outcome(&out, "try_files $uri $uri/ /index.php?$args"),
        Outcome::Mapped
    );
}

#[test]
fn laravel() {
    let out = import("nginx/laravel/nginx.conf", None);
    validate(&out);
    assert!(
        matches!(outcome(&out, "location ~ /\\.(?!well-known).*"), Outcome::NoEquivalent(w) if w.contains("look-around"))
    );
    assert!(matches!(
        outcome(&out, "error_page 404 /index.php"),
        Outcome::NoEquivalent(_)
    ));
    assert!(out.toml.contains("X-Frame-Options = \"SAMEORIGIN\""));
    assert!(
        out.toml.contains("path_regex = '^/index\\.php(/|$)'"),
        "{}",
        out.toml
    );
}

#[test]
fn locations_in_nginx_order() {
    let out = import("nginx/locations/nginx.conf", None);
    validate(&out);
    let pos = |s: &str| {
        out.toml
            .find(s)
            .unwrap_or_else(|| panic!("no {s} in\n{}", out.toml))
    };
    // Exact, then ^~ with no plain prefix under it, then regexes, then the rest by length.
    assert!(pos("path_regex = \"^/$\"") < pos("path = \"/images/\""));
    assert!(pos("path = \"/images/\"") < pos("path_regex = '(?i)\\.(gif|jpg|jpeg)$'"));
    assert!(pos("path_regex = '(?i)\\.(gif|jpg|jpeg)$'") < pos("path = \"/documents/\""));
    // A ^~ with a plain location under it: before the regexes, for the paths outside that one.
    let excl =
        "path_regex = \"^/static/(?:$|[^d]|d(?:$|[^e]|e(?:$|[^e]|e(?:$|[^p]|p(?:$|[^/])))))\"";
    let gif = "path_regex = '(?i)\\.(gif|jpg|jpeg)$'";
    assert!(pos(excl) < pos(gif));
    assert!(pos(gif) < pos("path = \"/static/deep/\""));
    assert_eq!(*outcome(&out, "location ^~ /static/"), Outcome::Mapped);
    // proxy_pass slash rules.
    assert!(
        out.toml
            .contains("path = \"/p2/\"\nrewrite = \"/\"\nproxy = { to = \"127.0.0.1:9001\"")
    );
    assert!(
        out.toml.contains("rewrite = \"/v2{1}{?query}\""),
        "{}",
        out.toml
    );
    assert!(
        out.toml.contains("path_regex = \"^/p4/(.*)$\""),
        "{}",
        out.toml
    );
}

#[test]
fn reverse_proxy() {
    let out = import("nginx/reverse-proxy/nginx.conf", None);
    let cfg = validate(&out);
    assert!(out.toml.contains("[site.\"www.example.com:80\"]"));
    assert!(
        out.toml
            .contains("redirect = { to = \"https://app.example.com{uri}\", status = 301 }")
    );
    assert!(out.toml.contains("[site.\"app.example.com:443\"]"));
    assert!(
        out.toml
            .contains("tls = { cert = \"/etc/ssl/certs/app.pem\"")
    );
    assert!(out.toml.contains("balance = \"least_conn\""));
    assert!(
        out.toml
            .contains("{ addr = \"127.0.0.1:9001\", weight = 3 }")
    );
    assert!(!out.toml.contains("9003"), "the backup server stays out");
    assert!(matches!(
        outcome(&out, "server 127.0.0.1:9003 backup"),
        Outcome::NoEquivalent(_)
    ));
    assert!(
        out.toml
            .contains("rate = \"10r/s\", burst = 20, nodelay = true, status = 503")
    );
    assert!(out.toml.contains("alice = \"$2y$05$"), "{}", out.toml);
    assert!(!out.toml.contains("bob"));
    assert!(matches!(
        outcome(&out, "auth_basic_user_file htpasswd: user bob"),
        Outcome::NoEquivalent(_)
    ));
    assert!(out.toml.contains("allow = [\"10.0.0.0/8\"]"));
    assert!(matches!(
        outcome(&out, "if ($http_user_agent"),
        Outcome::NoEquivalent(_)
    ));
    assert_eq!(cfg.sites.len(), 3);
}

#[test]
fn stream() {
    let out = import("nginx/stream/nginx.conf", None);
    validate(&out);
    assert!(out.toml.contains("[tcp.\"port-5432\"]\nlisten = \"0.0.0.0:5432\"\nto = [\"10.0.0.5:5432\", \"10.0.0.6:5432\"]\nconnect_timeout = \"1s\"\nidle_timeout = \"180s\""), "{}", out.toml);
    assert!(matches!(
        outcome(&out, "listen 53 udp"),
        Outcome::NoEquivalent(_)
    ));
}

#[test]
fn unreadable_input_names_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("nginx.conf");
    std::fs::write(&p, "http {\n  include missing.conf;\n}\n").unwrap();
    let e = weir_import::import(Kind::Nginx, &p, &Options::default()).unwrap_err();
    assert!(
        e.to_string().starts_with("nginx.conf:2:3: cannot read "),
        "{e}"
    );
}

#[test]
fn caddy_three_sites() {
    let out = import_kind(Kind::Caddy, "caddy/three-sites/Caddyfile", None);
    validate(&out);
    let t = &out.toml;
    assert!(
        t.contains("[tls.acme]\nemail = \"admin@example.com\""),
        "{t}"
    );
    assert!(t.contains("[site.\"example.com\"]"), "{t}");
    assert!(t.contains("root = \"/var/www/example\""));
    // Caddy's `encode` defaults: from 512 bytes, its list of types.
    assert!(
        t.contains("compress = { encodings = [\"zstd\", \"gzip\"], min_size = 512, types = [\"text/*\", \"application/json\", \"application/javascript\","),
        "{t}"
    );
    // file_server's index files, and no sidecars (Caddy needs `precompressed`).
    assert!(
        t.contains("root = \"/var/www/example\"\nindex = [\"index.html\", \"index.txt\"]\n"),
        "{t}"
    );
    assert!(t.contains("precompressed = []"), "{t}");
    assert!(matches!(
        outcome(&out, "header {"),
        Outcome::Approximated(w) if w.contains("errors its handlers answer")
    ));
    assert!(matches!(
        outcome(&out, "reverse_proxy localhost:9000"),
        Outcome::Approximated(w) if w.contains("sniffed")
    ));
    assert!(matches!(
        outcome(&out, "Caddy's own pages"),
        Outcome::Approximated(_)
    ));
    // HTTPS sites: no catch-all (Caddy refuses a handshake for other names).
    assert!(!t.contains("[site.\":"), "{t}");
    assert!(t.contains("remove = [\"Server\"]"), "{t}");
    assert!(t.contains("redirect = { to = \"https://example.com{uri}\", status = 302 }"));
    assert!(
        t.contains("path = \"/api/*\"\nmatch = { method = [\"GET\", \"POST\"] }"),
        "{t}"
    );
    assert!(
        t.contains("balance = \"least_conn\", health = { path = \"/health\" }"),
        "{t}"
    );
    assert!(
        t.contains("path = \"/static/*\"\nstrip_prefix = true\nroot = \"/srv/app/static\""),
        "{t}"
    );
    assert!(
        t.contains("path = \"/admin/*\"\nproxy = { to = [\"localhost:9000\"]"),
        "{t}"
    );
    assert!(
        t.contains("basic_auth = { users = { alice = \"$2a$14$"),
        "{t}"
    );
    // Caddy compresses only with `encode`.
    assert!(t.contains("[site.\"www.example.com\"]\nredirect"), "{t}");
}

#[test]
fn caddy_php() {
    let out = import_kind(Kind::Caddy, "caddy/php/Caddyfile", None);
    validate(&out);
    let t = &out.toml;
    assert!(t.contains("tls = { issuer = \"internal\" }"), "{t}");
    assert!(
        t.contains("root = \"/srv/public\"\nphp = \"unix:/run/php/php8.2-fpm.sock\""),
        "{t}"
    );
    assert_eq!(out.report.dropped().count(), 0, "{}", out.report);
}
