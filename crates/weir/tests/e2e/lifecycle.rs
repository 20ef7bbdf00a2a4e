//! The server's life as an operator sees it: graceful shutdown, access logs
//! (and their rotation), custom error pages and headers, static files
//! through curl.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir_test_support::poll::{PATIENCE, poll_until};
use weir_test_support::ports::free_port;
use weir_test_support::process::*;

use crate::WEIR;

fn curl() -> &'static str {
    let ok = Command::new("curl")
        .arg("--version")
        .output()
        .map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "curl is required for the end-to-end tests: apt-get install -y curl"
    );
    "curl"
}

fn run_curl(args: &[&str]) -> String {
    let out = Command::new(curl()).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn sigterm_finishes_in_flight_requests_then_exits_zero() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    // Large enough that a slow reader keeps the response in flight.
    let big = vec![b'x'; 32 << 20];
    std::fs::write(dir.path().join("www/big.bin"), &big).unwrap();
    let mut w = Weir::start_in(
        WEIR,
        dir,
        &format!("[server]\ngrace_period = \"20s\"\n[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
        &[port],
    );
    let mut s = TcpStream::connect(addr(port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 65536];
    let mut total = s.read(&mut got).unwrap();
    assert!(total > 0);

    w.terminate();
    // New connections are refused once it stops accepting...
    assert!(
        poll_until(PATIENCE, || TcpStream::connect(addr(port)).is_err()),
        "still accepting after SIGTERM"
    );
    // ...while the response in flight completes byte for byte.
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n;
                // Slow reader.
                if total < (8 << 20) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Err(e) => panic!("in-flight response cut off after {total} bytes: {e}"),
        }
        if total >= big.len() {
            break;
        }
    }
    let head_len = 1024; // headers are well under this
    assert!(
        total >= big.len() && total < big.len() + head_len,
        "got {total}"
    );
    let status = w
        .wait_exit(Duration::from_secs(10))
        .expect("exits after draining");
    assert!(status.success(), "exit status {status}");
    assert!(w.log().contains("shutting down gracefully"), "{}", w.log());
}

/// weir serving `www/a.txt` ("hello") on a free port, after the `[server]`
/// lines in `server`.
fn hello_site(server: &str) -> (Weir, u16) {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/a.txt"), b"hello").unwrap();
    let w = Weir::start_in(
        WEIR,
        dir,
        &format!("{server}[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
        &[port],
    );
    (w, port)
}

/// Reads one whole 200 response for `/a.txt` of [`hello_site`].
fn read_hello(s: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"hello") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed mid-response");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{got:?}");
}

#[test]
fn sigterm_closes_idle_keep_alive_connections_after_a_last_call() {
    let (mut w, port) = hello_site("[server]\ngrace_period = \"30s\"\n");
    // Keep-alive connections that have each waited idle more than once
    // (the first wait and the later ones take different paths), and one
    // that never sent anything.
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr(port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for _ in 0..3 {
            s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            read_hello(&mut s);
            // Scenario: each connection waits idle between its requests.
            std::thread::sleep(Duration::from_millis(20));
        }
        conns.push(s);
    }
    // Scenario: all of them idle when SIGTERM comes; nothing to poll for.
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    w.terminate();
    // Each idle connection is closed with no bytes after its last call
    // (1 s for a request already on its way), well before the grace
    // period, and the server exits.
    for mut s in conns {
        let mut buf = [0u8; 64];
        assert_eq!(s.read(&mut buf).unwrap(), 0, "idle connection got bytes");
    }
    let status = w
        .wait_exit(Duration::from_secs(10))
        .expect("exits without waiting out the grace period");
    assert!(status.success(), "exit status {status}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn grace_period_bounds_shutdown() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/big.bin"), vec![b'x'; 64 << 20]).unwrap();
    let mut w = Weir::start_in(
        WEIR,
        dir,
        &format!("[server]\ngrace_period = \"1s\"\n[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
        &[port],
    );
    // A client that never reads its response.
    let mut s = TcpStream::connect(addr(port)).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Scenario: weir has the response in flight (nothing to poll for; too
    // short a wait only makes the shutdown easier, never fails the test).
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    w.terminate();
    let status = w.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success());
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[test]
fn access_logs_in_combined_and_json_formats() {
    let p1 = free_port();
    let p2 = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), PAGE_164).unwrap();
    let cfg = format!(
        r#"
[site."127.0.0.1:{p1}"]
root = "www"
access_log = "access.log"

[site."127.0.0.1:{p2}"]
root = "www"
access_log = {{ path = "access.json", format = "json" }}
"#
    );
    let w = Weir::start_in(WEIR, dir, &cfg, &[p1, p2]);
    let out = run_curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-A",
        "weir-test/1",
        "-e",
        "http://ref/",
        &format!("http://127.0.0.1:{p1}/index.html?q=1"),
    ]);
    assert_eq!(out, "200");
    run_curl(&[
        "-s",
        "-o",
        "/dev/null",
        &format!("http://127.0.0.1:{p2}/missing"),
    ]);
    // Each line is written after its response has gone out.
    let read = |name: &str| std::fs::read_to_string(w.path().join(name)).unwrap_or_default();
    let written = poll_until(PATIENCE, || {
        !read("access.log").is_empty() && !read("access.json").is_empty()
    });
    let (combined, json) = (read("access.log"), read("access.json"));
    assert!(written, "access logs not written: {combined:?} {json:?}");
    assert!(combined.starts_with("127.0.0.1 - - ["), "{combined}");
    assert!(
        combined.contains(
            "] \"GET /index.html?q=1 HTTP/1.1\" 200 164 \"http://ref/\" \"weir-test/1\"\n"
        ),
        "{combined}"
    );
    let line: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(line["status"], 404);
    assert_eq!(line["uri"], "/missing");
    assert_eq!(line["method"], "GET");
    // The Host field without its port.
    assert_eq!(line["host"], "127.0.0.1");
}

