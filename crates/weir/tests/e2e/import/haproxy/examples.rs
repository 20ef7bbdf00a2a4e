//! HAProxy's own example configs (`corpus/haproxy/examples`) run in
//! Debian's haproxy and, imported, in weir, in front of the same echo
//! upstreams: ACL routing to backends, what each backend receives, the
//! redirect to HTTPS, the headers the configs set, and the answers when a
//! backend's servers are all down. Each config is rewritten only where the
//! test machine needs it (said at each test); every difference found is
//! named by the import's report.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_test_support::certs::TestCa;
use weir_test_support::poll::poll_until_async;
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Upstream, Weir};

use super::Haproxy;
use crate::WEIR;
use crate::import::{corpus, import_as};

/// What is compared of one answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    location: Option<String>,
    content_type: Option<String>,
    /// The field `http-after-response set-header` sets.
    hsts: Option<String>,
    /// The name of the cookie the answer sets (`cookie … insert`).
    cookie: Option<String>,
    body: Vec<u8>,
}

/// One request (marked with `x-case` so the upstreams' health checks are
/// told apart from it); `port` is replaced by `PORT` in the fields.
async fn ask(
    c: &reqwest::Client,
    url: &str,
    port: u16,
    method: &str,
    headers: &[(&str, &str)],
    case: usize,
) -> Answer {
    let mut r = c
        .request(method.parse().unwrap(), url)
        .header("x-case", case.to_string());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if method == "POST" {
        r = r.body("name=x");
    }
    let r = r
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e:?}"));
    let field = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().replace(&port.to_string(), "PORT"))
    };
    Answer {
        status: r.status().as_u16(),
        location: field("location"),
        content_type: field("content-type"),
        hsts: field("strict-transport-security"),
        cookie: field("set-cookie").map(|c| c.split('=').next().unwrap_or("").to_string()),
        body: r.bytes().await.unwrap().to_vec(),
    }
}

/// What the upstreams received for request `case`: which backend, the
/// request line and the fields that tell a proxy's behaviour.
fn received(ups: &[&Upstream], case: usize, port: u16) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    for u in ups {
        for s in u.seen() {
            if s.headers.get("x-case").and_then(|v| v.to_str().ok()) != Some(&case.to_string()) {
                continue;
            }
            let all = |n: &str| {
                s.headers
                    .get_all(n)
                    .iter()
                    .map(|v| v.to_str().unwrap().replace(&port.to_string(), "PORT"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut v = vec![
                ("backend".to_string(), u.name.clone()),
                ("request".to_string(), format!("{} {}", s.method, s.uri)),
            ];
            for n in [
                "host",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-forwarded-host",
                "forwarded",
                "via",
                "cookie",
            ] {
                v.push((n.to_string(), all(n)));
            }
            out.push(v);
        }
    }
    out
}

/// A client that follows no redirects, patient with HAProxy's retries
/// (a second between tries on a refused connection).
fn patient(tls: Option<(&str, &str, u16)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30));
    if let Some((ca, host, port)) = tls {
        b = b
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
            .resolve(host, ([127, 0, 0, 1], port).into());
    }
    b.build().unwrap()
}

