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
    // weir's own default for files of no known type.
    assert_eq!(
        *outcome(&out, "default_type application/octet-stream"),
        Outcome::Mapped
    );
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
    // Only index.php is PHP's in nginx; weir's php runs every script.
    assert!(
        matches!(outcome(&out, "location ~ ^/index\\.php(/|$) (other .php files)"), Outcome::Approximated(w) if w.contains("serves the others as files"))
    );
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
    // Only the X-Forwarded-* fields the config sets, nginx's way.
    assert!(
        out.toml.contains(
            "request_headers = { set = { X-Real-IP = \"{client_ip}\", X-Forwarded-Proto = \"{scheme}\" }, add = { X-Forwarded-For = \"{client_ip}\" } }"
        ),
        "{}",
        out.toml
    );
    assert!(!out.toml.contains("x_forwarded = true"));
    assert!(!out.toml.contains("X-Forwarded-Host"));
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
    // weir's own pages are said once, apart from the directives.
    assert!(
        out.report
            .baseline
            .iter()
            .any(|(what, _)| what == "Caddy's own pages"),
        "{}",
        out.report
    );
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

#[test]
fn map_if_and_rewrite() {
    let out = import("nginx/rewrite/nginx.conf", None);
    validate(&out);
    let t = &out.toml;
    // Any line for `d` (a directive may also have been read as mapped first).
    let none = |d: &str, why: &str| {
        assert!(
            out.report.items.iter().any(|i| i.directive.starts_with(d)
                && matches!(&i.outcome, Outcome::NoEquivalent(w) if w.contains(why))),
            "{d}: {:?}",
            outcome(&out, d)
        )
    };
    // The map docs' examples: weir cannot tell their values apart; the
    // report names where they are used.
    none("map $http_host $name", "hostnames");
    none("map $http_host $name", "add_header X-Name $name always");
    none("map $http_user_agent $mobile", "~Opera Mini");
    none("add_header X-Mobile $mobile", "$mobile");
    // A redirect map: a route per value, before the default's.
    assert_eq!(*outcome(&out, "map $uri $moved"), Outcome::Mapped);
    assert!(
        t.contains("path_regex = '(?i)^/old\\-page$'\nredirect = { to = \"{scheme}://{host}:8080/new-page\", status = 301 }"),
        "{t}"
    );
    // The upstream by a field (approximated: nginx ignores case).
    assert!(matches!(
        outcome(&out, "map $http_x_release $pool"),
        Outcome::Approximated(w) if w.contains("ignoring case")
    ));
    assert!(
        t.contains("match = { header = { X-Release = \"canary\" }"),
        "{t}"
    );
    assert!(
        t.contains("to = [\"127.0.0.1:9002\"], host = \"canary\""),
        "{t}"
    );
    // A field by the method: one copy per method, the default's last.
    assert_eq!(
        *outcome(&out, "map $request_method $cacheable"),
        Outcome::Mapped
    );
    assert!(t.contains("X-Cacheable = \"yes\""), "{t}");
    assert!(t.contains("X-Cacheable = \"no\""), "{t}");
    assert!(t.contains("method = \"HEAD\""), "{t}");
    assert!(matches!(
        outcome(&out, "map $http_upgrade $connection_upgrade"),
        Outcome::Mapped
    ));
    // `if`: the forms a route's `match` holds; the others named.
    assert_eq!(
        *outcome(&out, "if ($request_method = POST)"),
        Outcome::Mapped
    );
    assert!(
        t.contains("match = { method = \"POST\" }\nrespond = 405"),
        "{t}"
    );
    none("if ($http_user_agent ~ MSIE)", "exact values");
    none("if ($http_cookie ~*", "exact values");
    none("if ($invalid_referer)", "$invalid_referer");
    assert!(matches!(
        outcome(&out, "if ($arg_preview)"),
        Outcome::Approximated(_)
    ));
    assert!(t.contains("match = { protocol = \"https\" }"), "{t}");
    // Internal rewrites: the route rewrites and answers as the location
    // nginx ends up in.
    assert_eq!(*outcome(&out, "rewrite ^/blog/(\\d+)/?$"), Outcome::Mapped);
    assert!(
        t.contains("path_regex = '^/blog/(\\d+)/?$'\nrewrite = \"/posts/post-{1}.html{?query}\""),
        "{t}"
    );
    assert!(matches!(
        outcome(&out, "rewrite ^/shop/(.*)$"),
        Outcome::Mapped
    ));
    assert!(
        t.contains("rewrite = \"/api/shop/{1}{?query}\"\nproxy = "),
        "{t}"
    );
    none("rewrite ^/gone$", "rewrites of its own");
    none("rewrite ^/u/(.*)$", "depends on the captured text");
    assert_eq!(*outcome(&out, "rewrite ^/files/old/"), Outcome::Mapped);
    assert_eq!(*outcome(&out, "rewrite ^/docs/v1/"), Outcome::Mapped);
    // The download example: at server level (`last`) and in its location (`break`).
    assert!(t.contains("rewrite = \"{1}/mp3/{2}.mp3{?query}\""), "{t}");
    assert_eq!(
        t.matches("rewrite = \"{1}/mp3/{2}.ra{?query}\"").count(),
        2,
        "{t}"
    );
    // `valid_referers` (read by an `if … return 403`) is left out: the
    // referrer check would be open, so every site refuses until it is fixed.
    assert_eq!(out.report.exit_code(), 4);
    assert_eq!(
        out.access_lost,
        ["nginx.conf:89:9: valid_referers none blocked server_names"]
    );
    assert!(
        t.starts_with("# REFUSED: every site below answers 403"),
        "{t}"
    );
    assert!(t.contains("deny = [\"0.0.0.0/0\", \"::/0\"]"), "{t}");
}