/// Log rotation as logrotate does it: the file renamed, then SIGUSR1; the
/// lines before stay in the renamed file, the ones after go to a new file
/// at the configured path, and weir says so in its log.
#[test]
fn sigusr1_reopens_the_access_logs_after_rotation() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), PAGE_164).unwrap();
    let cfg = format!("[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\naccess_log = \"access.log\"\n");
    let w = Weir::start_in(WEIR, dir, &cfg, &[port]);
    let read = |name: &str| std::fs::read_to_string(w.path().join(name)).unwrap_or_default();
    let get = |path: &str| {
        let url = format!("http://127.0.0.1:{port}{path}");
        assert_eq!(
            run_curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", &url]),
            "200"
        );
    };
    get("/?before");
    assert!(poll_until(PATIENCE, || read("access.log").contains("/?before")));
    std::fs::rename(w.path().join("access.log"), w.path().join("access.log.1")).unwrap();
    w.signal("USR1");
    assert!(
        w.wait_log("SIGUSR1: reopening the access logs", PATIENCE),
        "{}",
        w.log()
    );
    get("/?after");
    assert!(
        poll_until(PATIENCE, || read("access.log").contains("/?after")),
        "new file: {:?}; rotated: {:?}",
        read("access.log"),
        read("access.log.1")
    );
    assert!(!read("access.log").contains("/?before"));
    assert!(!read("access.log.1").contains("/?after"));
    assert!(w.log().contains("access.log reopened"), "{}", w.log());
    // Still serving.
    get("/?again");
}

#[test]
fn custom_error_pages_and_extra_headers() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("404.html"), "<h1>not here</h1>\n").unwrap();
    let cfg = format!(
        r#"
[site."127.0.0.1:{port}"]
root = "www"
errors = {{ 404 = "404.html" }}
headers = {{ "X-Frame-Options" = "DENY" }}
"#
    );
    let _w = Weir::start_in(WEIR, dir, &cfg, &[port]);
    let out = run_curl(&["-s", "-i", &format!("http://127.0.0.1:{port}/nope")]);
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");
    assert!(
        out.contains("content-type: text/html; charset=utf-8"),
        "{out}"
    );
    assert!(out.contains("x-frame-options: DENY"), "{out}");
    assert!(out.contains("server: weir"), "{out}");
    assert!(out.ends_with("<h1>not here</h1>\n"), "{out}");
}

