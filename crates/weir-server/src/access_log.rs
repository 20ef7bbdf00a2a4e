//! Per-site access logs, off by default: a line per request in the site's
//! format (a template compiled at config load, or the JSON object), to a
//! file, standard output, syslog or systemd's journal (an entry per line,
//! with fields of its own), for the answers its condition and sample keep.
//!
//! The request path writes a line by walking the compiled segments (no
//! JSON value tree, no per-variable allocation; the time is formatted once
//! a second per thread) straight into its worker's batch: a buffer per
//! worker behind a lock only that worker and, once per batch, the writer
//! take. One writer thread per log does the blocking writes: it wakes for
//! the first line after a quiet spell, gathers for `GATHER`, then takes
//! every worker's batch whole and writes each in one call (nginx's
//! `buffer=` and `flush=` keep a buffer per worker the same way). No line
//! is allocated on its own, no line crosses a channel, and never does a
//! worker thread write to a file or socket.
//!
//! [`reopen`] (SIGUSR1, after log rotation) has every file writer open its
//! path again before its next batch, as nginx does on USR1.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Response;
use weir_config::AccessLogConfig;
use weir_config::log_format::{
    Escape, LogFormat, LogSink, Segment, StatusCond, SyslogConfig, SyslogTarget, Var,
};
use weir_config::routes::PathPattern;
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::date;
use weir_http::sync::lock;
use weir_http::worker::PerWorker;

/// How long the writer gathers lines after the first one of a batch: at
/// most this late in the file, and one wake-up and one write per batch.
const GATHER: Duration = Duration::from_millis(20);

/// Bumped by [`reopen`]; each writer compares it with the one it opened at.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Makes every access log file open its path again before it next writes
/// (a rotated file is left to the rotation; the lines after go to the new one).
pub fn reopen() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// What is logged about one request.
pub struct Entry<'a> {
    pub conn: &'a ConnInfo,
    /// The client after the site's trusted proxies.
    pub client: IpAddr,
    pub parts: &'a http::request::Parts,
    pub resp: &'a Response<Body>,
    /// The Host without its port.
    pub host: &'a str,
    pub site: &'a str,
    /// The route's pattern; `None` for the site's own handler.
    pub route: Option<&'a PathPattern>,
    pub took: Duration,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    /// The request's ID, if it has one.
    pub request_id: Option<&'a [u8]>,
    /// What the request filters' limits and authentication did.
    pub outcome: Outcome,
    /// The name of the limit [`Outcome::limit`] is about.
    pub limit_name: Option<&'a str>,
}

/// What a request's limits and authentication did: set by the request
/// filters as they run, read by the log phase. Plain bytes on the stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub limit: LimitStatus,
    /// Which limit decided [`Outcome::limit`] (`Delayed` and the
    /// refusals): its layer (`SITE`/`ROUTE`) and index among the layer's.
    pub limit_at: Option<(u8, u16)>,
    pub auth: AuthStatus,
}

/// What the limits did, as nginx's `$limit_req_status` says it; the
/// variants are in the order a later limit may override an earlier one's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LimitStatus {
    /// No limit applies.
    #[default]
    None,
    Passed,
    Delayed,
    /// A `dry_run` limit would have refused it.
    RejectedDryRun,
    Rejected,
}

impl LimitStatus {
    fn name(self) -> Option<&'static str> {
        Some(match self {
            LimitStatus::None => return None,
            LimitStatus::Passed => "PASSED",
            LimitStatus::Delayed => "DELAYED",
            LimitStatus::RejectedDryRun => "REJECTED_DRY_RUN",
            LimitStatus::Rejected => "REJECTED",
        })
    }
}

/// What authentication (`basic_auth`, `forward_auth`) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthStatus {
    /// None applies.
    #[default]
    None,
    Passed,
    /// Wrong or missing credentials, or the auth service said no.
    Refused,
    /// The auth service did not answer in time.
    Failed,
}

impl AuthStatus {
    fn name(self) -> Option<&'static str> {
        Some(match self {
            AuthStatus::None => return None,
            AuthStatus::Passed => "PASSED",
            AuthStatus::Refused => "REFUSED",
            AuthStatus::Failed => "FAILED",
        })
    }
}

impl Outcome {
    /// Limit `at` decided `s`: kept if it says more than what came before.
    pub fn limit(&mut self, s: LimitStatus, at: (u8, u16)) {
        if s > self.limit {
            self.limit = s;
            if s > LimitStatus::Passed {
                self.limit_at = Some(at);
            }
        }
    }
}

/// Lines dropped since start-up: no sink could take them (a journal or
/// syslog socket that is full, missing or refusing), or the writer fell
/// [`MAX_PENDING`] behind: `weir_access_log_dropped_total`.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How far a worker's batch may grow while the writer is stuck (a full
/// disk, a blocked pipe): past it lines are dropped and counted, never
/// held in memory without bound.
const MAX_PENDING: usize = 8 << 20;

/// Lines dropped by every access log since start-up.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The lines a worker wrote that the writer has not taken yet, and, for
/// sinks that send a datagram per line (syslog, the journal), where each
/// ends.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Batch {
    fn lines(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter())
            .map(|(a, &b)| &self.bytes[a..b])
    }
}

/// What the workers and a log's writer thread share.
struct Pending {
    batches: PerWorker<Mutex<Batch>>,
    /// The writer is parked, or about to be, until a first line comes.
    idle: AtomicBool,
    /// The log was dropped: the writer writes what is left and ends.
    closed: AtomicBool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.batches.iter().all(|b| lock(b).bytes.is_empty())
    }
}

