//! `weir import haproxy` proved against HAProxy itself: the rate-limit
//! corpus config (one frontend, three backends, ACLs, `http-request`
//! answers, basic authentication, `option forwardfor`, a stick-table rate
//! limit) runs in Debian's `/usr/sbin/haproxy` (`-db`, on loopback test
//! ports) and, imported, in weir, in front of the same three upstreams.
//! The same requests go to both; status, `Location`, `Content-Type`,
//! `Cache-Control`, `WWW-Authenticate`, body bytes and what each upstream
//! received (request line, `Host`, `X-Forwarded-For` and the fields the
//! config sets) must agree, except where the report lists the difference.
//! A missing haproxy fails the test: it never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use weir_test_support::ports::free_port;
use weir_test_support::process::Daemon;
use weir_test_support::proxy::{Upstream, Weir};

use super::{corpus, import_allow_open, no_redirects};
use crate::WEIR;

mod examples;
mod sni;

const HAPROXY: &str = "/usr/sbin/haproxy";

/// haproxy in the foreground (`-db`), stopped by PID on drop.
struct Haproxy {
    _daemon: Daemon,
}

impl Haproxy {
    fn start(conf: &Path, port: u16) -> Haproxy {
        let mut cmd = Command::new(HAPROXY);
        cmd.arg("-f")
            .arg(conf)
            .arg("-db")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        Haproxy {
            _daemon: Daemon::start(cmd, port, "apt-get install haproxy", &[]),
        }
    }
}

/// What is compared of one answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    location: Option<String>,
    content_type: Option<String>,
    cache_control: Option<String>,
    www_authenticate: Option<String>,
    body: Vec<u8>,
}

async fn ask(
    c: &reqwest::Client,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut r = c.request(
        method.parse().unwrap(),
        format!("http://127.0.0.1:{port}{path}"),
    );
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if method == "POST" {
        r = r.body("name=x");
    }
    let r = r.send().await.unwrap();
    let field = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().replace(&port.to_string(), "PORT"))
    };
    Answer {
        status: r.status().as_u16(),
        location: field("location"),
        content_type: field("content-type"),
        cache_control: field("cache-control"),
        www_authenticate: field("www-authenticate"),
        body: r.bytes().await.unwrap().to_vec(),
    }
}

