//! The admin API as an operator uses it: each endpoint, exact metrics, the
//! live status page in a real browser, draining an upstream under load, the
//! requests it must refuse, where it listens and when it does not, and a
//! binary upgrade while new connections arrive.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use weir_bench::backend::{BackendConfig, start as backend};
use weir_bench::load::{LoadConfig, run as load};
use weir_test_support::poll::{PATIENCE, poll_until};
use weir_test_support::ports::free_port;
use weir_test_support::process::*;

use crate::WEIR;
use crate::reload::{admin, get};

/// Sum of a metric's series whose line contains every one of `with`.
fn metric(text: &str, name: &str, with: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && (l.as_bytes().get(name.len()) == Some(&b'{')))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn every_endpoint_answers_and_the_counts_are_exact() {
    let up = backend(&BackendConfig {
        listen: addr(0),
        size: 10,
        delay: Duration::ZERO,
        threads: 1,
    })
    .unwrap();
    let (adm, site, tls) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[admin]
listen = "127.0.0.1:{adm}"
[tls]
storage = "store"
[site."127.0.0.1:{site}"]
proxy = {{ to = ["127.0.0.1:{}"] }}
[[site."127.0.0.1:{site}".route]]
path = "/api/*"
proxy = {{ to = ["127.0.0.1:{}"] }}
[site."localhost:{tls}"]
tls = {{ issuer = "internal" }}
proxy = {{ to = ["127.0.0.1:{}"] }}
"#,
        up.addr.port(),
        up.addr.port(),
        up.addr.port()
    );
    let w = Weir::start_in(WEIR, dir, &config, &[adm, site, tls]);

    // GET /config: the text it runs.
    let (status, body) = admin(adm, "GET", "/config", "");
    assert_eq!(status, 200);
    assert_eq!(body, config);

    // Exact counts: 37 requests to the site, 5 to its route.
    for _ in 0..37 {
        assert_eq!(get(site, "/x").0, 200);
    }
    for _ in 0..5 {
        assert_eq!(get(site, "/api/y").0, 200);
    }
    assert_eq!(get(site, "/x?").0, 200);
    let (status, m) = admin(adm, "GET", "/metrics", "");
    assert_eq!(status, 200);
    let site_l = format!("site=\"127.0.0.1:{site}\"");
    assert_eq!(
        metric(&m, "weir_requests_total", &[&site_l, "route=\"*\""]),
        38,
        "{m}"
    );
    assert_eq!(
        metric(&m, "weir_requests_total", &[&site_l, "route=\"/api/*\""]),
        5
    );
    assert_eq!(
        metric(
            &m,
            "weir_requests_total",
            &[&site_l, "method=\"GET\"", "status=\"2xx\""]
        ),
        43
    );
    assert_eq!(
        metric(
            &m,
            "weir_request_duration_seconds_count",
            &[&site_l, "route=\"*\""]
        ),
        38
    );
    assert_eq!(metric(&m, "weir_upstream_requests_total", &[&site_l]), 43);
    assert!(m.contains("# TYPE weir_request_duration_seconds histogram"));
    assert_eq!(metric(&m, "weir_upstream_up", &[&site_l]), 2);
    // Labels come from the config: a request's path never becomes one.
    assert!(!m.contains("/x"), "a request path in the metrics");

    // GET /upstreams: both proxies' upstream, healthy and ready.
    let (status, body) = admin(adm, "GET", "/upstreams", "");
    assert_eq!(status, 200);
    let ups = json(&body);
    let ours: Vec<_> = ups
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["site"] == format!("127.0.0.1:{site}"))
        .collect();
    assert_eq!(ours.len(), 2, "{body}");
    assert!(
        ours.iter()
            .all(|u| u["health"] == "up" && u["state"] == "ready")
    );
    assert_eq!(
        ours.iter()
            .map(|u| u["requests"].as_u64().unwrap())
            .sum::<u64>(),
        43
    );

    // GET /certificates: the local CA's leaf for localhost.
    let (status, body) = admin(adm, "GET", "/certificates", "");
    assert_eq!(status, 200);
    let certs = json(&body);
    let leaf = certs
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["names"] == serde_json::json!(["localhost"]))
        .unwrap_or_else(|| panic!("no certificate for localhost: {body}"));
    assert_eq!(leaf["source"], "internal");
    assert!(leaf["not_after"].as_u64().unwrap() > leaf["renew_at"].as_u64().unwrap());
    let (_, m) = admin(adm, "GET", "/metrics", "");
    assert!(
        metric(
            &m,
            "weir_certificate_expiry_seconds",
            &["names=\"localhost\""]
        ) > 3600,
        "{m}"
    );

    // /status.json, and the page in Chromium shows the same count as /metrics.
    let (status, body) = admin(adm, "GET", "/status.json", "");
    assert_eq!(status, 200);
    let s = json(&body);
    let total = metric(&m, "weir_requests_total", &[]);
    assert_eq!(s["requests"].as_u64(), Some(total));
    let profile = tempfile::tempdir().unwrap();
    let dom = weir_test_support::browser::dump_dom(
        &format!("http://127.0.0.1:{adm}/status"),
        profile.path(),
        3000,
    );
    assert!(
        dom.contains("data-loaded=\"1\""),
        "the page never rendered: {dom}"
    );
    assert!(
        dom.contains(&format!("<div class=\"v\" id=\"requests\">{total}</div>")),
        "the page does not show {total} requests: {dom}"
    );
    assert!(dom.contains(&format!("data-site=\"127.0.0.1:{site}\"")));
    assert!(dom.contains("data-upstream="), "no upstream rows: {dom}");
    assert!(dom.contains(">localhost<"), "no certificate row: {dom}");

    // Unknown endpoints and methods.
    assert_eq!(admin(adm, "GET", "/nope", "").0, 404);
    assert_eq!(admin(adm, "DELETE", "/config", "").0, 405);
    drop(w);
}