/// The same request to HAProxy and weir; compares the answers and what
/// the upstreams received. `allowed`: the report's words for a difference
/// this request shows (then the two need not agree).
#[allow(clippy::too_many_arguments)]
async fn same(
    c: &reqwest::Client,
    (hp_url, hp_port): (&str, u16),
    (w_url, w_port): (&str, u16),
    method: &str,
    headers: &[(&str, &str)],
    ups: &[&Upstream],
    report: &str,
    allowed: Option<&str>,
    case: &mut usize,
) -> (Answer, Answer) {
    let what = format!("{method} {hp_url} {headers:?}");
    let listed = |s: &str| {
        assert!(
            report.contains(s),
            "{what}: the report does not say `{s}`:\n{report}"
        )
    };
    *case += 1;
    let h = ask(c, hp_url, hp_port, method, headers, *case).await;
    let h_seen = received(ups, *case, hp_port);
    *case += 1;
    let w = ask(c, w_url, w_port, method, headers, *case).await;
    let w_seen = received(ups, *case, w_port);
    if let Some(says) = allowed {
        listed(says);
        assert!(
            h_seen != w_seen || h != w,
            "{what}: allowed to differ (`{says}`) but the same"
        );
        return (h, w);
    }
    assert_eq!(h_seen, w_seen, "{what}: what the upstreams received");
    assert_eq!(
        h.status, w.status,
        "{what}: status (haproxy {h:?}, weir {w:?})"
    );
    assert_eq!(h.location, w.location, "{what}: Location");
    assert_eq!(h.hsts, w.hsts, "{what}: Strict-Transport-Security");
    if h_seen.is_empty() {
        // An answer HAProxy made itself: its own page.
        listed("HAProxy's own pages");
        return (h, w);
    }
    assert_eq!(h.cookie, w.cookie, "{what}: the cookie set");
    if h.cookie.is_some() {
        listed("weir sets its own value in the cookie");
    }
    assert_eq!(h.content_type, w.content_type, "{what}: Content-Type");
    assert_eq!(h.body, w.body, "{what}: body");
    (h, w)
}

/// Writes the corpus config `name` with `edit` applied, twice: one copy
/// for HAProxy listening on `hp`, one for weir's import on `w`.
fn configs(
    dir: &Path,
    name: &str,
    edit: &dyn Fn(&str, &[u16]) -> String,
    hp: &[u16],
    w: &[u16],
) -> (PathBuf, PathBuf) {
    let src = std::fs::read_to_string(corpus(&format!("haproxy/examples/{name}"))).unwrap();
    let hp_conf = dir.join(name);
    let w_conf = dir.join(format!("for-weir-{name}"));
    std::fs::write(&hp_conf, edit(&src, hp)).unwrap();
    std::fs::write(&w_conf, edit(&src, w)).unwrap();
    (hp_conf, w_conf)
}

/// Imports `conf`, expecting approximations (exit 3), and starts weir.
fn import_and_start(dir: &Path, conf: &Path, ports: &[u16]) -> (String, Weir) {
    let out = dir.join(format!(
        "{}.toml",
        conf.file_name().unwrap().to_string_lossy()
    ));
    let (code, report) = import_as("haproxy", conf, &out, &[]);
    assert_eq!(
        code, 3,
        "approximations are reported with exit 3:\n{report}"
    );
    let toml = std::fs::read_to_string(&out).unwrap();
    let w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, ports);
    (report, w)
}

/// HAProxy's answer when no server of the backend can be reached (503)
/// and weir's (502 until its health checks mark them all down, then 503),
/// neither reaching an upstream.
fn unreachable(what: &str, h: &Answer, w: &Answer, report: &str) {
    assert_eq!(h.status, 503, "{what}: haproxy {h:?}");
    assert!(w.status == 503 || w.status == 502, "{what}: weir {w:?}");
    assert!(
        report.contains("weir answers 502 Bad Gateway when no server accepts the connection"),
        "{report}"
    );
    assert_eq!(h.hsts, w.hsts, "{what}: Strict-Transport-Security");
}

/// Waits until nothing listens at the killed upstreams any more.
async fn gone(ups: &[&Upstream]) {
    for u in ups {
        u.kill();
        let addr = u.addr;
        assert!(
            poll_until_async(Duration::from_secs(10), async || {
                tokio::net::TcpStream::connect(addr).await.is_err()
            })
            .await,
            "{addr} still accepts"
        );
    }
}

