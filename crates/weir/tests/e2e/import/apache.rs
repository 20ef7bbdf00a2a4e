//! `weir import apache` proved against Apache itself: a corpus config runs
//! in Debian's `/usr/sbin/apache2` (on loopback test ports, its paths moved
//! into a temporary directory) and, imported, in weir; the same requests go
//! to both and the answers (status, `Location`, `Content-Type`, the headers
//! the config sets, body bytes, and what a proxied upstream receives) must
//! agree, except where the import's report says how weir differs. A missing
//! apache2 fails the test: it never skips.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_test_support::ports::free_port;
use weir_test_support::process::Daemon;
use weir_test_support::proxy::{Upstream, Weir};

use super::{Allowed, Answer, ask_with, corpus, no_redirects, same_as};
use crate::WEIR;

const APACHE: &str = "/usr/sbin/apache2";

/// apache2 in the foreground with its server root at `etc`, stopped by PID
/// on drop (with SIGTERM: the parent stops its children, SIGKILL would leave
/// them).
struct Apache {
    _daemon: Daemon,
}

impl Apache {
    fn start(dir: &Path, etc: &Path, port: u16) -> Apache {
        let d = dir.display();
        let mut cmd = Command::new(APACHE);
        cmd.arg("-d")
            .arg(etc)
            .arg("-f")
            .arg(etc.join("apache2.conf"))
            .args([
                "-C",
                &format!("PidFile {d}/apache.pid"),
                "-C",
                &format!("DefaultRuntimeDir {d}"),
                "-C",
                "Mutex posixsem",
                "-C",
                &format!("ErrorLog {d}/apache-error.log"),
                "-DFOREGROUND",
            ])
            .env("APACHE_RUN_USER", "www-data")
            .env("APACHE_RUN_GROUP", "www-data")
            .env("APACHE_PID_FILE", format!("{d}/apache.pid"))
            .env("APACHE_RUN_DIR", dir)
            .env("APACHE_LOCK_DIR", dir)
            .env("APACHE_LOG_DIR", dir.join("log"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let logs = [dir.join("apache-error.log"), dir.join("log/error.log")];
        Apache {
            _daemon: Daemon::start(cmd, port, "apt-get install apache2", &logs).graceful(),
        }
    }
}

/// Copies the corpus tree `src` to `to`, each text file through `edit`.
pub(super) fn copy_tree(src: &Path, to: &Path, edit: &dyn Fn(&str) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t, edit);
        } else {
            let text = std::fs::read_to_string(e.path()).unwrap();
            std::fs::write(&t, edit(&text)).unwrap();
        }
    }
}

/// Apache's children run as www-data: the test's files must be readable.
fn open_up(p: &Path) {
    let m = std::fs::metadata(p).unwrap();
    let mode = if m.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    if m.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            open_up(&e.unwrap().path());
        }
    }
}

/// `weir import apache CONF -o OUT`: its exit code and report.
fn import(conf: &Path, out: &Path, extra: &[&str]) -> (i32, String) {
    super::import_as("apache", conf, out, extra)
}

async fn ask(
    c: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    host: Option<&str>,
) -> Answer {
    ask_with(
        c,
        port,
        method,
        path,
        host,
        &["x-static", "x-frame-options"],
    )
    .await
}

/// The `always` fields of an answer (Apache sets them on errors too).
fn always(a: &Answer) -> Vec<&(String, String)> {
    a.set
        .iter()
        .filter(|(n, _)| n == "x-frame-options")
        .collect()
}