#[test]
fn post_load_takes_toml_and_json_and_refuses_a_bad_config_whole() {
    let (adm, a, b) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hi\n").unwrap();
    let head = format!("[admin]\nlisten = \"127.0.0.1:{adm}\"\n");
    let _w = Weir::start_in(
        WEIR,
        dir,
        &format!("{head}[site.\"127.0.0.1:{a}\"]\nroot = \"www\"\n"),
        &[adm, a],
    );
    // TOML: a second address; relative paths from the config file's directory.
    let toml = format!(
        "{head}[site.\"127.0.0.1:{a}\"]\nroot = \"www\"\n[site.\"127.0.0.1:{b}\"]\nroot = \"www\"\n"
    );
    let (status, body) = admin(adm, "POST", "/load", &toml);
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(b, "/").0, 200);
    // A bad one: nothing changes, the errors come back with their place.
    let bad = format!("{head}[site.\"127.0.0.1:{a}\"]\nroot = \"www\"\nbrowse = \"yes\"\n");
    let (status, body) = admin(adm, "POST", "/load", &bad);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("<POST /load>:5:"), "{body}");
    assert_eq!(get(b, "/").0, 200, "a refused config changed something");
    // JSON, the same structure: b goes away.
    let j = serde_json::json!({
        "admin": { "listen": format!("127.0.0.1:{adm}") },
        "site": { format!("127.0.0.1:{a}"): { "root": "www" } }
    });
    let req = format!(
        "POST /load HTTP/1.1\r\nHost: 127.0.0.1:{adm}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{j}",
        j.to_string().len()
    );
    let resp = raw(adm, req.as_bytes(), Duration::from_secs(10));
    assert_eq!(status_of(&resp), 200, "{}", String::from_utf8_lossy(&resp));
    assert!(
        poll_until(PATIENCE, || std::net::TcpStream::connect(addr(b)).is_err()),
        "b still listens"
    );
    assert_eq!(get(a, "/").0, 200);
}

