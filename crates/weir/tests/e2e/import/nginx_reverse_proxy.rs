//! `weir import nginx` of a load-balancing reverse proxy (upstreams with
//! weights and a backup, limit_req, basic auth behind an allow list)
//! proved against nginx itself: the corpus's reverse-proxy config runs in
//! `/usr/sbin/nginx` and, imported, in weir, in front of the same test
//! upstreams; the same requests go to both and the answers, and what the
//! upstreams receive, must agree, except where the import's report says
//! how weir differs. A missing nginx fails the test: it never skips.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Upstream, Weir};

use super::{Answer, Nginx, ask_headers, corpus, import_allow_open, same, temp_paths};
use crate::WEIR;

/// The users of the corpus's htpasswd with hashes of known passwords:
/// alice's bcrypt (which both check), bob's Apache MD5 (nginx only).
const HTPASSWD: &str = "alice:$2y$05$X4uSEn40Zj5H6y24RxadxuxqMuYwrJncCV6e8Jwe2OD1QtA3Ff8DO\n\
                        bob:$apr1$6oYt1RS2$/fYFH5gYfRnOa4jpCPb1N0\n";
const ALICE: &str = "Basic YWxpY2U6YWxpY2Utc2VjcmV0"; // alice:alice-secret
const ALICE_WRONG: &str = "Basic YWxpY2U6d3Jvbmc="; // alice:wrong
const BOB: &str = "Basic Ym9iOmJvYi1zZWNyZXQ="; // bob:bob-secret

/// The response fields the config sets (or that its auth and limits make).
const SET: &[&str] = &["strict-transport-security", "www-authenticate"];

/// The request fields a proxied request is compared by.
const SENT: &[&str] = &[
    "host",
    "x-real-ip",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "authorization",
];

/// A client whose connections come from `ip` (any of 127/8 reaches loopback).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// What one request did upstream: which upstream took it, the request
/// line and the compared fields.
type Sent = Vec<(String, String, String, Vec<(String, String)>)>;

struct Ups<'a>(&'a [&'a Upstream]);

impl Ups<'_> {
    fn counts(&self) -> Vec<usize> {
        self.0.iter().map(|u| u.count()).collect()
    }

    /// What reached the upstreams since `before`, `port` written as PORT.
    fn since(&self, before: &[usize], port: u16) -> Sent {
        let mut v = Vec::new();
        for (u, b) in self.0.iter().zip(before) {
            for s in &u.seen()[*b..] {
                let fields = SENT
                    .iter()
                    .filter_map(|n| {
                        // Lines of one field joined, as HTTP reads them.
                        let all: Vec<&str> = s
                            .headers
                            .get_all(*n)
                            .iter()
                            .map(|h| h.to_str().unwrap())
                            .collect();
                        (!all.is_empty()).then(|| {
                            let v = all.join(", ").replace(&port.to_string(), "PORT");
                            (n.to_string(), v)
                        })
                    })
                    .collect();
                v.push((u.name.clone(), s.method.clone(), s.uri.clone(), fields));
            }
        }
        v
    }
}

/// One field of what an upstream received, for every request sent.
fn field<'a>(sent: &'a Sent, name: &str) -> Vec<Option<&'a str>> {
    sent.iter()
        .map(|(_, _, _, f)| f.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()))
        .collect()
}

/// weir's Basic challenge names its charset (RFC 7617), nginx's does not:
/// the report must say so; the rest of the field must agree.
fn challenge(n: &Answer, w: &mut Answer, report: &str) {
    let auth = |a: &Answer| {
        a.set
            .iter()
            .position(|(k, _)| k == "www-authenticate")
            .map(|i| (i, a.set[i].1.clone()))
    };
    if let (Some((_, nv)), Some((i, wv))) = (auth(n), auth(w))
        && wv == format!("{nv}, charset=\"UTF-8\"")
    {
        assert!(
            report.contains("charset=\"UTF-8\"` (RFC 7617); nginx's has no charset"),
            "{report}"
        );
        w.set[i].1 = nv;
    }
}

