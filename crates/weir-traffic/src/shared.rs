//! Limit counts shared by the processes of a cluster: what each limit
//! counted here since the last exchange, encoded for the others, and what
//! the others counted, added to the tables here. The transport (Redis) is
//! the cluster's; this module only turns tables into messages and back.
//!
//! Requests never wait on it: a request counts in its own table as always
//! and marks its key; every exchange interval the cluster collects the
//! marked keys. Rate and window limits send what they added (the others
//! add it to their buckets and windows); connection limits send how many
//! requests are in progress per key (the others keep each process's count
//! and add them up), and a whole snapshot every second so a lost message
//! cannot leave a count behind.
//!
//! Never reads a clock (times come in) and never does I/O.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use weir_config::traffic::{LimitConfig, LimitKind};

use crate::limit::{Limiter, State};

/// Message format version; a message of another version is refused.
const VERSION: u8 = 1;
/// Bytes per entry: limit id, key, kind, three counts.
const ENTRY: usize = 8 + 8 + 1 + 8 * 3;

const RATE: u8 = 0;
const CONNS: u8 = 1;
const WINDOW: u8 = 2;

static EXCHANGE: OnceLock<Exchange> = OnceLock::new();

/// Turns sharing on for this process, keyed by `secret` (the cluster's, so
/// every process hashes a client's key alike). Limits made afterwards with
/// [`limiter`] are shared.
pub fn enable(secret: &[u8]) -> &'static Exchange {
    EXCHANGE.get_or_init(|| {
        let mut k = [0u8; 16];
        // Two halves of a SipHash of the secret under fixed keys: a key
        // for the key hasher that reveals nothing of the secret.
        for (i, half) in k.chunks_mut(8).enumerate() {
            let mut h = siphasher::sip::SipHasher13::new_with_keys(0x7765_6972, i as u64 + 1);
            h.write(secret);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        Exchange {
            key: k,
            limiters: Mutex::new(HashMap::new()),
            remote: Mutex::new(HashMap::new()),
        }
    })
}

/// The exchange, when sharing is on.
pub fn get() -> Option<&'static Exchange> {
    EXCHANGE.get()
}

/// A limit of `scope` (its site or route): counted across the cluster
/// when [`enable`] was called, else in this process only.
pub fn limiter(cfg: Arc<LimitConfig>, scope: &str) -> Arc<Limiter> {
    let Some(x) = get() else {
        return Arc::new(Limiter::new(cfg));
    };
    let id = limit_id(scope, &cfg);
    let l = Arc::new(Limiter::make(cfg, Some(x.key_hasher()), id));
    x.register(&l);
    l
}

/// The same limit in every process: its scope, name and settings (a
/// stable hash, not `DefaultHasher`, whose algorithm may change).
pub(crate) fn limit_id(scope: &str, cfg: &LimitConfig) -> u64 {
    let mut h = siphasher::sip::SipHasher13::new();
    scope.hash(&mut h);
    cfg.name.hash(&mut h);
    format!("{:?}{:?}", cfg.kind, cfg.key).hash(&mut h);
    h.finish()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExchangeError {
    #[error(
        "a limit-count message of version {0} (this weir reads version {VERSION}): do all instances run the same weir?"
    )]
    Version(u8),
    #[error("a limit-count message of {0} bytes is cut short")]
    Truncated(usize),
}

/// One process's requests in progress, by (limit id, key).
type InProgress = HashMap<(u64, u64), u64>;

/// Every shared limit of the process, and the other processes' requests
/// in progress.
pub struct Exchange {
    key: [u8; 16],
    /// Limits by id (a reload makes new ones beside the old for a while).
    limiters: Mutex<HashMap<u64, Vec<Weak<Limiter>>>>,
    /// Per other process: requests in progress per (limit, key).
    remote: Mutex<HashMap<String, InProgress>>,
}

impl Exchange {
    pub(crate) fn key_hasher(&self) -> siphasher::sip::SipHasher13 {
        siphasher::sip::SipHasher13::new_with_key(&self.key)
    }

