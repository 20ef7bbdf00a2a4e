//! `weir import caddy` proved against Caddy itself: a corpus Caddyfile runs
//! in Debian's `/usr/bin/caddy` (on a loopback test port, its paths moved
//! into a temporary directory) and, imported, in weir; the same requests go
//! to both and the answers (status, `Location`, `Content-Type`, the headers
//! the config sets, `Server`'s presence, the coding chosen and the decoded
//! body, and what a proxied upstream receives) must agree, except where the
//! import's report says how weir differs. A missing caddy fails the test:
//! it never skips.
//!
//! What the test copies rewrite, and why: every site address becomes
//! `http://NAME:PORT` (Caddy's automatic HTTPS would need port 443 and a
//! certificate authority; `tls internal` is dropped for the same reason),
//! the global options gain `admin off` (Caddy's admin endpoint would take
//! the shared port 2019) and `default_bind 127.0.0.1` (loopback only), and
//! roots, upstreams and the FastCGI socket move to what the test runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tokio::io::AsyncReadExt;
use weir_test_support::ports::free_port;
use weir_test_support::process::Daemon;
use weir_test_support::proxy::{Upstream, Weir};

use super::{Allowed, Answer, ask_headers, corpus, import_as, no_redirects, same_as};
use crate::WEIR;

const CADDY: &str = "/usr/bin/caddy";

/// `caddy run` on a Caddyfile, its state under `dir`, stopped by PID on drop.
struct Caddy {
    _daemon: Daemon,
}

impl Caddy {
    fn start(dir: &Path, conf: &Path, port: u16) -> Caddy {
        let log = dir.join("caddy.log");
        let mut cmd = Command::new(CADDY);
        cmd.args(["run", "--adapter", "caddyfile", "--config"])
            .arg(conf)
            // Caddy keeps its storage and autosaved config under these.
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Caddy {
            _daemon: Daemon::start(cmd, port, "apt-get install caddy", &[log]),
        }
    }
}

/// The global options the test copies add (see the module's comment).
fn test_globals(src: &str) -> String {
    let add = "\tadmin off\n\tdefault_bind 127.0.0.1\n";
    match src.find("{\n\t") {
        Some(i) if src[..i].trim().lines().all(|l| l.starts_with('#')) => {
            format!("{}{add}{}", &src[..i + 2], &src[i + 2..])
        }
        _ => format!("{{\n{add}}}\n\n{src}"),
    }
}

/// The fields compared besides status, Location and Content-Type.
const FIELDS: &[&str] = &[
    "strict-transport-security",
    "x-content-type-options",
    "server",
    "content-encoding",
];

/// One request to `port`, `Server` reduced to its presence (its value is
/// each server's name) and a compressed body decoded.
async fn ask(c: &reqwest::Client, port: u16, (method, path, host, headers): Req<'_>) -> Answer {
    let mut a = ask_headers(c, port, method, path, host, headers, FIELDS).await;
    for (n, v) in &mut a.set {
        if n == "server" {
            *v = "present".into();
        }
    }
    let coding = a
        .set
        .iter()
        .find(|(n, _)| n == "content-encoding")
        .map(|(_, v)| v.clone());
    let mut body = Vec::new();
    match coding.as_deref() {
        Some("gzip") => {
            async_compression::tokio::bufread::GzipDecoder::new(&a.body[..])
                .read_to_end(&mut body)
                .await
                .unwrap();
        }
        Some("zstd") => {
            async_compression::tokio::bufread::ZstdDecoder::new(&a.body[..])
                .read_to_end(&mut body)
                .await
                .unwrap();
        }
        Some(other) => panic!("{method} {path}: coding {other}"),
        None => body = std::mem::take(&mut a.body),
    }
    a.body = body;
    a
}

/// Method, path, Host and extra request fields.
type Req<'a> = (&'a str, &'a str, Option<&'a str>, &'a [(&'a str, &'a str)]);

/// What differs wherever Caddy answers: its `header` fields left off the
/// errors of its handlers, and the types it sniffs for proxied answers.
const CADDY_DIFFERS: &[Allowed] = &[
    (
        "Caddy does not apply them to the errors its handlers answer",
        |_, cd, w| {
            cd.status >= 400
                && cd.status == w.status
                && cd.location == w.location
                && cd.set != w.set
        },
    ),
    (
        "gets one sniffed from its first bytes in Caddy",
        |_, cd, w| {
            cd.status == w.status
                && cd.status < 300
                && cd.set == w.set
                && cd.content_type.is_some()
                && w.content_type.is_none()
                && cd.body == w.body
        },
    ),
];

