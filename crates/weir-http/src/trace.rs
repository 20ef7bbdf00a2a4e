//! OpenTelemetry spans of sampled requests: the sampling decision (W3C
//! `traceparent`, parent-based, else a ratio), the span a request's later
//! steps hang theirs under ([`Current`], a request extension), the spans'
//! records, and where ended spans wait for the exporter.
//!
//! An unsampled request costs a header lookup and a random draw: no
//! allocation, no clock read, no extension. A span's attributes are
//! written as OTLP bytes when they are set ([`wire`]). [`emit`] writes the
//! whole `Span` message into its thread's buffer of ended spans (a lock
//! only that thread and, once per batch, the exporter take) and hands the
//! attributes' buffer back to the thread for its next span, so a traced
//! request allocates nothing once its thread has warmed up, and no worker
//! contends with another or wakes the exporter per span. [`emit`] never
//! blocks: a thread with [`install`]'s limit of spans waiting (a slow or
//! absent collector) drops the new one and counts it in [`DROPPED`].

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use http::header::HeaderName;

use crate::sync::lock;

/// Spans dropped: a thread had its limit waiting, or their export failed.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Spans the collector accepted.
pub static EXPORTED: AtomicU64 = AtomicU64::new(0);

pub mod wire;

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Spans one thread may have waiting; 0 until [`install`] (no exporter:
/// every span is dropped).
static LIMIT: AtomicUsize = AtomicUsize::new(0);
/// A thread whose waiting spans reach this many wakes the exporter.
static BATCH: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Woken when a thread has a batch waiting.
static FULL: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Every thread's buffer of ended spans; a thread's own is in [`MINE`].
static THREADS: Mutex<Vec<Arc<Mutex<Ended>>>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Arc<Mutex<Ended>> = {
        let e = Arc::new(Mutex::new(Ended::default()));
        lock(&THREADS).push(e.clone());
        e
    };
    /// Attribute buffers of ended spans, for the thread's next spans.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Spare attribute buffers a thread keeps: as many as a busy thread has
/// spans open at once (each request in flight holds its own and its
/// attempt's), so a warm thread allocates none; at most 512 KiB.
const SPARE_KEPT: usize = 256;

/// Ended spans: each an OTLP `ScopeSpans.spans` field (tag, length,
/// `Span`), ready to be sent as they are.
#[derive(Debug, Default)]
pub struct Ended {
    pub bytes: Vec<u8>,
    pub spans: usize,
}

impl Ended {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans = 0;
    }
}

/// Starts keeping ended spans, at most `limit` waiting per thread; a
/// thread with `batch` waiting wakes the exporter ([`full`]). Called again
/// (a reload), changes `batch` only. False when called before.
pub fn install(limit: usize, batch: usize) -> bool {
    BATCH.store(batch.max(1), Ordering::Relaxed);
    LIMIT
        .compare_exchange(0, limit.max(1), Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// Resolves when a thread has a batch of spans waiting (or at once, if
/// one did since the last call).
pub async fn full() {
    FULL.notified().await;
}

/// Moves every thread's ended spans to the end of `into`, and forgets the
/// buffers of threads that have ended.
pub fn take(into: &mut Ended) {
    let mut threads = lock(&THREADS);
    for t in threads.iter() {
        let mut e = lock(t);
        if into.bytes.is_empty() {
            // The thread takes `into`'s empty buffer: no copy.
            std::mem::swap(&mut into.bytes, &mut e.bytes);
        } else {
            into.bytes.extend_from_slice(&e.bytes);
        }
        into.spans += e.spans;
        e.clear();
    }
    // Held only by the list: its thread is gone, and its spans taken.
    threads.retain(|t| Arc::strong_count(t) > 1);
}

/// Writes a finished span into its thread's buffer for export, or drops
/// and counts it when the thread has its limit waiting or no exporter is
/// installed. Never waits for the exporter.
pub fn emit(mut r: Record) {
    let limit = LIMIT.load(Ordering::Relaxed);
    let kept = limit > 0
        && MINE
            .try_with(|m| {
                let mut e = lock(m);
                if e.spans >= limit {
                    return false;
                }
                wire::span_field(&mut e.bytes, &r);
                e.spans += 1;
                if e.spans == BATCH.load(Ordering::Relaxed) {
                    FULL.notify_one();
                }
                true
            })
            .unwrap_or(false);
    if !kept {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    let mut attrs = std::mem::take(&mut r.attrs);
    attrs.clear();
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_KEPT && (1..=4 * ATTRS_CAPACITY).contains(&attrs.capacity()) {
            s.push(attrs);
        }
    });
}

/// The span later steps of a sampled request make theirs children of (the
/// request's span, or a cache's or auth call's around a proxy's attempts),
/// as a request extension. Its absence means "not traced".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    pub trace_id: u128,
    pub span_id: u64,
}

