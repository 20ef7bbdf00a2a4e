//! One configured limit (`limit = [...]` of a site or route) with its
//! per-key table: which key a request counts under, what the limit says of
//! it, and what it owes after the answer (a request in progress released,
//! an error or bytes counted in a window).
//!
//! Time comes in as milliseconds on the caller's clock; never reads a
//! clock, never answers a request and never logs (the request filters do,
//! from [`Limiter::take_evictions`] and the [`Decision`]).

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weir_config::traffic::{LimitConfig, LimitKey, LimitKind};

use crate::rate::{Bucket, Rate, Verdict};

use crate::table::Table;
use crate::window::Window;

/// A limit and its keys' state.
pub struct Limiter {
    pub cfg: Arc<LimitConfig>,
    pub(crate) state: State,
    /// Keys are hashed with a secret (the process's own, or the cluster's
    /// when counts are shared): a client cannot pick keys that collide with
    /// another's, and no key is allocated per request.
    hasher: KeyHasher,
    /// Counts shared with other processes ([`crate::shared`]): what a
    /// request changes is marked for the next exchange.
    pub(crate) shared: bool,
    /// The same limit in every process of a cluster.
    pub(crate) id: u64,
    /// Requests refused (or, in dry-run, that would have been), and delayed.
    refused: AtomicU64,
    delayed: AtomicU64,
    /// Evictions already reported, and when (ms), so a full table is
    /// reported once a second, not once a request.
    evictions_seen: AtomicU64,
    reported_ms: AtomicU64,
}

pub(crate) enum State {
    Rate(Rate, Table<u64, RateSlot>),
    Concurrent(u64, Arc<Table<u64, Conns>>),
    Window(Table<u64, Counters>),
}

#[derive(Default)]
pub(crate) struct RateSlot {
    pub(crate) bucket: Bucket,
    /// Requests counted here since the last exchange, and when the last
    /// of them was.
    pub(crate) pending: u64,
    pub(crate) pending_ms: u64,
}

/// Requests in progress under one key: here, and in the other processes.
#[derive(Default)]
pub(crate) struct Conns {
    pub(crate) local: u64,
    pub(crate) remote: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) requests: Window,
    pub(crate) errors: Window,
    pub(crate) bytes: Window,
    /// Requests, errors and bytes counted here since the last exchange.
    pub(crate) pending: [u64; 3],
}

/// One key being hashed (an enum, not a box: nothing allocated per request).
enum Hashing {
    Local(std::collections::hash_map::DefaultHasher),
    Shared(siphasher::sip::SipHasher13),
}

impl Hasher for Hashing {
    fn write(&mut self, b: &[u8]) {
        match self {
            Hashing::Local(h) => h.write(b),
            Hashing::Shared(h) => h.write(b),
        }
    }

    fn finish(&self) -> u64 {
        match self {
            Hashing::Local(h) => h.finish(),
            Hashing::Shared(h) => h.finish(),
        }
    }
}

/// SipHash either way: keyed by the process (`RandomState`), or by the
/// cluster's secret so every process keys a client alike.
enum KeyHasher {
    Local(std::collections::hash_map::RandomState),
    Shared(siphasher::sip::SipHasher13),
}

/// What a limit says of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Pass,
    /// Answer after this many milliseconds.
    Delay(u64),
    /// Refuse; there is room again after this many milliseconds.
    Refuse(u64),
}

/// The `RateLimit` fields of the IETF draft: the quota `q` over `w`
/// seconds, `r` left and `t` seconds until the quota is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub q: u64,
    pub w: u64,
    pub r: u64,
    pub t: u64,
}

/// A request in progress under a connection limit: released when dropped.
pub struct Held {
    table: Arc<Table<u64, Conns>>,
    key: u64,
    shared: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.table.with_present_marked(&self.key, self.shared, |n| {
            n.local = n.local.saturating_sub(1)
        });
    }
}

/// A request's check against one limit.
pub struct Admission {
    pub decision: Decision,
    /// The key it was counted under (`None`: the key was absent, as a
    /// missing header: not counted, as nginx does with an empty key).
    pub key: Option<u64>,
    pub held: Option<Held>,
    pub quota: Option<Quota>,
}

impl Limiter {
    /// A limit counted in this process only.
    pub fn new(cfg: Arc<LimitConfig>) -> Limiter {
        Limiter::make(cfg, None, 0)
    }

