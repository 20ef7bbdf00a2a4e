//! The load generator against servers with known behaviour: counts must be
//! exact, and stalls must show in corrected and open-loop percentiles.

use std::time::Duration;

use weir_bench::load::{LoadConfig, run};
use weir_test_support::policy_server::{self, Action};

fn cfg(url: &str) -> LoadConfig {
    let mut c = LoadConfig::new(url);
    c.progress = false;
    c
}

#[test]
fn request_count_matches_server_count() {
    let srv = policy_server::start(|_| Action::Ok);
    let mut c = cfg(&srv.url());
    c.connections = 8;
    c.threads = 2;
    c.requests = Some(5000);
    let r = run(&c).unwrap();
    assert_eq!(srv.counts.get(|c| &c.requests), 5000);
    assert_eq!(r.responses, 5000);
    assert_eq!(r.successes, 5000);
    assert_eq!(r.status.get(&200), Some(&5000));
    assert_eq!(r.errors.total(), 0);
    assert_eq!(r.connections_opened, 8, "keep-alive must reuse connections");
    // 5000 x (head 39 + body 16)
    assert_eq!(r.bytes, 5000 * (39 + 16));
}

#[test]
fn errors_and_resets_are_counted_exactly() {
    let srv = policy_server::start(|i| match i {
        i if i % 11 == 10 => Action::Reset,
        i if i % 7 == 6 => Action::Error500,
        _ => Action::Ok,
    });
    let mut c = cfg(&srv.url());
    c.connections = 4;
    c.threads = 2;
    c.requests = Some(3000);
    let r = run(&c).unwrap();
    let k = &srv.counts;
    assert_eq!(k.get(|c| &c.requests), 3000);
    assert_eq!(r.status.get(&200).copied().unwrap_or(0), k.get(|c| &c.ok));
    assert_eq!(r.status.get(&500).copied().unwrap_or(0), k.get(|c| &c.e500));
    assert_eq!(r.errors.reset, k.get(|c| &c.resets));
    assert_eq!(
        r.errors.total(),
        r.errors.reset,
        "only resets: {:?}",
        r.errors
    );
    assert_eq!(r.successes, k.get(|c| &c.ok), "500s are not successes");
    assert!(k.get(|c| &c.resets) > 200 && k.get(|c| &c.e500) > 300);
    // Each reset forces a new connection, unless it hit a connection's last request.
    assert!(r.connections_opened <= 4 + r.errors.reset);
    assert!(r.connections_opened + 4 >= 4 + r.errors.reset);
}

#[test]
fn a_stall_shows_in_corrected_percentiles() {
    // One request in 100 takes 50 ms more.
    let srv = policy_server::start(|i| {
        if i % 100 == 99 {
            Action::Delay(Duration::from_millis(50))
        } else {
            Action::Ok
        }
    });
    let mut c = cfg(&srv.url());
    c.connections = 1;
    c.duration = Some(Duration::from_secs(2));
    let r = run(&c).unwrap();
    let raw = r.latency_ms;
    let cor = r
        .latency_corrected_ms
        .expect("closed loops report corrected latency");
    assert!(srv.counts.get(|c| &c.delayed) >= 5);
    assert!(raw.max >= 50.0, "max {raw:?}");
    assert!(raw.p90 < 5.0, "uncorrected p90 should be fast: {raw:?}");
    assert!(
        cor.p99 >= 40.0,
        "corrected p99 must show the stall: {cor:?}"
    );
    assert!(
        cor.p90 >= 10.0,
        "corrected p90 must show the stall: {cor:?}"
    );
}

#[test]
fn a_stall_shows_in_open_loop_percentiles() {
    let srv = policy_server::start(|i| {
        if i % 100 == 99 {
            Action::Delay(Duration::from_millis(50))
        } else {
            Action::Ok
        }
    });
    let mut c = cfg(&srv.url());
    c.connections = 1;
    c.rate = Some(500.0);
    c.duration = Some(Duration::from_secs(2));
    let r = run(&c).unwrap();
    assert_eq!(r.mode, "open");
    let service = r.service_time_ms.expect("open loops report service time");
    assert!(
        r.responses >= 900 && r.responses <= 1001,
        "rate held: {}",
        r.responses
    );
    assert!(service.p90 < 5.0, "service time p90 fast: {service:?}");
    assert!(
        r.latency_ms.p90 >= 10.0,
        "latency from intended send time shows the queue: {:?}",
        r.latency_ms
    );
}