pub struct AccessLog {
    format: Arc<LogFormat>,
    /// For the journal: the entry's fixed fields (`PRIORITY=`,
    /// `SYSLOG_IDENTIFIER=`); each line is then a whole entry.
    journal: Option<Box<[u8]>>,
    condition: Option<StatusCond>,
    sample: f64,
    /// The sink sends each line on its own ([`Batch::ends`] kept).
    per_line: bool,
    pending: Arc<Pending>,
    writer: std::thread::Thread,
}

impl AccessLog {
    /// Opens the log's sink and starts its writer; `workers`: how many
    /// batches to keep (one per worker, so no two workers share a lock).
    pub fn open(cfg: &AccessLogConfig, workers: usize) -> std::io::Result<AccessLog> {
        let mut out = Out::open(&cfg.sink)?;
        let pending = Arc::new(Pending {
            batches: PerWorker::new(workers, Default::default),
            idle: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let shared = pending.clone();
        let writer = std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || write_batches(&shared, &mut out))?
            .thread()
            .clone();
        let journal = match &cfg.sink {
            LogSink::Journal(j) => {
                let mut fixed = Vec::new();
                // Severity 6: informational, as the syslog sink's.
                journal_field(&mut fixed, b"PRIORITY", b"6");
                journal_field(&mut fixed, b"SYSLOG_IDENTIFIER", j.identifier.as_bytes());
                Some(fixed.into_boxed_slice())
            }
            _ => None,
        };
        Ok(AccessLog {
            format: cfg.format.clone(),
            journal,
            condition: cfg.condition,
            sample: cfg.sample,
            per_line: matches!(cfg.sink, LogSink::Syslog(_) | LogSink::Journal(_)),
            pending,
            writer,
        })
    }

    /// Writes the line of `e`, if the condition and the sample keep it.
    pub fn log(&self, e: &Entry<'_>) {
        if let Some(c) = &self.condition
            && !c.holds(e.resp.status().as_u16())
        {
            return;
        }
        if self.sample < 1.0 && fastrand::f64() >= self.sample {
            return;
        }
        let mut b = lock(self.pending.batches.get(e.conn.worker));
        if b.bytes.len() >= MAX_PENDING {
            drop(b);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = b.bytes.is_empty();
        match &self.journal {
            None => render(&self.format, e, &mut b.bytes),
            Some(fixed) => journal_entry(&self.format, fixed, e, &mut b.bytes),
        }
        if self.per_line {
            let end = b.bytes.len();
            b.ends.push(end);
        }
        drop(b);
        if first && self.pending.idle.swap(false, Ordering::SeqCst) {
            self.writer.unpark();
        }
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.pending.closed.store(true, Ordering::SeqCst);
        self.writer.unpark();
    }
}

/// The writer thread: parked while every batch is empty, woken by the
/// worker whose line starts a batch; then gathers for [`GATHER`] and
/// writes every batch, each taken whole (swapped for an empty buffer, so
/// a worker waits at most for that swap).
fn write_batches(pending: &Pending, out: &mut Out) {
    let mut spare = Batch::default();
    loop {
        // `idle` is set before the batches are looked at, so a worker
        // whose line comes after the look sees it and wakes this thread.
        pending.idle.store(true, Ordering::SeqCst);
        let closed = pending.closed.load(Ordering::SeqCst);
        if !closed && pending.is_empty() {
            std::thread::park();
            continue;
        }
        pending.idle.store(false, Ordering::SeqCst);
        if !closed {
            std::thread::sleep(GATHER);
        }
        out.reopen_if_asked();
        for slot in pending.batches.iter() {
            std::mem::swap(&mut *lock(slot), &mut spare);
            out.write_batch(&spare);
            spare.bytes.clear();
            spare.ends.clear();
        }
        out.flush();
        if closed {
            return;
        }
    }
}

/// Writes the line of `e` in `format`, newline included.
pub fn render(format: &LogFormat, e: &Entry<'_>, out: &mut Vec<u8>) {
    match format {
        LogFormat::Json => json(e, out),
        LogFormat::Template { segments, escape } => {
            for s in segments {
                match s {
                    Segment::Lit(l) => out.extend_from_slice(l.as_bytes()),
                    Segment::Var(v) => {
                        let start = out.len();
                        value(v, e, *escape, out);
                        if out.len() == start && *escape != Escape::Json {
                            out.push(b'-');
                        }
                    }
                }
            }
            out.push(b'\n');
        }
    }
}

/// Appends one field of a journal entry in the native protocol: `KEY=value`
/// and a newline, or, for a value holding a newline, the binary-safe form
/// (`KEY`, a newline, the value's length as 64-bit little-endian, the
/// value, a newline).
fn journal_field(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(key);
    if value.contains(&b'\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// Turns the field whose value starts at `start` (written as `KEY=` then
/// the value, no newline yet) into its final form: the newline, or the
/// binary-safe form when the value holds a newline.
fn journal_close(out: &mut Vec<u8>, eq: usize) {
    let start = eq + 1;
    if out[start..].contains(&b'\n') {
        let len = (out.len() - start) as u64;
        out[eq] = b'\n';
        out.splice(start..start, len.to_le_bytes());
    }
    out.push(b'\n');
}

/// One journal entry for `e`: the line as `MESSAGE`, the fixed fields,
/// and fields of its own a query can select on (`journalctl
/// WEIR_SITE=example.com WEIR_STATUS=502`).
fn journal_entry(format: &LogFormat, fixed: &[u8], e: &Entry<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"MESSAGE=");
    let eq = out.len() - 1;
    render(format, e, out);
    out.pop(); // the line's newline
    journal_close(out, eq);
    out.extend_from_slice(fixed);
    let field = |out: &mut Vec<u8>, key: &[u8], v: &Var| {
        out.extend_from_slice(key);
        out.push(b'=');
        let eq = out.len() - 1;
        value(v, e, Escape::None, out);
        if out.len() == eq + 1 {
            // No value: no field.
            out.truncate(eq - key.len());
        } else {
            journal_close(out, eq);
        }
    };
    field(out, b"WEIR_SITE", &Var::Site);
    field(out, b"WEIR_STATUS", &Var::Status);
    field(out, b"WEIR_METHOD", &Var::Method);
    field(out, b"WEIR_URI", &Var::Uri);
    field(out, b"WEIR_CLIENT_IP", &Var::ClientIp);
    field(out, b"WEIR_DURATION_MS", &Var::DurationMs);
    field(out, b"WEIR_REQUEST_ID", &Var::RequestId);
}

/// Appends `n` in decimal.
fn num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `d` as seconds with milliseconds (`0.003`), as nginx's times.
fn secs(out: &mut Vec<u8>, d: Duration) {
    let ms = d.as_millis();
    num(out, ms / 1000);
    out.push(b'.');
    let frac = (ms % 1000) as u16;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Appends `d` as milliseconds with microseconds (`3.042`).
fn millis(out: &mut Vec<u8>, d: Duration) {
    let us = d.as_micros();
    num(out, us / 1000);
    out.push(b'.');
    let frac = (us % 1000) as u16;
    out.extend_from_slice(&[
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

fn hex(out: &mut Vec<u8>, prefix: &[u8], b: u8) {
    const H: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(prefix);
    out.push(H[usize::from(b >> 4)]);
    out.push(H[usize::from(b & 15)]);
}

/// Appends text a client may have chosen, escaped as `esc` says.
fn text(out: &mut Vec<u8>, esc: Escape, s: &[u8]) {
    match esc {
        Escape::None => out.extend_from_slice(s),
        Escape::Default => {
            for &b in s {
                match b {
                    b'"' | b'\\' => hex(out, b"\\x", b),
                    0x20..=0x7e => out.push(b),
                    _ => hex(out, b"\\x", b),
                }
            }
        }
        Escape::Json => json_escaped(out, s),
    }
}

/// `s` as inside a JSON string: quotes, backslashes and control
/// characters escaped; bytes that are not UTF-8 as the code points of
/// their Latin-1 reading, so every line stays valid JSON.
fn json_escaped(out: &mut Vec<u8>, s: &[u8]) {
    let valid = std::str::from_utf8(s).is_ok();
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..0x20 | 0x7f => hex(out, b"\\u00", b),
            0x80.. if !valid => hex(out, b"\\u00", b),
            _ => out.push(b),
        }
    }
}

fn ip(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        // Digits by hand: `Display` costs several times as much per line.
        IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                num(out, o);
            }
        }
        // Written into the line itself: no String per address.
        IpAddr::V6(_) => {
            let _ = write!(out, "{a}");
        }
    }
}

fn socket_addr(out: &mut Vec<u8>, a: SocketAddr) {
    if a.is_ipv6() {
        out.push(b'[');
        ip(out, a.ip());
        out.push(b']');
    } else {
        ip(out, a.ip());
    }
    out.push(b':');
    num(out, a.port());
}

fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// A route's pattern as written in the config (the metrics label).
fn route(out: &mut Vec<u8>, esc: Escape, p: Option<&PathPattern>) {
    match p {
        None => out.push(b'*'),
        Some(PathPattern::Prefix(s) | PathPattern::Glob(s)) => text(out, esc, s.as_bytes()),
        Some(PathPattern::Dir(d)) => {
            text(out, esc, d.as_bytes());
            out.push(b'*');
        }
        Some(PathPattern::Regex(r)) => {
            out.push(b'~');
            text(out, esc, r.src.as_bytes());
        }
        Some(PathPattern::Any) => out.extend_from_slice(b"(match)"),
    }
}

/// The cache's verdict, from the answer's `Cache-Status` (RFC 9211):
/// `HIT`, `STALE`, `MISS`, `REVALIDATED`, `EXPIRED` or `PASS`.
pub(crate) fn cache_status(resp: &Response<Body>) -> Option<&'static str> {
    let v = resp.headers().get("cache-status")?.as_bytes();
    let has = |needle: &[u8]| v.windows(needle.len()).any(|w| w == needle);
    Some(if has(b"; hit") {
        if has(b"detail=") { "STALE" } else { "HIT" }
    } else if has(b"fwd=stale") {
        if has(b"detail=") {
            "STALE"
        } else if has(b"fwd-status=304") {
            "REVALIDATED"
        } else {
            "EXPIRED"
        }
    } else if has(b"fwd=miss") || has(b"fwd=uri-miss") || has(b"fwd=vary-miss") {
        "MISS"
    } else {
        "PASS"
    })
}

/// Appends the upstream list `each` gives, `, `-separated as nginx's.
fn list<T>(
    out: &mut Vec<u8>,
    e: &Entry<'_>,
    sep: &[u8],
    mut each: impl FnMut(&mut Vec<u8>, &weir_proxy::Attempt) -> T,
) {
    let Some(a) = e.resp.extensions().get::<weir_proxy::Attempts>() else {
        return;
    };
    for (i, at) in a.0.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(sep);
        }
        each(out, at);
    }
}

