//! `weir-bench relay` passes bytes through unchanged, both ways, with one
//! upstream connection per client connection.

use std::io::{Read, Write};
use std::sync::atomic::Ordering;

use weir_bench::backend::{BackendConfig, start as start_backend};
use weir_bench::load::{LoadConfig, run};

/// Kills the relay when the test ends, however it ends.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_relay_passes_requests_and_responses_through_byte_for_byte() {
    let backend = start_backend(&BackendConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        size: 10,
        delay: std::time::Duration::ZERO,
        threads: 1,
    })
    .unwrap();
    // The command a user runs, not only the library function.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let relay: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = relay_command(relay, backend.addr)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _stop = Stop(child);
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(relay).is_err() {
        assert!(started.elapsed().as_secs() < 10, "the relay never listened");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // Two pipelined requests on one connection: both answers, exactly the
    // backend's bytes, in order.
    let mut c = std::net::TcpStream::connect(relay).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    c.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let one = "HTTP/1.1 200 OK\r\nServer: weir-bench-backend\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nabcdefghij";
    assert_eq!(String::from_utf8(got).unwrap(), format!("{one}{one}"));

    // Under load: every request reaches the backend once and every answer
    // comes back whole.
    let before = backend.requests.load(Ordering::Relaxed);
    let mut cfg = LoadConfig::new(&format!("http://{relay}/"));
    cfg.progress = false;
    cfg.connections = 8;
    cfg.threads = 1;
    cfg.requests = Some(3000);
    let r = run(&cfg).unwrap();
    assert_eq!(r.successes, 3000);
    assert_eq!(r.errors.total(), 0);
    assert_eq!(r.connections_opened, 8);
    assert_eq!(backend.requests.load(Ordering::Relaxed) - before, 3000);

    // A second relay, or a backend, on the port the first relay holds must
    // refuse to start and say why, not join its SO_REUSEPORT group and take
    // part of its connections.
    let second = relay_command(relay, backend.addr)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut second = Stop(second);
    let exited = std::time::Instant::now();
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            exited.elapsed().as_secs() < 10,
            "a second relay on a held port kept running"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut err = String::new();
    second
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains(&format!("cannot listen on {relay}")) && err.contains("in use"),
        "{err}"
    );
    let held = start_backend(&BackendConfig {
        listen: relay,
        size: 10,
        delay: std::time::Duration::ZERO,
        threads: 1,
    });
    assert!(held.is_err(), "a backend joined the relay's port");
}

/// `weir-bench relay --listen LISTEN --to TO`.
fn relay_command(listen: std::net::SocketAddr, to: std::net::SocketAddr) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_weir-bench"));
    c.args([
        "relay",
        "--listen",
        &listen.to_string(),
        "--to",
        &to.to_string(),
    ]);
    c
}