/// The static-file behaviour a curl user checks by hand, end to end.
#[test]
fn curl_sees_conditionals_ranges_compression_and_listings() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("docs")).unwrap();
    std::fs::write(www.join("index.html"), PAGE_164).unwrap();
    let text: String = (0..400)
        .map(|i| format!("line {i} of a compressible text file\n"))
        .collect();
    std::fs::write(www.join("big.txt"), &text).unwrap();
    std::fs::write(www.join("docs/a.txt"), "a\n").unwrap();
    let cfg = format!("[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\nbrowse = true\n");
    let _w = Weir::start_in(WEIR, dir, &cfg, &[port]);
    let base = format!("http://127.0.0.1:{port}");

    let head = run_curl(&["-s", "-I", &format!("{base}/")]);
    assert!(head.contains("content-length: 164"), "{head}");
    assert!(head.contains("accept-ranges: bytes"), "{head}");
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .expect("etag")
        .trim()
        .to_string();
    let lm = head
        .lines()
        .find_map(|l| l.strip_prefix("last-modified: "))
        .expect("last-modified")
        .trim()
        .to_string();
    let code = |args: &[&str]| {
        let mut a = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}"];
        a.extend_from_slice(args);
        run_curl(&a)
    };
    assert_eq!(
        code(&["-H", &format!("If-None-Match: {etag}"), &format!("{base}/")]),
        "304"
    );
    assert_eq!(
        code(&[
            "-H",
            &format!("If-Modified-Since: {lm}"),
            &format!("{base}/")
        ]),
        "304"
    );
    assert_eq!(
        run_curl(&["-s", "-r", "0-14", &format!("{base}/")]),
        "<!DOCTYPE html>"
    );
    assert_eq!(code(&["-r", "9000-9100", &format!("{base}/")]), "416");
    let gz = run_curl(&[
        "-s",
        "--compressed",
        "-H",
        "Accept-Encoding: gzip",
        &format!("{base}/big.txt"),
    ]);
    assert_eq!(gz, text);
    let enc = run_curl(&[
        "-s",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-H",
        "Accept-Encoding: gzip",
        &format!("{base}/big.txt"),
    ]);
    assert!(enc.contains("content-encoding: gzip"), "{enc}");
    assert!(
        enc.contains("vary: accept-encoding") || enc.contains("vary: Accept-Encoding"),
        "{enc}"
    );
    let redirect = run_curl(&[
        "-s",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("{base}/docs?x=1"),
    ]);
    assert!(redirect.starts_with("HTTP/1.1 308"), "{redirect}");
    assert!(redirect.contains("location: /docs/?x=1"), "{redirect}");
    let listing = run_curl(&["-s", &format!("{base}/docs/")]);
    assert!(listing.contains("a.txt"), "{listing}");
    let json = run_curl(&[
        "-s",
        "-H",
        "Accept: application/json",
        &format!("{base}/docs/"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["name"], "a.txt");
    let h2 = run_curl(&[
        "-s",
        "--http2-prior-knowledge",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version}",
        &format!("{base}/"),
    ]);
    assert_eq!(h2, "2");
}

/// A second weir on a port the first one holds must refuse to start (the
/// per-core workers' SO_REUSEPORT must not let it share the port silently),
/// and the first keeps serving.
#[test]
fn second_instance_on_a_taken_port_refuses_to_start() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), PAGE_164).unwrap();
    let cfg = format!(
        "[site.\"127.0.0.1:{port}\"]\nroot = \"{}\"\n",
        dir.path().display()
    );
    let _first = Weir::start_on(WEIR, &cfg, &[port]);
    let mut second = Weir::start_on(WEIR, &cfg, &[]);
    let status = second
        .wait_exit(Duration::from_secs(10))
        .expect("the second weir must exit, not share the port");
    assert!(!status.success());
    let err = second.log();
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")) && err.contains("in use"),
        "{err}"
    );
    // The cause is said once, not again by the error chain.
    let line = err
        .lines()
        .find(|l| l.contains(&format!("cannot listen on 127.0.0.1:{port}")))
        .unwrap();
    assert_eq!(line.matches("in use").count(), 1, "{err}");
    let resp = raw(
        port,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    );
    assert_eq!(status_of(&resp), 200);
}

/// What the closed-loop clients of
/// [`two_upgrades_and_a_sigterm_under_keep_alive_load_lose_no_request`] saw.
#[derive(Default)]
struct Tally {
    responses: std::sync::atomic::AtomicU64,
    /// Answers that said `Connection: close`, each followed by a clean close.
    closes: std::sync::atomic::AtomicU64,
    errors: std::sync::Mutex<Vec<String>>,
}