/// Appends a fixed name `f` gives of the connection's TLS (nothing
/// without TLS, or when it says nothing).
fn tls(
    out: &mut Vec<u8>,
    e: &Entry<'_>,
    f: impl Fn(&weir_http::conn::TlsInfo) -> Option<&'static str>,
) {
    if let Some(v) = e.conn.tls_info.as_deref().and_then(f) {
        out.extend_from_slice(v.as_bytes());
    }
}

/// Appends the value of `v` (nothing when it has none).
fn value(v: &Var, e: &Entry<'_>, esc: Escape, out: &mut Vec<u8>) {
    let p = e.parts;
    match v {
        Var::ClientIp => ip(out, e.client),
        Var::PeerPort => num(out, e.conn.peer.port()),
        Var::PeerIp => ip(out, e.conn.peer.ip()),
        Var::ServerAddr => socket_addr(out, e.conn.local),
        Var::TimeLocal => date::extend_clf(out),
        Var::TimeIso8601 => date::extend_iso8601(out),
        Var::TimeHttp => date::extend(out),
        Var::TimeUnix => {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            secs(out, d);
        }
        Var::Method => text(out, esc, p.method.as_str().as_bytes()),
        Var::Uri => text(
            out,
            esc,
            p.uri
                .path_and_query()
                .map_or("/", |x| x.as_str())
                .as_bytes(),
        ),
        Var::Path => text(out, esc, p.uri.path().as_bytes()),
        Var::Query => text(out, esc, p.uri.query().unwrap_or("").as_bytes()),
        Var::Protocol => out.extend_from_slice(protocol(p.version).as_bytes()),
        Var::Scheme => out.extend_from_slice(if e.conn.tls { b"https" } else { b"http" }),
        Var::Host => text(out, esc, e.host.as_bytes()),
        Var::Status => num(out, e.resp.status().as_u16()),
        Var::BytesSent => {
            if let Some(b) = e.bytes_out {
                num(out, b);
            }
        }
        Var::BytesReceived => num(out, e.bytes_in.unwrap_or(0)),
        Var::RequestTime => secs(out, e.took),
        Var::DurationMs => millis(out, e.took),
        Var::Site => text(out, esc, e.site.as_bytes()),
        Var::Route => route(out, esc, e.route),
        Var::UpstreamAddr => list(out, e, b", ", |o, a| text(o, esc, a.addr().as_bytes())),
        Var::UpstreamStatus => list(out, e, b", ", |o, a| match a.status {
            Some(s) => num(o, s),
            None => o.push(b'-'),
        }),
        Var::UpstreamConnectTime => list(out, e, b", ", |o, a| match a.connect {
            Some(d) => secs(o, d),
            None => o.push(b'-'),
        }),
        Var::UpstreamResponseTime => list(out, e, b", ", |o, a| match a.response {
            Some(d) => secs(o, d),
            None => o.push(b'-'),
        }),
        Var::CacheStatus => {
            if let Some(s) = cache_status(e.resp) {
                out.extend_from_slice(s.as_bytes());
            }
        }
        Var::RequestId => {
            if let Some(id) = e.request_id {
                text(out, esc, id);
            }
        }
        Var::TlsProtocol => tls(out, e, |t| Some(t.version)),
        Var::TlsCipher => tls(out, e, |t| Some(t.cipher)),
        Var::TlsServerName => {
            if let Some(n) = e
                .conn
                .tls_info
                .as_ref()
                .and_then(|t| t.server_name.as_deref())
            {
                text(out, esc, n.as_bytes());
            }
        }
        Var::TlsAlpn => tls(out, e, |t| t.alpn),
        Var::RemoteUser => {
            if let Some(v) = p.headers.get(http::header::AUTHORIZATION) {
                let mut buf = [0u8; 512];
                if let Some(u) = weir_traffic::password::basic_user(v.as_bytes(), &mut buf) {
                    text(out, esc, u);
                }
            }
        }
        Var::LimitStatus => {
            if let Some(s) = e.outcome.limit.name() {
                out.extend_from_slice(s.as_bytes());
            }
        }
        Var::LimitName => {
            if let Some(n) = e.limit_name {
                text(out, esc, n.as_bytes());
            }
        }
        Var::AuthStatus => {
            if let Some(s) = e.outcome.auth.name() {
                out.extend_from_slice(s.as_bytes());
            }
        }
        Var::ReqHeader(h) => {
            if let Some(v) = p.headers.get(h) {
                text(out, esc, v.as_bytes());
            }
        }
        Var::RespHeader(h) => {
            if let Some(v) = e.resp.headers().get(h) {
                text(out, esc, v.as_bytes());
            }
        }
        Var::Cookie(name) => {
            if let Some(v) = weir_proxy::cookie(&p.headers, name) {
                text(out, esc, v.as_bytes());
            }
        }
    }
}

