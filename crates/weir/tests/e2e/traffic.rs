//! Traffic control end to end: the real binary, clients bound to distinct
//! loopback addresses (127.0.0.x) so each is a client of its own. What a
//! user relies on: exact counts for a burst, a delay instead of a refusal
//! without `nodelay`, a connection limit, budgets kept apart per client,
//! bounded tables that say when they forget, address lists, basic
//! authentication that hashes once per credential, forward
//! authentication, the routing rules, and the RFC rules on `Host`.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use weir_test_support::proxy::{Upstream, Weir, client, raw};

use crate::WEIR;

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind((from, 0).into()).unwrap();
    s.connect(to).await.unwrap()
}

/// Sends `req` on `s` and reads until weir closes (the requests say
/// `Connection: close`).
async fn exchange(mut s: TcpStream, req: &str) -> String {
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("no answer")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

fn status(resp: &str) -> u16 {
    resp.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn field<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    resp.split("\r\n\r\n").next()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `n` requests for `path` from `from`, all connected first and then sent
/// at once; the answers in order.
async fn simultaneous(w: &Weir, from: Ipv4Addr, n: usize, path: &str) -> Vec<String> {
    let mut conns = Vec::new();
    for _ in 0..n {
        conns.push(connect_from(from, w.addr).await);
    }
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|s| {
            let req = req.clone();
            tokio::spawn(async move { exchange(s, &req).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn site_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("index.html"), "<p>app shell</p>").unwrap();
    std::fs::write(d.path().join("a.txt"), "file a").unwrap();
    d
}

#[tokio::test]
async fn ten_per_minute_burst_five_nodelay_gives_six_and_fourteen_refusals_per_client() {
    let d = site_dir();
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nlisten = [\"0.0.0.0:{{PORT}}\"]\nroot = \"{}\"\n\
             limit = [{{ rate = \"10r/m\", burst = 5, nodelay = true }}]\n",
            d.path().display()
        ),
    );
    // Per minute, not per second: the twenty may reach the limiter over a
    // few seconds on a loaded machine and still find no refill.
    for from in [Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)] {
        let answers = simultaneous(&w, from, 20, "/a.txt").await;
        let ok = answers.iter().filter(|r| status(r) == 200).count();
        let refused: Vec<&String> = answers.iter().filter(|r| status(r) == 429).collect();
        assert_eq!((ok, refused.len()), (6, 14), "from {from}: {answers:?}");
        for r in refused {
            let after: u64 = field(r, "retry-after").unwrap().parse().unwrap();
            // One more fits 6 s after the bucket was full (10 a minute).
            assert!((6..=7).contains(&after), "{r}");
        }
    }
}

#[tokio::test]
async fn without_nodelay_the_burst_is_spaced_out_not_refused() {
    let d = site_dir();
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\n\
             limit = [{{ rate = \"10r/s\", burst = 5 }}]\n",
            d.path().display()
        ),
    );
    let started = Instant::now();
    let answers = simultaneous(&w, Ipv4Addr::new(127, 0, 0, 1), 6, "/a.txt").await;
    assert!(answers.iter().all(|r| status(r) == 200), "{answers:?}");
    // The sixth waits for five to drain at 10 a second.
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    // The seventh at once overflows the burst.
    let more = simultaneous(&w, Ipv4Addr::new(127, 0, 0, 1), 7, "/a.txt").await;
    assert!(more.iter().any(|r| status(r) == 429), "{more:?}");
}

#[tokio::test]
async fn a_connection_limit_of_two_refuses_the_third_until_one_ends() {
    let up = Upstream::start("slow").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nlisten = [\"0.0.0.0:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n\
             limit = [{{ connections = 2, status = 503, body = \"busy\\n\" }}]\n",
            up.addr
        ),
    );
    let a = Ipv4Addr::new(127, 0, 0, 4);
    let slow = "GET /slow/1500 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let first = tokio::spawn(exchange(connect_from(a, w.addr).await, slow));
    let second = tokio::spawn(exchange(connect_from(a, w.addr).await, slow));
    // Both are in progress once the upstream has seen them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while up.count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the upstream never saw two requests"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let quick = "GET /quick HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let third = exchange(connect_from(a, w.addr).await, quick).await;
    assert_eq!(status(&third), 503, "{third}");
    assert!(third.ends_with("busy\n"), "{third}");
    // Another client has its own budget.
    let other = exchange(
        connect_from(Ipv4Addr::new(127, 0, 0, 5), w.addr).await,
        quick,
    )
    .await;
    assert_eq!(status(&other), 200, "{other}");
    assert_eq!(status(&first.await.unwrap()), 200);
    assert_eq!(status(&second.await.unwrap()), 200);
    let after = exchange(connect_from(a, w.addr).await, quick).await;
    assert_eq!(status(&after), 200, "{after}");
}

#[tokio::test]
async fn a_full_table_forgets_the_oldest_keys_and_says_so_and_dry_run_refuses_nothing() {
    let d = site_dir();
    let admin = weir_test_support::ports::free_port();
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\n\
             limit = [{{ name = \"per-key\", key = \"header:X-Key\", rate = \"1r/m\", size = 256 }},\n\
                      {{ name = \"trial\", key = \"site\", window = \"1m\", requests = 10, dry_run = true }}]\n",
            d.path().display()
        ),
    );
    let c = client();
    for i in 0..2000 {
        let r = c
            .get(w.url("/a.txt"))
            .header("x-key", i.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "key {i} is new: its first request passes");
    }
    // A key seen again within the minute is refused.
    let r = c
        .get(w.url("/a.txt"))
        .header("x-key", "1999")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    // Without the header the key is absent: not counted.
    for _ in 0..3 {
        assert_eq!(c.get(w.url("/a.txt")).send().await.unwrap().status(), 200);
    }
    let metrics = c
        .get(format!("http://127.0.0.1:{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str, limit: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains(&format!("limit=\"{limit}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} for {limit} in\n{metrics}"))
    };
    let keys = value("weir_limit_keys", "per-key");
    assert!(
        keys > 0.0 && keys <= 256.0,
        "{keys} keys tracked, bound 256"
    );
    assert!(value("weir_limit_evicted_total", "per-key") >= 1744.0);
    assert_eq!(value("weir_limit_refused_total", "per-key"), 1.0);
    // The dry-run window counted every request past 10 that reached it
    // (not the one `per-key` refused) and refused none.
    assert_eq!(value("weir_limit_refused_total", "trial"), 1993.0);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = w.log();
        if log.contains("limit per-key") && log.contains("forgotten") && log.contains("(dry run)") {
            break;
        }
        assert!(Instant::now() < deadline, "log says nothing of it:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn address_lists_answer_403_per_site_and_route() {
    let d = site_dir();
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nlisten = [\"0.0.0.0:{{PORT}}\"]\nroot = \"{}\"\n\
             deny = [\"127.0.0.9\"]\n\
             [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/office/\"\nallow = [\"127.0.0.0/30\", \"::1\"]\nrespond = {{ status = 200, body = \"office\" }}\n",
            d.path().display()
        ),
    );
    let get = |from: [u8; 4], path: &'static str| {
        let addr = w.addr;
        async move {
            let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            status(&exchange(connect_from(from.into(), addr).await, &req).await)
        }
    };
    assert_eq!(get([127, 0, 0, 2], "/a.txt").await, 200);
    assert_eq!(get([127, 0, 0, 9], "/a.txt").await, 403);
    assert_eq!(get([127, 0, 0, 2], "/office/").await, 200);
    assert_eq!(get([127, 0, 0, 7], "/office/").await, 403);
    assert_eq!(
        get([127, 0, 0, 9], "/office/").await,
        403,
        "the site's deny comes first"
    );
}

/// weir's CPU time so far (user + system), from /proc.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[tokio::test]
async fn basic_auth_with_a_cost_12_bcrypt_hash_costs_about_one_hash_for_ten_thousand_requests() {
    // `weir hash-password` makes the hash; its own run is the cost of one.
    let started = Instant::now();
    let out = std::process::Command::new(WEIR)
        .args(["hash-password", "--cost", "12"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"correct horse\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let one_hash = started.elapsed().as_secs_f64();
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$2b$12$"), "{hash}");

    let d = site_dir();
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\n\
             [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/private/\"\nroot = \"{}\"\nrewrite = \"/\"\n\
             basic_auth = {{ realm = \"staff\", users = {{ alice = \"{hash}\" }} }}\n",
            d.path().display(),
            d.path().display()
        ),
    );
    let c = client();
    let r = c.get(w.url("/private/a.txt")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["www-authenticate"],
        "Basic realm=\"staff\", charset=\"UTF-8\""
    );
    let wrong = c
        .get(w.url("/private/a.txt"))
        .basic_auth("alice", Some("wrong horse"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    // 10,000 requests, 20 at a time, from the first one on.
    let run = |auth: bool| {
        let (c, url) = (
            c.clone(),
            w.url(if auth { "/private/a.txt" } else { "/a.txt" }),
        );
        async move {
            let mut tasks = Vec::new();
            for _ in 0..20 {
                let (c, url) = (c.clone(), url.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..500 {
                        let mut rq = c.get(&url);
                        if auth {
                            rq = rq.basic_auth("alice", Some("correct horse"));
                        }
                        let r = rq.send().await.unwrap();
                        assert_eq!(r.status(), 200);
                        assert_eq!(r.bytes().await.unwrap(), "file a");
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    let pid = w.child.id();
    let before = cpu_secs(pid);
    run(false).await;
    let plain = cpu_secs(pid) - before;
    let before = cpu_secs(pid);
    run(true).await;
    let authed = cpu_secs(pid) - before;
    eprintln!(
        "one cost-12 hash: {one_hash:.3} s; 10,000 requests: {plain:.2} s of CPU without auth, {authed:.2} s with"
    );
    assert!(
        authed - plain < 3.0 * one_hash + 0.3,
        "basic auth cost {:.2} s of CPU over 10,000 requests; one hash is {one_hash:.3} s",
        authed - plain
    );
    // A wrong password is still refused after the right one passed.
    let wrong = c
        .get(w.url("/private/a.txt"))
        .basic_auth("alice", Some("wrong horse"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
}

/// An auth service: `Cookie: session=alice` passes as alice (a 204 with
/// `X-User`), `/public...` passes with no user, a browser without a
/// session is sent to the login page, anything else gets 401. It answers
/// with what it was asked in `X-Seen`.
async fn auth_service() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let h = req.headers();
                    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
                    let seen = format!(
                        "{} {} method={} uri={}",
                        req.method(),
                        req.uri(),
                        get("x-forwarded-method"),
                        get("x-forwarded-uri")
                    );
                    let mut r = Response::new(Full::new(Bytes::from("auth says no\n")));
                    if get("cookie").contains("session=alice") {
                        *r.status_mut() = http::StatusCode::NO_CONTENT;
                        *r.body_mut() = Full::new(Bytes::new());
                        r.headers_mut().insert("x-user", "alice".parse().unwrap());
                    } else if get("x-forwarded-uri").starts_with("/public") {
                        *r.status_mut() = http::StatusCode::OK;
                    } else if get("accept").contains("text/html") {
                        *r.status_mut() = http::StatusCode::FOUND;
                        r.headers_mut()
                            .insert("location", "https://login.example/?rd=app".parse().unwrap());
                    } else {
                        *r.status_mut() = http::StatusCode::UNAUTHORIZED;
                    }
                    r.headers_mut().insert("x-seen", seen.parse().unwrap());
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test]
async fn forward_auth_allows_denies_and_redirects_and_copies_headers() {
    let (auth, _task) = auth_service().await;
    let up = Upstream::start("app").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\"] }}\n\
             forward_auth = {{ url = \"http://{auth}/verify?app=1\", copy_headers = [\"X-User\"] }}\n",
            up.addr
        ),
    );
    let c = client();
    // Allowed: X-User from the auth service reaches the app, the client's own is gone.
    let r = c
        .post(w.url("/orders?id=7"))
        .header("cookie", "session=alice")
        .header("x-user", "mallory")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "app");
    let seen = up.seen();
    let last = seen.last().unwrap();
    let users: Vec<_> = last.headers.get_all("x-user").iter().collect();
    assert_eq!(users, ["alice"]);
    assert_eq!(last.uri, "/orders?id=7");
    // Allowed with no user: a client's X-User never reaches the app.
    let r = c
        .get(w.url("/public/x"))
        .header("x-user", "mallory")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(up.seen().last().unwrap().headers.get("x-user").is_none());
    // Denied: the auth service's answer, body and all; the app sees nothing.
    let before = up.count();
    let r = c.get(w.url("/orders")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["x-seen"],
        "GET /verify?app=1 method=GET uri=/orders"
    );
    assert_eq!(r.text().await.unwrap(), "auth says no\n");
    // A browser is redirected to the login page.
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .delete(w.url("/orders/7"))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://login.example/?rd=app");
    assert_eq!(
        r.headers()["x-seen"],
        "GET /verify?app=1 method=DELETE uri=/orders/7"
    );
    assert_eq!(up.count(), before);
}

#[tokio::test]
async fn routing_rules_match_redirect_rewrite_and_change_headers() {
    let d = site_dir();
    let up = Upstream::start("api").await;
    let root = d.path().display();
    let w = Weir::start(
        WEIR,
        &format!(
            r#"[site."127.0.0.1:{{PORT}}"]
listen = ["0.0.0.0:{{PORT}}"]
root = "{root}"
try_files = ["{{path}}", "/index.html"]
response_headers = {{ set = {{ X-Frame-Options = "DENY" }}, remove = ["Server"] }}

[[site."127.0.0.1:{{PORT}}".route]]
path_regex = "^/users/([0-9]+)/?$"
redirect = {{ to = "/profiles/{{1}}{{?query}}", status = 301 }}

[[site."127.0.0.1:{{PORT}}".route]]
path_regex = "^/v1/(\\w+)/(\\d+)$"
rewrite = "/api/{{1}}?id={{2}}&{{query}}"
proxy = {{ to = ["{up}"] }}
request_headers = {{ set = {{ X-Real-IP = "{{client_ip}}", X-Route = "v1 {{1}}" }}, remove = ["Cookie"] }}
response_headers = {{ add = {{ X-Api = "1" }} }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/upload/"
max_body = "1KiB"
proxy = {{ to = ["{up}"] }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/beta/*"
match = {{ header = {{ X-Beta = "1" }}, query = {{ preview = "*" }} }}
respond = {{ status = 200, body = "beta" }}

[[site."127.0.0.1:{{PORT}}".route]]
match = {{ method = ["DELETE", "PUT"] }}
respond = {{ status = 405, body = "read only" }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/lan/"
match = {{ client = ["127.0.0.2/32"] }}
respond = {{ status = 200, body = "lan" }}

[[site."127.0.0.1:{{PORT}}".route]]
path = "/secure/"
match = {{ protocol = "https" }}
respond = 200

[site."old.test:{{PORT}}"]
listen = ["0.0.0.0:{{PORT}}"]
redirect = {{ to = "https://new.test{{uri}}", status = 308 }}
"#,
            up = up.addr
        ),
    );
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Redirect with a capture, keeping the query.
    let r = c.get(w.url("/users/42?tab=posts")).send().await.unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["location"], "/profiles/42?tab=posts");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert!(r.headers().get("server").is_none());
    // Rewrite with captures to the proxy, request header rules.
    let r = c
        .get(w.url("/v1/orders/7?sort=asc"))
        .header("cookie", "a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-api"], "1");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let seen = up.seen();
    let last = seen.last().unwrap();
    assert_eq!(last.uri, "/api/orders?id=7&sort=asc");
    assert_eq!(last.headers["x-real-ip"], "127.0.0.1");
    assert_eq!(last.headers["x-route"], "v1 orders");
    assert!(last.headers.get("cookie").is_none());
    // A body past the route's limit.
    let r = c
        .post(w.url("/upload/f"))
        .body(vec![b'x'; 2048])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = c
        .post(w.url("/upload/f"))
        .body(vec![b'x'; 512])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Header and query conditions together.
    let beta = |h: bool, q: &str| {
        let mut rq = c.get(w.url(&format!("/beta/x{q}")));
        if h {
            rq = rq.header("x-beta", "1");
        }
        rq.send()
    };
    assert_eq!(
        beta(true, "?preview").await.unwrap().text().await.unwrap(),
        "beta"
    );
    // Otherwise the SPA fallback answers with the app shell.
    assert_eq!(
        beta(false, "?preview").await.unwrap().text().await.unwrap(),
        "<p>app shell</p>"
    );
    assert_eq!(
        beta(true, "").await.unwrap().text().await.unwrap(),
        "<p>app shell</p>"
    );
    // Method condition with no path.
    let r = c.delete(w.url("/a.txt")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (405, "read only".into())
    );
    // Client address condition.
    let lan = "GET /lan/ HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let from2 = exchange(connect_from(Ipv4Addr::new(127, 0, 0, 2), w.addr).await, lan).await;
    assert!(from2.ends_with("lan"), "{from2}");
    let from3 = exchange(connect_from(Ipv4Addr::new(127, 0, 0, 3), w.addr).await, lan).await;
    assert!(from3.ends_with("<p>app shell</p>"), "{from3}");
    // Protocol condition: plain HTTP does not match `https`.
    let r = c.get(w.url("/secure/")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "<p>app shell</p>");
    // Files that exist are served as they are; a missing one falls back.
    assert_eq!(
        c.get(w.url("/a.txt"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "file a"
    );
    assert_eq!(
        c.get(w.url("/deep/link/page"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "<p>app shell</p>"
    );
    // A site that only redirects, keeping path and query.
    let r = raw(
        &w,
        b"GET /a/b?c=d HTTP/1.1\r\nHost: old.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&r), 308, "{r}");
    assert_eq!(field(&r, "location"), Some("https://new.test/a/b?c=d"));
}

#[tokio::test]
async fn host_and_target_rules_of_rfc_9112_and_9110() {
    let d = site_dir();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("a.txt"), "site b").unwrap();
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"a.test:{{PORT}}\"]\nlisten = [\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\n\
             [site.\"b.test:{{PORT}}\"]\nlisten = [\"127.0.0.1:{{PORT}}\"]\nroot = \"{}\"\n",
            d.path().display(),
            other.path().display()
        ),
    );
    let ask = |req: &'static str| {
        let w = &w;
        async move { raw(w, req.as_bytes()).await }
    };
    let cases: &[(&str, u16, &str)] = &[
        (
            "GET /a.txt HTTP/1.1\r\nConnection: close\r\n\r\n",
            400,
            "HTTP/1.1 without Host",
        ),
        (
            "GET /a.txt HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nConnection: close\r\n\r\n",
            400,
            "two Host fields",
        ),
        (
            "GET /a.txt HTTP/1.1\r\nHost: a.test@b.test\r\nConnection: close\r\n\r\n",
            400,
            "user info in Host",
        ),
        (
            "GET /a.txt HTTP/1.1\r\nHost: a.test:80x\r\nConnection: close\r\n\r\n",
            400,
            "a bad port",
        ),
        (
            "GET /a.txt HTTP/1.0\r\n\r\n",
            200,
            "HTTP/1.0 may leave Host out",
        ),
        (
            "GET * HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
            400,
            "* with GET",
        ),
        (
            "GET a.test:80 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
            400,
            "authority form with GET",
        ),
    ];
    for (req, want, what) in cases {
        let r = ask(req).await;
        assert_eq!(status(&r), *want, "{what}: {r}");
    }
    // The absolute form's host wins over Host.
    let r =
        ask("GET http://b.test/a.txt HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status(&r), 200, "{r}");
    assert!(r.ends_with("site b"), "{r}");
    let r = ask("OPTIONS * HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n").await;
    assert_ne!(status(&r), 400, "{r}");
}

/// A chunked body declares no length: it is counted as it streams and cut
/// off at the route's `max_body` (or `server.limits.body`) with a 413, as
/// nginx's `client_max_body_size` does.
#[tokio::test]
async fn a_chunked_body_past_the_limit_gets_413() {
    let up = Upstream::start("app").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[server.limits]\nbody = \"4KiB\"\n\
             [site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{a}\"] }}\n\
             [[site.\"127.0.0.1:{{PORT}}\".route]]\npath = \"/small/\"\nstrip_prefix = true\nmax_body = \"1KiB\"\nproxy = {{ to = [\"{a}\"] }}\n",
            a = up.addr
        ),
    );
    let chunked = |path: &str, n: usize| {
        let chunk = "x".repeat(512);
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        for _ in 0..n {
            req.push_str(&format!("200\r\n{chunk}\r\n"));
        }
        req.push_str("0\r\n\r\n");
        req
    };
    // Within the limits: through whole.
    let r = raw(&w, chunked("/small/count", 2).as_bytes()).await;
    assert_eq!(status(&r), 200, "{r}");
    assert!(r.ends_with("1024"), "{r}");
    // Past the route's 1 KiB, and past the server's 4 KiB.
    let r = raw(&w, chunked("/small/count", 3).as_bytes()).await;
    assert_eq!(status(&r), 413, "{r}");
    let r = raw(&w, chunked("/count", 8).as_bytes()).await;
    assert_eq!(status(&r), 200, "{r}");
    let r = raw(&w, chunked("/count", 9).as_bytes()).await;
    assert_eq!(status(&r), 413, "{r}");
}
