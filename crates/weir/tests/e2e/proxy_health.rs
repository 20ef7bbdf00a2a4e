//! Health checks, retries and failover through the real binary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use weir_test_support::poll::{PATIENCE, poll_until_async};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{
    Upstream, Weir, client, scripted_upstream, serve_hyper, spawn_server,
};

use crate::WEIR;

#[tokio::test]
async fn active_http_check_takes_a_sick_upstream_out_and_503_when_all_are_down() {
    let (good, sick) = (Upstream::start("good").await, Upstream::start("sick").await);
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\ndefault = true\n\
         proxy = {{ to = [\"{}\", \"{}\"], health = {{ path = \"/health\", interval = \"30ms\", timeout = \"200ms\", fall = 1, rise = 1 }} }}\n\
         [site.\"down.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\n\
         proxy = {{ to = [\"{}\"], health = {{ path = \"/health\", interval = \"30ms\", fall = 1 }} }}\n",
            good.addr, sick.addr, sick.addr
        ),
    );
    // Both sites' checkers have taken `sick` out (fall = 1) before the first
    // request: until then it is in rotation, as every upstream starts.
    let down = format!("health check: upstream {} is down", sick.addr);
    assert!(
        poll_until_async(PATIENCE, async || w.log().matches(&down).count() >= 2).await,
        "sick not taken out by both sites:\n{}",
        w.log()
    );
    let c = client();
    for _ in 0..10 {
        assert_eq!(
            c.get(w.url("/"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
            "good"
        );
    }
    assert!(sick.seen().iter().all(|s| s.uri == "/health"));
    let r = c
        .get(w.url("/"))
        .header("host", "down.test")
        .send()
        .await
        .unwrap();
    no_upstream_available(r).await;
}

/// `health.method`: the checks go out as HEAD (HAProxy's `option httpchk
/// HEAD /health`), and an upstream's 500 to it still takes it out.
#[tokio::test]
async fn a_health_check_asks_with_its_method() {
    let (good, sick) = (Upstream::start("good").await, Upstream::start("sick").await);
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\ndefault = true\n\
         proxy = {{ to = [\"{}\", \"{}\"], health = {{ path = \"/health\", method = \"HEAD\", interval = \"30ms\", fall = 1, rise = 1 }} }}\n",
            good.addr, sick.addr
        ),
    );
    let down = format!("health check: upstream {} is down", sick.addr);
    assert!(
        poll_until_async(PATIENCE, async || w.log().contains(&down)).await,
        "sick not taken out:\n{}",
        w.log()
    );
    let c = client();
    let r = c.get(w.url("/")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "good");
    let checks: Vec<_> = good
        .seen()
        .into_iter()
        .chain(sick.seen())
        .filter(|s| s.uri == "/health")
        .collect();
    assert!(checks.len() >= 2, "{checks:?}");
    assert!(checks.iter().all(|s| s.method == "HEAD"), "{checks:?}");
    assert!(
        !w.log().contains(&format!("upstream {} is down", good.addr)),
        "{}",
        w.log()
    );
}

/// Upstreams that refuse connections, with the default retries: after the
/// last one failed the client gets 502 (an upstream failed), not 503 (none
/// was available), and the log names that upstream and why; a proxy's only
/// upstream is tried again however often it failed.
#[tokio::test]
async fn refused_connections_end_in_a_502_that_names_the_last_upstream_and_its_cause() {
    let (dead_a, dead_b) = (free_port(), free_port());
    let live = Upstream::start("live").await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\ndefault = true\n\
         proxy = {{ to = [\"127.0.0.1:{dead_a}\", \"127.0.0.1:{dead_b}\"] }}\n\
         [site.\"one.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\n\
         proxy = {{ to = [\"127.0.0.1:{dead_a}\"], passive = {{ failures = 1 }} }}\n\
         [site.\"ws.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\n\
         proxy = {{ to = [\"127.0.0.1:{dead_b}\"] }}\n\
         [site.\"mixed.test\"]\nlisten = \"127.0.0.1:{{PORT}}\"\n\
         proxy = {{ to = [\"127.0.0.1:{dead_b}\", \"{}\"], balance = \"first\" }}\n",
            live.addr
        ),
    );
    let c = client();
    let r = c.get(w.url("/both")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(
        r.text().await.unwrap(),
        "502 Bad Gateway: the upstream server failed\n"
    );
    let r = c
        .get(w.url("/one"))
        .header("host", "one.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let log = w.log();
    // A log written to a file carries no terminal colour codes.
    assert!(!log.contains('\x1b'), "{log}");
    for path in ["/both", "/one"] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("proxy GET {path}: cannot connect")))
            .unwrap_or_else(|| panic!("no failure logged for {path}:\n{log}"));
        assert!(line.contains("refused") && line.contains("502"), "{line}");
        let named = if path == "/one" {
            line.contains(&format!("127.0.0.1:{dead_a}"))
        } else {
            line.contains(&format!("127.0.0.1:{dead_a}"))
                || line.contains(&format!("127.0.0.1:{dead_b}"))
        };
        assert!(named, "{line}");
    }
    // A WebSocket upgrade takes its own path to the upstream: the same.
    let r = c
        .get(w.url("/ws"))
        .header("host", "ws.test")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    // Some line of the log holds every one of `parts`.
    let logged = |parts: &[&str]| {
        let log = w.log();
        assert!(
            log.lines().any(|l| parts.iter().all(|p| l.contains(p))),
            "no line with all of {parts:?}:\n{log}"
        );
    };
    logged(&[
        "proxy GET /ws: cannot connect",
        &format!("127.0.0.1:{dead_b}"),
    ]);
    // A retry that finds a live upstream: answered, and the log says which
    // upstream failed, why, and which one took the request.
    let r = c
        .get(w.url("/mixed"))
        .header("host", "mixed.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "live");
    logged(&[
        &format!("proxy: 127.0.0.1:{dead_b}: cannot connect"),
        &format!("retrying on {}", live.addr),
    ]);
    // passive.failures = 1, but one.test's only upstream is never taken
    // out: tried again, and again a 502 naming it.
    let r = c
        .get(w.url("/later"))
        .header("host", "one.test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    logged(&[
        "proxy GET /later: cannot connect",
        &format!("127.0.0.1:{dead_a}"),
    ]);
}

/// Issue 55: five dropped connections within 10 s used to take a proxy's
/// only upstream out for 30 s (503 for every request). Passive health never
/// takes the last usable upstream out of rotation.
#[tokio::test]
async fn an_only_upstream_that_drops_twenty_requests_in_a_row_still_gets_the_next() {
    let origin = scripted_upstream().await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = \"{}\"\n",
            origin.addr
        ),
    );
    let c = client();
    for i in 0..20 {
        // `/nothing`: the origin closes the connection without answering.
        let r = c.get(w.url("/nothing")).send().await.unwrap();
        assert_eq!(r.status(), 502, "request {i}");
    }
    for method in [reqwest::Method::GET, reqwest::Method::PUT] {
        let r = c
            .request(method.clone(), w.url("/reason"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{method} after 20 failures:\n{}", w.log());
        assert_eq!(r.text().await.unwrap(), "ok");
    }
    let log = w.log();
    assert!(!log.contains("ejected"), "{log}");
    assert!(
        log.contains("stays in rotation: it is the last usable upstream"),
        "{log}"
    );
}

/// An upstream that accepts connections and drops them while `broken`,
/// and answers with its name otherwise; counts the connections it drops.
async fn breakable(
    name: &'static str,
) -> (std::net::SocketAddr, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let broken = Arc::new(AtomicBool::new(true));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (b, d) = (broken.clone(), dropped.clone());
    let (addr, _) = spawn_server(move |s| {
        let (b, d) = (b.clone(), d.clone());
        async move {
            if b.load(Ordering::SeqCst) {
                d.fetch_add(1, Ordering::SeqCst);
                drop(s);
            } else {
                serve_hyper(s, false, name, Arc::default()).await;
            }
        }
    })
    .await;
    (addr, broken, dropped)
}

/// Two upstreams, one failing: it is ejected (the other takes every
/// request), and after the cooldown one trial request brings it back.
#[tokio::test]
async fn a_failing_upstream_is_ejected_and_one_good_trial_brings_it_back() {
    let good = Upstream::start("good").await;
    let (flaky, broken, dropped) = breakable("flaky").await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\n\
             proxy = {{ to = [\"{}\", \"{flaky}\"], passive = {{ failures = 2, cooldown = \"3s\" }} }}\n",
            good.addr
        ),
    );
    let c = client();
    let get = async || {
        let r = c.get(w.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    };
    // Every request is answered (a failed one goes on to `good`) while
    // `flaky` fails twice in a row and is ejected.
    let ejected = format!("upstream {flaky} ejected for 3s after 2 failures in a row");
    let mut n = 0;
    while !w.log().contains(&ejected) {
        assert_eq!(get().await, "good");
        n += 1;
        assert!(
            n < 20,
            "{flaky} not ejected after {n} requests:\n{}",
            w.log()
        );
    }
    // Out: nothing goes to it during the cooldown.
    let before = dropped.load(Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(get().await, "good");
    }
    assert_eq!(dropped.load(Ordering::SeqCst), before);
    // Mended: after the cooldown, one trial request finds it answering,
    // and it is back in rotation.
    broken.store(false, Ordering::SeqCst);
    assert!(
        poll_until_async(PATIENCE, async || get().await == "flaky").await,
        "no trial request reached {flaky}:\n{}",
        w.log()
    );
    let back = format!("upstream {flaky} answered its trial request; back in rotation");
    assert!(w.log().contains(&back), "{}", w.log());
    let mut flaky_share = 0;
    for _ in 0..10 {
        flaky_share += (get().await == "flaky") as usize;
    }
    assert!(
        flaky_share >= 4,
        "{flaky_share} of 10 to {flaky} after its return"
    );
}

/// Both upstreams failing: passive.max_ejected (50 % by default, at least
/// one, never the last) ejects only one of the two; the other stays in
/// rotation and is still tried.
#[tokio::test]
async fn passive_health_never_ejects_every_upstream() {
    let (a, _, a_dropped) = breakable("a").await;
    let (b, _, b_dropped) = breakable("b").await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\n\
             proxy = {{ to = [\"{a}\", \"{b}\"], passive = {{ failures = 2, cooldown = \"1h\" }} }}\n"
        ),
    );
    let c = client();
    for _ in 0..10 {
        let r = c.get(w.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 502);
    }
    let log = w.log();
    assert_eq!(log.matches("ejected for 3600s").count(), 1, "{log}");
    assert!(
        log.contains("stays in rotation: passive.max_ejected (50%)"),
        "{log}"
    );
    // The one left in rotation took the later requests; the ejected one
    // only the two that ejected it.
    let (na, nb) = (
        a_dropped.load(Ordering::SeqCst),
        b_dropped.load(Ordering::SeqCst),
    );
    assert!(na.min(nb) == 2 && na.max(nb) == 10, "a {na}, b {nb}");
}

#[tokio::test]
async fn tcp_check_and_rise_bring_an_upstream_back() {
    let port = free_port();
    let good = Upstream::start("good").await;
    let w = Weir::start_logged(
        WEIR,
        &format!(
            "[server]\nworkers = 1\n[site.\"127.0.0.1:{{PORT}}\"]\n\
         proxy = {{ to = [\"{}\", \"127.0.0.1:{port}\"], health = {{ tcp = true, interval = \"30ms\", fall = 1, rise = 2 }} }}\n",
            good.addr
        ),
    );
    // The dead upstream out of rotation (fall = 1) before the first request.
    let dead = format!("127.0.0.1:{port}");
    let down = format!("health check: upstream {dead} is down");
    assert!(
        poll_until_async(PATIENCE, async || w.log().contains(&down)).await,
        "{dead} not taken out:\n{}",
        w.log()
    );
    let c = client();
    for _ in 0..4 {
        assert_eq!(
            c.get(w.url("/"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
            "good"
        );
    }
    // The dead one comes to life on the same port: back in rotation after `rise` checks.
    let back = Upstream::start_on("back", &dead).await;
    let up = format!("health check: upstream {dead} is up");
    assert!(
        poll_until_async(PATIENCE, async || w.log().contains(&up)).await,
        "{dead} not back after `rise` checks:\n{}",
        w.log()
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(
            c.get(w.url("/"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        );
    }
    assert!(got.contains(&"back".to_string()), "{got:?}");
    drop(back);
}

#[tokio::test]
async fn connect_failures_are_retried_on_another_upstream() {
    let dead = free_port();
    let good = Upstream::start("good").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"127.0.0.1:{dead}\", \"{}\"] }}\n",
            good.addr
        ),
    );
    let c = client();
    for _ in 0..10 {
        let r = c
            .post(w.url("/"))
            .body("not idempotent, but never sent")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test]
async fn upstream_killed_during_a_load_of_gets_no_client_error() {
    let a = Upstream::start("a").await;
    let b = Upstream::start("b").await;
    let w = Weir::start(
        WEIR,
        &format!(
            "[site.\"127.0.0.1:{{PORT}}\"]\nproxy = {{ to = [\"{}\", \"{}\"], passive = {{ failures = 2, window = \"5s\", cooldown = \"5s\" }} }}\n",
            a.addr, b.addr
        ),
    );
    let c = client();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url, done) = (c.clone(), w.url("/slow/5"), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            for _ in 0..60 {
                match c.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {}
                    Ok(r) => errors.push(format!("status {}", r.status())),
                    Err(e) => errors.push(e.to_string()),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            errors
        }));
    }
    // Kill `a` mid-load: once 120 of the 480 requests are done.
    assert!(
        poll_until_async(PATIENCE, async || done.load(Ordering::Relaxed) >= 120).await,
        "the load stalled at {} requests",
        done.load(Ordering::Relaxed)
    );
    a.kill();
    let mut errors = Vec::new();
    for t in tasks {
        errors.extend(t.await.unwrap());
    }
    assert!(
        errors.is_empty(),
        "{} errors: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert!(b.count() > 240);
}

/// `r` is weir's 503 for a site none of whose upstreams could be tried.
async fn no_upstream_available(r: reqwest::Response) {
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.text().await.unwrap(),
        "503 Service Unavailable: no upstream server is available\n"
    );
}