#[test]
fn a_drained_upstream_gets_no_new_request_and_finishes_its_own() {
    let slow = |delay| {
        backend(&BackendConfig {
            listen: addr(0),
            size: 10,
            delay: Duration::from_millis(delay),
            threads: 1,
        })
        .unwrap()
    };
    let (one, two) = (slow(300), slow(300));
    let (adm, site) = (free_port(), free_port());
    let one_name = format!("127.0.0.1:{}", one.addr.port());
    let _w = Weir::start_on(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{adm}\"\n[site.\"127.0.0.1:{site}\"]\nproxy = {{ to = [\"{one_name}\", \"127.0.0.1:{}\"] }}\n",
            two.addr.port()
        ),
        &[adm, site],
    );
    let running = Arc::new(AtomicBool::new(true));
    let r = running.clone();
    let load_gen = std::thread::spawn(move || {
        let mut c = LoadConfig::new(&format!("http://127.0.0.1:{site}/"));
        c.rate = Some(100.0);
        c.connections = 40;
        c.duration = Some(Duration::from_secs(6));
        c.timeout = Duration::from_secs(5);
        let rep = load(&c).unwrap();
        r.store(false, Ordering::Relaxed);
        rep
    });
    assert!(poll_until(PATIENCE, || one
        .requests
        .load(Ordering::Relaxed)
        > 20));
    let (status, body) = admin(adm, "POST", &format!("/upstreams/{one_name}/drain"), "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)[0]["state"], "drain");
    // Requests it had in flight finish (300 ms); then it gets nothing new.
    std::thread::sleep(Duration::from_millis(600));
    let after = one.requests.load(Ordering::Relaxed);
    let two_before = two.requests.load(Ordering::Relaxed);
    assert!(poll_until(PATIENCE, || two
        .requests
        .load(Ordering::Relaxed)
        > two_before + 50));
    assert_eq!(
        one.requests.load(Ordering::Relaxed),
        after,
        "a drained upstream got requests"
    );
    let rep = load_gen.join().unwrap();
    assert!(!running.load(Ordering::Relaxed));
    assert_eq!(rep.errors.total(), 0, "{:?}", rep.errors);
    assert_eq!(rep.status.keys().copied().collect::<Vec<_>>(), [200]);
    // Ready again: it is picked again.
    let (status, _) = admin(adm, "POST", &format!("/upstreams/{one_name}/ready"), "");
    assert_eq!(status, 200);
    for _ in 0..10 {
        assert_eq!(get(site, "/").0, 200);
    }
    assert!(one.requests.load(Ordering::Relaxed) > after);
    // A weight, and the refusals of a bad one.
    let (status, body) = admin(
        adm,
        "POST",
        &format!("/upstreams/{one_name}/weight"),
        "{\"weight\": 5}",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)[0]["weight"], 5);
    assert_eq!(
        admin(adm, "POST", &format!("/upstreams/{one_name}/weight"), "{}").0,
        400
    );
    assert_eq!(
        admin(adm, "POST", "/upstreams/127.0.0.1:1/drain", "").0,
        404
    );
}