#[test]
fn slow_responses_are_timeout_errors() {
    let srv = policy_server::start(|i| {
        if i % 5 == 4 {
            Action::Delay(Duration::from_millis(1000))
        } else {
            Action::Ok
        }
    });
    let mut c = cfg(&srv.url());
    c.connections = 1;
    c.requests = Some(50);
    c.timeout = Duration::from_millis(400);
    let r = run(&c).unwrap();
    assert_eq!(r.errors.timeout, 10);
    assert_eq!(r.responses, 40);
    assert!(r.warnings.iter().any(|w| w.contains("timeout")));
}

#[test]
fn chunked_bodies_and_no_keepalive() {
    let srv = policy_server::start(|_| Action::Chunked);
    let mut c = cfg(&srv.url());
    c.connections = 2;
    c.requests = Some(200);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 200);
    assert_eq!(r.errors.total(), 0);
    assert_eq!(r.connections_opened, 2);

    let srv = policy_server::start(|_| Action::Ok);
    let mut c = cfg(&srv.url());
    c.connections = 2;
    c.requests = Some(100);
    c.keepalive = false;
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 100);
    assert_eq!(r.connections_opened, 100);
    // `>=`: a parallel test probing a closed ephemeral port may hit this server.
    assert!(srv.counts.get(|c| &c.connections) >= 100);
}

#[test]
fn no_connection_is_opened_without_a_request() {
    // More connections than requests: each request claims its connection's
    // slot before connecting, so the idle ones never connect.
    let srv = policy_server::start(|_| Action::Ok);
    let mut c = cfg(&srv.url());
    c.connections = 8;
    c.threads = 2;
    c.requests = Some(3);
    let r = run(&c).unwrap();
    assert_eq!(r.successes, 3);
    assert_eq!(r.connections_opened, 3);
    assert_eq!(srv.counts.get(|c| &c.requests), 3);
}

#[test]
fn warmup_is_excluded() {
    let srv = policy_server::start(|_| Action::Ok);
    let mut c = cfg(&srv.url());
    c.connections = 2;
    c.warmup = Duration::from_millis(500);
    c.duration = Some(Duration::from_millis(500));
    let r = run(&c).unwrap();
    let served = srv.counts.get(|c| &c.requests);
    assert!(r.responses > 0);
    assert!(
        r.responses < served,
        "warm-up responses must not be counted ({} vs {served})",
        r.responses
    );
    assert!((r.duration_s - 0.5).abs() < 0.05, "{}", r.duration_s);
}

#[test]
fn connect_errors_are_counted() {
    // Bind and drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = cfg(&format!("http://127.0.0.1:{port}/"));
    c.connections = 1;
    c.duration = Some(Duration::from_millis(300));
    let r = run(&c).unwrap();
    assert!(r.errors.connect > 0);
    assert_eq!(r.responses, 0);
}

#[test]
fn http3_needs_https() {
    let mut c = cfg("http://127.0.0.1:1/");
    c.http3 = true;
    let e = run(&c).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid options: --http3 needs an https:// URL"
    );
}

/// Three connections get no answer within the run, the fourth is served
/// at once. Their requests are not errors (the timeout is longer than the
/// run) and not responses, but they waited the whole run: they are in the
/// latency at that wait, and counted apart.
#[test]
fn requests_unanswered_at_the_end_count_at_their_wait() {
    let srv = policy_server::start(|i| {
        if i < 3 {
            Action::Delay(Duration::from_secs(30))
        } else {
            Action::Ok
        }
    });
    let mut c = cfg(&srv.url());
    c.connections = 4;
    c.duration = Some(Duration::from_secs(1));
    c.timeout = Duration::from_secs(20);
    let r = run(&c).unwrap();
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(r.successes > 100, "{}", r.successes);
    // The three stalled ones, and perhaps the fourth connection's last.
    assert!((3..=4).contains(&r.unanswered), "{}", r.unanswered);
    assert_eq!(r.latency_ms.count, r.responses + r.unanswered);
    assert!(
        r.latency_ms.max >= 950.0,
        "the stalled requests waited the whole second: {:?}",
        r.latency_ms
    );
}

