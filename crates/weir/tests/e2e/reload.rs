//! Reloading the config while weir serves: under open-loop load (keep-alive
//! and `Connection: close` clients), with slow upstream requests and
//! server-sent-event streams open, the config is reloaded every 100 ms for
//! 30 s, alternating two versions whose answers differ, with invalid
//! configs in between. Nothing fails, each change is seen by the next
//! request, refused configs change nothing, and the process's threads and
//! memory come back to where they were.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_bench::backend::{BackendConfig, start as backend};
use weir_bench::load::{LoadConfig, run as load};
use weir_test_support::poll::{PATIENCE, poll_until};
use weir_test_support::ports::free_port;
use weir_test_support::process::*;

use crate::WEIR;

/// `(status, headers and body as text)` of one request on a new connection.
pub fn get(port: u16, path: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let resp = raw(port, req.as_bytes(), Duration::from_secs(10));
    (
        status_of(&resp),
        String::from_utf8_lossy(&resp).into_owned(),
    )
}

/// A request to the admin API: `(status, body)`.
pub fn admin(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    // A JSON object is sent as JSON; anything else (a TOML config) as TOML.
    let ct = if body.starts_with('{') {
        "application/json"
    } else {
        "application/toml"
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let resp = raw(port, req.as_bytes(), Duration::from_secs(30));
    let text = String::from_utf8_lossy(&resp).into_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status_of(&resp), body)
}

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    resp.lines().take_while(|l| !l.is_empty()).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `Threads` and `VmRSS` (KiB) of a process.
pub fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("Threads:"), field("VmRSS:"))
}

/// An upstream that answers every request with an endless event stream: an
/// event every 50 ms until the client goes.
fn sse_upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut s = s;
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                );
                for n in 0u64.. {
                    let ev = format!("data: {n}\n\n");
                    let chunk = format!("{:x}\r\n{ev}\r\n", ev.len());
                    if s.write_all(chunk.as_bytes()).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
    });
    port
}

/// An open event stream through weir, and how many events it has seen.
struct Stream {
    events: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
}

fn open_stream(port: u16) -> Stream {
    let mut s = TcpStream::connect(addr(port)).unwrap();
    s.write_all(format!("GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .unwrap();
    let events = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(AtomicBool::new(false));
    let (e, d) = (events.clone(), ended.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let seen = buf[..n].windows(5).filter(|w| w == b"data:").count();
                    e.fetch_add(seen as u64, Ordering::Relaxed);
                }
            }
        }
        d.store(true, Ordering::Relaxed);
    });
    Stream { events, ended }
}

fn config(tag: &str, p: &Ports, root_ok: bool) -> String {
    let root = if root_ok { "www" } else { "no-such-dir" };
    format!(
        r#"[server]
grace_period = "5s"
[admin]
listen = "127.0.0.1:{admin}"
[site."127.0.0.1:{stat}"]
root = "{root}"
headers = {{ X-Config = "{tag}" }}
[site."127.0.0.1:{proxy}"]
headers = {{ X-Config = "{tag}" }}
proxy = {{ to = ["127.0.0.1:{fast}"] }}
[[site."127.0.0.1:{proxy}".route]]
path = "/slow/*"
proxy = {{ to = ["127.0.0.1:{slow}"] }}
[site."127.0.0.1:{events}"]
proxy = {{ to = ["127.0.0.1:{sse}"] }}
"#,
        admin = p.admin,
        stat = p.stat,
        proxy = p.proxy,
        events = p.events,
        fast = p.fast,
        slow = p.slow,
        sse = p.sse,
    )
}

struct Ports {
    admin: u16,
    stat: u16,
    proxy: u16,
    events: u16,
    fast: u16,
    slow: u16,
    sse: u16,
}