/// What differs wherever Caddy's file_server answers.
const FILES: &[Allowed] = &[
    (
        "weir's 308 keeps the query (Caddy 2.6 drops it)",
        |_, cd, w| {
            cd.status == 308
                && w.status == 308
                && cd.location.as_deref()
                    == w.location.as_deref().map(|l| l.split('?').next().unwrap())
        },
    ),
    (
        "weir refuses dot-files (.git, .env) Caddy serves",
        |what, cd, w| cd.status == 200 && w.status == 404 && what.contains("/."),
    ),
    (
        "a directory without an index file gets 308 to add its slash, then 403 (Caddy: 404)",
        |_, cd, w| cd.status == 404 && matches!(w.status, 308 | 403),
    ),
];

/// Compares Caddy's and weir's answers, allowing only what the report
/// lists: `allowed`, then what differs wherever Caddy answers.
fn same(what: &str, cd: &Answer, w: &Answer, report: &str, allowed: &[Allowed]) {
    let all: Vec<Allowed> = allowed.iter().chain(CADDY_DIFFERS).copied().collect();
    same_as(what, cd, w, report, "Caddy's own pages", &all);
}

/// What one upstream received: path and query, Host, X-Forwarded-*.
fn received(ups: &[&Upstream], before: &[usize]) -> Vec<Vec<String>> {
    let mut v = Vec::new();
    for (u, b) in ups.iter().zip(before) {
        for s in &u.seen()[*b..] {
            // Active health checks come when they please.
            if s.uri == "/health" {
                continue;
            }
            let mut row = vec![u.name.clone(), s.method.clone(), s.uri.clone()];
            for h in [
                "host",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-forwarded-host",
                "forwarded",
                "via",
            ] {
                let val = s.headers.get(h).map(|v| v.to_str().unwrap().to_string());
                row.push(format!("{h}: {val:?}"));
            }
            v.push(row);
        }
    }
    v
}