/// A server that answers nothing at all: before, its latency figures were
/// empty (all zero), which a table reads as fast.
#[test]
fn a_server_that_answers_nothing_has_the_run_as_its_latency() {
    let srv = policy_server::start(|_| Action::Delay(Duration::from_secs(30)));
    assert_no_answer(&srv.url(), |c| c.connections = 2, 2);
}

/// A TCP server that accepts and then says nothing, so no TLS handshake
/// completes; its port.
fn silent_tcp_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

/// A 600 ms run against `url`, set up by `set`, that gets no answer at all:
/// nothing answered, nothing failed, and `unanswered` requests that waited
/// the whole run.
fn assert_no_answer(url: &str, set: impl FnOnce(&mut LoadConfig), unanswered: u64) {
    let mut c = cfg(url);
    c.insecure = true;
    c.duration = Some(Duration::from_millis(600));
    c.timeout = Duration::from_secs(20);
    set(&mut c);
    let r = run(&c).unwrap();
    assert_eq!(r.responses, 0, "{url}");
    assert_eq!(r.errors.total(), 0, "{url}: {:?}", r.errors);
    assert_eq!(r.unanswered, unanswered, "{url}");
    assert!(r.latency_ms.p50 >= 550.0, "{url}: {:?}", r.latency_ms);
}

/// Connections that never get through the TLS handshake (a server that
/// accepts and then says nothing) hold a request each for the whole run.
#[test]
fn connections_still_opening_at_the_end_are_unanswered() {
    let url = format!("https://127.0.0.1:{}/", silent_tcp_server());
    assert_no_answer(&url, |c| c.connections = 3, 3);
}

/// Thousands of connections on one generator thread, most of them busy
/// with requests: a connect the kernel has finished is seen at once. When
/// all of a thread's connections were futures joined in one task, the busy
/// ones kept the others from being polled, and these connects took 1.4 s
/// (median) of a 2 s run; half of c10000's waited until its end. The bound
/// is a share of the run, not a speed: the bug's median grows with the run
/// (about 70 % of it), a prompt one does not (0.3–0.65 s here, most of it
/// the kernel's accepts, slower when other tests share the CPUs).
#[test]
fn connects_are_seen_promptly_while_other_connections_are_busy() {
    weir_bench::compare::limits::raise_nofile();
    let b = weir_bench::backend::start(&weir_bench::backend::BackendConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        size: 164,
        delay: Duration::ZERO,
        threads: 1,
    })
    .expect("backend");
    let mut c = cfg(&format!("http://{}/", b.addr));
    c.connections = 3000;
    c.threads = 1;
    c.duration = Some(Duration::from_secs(4));
    c.timeout = Duration::from_secs(10);
    let r = run(&c).unwrap();
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert_eq!(r.connections_opened, 3000);
    // Under 40 % of the 4 s run.
    assert!(r.connect_ms.p50 < 1600.0, "connect {:?}", r.connect_ms);
}

/// The same over HTTP/2 and HTTP/3: a connection still opening at the end
/// holds one waiting request per stream.
#[test]
fn h2_and_h3_connections_still_opening_at_the_end_are_unanswered() {
    let url = format!("https://127.0.0.1:{}/", silent_tcp_server());
    let h2 = |c: &mut LoadConfig| {
        c.h2 = true;
        c.connections = 3;
        c.streams = 4;
    };
    assert_no_answer(&url, h2, 12);

    // QUIC to a UDP socket that reads and drops every datagram.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let url = format!("https://127.0.0.1:{}/", udp.local_addr().unwrap().port());
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while udp.recv(&mut buf).is_ok() {}
    });
    let h3 = |c: &mut LoadConfig| {
        c.http3 = true;
        c.connections = 2;
        c.streams = 3;
    };
    assert_no_answer(&url, h3, 6);
}

