//! Where stored responses live: a concurrent map bounded in bytes (moka,
//! a TinyLFU admission policy) from primary key to the entry holding that
//! URL's variants, the memory of recent uncacheable answers (hit-for-miss),
//! the fetches in flight that concurrent misses wait for, and the counts.
//!
//! Shared by every site and route that caches, across reloads while
//! `[cache]` is unchanged. Never fetches and never builds a response.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use moka::notification::RemovalCause;
use tokio::sync::watch;
use weir_config::cache::CacheStorage;
use weir_http::metrics::Counts;
use weir_http::worker::Worker;

use crate::object::{Entry, Expire, Object};
use crate::rules::Uncacheable;

/// How long an uncacheable answer makes later requests for its URL go
/// straight upstream, without waiting for each other (Varnish's 120 s).
const HIT_FOR_MISS: Duration = Duration::from_secs(120);

/// The counters the metrics read, per worker.
pub mod counter {
    /// Fresh responses served from the store.
    pub const HIT: usize = 0;
    /// Requests fetched upstream for lack of a usable stored response.
    pub const MISS: usize = 1;
    /// Stale responses served while a background request refreshed them.
    pub const STALE: usize = 2;
    /// Stale responses served because the upstream failed.
    pub const STALE_ERROR: usize = 3;
    /// Misses that waited for another request's fetch instead of their own.
    pub const COALESCED: usize = 4;
    /// Requests passed upstream as uncacheable (method, hit-for-miss, …).
    pub const PASS: usize = 5;
    /// Stored responses the upstream confirmed with a 304.
    pub const REVALIDATED: usize = 6;
    /// Body bytes served from the store.
    pub const BYTES_SERVED: usize = 7;
    pub const N: usize = 8;
}

/// What a purge or ban names (the admin API's `{"url": …}` and the others).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Invalidation {
    /// One URL's key (`http://host/path?query`), every variant.
    Url(String),
    /// Keys starting with this.
    Prefix(String),
    /// Keys a regular expression matches.
    Pattern(String),
    /// Responses tagged so.
    Tag(String),
}

impl std::fmt::Display for Invalidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalidation::Url(v) => write!(f, "url {v}"),
            Invalidation::Prefix(v) => write!(f, "prefix {v}"),
            Invalidation::Pattern(v) => write!(f, "pattern {v}"),
            Invalidation::Tag(v) => write!(f, "tag {v}"),
        }
    }
}

/// Every cached response of the process.
pub struct Store {
    cfg: CacheStorage,
    mem: moka::sync::Cache<Arc<str>, Arc<Entry>>,
    uncacheable: moka::sync::Cache<Arc<str>, Uncacheable>,
    pub(crate) flights: Flights,
    counts: Counts<{ counter::N }>,
    evictions: Arc<AtomicU64>,
    purged: AtomicU64,
    disk: Option<Arc<crate::disk::Disk>>,
}

/// Bodies at least this large keep the file they were read back from open,
/// for `sendfile`: at most `[cache] memory` ÷ this descriptors.
const KEEP_FILE: usize = 256 * 1024;

/// The store in numbers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// URLs held (each with one or more variants).
    pub urls: u64,
    pub bytes: u64,
    /// URLs and bytes in the disk store, and its bound (0: none).
    pub disk_urls: u64,
    pub disk_bytes: u64,
    pub disk: u64,
    /// `[cache] memory`.
    pub memory: u64,
    pub max_object_size: u64,
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    pub stale_on_error: u64,
    pub coalesced: u64,
    pub passes: u64,
    pub revalidated: u64,
    pub bytes_served: u64,
    pub evictions: u64,
    pub purged: u64,
}

/// What a `GET /cache` lists of one stored response.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EntryInfo {
    pub key: String,
    pub status: u16,
    pub bytes: u64,
    pub age: u64,
    pub ttl: i64,
    pub complete: bool,
    pub vary: Vec<String>,
    pub tags: Vec<String>,
}