/// The three sites of Caddy's documentation patterns: a static site with
/// `encode` and a `header` snippet, a `redir` site, and an application
/// with a matched `reverse_proxy`, `handle_path`, `basicauth` and a
/// catch-all `reverse_proxy`; and Hosts no site names.
#[tokio::test]
async fn three_sites_answer_as_caddy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let www = dir.join("www");
    for d in ["dir", "txt", "empty", "img"] {
        std::fs::create_dir_all(www.join(d)).unwrap();
    }
    std::fs::write(www.join("index.html"), "<h1>example</h1>\n").unwrap();
    std::fs::write(www.join("dir/index.html"), "dir index\n").unwrap();
    std::fs::write(www.join("txt/index.txt"), "a text index\n").unwrap();
    std::fs::write(www.join("a.txt"), "plain text\n").unwrap();
    std::fs::write(www.join("mid.txt"), "m".repeat(700)).unwrap();
    std::fs::write(www.join("style.css"), "body { color: red }\n".repeat(200)).unwrap();
    // A sidecar Caddy does not serve without `precompressed`.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"a stale sidecar\n").unwrap();
    std::fs::write(www.join("style.css.gz"), gz.finish().unwrap()).unwrap();
    let png: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(www.join("img/x.png"), &png).unwrap();
    std::fs::write(www.join(".hidden"), "secret\n").unwrap();
    let statics = dir.join("static");
    std::fs::create_dir_all(statics.join("sub")).unwrap();
    std::fs::write(statics.join("s.txt"), "a static file\n").unwrap();
    std::fs::write(statics.join("sub/index.html"), "sub index\n").unwrap();

    let app = Upstream::start_on("app", &format!("127.0.0.1:{}", free_port())).await;
    let p1 = Upstream::start_on("pool", &format!("127.0.0.1:{}", free_port())).await;
    let p2 = Upstream::start_on("pool", &format!("127.0.0.1:{}", free_port())).await;

    let src = std::fs::read_to_string(corpus("caddy/three-sites/Caddyfile")).unwrap();
    let (cd_port, weir_port) = (free_port(), free_port());
    let conf = |port: u16, name: &str| -> PathBuf {
        let mut text = test_globals(&src);
        for site in ["example.com", "www.example.com", "app.example.com"] {
            text = text.replace(
                &format!("\n{site} {{"),
                &format!("\nhttp://{site}:{port} {{"),
            );
        }
        let text = text
            .replace("/var/www/example", &www.display().to_string())
            .replace("/srv/app/static", &statics.display().to_string())
            .replace("localhost:9000", &app.addr.to_string())
            .replace("localhost:9001", &p1.addr.to_string())
            .replace("localhost:9002", &p2.addr.to_string());
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cd_conf = conf(cd_port, "Caddyfile");
    let weir_conf = conf(weir_port, "for-weir.Caddyfile");
    let _cd = Caddy::start(dir, &cd_conf, cd_port);

    let out = dir.join("weir.toml");
    let (code, report) = import_as("caddy", &weir_conf, &out, &[]);
    assert_eq!(
        code, 3,
        "approximations are reported with exit 3:\n{report}"
    );
    let toml = std::fs::read_to_string(&out).unwrap();
    assert!(
        toml.contains(&format!("[site.\":{weir_port}\"]\n")),
        "a catch-all for Hosts no site names:\n{toml}"
    );
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let gzip: &[(&str, &str)] = &[("accept-encoding", "gzip")];
    let both: &[(&str, &str)] = &[("accept-encoding", "gzip, zstd")];
    let q: &[(&str, &str)] = &[("accept-encoding", "zstd;q=0.5, gzip")];
    // alice's password in Caddy's documentation is "hiccup".
    let alice: &[(&str, &str)] = &[("authorization", "Basic YWxpY2U6aGljY3Vw")];
    let wrong: &[(&str, &str)] = &[("authorization", "Basic YWxpY2U6d3Jvbmc=")];
    let site = Some("example.com");
    let www_host = Some("www.example.com");
    let app_host = Some("app.example.com");
    let requests: Vec<Req<'_>> = vec![
        ("GET", "/", site, &[]),
        ("GET", "/index.html", site, &[]),
        ("HEAD", "/index.html", site, &[]),
        ("GET", "/a.txt", site, &[]),
        ("GET", "/a.txt?x=1", site, gzip),
        ("GET", "/mid.txt", site, gzip),
        ("GET", "/style.css", site, &[]),
        ("GET", "/style.css", site, gzip),
        ("GET", "/style.css", site, both),
        ("GET", "/style.css", site, q),
        ("GET", "/img/x.png", site, gzip),
        ("GET", "/dir/", site, &[]),
        ("GET", "/dir", site, &[]),
        ("GET", "/dir?q=1", site, &[]),
        ("GET", "/txt/", site, &[]),
        ("GET", "/empty/", site, &[]),
        ("GET", "/missing", site, &[]),
        ("GET", "/.hidden", site, &[]),
        ("GET", "/", www_host, &[]),
        ("GET", "/a/b?x=1", www_host, &[]),
        ("GET", "/", app_host, &[]),
        ("GET", "/users?id=2", app_host, &[]),
        ("GET", "/api/users?page=2", app_host, &[]),
        ("POST", "/api/users", app_host, &[]),
        ("DELETE", "/api/users", app_host, &[]),
        ("GET", "/apix", app_host, &[]),
        ("GET", "/static/s.txt", app_host, &[]),
        ("GET", "/static/sub/", app_host, &[]),
        ("GET", "/static/sub", app_host, &[]),
        ("GET", "/static/missing", app_host, &[]),
        ("GET", "/admin/x", app_host, &[]),
        ("GET", "/admin/x", app_host, wrong),
        ("GET", "/admin/x?y=1", app_host, alice),
        ("GET", "/", Some("other.example"), &[]),
        ("GET", "/a.txt", Some("other.example"), &[]),
        ("GET", "/", None, &[]),
    ];
    let ups = [&app, &p1, &p2];
    let c = no_redirects();
    for req in requests {
        let what = format!("{} {} (Host {:?}, {:?})", req.0, req.1, req.2, req.3);
        let counts = || ups.iter().map(|u| u.count()).collect::<Vec<_>>();
        let before = counts();
        let cd = ask(&c, cd_port, req).await;
        let cd_seen = received(&ups, &before);
        let before = counts();
        let w = ask(&c, weir_port, req).await;
        let w_seen = received(&ups, &before);
        same(&what, &cd, &w, &report, FILES);
        assert_eq!(cd_seen, w_seen, "{what}: what the upstreams received");
    }
}