/// How weir's answers may differ from Apache's, with the report's words.
const APACHE_DIFFERS: &[Allowed] = &[
    // A directory asked without its slash.
    (
        "308 and a relative Location (Apache: 301, absolute)",
        |_, ap, w| {
            ap.status == 301
                && w.status == 308
                && ap.location.as_deref().is_some_and(|l| {
                    l.ends_with('/') && w.location.as_deref().is_some_and(|wl| l.ends_with(wl))
                })
        },
    ),
    ("refuses dot-files", |what, ap, w| {
        ap.status == 200 && w.status == 404 && what.contains("/.")
    }),
    ("404 (not 403)", |what, ap, w| {
        ap.status == 403 && w.status == 404 && what.contains("/.ht")
    }),
    ("names no script gets 404 in weir", |what, ap, w| {
        ap.status == 200 && w.status == 404 && what.contains(".php ")
    }),
    ("mod_status's page", |what, ap, w| {
        ap.status == 200 && w.status == 404 && what.contains("/server-status")
    }),
    // Apache leaves `Header set` (without `always`) off its own answers.
    (
        "Apache without `always` leaves it off its own error answers",
        |_, ap, w| {
            ap.status >= 300
                && ap.status == w.status
                && ap.location == w.location
                && ap.set != w.set
                && always(ap) == always(w)
        },
    ),
    // A directory without an index: each server's own listing.
    ("mod_autoindex", |what, ap, w| {
        ap.status == 200
            && w.status == 200
            && ap.set == w.set
            && ap.body != w.body
            && what.contains("/ (")
            && ap
                .content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("text/html"))
    }),
    // ProxyPassReverse of a balancer: Apache's `PATH` + `/rest`.
    ("with two slashes", |_, ap, w| {
        ap.status == w.status
            && ap.location.as_deref().is_some_and(|l| {
                l.contains("/images//")
                    && w.location.as_deref() == Some(&*l.replace("/images//", "/images/"))
            })
    }),
    // A proxied answer without a type: Apache names one from the path.
    ("none in weir", |_, ap, w| {
        ap.status == w.status
            && ap.status < 300
            && ap.set == w.set
            && ap.location == w.location
            && ap.content_type.is_some()
            && w.content_type.is_none()
            && ap.body == w.body
    }),
];

/// Compares Apache's and weir's answers, allowing only what the report lists.
fn same(what: &str, ap: &Answer, w: &Answer, report: &str) {
    same_as(what, ap, w, report, "Apache's own pages", APACHE_DIFFERS);
}

/// Debian's own apache2.conf with its enabled modules, confs and default site.
#[tokio::test]
async fn debian_default_site_answers_as_apache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("log")).unwrap();
    let www = dir.join("var-www/html");
    std::fs::create_dir_all(www.join("dir")).unwrap();
    std::fs::create_dir_all(www.join("img")).unwrap();
    std::fs::create_dir_all(www.join("empty")).unwrap();
    std::fs::write(www.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(www.join("dir/index.htm"), "dir index\n").unwrap();
    std::fs::write(www.join("a.txt"), "plain text\n").unwrap();
    std::fs::write(www.join("style.css"), "body { color: red }\n").unwrap();
    let png: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(www.join("img/x.png"), &png).unwrap();
    std::fs::write(www.join(".hidden"), "secret\n").unwrap();
    std::fs::write(www.join(".htpasswd"), "x:y\n").unwrap();

    let (ap_port, weir_port) = (free_port(), free_port());
    let copy = |name: &str, port: u16| -> PathBuf {
        let etc = dir.join(name);
        let d = dir.display().to_string();
        copy_tree(&corpus("apache/debian/etc/apache2"), &etc, &|t: &str| {
            t.replace("/var/www/", &format!("{d}/var-www/"))
                .replace("Listen 80\n", &format!("Listen 127.0.0.1:{port}\n"))
                .replace("<VirtualHost *:80>", &format!("<VirtualHost *:{port}>"))
                .replace("/var/log/apache2", &format!("{d}/log"))
                .replace("/var/run/apache2", &d)
                .replace("/var/lock/apache2", &d)
        });
        etc
    };
    let ap_etc = copy("apache", ap_port);
    let weir_etc = copy("weir-etc", weir_port);
    open_up(dir);
    let _ap = Apache::start(dir, &ap_etc, ap_port);

    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_etc.join("apache2.conf"), &out, &[]);
    assert_eq!(
        code, 3,
        "approximations are reported with exit 3:\n{report}"
    );
    assert!(
        report.contains("User ${APACHE_RUN_USER}") || report.contains("User www-data"),
        "{report}"
    );
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let c = no_redirects();
    for (method, path, host) in [
        ("GET", "/", None),
        ("GET", "/index.html", None),
        ("HEAD", "/index.html", None),
        ("GET", "/a.txt", None),
        ("GET", "/style.css", None),
        ("GET", "/img/x.png", None),
        ("GET", "/dir/", None),
        ("GET", "/dir", None),
        ("GET", "/empty/", None),
        ("GET", "/missing", None),
        ("GET", "/a.txt?x=1", Some("example.com")),
        ("GET", "/", Some("other.example")),
        ("GET", "/.hidden", None),
        ("GET", "/.htpasswd", None),
        ("GET", "/icons/apache_pb.png", None),
        ("GET", "/icons/a.gif", None),
        ("GET", "/server-status", None),
    ] {
        let what = format!("{method} {path} (Host {host:?})");
        let ap = ask(&c, ap_port, method, path, host).await;
        let w = ask(&c, weir_port, method, path, host).await;
        same(&what, &ap, &w, &report);
    }
}