impl Store {
    pub fn new(cfg: &CacheStorage, workers: usize) -> Arc<Store> {
        let evictions = Arc::new(AtomicU64::new(0));
        let ev = evictions.clone();
        let mem = moka::sync::Cache::builder()
            .max_capacity(cfg.memory)
            .weigher(|k: &Arc<str>, v: &Arc<Entry>| v.weight(k))
            .expire_after(Expire)
            .eviction_listener(move |_, _, cause| {
                if cause == RemovalCause::Size {
                    ev.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        Arc::new(Store {
            cfg: cfg.clone(),
            mem,
            uncacheable: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(HIT_FOR_MISS)
                .build(),
            flights: Flights::new(),
            counts: Counts::new(workers),
            evictions,
            purged: AtomicU64::new(0),
            disk: cfg.disk.as_ref().and_then(|d| {
                crate::disk::Disk::open(&d.path, d.size)
                    .inspect_err(|e| {
                        tracing::error!(dir = %d.path.display(), error = %e, "cache: disk store unusable; caching in memory only")
                    })
                    .ok()
            }),
        })
    }

    /// The settings it was made with: a reload with other settings makes a
    /// new store.
    pub fn storage(&self) -> &CacheStorage {
        &self.cfg
    }

    pub fn max_object_size(&self) -> u64 {
        self.cfg.max_object_size
    }

    #[inline]
    pub(crate) fn count(&self, w: Worker, i: usize, n: u64) {
        self.counts.add(w, i, n);
    }

    /// Counter `i` of [`counter`], summed over the workers.
    pub fn counter(&self, i: usize) -> u64 {
        self.counts.sum(i)
    }

    /// Responses evicted to stay within `[cache] memory`.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Responses removed by purges, bans and invalidations.
    pub fn purged(&self) -> u64 {
        self.purged.load(Ordering::Relaxed)
    }

    /// (URLs, bytes) held now.
    pub fn size(&self) -> (u64, u64) {
        self.mem.run_pending_tasks();
        (self.mem.entry_count(), self.mem.weighted_size())
    }

    /// The stored response `req` selects, unless it is past all use.
    pub fn lookup(
        &self,
        primary: &str,
        req: &HeaderMap,
        extra: &str,
        now: u64,
    ) -> Option<Arc<Object>> {
        let pick = |e: Arc<Entry>| {
            e.variants
                .iter()
                .find(|o| o.matches(req, extra) && o.retain_until() >= now)
                .cloned()
        };
        self.mem
            .get(primary)
            .and_then(pick)
            .or_else(|| self.disk.as_ref()?.index.get(primary).and_then(pick))
    }

    /// A response of the disk store read back into memory (on the blocking
    /// pool), or `None` if its file is gone.
    pub async fn load(&self, primary: &str, obj: &Arc<Object>) -> Option<Arc<Object>> {
        let crate::object::ObjBody::OnDisk(d) = &obj.body else {
            return Some(obj.clone());
        };
        let d2 = d.clone();
        let read = tokio::task::spawn_blocking(move || crate::disk::Disk::read_body(&d2)).await;
        let (body, file) = match read {
            Ok(Ok(r)) => r,
            _ => {
                if let Some(disk) = &self.disk {
                    disk.purge(primary);
                }
                return None;
            }
        };
        let keep_file = (body.len() >= KEEP_FILE).then(|| (Arc::new(file), d.offset));
        let mut mem = obj.with(
            obj.headers.clone(),
            obj.fresh,
            crate::object::ObjBody::Complete(body),
        );
        mem.file = keep_file;
        let mem = Arc::new(mem);
        self.insert_mem(&Arc::from(primary), mem.clone());
        Some(mem)
    }

    /// Writes a complete response to the disk store, in the background.
    fn persist(&self, primary: &Arc<str>, obj: &Arc<Object>) {
        let (Some(disk), crate::object::ObjBody::Complete(body)) = (&self.disk, &obj.body) else {
            return;
        };
        let (disk, primary, obj, body) = (disk.clone(), primary.clone(), obj.clone(), body.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = disk.write(&primary, &obj, &body) {
                tracing::warn!(key = %primary, error = %e, "cache: writing to the disk store failed");
            }
        });
    }

    /// The fields the URL's stored responses vary on (for the key that
    /// concurrent misses wait on).
    pub fn vary_of(&self, primary: &str) -> Option<Arc<Object>> {
        self.mem
            .get(primary)
            .and_then(|e| e.variants.first().cloned())
    }

    /// Stores `obj`, replacing the variant it stands for.
    pub fn insert(&self, primary: &Arc<str>, obj: Arc<Object>) {
        self.persist(primary, &obj);
        self.insert_mem(primary, obj);
    }

    fn insert_mem(&self, primary: &Arc<str>, obj: Arc<Object>) {
        let e = Entry::adding(self.mem.get(&**primary).as_deref(), obj);
        self.mem.insert(primary.clone(), Arc::new(e));
        self.uncacheable.invalidate(&**primary);
    }

    /// Puts `new` where `old` is (a body that arrived whole, a freshened
    /// head); nothing if `old` was purged or replaced meanwhile.
    pub fn replace(&self, primary: &Arc<str>, old: &Arc<Object>, new: Arc<Object>) {
        let Some(e) = self.mem.get(&**primary) else {
            return;
        };
        let Some(i) = e.variants.iter().position(|o| Arc::ptr_eq(o, old)) else {
            return;
        };
        self.persist(primary, &new);
        let mut variants = e.variants.clone();
        variants[i] = new;
        self.mem
            .insert(primary.clone(), Arc::new(Entry { variants }));
    }

    /// Removes one stored response (a body that failed or grew too large).
    pub fn remove(&self, primary: &str, obj: &Arc<Object>) {
        let Some(e) = self.mem.get(primary) else {
            return;
        };
        let variants: Vec<Arc<Object>> = e
            .variants
            .iter()
            .filter(|o| !Arc::ptr_eq(o, obj))
            .cloned()
            .collect();
        if variants.is_empty() {
            self.mem.invalidate(primary);
        } else {
            self.mem
                .insert(Arc::from(primary), Arc::new(Entry { variants }));
        }
    }

    /// Removes every variant of a URL; how many there were.
    pub fn purge(&self, primary: &str) -> usize {
        let n = self.mem.remove(primary).map_or(0, |e| e.variants.len());
        let on_disk = self.disk.as_ref().map_or(0, |d| d.purge(primary));
        let n = n.max(on_disk);
        self.purged.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Removes every stored response for which `f(key, object)` holds (bans,
    /// tags); how many. Walks the whole store: for the admin API, not for
    /// requests.
    pub fn purge_where(&self, mut f: impl FnMut(&str, &Object) -> bool) -> usize {
        let on_disk = self.disk.as_ref().map_or(0, |d| d.purge_where(&mut f));
        let mut n = 0;
        for (k, e) in self.mem.iter() {
            let keep: Vec<Arc<Object>> = e.variants.iter().filter(|o| !f(&k, o)).cloned().collect();
            if keep.len() == e.variants.len() {
                continue;
            }
            n += e.variants.len() - keep.len();
            if keep.is_empty() {
                self.mem.invalidate(&*k);
            } else {
                self.mem
                    .insert((*k).clone(), Arc::new(Entry { variants: keep }));
            }
        }
        let n = n.max(on_disk);
        self.purged.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Removes the URLs starting with `prefix`.
    pub fn ban_prefix(&self, prefix: &str) -> usize {
        self.purge_where(|k, _| k.starts_with(prefix))
    }

    /// Removes the URLs a regular expression matches (anywhere in the key;
    /// anchor it with `^` and `$`).
    pub fn ban_pattern(&self, pattern: &str) -> Result<usize, String> {
        let re = regex_lite::Regex::new(pattern).map_err(|e| format!("pattern: {e}"))?;
        Ok(self.purge_where(|k, _| re.is_match(k)))
    }

    /// Removes what `what` names; how many responses.
    pub fn invalidate(&self, what: &Invalidation) -> Result<usize, String> {
        Ok(match what {
            Invalidation::Url(u) => self.purge(u),
            Invalidation::Prefix(p) => self.ban_prefix(p),
            Invalidation::Pattern(p) => self.ban_pattern(p)?,
            Invalidation::Tag(t) => self.purge_tag(t),
        })
    }

    /// What the admin API and the status page show: sizes and counts.
    pub fn summary(&self) -> Summary {
        let (urls, bytes) = self.size();
        let (disk_urls, disk_bytes) = self.disk.as_ref().map_or((0, 0), |d| d.size());
        Summary {
            urls,
            bytes,
            disk_urls,
            disk_bytes,
            disk: self.cfg.disk.as_ref().map_or(0, |d| d.size),
            memory: self.cfg.memory,
            max_object_size: self.cfg.max_object_size,
            hits: self.counter(counter::HIT),
            misses: self.counter(counter::MISS),
            stale: self.counter(counter::STALE),
            stale_on_error: self.counter(counter::STALE_ERROR),
            coalesced: self.counter(counter::COALESCED),
            passes: self.counter(counter::PASS),
            revalidated: self.counter(counter::REVALIDATED),
            bytes_served: self.counter(counter::BYTES_SERVED),
            evictions: self.evictions(),
            purged: self.purged(),
        }
    }

    /// Removes the responses tagged `tag`.
    pub fn purge_tag(&self, tag: &str) -> usize {
        self.purge_where(|_, o| o.tags.iter().any(|t| &**t == tag))
    }

    /// Remembers that the URL's answer was uncacheable: its next requests
    /// go straight upstream instead of waiting for one another.
    pub fn mark_uncacheable(&self, primary: &Arc<str>, why: Uncacheable) {
        self.uncacheable.insert(primary.clone(), why);
    }

    pub fn uncacheable(&self, primary: &str) -> Option<Uncacheable> {
        self.uncacheable.get(primary)
    }

    /// Up to `limit` stored responses, for the admin API.
    pub fn list(&self, limit: usize, now: u64) -> Vec<EntryInfo> {
        let mut out = Vec::new();
        for (k, e) in self.mem.iter() {
            for o in &e.variants {
                if out.len() >= limit {
                    return out;
                }
                out.push(EntryInfo {
                    key: k.to_string(),
                    status: o.status.as_u16(),
                    bytes: o.weight(),
                    age: o.fresh.age(now),
                    ttl: o.fresh.ttl(now),
                    complete: matches!(o.body, crate::object::ObjBody::Complete(_)),
                    vary: o.vary.iter().map(|(n, v)| format!("{n}: {v}")).collect(),
                    tags: o.tags.iter().map(|t| t.to_string()).collect(),
                });
            }
        }
        out
    }
}

/// What a fetch in flight ended in, for the requests waiting on it.
#[derive(Clone)]
pub enum Landing {
    Pending,
    /// Stored: read it (its body may still be arriving).
    Stored(Arc<Object>),
    /// Not stored: fetch for yourself.
    Pass,
}

type Shard = HashMap<Arc<str>, Arc<watch::Sender<Landing>>>;

/// Fetches in flight by variant key, in shards so that misses for
/// different keys rarely meet on a lock.
pub struct Flights {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

/// A request's part in a fetch.
pub enum Joined {
    /// It fetches; the others wait for its [`Lead::land`].
    Lead(Lead),
    /// Another request fetches; wait for its landing.
    Wait(watch::Receiver<Landing>),
}

/// The fetching request's hold on its flight: tells the waiters how it
/// ended, and ends the flight when dropped (a cancelled fetch lets the
/// waiters try again).
pub struct Lead {
    store: Arc<Store>,
    key: Arc<str>,
    tx: Arc<watch::Sender<Landing>>,
}

impl Lead {
    pub fn land(&self, l: Landing) {
        self.tx.send_replace(l);
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        let shard = self.store.flights.shard(&self.key);
        let mut m = shard.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(&self.key).is_some_and(|t| Arc::ptr_eq(t, &self.tx)) {
            m.remove(&self.key);
        }
    }
}

impl Flights {
    fn new() -> Self {
        Flights {
            shards: (0..64).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(key) as usize % self.shards.len()]
    }

    /// Joins the fetch for `key`, or starts it.
    pub fn join(store: &Arc<Store>, key: Arc<str>) -> Joined {
        let shard = store.flights.shard(&key);
        let mut m = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = m.get(&key) {
            return Joined::Wait(tx.subscribe());
        }
        let tx = Arc::new(watch::Sender::new(Landing::Pending));
        m.insert(key.clone(), tx.clone());
        Joined::Lead(Lead {
            store: store.clone(),
            key,
            tx,
        })
    }
}

/// Waits for a flight to land; `None` if its fetch was cancelled first.
pub async fn wait(mut rx: watch::Receiver<Landing>) -> Option<Landing> {
    loop {
        {
            let l = rx.borrow_and_update();
            if !matches!(*l, Landing::Pending) {
                return Some(l.clone());
            }
        }
        if rx.changed().await.is_err() {
            let l = rx.borrow();
            return (!matches!(*l, Landing::Pending)).then(|| l.clone());
        }
    }
}