    pub(crate) fn make(
        cfg: Arc<LimitConfig>,
        shared: Option<siphasher::sip::SipHasher13>,
        id: u64,
    ) -> Limiter {
        let state = match cfg.kind {
            LimitKind::Rate {
                per_sec_milli,
                burst,
                delay_after,
            } => State::Rate(
                Rate {
                    per_sec_milli,
                    burst,
                    delay_after,
                },
                Table::new(cfg.size),
            ),
            LimitKind::Concurrent(n) => State::Concurrent(n, Arc::new(Table::new(cfg.size))),
            LimitKind::Window { .. } => State::Window(Table::new(cfg.size)),
        };
        Limiter {
            cfg,
            state,
            shared: shared.is_some(),
            id,
            hasher: match shared {
                Some(h) => KeyHasher::Shared(h),
                None => KeyHasher::Local(Default::default()),
            },
            refused: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            evictions_seen: AtomicU64::new(0),
            reported_ms: AtomicU64::new(0),
        }
    }

    /// The key of a request; `None` when a part of it is absent.
    pub fn key(&self, parts: &http::request::Parts, client: IpAddr) -> Option<u64> {
        let mut h = match &self.hasher {
            KeyHasher::Local(r) => Hashing::Local(r.build_hasher()),
            KeyHasher::Shared(s) => Hashing::Shared(*s),
        };
        for k in &self.cfg.key {
            match k {
                LimitKey::Client => match client {
                    IpAddr::V4(a) => h.write(&a.octets()),
                    IpAddr::V6(a) => h.write(&a.octets()),
                },
                LimitKey::Header(name) => {
                    let v = parts.headers.get(name)?;
                    if v.is_empty() {
                        return None;
                    }
                    h.write(v.as_bytes());
                }
                LimitKey::Cookie(name) => h.write(cookie(&parts.headers, name)?.as_bytes()),
                LimitKey::Path => h.write(parts.uri.path().as_bytes()),
                LimitKey::Site => h.write_u8(0),
            }
            // Separates the parts: ("ab", "c") and ("a", "bc") differ.
            h.write_u8(0xff);
        }
        Some(h.finish())
    }

    /// Counts a request under `key` at `now_ms`.
    pub fn admit(&self, key: Option<u64>, now_ms: u64) -> Admission {
        let Some(k) = key else {
            return Admission {
                decision: Decision::Pass,
                key,
                held: None,
                quota: None,
            };
        };
        let mut quota = None;
        let mut held = None;
        let decision = match &self.state {
            State::Rate(rate, t) => t.with_marked(&k, |slot| {
                let b = &mut slot.bucket;
                let d = match b.check(rate, now_ms) {
                    Verdict::Pass => Decision::Pass,
                    Verdict::Delay(ms) => Decision::Delay(ms),
                    Verdict::Refuse(ms) => Decision::Refuse(ms),
                };
                if self.cfg.headers {
                    quota = Some(rate_quota(rate, b.level(rate, now_ms), &d));
                }
                // A refused request adds nothing to the bucket.
                let counted = self.shared && !matches!(d, Decision::Refuse(_));
                if counted {
                    slot.pending += 1;
                    slot.pending_ms = now_ms;
                }
                (d, counted)
            }),
            State::Concurrent(max, t) => {
                let over = t.with_marked(&k, |n| {
                    if n.local + n.remote >= *max {
                        (true, false)
                    } else {
                        n.local += 1;
                        (false, self.shared)
                    }
                });
                if over {
                    // Someone's request ends: a second is a fair guess.
                    Decision::Refuse(1000)
                } else {
                    held = Some(Held {
                        table: t.clone(),
                        key: k,
                        shared: self.shared,
                    });
                    Decision::Pass
                }
            }
            State::Window(t) => {
                let LimitKind::Window {
                    period,
                    requests,
                    errors,
                    bytes,
                } = &self.cfg.kind
                else {
                    unreachable!("a window table holds a window limit");
                };
                let p = period.as_millis() as u64;
                t.with_marked(&k, |c| {
                    let over = |w: &mut Window, bound: &Option<u64>| {
                        bound.is_some_and(|b| w.rate(p, now_ms) >= b)
                    };
                    let refused = over(&mut c.requests, requests)
                        || over(&mut c.errors, errors)
                        || over(&mut c.bytes, bytes);
                    if !refused {
                        c.requests.add(p, now_ms, 1);
                        if self.shared {
                            c.pending[0] += 1;
                        }
                    }
                    if self.cfg.headers
                        && let Some(b) = requests
                    {
                        let used = c.requests.rate(p, now_ms);
                        let into = now_ms % p.max(1);
                        quota = Some(Quota {
                            q: *b,
                            w: p.div_ceil(1000),
                            r: b.saturating_sub(used),
                            t: (p - into).div_ceil(1000),
                        });
                    }
                    if refused {
                        // The window slides; part of it has passed by then.
                        (Decision::Refuse((p - now_ms % p.max(1)).max(1)), false)
                    } else {
                        (Decision::Pass, self.shared)
                    }
                })
            }
        };
        match decision {
            Decision::Refuse(_) => self.refused.fetch_add(1, Ordering::Relaxed),
            Decision::Delay(_) => self.delayed.fetch_add(1, Ordering::Relaxed),
            Decision::Pass => 0,
        };
        Admission {
            decision,
            key,
            held,
            quota,
        }
    }

