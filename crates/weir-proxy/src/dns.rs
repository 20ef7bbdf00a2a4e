//! Resolving upstream host names, again after a TTL, so a changed address
//! is picked up without a reload.
//!
//! Each worker has a [`Resolver`] of its own per proxy (its lock is never
//! contended), consulted only when a new upstream connection is opened. IP literals never
//! reach the resolver. Never blocks a worker: lookups run on tokio's
//! blocking pool (`lookup_host`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A cached answer and when it stops being fresh.
#[derive(Debug, Clone)]
pub struct Entry {
    pub addrs: Vec<SocketAddr>,
    pub expires: Instant,
}

/// Cache decisions, separate from I/O so they can be tested with a fake clock.
#[derive(Debug, Default)]
pub struct Cache {
    map: HashMap<(String, u16), Entry>,
}

impl Cache {
    pub fn get(&self, host: &str, port: u16, now: Instant) -> Option<&[SocketAddr]> {
        self.map
            .get(&(host.to_string(), port))
            .filter(|e| now < e.expires && !e.addrs.is_empty())
            .map(|e| e.addrs.as_slice())
    }

    /// Stale entries are kept as a fallback when a re-resolution fails.
    pub fn stale(&self, host: &str, port: u16) -> Option<&[SocketAddr]> {
        self.map
            .get(&(host.to_string(), port))
            .map(|e| e.addrs.as_slice())
    }

    pub fn put(
        &mut self,
        host: &str,
        port: u16,
        addrs: Vec<SocketAddr>,
        now: Instant,
        ttl: Duration,
    ) {
        self.map.insert(
            (host.to_string(), port),
            Entry {
                addrs,
                expires: now + ttl,
            },
        );
    }
}

/// One worker's cached answers, and the lookups that fill them.
#[derive(Debug, Default)]
pub struct Resolver {
    cache: Mutex<Cache>,
}

impl Resolver {
    /// The addresses of `host:port`, from the cache when fresh. The lock is
    /// never held across the lookup.
    pub async fn resolve(
        &self,
        host: &str,
        port: u16,
        ttl: Duration,
    ) -> std::io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let now = Instant::now();
        if let Some(a) = self.with(|c| c.get(host, port, now).map(<[_]>::to_vec)) {
            return Ok(a);
        }
        match tokio::net::lookup_host((host, port)).await {
            Ok(it) => {
                let addrs: Vec<SocketAddr> = it.collect();
                self.with(|c| c.put(host, port, addrs.clone(), now, ttl));
                Ok(addrs)
            }
            Err(e) => match self.with(|c| c.stale(host, port).map(<[_]>::to_vec)) {
                Some(a) => {
                    tracing::warn!("resolving {host}: {e}; using the previous addresses");
                    Ok(a)
                }
                None => Err(e),
            },
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> R {
        f(&mut self.cache.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_ttl_but_stay_as_fallback() {
        let mut c = Cache::default();
        let t0 = Instant::now();
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        c.put("app", 80, vec![a], t0, Duration::from_secs(30));
        assert_eq!(
            c.get("app", 80, t0 + Duration::from_secs(29)),
            Some(&[a][..])
        );
        assert_eq!(c.get("app", 80, t0 + Duration::from_secs(30)), None);
        assert_eq!(c.stale("app", 80), Some(&[a][..]));
        assert_eq!(c.get("app", 81, t0), None);
    }
}
