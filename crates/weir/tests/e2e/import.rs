//! `weir import nginx` proved against nginx itself: a corpus config runs in
//! Debian's `/usr/sbin/nginx` (on loopback test ports, in a temporary
//! prefix) and, imported, in weir; the same requests go to both and the
//! answers (status, `Location`, `Content-Type`, the headers the config sets,
//! body bytes, and what a proxied upstream receives) must agree, except
//! where the import's report says how weir differs. A missing nginx fails
//! the test: it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_test_support::ports::free_port;
use weir_test_support::process::Daemon;
use weir_test_support::proxy::{Upstream, Weir};

use crate::WEIR;

mod access;
mod apache;
mod caddy;
mod nginx_laravel;
mod nginx_reverse_proxy;
mod nginx_rewrite;
mod nginx_stream;
mod nginx_wordpress;

const NGINX: &str = "/usr/sbin/nginx";

/// nginx from a config file in `dir` (its prefix), stopped by PID on drop.
struct Nginx {
    _daemon: Daemon,
}

impl Nginx {
    fn start(dir: &Path, conf: &Path, port: u16) -> Nginx {
        let d = dir.display();
        let mut cmd = Command::new(NGINX);
        cmd.arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(conf)
            .args([
                "-g",
                &format!("daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log warn;"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let logs = [dir.join("error.log")];
        Nginx {
            _daemon: Daemon::start(cmd, port, "apt-get install nginx", &logs),
        }
    }
}

/// nginx's temporary paths inside the prefix (nginx needs them writable).
fn temp_paths(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "http {{\n    client_body_temp_path {d}/tmp/body;\n    proxy_temp_path {d}/tmp/proxy;\n    fastcgi_temp_path {d}/tmp/fastcgi;\n    uwsgi_temp_path {d}/tmp/uwsgi;\n    scgi_temp_path {d}/tmp/scgi;\n"
    )
}

fn corpus(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../weir-import/corpus")
        .join(p)
}

mod haproxy;

/// `weir import nginx CONF -o OUT`: its exit code and report.
fn import(conf: &Path, out: &Path) -> (i32, String) {
    import_as("nginx", conf, out, &[])
}

/// `weir import KIND CONF -o OUT [EXTRA…]`: its exit code and report.
fn import_as(kind: &str, conf: &Path, out: &Path, extra: &[&str]) -> (i32, String) {
    let o = Command::new(WEIR)
        .args(["import", kind])
        .arg(conf)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap_or(-1), report)
}

/// `weir import KIND CONF -o OUT` for a config with an access rule weir
/// cannot keep exactly: exit 4 and every site written refusing all
/// addresses; then with `--allow-open` (still exit 4), the approximated
/// config, whose report is returned for the differential.
fn import_allow_open(kind: &str, conf: &Path, out: &Path) -> String {
    let (code, report) = import_as(kind, conf, out, &[]);
    assert_eq!(
        code, 4,
        "an access rule not kept exactly exits 4:\n{report}"
    );
    let closed = std::fs::read_to_string(out).unwrap();
    assert!(
        closed.starts_with("# REFUSED: every site below answers 403"),
        "{closed}"
    );
    assert!(
        closed.contains("deny = [\"0.0.0.0/0\", \"::/0\"]"),
        "{closed}"
    );
    let (code, report) = import_as(kind, conf, out, &["--allow-open"]);
    assert_eq!(code, 4, "{report}");
    let open = std::fs::read_to_string(out).unwrap();
    assert!(
        open.starts_with("# WARNING: written with --allow-open"),
        "{open}"
    );
    assert!(!open.contains("deny = [\"0.0.0.0/0\", \"::/0\"]"), "{open}");
    report
}

/// What is compared of one answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    location: Option<String>,
    content_type: Option<String>,
    /// Headers the configs set.
    set: Vec<(String, String)>,
    body: Vec<u8>,
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
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
        &["x-static", "strict-transport-security"],
    )
    .await
}

/// One request; `set` names the response headers the configs set.
async fn ask_with(
    c: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    host: Option<&str>,
    set: &[&str],
) -> Answer {
    ask_headers(c, port, method, path, host, &[], set).await
}