    pub(crate) fn register(&self, l: &Arc<Limiter>) {
        let mut m = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(l.id).or_default().push(Arc::downgrade(l));
    }

    /// Limits shared now.
    pub fn limits(&self) -> usize {
        let mut m = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, v| {
            v.retain(|w| w.strong_count() > 0);
            !v.is_empty()
        });
        m.values().map(Vec::len).sum()
    }

    fn live(&self) -> Vec<Arc<Limiter>> {
        let mut m = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        m.retain(|_, v| {
            v.retain(|w| match w.upgrade() {
                Some(l) => {
                    out.push(l);
                    true
                }
                None => false,
            });
            !v.is_empty()
        });
        out
    }

    /// What changed since the last call, as one message (`None`: nothing).
    /// With `full`, every key with requests in progress under a connection
    /// limit is sent too, so the others can drop counts they missed.
    pub fn collect(&self, full: bool, now_ms: u64) -> Option<Vec<u8>> {
        let mut msg = vec![VERSION, full as u8];
        let mut put = |id: u64, key: u64, kind: u8, v: [u64; 3]| {
            msg.extend_from_slice(&id.to_le_bytes());
            msg.extend_from_slice(&key.to_le_bytes());
            msg.push(kind);
            for x in v {
                msg.extend_from_slice(&x.to_le_bytes());
            }
        };
        for l in self.live() {
            let id = l.id;
            match &l.state {
                // With how long ago the last of them was: the others count
                // them from then, not from when the news arrives.
                State::Rate(_, t) => t.drain_marked(|k, s| {
                    if s.pending > 0 {
                        let age = now_ms.saturating_sub(s.pending_ms);
                        put(id, *k, RATE, [std::mem::take(&mut s.pending), age, 0]);
                    }
                }),
                State::Concurrent(_, t) => {
                    if full {
                        // The marks are covered by the snapshot.
                        t.drain_marked(|_, _| {});
                        t.for_each(|k, c| {
                            if c.local > 0 {
                                put(id, *k, CONNS, [c.local, 0, 0]);
                            }
                        });
                    } else {
                        t.drain_marked(|k, c| put(id, *k, CONNS, [c.local, 0, 0]));
                    }
                }
                State::Window(t) => t.drain_marked(|k, c| {
                    if c.pending != [0; 3] {
                        put(id, *k, WINDOW, std::mem::take(&mut c.pending));
                    }
                }),
            }
        }
        (msg.len() > 2 || full).then_some(msg)
    }

    /// Adds what process `from` counted (a message of its [`Exchange::collect`])
    /// at `now_ms` on this process's limits clock.
    pub fn apply(&self, from: &str, msg: &[u8], now_ms: u64) -> Result<(), ExchangeError> {
        match msg.first() {
            Some(&VERSION) => {}
            Some(&v) => return Err(ExchangeError::Version(v)),
            None => return Err(ExchangeError::Truncated(0)),
        }
        if msg.len() < 2 || !(msg.len() - 2).is_multiple_of(ENTRY) {
            return Err(ExchangeError::Truncated(msg.len()));
        }
        let full = msg[1] == 1;
        let limiters = self
            .limiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut remote = self.remote.lock().unwrap_or_else(|e| e.into_inner());
        let theirs = remote.entry(from.to_string()).or_default();
        let mut seen = Vec::new();
        for e in msg[2..].chunks_exact(ENTRY) {
            let u = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().expect("8 bytes"));
            let (id, key, kind) = (u(0), u(8), e[16]);
            let v = [u(17), u(25), u(33)];
            let ls = limiters.get(&id).map(Vec::as_slice).unwrap_or_default();
            if kind == CONNS {
                let before = theirs.insert((id, key), v[0]).unwrap_or(0);
                if v[0] == 0 {
                    theirs.remove(&(id, key));
                }
                seen.push((id, key));
                for l in ls.iter().filter_map(Weak::upgrade) {
                    l.remote_conns(key, before, v[0]);
                }
                continue;
            }
            for l in ls.iter().filter_map(Weak::upgrade) {
                l.remote_counts(kind, key, v, now_ms);
            }
        }
        if full {
            // What the snapshot no longer holds has ended there.
            seen.sort_unstable();
            let gone: Vec<((u64, u64), u64)> = theirs
                .iter()
                .filter(|(k, _)| seen.binary_search(k).is_err())
                .map(|(k, n)| (*k, *n))
                .collect();
            for ((id, key), n) in gone {
                theirs.remove(&(id, key));
                ended(&limiters, id, key, n);
            }
        }
        Ok(())
    }

    /// Process `from` is gone (or out of reach): its requests in progress
    /// no longer count.
    pub fn forget(&self, from: &str) {
        let theirs = self
            .remote
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(from);
        let limiters = self
            .limiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for ((id, key), n) in theirs.into_iter().flatten() {
            ended(&limiters, id, key, n);
        }
    }

    /// Every other process is out of reach: count alone.
    pub fn forget_all(&self) {
        let names: Vec<String> = self
            .remote
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for n in names {
            self.forget(&n);
        }
    }
}

