//! The connection holder behind `weir-bench hold` and the `idle` scenario:
//! opens N connections (TCP, TLS for https), sends one keep-alive GET on each,
//! reads the whole answer, then keeps every connection open and idle, so the
//! server's memory per idle connection can be measured from outside.
//!
//! Connections are opened with bounded parallelism (a semaphore) so the
//! server sees a steady stream of handshakes, not a SYN flood. One tokio task
//! per connection; after its GET a task only waits for the server to close
//! (counted) or for the end of the hold. Never sends a second request.
//!
//! ```no_run
//! use weir_bench::hold::{HoldConfig, run};
//! let mut cfg = HoldConfig::new("https://127.0.0.1:8443/index.html");
//! cfg.connections = 1000;
//! cfg.insecure = true;
//! let (report, ()) = run(&cfg, |_held| ()).unwrap();
//! println!("{} of {} served", report.served, report.requested);
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};

use crate::load::{self, LoadError, Target};

/// Errors that stop a hold run before it starts.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The URL, TLS options or counts are unusable.
    #[error(transparent)]
    Options(#[from] LoadError),
    /// The runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// What to hold.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// Target URL (`http://` or `https://`); its path is requested once per connection.
    pub url: String,
    /// Connections to open.
    pub connections: usize,
    /// Connections being opened at once.
    pub parallel: usize,
    /// How long to hold every connection idle once all attempts are done.
    pub hold: Duration,
    /// Limit for connect + handshake + first answer of one connection.
    pub timeout: Duration,
    /// Stop opening new connections after this long (the rest count as not attempted).
    pub open_limit: Duration,
    /// `Host` header (default: the URL's authority).
    pub host: Option<String>,
    /// Accept any TLS certificate.
    pub insecure: bool,
    /// Trust this CA file (PEM).
    pub cacert: Option<PathBuf>,
    /// TLS server name (default: the URL's host).
    pub sni: Option<String>,
    /// If set, an answer counts as served only with exactly this body.
    pub expect_body: Option<Vec<u8>>,
}

impl HoldConfig {
    /// Defaults: 100 connections, 200 at a time, 10 s hold, 10 s timeout, 120 s to open.
    pub fn new(url: &str) -> HoldConfig {
        HoldConfig {
            url: url.into(),
            connections: 100,
            parallel: 200,
            hold: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
            open_limit: Duration::from_secs(120),
            host: None,
            insecure: false,
            cacert: None,
            sni: None,
            expect_body: None,
        }
    }
}

/// Why a connection did not end up held.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HoldErrors {
    /// TCP connect failed.
    pub connect: u64,
    /// TLS handshake failed.
    pub tls: u64,
    /// Connect, handshake or answer took longer than the timeout.
    pub timeout: u64,
    /// The server closed or reset the connection before answering.
    pub closed: u64,
    /// The answer was not a 200 with the expected body, or unparsable.
    pub bad_answer: u64,
    /// Not attempted because the open limit passed.
    pub not_attempted: u64,
}

impl HoldErrors {
    /// All failures.
    pub fn total(&self) -> u64 {
        self.connect + self.tls + self.timeout + self.closed + self.bad_answer + self.not_attempted
    }
}

/// The outcome of a hold run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HoldReport {
    /// The URL.
    pub url: String,
    /// Connections asked for.
    pub requested: u64,
    /// Connections established (TCP, and TLS for https).
    pub established: u64,
    /// Connections whose GET got a complete 200 (with the expected body if checked).
    pub served: u64,
    /// Served connections the server closed while they were held.
    pub closed_by_server: u64,
    /// Served connections still open when the hold ended.
    pub open_at_end: u64,
    /// Seconds from the first connect to the last attempt's end.
    pub open_secs: f64,
    /// Seconds every connection was held idle after that.
    pub held_secs: f64,
    /// Failures by kind.
    pub errors: HoldErrors,
}

#[derive(Default)]
struct Counters {
    established: AtomicU64,
    served: AtomicU64,
    closed_by_server: AtomicU64,
    connect: AtomicU64,
    tls: AtomicU64,
    timeout: AtomicU64,
    closed: AtomicU64,
    bad_answer: AtomicU64,
}