#[test]
fn foreign_hosts_origins_and_missing_tokens_are_refused() {
    let (adm, site) = (free_port(), free_port());
    let token = "s3cret-s3cret-s3cret";
    let w = Weir::start_on(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{adm}\"\ntoken = \"{token}\"\n[site.\"127.0.0.1:{site}\"]\nroot = \".\"\n"
        ),
        &[adm, site],
    );
    let ask = |headers: &str| {
        let req = format!(
            "POST /reload HTTP/1.1\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        status_of(&raw(adm, req.as_bytes(), Duration::from_secs(10)))
    };
    let host = format!("Host: 127.0.0.1:{adm}\r\n");
    let auth = format!("Authorization: Bearer {token}\r\n");
    // A page elsewhere posting to the API (the browser adds its Origin).
    assert_eq!(
        ask(&format!("{host}{auth}Origin: http://evil.example\r\n")),
        403
    );
    // DNS rebinding: the right socket, another name.
    assert_eq!(ask(&format!("Host: evil.example:{adm}\r\n{auth}")), 403);
    // No token, a wrong one.
    assert_eq!(ask(&host), 401);
    assert_eq!(ask(&format!("{host}Authorization: Bearer nope\r\n")), 401);
    // All of it right.
    assert_eq!(
        ask(&format!("{host}{auth}Origin: http://127.0.0.1:{adm}\r\n")),
        200
    );
    assert!(
        w.log()
            .contains("cross-origin request from `http://evil.example` refused")
    );
}