impl Current {
    /// A new child span of this one, starting now.
    pub fn child(&self, name: impl Into<Cow<'static, str>>, kind: Kind) -> Record {
        Record::new(self.trace_id, self.span_id, name, kind)
    }
}

/// Which requests are recorded: `ratio` of new traces, and every trace a
/// client's `traceparent` says is sampled (never one it says is not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler {
    /// Sampled when a random u64 is below it (`u64::MAX`: always).
    threshold: u64,
    always: bool,
}

impl Sampler {
    pub fn new(ratio: f64) -> Sampler {
        let r = ratio.clamp(0.0, 1.0);
        Sampler {
            threshold: (r * u64::MAX as f64) as u64,
            always: r >= 1.0,
        }
    }

    /// The request's span, started now, if the request is sampled: the
    /// client's trace continued (its span the parent), or a new one.
    pub fn start(&self, h: &HeaderMap) -> Option<Record> {
        let parent = h.get(&TRACEPARENT).and_then(|v| parse(v.as_bytes()));
        let (trace_id, parent_id) = match parent {
            Some(p) if p.sampled => (p.trace_id, p.span_id),
            Some(_) => return None,
            None => {
                if !self.always && fastrand::u64(..) >= self.threshold {
                    return None;
                }
                (fastrand::u128(1..), 0)
            }
        };
        Some(Record::new(trace_id, parent_id, "", Kind::Server))
    }
}

/// A parsed version-00 `traceparent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: u128,
    pub span_id: u64,
    pub sampled: bool,
}

/// A valid version-00 `traceparent` (lowercase hex, neither ID all zeros).
pub fn parse(v: &[u8]) -> Option<Parent> {
    if v.len() != 55 || &v[..3] != b"00-" || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    fn hex(s: &[u8]) -> Option<u128> {
        let mut n = 0u128;
        for &c in s {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => return None,
            };
            n = (n << 4) | u128::from(d);
        }
        Some(n)
    }
    let trace_id = hex(&v[3..35]).filter(|&t| t != 0)?;
    let span_id = hex(&v[36..52]).filter(|&s| s != 0)? as u64;
    let flags = hex(&v[53..55])? as u8;
    Some(Parent {
        trace_id,
        span_id,
        sampled: flags & 1 == 1,
    })
}

/// The `traceparent` value of a sampled span: `00-TRACE-SPAN-01`.
pub fn traceparent(trace_id: u128, span_id: u64) -> [u8; 55] {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut b = *b"00-00000000000000000000000000000000-0000000000000000-01";
    for (i, d) in b[3..35].iter_mut().enumerate() {
        *d = H[((trace_id >> (124 - 4 * i)) & 15) as usize];
    }
    for (i, d) in b[36..52].iter_mut().enumerate() {
        *d = H[((span_id >> (60 - 4 * i)) & 15) as usize];
    }
    b
}

/// OTLP's span kinds (the values are the protocol's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute's value, borrowed: [`Record::attr`] writes it out at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Value<'a> {
        Value::Str(s)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Value<'a> {
        Value::Str(s)
    }
}