/// One request with `headers` added.
async fn ask_headers(
    c: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    host: Option<&str>,
    headers: &[(&str, &str)],
    set: &[&str],
) -> Answer {
    let mut r = c.request(
        method.parse().unwrap(),
        format!("http://127.0.0.1:{port}{path}"),
    );
    if let Some(h) = host {
        r = r.header("host", h);
    }
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    let r = r.send().await.unwrap();
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

/// A difference the report explains: when the test holds of the request,
/// the other server's answer and weir's, the report must contain the
/// words, and the answer is not compared further.
type Allowed = (&'static str, fn(&str, &Answer, &Answer) -> bool);

/// Compares another server's answer to one request with weir's, allowing
/// only the differences the report lists: the first of `allowed` that
/// holds, the server's own error and redirect pages (`pages`: the report's
/// words for them), and `; charset=utf-8` on textual types.
fn same_as(
    what: &str,
    theirs: &Answer,
    w: &Answer,
    report: &str,
    pages: &str,
    allowed: &[Allowed],
) {
    let listed = |s: &str| {
        assert!(
            report.contains(s),
            "{what}: the report does not say `{s}`:\n{report}\ntheirs {theirs:?}\nweir {w:?}"
        )
    };
    if let Some((says, _)) = allowed.iter().find(|(_, holds)| holds(what, theirs, w)) {
        listed(says);
        return;
    }
    assert_eq!(
        theirs.status, w.status,
        "{what}: status (theirs {theirs:?}, weir {w:?})"
    );
    assert_eq!(theirs.location, w.location, "{what}: Location");
    assert_eq!(theirs.set, w.set, "{what}: fields the config sets");
    if theirs.status >= 300 {
        listed(pages);
        return;
    }
    if theirs.content_type != w.content_type {
        listed("charset=utf-8");
        assert_eq!(plain_type(theirs), plain_type(w), "{what}: Content-Type");
    }
    assert!(
        theirs.body == w.body,
        "{what}: body\ntheirs {}\nweir   {}",
        String::from_utf8_lossy(&theirs.body),
        String::from_utf8_lossy(&w.body)
    );
}

/// The answer's type without weir's `; charset=utf-8`.
fn plain_type(a: &Answer) -> Option<&str> {
    a.content_type
        .as_deref()
        .map(|c| c.trim_end_matches("; charset=utf-8"))
}

/// How weir's answers may differ from nginx's, with the report's words.
const NGINX_DIFFERS: &[Allowed] = &[
    // A directory asked without its slash.
    ("308", |_, ng, w| {
        ng.status == 301
            && w.status == 308
            && ng.location.as_deref().is_some_and(|l| {
                l.ends_with('/') && w.location.as_deref().is_some_and(|wl| l.ends_with(wl))
            })
    }),
    // A dot-file: weir refuses it.
    ("dot-files", |what, ng, w| {
        ng.status == 200 && w.status == 404 && what.contains("/.")
    }),
    // A `return 200 "text"`: nginx types it by the request's extension.
    (
        "names the answer's type from the request's extension",
        |_, ng, w| {
            ng.status == w.status
                && ng.status < 300
                && ng.location == w.location
                && ng.set == w.set
                && plain_type(ng) != plain_type(w)
                && ng.body == w.body
        },
    ),
];

/// Compares nginx's and weir's answers to one request, allowing only the
/// differences the report lists.
fn same(what: &str, ng: &Answer, w: &Answer, report: &str) {
    same_as(what, ng, w, report, "nginx's own pages", NGINX_DIFFERS);
}

/// Debian's own nginx.conf and default site, paths moved into a temporary prefix.
#[tokio::test]
async fn debian_default_site_answers_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("dir")).unwrap();
    std::fs::create_dir_all(www.join("img")).unwrap();
    std::fs::write(www.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(www.join("dir/index.htm"), "dir index\n").unwrap();
    std::fs::write(www.join("a.txt"), "plain text\n").unwrap();
    std::fs::write(www.join("style.css"), "body { color: red }\n").unwrap();
    let png: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(www.join("img/x.png"), &png).unwrap();
    std::fs::write(www.join(".hidden"), "secret\n").unwrap();

    let (ng_port, weir_port) = (free_port(), free_port());
    // Two copies of /etc/nginx, one listening where nginx will, one where weir will.
    let copy = |name: &str, port: u16| -> PathBuf {
        let etc = dir.join(name);
        let src = corpus("nginx/debian/etc/nginx");
        for sub in ["", "sites-enabled", "snippets", "conf.d", "modules-enabled"] {
            std::fs::create_dir_all(etc.join(sub)).unwrap();
            for e in std::fs::read_dir(src.join(sub)).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_file() {
                    let text = std::fs::read_to_string(e.path()).unwrap();
                    let text = text
                        .replace("/etc/nginx/", &format!("{}/", etc.display()))
                        .replace("/var/www/html", &www.display().to_string())
                        .replace("/var/log/nginx/", &format!("{}/", dir.display()))
                        .replace("pid /run/nginx.pid;", "")
                        .replace(
                            "listen 80 default_server;",
                            &format!("listen 127.0.0.1:{port} default_server;"),
                        )
                        .replace("listen [::]:80 default_server;", "")
                        .replace("http {\n", &temp_paths(dir));
                    std::fs::write(etc.join(sub).join(e.file_name()), text).unwrap();
                }
            }
        }
        etc.join("nginx.conf")
    };
    let ng_conf = copy("nginx", ng_port);
    let weir_conf = copy("weir-etc", weir_port);
    let _ng = Nginx::start(dir, &ng_conf, ng_port);

    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_conf, &out);
    assert_eq!(
        code, 3,
        "approximations are reported with exit 3:\n{report}"
    );
    assert!(report.contains("user www-data"), "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let wdir = tempfile::tempdir().unwrap();
    let _w = Weir::start_in(WEIR, wdir, &toml, &[weir_port]);

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
        ("GET", "/missing", None),
        ("GET", "/a.txt?x=1", Some("example.com")),
        ("GET", "/", Some("other.example")),
        ("GET", "/.hidden", None),
    ] {
        let what = format!("{method} {path} (Host {host:?})");
        let ng = ask(&c, ng_port, method, path, host).await;
        let w = ask(&c, weir_port, method, path, host).await;
        same(&what, &ng, &w, &report);
    }
}