/// One client sending `GET /a.txt` back to back on a keep-alive connection,
/// reconnecting when an answer says `Connection: close`, until `stopping`
/// (then it ends at the next such answer) or `done`. A reset, an end of
/// stream before a whole answer, or bytes after a `Connection: close`
/// answer are errors; so is a refused connection before `stopping`.
fn closed_loop_client(port: u16, stopping: &AtomicBool, done: &AtomicBool, t: &Tally) {
    const GET: &[u8] = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    let err = |what: String| t.errors.lock().unwrap().push(what);
    while !done.load(Ordering::Relaxed) {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let mut s = match TcpStream::connect(addr(port)) {
            Ok(s) => s,
            Err(e) => {
                if !stopping.load(Ordering::SeqCst) {
                    err(format!("connect: {e}"));
                }
                return;
            }
        };
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        let mut fresh = true;
        while !done.load(Ordering::Relaxed) {
            let answer = s
                .write_all(GET)
                .and_then(|()| read_keep_alive_hello(&mut s));
            match answer {
                Ok(false) => {}
                Ok(true) => {
                    t.responses.fetch_add(1, Ordering::Relaxed);
                    match s.read(&mut [0u8; 64]) {
                        Ok(0) => {}
                        Ok(n) => err(format!("{n} bytes after Connection: close")),
                        Err(e) => err(format!("after Connection: close: {e}")),
                    }
                    t.closes.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                // Connected as the last process closed its listening
                // socket: the kernel had queued it, no process served it.
                Err(_) if fresh && stopping.load(Ordering::SeqCst) => return,
                Err(e) => {
                    err(format!("request on a kept-alive connection: {e}"));
                    break;
                }
            }
            t.responses.fetch_add(1, Ordering::Relaxed);
            fresh = false;
        }
    }
}

/// Reads one whole `200 hello` answer; true if it says `Connection: close`.
fn read_keep_alive_hello(s: &mut TcpStream) -> std::io::Result<bool> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"hello") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {} bytes of an answer", got.len()),
            ));
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_lowercase();
    if !text.starts_with("http/1.1 200 ok\r\n") {
        return Err(std::io::Error::other(format!("answer {text:?}")));
    }
    Ok(text.contains("\r\nconnection: close\r\n"))
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Issue 55 §5: closed-loop keep-alive HTTP/1.1 clients across a binary
/// upgrade by SIGUSR2, one by `weir upgrade` and a final SIGTERM see every
/// request answered: each draining process answers with `Connection:
/// close` and closes cleanly after it, never under a request (two upgrades
/// used to reset about one request per connection each).
#[test]
fn two_upgrades_and_a_sigterm_under_keep_alive_load_lose_no_request() {
    const CLIENTS: usize = 16;
    let adm = free_port();
    let (mut w, port) = hello_site(&format!(
        "[server]\ngrace_period = \"20s\"\n[admin]\nlisten = \"127.0.0.1:{adm}\"\n"
    ));
    // The processes the upgrades start are not this test's children: they
    // are stopped whatever happens.
    struct Kill(std::sync::Mutex<Vec<u32>>);
    impl Drop for Kill {
        fn drop(&mut self) {
            for pid in self.0.lock().unwrap().iter() {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
    let started = Kill(Default::default());
    let tally = Arc::new(Tally::default());
    let stopping = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    // Ends the clients if an assertion fails first.
    struct Done(Arc<AtomicBool>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _done = Done(done.clone());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (t, stopping, done) = (tally.clone(), stopping.clone(), done.clone());
            std::thread::spawn(move || closed_loop_client(port, &stopping, &done, &t))
        })
        .collect();
    let answered = |more: u64| {
        let from = tally.responses.load(Ordering::Relaxed);
        assert!(
            poll_until(PATIENCE, || {
                tally.responses.load(Ordering::Relaxed) >= from + more
            }),
            "the load stalled: {:?}",
            tally.errors.lock().unwrap()
        );
    };
    answered(500);

    // Every client is on the old process when an upgrade begins: each is
    // told to close once it has drained.
    let told_to_close = |before: u64| {
        let closes = tally.closes.load(Ordering::Relaxed);
        let errors = tally.errors.lock().unwrap();
        assert!(
            closes >= before + CLIENTS as u64,
            "{before} then {closes} answers with Connection: close; {} errors: {errors:?}",
            errors.len()
        );
    };

    // 1. SIGUSR2: the original process starts the second and drains.
    let closes = tally.closes.load(Ordering::Relaxed);
    w.signal("USR2");
    assert!(
        w.wait_log(
            "serves now; this one stops accepting",
            Duration::from_secs(30)
        ),
        "{}",
        w.log()
    );
    let log = w.log();
    let second: u32 = log
        .lines()
        .find_map(|l| l.split("upgrade: process ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no process id in {log}"));
    started.0.lock().unwrap().push(second);
    let status = w
        .wait_exit(Duration::from_secs(30))
        .expect("the first process did not exit");
    assert!(status.success(), "{status}");
    told_to_close(closes);
    answered(500);

    // 2. `weir upgrade`: the second process starts the third and drains.
    let closes = tally.closes.load(Ordering::Relaxed);
    let out = Command::new(WEIR)
        .args(["upgrade", "--admin", &format!("127.0.0.1:{adm}")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let third: u32 = stdout
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process id in {stdout:?}"));
    started.0.lock().unwrap().push(third);
    assert!(
        poll_until(Duration::from_secs(30), || ended(second)),
        "the second process did not exit"
    );
    told_to_close(closes);
    answered(500);

    // 3. SIGTERM: each client ends at its `Connection: close` answer.
    stopping.store(true, Ordering::SeqCst);
    let ok = Command::new("kill")
        .args(["-TERM", &third.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    for c in clients {
        c.join().unwrap();
    }
    assert!(
        poll_until(Duration::from_secs(30), || ended(third)),
        "the third process did not exit"
    );
    let errors = tally.errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "{} errors in {} requests: {errors:?}\n{}",
        errors.len(),
        tally.responses.load(Ordering::Relaxed),
        w.log()
    );
}