/// The JSON format: every plain variable under its own name, with
/// numbers as numbers and the upstream lists as arrays (an attempt's
/// missing value `null` in its place). A field the request did not have
/// (a TLS field on plain HTTP, no upstream, no referer) is left out, as
/// Caddy's JSON log leaves it: absent fields cost every line their bytes.
fn json(e: &Entry<'_>, out: &mut Vec<u8>) {
    let j = Escape::Json;
    // After the first field: a line is written behind others in a batch.
    let key = |out: &mut Vec<u8>, k: &str| {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b"\":");
    };
    // Strings: each value between quotes.
    let quoted = |out: &mut Vec<u8>, v: &Var| {
        out.push(b'"');
        value(v, e, j, out);
        out.push(b'"');
    };
    let opt_str = |out: &mut Vec<u8>, k: &str, s: Option<&[u8]>| {
        if let Some(s) = s {
            key(out, k);
            out.push(b'"');
            json_escaped(out, s);
            out.push(b'"');
        }
    };
    out.extend_from_slice(b"{\"time\":");
    quoted(out, &Var::TimeIso8601);
    for (k, v) in [
        ("client_ip", Var::ClientIp),
        ("peer_ip", Var::PeerIp),
        ("peer_port", Var::PeerPort),
        ("server_addr", Var::ServerAddr),
        ("scheme", Var::Scheme),
        ("protocol", Var::Protocol),
        ("method", Var::Method),
        ("host", Var::Host),
        ("uri", Var::Uri),
        ("site", Var::Site),
        ("route", Var::Route),
    ] {
        key(out, k);
        if matches!(v, Var::PeerPort) {
            value(&v, e, j, out);
        } else {
            quoted(out, &v);
        }
    }
    key(out, "status");
    num(out, e.resp.status().as_u16());
    if let Some(b) = e.bytes_out {
        key(out, "bytes_sent");
        num(out, b);
    }
    key(out, "bytes_received");
    num(out, e.bytes_in.unwrap_or(0));
    key(out, "request_time");
    secs(out, e.took);
    key(out, "duration_ms");
    millis(out, e.took);
    let h = |n: http::HeaderName| e.parts.headers.get(n).map(|v| v.as_bytes());
    opt_str(out, "referer", h(http::header::REFERER));
    opt_str(out, "user_agent", h(http::header::USER_AGENT));
    opt_str(out, "request_id", e.request_id);
    opt_str(out, "cache_status", cache_status(e.resp).map(str::as_bytes));
    // The variables that are empty without a value: TLS on a plain
    // connection, the user without credentials, no limit or auth.
    for (k, v) in [
        ("tls_protocol", Var::TlsProtocol),
        ("tls_cipher", Var::TlsCipher),
        ("tls_server_name", Var::TlsServerName),
        ("tls_alpn", Var::TlsAlpn),
        ("remote_user", Var::RemoteUser),
        ("limit_status", Var::LimitStatus),
        ("limit_name", Var::LimitName),
        ("auth_status", Var::AuthStatus),
    ] {
        let mark = out.len();
        key(out, k);
        out.push(b'"');
        let start = out.len();
        value(&v, e, j, out);
        if out.len() == start {
            out.truncate(mark);
        } else {
            out.push(b'"');
        }
    }
    if let Some(a) = e.resp.extensions().get::<weir_proxy::Attempts>() {
        let arr = |out: &mut Vec<u8>, k: &str, f: &dyn Fn(&mut Vec<u8>, &weir_proxy::Attempt)| {
            key(out, k);
            out.push(b'[');
            for (i, at) in a.0.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                f(out, at);
            }
            out.push(b']');
        };
        arr(out, "upstream_addr", &|o, a| {
            o.push(b'"');
            json_escaped(o, a.addr().as_bytes());
            o.push(b'"');
        });
        arr(out, "upstream_status", &|o, a| match a.status {
            Some(s) => num(o, s),
            None => o.extend_from_slice(b"null"),
        });
        arr(out, "upstream_connect_time", &|o, a| match a.connect {
            Some(d) => secs(o, d),
            None => o.extend_from_slice(b"null"),
        });
        arr(out, "upstream_response_time", &|o, a| match a.response {
            Some(d) => secs(o, d),
            None => o.extend_from_slice(b"null"),
        });
    }
    out.extend_from_slice(b"}\n");
}