/// nginx's location order, proxy_pass slash rules, alias and redirects.
#[tokio::test]
async fn locations_and_proxy_pass_answer_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("static/deep")).unwrap();
    std::fs::write(www.join("static/x.txt"), "static x\n").unwrap();
    std::fs::write(www.join("static/deep/y.txt"), "deep y\n").unwrap();
    let up = Upstream::start_on("up", &format!("127.0.0.1:{}", free_port())).await;

    let (ng_port, weir_port) = (free_port(), free_port());
    let src = std::fs::read_to_string(corpus("nginx/locations/nginx.conf")).unwrap();
    let conf = |port: u16, name: &str| -> PathBuf {
        let text = src
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
            .replace("127.0.0.1:9001", &up.addr.to_string())
            .replace("/srv/www", &www.display().to_string())
            .replace("http {\n", &temp_paths(dir));
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ng_conf = conf(ng_port, "nginx.conf");
    let weir_conf = conf(weir_port, "for-weir.conf");
    let _ng = Nginx::start(dir, &ng_conf, ng_port);
    let out = dir.join("weir.toml");
    let (code, report) = import(&weir_conf, &out);
    assert_eq!(code, 3, "{report}");
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let c = no_redirects();
    for path in [
        "/",
        "/index.html",
        "/documents/document.html",
        "/images/1.gif",
        "/documents/1.jpg",
        "/documents/1.JPG",
        "/static/x.txt",
        "/static/deep/y.txt",
        "/static/deep/z.gif",
        "/static/a.gif",
        "/exact",
        "/exact/more",
        "/files/x.txt",
        "/old/abc?q=1",
        "/moved",
        "/away?x=1",
        "/p1/a?b=1",
        "/p2/a?b=1",
        "/p3/a",
        "/p3",
        "/p4/a",
        "/p5/a",
        "/p6/x",
        // The upstream redirecting to itself: proxy_redirect default.
        "/p2/to-self/y?z=1",
    ] {
        let before = up.count();
        let ng = ask(&c, ng_port, "GET", path, None).await;
        let ng_seen: Vec<_> = up.seen()[before..]
            .iter()
            .map(|s| (s.uri.clone(), s.headers.get("host").cloned()))
            .collect();
        let before = up.count();
        let w = ask(&c, weir_port, "GET", path, None).await;
        let w_seen: Vec<_> = up.seen()[before..]
            .iter()
            .map(|s| (s.uri.clone(), s.headers.get("host").cloned()))
            .collect();
        same(&format!("GET {path}"), &ng, &w, &report);
        assert_eq!(ng_seen, w_seen, "GET {path}: what the upstream received");
    }
}