impl From<i64> for Value<'_> {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<bool> for Value<'_> {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

/// A method's name as a span name, without allocating for the usual ones.
pub fn method(m: &http::Method) -> Cow<'static, str> {
    use http::Method as M;
    Cow::Borrowed(match *m {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::DELETE => "DELETE",
        M::OPTIONS => "OPTIONS",
        M::PATCH => "PATCH",
        _ => return Cow::Owned(m.as_str().to_string()),
    })
}

/// One span, from its start to [`emit`].
#[derive(Clone, Debug)]
pub struct Record {
    pub trace_id: u128,
    pub span_id: u64,
    /// 0: a root span.
    pub parent_id: u64,
    pub name: Cow<'static, str>,
    /// Written after the name and a space (`GET /api/*`): a route's label
    /// is shared, so naming a request's span allocates nothing.
    pub route: Option<Arc<str>>,
    pub kind: Kind,
    /// Unix time in nanoseconds.
    pub start: u64,
    pub end: u64,
    /// The span failed (OTLP status code ERROR).
    pub error: bool,
    /// Its attributes as OTLP `Span.attributes` fields (`KeyValue`s).
    pub attrs: Vec<u8>,
}

/// Room for a request span's attributes with a browser's User-Agent.
const ATTRS_CAPACITY: usize = 512;

impl Record {
    /// A span with a new ID, starting now.
    pub fn new(
        trace_id: u128,
        parent_id: u64,
        name: impl Into<Cow<'static, str>>,
        kind: Kind,
    ) -> Record {
        Record {
            trace_id,
            span_id: fastrand::u64(1..),
            parent_id,
            name: name.into(),
            route: None,
            kind,
            start: now(),
            end: 0,
            error: false,
            attrs: SPARE
                .try_with(|s| s.borrow_mut().pop())
                .ok()
                .flatten()
                .unwrap_or_else(|| Vec::with_capacity(ATTRS_CAPACITY)),
        }
    }

    /// What its children hang under.
    pub fn current(&self) -> Current {
        Current {
            trace_id: self.trace_id,
            span_id: self.span_id,
        }
    }

    pub fn attr<'a>(&mut self, key: &str, v: impl Into<Value<'a>>) {
        wire::key_value(&mut self.attrs, wire::SPAN_ATTRIBUTES, key, v.into());
    }

    /// A string attribute of what `v` displays (an address), formatted on
    /// the stack when it fits.
    pub fn attr_display(&mut self, key: &str, v: impl Display) {
        use std::io::Write;
        let mut buf = [0u8; 64];
        let mut w = &mut buf[..];
        if write!(w, "{v}").is_ok() {
            let n = 64 - w.len();
            if let Ok(s) = std::str::from_utf8(&buf[..n]) {
                return self.attr(key, s);
            }
        }
        self.attr(key, v.to_string().as_str());
    }

    /// Ends it now and queues it.
    pub fn end(mut self) {
        self.end = now();
        emit(self);
    }
}

