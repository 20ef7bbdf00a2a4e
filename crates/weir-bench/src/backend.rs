//! `weir-bench backend`: a small, fast upstream application to put behind
//! proxies (the role of the Go and Rust apps in seeds 002 and 003).
//!
//! Every request gets `200 OK` with a fixed body of `size` bytes after an
//! optional delay: `text/plain` letters, or for a path ending in `.json`
//! ([`JSON_PATH`]) a JSON document of the same size ([`json_body`]), the
//! kind of answer a proxy compresses. HTTP/1.1 with keep-alive and pipelining; one
//! current-thread runtime per `threads`, each with its own `SO_REUSEPORT`
//! listener. Request bodies (Content-Length) are read and discarded; chunked
//! request bodies are not supported (answered with 411 and closed).
//!
//! `GET /weir-bench/requests` ([`REQUESTS_PATH`]) is answered at once with
//! the number of other requests answered so far, in decimal and a newline,
//! and is not counted itself: `compare` asks it before and after a caching
//! proxy's run to tell how many of the proxy's answers were misses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Errors starting the backend or the relay ([`crate::relay`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding the listen address failed.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// A thread or runtime could not be started.
    #[error("cannot start a serving thread: {0}")]
    Thread(std::io::Error),
}

/// Backend settings.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Response body size in bytes.
    pub size: usize,
    /// Delay before each response.
    pub delay: Duration,
    /// Threads (each with its own listener socket).
    pub threads: usize,
}

/// The path the backend answers with its request count (module doc).
pub const REQUESTS_PATH: &str = "/weir-bench/requests";

/// A path the backend answers with [`json_body`] (any path ending in
/// `.json` does).
pub const JSON_PATH: &str = "/data.json";

/// A running backend: its address and request counter.
pub struct Backend {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// Requests answered so far.
    pub requests: Arc<AtomicU64>,
}

/// Builds a canned response once.
fn response(content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nServer: weir-bench-backend\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// The text body of `size` bytes: the alphabet, repeated.
pub fn text_body(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A JSON document of exactly `size` bytes (from 2 up), the same for the
/// same size: an API's list of user records, varied as real ones are
/// (names, e-mail addresses, numbers, dates from a fixed pseudo-random
/// sequence), so it compresses about as much as real JSON does, not as a
/// repeated string would.
pub fn json_body(size: usize) -> Vec<u8> {
    const NAMES: [&str; 12] = [
        "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
        "Olivia", "Walter",
    ];
    const CITIES: [&str; 8] = [
        "Berlin", "Paris", "Lisbon", "Oslo", "Madrid", "Vienna", "Prague", "Dublin",
    ];
    const TAGS: [&str; 6] = ["admin", "user", "beta", "staff", "guest", "premium"];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        // xorshift64: fixed, dependency-free, good enough to vary records.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    // The closing note: `,"note":"…"}` around at least one filler byte.
    const NOTE: usize = 12;
    let mut out = b"{\"items\":[".to_vec();
    for id in 1.. {
        let first = NAMES[next(NAMES.len())];
        let record = format!(
            "{}{{\"id\":{id},\"name\":\"{first} {}son\",\"email\":\"{}{id}@example.com\",\"active\":{},\"score\":{}.{:02},\"city\":\"{}\",\"tags\":[\"{}\",\"{}\"],\"created\":\"2026-{:02}-{:02}T{:02}:{:02}:00Z\"}}",
            if id == 1 { "" } else { "," },
            NAMES[next(NAMES.len())],
            first.to_ascii_lowercase(),
            next(10) < 7,
            next(100),
            next(100),
            CITIES[next(CITIES.len())],
            TAGS[next(3)],
            TAGS[3 + next(3)],
            1 + next(12),
            1 + next(28),
            next(24),
            next(60),
        );
        if out.len() + record.len() + 1 + NOTE > size {
            break;
        }
        out.extend_from_slice(record.as_bytes());
    }
    out.push(b']');
    if out.len() + NOTE > size {
        // Too small for one record: a JSON string of the size.
        let mut s = vec![b'"'; size.max(2)];
        s[1..size.max(2) - 1].fill(b'x');
        return s;
    }
    out.extend_from_slice(b",\"note\":\"");
    let fill = size - out.len() - 2;
    out.extend((0..fill).map(|i| b'a' + (i % 26) as u8));
    out.extend_from_slice(b"\"}");
    out
}

/// The answer to [`REQUESTS_PATH`]: `n` and a newline, never to be cached.
fn count_response(n: u64) -> String {
    let body = format!("{n}\n");
    format!(
        "HTTP/1.1 200 OK\r\nServer: weir-bench-backend\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A non-blocking `SO_REUSEPORT` listener on `addr`.
fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let s = tcp_socket(addr)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    Ok(s.into())
}

/// Fails with `AddrInUse` if anything is bound to `addr` already: without
/// this, a `SO_REUSEPORT` listener of the same user (a backend or relay left
/// over from an earlier run) would be joined silently and take part of the
/// connections. A socket without the option cannot join such a group. (The
/// same check as weir's `server::listen::ensure_unbound`; the two binaries
/// share no crate for it.)
fn ensure_unbound(addr: SocketAddr) -> std::io::Result<()> {
    tcp_socket(addr)?.bind(&addr.into())
}

/// A TCP socket for `addr`'s family with `SO_REUSEADDR` (a restarted
/// backend can take its port while old connections sit in TIME_WAIT).
fn tcp_socket(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    Ok(s)
}

/// Starts the backend on background threads and returns once it listens.
pub fn start(cfg: &BackendConfig) -> Result<Backend, StartError> {
    let requests = Arc::new(AtomicU64::new(0));
    let answers = Arc::new(Answers {
        text: response("text/plain", &text_body(cfg.size)),
        json: response("application/json", &json_body(cfg.size)),
    });
    let counted = requests.clone();
    let delay = cfg.delay;
    let addr = serve_on_threads(cfg.listen, cfg.threads, "backend", move |s| {
        let _ = s.set_nodelay(true);
        serve(s, answers.clone(), delay, counted.clone())
    })?;
    Ok(Backend { addr, requests })
}

/// Listens on `listen` with `threads` `SO_REUSEPORT` sockets, each accepted
/// on its own thread (`{name}-{i}`) by a current-thread runtime that spawns
/// `conn(stream)` for every connection; returns the bound address (useful
/// with port 0). The shape weir itself has, for the backend and the relay.
pub(crate) fn serve_on_threads<F, Fut>(
    listen: SocketAddr,
    threads: usize,
    name: &str,
    conn: F,
) -> Result<SocketAddr, StartError>
where
    F: Fn(TcpStream) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if listen.port() != 0 {
        ensure_unbound(listen).map_err(|e| StartError::Bind(listen, e))?;
    }
    let first = bind(listen).map_err(|e| StartError::Bind(listen, e))?;
    let addr = first
        .local_addr()
        .map_err(|e| StartError::Bind(listen, e))?;
    let mut listeners = vec![first];
    for _ in 1..threads.max(1) {
        listeners.push(bind(addr).map_err(|e| StartError::Bind(addr, e))?);
    }
    for (i, l) in listeners.into_iter().enumerate() {
        let conn = conn.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StartError::Thread)?;
        std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(l) = TcpListener::from_std(l) else {
                        return;
                    };
                    loop {
                        let Ok((s, _)) = l.accept().await else {
                            continue;
                        };
                        tokio::spawn(conn(s));
                    }
                })
            })
            .map_err(StartError::Thread)?;
    }
    Ok(addr)
}