/// A writer's destination.
enum Out {
    /// Standard output, or a file it may open again.
    Stream {
        path: Option<PathBuf>,
        generation: u64,
        w: std::io::BufWriter<Box<dyn Write + Send>>,
    },
    /// One datagram per line.
    Syslog(Syslog),
    /// One datagram per entry (each line is a whole entry).
    Journal(Journal),
}

impl Out {
    fn open(sink: &LogSink) -> std::io::Result<Out> {
        let generation = GENERATION.load(Ordering::Relaxed);
        let (path, file): (_, Box<dyn Write + Send>) = match sink {
            LogSink::Stdout => (None, Box::new(std::io::stdout())),
            LogSink::File(p) => (Some(p.clone()), Box::new(open_append(p)?)),
            LogSink::Syslog(s) => return Syslog::open(s).map(Out::Syslog),
            LogSink::Journal(j) => return Journal::open(&j.socket).map(Out::Journal),
        };
        Ok(Out::Stream {
            path,
            generation,
            w: std::io::BufWriter::with_capacity(64 * 1024, file),
        })
    }

    fn write_batch(&mut self, b: &Batch) {
        match self {
            Out::Stream { w, .. } => {
                let _ = w.write_all(&b.bytes);
            }
            Out::Syslog(s) => b.lines().for_each(|l| s.send(l)),
            Out::Journal(j) => b.lines().for_each(|l| j.send(l)),
        }
    }

    fn flush(&mut self) {
        if let Out::Stream { w, .. } = self {
            let _ = w.flush();
        }
    }