impl Counters {
    fn report(
        &self,
        cfg: &HoldConfig,
        attempted: u64,
        open: Duration,
        held: Duration,
    ) -> HoldReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let served = g(&self.served);
        let closed_by_server = g(&self.closed_by_server);
        HoldReport {
            url: cfg.url.clone(),
            requested: cfg.connections as u64,
            established: g(&self.established),
            served,
            closed_by_server,
            open_at_end: served.saturating_sub(closed_by_server),
            open_secs: open.as_secs_f64(),
            held_secs: held.as_secs_f64(),
            errors: HoldErrors {
                connect: g(&self.connect),
                tls: g(&self.tls),
                timeout: g(&self.timeout),
                closed: g(&self.closed),
                bad_answer: g(&self.bad_answer),
                not_attempted: (cfg.connections as u64).saturating_sub(attempted),
            },
        }
    }
}

/// Everything the connection tasks share.
struct Shared {
    target: Target,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    request: Vec<u8>,
    timeout: Duration,
    expect_body: Option<Vec<u8>>,
    counters: Counters,
}

/// Opens and holds the connections. Once every attempt has ended and
/// `cfg.hold` has passed, calls `during` with the report so far (every
/// served connection still open), then closes them all and returns the final
/// report with what `during` returned.
pub fn run<T>(
    cfg: &HoldConfig,
    during: impl FnOnce(&HoldReport) -> T,
) -> Result<(HoldReport, T), HoldError> {
    if cfg.connections == 0 || cfg.parallel == 0 {
        return Err(
            LoadError::Options("connections and parallel must be at least 1".into()).into(),
        );
    }
    let target = Target::parse(&cfg.url)?;
    let tls = if target.tls {
        let config = load::tls::client_config(cfg.insecure, cfg.cacert.as_deref(), &[b"http/1.1"])?;
        let sni = cfg.sni.clone().unwrap_or_else(|| target.host.clone());
        Some((
            tokio_rustls::TlsConnector::from(config),
            load::tls::server_name(&sni)?,
        ))
    } else {
        None
    };
    let host = cfg.host.clone().unwrap_or_else(|| target.authority.clone());
    let request = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n\r\n", target.path).into_bytes();
    let shared = Arc::new(Shared {
        target,
        tls,
        request,
        timeout: cfg.timeout,
        expect_body: cfg.expect_body.clone(),
        counters: Counters::default(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(HoldError::Runtime)?;
    Ok(rt.block_on(async {
        let (stop_tx, stop_rx) = watch::channel(false);
        let sem = Arc::new(Semaphore::new(cfg.parallel));
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(cfg.connections);
        let mut attempted = 0u64;
        for _ in 0..cfg.connections {
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            if start.elapsed() > cfg.open_limit {
                break;
            }
            attempted += 1;
            let shared = shared.clone();
            let stop = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                let conn = open(&shared).await;
                drop(permit);
                if let Some(conn) = conn {
                    idle(&shared, conn, stop).await;
                }
            }));
        }
        // Every attempt has ended once all permits are back.
        let _all = sem.acquire_many(cfg.parallel as u32).await;
        let opened = start.elapsed();
        tokio::time::sleep(cfg.hold).await;
        let held = start.elapsed() - opened;
        let interim = shared.counters.report(cfg, attempted, opened, held);
        let out = during(&interim);
        let held = start.elapsed() - opened;
        let _ = stop_tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        (shared.counters.report(cfg, attempted, opened, held), out)
    }))
}