/// ProxyPass with and without slashes, `!`, a balancer, Location access
/// rules, Redirect, RedirectMatch and a RewriteRule redirect, headers.
#[tokio::test]
async fn reverse_proxy_answers_as_apache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("log")).unwrap();
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("app/static")).unwrap();
    std::fs::create_dir_all(www.join("admin")).unwrap();
    std::fs::write(www.join("index.html"), "<h1>front</h1>\n").unwrap();
    std::fs::write(www.join("app/static/s.txt"), "static file\n").unwrap();
    std::fs::write(www.join("admin/index.html"), "admin\n").unwrap();
    let app = Upstream::start_on("app", &format!("127.0.0.1:{}", free_port())).await;
    let p1 = Upstream::start_on("pool", &format!("127.0.0.1:{}", free_port())).await;
    let p2 = Upstream::start_on("pool", &format!("127.0.0.1:{}", free_port())).await;
    let standby = free_port();

    let (ap_port, weir_port) = (free_port(), free_port());
    let copy = |name: &str, port: u16| -> PathBuf {
        let etc = dir.join(name);
        let e = etc.display().to_string();
        copy_tree(
            &corpus("apache/reverse-proxy/etc/apache2"),
            &etc,
            &|t: &str| {
                t.replace(
                    "ServerRoot \"/etc/apache2\"",
                    &format!("ServerRoot \"{e}\""),
                )
                .replace("/etc/apache2/htpasswd", &format!("{e}/htpasswd"))
                .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
                .replace("*:8080", &format!("*:{port}"))
                .replace("/srv/www", &www.display().to_string())
                .replace("127.0.0.1:9001", &app.addr.to_string())
                .replace("127.0.0.1:9002", &p1.addr.to_string())
                .replace("127.0.0.1:9003", &p2.addr.to_string())
                .replace("127.0.0.1:9004", &format!("127.0.0.1:{standby}"))
            },
        );
        etc
    };
    let ap_etc = copy("apache", ap_port);
    let weir_etc = copy("weir-etc", weir_port);
    open_up(dir);
    let _ap = Apache::start(dir, &ap_etc, ap_port);
    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_etc.join("apache2.conf"), &out, &[]);
    assert_eq!(code, 3, "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let ups = [&app, &p1, &p2];
    let seen = |before: &[usize]| -> Vec<(String, Option<String>)> {
        let mut v = Vec::new();
        for (u, b) in ups.iter().zip(before) {
            for s in &u.seen()[*b..] {
                let host = s
                    .headers
                    .get("host")
                    .map(|h| h.to_str().unwrap().to_string());
                v.push((
                    s.uri.clone(),
                    host.map(|h| {
                        if h.ends_with(&p2.addr.port().to_string()) {
                            h.replace(&p2.addr.port().to_string(), &p1.addr.port().to_string())
                        } else {
                            h
                        }
                    }),
                ));
            }
        }
        v
    };
    let c = no_redirects();
    for path in [
        "/",
        "/old",
        "/old/x?q=1",
        "/older",
        "/docs/a/b.html",
        "/blog/42?x=1",
        "/blog/x",
        "/app/static/s.txt",
        "/app/x?y=1",
        "/app/",
        "/app/internal/z",
        "/v1/users",
        "/v1x?z=2",
        "/v1",
        "/images/a.png",
        "/images/b/c.png",
        "/admin/",
        "/missing",
        // The upstream's redirects to itself, rewritten by ProxyPassReverse.
        "/app/to-self/login?next=/",
        "/images/to-self/a.png",
    ] {
        let counts = || ups.iter().map(|u| u.count()).collect::<Vec<_>>();
        // Each server names itself with its own port.
        let own = |mut a: Answer, port: u16| {
            a.location = a.location.map(|l| l.replace(&port.to_string(), "PORT"));
            a
        };
        let before = counts();
        let ap = own(ask(&c, ap_port, "GET", path, None).await, ap_port);
        let ap_seen = seen(&before);
        let before = counts();
        let w = own(ask(&c, weir_port, "GET", path, None).await, weir_port);
        let w_seen = seen(&before);
        if path.contains("/to-self/") {
            let l = w.location.as_deref().unwrap_or("");
            assert!(
                l.starts_with("http://127.0.0.1:PORT/"),
                "GET {path}: the upstream's own URL is rewritten: {l}"
            );
        }
        same(&format!("GET {path}"), &ap, &w, &report);
        assert_eq!(ap_seen, w_seen, "GET {path}: what the upstreams received");
    }
}