/// Another process's `n` requests in progress under `key` of limit `id`
/// no longer count.
fn ended(limiters: &HashMap<u64, Vec<Weak<Limiter>>>, id: u64, key: u64, n: u64) {
    for l in limiters
        .get(&id)
        .into_iter()
        .flatten()
        .filter_map(Weak::upgrade)
    {
        l.remote_conns(key, n, 0);
    }
}

impl Limiter {
    /// Another process's count of requests in progress under `key` went
    /// from `before` to `now`.
    fn remote_conns(&self, key: u64, before: u64, now: u64) {
        if let State::Concurrent(_, t) = &self.state {
            t.with(&key, |c| c.remote = (c.remote + now).saturating_sub(before));
        }
    }

    fn remote_counts(&self, kind: u8, key: u64, v: [u64; 3], now_ms: u64) {
        match (&self.state, kind) {
            (State::Rate(rate, t), RATE) => {
                let at = now_ms.saturating_sub(v[1]);
                t.with(&key, |s| s.bucket.add_remote(v[0], rate, at))
            }
            (State::Window(t), WINDOW) => {
                let LimitKind::Window { period, .. } = &self.cfg.kind else {
                    return;
                };
                let p = period.as_millis() as u64;
                t.with(&key, |c| {
                    for (w, n) in [&mut c.requests, &mut c.errors, &mut c.bytes]
                        .into_iter()
                        .zip(v)
                    {
                        if n > 0 {
                            w.add(p, now_ms, n);
                        }
                    }
                })
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Decision;
    use std::net::{IpAddr, Ipv4Addr};
    use weir_config::traffic::LimitKey;

    fn cfg(kind: LimitKind) -> Arc<LimitConfig> {
        Arc::new(LimitConfig {
            name: "t".into(),
            key: vec![LimitKey::Client],
            kind,
            status: 429,
            body: None,
            dry_run: false,
            size: 1000,
            headers: false,
        })
    }

    const C: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    fn parts() -> http::request::Parts {
        http::Request::get("/").body(()).unwrap().into_parts().0
    }

    /// Three "processes" in one: each its own limiter of the same limit,
    /// exchanging every 50 ms; a client spread over them at 60 r/s for 10 s
    /// gets about 10 r/s through in all.
    #[test]
    fn three_processes_share_one_rate() {
        let x = enable(b"0123456789abcdef0123456789abcdef");
        let kind = LimitKind::Rate {
            per_sec_milli: 10_000,
            burst: 0,
            delay_after: 0,
        };
        let ls: Vec<Arc<Limiter>> = (0..3)
            .map(|_| {
                let id = limit_id("site a", &cfg(kind.clone()));
                Arc::new(Limiter::make(cfg(kind.clone()), Some(x.key_hasher()), id))
            })
            .collect();
        let key = ls[0].key(&parts(), C);
        assert_eq!(
            key,
            ls[2].key(&parts(), C),
            "every process keys a client alike"
        );
        let mut passed = 0;
        for step in 0..600u64 {
            let now = 1000 + step * 1000 / 60;
            let i = step as usize % 3;
            if ls[i].admit(key, now).decision == Decision::Pass {
                passed += 1;
            }
            // Every 50 ms each sends what it counted to the other two.
            if step % 3 == 2 {
                let msgs: Vec<Option<Vec<u8>>> = ls.iter().map(|l| collect_one(l, now)).collect();
                for (from, m) in msgs.iter().enumerate() {
                    for (to, l) in ls.iter().enumerate() {
                        if let (Some(m), true) = (m, from != to) {
                            apply_one(l, m, now);
                        }
                    }
                }
            }
        }
        assert!((95..=110).contains(&passed), "{passed} passed");
    }

    /// One limiter's part of a message (the test's processes share one
    /// exchange, so it is encoded by hand the same way).
    fn collect_one(l: &Limiter, now: u64) -> Option<Vec<u8>> {
        let mut msg = vec![VERSION, 0];
        if let State::Rate(_, t) = &l.state {
            t.drain_marked(|k, s| {
                msg.extend_from_slice(&l.id.to_le_bytes());
                msg.extend_from_slice(&k.to_le_bytes());
                msg.push(RATE);
                msg.extend_from_slice(&std::mem::take(&mut s.pending).to_le_bytes());
                msg.extend_from_slice(&now.saturating_sub(s.pending_ms).to_le_bytes());
                msg.extend_from_slice(&[0; 8]);
            });
        }
        (msg.len() > 2).then_some(msg)
    }

    fn apply_one(l: &Limiter, m: &[u8], now: u64) {
        for e in m[2..].chunks_exact(ENTRY) {
            let u = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap());
            l.remote_counts(e[16], u(8), [u(17), u(25), u(33)], now);
        }
    }

    #[test]
    fn connections_in_progress_elsewhere_count_and_are_dropped_with_their_process() {
        let x = enable(b"0123456789abcdef0123456789abcdef");
        let l = limiter(cfg(LimitKind::Concurrent(2)), "site conns");
        let key = l.key(&parts(), C);
        let mut other = vec![VERSION, 0];
        other.extend_from_slice(&l.id.to_le_bytes());
        other.extend_from_slice(&key.unwrap().to_le_bytes());
        other.push(CONNS);
        other.extend_from_slice(&1u64.to_le_bytes());
        other.extend_from_slice(&[0; 16]);
        x.apply("b", &other, 0).unwrap();
        let first = l.admit(key, 0);
        assert_eq!(first.decision, Decision::Pass);
        assert!(
            matches!(l.admit(key, 0).decision, Decision::Refuse(_)),
            "1 here + 1 there"
        );
        // Its own count goes out, as the number in progress.
        let m = x.collect(false, 0).unwrap();
        assert_eq!(m.len(), 2 + ENTRY);
        assert_eq!(u64::from_le_bytes(m[2 + 17..2 + 25].try_into().unwrap()), 1);
        x.forget("b");
        assert_eq!(l.admit(key, 0).decision, Decision::Pass, "b is gone");
        // A full snapshot from b without the key ends b's count too.
        x.apply("b", &other, 0).unwrap();
        drop(first);
        let held = l.admit(key, 0);
        assert!(matches!(held.decision, Decision::Pass));
        x.apply("b", &[VERSION, 1], 0).unwrap();
        assert_eq!(l.admit(key, 0).decision, Decision::Pass);
        assert_eq!(x.apply("b", &[9, 0], 0), Err(ExchangeError::Version(9)));
        assert_eq!(
            x.apply("b", &[VERSION, 0, 1], 0),
            Err(ExchangeError::Truncated(3))
        );
    }
}