/// The answer of the test's script with `info=` (PATH_INFO) emptied.
fn without_path_info(body: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(body);
    match (s.find(" info="), s.find(" query=")) {
        (Some(i), Some(q)) if i < q => format!("{} info={}", &s[..i], &s[q..]).into_bytes(),
        _ => body.to_vec(),
    }
}

/// Caddy's PHP pattern: `php_fastcgi` to Debian's php-fpm on a Unix
/// socket, `file_server` and `encode gzip` beside it.
#[tokio::test]
async fn php_answers_as_caddy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = dir.join("public");
    for d in ["sub", "html"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let show = "<?php echo $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['REQUEST_URI'], ' script=', $_SERVER['SCRIPT_NAME'], ' file=', basename($_SERVER['SCRIPT_FILENAME']), ' info=', $_SERVER['PATH_INFO'] ?? '-', ' query=', $_SERVER['QUERY_STRING'], \"\\n\";";
    std::fs::write(root.join("index.php"), format!("front {show}")).unwrap();
    std::fs::write(root.join("info.php"), format!("info {show}")).unwrap();
    std::fs::write(root.join("sub/index.php"), format!("sub {show}")).unwrap();
    std::fs::write(root.join("html/index.html"), "an html index\n").unwrap();
    std::fs::write(root.join("a.txt"), "plain text\n").unwrap();
    std::fs::write(root.join("style.css"), "p { margin: 0 }\n".repeat(100)).unwrap();
    let sock = dir.join("fpm.sock");
    let _fpm = crate::php::PhpFpm::start(&sock.display().to_string(), 4);

    let src = std::fs::read_to_string(corpus("caddy/php/Caddyfile")).unwrap();
    let (cd_port, weir_port) = (free_port(), free_port());
    let conf = |port: u16, name: &str| -> PathBuf {
        let text = test_globals(&src)
            .replace("\nlocalhost {", &format!("\nhttp://localhost:{port} {{"))
            .replace("\ttls internal\n", "")
            .replace("/srv/public", &root.display().to_string())
            .replace(
                "unix//run/php/php8.2-fpm.sock",
                &format!("unix/{}", sock.display()),
            );
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cd_conf = conf(cd_port, "Caddyfile");
    let weir_conf = conf(weir_port, "for-weir.Caddyfile");
    let _cd = Caddy::start(dir, &cd_conf, cd_port);
    let out = dir.join("weir.toml");
    let (code, report) = import_as("caddy", &weir_conf, &out, &[]);
    assert_eq!(code, 3, "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let gzip: &[(&str, &str)] = &[("accept-encoding", "gzip")];
    let host = Some("localhost");
    let requests: Vec<Req<'_>> = vec![
        ("GET", "/", host, &[]),
        ("GET", "/index.php", host, &[]),
        ("GET", "/hello/world?x=1", host, &[]),
        ("POST", "/form", host, &[]),
        ("GET", "/info.php", host, &[]),
        ("GET", "/info.php/extra/path?y=2", host, &[]),
        ("GET", "/sub/", host, &[]),
        ("GET", "/sub", host, &[]),
        ("GET", "/html/", host, &[]),
        ("GET", "/html", host, &[]),
        ("GET", "/missing.php", host, &[]),
        ("GET", "/a.txt", host, &[]),
        ("GET", "/style.css", host, gzip),
        ("GET", "/", host, gzip),
    ];
    // How weir's PHP routes differ from php_fastcgi's try_files.
    let php: &[Allowed] = &[
        ("with the path as PATH_INFO in weir", |_, cd, w| {
            cd.status == 200
                && w.status == 200
                && cd.body.starts_with(b"front ")
                && without_path_info(&w.body) == cd.body
        }),
        (
            "a `.php` path that names no script goes to index.php in Caddy and gets 404 in weir",
            |what, cd, w| what.contains(".php ") && cd.status == 200 && w.status == 404,
        ),
        (
            "a directory without index.php goes to index.php in Caddy, to its own index file (asked without its slash: a 308 first) in weir",
            |what, cd, w| {
                what.contains("/html")
                    && cd.body.starts_with(b"front ")
                    && (w.status == 308 || w.body.starts_with(b"an html index"))
            },
        ),
    ];
    let allowed: Vec<Allowed> = FILES.iter().chain(php).copied().collect();
    let c = no_redirects();
    for req in requests {
        let what = format!("{} {} ({:?})", req.0, req.1, req.3);
        let cd = ask(&c, cd_port, req).await;
        let w = ask(&c, weir_port, req).await;
        same(&what, &cd, &w, &report, &allowed);
    }
}