/// WordPress as Ubuntu's tutorial sets it up: PHP-FPM through Debian's
/// php8.2-fpm.conf, WordPress's .htaccess read with `--htaccess`.
#[tokio::test]
async fn wordpress_with_its_htaccess_answers_as_apache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("log")).unwrap();
    let www = dir.join("wordpress");
    std::fs::create_dir_all(www.join("wp-admin")).unwrap();
    std::fs::create_dir_all(www.join("wp-content/themes")).unwrap();
    let show = "<?php echo $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['REQUEST_URI'], ' script=', $_SERVER['SCRIPT_NAME'], ' query=', $_SERVER['QUERY_STRING'], \"\\n\";";
    std::fs::write(www.join("index.php"), format!("front {show}")).unwrap();
    std::fs::write(www.join("wp-login.php"), format!("login {show}")).unwrap();
    std::fs::write(www.join("wp-admin/index.php"), format!("admin {show}")).unwrap();
    std::fs::write(
        www.join("wp-content/themes/style.css"),
        "body { color: blue }\n",
    )
    .unwrap();
    std::fs::write(www.join("readme.html"), "<p>readme</p>\n").unwrap();
    let src = corpus("apache/wordpress");
    std::fs::copy(
        src.join("srv/www/wordpress/.htaccess"),
        www.join(".htaccess"),
    )
    .unwrap();
    let fpm_port = free_port();
    let _fpm = crate::php::PhpFpm::start(&format!("127.0.0.1:{fpm_port}"), 4);

    let (ap_port, weir_port) = (free_port(), free_port());
    let w = www.display().to_string();
    let copy = |name: &str, port: u16| -> PathBuf {
        let etc = dir.join(name);
        let e = etc.display().to_string();
        copy_tree(&src.join("etc/apache2"), &etc, &|t: &str| {
            t.replace("/srv/www/wordpress", &w)
                .replace("<VirtualHost *:80>", &format!("<VirtualHost *:{port}>"))
                .replace("/etc/apache2/", &format!("{e}/"))
                .replace(
                    "\"proxy:unix:/run/php/php8.2-fpm.sock|fcgi://localhost\"",
                    &format!("\"proxy:fcgi://127.0.0.1:{fpm_port}\""),
                )
        });
        etc
    };
    let ap_etc = copy("apache", ap_port);
    let weir_etc = copy("weir-etc", weir_port);
    // The modules Debian's a2enmod would have enabled for this site.
    let m = "/usr/lib/apache2/modules";
    let mods = [
        "mpm_event",
        "authz_core",
        "authz_host",
        "mime",
        "dir",
        "alias",
        "rewrite",
        "setenvif",
        "proxy",
        "proxy_fcgi",
    ];
    let mut main = format!(
        "Listen 127.0.0.1:{ap_port}\nUser www-data\nGroup www-data\nTypesConfig /etc/mime.types\n"
    );
    for md in mods {
        main.push_str(&format!("LoadModule {md}_module {m}/mod_{md}.so\n"));
    }
    main.push_str(&format!(
        "Include {}/sites-enabled/wordpress.conf\n",
        ap_etc.display()
    ));
    std::fs::write(ap_etc.join("apache2.conf"), main).unwrap();
    open_up(dir);
    let _ap = Apache::start(dir, &ap_etc, ap_port);

    let out = dir.join("weir.toml");
    let site = weir_etc.join("sites-enabled/wordpress.conf");
    let (code, report) = import(&site, &out, &["--htaccess"]);
    assert_eq!(code, 3, "{report}");
    assert!(report.contains("front controller /index.php"), "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let c = no_redirects();
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/index.php"),
        ("GET", "/hello-world/"),
        ("GET", "/2026/11/a-post/?replytocom=3"),
        ("POST", "/wp-login.php?action=login"),
        ("GET", "/wp-admin/"),
        ("GET", "/wp-content/themes/style.css"),
        ("GET", "/readme.html"),
        ("GET", "/feed"),
        ("GET", "/missing.php"),
        ("GET", "/wp-admin"),
    ] {
        let what = format!("{method} {path} (Host {:?})", Some("blog.example.com"));
        let ap = ask(&c, ap_port, method, path, Some("blog.example.com")).await;
        let w = ask(&c, weir_port, method, path, Some("blog.example.com")).await;
        same(&what, &ap, &w, &report);
    }
}