/// Until `addr` refuses connections (a killed upstream's listener closes
/// when its task is next polled).
async fn refused(addr: std::net::SocketAddr) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{addr} still accepts"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reverse_proxy_answers_as_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("htpasswd"), HTPASSWD).unwrap();
    let up = |name: &'static str| async move {
        Upstream::start_on(name, &format!("127.0.0.1:{}", free_port())).await
    };
    // The two balanced servers answer alike (by the group's name), so an
    // answer does not depend on which one took it; what each received is
    // compared apart.
    let (b1, b2, backup, api, ws) = (
        up("backend").await,
        up("backend").await,
        up("backup").await,
        up("api").await,
        up("ws").await,
    );
    let all = [&b1, &b2, &backup, &api, &ws];
    let ups = Ups(&all);

    let (ng_port, weir_port) = (free_port(), free_port());
    let src = std::fs::read_to_string(corpus("nginx/reverse-proxy/nginx.conf")).unwrap();
    // Loopback test ports and upstreams, a temporary prefix, no TLS listener
    // (no certificate here: TLS is not what this compares), and the allow
    // list naming the test's own client address (127.0.0.1; the refused
    // client comes from 127.0.0.2) instead of 10.0.0.0/8.
    let conf = |port: u16, name: &str| -> PathBuf {
        let mut text = src
            .replace("listen 80;", &format!("listen 127.0.0.1:{port};"))
            .replace("listen 443 ssl;", "")
            .replace("ssl_certificate /etc/ssl/certs/app.pem;", "")
            .replace("ssl_certificate_key /etc/ssl/private/app.key;", "")
            .replace("allow 10.0.0.0/8;", "allow 127.0.0.1;")
            .replace("http {\n", &temp_paths(dir));
        for (i, u) in all.iter().enumerate() {
            text = text.replace(&format!("127.0.0.1:900{}", i + 1), &u.addr.to_string());
        }
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ng_conf = conf(ng_port, "nginx.conf");
    let weir_conf = conf(weir_port, "for-weir.conf");
    let _ng = Nginx::start(dir, &ng_conf, ng_port);
    let out = dir.join("weir.toml");
    // An access rule is approximated (limit_conn counts requests, not connections): exit 4 and fail closed first.
    let report = import_allow_open("nginx", &weir_conf, &out);
    let toml = std::fs::read_to_string(&out).unwrap();
    let _w = Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &toml, &[weir_port]);

    let local = client_from("127.0.0.1");
    let outsider = client_from("127.0.0.2");
    let app = "app.example.com";
    // Asks both, returns both answers and what the upstreams received.
    let both = async |c: &reqwest::Client,
                      method: &str,
                      path: &str,
                      host: &str,
                      fields: &[(&str, &str)]|
           -> (Answer, Answer, Sent, Sent) {
        let before = ups.counts();
        let h = host.replace("PORT", &ng_port.to_string());
        let n = ask_headers(c, ng_port, method, path, Some(&h), fields, SET).await;
        let n_sent = ups.since(&before, ng_port);
        let before = ups.counts();
        let h = host.replace("PORT", &weir_port.to_string());
        let mut w = ask_headers(c, weir_port, method, path, Some(&h), fields, SET).await;
        let w_sent = ups.since(&before, weir_port);
        challenge(&n, &mut w, &report);
        (n, w, n_sent, w_sent)
    };

    // Requests answered alike, and alike upstream.
    let admin: &[(&str, &str)] = &[("authorization", ALICE)];
    for (c, method, path, host, fields) in [
        (&local, "GET", "/", "www.example.com", &[][..]),
        (&local, "GET", "/a/b?c=d", "www.example.com", &[]),
        (&local, "GET", "/", app, &[]),
        (&local, "GET", "/a/b?c=d", app, &[]),
        (&local, "POST", "/form", app, &[]),
        (&local, "HEAD", "/x", app, &[]),
        (&local, "GET", "/api/items?page=2", app, &[]),
        (&local, "GET", "/ws/chat", app, &[]),
        (&local, "GET", "/old/page?x=1", app, &[]),
        (&local, "GET", "/admin/", app, &[]),
        (
            &local,
            "GET",
            "/admin/",
            app,
            &[("authorization", ALICE_WRONG)],
        ),
        (&local, "GET", "/admin/users?id=1", app, admin),
        (&outsider, "GET", "/admin/", app, &[]),
        (&outsider, "GET", "/admin/", app, admin),
    ] {
        let what = format!("{method} {path} (Host {host}, fields {fields:?})");
        let (n, w, n_sent, w_sent) = both(c, method, path, host, fields).await;
        same(&what, &n, &w, &report);
        assert_eq!(n_sent, w_sent, "{what}: what the upstreams received");
    }

    // Differences the report names.
    // nginx's $host drops the port the client's Host had; weir passes it.
    let (n, w, n_sent, w_sent) = both(&local, "GET", "/p", "app.example.com:PORT", &[]).await;
    same("Host with a port", &n, &w, &report);
    assert_eq!(field(&n_sent, "host"), [Some("app.example.com")]);
    assert_eq!(field(&w_sent, "host"), [Some("app.example.com:PORT")]);
    assert!(report.contains("weir passes the client's Host as it came, with its port"));
    // $proxy_add_x_forwarded_for appends to the client's X-Forwarded-For:
    // in the same field in nginx, as a field of its own in weir.
    let xff = [("x-forwarded-for", "203.0.113.9")];
    let (n, w, n_sent, w_sent) = both(&local, "GET", "/p", app, &xff).await;
    same("a client's X-Forwarded-For", &n, &w, &report);
    assert_eq!(n_sent, w_sent, "a client's X-Forwarded-For: upstream");
    assert_eq!(
        field(&n_sent, "x-forwarded-for"),
        [Some("203.0.113.9, 127.0.0.1")]
    );
    assert!(report.contains("nginx joins both in one field"));
    // bob's Apache MD5 hash: nginx checks it, weir left bob out.
    let (n, w, _, _) = both(&local, "GET", "/admin/", app, &[("authorization", BOB)]).await;
    assert_eq!((n.status, w.status), (200, 401), "bob");
    assert!(report.contains("user bob [access, kept closed]: its hash is not bcrypt or argon2"));
    // `if ($http_user_agent ~* badbot)`: no regex on fields in weir.
    let bot = [("user-agent", "Mozilla BadBot/1.0")];
    let (n, w, _, _) = both(&local, "GET", "/", app, &bot).await;
    assert_eq!((n.status, w.status), (403, 200), "badbot");
    assert!(report.contains("weir's `match` compares exact values, not regexes"));

    // Balancing: weight 3 and 1, least_conn; one request at a time, so
    // every pick is a tie nginx breaks by weight.
    let mut spread = Vec::new();
    for port in [ng_port, weir_port] {
        let before = ups.counts();
        for i in 0..8 {
            let path = format!("/spread/{i}");
            let a = ask_headers(&local, port, "GET", &path, Some(app), &[], SET).await;
            assert_eq!(a.status, 200, "{path} on port {port}");
        }
        let after = ups.counts();
        spread.push((after[0] - before[0], after[1] - before[1]));
    }
    assert_eq!(spread[0], (6, 2), "nginx: by weight");
    let (ng_spread, w_spread) = (spread[0], spread[1]);
    assert!(
        w_spread.0 >= 1 && w_spread.1 >= 1 && w_spread.0.abs_diff(ng_spread.0) <= 2,
        "8 requests over weights 3 and 1: nginx {ng_spread:?}, weir {w_spread:?}"
    );

    // limit_req: rate 10r/s, burst 20, nodelay. Asked from a client address
    // of its own (the zone is per address), one request at a time until the
    // first refusal.
    let limited = client_from("127.0.0.3");
    let mut passed = Vec::new();
    for port in [ng_port, weir_port] {
        let start = Instant::now();
        let mut n = 0usize;
        let refusal = loop {
            let a = ask_headers(&limited, port, "GET", "/api/burst", Some(app), &[], SET).await;
            if a.status != 200 {
                break a;
            }
            n += 1;
            assert!(n < 200, "no refusal after {n} requests to port {port}");
        };
        passed.push((n, start.elapsed(), refusal));
    }
    let (ng_n, ng_t, ng_refusal): &(usize, Duration, Answer) = &passed[0];
    let (w_n, w_t, w_refusal): &(usize, Duration, Answer) = &passed[1];
    assert_eq!(ng_refusal.status, 503, "limit_req_status's default");
    assert_eq!(w_refusal.status, ng_refusal.status, "the refusal's status");
    assert_eq!(w_refusal.set, ng_refusal.set, "the refusal's fields");
    // Each second of asking lets 10 more through.
    let slack = 2 + ((*ng_t).max(*w_t).as_secs_f64() * 10.0).ceil() as usize;
    assert!(
        ng_n.abs_diff(*w_n) <= slack,
        "requests before the first refusal: nginx {ng_n} in {ng_t:?}, weir {w_n} in {w_t:?}"
    );
    assert!((21..=21 + slack).contains(ng_n), "nginx let {ng_n} through");
    assert!(report.contains("weir's refusal carries Retry-After and its own body"));

    // Upstreams going down: one of the balanced two (the other answers),
    // both (nginx's backup answers; weir has none), the API's only one.
    b1.kill();
    refused(b1.addr).await;
    for i in 0..4 {
        let path = format!("/one-down/{i}");
        let (n, w, n_sent, w_sent) = both(&local, "GET", &path, app, &[]).await;
        same(&path, &n, &w, &report);
        assert_eq!(n_sent, w_sent, "{path}: what the upstreams received");
    }
    b2.kill();
    refused(b2.addr).await;
    let (n, w, n_sent, _) = both(&local, "GET", "/both-down", app, &[]).await;
    assert_eq!((n.status, w.status), (200, 502), "both down");
    assert_eq!(n_sent[0].0, "backup");
    assert!(report.contains("weir has no backup servers"));
    api.kill();
    refused(api.addr).await;
    let (n, w, _, _) = both(&local, "GET", "/api/x", app, &[]).await;
    same("GET /api/x, its upstream down", &n, &w, &report);
    assert_eq!(n.status, 502);
}