#[test]
fn where_the_admin_api_listens_and_when_it_does_not() {
    // A named address that is taken: start-up fails, saying so.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let site = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[admin]\nlisten = \"127.0.0.1:{port}\"\n[site.\"127.0.0.1:{site}\"]\nroot = \".\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(WEIR)
        .args(["run", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("admin API: cannot listen on 127.0.0.1:{port}")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `--admin` on the no-config commands; none without it.
    let (adm, fs_port) = (free_port(), free_port());
    let root = tempfile::tempdir().unwrap();
    let mut fs = Weir::spawn(
        WEIR,
        tempfile::tempdir().unwrap(),
        &[
            "file-server",
            "--root",
            root.path().to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{fs_port}"),
            "--admin",
            &format!("127.0.0.1:{adm}"),
        ],
        &[fs_port],
    );
    fs.wait_port(adm);
    assert_eq!(admin(adm, "GET", "/status.json", "").0, 200);
    let plain = free_port();
    let w = Weir::spawn(
        WEIR,
        tempfile::tempdir().unwrap(),
        &[
            "file-server",
            "--root",
            root.path().to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{plain}"),
        ],
        &[plain],
    );
    assert!(!w.log().contains("admin API on"), "{}", w.log());
}

#[test]
fn an_upgrade_under_new_connections_refuses_none() {
    let up = backend(&BackendConfig {
        listen: addr(0),
        size: 50,
        delay: Duration::ZERO,
        threads: 1,
    })
    .unwrap();
    let (adm, site) = (free_port(), free_port());
    let mut w = Weir::start_on(
        WEIR,
        &format!(
            "[server]\ngrace_period = \"5s\"\n[admin]\nlisten = \"127.0.0.1:{adm}\"\n[site.\"127.0.0.1:{site}\"]\nproxy = {{ to = [\"127.0.0.1:{}\"] }}\n",
            up.addr.port()
        ),
        &[adm, site],
    );
    let old = w.child.id();
    // 1,000 new connections a second (one request each), for 6 s.
    let load_gen = std::thread::spawn(move || {
        let mut c = LoadConfig::new(&format!("http://127.0.0.1:{site}/"));
        c.rate = Some(1000.0);
        c.connections = 64;
        c.keepalive = false;
        c.duration = Some(Duration::from_secs(6));
        c.timeout = Duration::from_secs(5);
        load(&c).unwrap()
    });
    std::thread::sleep(Duration::from_secs(2));
    let out = std::process::Command::new(WEIR)
        .args(["upgrade", "--admin", &format!("127.0.0.1:{adm}")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new: u32 = stdout
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process id in {stdout:?}"));
    // The new process is stopped whatever happens next.
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .arg(self.0.to_string())
                .status();
        }
    }
    let _new = Kill(new);
    assert_ne!(new, old);
    // The old one drains and exits 0.
    let status = w
        .wait_exit(Duration::from_secs(20))
        .expect("the old process did not exit");
    assert!(status.success(), "{status}");
    let rep = load_gen.join().unwrap();
    assert!(rep.responses > 4000, "only {} responses", rep.responses);
    assert_eq!(rep.errors.total(), 0, "refused or failed: {:?}", rep.errors);
    assert_eq!(rep.status.keys().copied().collect::<Vec<_>>(), [200]);
    // The new one serves, the admin API included.
    assert_eq!(get(site, "/").0, 200);
    let (status, body) = admin(adm, "GET", "/status.json", "");
    assert_eq!(status, 200, "{body}");
    let log = w.log();
    assert!(log.contains("sockets handed over at start"), "{log}");
}

/// The status page's graphs of the last five minutes (request rate, 5xx
/// rate, p99), drawn by the page from its own polls of `/status.json`
/// while traffic, some of it 5xx, comes in.
#[test]
fn the_status_page_graphs_rate_errors_and_p99_from_its_polls() {
    let (adm, site) = (free_port(), free_port());
    let cfg = format!(
        "[admin]\nlisten = \"127.0.0.1:{adm}\"\n\
         [site.\"127.0.0.1:{site}\"]\nrespond = {{ status = 200 }}\n\
         [[site.\"127.0.0.1:{site}\".route]]\npath = \"/fail\"\nrespond = {{ status = 503 }}\n"
    );
    let w = Weir::start_on(WEIR, &cfg, &[adm, site]);
    let (status, body) = admin(adm, "GET", "/status.json", "");
    assert_eq!(status, 200);
    let s = json(&body);
    assert_eq!(
        s["duration_counts"].as_array().map(Vec::len),
        s["duration_buckets_ms"].as_array().map(|b| b.len() + 1),
        "{body}"
    );
    // Traffic for as long as the browser polls.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = if n.is_multiple_of(4) { "/fail" } else { "/" };
                let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                raw(site, req.as_bytes(), Duration::from_secs(5));
                n += 1;
            }
            n
        })
    };
    let profile = tempfile::tempdir().unwrap();
    let dom = weir_test_support::browser::dump_dom(
        &format!("http://127.0.0.1:{adm}/status"),
        profile.path(),
        8000,
    );
    // The graphs as a reader sees them, kept in the tests' output folder.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-graphs.png");
    weir_test_support::browser::screenshot(
        &format!("http://127.0.0.1:{adm}/status"),
        profile.path(),
        8000,
        &shot,
    );
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "{}: a blank page?",
        shot.display()
    );
    stop.store(true, Ordering::Relaxed);
    let sent = traffic.join().unwrap();
    assert!(sent > 0);
    // Each graph's <svg>: how many points it drew, its peak, its line.
    let graph = |id: &str| -> (usize, f64, String) {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {id} in {dom}"));
        let tag = &dom[dom[..at].rfind('<').unwrap()..];
        let tag = &tag[..tag.find("</svg>").unwrap()];
        let attr = |name: &str| {
            // A space before: ` points=` is not the end of ` data-points=`.
            let from = tag
                .find(&format!(" {name}=\""))
                .unwrap_or_else(|| panic!("no {name} in {tag}"))
                + name.len()
                + 3;
            tag[from..from + tag[from..].find('"').unwrap()].to_string()
        };
        (
            attr("data-points").parse().unwrap(),
            attr("data-max").parse().unwrap(),
            attr("points"),
        )
    };
    for id in ["graph-rps", "graph-errors", "graph-p99"] {
        let (n, max, line) = graph(id);
        assert!(n >= 2, "{id}: {n} points: {dom}");
        assert_eq!(line.split(' ').count(), n, "{id}: {line}");
        for xy in line.split(' ') {
            let (x, y) = xy.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (0.0..=300.0).contains(&x) && (0.0..=60.0).contains(&y),
                "{id}: {xy}"
            );
        }
        assert!(max > 0.0, "{id}: nothing drawn above zero: {dom}");
    }
    drop(w);
}