/// One request over HTTPS to `port` (as `app.example.com`, through
/// `c`, which trusts the test CA); `port` is `PORT` in the fields.
async fn ask_tls(
    c: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    set: &[&str],
) -> Answer {
    let mut r = c.request(
        method.parse().unwrap(),
        format!("https://app.example.com:{port}{path}"),
    );
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    if method == "POST" {
        r = r
            .header("content-type", "application/x-www-form-urlencoded")
            .body("email=a%40b.example&remember=1");
    }
    let r = r
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path} on {port}: {e}"));
    let field = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().replace(&port.to_string(), "PORT"))
    };
    let status = r.status().as_u16();
    let location = field("location");
    let content_type = field("content-type");
    let set = set
        .iter()
        .filter_map(|n| field(n).map(|v| (n.to_string(), v)))
        .collect();
    let body = r.bytes().await.unwrap().to_vec();
    Answer {
        status,
        location,
        content_type,
        set,
        body,
    }
}

/// Laravel's deployment: the HTTP vhost redirecting to HTTPS, the HTTPS
/// vhost with HSTS, PHP-FPM through `SetHandler`, mod_expires by type and
/// Laravel's public/.htaccess (read with `--htaccess`). Rewritten: the
/// two vhosts on loopback test ports, the certificate a test CA's, the
/// document root a temporary directory, PHP-FPM's socket a TCP port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn laravel_with_its_htaccess_answers_as_apache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("log")).unwrap();
    let app = dir.join("app");
    let public = app.join("public");
    for d in ["css", "js", "images", "docs"] {
        std::fs::create_dir_all(public.join(d)).unwrap();
    }
    // What PHP sees: the variables a front controller routes by.
    let show = "<?php echo 'laravel ', $_SERVER['REQUEST_METHOD'], ' uri=', $_SERVER['REQUEST_URI'], ' script=', $_SERVER['SCRIPT_NAME'], ' path_info=', $_SERVER['PATH_INFO'] ?? '-', ' php_self=', $_SERVER['PHP_SELF'], ' query=', $_SERVER['QUERY_STRING'] ?? '-', ' https=', $_SERVER['HTTPS'] ?? '-', ' auth=', $_SERVER['HTTP_AUTHORIZATION'] ?? '-', ' xsrf=', $_SERVER['HTTP_X_XSRF_TOKEN'] ?? '-', ' post=', json_encode($_POST), \"\\n\";";
    std::fs::write(public.join("index.php"), show).unwrap();
    std::fs::write(public.join("css/app.css"), "body { color: red }\n").unwrap();
    std::fs::write(public.join("js/app.js"), "console.log(1);\n").unwrap();
    let png: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(public.join("images/logo.png"), &png).unwrap();
    std::fs::write(public.join("robots.txt"), "User-agent: *\nDisallow:\n").unwrap();
    std::fs::write(public.join("docs/index.html"), "<p>docs</p>\n").unwrap();
    std::fs::write(app.join(".env"), "APP_KEY=secret\n").unwrap();
    let src = corpus("apache/laravel");
    std::fs::copy(
        src.join("srv/app/public/.htaccess"),
        public.join(".htaccess"),
    )
    .unwrap();
    let ca = weir_test_support::certs::TestCa::named("laravel");
    let (cert, key) = ca.leaf(&["app.example.com"]);
    std::fs::write(dir.join("app.pem"), cert).unwrap();
    std::fs::write(dir.join("app.key"), key).unwrap();
    let fpm_port = free_port();
    let _fpm = crate::php::PhpFpm::start(&format!("127.0.0.1:{fpm_port}"), 4);

    let conf = std::fs::read_to_string(src.join("laravel.conf")).unwrap();
    let d = dir.display().to_string();
    let copy = |name: &str, plain: u16, tls: u16| -> PathBuf {
        let text = conf
            .replace("/srv/app/public", &public.display().to_string())
            .replace("<VirtualHost *:80>", &format!("<VirtualHost *:{plain}>"))
            .replace("<VirtualHost *:443>", &format!("<VirtualHost *:{tls}>"))
            .replace(
                "/etc/ssl/certs/app.example.com.pem",
                &format!("{d}/app.pem"),
            )
            .replace(
                "/etc/ssl/private/app.example.com.key",
                &format!("{d}/app.key"),
            )
            .replace(
                "\"proxy:unix:/run/php/php8.2-fpm.sock|fcgi://localhost\"",
                &format!("\"proxy:fcgi://127.0.0.1:{fpm_port}\""),
            );
        let etc = dir.join(name);
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("laravel.conf"), text).unwrap();
        etc
    };
    let (ap_plain, ap_tls, w_plain, w_tls) = (free_port(), free_port(), free_port(), free_port());
    let ap_etc = copy("apache", ap_plain, ap_tls);
    let weir_etc = copy("weir-etc", w_plain, w_tls);
    // The modules and DirectoryIndex Debian's a2enmod would have enabled
    // for this site (dir.conf's list).
    let m = "/usr/lib/apache2/modules";
    let mods = [
        "mpm_event",
        "authz_core",
        "authz_host",
        "mime",
        "dir",
        "alias",
        "rewrite",
        "setenvif",
        "negotiation",
        "headers",
        "expires",
        "filter",
        "deflate",
        "socache_shmcb",
        "ssl",
        "proxy",
        "proxy_fcgi",
    ];
    let mut main = format!(
        "Listen 127.0.0.1:{ap_plain}\nListen 127.0.0.1:{ap_tls}\nUser www-data\nGroup www-data\nTypesConfig /etc/mime.types\n"
    );
    for md in mods {
        main.push_str(&format!("LoadModule {md}_module {m}/mod_{md}.so\n"));
    }
    main.push_str("DirectoryIndex index.html index.cgi index.pl index.php index.xhtml index.htm\n");
    main.push_str(&format!("Include {}/laravel.conf\n", ap_etc.display()));
    std::fs::write(ap_etc.join("apache2.conf"), main).unwrap();
    open_up(dir);
    let _ap = Apache::start(dir, &ap_etc, ap_tls);

    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_etc.join("laravel.conf"), &out, &["--htaccess"]);
    assert_eq!(code, 3, "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[w_plain, w_tls]);

    let differs: Vec<Allowed> = [APACHE_DIFFERS, LARAVEL_DIFFERS].concat();
    let set = ["strict-transport-security", "cache-control"];
    // Plain HTTP: everything to HTTPS.
    let c = no_redirects();
    for path in ["/", "/users/5?sort=name", "/css/app.css"] {
        let what = format!("GET http {path}");
        let ap = ask_with(&c, ap_plain, "GET", path, Some("app.example.com"), &set).await;
        let w = ask_with(&c, w_plain, "GET", path, Some("app.example.com"), &set).await;
        assert_eq!(ap.status, 301, "{what}: {ap:?}");
        same_as(&what, &ap, &w, &report, "Apache's own pages", &differs);
    }
    let tls = |port: u16| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(20))
            .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
            .resolve("app.example.com", ([127, 0, 0, 1], port).into())
            .build()
            .unwrap()
    };
    let (ap_c, w_c) = (tls(ap_tls), tls(w_tls));
    let bearer = [("authorization", "Bearer t0k3n"), ("x-xsrf-token", "x5rf")];
    for (method, path, headers) in [
        ("GET", "/", &[][..]),
        ("GET", "/index.php", &[]),
        ("GET", "/users/5?sort=name&page=2", &[]),
        ("HEAD", "/users/5", &[]),
        ("POST", "/login", &[]),
        ("GET", "/api/user", &bearer),
        ("GET", "/index.php/users/5?x=1", &[]),
        // Laravel's trailing-slash redirect.
        ("GET", "/users/", &[]),
        ("GET", "/users/?page=2", &[]),
        ("GET", "/css/app.css", &[]),
        ("HEAD", "/css/app.css", &[]),
        ("GET", "/js/app.js?id=abc", &[]),
        ("GET", "/images/logo.png", &[]),
        ("GET", "/images/missing.png", &[]),
        ("GET", "/robots.txt", &[]),
        ("GET", "/docs/", &[]),
        ("GET", "/docs", &[]),
        ("GET", "/missing.php", &[]),
        ("GET", "/.env", &[]),
        ("GET", "/.htaccess", &[]),
        ("GET", "/%2e%2e/.env", &[]),
    ] {
        let what = format!("{method} {path} {headers:?}");
        let ap = ask_tls(&ap_c, ap_tls, method, path, headers, &set).await;
        let w = ask_tls(&w_c, w_tls, method, path, headers, &set).await;
        same_as(&what, &ap, &w, &report, "Apache's own pages", &differs);
    }
}

