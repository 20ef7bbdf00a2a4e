//! `weir import nginx` of Laravel's documented server block, proved
//! against nginx itself: Debian's `/etc/nginx` with Laravel's block as its
//! only site runs in `/usr/sbin/nginx` and, imported, in weir, both in
//! front of the same PHP-FPM pool and `public/` tree; the same requests go
//! to both and the answers must agree, except where the import's report
//! says how weir differs. A missing nginx or php-fpm fails the test: it
//! never skips.

use std::path::Path;

use weir_test_support::ports::free_port;

use super::nginx_wordpress::{Both, front_controller};
use super::{ask_with, corpus, no_redirects, same};

/// A Laravel-like `public/`: `index.php` the front controller (telling
/// what PHP was told), another script nginx does not run, assets, a
/// `.well-known` file and dot-files. `favicon.ico` is missing on purpose.
fn laravel(public: &Path) {
    for d in ["css", "js", "storage", ".well-known"] {
        std::fs::create_dir_all(public.join(d)).unwrap();
    }
    std::fs::write(
        public.join("index.php"),
        "<?php echo 'laravel ', $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['REQUEST_URI'], \
         ' script=', $_SERVER['SCRIPT_NAME'], ' path_info=', $_SERVER['PATH_INFO'] ?? '(unset)', \
         ' query=', $_SERVER['QUERY_STRING'], ' get=', json_encode($_GET), \"\\n\";\n",
    )
    .unwrap();
    std::fs::write(public.join("info.php"), "<?php echo 'info ran';\n").unwrap();
    std::fs::write(public.join("css/app.css"), "body { margin: 0 }\n").unwrap();
    std::fs::write(public.join("js/app.js"), "window.app = 1;\n").unwrap();
    std::fs::write(public.join("storage/report.txt"), "an upload\n").unwrap();
    std::fs::write(public.join("robots.txt"), "User-agent: *\nDisallow:\n").unwrap();
    std::fs::write(
        public.join(".well-known/security.txt"),
        "Contact: mailto:security@example.com\n",
    )
    .unwrap();
    std::fs::write(public.join(".htaccess"), "RewriteEngine On\n").unwrap();
    std::fs::write(public.join(".env"), "APP_KEY=secret\n").unwrap();
}

#[tokio::test]
async fn laravel_on_debian_nginx_answers_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let public = dir.join("example.com/public");
    laravel(&public);
    let fpm_port = free_port();
    let _fpm = crate::php::PhpFpm::start(&format!("127.0.0.1:{fpm_port}"), 4);

    let (ng_port, weir_port) = (free_port(), free_port());
    // Laravel's block as the only site (Laravel documents the block, Debian
    // the rest), PHP-FPM on a test port and the tree in a temporary directory.
    let edit = |t: String| {
        t.replace("/srv/example.com/public", &public.display().to_string())
            .replace(
                "fastcgi_pass unix:/var/run/php/php8.2-fpm.sock;",
                &format!("fastcgi_pass 127.0.0.1:{fpm_port};"),
            )
    };
    let both = Both::start(
        dir,
        ng_port,
        weir_port,
        &|etc, edit_all| {
            let site = std::fs::read_to_string(corpus("nginx/laravel/nginx.conf")).unwrap();
            std::fs::write(etc.join("sites-enabled/laravel"), edit_all(&site)).unwrap();
        },
        &edit,
    );
    let report = both.report.clone();

    let c = no_redirects();
    let host = Some("example.com");
    for (method, path) in [
        ("GET", "/"),
        ("HEAD", "/"),
        ("GET", "/index.php"),
        ("GET", "/index.php?page=2"),
        ("GET", "/index.php/users/7?x=1"),
        ("GET", "/users/42?sort=name&dir=desc"),
        ("GET", "/users/42/"),
        ("GET", "/search?q=a+b&tags[]=x&tags[]=y"),
        ("POST", "/login"),
        ("DELETE", "/posts/3"),
        ("GET", "/css/app.css"),
        ("HEAD", "/css/app.css"),
        ("GET", "/js/app.js?id=abc123"),
        ("GET", "/storage/report.txt"),
        ("GET", "/robots.txt"),
        ("GET", "/missing.css"),
        ("GET", "/storage/missing.txt"),
        ("GET", "/.well-known/security.txt"),
        ("GET", "/.htaccess"),
        ("GET", "/.env"),
        ("GET", "/.git/config"),
        ("GET", "/favicon.ico"),
        ("GET", "/info.php"),
    ] {
        let what = format!("{method} {path} (Host {host:?})");
        let set = ["x-frame-options", "x-content-type-options", "x-powered-by"];
        let ng = ask_with(&c, ng_port, method, path, host, &set).await;
        let w = ask_with(&c, weir_port, method, path, host, &set).await;
        let (mut ng, mut w) = front_controller(&what, ng, w, &report);
        if let Some(rest) = path.strip_prefix("/index.php/") {
            // No fastcgi_split_path_info: nginx's SCRIPT_NAME is the whole path.
            let rest = rest.split('?').next().unwrap();
            let whole = format!("script=/index.php/{rest} ");
            let body = String::from_utf8(ng.body.clone()).unwrap();
            assert!(body.contains(&whole), "{what}: {body}");
            assert!(
                report.contains("nginx's SCRIPT_NAME is the whole path"),
                "{what}\n{report}"
            );
            ng.body = body.replace(&whole, "script=/index.php ").into_bytes();
        }
        if path == "/info.php" {
            // Only index.php is PHP's in this config: nginx sends the file.
            assert_eq!((ng.status, w.status), (200, 200), "{what}");
            assert!(ng.body.starts_with(b"<?php"), "{what}: nginx ran it");
            assert_eq!(w.body, b"info ran", "{what}: weir did not run it");
            assert!(
                report.contains("nginx runs only those this location's regex names"),
                "{what}\n{report}"
            );
            continue;
        }
        if ng.status == 403 && w.status == 404 && path.starts_with("/.") {
            // `location ~ /\.(?!well-known)` denies; weir refuses dot-files.
            assert!(
                report.contains("weir's regexes have no look-around"),
                "{report}"
            );
            continue;
        }
        if path == "/favicon.ico" {
            // nginx's `error_page 404 /index.php` answers with the script.
            assert_eq!((ng.status, w.status), (404, 404), "{what}");
            assert!(ng.body.starts_with(b"laravel GET /favicon.ico"), "{what}");
            assert!(report.contains("error_page 404 /index.php"), "{report}");
            continue;
        }
        if path.contains(".js") && ng.content_type != w.content_type {
            // Debian's mime.types names JavaScript by its old type.
            assert!(
                report.contains("`.js` is text/javascript"),
                "{what}: {:?} / {:?}\n{report}",
                ng.content_type,
                w.content_type
            );
            w.content_type = ng.content_type.clone();
        }
        if ng.status >= 400 && ng.set.is_empty() && !w.set.is_empty() {
            // add_header without `always` is for successful answers in nginx.
            assert!(
                report.contains("weir adds it to every answer"),
                "{what}\n{report}"
            );
            w.set.clear();
        }
        same(&what, &ng, &w, &report);
    }
}