/// Unix time in nanoseconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_parent(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(v));
        h
    }

    /// Ended spans wait in their thread's buffer until taken, at most the
    /// limit each; a thread's batch wakes the exporter; a thread's spare
    /// attribute buffer is used again.
    #[tokio::test]
    async fn ended_spans_wait_for_the_exporter_up_to_a_limit() {
        assert!(install(3, 2));
        assert!(!install(100, 2), "installed once");
        let dropped = DROPPED.load(Ordering::Relaxed);
        let mut first = Record::new(7, 0, "GET", Kind::Server);
        first.attr("k", "v");
        let attrs = first.attrs.as_ptr();
        first.end();
        let second = Record::new(7, 0, "GET", Kind::Server);
        assert_eq!(second.attrs.as_ptr(), attrs, "the spare buffer");
        assert!(second.attrs.is_empty());
        second.end();
        // Two waiting: a batch, so the exporter is woken.
        tokio::time::timeout(std::time::Duration::from_secs(1), full())
            .await
            .expect("woken");
        std::thread::spawn(|| Record::new(8, 0, "other", Kind::Client).end())
            .join()
            .unwrap();
        for _ in 0..2 {
            Record::new(7, 0, "GET", Kind::Server).end();
        }
        assert_eq!(
            DROPPED.load(Ordering::Relaxed),
            dropped + 1,
            "past the limit"
        );
        let mut ended = Ended::default();
        take(&mut ended);
        assert_eq!(ended.spans, 4);
        let mut want = Vec::new();
        let mut r = Record::new(7, 0, "GET", Kind::Server);
        r.attr("k", "v");
        wire::span_field(&mut want, &r);
        assert_eq!(ended.bytes[0], want[0]);
        // The other thread ended: its buffer is forgotten once taken.
        assert_eq!(lock(&THREADS).len(), 1);
        let mut again = Ended::default();
        take(&mut again);
        assert_eq!(again.spans, 0);
    }

    #[test]
    fn a_sampled_parent_is_followed_whatever_the_ratio() {
        let h = with_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let r = Sampler::new(0.0).start(&h).expect("followed");
        assert_eq!(r.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(r.parent_id, 0x00f067aa0ba902b7);
        assert_ne!(r.span_id, 0);
        assert_eq!(r.kind, Kind::Server);
    }

    #[test]
    fn an_unsampled_parent_is_never_recorded() {
        let h = with_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(Sampler::new(1.0).start(&h).is_none());
    }

    #[test]
    fn without_a_parent_the_ratio_decides() {
        let h = HeaderMap::new();
        assert!(Sampler::new(0.0).start(&h).is_none());
        let r = Sampler::new(1.0).start(&h).expect("always");
        assert_eq!(r.parent_id, 0);
        assert_ne!(r.trace_id, 0);
        let s = Sampler::new(0.25);
        let n = (0..40_000).filter(|_| s.start(&h).is_some()).count();
        assert!((9_000..11_000).contains(&n), "{n} of 40000 at 0.25");
        // An invalid traceparent is no parent: the ratio decides.
        let bad = with_parent("00-00000000000000000000000000000000-00f067aa0ba902b7-01");
        assert!(Sampler::new(0.0).start(&bad).is_none());
        assert!(Sampler::new(1.0).start(&bad).unwrap().parent_id == 0);
    }

    #[test]
    fn traceparent_round_trips() {
        let v = traceparent(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7);
        assert_eq!(
            &v,
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let p = parse(&v).unwrap();
        assert_eq!(p.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(p.span_id, 0x00f067aa0ba902b7);
        assert!(p.sampled);
        for bad in [
            &b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"[..],
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        ] {
            assert!(parse(bad).is_none());
        }
    }

    #[test]
    fn a_child_hangs_under_its_parent() {
        let mut req = Sampler::new(1.0).start(&HeaderMap::new()).unwrap();
        req.attr("http.request.method", "GET");
        let c = req.current().child("GET", Kind::Client);
        assert_eq!(c.trace_id, req.trace_id);
        assert_eq!(c.parent_id, req.span_id);
        assert_ne!(c.span_id, req.span_id);
        let mut want = Vec::new();
        wire::key_value(&mut want, 9, "http.request.method", Value::Str("GET"));
        assert_eq!(req.attrs, want);
    }

    #[test]
    fn a_displayed_attribute_is_its_text_whatever_its_length() {
        let mut r = Sampler::new(1.0).start(&HeaderMap::new()).unwrap();
        let ip: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        r.attr_display("client.address", ip);
        let long = "x".repeat(100);
        r.attr_display("long", &long);
        let mut want = Vec::new();
        wire::key_value(&mut want, 9, "client.address", Value::Str("2001:db8::1"));
        wire::key_value(&mut want, 9, "long", Value::Str(&long));
        assert_eq!(r.attrs, want);
    }
}