    /// Counts the answer to a request admitted under `key` (window limits
    /// count errors and bytes).
    pub fn answered(&self, key: Option<u64>, status: u16, bytes: u64, now_ms: u64) {
        let (State::Window(t), Some(k)) = (&self.state, key) else {
            return;
        };
        let LimitKind::Window { period, .. } = &self.cfg.kind else {
            return;
        };
        let p = period.as_millis() as u64;
        t.with_present_marked(&k, self.shared, |c| {
            if status >= 400 {
                c.errors.add(p, now_ms, 1);
                if self.shared {
                    c.pending[1] += 1;
                }
            }
            if bytes > 0 {
                c.bytes.add(p, now_ms, bytes);
                if self.shared {
                    c.pending[2] += bytes;
                }
            }
        });
    }

    /// Whether a window limit needs [`Limiter::answered`].
    pub fn counts_answers(&self) -> bool {
        matches!(self.state, State::Window(_))
    }

    /// Requests refused (or that would have been, in dry-run) so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn delayed(&self) -> u64 {
        self.delayed.load(Ordering::Relaxed)
    }

    /// Keys tracked now, at most [`Limiter::capacity`].
    pub fn keys(&self) -> usize {
        match &self.state {
            State::Rate(_, t) => t.len(),
            State::Concurrent(_, t) => t.len(),
            State::Window(t) => t.len(),
        }
    }

    pub fn capacity(&self) -> usize {
        match &self.state {
            State::Rate(_, t) => t.capacity(),
            State::Concurrent(_, t) => t.capacity(),
            State::Window(t) => t.capacity(),
        }
    }

    /// Keys evicted since start.
    pub fn evicted(&self) -> u64 {
        match &self.state {
            State::Rate(_, t) => t.evicted(),
            State::Concurrent(_, t) => t.evicted(),
            State::Window(t) => t.evicted(),
        }
    }

    /// Evictions not reported yet, at most once a second (for a log line);
    /// 0 in between.
    pub fn take_evictions(&self, now_ms: u64) -> u64 {
        let now = self.evicted();
        // Loads first: the common case (nothing new) writes nothing shared.
        if self.evictions_seen.load(Ordering::Relaxed) >= now {
            return 0;
        }
        let last = self.reported_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms < last + 1000 {
            return 0;
        }
        if self
            .reported_ms
            .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return 0;
        }
        let seen = self.evictions_seen.swap(now, Ordering::Relaxed);
        now.saturating_sub(seen)
    }
}

/// The quota of a leaky bucket: `burst + 1` requests, drained in `w`.
fn rate_quota(rate: &Rate, level: f64, d: &Decision) -> Quota {
    let cap = rate.burst + 1;
    let per_s = rate.per_sec_milli as f64 / 1000.0;
    // The bucket's fill including this request (a refused one adds nothing).
    let used = match d {
        Decision::Refuse(_) => cap as f64,
        _ => (level + 1.0).min(cap as f64),
    };
    Quota {
        q: cap,
        w: (cap as f64 / per_s).ceil() as u64,
        r: (cap as f64 - used).floor().max(0.0) as u64,
        t: (used / per_s).ceil() as u64,
    }
}

