//! `weir-bench hold` against the in-process backend: every connection is
//! established, served and still open during the hold; the CLI's JSON says so.

use std::process::Command;
use std::time::Duration;

use weir_bench::backend::{self, BackendConfig};
use weir_bench::hold::{self, HoldConfig};

fn backend() -> backend::Backend {
    backend::start(&BackendConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        size: 164,
        delay: Duration::ZERO,
        threads: 1,
    })
    .expect("backend")
}

#[test]
fn holds_every_connection_open_until_the_end() {
    let b = backend();
    let mut cfg = HoldConfig::new(&format!("http://{}/", b.addr));
    cfg.connections = 300;
    cfg.parallel = 50;
    cfg.hold = Duration::from_millis(300);
    cfg.expect_body = Some((0..164).map(|i| b'a' + (i % 26) as u8).collect());
    let (r, during) = hold::run(&cfg, |r| r.served - r.closed_by_server).unwrap();
    assert_eq!(during, 300, "{r:?}");
    assert_eq!(r.requested, 300);
    assert_eq!(r.established, 300, "{r:?}");
    assert_eq!(r.served, 300, "{r:?}");
    assert_eq!(r.open_at_end, 300, "{r:?}");
    assert_eq!(r.errors.total(), 0, "{r:?}");
    assert!(r.held_secs >= 0.3, "{r:?}");
}

#[test]
fn a_wrong_body_is_not_served() {
    let b = backend();
    let mut cfg = HoldConfig::new(&format!("http://{}/", b.addr));
    cfg.connections = 5;
    cfg.hold = Duration::ZERO;
    cfg.expect_body = Some(b"something else".to_vec());
    let (r, ()) = hold::run(&cfg, |_| ()).unwrap();
    assert_eq!(r.established, 5);
    assert_eq!(r.served, 0);
    assert_eq!(r.errors.bad_answer, 5, "{r:?}");
}

#[test]
fn nobody_listening_counts_connect_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = HoldConfig::new(&format!("http://127.0.0.1:{port}/"));
    cfg.connections = 3;
    cfg.hold = Duration::ZERO;
    let (r, ()) = hold::run(&cfg, |_| ()).unwrap();
    assert_eq!(r.established, 0);
    assert_eq!(r.errors.connect, 3, "{r:?}");
}

#[test]
fn cli_prints_json() {
    let b = backend();
    let out = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args(["hold", &format!("http://{}/", b.addr), "-c", "20"])
        .args(["--hold", "100ms", "--json"])
        .output()
        .expect("run weir-bench hold");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["established"], 20, "{v}");
    assert_eq!(v["served"], 20, "{v}");
    assert_eq!(v["open_at_end"], 20, "{v}");
}

/// `compare` tells a cache's hits from its misses by the backend's count:
/// every request counts but the count's own, which is answered with it.
#[test]
fn the_backend_counts_every_request_but_its_count() {
    use std::sync::atomic::Ordering;
    use weir_bench::compare::process::fetch;
    let b = backend();
    let count = || fetch(b.addr.port(), false, backend::REQUESTS_PATH).unwrap();
    assert_eq!(count(), (200, b"0\n".to_vec()));
    let mut c = weir_bench::load::LoadConfig::new(&format!("http://{}/page", b.addr));
    c.requests = Some(250);
    c.connections = 5;
    c.progress = false;
    assert_eq!(weir_bench::load::run(&c).unwrap().successes, 250);
    let (status, body) = fetch(b.addr.port(), false, "/other").unwrap();
    assert_eq!((status, body.len()), (200, 164));
    assert_eq!(count(), (200, b"251\n".to_vec()));
    assert_eq!(b.requests.load(Ordering::Relaxed), 251);
}