/// What the upstreams received since `before`: who, the request line and
/// the fields that tell a proxy's behaviour.
fn received(ups: &[&Upstream], before: &[usize], port: u16) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (u, b) in ups.iter().zip(before) {
        for s in &u.seen()[*b..] {
            let all = |n: &str| {
                s.headers
                    .get_all(n)
                    .iter()
                    .map(|v| v.to_str().unwrap().replace(&port.to_string(), "PORT"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut v = vec![
                ("upstream".to_string(), u.name.clone()),
                ("request".to_string(), format!("{} {}", s.method, s.uri)),
            ];
            for n in [
                "host",
                "x-forwarded-for",
                "x-forwarded-proto",
                "x-forwarded-host",
                "forwarded",
                "via",
                "x-frontend",
                "x-api",
                "authorization",
            ] {
                v.push((n.to_string(), all(n)));
            }
            out.push(v);
        }
    }
    out
}

#[tokio::test]
async fn rate_limited_frontend_answers_as_haproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let app = Upstream::start_on("app", &format!("127.0.0.1:{}", free_port())).await;
    let api = Upstream::start_on("api", &format!("127.0.0.1:{}", free_port())).await;
    let stat = Upstream::start_on("static", &format!("127.0.0.1:{}", free_port())).await;
    let ups = [&app, &api, &stat];

    let (hp_port, weir_port) = (free_port(), free_port());
    let src = std::fs::read_to_string(corpus("haproxy/rate-limit/haproxy.cfg")).unwrap();
    let conf = |port: u16, name: &str| -> PathBuf {
        let text = src
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
            .replace("127.0.0.1:9001", &app.addr.to_string())
            .replace("127.0.0.1:9002", &api.addr.to_string())
            .replace("127.0.0.1:9003", &stat.addr.to_string());
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let hp_conf = conf(hp_port, "haproxy.cfg");
    let weir_conf = conf(weir_port, "for-weir.cfg");
    let _hp = Haproxy::start(&hp_conf, hp_port);
    let out = dir.join("weir.toml");
    // The stick-table rate's window is weir's own: an access difference.
    let report = import_allow_open("haproxy", &weir_conf, &out);
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);
    let listed = |s: &str, what: &str| {
        assert!(
            report.contains(s),
            "{what}: the report does not say `{s}`:\n{report}"
        )
    };

    // alice:secret, and a wrong password.
    let good = "Basic YWxpY2U6c2VjcmV0";
    let bad = "Basic YWxpY2U6d3Jvbmc=";
    let c = no_redirects();
    for (method, path, headers) in [
        ("GET", "/", vec![]),
        ("GET", "/index.html?x=1", vec![]),
        ("GET", "/api/users", vec![]),
        ("POST", "/api/items", vec![]),
        ("DELETE", "/api/items/3", vec![]),
        ("GET", "/API/users", vec![]),
        ("GET", "/style.css", vec![]),
        ("HEAD", "/app.js", vec![]),
        ("GET", "/img.PNG", vec![]),
        ("GET", "/", vec![("host", "static.example.com")]),
        ("GET", "/x", vec![("host", "STATIC.example.com")]),
        ("GET", "/private/x", vec![]),
        ("GET", "/privatex", vec![]),
        ("GET", "/old", vec![]),
        ("GET", "/old?q=1", vec![]),
        ("GET", "/older", vec![]),
        ("GET", "/x?y=1", vec![("host", "example.com")]),
        ("GET", "/admin/", vec![]),
        ("GET", "/admin/", vec![("authorization", bad)]),
        ("GET", "/admin/page", vec![("authorization", good)]),
        ("GET", "/", vec![("x-forwarded-for", "203.0.113.9")]),
        ("GET", "/api/x", vec![("x-forwarded-for", "203.0.113.9")]),
        ("GET", "/", vec![("x-frontend", "forged")]),
    ] {
        let what = format!("{method} {path} {headers:?}");
        let before: Vec<usize> = ups.iter().map(|u| u.count()).collect();
        let h = ask(&c, hp_port, method, path, &headers).await;
        let h_seen = received(&ups, &before, hp_port);
        let before: Vec<usize> = ups.iter().map(|u| u.count()).collect();
        let w = ask(&c, weir_port, method, path, &headers).await;
        let w_seen = received(&ups, &before, weir_port);
        assert_eq!(h_seen, w_seen, "{what}: what the upstream received");
        assert_eq!(
            h.status, w.status,
            "{what}: status (haproxy {h:?}, weir {w:?})"
        );
        assert_eq!(h.location, w.location, "{what}: Location");
        let w_auth = w.www_authenticate.as_ref().map(|a| {
            listed("charset=\"UTF-8\"", &what);
            a.replace(", charset=\"UTF-8\"", "")
        });
        assert_eq!(h.www_authenticate, w_auth, "{what}: WWW-Authenticate");
        if h_seen.is_empty() {
            // An answer HAProxy made itself: its own page.
            listed("HAProxy's own pages", &what);
            continue;
        }
        assert_eq!(h.content_type, w.content_type, "{what}: Content-Type");
        assert_eq!(h.cache_control, w.cache_control, "{what}: Cache-Control");
        assert_eq!(h.body, w.body, "{what}: body");
    }

    // The rate limit: 40 requests in 10 seconds, then 429 (the requests
    // above count). HAProxy estimates its rate over periods, weir counts a
    // sliding window (the report says so): a period boundary may let one
    // more through on either side.
    let mut allowed = Vec::new();
    for port in [hp_port, weir_port] {
        let mut n: u32 = 0;
        loop {
            let a = ask(&c, port, "GET", "/", &[]).await;
            if a.status == 429 {
                break;
            }
            assert_eq!(a.status, 200, "{a:?}");
            n += 1;
            assert!(n < 100, "no 429 after 100 requests on port {port}");
        }
        allowed.push(n);
    }
    listed("weir's window slides", "rate limit");
    assert!(
        allowed[0].abs_diff(allowed[1]) <= 1,
        "requests before the first 429: haproxy {}, weir {}",
        allowed[0],
        allowed[1]
    );
}