/// A held connection, plain or TLS.
enum Held {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Connects, handshakes and does the GET; `None` (counted) on failure.
async fn open(sh: &Shared) -> Option<Held> {
    let c = &sh.counters;
    let fail = |a: &AtomicU64| {
        a.fetch_add(1, Ordering::Relaxed);
        None
    };
    let deadline = tokio::time::Instant::now() + sh.timeout;
    let tcp = match tokio::time::timeout_at(deadline, TcpStream::connect(sh.target.addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => return fail(&c.connect),
        Err(_) => return fail(&c.timeout),
    };
    let _ = tcp.set_nodelay(true);
    let mut conn = match &sh.tls {
        None => Held::Plain(tcp),
        Some((connector, name)) => {
            match tokio::time::timeout_at(deadline, connector.connect(name.clone(), tcp)).await {
                Ok(Ok(s)) => Held::Tls(Box::new(s)),
                Ok(Err(_)) => return fail(&c.tls),
                Err(_) => return fail(&c.timeout),
            }
        }
    };
    c.established.fetch_add(1, Ordering::Relaxed);
    let answer = match &mut conn {
        Held::Plain(s) => tokio::time::timeout_at(deadline, exchange(s, sh)).await,
        Held::Tls(s) => tokio::time::timeout_at(deadline, exchange(&mut **s, sh)).await,
    };
    match answer {
        Ok(Ok(())) => {
            c.served.fetch_add(1, Ordering::Relaxed);
            Some(conn)
        }
        Ok(Err(Answer::Closed)) => fail(&c.closed),
        Ok(Err(Answer::Bad)) => fail(&c.bad_answer),
        Err(_) => fail(&c.timeout),
    }
}

/// Why an answer was not accepted.
enum Answer {
    Closed,
    Bad,
}

/// Sends the GET and reads one whole answer (Content-Length or chunked).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, sh: &Shared) -> Result<(), Answer> {
    s.write_all(&sh.request).await.map_err(|_| Answer::Closed)?;
    s.flush().await.map_err(|_| Answer::Closed)?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| Answer::Closed)?;
        if n == 0 {
            return Err(Answer::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_answer(&buf) {
            Parsed::Partial => continue,
            Parsed::Bad => return Err(Answer::Bad),
            Parsed::Done { status, body } => {
                let body_ok = match (&sh.expect_body, body) {
                    (Some(want), Some(got)) => want.as_slice() == got,
                    (Some(_), None) => true, // chunked: framing checked, content not
                    (None, _) => true,
                };
                return if status == 200 && body_ok {
                    Ok(())
                } else {
                    Err(Answer::Bad)
                };
            }
        }
    }
}

enum Parsed<'a> {
    Partial,
    Bad,
    /// `body` is the exact body for Content-Length answers, `None` for chunked ones.
    Done {
        status: u16,
        body: Option<&'a [u8]>,
    },
}

fn parse_answer(buf: &[u8]) -> Parsed<'_> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Bad,
    };
    let status = resp.code.unwrap_or(0);
    let header = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"chunked")) {
        return if buf[head..].ends_with(b"0\r\n\r\n") {
            Parsed::Done { status, body: None }
        } else {
            Parsed::Partial
        };
    }
    let len = match header("content-length")
        .map(|v| std::str::from_utf8(v).ok()?.trim().parse::<usize>().ok())
    {
        Some(Some(n)) => n,
        Some(None) => return Parsed::Bad,
        None => 0,
    };
    match buf.len() - head {
        have if have < len => Parsed::Partial,
        have if have == len => Parsed::Done {
            status,
            body: Some(&buf[head..]),
        },
        _ => Parsed::Bad,
    }
}

/// Keeps a served connection open and idle until the hold ends; counts it if
/// the server closes it first.
async fn idle(sh: &Shared, conn: Held, mut stop: watch::Receiver<bool>) {
    let mut byte = [0u8; 1];
    let closed = async {
        match conn {
            Held::Plain(mut s) => s.read(&mut byte).await,
            Held::Tls(mut s) => s.read(&mut byte).await,
        }
    };
    tokio::select! {
        _ = closed => {
            sh.counters.closed_by_server.fetch_add(1, Ordering::Relaxed);
        }
        _ = stop.wait_for(|s| *s) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_length_and_chunked() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        assert!(matches!(
            parse_answer(ok),
            Parsed::Done { status: 200, body: Some(b) } if b == b"abc"
        ));
        assert!(matches!(parse_answer(&ok[..ok.len() - 1]), Parsed::Partial));
        let ch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert!(matches!(
            parse_answer(ch),
            Parsed::Done {
                status: 200,
                body: None
            }
        ));
        assert!(matches!(parse_answer(b"nonsense\r\n\r\n"), Parsed::Bad));
    }
}