/// The canned responses, each built once.
struct Answers {
    text: Vec<u8>,
    json: Vec<u8>,
}

/// Serves one connection until the client closes it.
async fn serve(mut s: TcpStream, answers: Arc<Answers>, delay: Duration, requests: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 16 * 1024];
    let (mut start, mut end) = (0usize, 0usize);
    let mut out = Vec::with_capacity(answers.text.len().max(answers.json.len()));
    loop {
        // Answer every complete request in the buffer (pipelining), then write once.
        let mut close = false;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf[start..end]) {
                Ok(httparse::Status::Complete(n)) => {
                    let mut body = 0usize;
                    for h in req.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            body = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                        } else if h.name.eq_ignore_ascii_case("connection")
                            && h.value.eq_ignore_ascii_case(b"close")
                        {
                            close = true;
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            let _ = s.write_all(b"HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                            return;
                        }
                    }
                    if req.version == Some(0) {
                        close = true;
                    }
                    if end - start < n + body {
                        break; // wait for the rest of the body
                    }
                    let count = req.path == Some(REQUESTS_PATH);
                    let json = req
                        .path
                        .is_some_and(|p| p.split('?').next().unwrap_or(p).ends_with(".json"));
                    start += n + body;
                    if count {
                        let n = requests.load(Ordering::Relaxed);
                        out.extend_from_slice(count_response(n).as_bytes());
                    } else {
                        out.extend_from_slice(if json { &answers.json } else { &answers.text });
                        requests.fetch_add(1, Ordering::Relaxed);
                    }
                    if close {
                        break;
                    }
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => {
                    let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                    return;
                }
            }
        }
        if !out.is_empty() {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if s.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
        if start == end {
            start = 0;
            end = 0;
        } else if end == buf.len() {
            if start == 0 {
                buf.resize(buf.len() * 2, 0); // a large request body
            } else {
                buf.copy_within(start..end, 0);
                end -= start;
                start = 0;
            }
        }
        match s.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => end += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_body_is_valid_json_of_exactly_the_size_asked() {
        for size in [2, 3, 11, 40, 164, 1000, 20 * 1024, 100_000] {
            let b = json_body(size);
            assert_eq!(b.len(), size, "{size}");
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            if size >= 1000 {
                assert!(v["items"].as_array().unwrap().len() > size / 250, "{size}");
            }
        }
        assert_eq!(json_body(20 * 1024), json_body(20 * 1024));
    }

    #[test]
    fn a_json_path_gets_the_json_document_and_any_other_the_text() {
        let b = start(&BackendConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            size: 500,
            delay: Duration::ZERO,
            threads: 1,
        })
        .unwrap();
        let get = |path| crate::compare::process::fetch(b.addr.port(), false, path).unwrap();
        assert_eq!(get(JSON_PATH), (200, json_body(500)));
        assert_eq!(get("/api/users.json?page=2"), (200, json_body(500)));
        assert_eq!(get("/"), (200, text_body(500)));
        let head = response("application/json", b"{}");
        assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(
            std::str::from_utf8(&head)
                .unwrap()
                .ends_with("Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        );
    }
}