/// The value of cookie `name` in the request's `Cookie` fields.
fn cookie<'a>(h: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name && !v.is_empty()).then_some(v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cfg(kind: LimitKind, key: Vec<LimitKey>) -> Arc<LimitConfig> {
        Arc::new(LimitConfig {
            name: "t".into(),
            key,
            kind,
            status: 429,
            body: None,
            dry_run: false,
            size: 1000,
            headers: true,
        })
    }

    fn req(h: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::get("/p");
        for (k, v) in h {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

    #[test]
    fn ten_per_second_burst_five_nodelay_passes_six_of_twenty_per_client() {
        let l = Limiter::new(cfg(
            LimitKind::Rate {
                per_sec_milli: 10_000,
                burst: 5,
                delay_after: 5,
            },
            vec![LimitKey::Client],
        ));
        let r = req(&[]);
        for client in [A, B] {
            let k = l.key(&r, client);
            let passed = (0..20)
                .filter(|_| l.admit(k, 1000).decision == Decision::Pass)
                .count();
            assert_eq!(passed, 6, "each client has its own budget");
        }
        assert_eq!(l.refused(), 28);
        // 100ms later one more fits.
        assert_eq!(l.admit(l.key(&r, A), 1100).decision, Decision::Pass);
    }

    #[test]
    fn the_quota_fields_count_down() {
        let l = Limiter::new(cfg(
            LimitKind::Rate {
                per_sec_milli: 1000,
                burst: 2,
                delay_after: 2,
            },
            vec![LimitKey::Client],
        ));
        let k = l.key(&req(&[]), A);
        let q: Vec<u64> = (0..4).map(|_| l.admit(k, 0).quota.unwrap().r).collect();
        assert_eq!(q, [2, 1, 0, 0]);
        assert_eq!(l.admit(k, 0).quota.unwrap().q, 3);
    }

    #[test]
    fn a_connection_limit_holds_until_the_request_ends() {
        let l = Limiter::new(cfg(LimitKind::Concurrent(2), vec![LimitKey::Client]));
        let k = l.key(&req(&[]), A);
        let a = l.admit(k, 0);
        let b = l.admit(k, 0);
        assert_eq!(l.admit(k, 0).decision, Decision::Refuse(1000));
        drop(a);
        assert_eq!(l.admit(k, 0).decision, Decision::Pass);
        drop(b);
    }

    #[test]
    fn a_missing_header_key_is_not_counted() {
        let l = Limiter::new(cfg(
            LimitKind::Concurrent(1),
            vec![LimitKey::Header(http::HeaderName::from_static("x-key"))],
        ));
        assert_eq!(l.key(&req(&[]), A), None);
        let with = l.key(&req(&[("x-key", "1")]), A);
        let other = l.key(&req(&[("x-key", "2")]), A);
        assert!(with.is_some() && with != other);
        let _held = l.admit(with, 0);
        assert!(matches!(l.admit(with, 0).decision, Decision::Refuse(_)));
        assert_eq!(l.admit(other, 0).decision, Decision::Pass);
        assert_eq!(l.admit(None, 0).decision, Decision::Pass);
    }

    #[test]
    fn cookies_key_by_value() {
        let l = Limiter::new(cfg(
            LimitKind::Concurrent(1),
            vec![LimitKey::Cookie("sid".into())],
        ));
        let a = l.key(&req(&[("cookie", "x=1; sid=abc")]), A);
        let b = l.key(&req(&[("cookie", "sid=abc")]), B);
        assert!(a.is_some() && a == b, "the same session from two addresses");
        assert_eq!(l.key(&req(&[("cookie", "sid=")]), A), None);
    }

    #[test]
    fn an_error_window_refuses_after_the_bound_and_forgets_later() {
        let l = Limiter::new(cfg(
            LimitKind::Window {
                period: Duration::from_secs(10),
                requests: None,
                errors: Some(3),
                bytes: None,
            },
            vec![LimitKey::Client],
        ));
        let k = l.key(&req(&[]), A);
        for t in 0..3 {
            assert_eq!(l.admit(k, t).decision, Decision::Pass);
            l.answered(k, 401, 0, t);
        }
        assert!(matches!(l.admit(k, 5).decision, Decision::Refuse(_)));
        // Two periods on, the errors are gone.
        assert_eq!(l.admit(k, 20_001).decision, Decision::Pass);
    }

    #[test]
    fn a_full_table_is_reported_once_a_second() {
        let mut c = (*cfg(
            LimitKind::Concurrent(5),
            vec![LimitKey::Header(http::HeaderName::from_static("x-key"))],
        ))
        .clone();
        c.size = 64;
        let l = Limiter::new(Arc::new(c));
        let mut reported = Vec::new();
        for i in 0..300u64 {
            let k = l.key(&req(&[("x-key", &i.to_string())]), A);
            drop(l.admit(k, i * 10));
            let n = l.take_evictions(i * 10);
            if n > 0 {
                reported.push((i * 10, n));
            }
        }
        // 64 shards of one key each (a shard no key hashed to stays empty).
        assert!(l.keys() <= 64 && l.keys() > 32, "{}", l.keys());
        assert_eq!(l.evicted(), 300 - l.keys() as u64);
        // The first eviction at once, then once a second of the clock.
        assert_eq!(reported.len(), 3, "{reported:?}");
        assert!(reported.windows(2).all(|w| w[1].0 - w[0].0 >= 1000));
        assert!(reported.iter().map(|r| r.1).sum::<u64>() <= l.evicted());
    }

    #[test]
    fn a_request_window_counts_requests() {
        let l = Limiter::new(cfg(
            LimitKind::Window {
                period: Duration::from_secs(1),
                requests: Some(5),
                errors: None,
                bytes: None,
            },
            vec![LimitKey::Site],
        ));
        let passed = (0..8)
            .filter(|i| l.admit(l.key(&req(&[]), A), *i).decision == Decision::Pass)
            .count();
        assert_eq!(passed, 5);
    }
}