#[test]
fn reloading_every_100ms_under_load_loses_nothing() {
    let fast = backend(&BackendConfig {
        listen: addr(0),
        size: 200,
        delay: Duration::ZERO,
        threads: 1,
    })
    .unwrap();
    let slow = backend(&BackendConfig {
        listen: addr(0),
        size: 200,
        delay: Duration::from_millis(1500),
        threads: 1,
    })
    .unwrap();
    let p = Ports {
        admin: free_port(),
        stat: free_port(),
        proxy: free_port(),
        events: free_port(),
        fast: fast.addr.port(),
        slow: slow.addr.port(),
        sse: sse_upstream(),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let w = Weir::start_in(
        WEIR,
        dir,
        &config("a", &p, true),
        &[p.admin, p.stat, p.proxy, p.events],
    );
    let cfg_path = w.path().join("weir.toml");
    let pid = w.child.id();

    // Warm up, then the baseline.
    for _ in 0..50 {
        assert_eq!(get(p.stat, "/").0, 200);
        assert_eq!(get(p.proxy, "/").0, 200);
    }
    let (threads0, rss0) = threads_and_rss(pid);

    let streams: Vec<Stream> = (0..3).map(|_| open_stream(p.events)).collect();
    assert!(
        poll_until(PATIENCE, || streams
            .iter()
            .all(|s| s.events.load(Ordering::Relaxed) > 2)),
        "the event streams do not flow"
    );

    let run_for = Duration::from_secs(30);
    let load_gen = |url: String, rate: f64, keepalive: bool| {
        std::thread::spawn(move || {
            let mut c = LoadConfig::new(&url);
            c.rate = Some(rate);
            c.connections = 16;
            c.keepalive = keepalive;
            c.duration = Some(run_for);
            c.timeout = Duration::from_secs(5);
            load(&c).unwrap()
        })
    };
    let keepalive = load_gen(format!("http://127.0.0.1:{}/", p.stat), 400.0, true);
    let closing = load_gen(format!("http://127.0.0.1:{}/", p.proxy), 150.0, false);

    // Slow requests, started all through the reloads: each must complete.
    let slow_done = Arc::new(AtomicU64::new(0));
    let slow_bad = Arc::new(std::sync::Mutex::new(Vec::new()));
    let slow_port = p.proxy;
    let slow_threads: Vec<_> = (0..20)
        .map(|i| {
            let (done, bad) = (slow_done.clone(), slow_bad.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(1400 * i));
                let (status, resp) = get(slow_port, "/slow/x");
                let body: String = (0..200u8).map(|i| (b'a' + i % 26) as char).collect();
                if status == 200 && resp.ends_with(&body) {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    bad.lock().unwrap().push(format!("{status}: {resp}"));
                }
            })
        })
        .collect();

    // Reload every 100 ms for 30 s, alternating a and b; every 50th round
    // an invalid config, refused while the last good one serves.
    let started = Instant::now();
    let mut tag = "a";
    let mut rounds = 0;
    let mut refused = 0;
    while started.elapsed() < run_for {
        let tick = Instant::now();
        rounds += 1;
        if rounds % 50 == 0 {
            std::fs::write(&cfg_path, config("broken", &p, false)).unwrap();
            let (status, body) = admin(p.admin, "POST", "/reload", "");
            assert_eq!(status, 400, "an invalid config was not refused: {body}");
            assert!(
                body.contains("weir.toml:") && body.contains("no-such-dir"),
                "the refusal does not point at the error: {body}"
            );
            refused += 1;
        } else {
            tag = if tag == "a" { "b" } else { "a" };
            std::fs::write(&cfg_path, config(tag, &p, true)).unwrap();
            let (status, body) = admin(p.admin, "POST", "/reload", "");
            assert_eq!(status, 200, "reload {rounds} failed: {body}");
        }
        // The next request sees the config in force.
        let (status, resp) = get(p.stat, "/");
        assert_eq!(status, 200);
        assert_eq!(
            header(&resp, "x-config"),
            Some(tag),
            "round {rounds}: {resp}"
        );
        let (_, resp) = get(p.proxy, "/");
        assert_eq!(
            header(&resp, "x-config"),
            Some(tag),
            "round {rounds}: {resp}"
        );
        if let Some(rest) = Duration::from_millis(100).checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    assert!(rounds >= 100, "only {rounds} reloads in 30 s");
    assert!(refused >= 2);

    for (name, h) in [("keep-alive", keepalive), ("Connection: close", closing)] {
        let r = h.join().unwrap();
        assert!(r.responses > 1000, "{name}: only {} responses", r.responses);
        assert_eq!(
            r.errors.total(),
            0,
            "{name}: failed requests: {:?}",
            r.errors
        );
        assert_eq!(
            r.status.keys().copied().collect::<Vec<_>>(),
            [200],
            "{name}: answers other than 200: {:?}",
            r.status
        );
    }
    for t in slow_threads {
        t.join().unwrap();
    }
    assert!(
        slow_bad.lock().unwrap().is_empty(),
        "slow requests failed: {:?}",
        slow_bad.lock().unwrap()
    );
    assert_eq!(slow_done.load(Ordering::Relaxed), 20);

    // The streams lived through every reload, and still flow.
    for (i, s) in streams.iter().enumerate() {
        assert!(!s.ended.load(Ordering::Relaxed), "stream {i} was cut");
        let before = s.events.load(Ordering::Relaxed);
        assert!(
            poll_until(PATIENCE, || s.events.load(Ordering::Relaxed) > before + 2),
            "stream {i} stopped flowing"
        );
    }
    assert!(
        w.log().contains("reload refused, the running config stays"),
        "a refused reload is not in the log"
    );
    drop(streams);

    // Old configs are gone: threads back to the baseline, memory within a
    // few MiB of it (the allocator keeps some of what it was given).
    assert!(
        poll_until(Duration::from_secs(20), || threads_and_rss(pid).0
            <= threads0),
        "threads {} > {threads0} at the start",
        threads_and_rss(pid).0
    );
    let rss = threads_and_rss(pid).1;
    assert!(
        rss <= rss0 + 8 * 1024,
        "RSS {rss} KiB after the reloads, {rss0} KiB before"
    );
    eprintln!(
        "{rounds} reloads ({refused} refused); threads {threads0} → {}; RSS {rss0} → {rss} KiB",
        threads_and_rss(pid).0
    );
}