/// quick-test.cfg as it is, but for its addresses: `bind :8000` on a
/// loopback test port, server s1 an echo upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_test_answers_as_haproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let s1 = Upstream::start_on("s1", &format!("127.0.0.1:{}", free_port())).await;
    let ups = [&s1];
    let (hp, w) = (free_port(), free_port());
    let (hp_conf, w_conf) = configs(
        dir,
        "quick-test.cfg",
        &|t, p| {
            t.replace("bind :8000", &format!("bind 127.0.0.1:{}", p[0]))
                .replace("172.31.32.33:8000", &s1.addr.to_string())
        },
        &[hp],
        &[w],
    );
    let _hp = Haproxy::start(&hp_conf, hp);
    let (report, _w) = import_and_start(dir, &w_conf, &[w]);
    let c = patient(None);
    let mut case = 0;
    for (method, path, headers, allowed) in [
        ("GET", "/", vec![], None),
        ("GET", "/a/b?c=d&e", vec![], None),
        ("HEAD", "/x.html", vec![], None),
        ("POST", "/form", vec![], None),
        ("DELETE", "/items/3", vec![], None),
        ("GET", "/", vec![("host", "other.example")], None),
        ("GET", "/%7Euser/", vec![], None),
        // Without `option forwardfor` HAProxy passes a client's field on.
        (
            "GET",
            "/",
            vec![("x-forwarded-for", "203.0.113.9")],
            Some("weir drops the X-Forwarded-For, Forwarded and Via a client sends"),
        ),
    ] {
        let hp_url = format!("http://127.0.0.1:{hp}{path}");
        let w_url = format!("http://127.0.0.1:{w}{path}");
        same(
            &c,
            (&hp_url, hp),
            (&w_url, w),
            method,
            &headers,
            &ups,
            &report,
            allowed,
            &mut case,
        )
        .await;
    }
    // The only server down: HAProxy's 503 after its retries, weir's 502.
    gone(&ups).await;
    // New connections: a keep-alive connection whose server just died may
    // be closed by HAProxy as the next request goes out on it.
    let c = patient(None);
    let h = ask(&c, &format!("http://127.0.0.1:{hp}/"), hp, "GET", &[], 0).await;
    let wa = ask(&c, &format!("http://127.0.0.1:{w}/"), w, "GET", &[], 0).await;
    unreachable("GET / with s1 down", &h, &wa, &report);
}