    /// Opens the path again if [`reopen`] was called since it last did;
    /// a file that cannot be opened leaves the old one in use (and says so).
    fn reopen_if_asked(&mut self) {
        let Out::Stream {
            path,
            generation,
            w,
        } = self
        else {
            return;
        };
        let now = GENERATION.load(Ordering::Relaxed);
        if now == *generation {
            return;
        }
        *generation = now;
        let Some(p) = path else { return };
        match open_append(p) {
            Ok(f) => {
                let _ = w.flush();
                *w = std::io::BufWriter::with_capacity(64 * 1024, Box::new(f));
                tracing::info!("access log {} reopened", p.display());
            }
            Err(e) => tracing::warn!(
                "access log {}: cannot reopen ({e}); writing on to the file already open",
                p.display()
            ),
        }
    }
}

fn open_append(p: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
}

/// systemd's journal, natively: one datagram per entry to its socket,
/// never waiting: a socket that is full, missing or refusing costs the
/// entry (counted in [`DROPPED`], said once in weir's log until it takes
/// entries again). An entry too large for one datagram is dropped too
/// (journald's memfd hand-over is not used: an access line is far below
/// the datagram limit).
struct Journal {
    sock: std::os::unix::net::UnixDatagram,
    path: PathBuf,
    failing: bool,
}

impl Journal {
    fn open(path: &Path) -> std::io::Result<Journal> {
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        Ok(Journal {
            sock,
            path: path.to_path_buf(),
            failing: false,
        })
    }

    fn send(&mut self, entry: &[u8]) {
        match self.sock.send_to(entry, &self.path) {
            Ok(_) if self.failing => {
                self.failing = false;
                tracing::info!("access log to the journal: sending again");
            }
            Ok(_) => {}
            Err(e) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(
                        "access log to the journal ({}): {e}; entries are dropped (and counted) until it takes them",
                        self.path.display()
                    );
                }
            }
        }
    }
}

/// RFC 5424 messages over UDP or a Unix datagram socket (`/dev/log`).
struct Syslog {
    sock: SyslogSocket,
    /// `<PRI>1 ` and, after the time, ` HOSTNAME APP-NAME PROCID - - `.
    pri: Vec<u8>,
    rest: Vec<u8>,
    buf: Vec<u8>,
    /// Whether the last send failed (said once, not per line).
    failing: bool,
}

enum SyslogSocket {
    Udp(std::net::UdpSocket, SocketAddr),
    Unix(std::os::unix::net::UnixDatagram, PathBuf),
}