#[test]
fn sighup_applies_the_file_and_weir_reload_reports_a_bad_one() {
    let (admin_port, a, b) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let cfg = |port: u16, tag: &str| {
        format!(
            "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\nheaders = {{ X-Config = \"{tag}\" }}\n"
        )
    };
    let w = Weir::start_in(WEIR, dir, &cfg(a, "one"), &[a, admin_port]);
    let path = w.path().join("weir.toml");

    // SIGHUP: the new address listens, the old one no longer accepts.
    std::fs::write(&path, cfg(b, "two")).unwrap();
    w.signal("HUP");
    assert!(
        poll_until(PATIENCE, || TcpStream::connect(addr(b)).is_ok()),
        "the new address does not listen:\n{}",
        w.log()
    );
    let (_, resp) = get(b, "/");
    assert_eq!(header(&resp, "x-config"), Some("two"));
    assert!(
        poll_until(PATIENCE, || TcpStream::connect(addr(a)).is_err()),
        "the removed address still accepts"
    );
    assert!(w.wait_log("stopped listening on", PATIENCE));

    // `weir reload` with a broken file: the errors, exit 1, and the old
    // config goes on serving.
    std::fs::write(
        &path,
        format!("[admin]\nlisten = \"127.0.0.1:{admin_port}\"\n[site.\"127.0.0.1:1\"]\nroot = 5\n"),
    )
    .unwrap();
    let out = std::process::Command::new(WEIR)
        .args(["reload", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("weir.toml:4:"), "no position: {stderr}");
    assert!(stderr.contains("reload refused"), "{stderr}");
    let (status, resp) = get(b, "/");
    assert_eq!(status, 200);
    assert_eq!(header(&resp, "x-config"), Some("two"));

    // And a good one: exit 0, applied.
    std::fs::write(&path, cfg(b, "three")).unwrap();
    let out = std::process::Command::new(WEIR)
        .args(["reload", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("reloaded"));
    let (_, resp) = get(b, "/");
    assert_eq!(header(&resp, "x-config"), Some("three"));
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let (adm, port) = (free_port(), free_port());
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[admin]\nlisten = \"127.0.0.1:{adm}\"\n[site.\"127.0.0.1:{port}\"]\nroot = \".\"\n"
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(WEIR)
        .args(["run", "--config", cfg.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let next = || {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("no message from weir");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // Ready only once it listens.
    assert_eq!(next().trim(), "READY=1");
    assert!(std::net::TcpStream::connect(addr(port)).is_ok());
    // A reload: RELOADING (with the monotonic time systemd wants), READY.
    std::process::Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    let reloading = next();
    assert!(reloading.contains("RELOADING=1"), "{reloading}");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    assert_eq!(next().trim(), "READY=1");
    // Shutdown.
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(next().trim(), "STOPPING=1");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_stream_through_a_replaced_proxy_ends_after_the_grace_period_and_others_live_on() {
    let (adm, kept, changed) = (free_port(), free_port(), free_port());
    let sse = sse_upstream();
    let cfg = |timeout: &str| {
        format!(
            r#"[server]
grace_period = "1s"
[admin]
listen = "127.0.0.1:{adm}"
[site."127.0.0.1:{kept}"]
proxy = {{ to = ["127.0.0.1:{sse}"] }}
[site."127.0.0.1:{changed}"]
proxy = {{ to = ["127.0.0.1:{sse}"], connect_timeout = "{timeout}" }}
"#
        )
    };
    let w = Weir::start_on(WEIR, &cfg("5s"), &[adm, kept, changed]);
    let stays = open_stream(kept);
    let goes = open_stream(changed);
    assert!(poll_until(PATIENCE, || {
        stays.events.load(Ordering::Relaxed) > 2 && goes.events.load(Ordering::Relaxed) > 2
    }));
    std::fs::write(w.path().join("weir.toml"), cfg("6s")).unwrap();
    let reloaded = Instant::now();
    let (status, body) = admin(adm, "POST", "/reload", "");
    assert_eq!(status, 200, "{body}");
    // The changed proxy's stream flows through the grace period, then ends.
    assert!(
        poll_until(PATIENCE, || goes.ended.load(Ordering::Relaxed)),
        "the stream through the replaced proxy was never closed"
    );
    assert!(
        reloaded.elapsed() >= Duration::from_millis(900),
        "closed before the grace period was over: {:?}",
        reloaded.elapsed()
    );
    assert!(w.wait_log(
        "closing 1 streams left open through it by a reload",
        PATIENCE
    ));
    // The unchanged one goes on.
    let before = stays.events.load(Ordering::Relaxed);
    assert!(poll_until(PATIENCE, || stays
        .events
        .load(Ordering::Relaxed)
        > before + 5));
    assert!(!stays.ended.load(Ordering::Relaxed));
}