/// content-sw-sample.cfg: `bind 192.168.1.10:80` on a loopback test port,
/// the six servers echo upstreams named by backend, the chroot a
/// temporary directory (/var/empty is not on this machine) and the stats
/// socket in it, and the global maxconn 4000, not 10000 (HAProxy needs
/// twice as many file descriptors, more than this machine allows). uid
/// 200 and the syslog target stay (the test runs as root; nothing listens
/// for the UDP log lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_switching_sample_answers_as_haproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("empty")).unwrap();
    let mut stat = Vec::new();
    for _ in 0..2 {
        stat.push(Upstream::start_on("static", &format!("127.0.0.1:{}", free_port())).await);
    }
    let mut dynamic = Vec::new();
    for _ in 0..4 {
        dynamic.push(Upstream::start_on("dynamic", &format!("127.0.0.1:{}", free_port())).await);
    }
    let ups: Vec<&Upstream> = stat.iter().chain(dynamic.iter()).collect();
    let d = dir.display().to_string();
    let edit = |t: &str, p: &[u16]| {
        let mut t = t
            .replace(
                "bind            192.168.1.10:80",
                &format!("bind 127.0.0.1:{}", p[0]),
            )
            .replace("chroot          /var/empty", &format!("chroot {d}/empty"))
            .replace("maxconn         10000", "maxconn         4000")
            .replace("/var/run/haproxy.stat", &format!("{d}/haproxy.stat"));
        for (i, u) in stat.iter().enumerate() {
            t = t.replace(&format!("192.168.1.{}:80", 8 + i), &u.addr.to_string());
        }
        for (i, u) in dynamic.iter().enumerate() {
            t = t.replace(&format!("192.168.1.{}:80", 1 + i), &u.addr.to_string());
        }
        t
    };
    let (hp, w) = (free_port(), free_port());
    let (hp_conf, w_conf) = configs(dir, "content-sw-sample.cfg", &edit, &[hp], &[w]);
    let _hp = Haproxy::start(&hp_conf, hp);
    let (report, _w) = import_and_start(dir, &w_conf, &[w]);
    let c = patient(None);
    let mut case = 0;
    for (method, path, headers, allowed) in [
        ("GET", "/", vec![], None),
        ("GET", "/login.php?user=a", vec![], None),
        ("POST", "/login.php", vec![], None),
        ("GET", "/img/logo.png", vec![], None),
        ("GET", "/css/site.css?v=2", vec![], None),
        ("HEAD", "/imgx", vec![], None),
        ("GET", "/IMG/a.png", vec![], None),
        ("GET", "/x", vec![("host", "www.example.com")], None),
        // hdr_beg(host) has no weir route condition: weir sends it to dynamic.
        (
            "GET",
            "/x",
            vec![("host", "img.example.com")],
            Some("`hdr_beg(host)` criterion with -i has no weir route condition"),
        ),
        ("GET", "/monitoruri", vec![], None),
        // HAProxy's stats page; weir has none and proxies the path.
        (
            "GET",
            "/admin/stats",
            vec![],
            Some("stats uri /admin/stats"),
        ),
    ] {
        let hp_url = format!("http://127.0.0.1:{hp}{path}");
        let w_url = format!("http://127.0.0.1:{w}{path}");
        let (h, wa) = same(
            &c,
            (&hp_url, hp),
            (&w_url, w),
            method,
            &headers,
            &ups,
            &report,
            allowed,
            &mut case,
        )
        .await;
        if path == "/monitoruri" {
            assert_eq!((h.status, wa.status), (200, 200));
        }
    }
    // The static servers down: 503 for /img and /css, dynamic still answers.
    gone(&ups[..2]).await;
    let c = patient(None);
    for path in ["/img/logo.png", "/css/a.css"] {
        let h = ask(
            &c,
            &format!("http://127.0.0.1:{hp}{path}"),
            hp,
            "GET",
            &[],
            0,
        )
        .await;
        let wa = ask(&c, &format!("http://127.0.0.1:{w}{path}"), w, "GET", &[], 0).await;
        unreachable(&format!("GET {path} with static down"), &h, &wa, &report);
    }
    let (h, _) = same(
        &c,
        (&format!("http://127.0.0.1:{hp}/"), hp),
        (&format!("http://127.0.0.1:{w}/"), w),
        "GET",
        &[],
        &ups,
        &report,
        None,
        &mut case,
    )
    .await;
    assert_eq!(h.status, 200);
}