/// A server that writes `answer(i)` (if any) for the `i`-th request head
/// (from 0) on each connection; its port.
fn answering_server(answer: impl Fn(u64) -> Option<Vec<u8>> + Clone + Send + 'static) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = Vec::new();
                let mut heads = 0u64;
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(p) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..p + 4);
                        if let Some(bytes) = answer(heads)
                            && s.write_all(&bytes).is_err()
                        {
                            return;
                        }
                        heads += 1;
                    }
                }
            });
        }
    });
    port
}

/// A server whose responses carry a `size`-byte body; on every odd request
/// it writes that response and the next one in one go, so the tail of one
/// body and the head of the next response reach the client together.
fn large_body_server(size: usize) -> u16 {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
    let mut one = head.into_bytes();
    one.extend((0..size).map(|i| (i % 251) as u8));
    let two = std::sync::Arc::new([one.clone(), one].concat());
    // Odd requests get two responses; even ones were answered already.
    answering_server(move |i| i.is_multiple_of(2).then(|| two.to_vec()))
}

/// Bodies larger than the read buffer, dropped in the kernel by default and
/// copied with `copy_bodies`: every byte counted, and the response that
/// arrives behind a body's last byte still read (nothing dropped past it).
#[test]
fn large_bodies_are_dropped_or_copied_exactly() {
    let size = 3 * 1024 * 1024 + 7;
    let port = large_body_server(size);
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n").len() as u64;
    for copy in [false, true] {
        let mut c = cfg(&format!("http://127.0.0.1:{port}/big"));
        c.connections = 3;
        c.requests = Some(60);
        c.copy_bodies = copy;
        let r = run(&c).unwrap();
        assert_eq!(r.errors.total(), 0, "copy {copy}: {:?}", r.errors);
        assert_eq!(r.status.get(&200), Some(&60), "copy {copy}");
        assert_eq!(r.bytes, 60 * (head + size as u64), "copy {copy}");
    }
}

/// A body cut short by the server closing is a reset, not a success.
#[test]
fn a_body_cut_short_is_an_error() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n");
            let _ = s.write_all(&vec![b'x'; 1_500_000]);
        }
    });
    for copy in [false, true] {
        let mut c = cfg(&format!("http://127.0.0.1:{port}/"));
        c.connections = 1;
        c.requests = Some(3);
        c.copy_bodies = copy;
        let r = run(&c).unwrap();
        assert_eq!(r.successes, 0, "copy {copy}");
        assert_eq!(r.errors.reset, 3, "copy {copy}: {:?}", r.errors);
    }
}

/// Large chunks are dropped or copied exactly too: every byte of the
/// framing and the data counted, the trailer read, the next response found.
#[test]
fn large_chunked_bodies_are_dropped_or_copied_exactly() {
    let chunk = 1024 * 1024 + 5;
    let mut resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..2 {
        resp.extend(format!("{chunk:x}\r\n").as_bytes());
        resp.extend(std::iter::repeat_n(b'z', chunk));
        resp.extend(b"\r\n");
    }
    resp.extend(b"0\r\nx-end: 1\r\n\r\n");
    let len = resp.len() as u64;
    let resp = std::sync::Arc::new(resp);
    let port = answering_server(move |_| Some(resp.to_vec()));
    for copy in [false, true] {
        let mut c = cfg(&format!("http://127.0.0.1:{port}/"));
        c.connections = 2;
        c.requests = Some(20);
        c.copy_bodies = copy;
        let r = run(&c).unwrap();
        assert_eq!(r.errors.total(), 0, "copy {copy}: {:?}", r.errors);
        assert_eq!(r.status.get(&200), Some(&20), "copy {copy}");
        assert_eq!(r.bytes, 20 * len, "copy {copy}");
    }
}