/// A PHP answer's body without what it says of PATH_INFO and PHP_SELF.
fn without_path_info(a: &Answer) -> String {
    let b = String::from_utf8_lossy(&a.body);
    match (b.find(" path_info="), b.find(" query=")) {
        (Some(i), Some(j)) if i < j => format!("{}{}", &b[..i], &b[j..]),
        _ => b.into_owned(),
    }
}

/// How weir's answers to the Laravel site may differ from Apache's.
const LARAVEL_DIFFERS: &[Allowed] = &[
    // Laravel's trailing-slash redirect (`!-d` has no weir condition).
    (
        "a condition it depends on has no weir equivalent",
        |what, ap, w| ap.status == 301 && w.status == 200 && what.contains("/users/"),
    ),
    // mod_expires goes by the answer's type, weir's route by the path's.
    (
        "chosen by the path's extension, not the answer's type",
        |_, ap, w| {
            ap.status == w.status
                && ap.set != w.set
                && w.set.iter().any(|(n, _)| n == "cache-control")
                && !ap.set.iter().any(|(n, _)| n == "cache-control")
                && without_path_info(ap) == without_path_info(w)
        },
    ),
    // The front controller's PATH_INFO (and so PHP_SELF).
    ("sends no PATH_INFO", |_, ap, w| {
        ap.status == 200
            && w.status == 200
            && ap.set == w.set
            && ap.body != w.body
            && without_path_info(ap) == without_path_info(w)
    }),
];