/// basic-config-edge.cfg: the three binds on loopback test ports, the
/// four servers echo upstreams, pub1.pem a test CA's certificate and key
/// beside the config (`default-path config`), the chroot, pidfile and
/// stats socket in a temporary directory (/var/empty is not on this
/// machine). `user haproxy` and `zero-warning` stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_edge_config_answers_as_haproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("empty")).unwrap();
    let ca = TestCa::named("edge");
    let (cert, key) = ca.leaf(&["svc1.example.com"]);
    std::fs::write(dir.join("pub1.pem"), cert + &key).unwrap();
    let mut app = Vec::new();
    for _ in 0..4 {
        app.push(Upstream::start_on("app1", &format!("127.0.0.1:{}", free_port())).await);
    }
    let ups: Vec<&Upstream> = app.iter().collect();
    let d = dir.display().to_string();
    let edit = |t: &str, p: &[u16]| {
        let mut t = t
            .replace("bind :8181", &format!("bind 127.0.0.1:{}", p[0]))
            .replace("bind :80 ", &format!("bind 127.0.0.1:{} ", p[1]))
            .replace("bind :443 ", &format!("bind 127.0.0.1:{} ", p[2]))
            .replace("chroot /var/empty", &format!("chroot {d}/empty"))
            .replace("/var/run/", &format!("{d}/"));
        for (i, u) in app.iter().enumerate() {
            t = t.replace(&format!("192.0.2.{}:80", 1 + i), &u.addr.to_string());
        }
        t
    };
    let hp = [free_port(), free_port(), free_port()];
    let w = [free_port(), free_port(), free_port()];
    let (hp_conf, w_conf) = configs(dir, "basic-config-edge.cfg", &edit, &hp, &w);
    let _hp = Haproxy::start(&hp_conf, hp[2]);
    let (report, _w) = import_and_start(dir, &w_conf, &w);
    let plain = patient(None);
    let mut case = 0;
    // Port 80: everything to HTTPS, with HSTS.
    for (path, headers, allowed) in [
        ("/", vec![("host", "svc1.example.com")], None),
        ("/a/b?c=d", vec![("host", "svc1.example.com")], None),
        // HAProxy keeps the port the client put in Host; weir's {host} not.
        ("/p", vec![], Some("weir's {host} drops a port")),
    ] {
        let (h, _) = same(
            &plain,
            (&format!("http://127.0.0.1:{}{path}", hp[1]), hp[1]),
            (&format!("http://127.0.0.1:{}{path}", w[1]), w[1]),
            "GET",
            &headers,
            &ups,
            &report,
            allowed,
            &mut case,
        )
        .await;
        assert_eq!(h.status, 301, "{path}: {h:?}");
    }
    // Port 443: the app, the client's X-Forwarded-For replaced.
    let tls = |port| patient(Some((&ca.pem(), "svc1.example.com", port)));
    let (hp_c, w_c) = (tls(hp[2]), tls(w[2]));
    for (method, path, headers) in [
        ("GET", "/", vec![]),
        ("GET", "/a/b?c=d", vec![]),
        ("POST", "/form", vec![]),
        ("HEAD", "/x.css", vec![]),
        ("GET", "/", vec![("x-forwarded-for", "203.0.113.9")]),
    ] {
        let what = format!("{method} https {path} {headers:?}");
        let hp_url = format!("https://svc1.example.com:{}{path}", hp[2]);
        let w_url = format!("https://svc1.example.com:{}{path}", w[2]);
        case += 1;
        let h = ask(&hp_c, &hp_url, hp[2], method, &headers, case).await;
        let h_seen = received(&ups, case, hp[2]);
        case += 1;
        let wa = ask(&w_c, &w_url, w[2], method, &headers, case).await;
        let w_seen = received(&ups, case, w[2]);
        assert_eq!(h_seen, w_seen, "{what}: what the upstreams received");
        assert_eq!(h.status, wa.status, "{what}: haproxy {h:?}, weir {wa:?}");
        assert_eq!(h.hsts, wa.hsts, "{what}: Strict-Transport-Security");
        assert_eq!(h.cookie, wa.cookie, "{what}: the cookie set");
        assert_eq!(h.content_type, wa.content_type, "{what}: Content-Type");
        assert_eq!(h.body, wa.body, "{what}: body");
    }
    // The stats frontend: HAProxy's page; weir has none (503).
    let (h, wa) = same(
        &plain,
        (&format!("http://127.0.0.1:{}/", hp[0]), hp[0]),
        (&format!("http://127.0.0.1:{}/", w[0]), w[0]),
        "GET",
        &[],
        &ups,
        &report,
        Some("stats uri /"),
        &mut case,
    )
    .await;
    assert_eq!((h.status, wa.status), (200, 503));
    // All four servers down: 503 over HTTPS.
    gone(&ups).await;
    case += 1;
    let h = ask(
        &hp_c,
        &format!("https://svc1.example.com:{}/", hp[2]),
        hp[2],
        "GET",
        &[],
        case,
    )
    .await;
    case += 1;
    let wa = ask(
        &w_c,
        &format!("https://svc1.example.com:{}/", w[2]),
        w[2],
        "GET",
        &[],
        case,
    )
    .await;
    assert_eq!(h.hsts.as_deref(), Some("max-age=31536000"), "{h:?}");
    unreachable("GET https / with app1 down", &h, &wa, &report);
    assert!(report.contains("HAProxy's own pages"), "{report}");
}