impl Syslog {
    fn open(cfg: &SyslogConfig) -> std::io::Result<Syslog> {
        let sock = match &cfg.to {
            SyslogTarget::Udp(a) => {
                let local: SocketAddr = if a.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                SyslogSocket::Udp(std::net::UdpSocket::bind(local)?, *a)
            }
            SyslogTarget::Unix(p) => {
                SyslogSocket::Unix(std::os::unix::net::UnixDatagram::unbound()?, p.clone())
            }
        };
        // Severity 6: informational.
        let pri = format!("<{}>1 ", u32::from(cfg.facility) * 8 + 6).into_bytes();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| "-".into());
        let tag: String = cfg
            .tag
            .chars()
            .filter(char::is_ascii_graphic)
            .take(48)
            .collect();
        let rest = format!(" {host} {tag} {} access - ", std::process::id()).into_bytes();
        Ok(Syslog {
            sock,
            pri,
            rest,
            buf: Vec::with_capacity(1024),
            failing: false,
        })
    }

    fn send(&mut self, line: &[u8]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let b = &mut self.buf;
        b.clear();
        b.extend_from_slice(&self.pri);
        let iso = date::iso8601(now.as_secs());
        // `…T08:49:37.123Z`: the second's form with milliseconds.
        b.extend_from_slice(&iso[..19]);
        let _ = write!(b, ".{:03}Z", now.subsec_millis());
        b.extend_from_slice(&self.rest);
        b.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
        let sent = match &self.sock {
            SyslogSocket::Udp(s, to) => s.send_to(b, to).map(drop),
            SyslogSocket::Unix(s, to) => s.send_to(b, to).map(drop),
        };
        if sent.is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        match sent {
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!("access log to syslog: {e}; lines are dropped until it answers");
            }
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!("access log to syslog: sending again");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn entry_parts(target: &str, ua: Option<&str>) -> http::request::Parts {
        let mut b = Request::get(target);
        if let Some(ua) = ua {
            b = b.header("user-agent", ua);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// A plain HTTP connection from 10.0.0.1 on `worker`.
    fn plain(worker: usize) -> ConnInfo {
        ConnInfo {
            peer: "10.0.0.1:5555".parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            tls: false,
            tls_info: None,
            worker: weir_http::worker::Worker::new(worker),
        }
    }

    /// An entry of site `x` with nothing but the request and answer.
    fn entry<'a>(
        conn: &'a ConnInfo,
        parts: &'a http::request::Parts,
        resp: &'a Response<Body>,
    ) -> Entry<'a> {
        Entry {
            conn,
            client: "10.0.0.1".parse().unwrap(),
            parts,
            resp,
            host: "x",
            site: "x",
            route: None,
            took: Duration::ZERO,
            bytes_in: None,
            bytes_out: None,
            request_id: None,
            outcome: Outcome::default(),
            limit_name: None,
        }
    }

    fn line(format: &LogFormat, parts: &http::request::Parts, resp: &Response<Body>) -> String {
        let conn = plain(0);
        let e = Entry {
            took: Duration::from_micros(3042),
            bytes_out: Some(12),
            request_id: Some(b"abc"),
            ..entry(&conn, parts, resp)
        };
        let mut out = Vec::new();
        render(format, &e, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn combined_line_has_every_field() {
        let parts = entry_parts("/a?b=1", Some("curl/8"));
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = http::StatusCode::NOT_FOUND;
        let l = line(&LogFormat::builtin("combined").unwrap(), &parts, &resp);
        assert!(l.starts_with("10.0.0.1 - - ["), "{l}");
        assert!(
            l.ends_with("\"GET /a?b=1 HTTP/1.1\" 404 12 \"-\" \"curl/8\"\n"),
            "{l}"
        );
        let t = LogFormat::template(
            "{status} {request_time} {duration_ms} {request_id} {route} {upstream_addr} {cache_status}",
            Escape::Default,
        )
        .unwrap();
        assert_eq!(line(&t, &parts, &resp), "404 0.003 3.042 abc * - -\n");
        let j: serde_json::Value =
            serde_json::from_str(&line(&LogFormat::Json, &parts, &resp)).unwrap();
        assert_eq!(j["status"], 404);
        assert_eq!(j["bytes_sent"], 12);
        assert_eq!(j["referer"], serde_json::Value::Null);
        assert_eq!(j["user_agent"], "curl/8");
        assert_eq!(j["client_ip"], "10.0.0.1");
        assert_eq!(j["peer_port"], 5555);
        assert_eq!(j["duration_ms"], 3.042);
        assert_eq!(j["request_id"], "abc");
        assert_eq!(j["upstream_addr"], serde_json::Value::Null);
        assert!(j["time"].as_str().unwrap().ends_with('Z'));
    }

    /// Whatever a client puts in a field, each JSON line parses and gives
    /// the field back as it came; the default escaping keeps a line one
    /// line of printable ASCII.
    #[test]
    fn lines_escape_what_clients_send() {
        for nasty in ["\"", "\\", "é ☃", "}{\"x\":1", "\t"] {
            let mut parts = entry_parts("/", None);
            parts.headers.insert(
                "user-agent",
                http::HeaderValue::from_bytes(nasty.as_bytes()).unwrap(),
            );
            let resp = Response::new(Body::empty());
            let l = line(&LogFormat::Json, &parts, &resp);
            assert_eq!(l.matches('\n').count(), 1);
            let j: serde_json::Value = serde_json::from_str(&l).unwrap();
            assert_eq!(j["user_agent"], nasty);
            let t = LogFormat::template("\"{req.header.user-agent}\"", Escape::Json).unwrap();
            let v: serde_json::Value =
                serde_json::from_str(line(&t, &parts, &resp).trim()).unwrap();
            assert_eq!(v, nasty);
            let d = line(&LogFormat::builtin("combined").unwrap(), &parts, &resp);
            assert!(
                d.bytes().all(|b| b == b'\n' || (0x20..0x7f).contains(&b)),
                "{d}"
            );
            assert_eq!(d.matches('"').count(), 6, "{d}");
        }
        // Not UTF-8 at all: still one JSON line.
        let mut parts = entry_parts("/", None);
        parts.headers.insert(
            "user-agent",
            http::HeaderValue::from_bytes(b"a\xff\xfeb").unwrap(),
        );
        let resp = Response::new(Body::empty());
        let j: serde_json::Value =
            serde_json::from_str(&line(&LogFormat::Json, &parts, &resp)).unwrap();
        assert_eq!(j["user_agent"], "a\u{ff}\u{fe}b");
    }

    /// TLS, user, limit and auth variables, from a connection and an
    /// outcome whose values are known; `-` without them, and JSON leaves them out.
    #[test]
    fn tls_user_limit_and_auth_variables() {
        let mut parts = entry_parts("/", None);
        parts.headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Basic YWxpY2U6aG9yc2U="),
        );
        let resp = Response::new(Body::empty());
        let conn = ConnInfo {
            peer: "10.0.0.1:5555".parse().unwrap(),
            local: "127.0.0.1:443".parse().unwrap(),
            tls: true,
            tls_info: Some(Arc::new(weir_http::conn::TlsInfo {
                version: "TLSv1.3",
                cipher: "TLS_AES_128_GCM_SHA256",
                server_name: Some("a.test".into()),
                alpn: Some("h2"),
            })),
            worker: Default::default(),
        };
        let mut outcome = Outcome::default();
        outcome.limit(LimitStatus::Passed, (0, 0));
        outcome.limit(LimitStatus::Rejected, (1, 2));
        outcome.limit(LimitStatus::Delayed, (0, 1));
        assert_eq!(outcome.limit_at, Some((1, 2)));
        outcome.auth = AuthStatus::Passed;
        let e = Entry {
            outcome,
            limit_name: Some("per-ip"),
            ..entry(&conn, &parts, &resp)
        };
        let t = LogFormat::template(
            "{tls_protocol} {tls_cipher} {tls_server_name} {tls_alpn} {remote_user} {limit_status} {limit_name} {auth_status}",
            Escape::Default,
        )
        .unwrap();
        let mut out = Vec::new();
        render(&t, &e, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "TLSv1.3 TLS_AES_128_GCM_SHA256 a.test h2 alice REJECTED per-ip PASSED\n"
        );
        let mut out = Vec::new();
        render(&LogFormat::Json, &e, &mut out);
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(j["tls_cipher"], "TLS_AES_128_GCM_SHA256");
        assert_eq!(j["remote_user"], "alice");
        assert_eq!(j["limit_status"], "REJECTED");
        assert_eq!(j["auth_status"], "PASSED");

        // Plain, unlimited, anonymous.
        let l = line(&t, &entry_parts("/", None), &resp);
        assert_eq!(l, "- - - - - - - -\n");
        let j: serde_json::Value =
            serde_json::from_str(&line(&LogFormat::Json, &entry_parts("/", None), &resp)).unwrap();
        for k in [
            "tls_protocol",
            "tls_server_name",
            "remote_user",
            "limit_status",
            "limit_name",
            "auth_status",
            "referer",
            "cache_status",
            "upstream_addr",
            "upstream_status",
            "upstream_connect_time",
            "upstream_response_time",
        ] {
            assert!(j.get(k).is_none(), "{k} in {j}");
        }
        assert_eq!(j["request_id"], "abc");
        assert_eq!(j["bytes_sent"], 12);
    }

    /// Lines from several workers reach the file, each whole, the first
    /// of a quiet log without a later one to push it; what is pending
    /// when the log is dropped is written before its writer ends.
    #[test]
    fn every_workers_lines_reach_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let cfg = AccessLogConfig {
            sink: LogSink::File(path.clone()),
            format: Arc::new(LogFormat::template("{uri} {status}", Escape::Default).unwrap()),
            condition: None,
            sample: 1.0,
        };
        let log = AccessLog::open(&cfg, 2).unwrap();
        let resp = Response::new(Body::empty());
        let write = |target: &str, worker: usize| {
            let parts = entry_parts(target, None);
            let conn = plain(worker);
            log.log(&entry(&conn, &parts, &resp));
        };
        let read = || std::fs::read_to_string(&path).unwrap_or_default();
        let until = |want: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while read() != want && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(read(), want);
        };
        write("/first", 0);
        until("/first 200\n");
        write("/a", 1);
        write("/b", 0);
        write("/c", 1);
        write("/d", 3);
        let mut got: Vec<String> = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < 5 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            got = read().lines().map(String::from).collect();
        }
        // Each worker's lines in its order; a worker past the batches
        // (3 of 2) shares one.
        got.sort();
        assert_eq!(got, ["/a 200", "/b 200", "/c 200", "/d 200", "/first 200"]);
        write("/last", 0);
        drop(log);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !read().ends_with("/last 200\n") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(read().ends_with("/last 200\n"), "{}", read());
    }

    #[test]
    fn a_batch_is_split_into_its_lines() {
        let mut b = Batch::default();
        assert_eq!(b.lines().count(), 0);
        for l in [&b"one\n"[..], b"", b"three\n"] {
            b.bytes.extend_from_slice(l);
            b.ends.push(b.bytes.len());
        }
        let lines: Vec<&[u8]> = b.lines().collect();
        assert_eq!(lines, [&b"one\n"[..], b"", b"three\n"]);
    }

    /// A journal entry: the line as MESSAGE (binary-safe when it holds a
    /// newline), the fixed fields, weir's own fields, none for a value the
    /// request lacks.
    #[test]
    fn journal_entries_in_the_native_protocol() {
        let mut fixed = Vec::new();
        journal_field(&mut fixed, b"PRIORITY", b"6");
        journal_field(&mut fixed, b"SYSLOG_IDENTIFIER", b"weir");
        assert_eq!(fixed, b"PRIORITY=6\nSYSLOG_IDENTIFIER=weir\n");
        let parts = entry_parts("/a", None);
        let resp = Response::new(Body::empty());
        let conn = plain(0);
        let e = Entry {
            site: "s",
            took: Duration::from_micros(1500),
            ..entry(&conn, &parts, &resp)
        };
        let one = LogFormat::template("{status} {uri}", Escape::Default).unwrap();
        let mut out = Vec::new();
        journal_entry(&one, &fixed, &e, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "MESSAGE=200 /a\nPRIORITY=6\nSYSLOG_IDENTIFIER=weir\nWEIR_SITE=s\nWEIR_STATUS=200\n\
             WEIR_METHOD=GET\nWEIR_URI=/a\nWEIR_CLIENT_IP=10.0.0.1\nWEIR_DURATION_MS=1.500\n"
        );
        let two = LogFormat::template("{status}\n{uri}", Escape::None).unwrap();
        let mut out = Vec::new();
        journal_entry(&two, &fixed, &e, &mut out);
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&6u64.to_le_bytes());
        want.extend_from_slice(b"200\n/a\nPRIORITY=6\n");
        assert!(
            out.starts_with(&want),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        // The JSON object is whole behind `MESSAGE=`.
        let mut out = Vec::new();
        journal_entry(&LogFormat::Json, &fixed, &e, &mut out);
        let out = String::from_utf8(out).unwrap();
        let message = out
            .lines()
            .next()
            .unwrap()
            .strip_prefix("MESSAGE=")
            .unwrap();
        let j: serde_json::Value = serde_json::from_str(message).unwrap();
        assert_eq!(j["uri"], "/a", "{out}");
    }

    #[test]
    fn cache_status_from_the_cache_status_field() {
        let with = |v: &'static str| {
            let mut r = Response::new(Body::empty());
            r.headers_mut()
                .insert("cache-status", http::HeaderValue::from_static(v));
            cache_status(&r)
        };
        assert_eq!(with("weir; hit; ttl=10"), Some("HIT"));
        assert_eq!(with("weir; fwd=miss; stored"), Some("MISS"));
        assert_eq!(with("weir; fwd=stale; fwd-status=304"), Some("REVALIDATED"));
        assert_eq!(with("weir; fwd=method"), Some("PASS"));
        assert_eq!(cache_status(&Response::new(Body::empty())), None);
    }
}
