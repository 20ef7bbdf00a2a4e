//! In-memory cache of small hot files, and the inotify watcher that keeps it
//! honest.
//!
//! Owns: the lock-free map (papaya) from normalised path to a fully prepared
//! entry (body `Bytes`, pre-built header values, compressed variants), the
//! byte budget and its clock-style eviction, invalidation on file-system
//! events, and the per-entry stat revalidation used when events can't be
//! trusted. Must never block or take a lock on a hit, never let an entry
//! read before a change outlive the event for that change, and never hand
//! out headers and a body from two different versions of a file (an entry is
//! immutable once built; a change replaces it whole).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http::HeaderValue;

use super::Encoding;

/// One representation held in memory, with its headers ready to clone.
pub struct Variant {
    pub body: Bytes,
    /// The file `body` was read from, for `sendfile` (large identity
    /// bodies only).
    pub file: Option<Arc<std::fs::File>>,
    pub etag: HeaderValue,
    pub content_length: HeaderValue,
    pub last_modified: HeaderValue,
    /// Last modification in whole seconds, for If-(Un)Modified-Since.
    pub modified: u64,
}

/// What identifies a version of a file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Fingerprint {
    pub fn of(md: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Fingerprint {
            dev: md.dev(),
            ino: md.ino(),
            len: md.len(),
            mtime_ns: i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
            ctime_ns: i128::from(md.ctime()) * 1_000_000_000 + i128::from(md.ctime_nsec()),
        }
    }

    /// Nanoseconds since the epoch of the modification time.
    pub fn mtime_ns(md: &std::fs::Metadata) -> u128 {
        md.modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos())
    }
}

/// Paths whose state decides an entry's validity, checked by stat when
/// inotify can't be relied on (no watcher, or the file is reached through a
/// symlink whose target the watch does not cover).
pub struct Revalidate {
    /// Milliseconds (since the server's epoch) of the last check.
    pub last_check_ms: AtomicU64,
    /// `None`: the path must still not exist (a sidecar or an earlier index file).
    pub deps: Vec<(PathBuf, Option<Fingerprint>)>,
}

impl Revalidate {
    /// Blocking: true when every dependency is as it was.
    pub fn still_valid(deps: &[(PathBuf, Option<Fingerprint>)]) -> bool {
        deps.iter().all(|(p, fp)| match (std::fs::metadata(p), fp) {
            (Ok(md), Some(fp)) => Fingerprint::of(&md) == *fp,
            (Err(e), None) => e.kind() == std::io::ErrorKind::NotFound,
            _ => false,
        })
    }
}

/// A cached file: everything needed to answer without touching the disk.
pub struct CachedFile {
    pub content_type: HeaderValue,
    pub identity: Variant,
    /// Precompressed sidecars found next to the file, in preference order.
    pub sidecars: Vec<(Encoding, Variant)>,
    /// On-the-fly compression applies (type, size, settings) when no
    /// sidecar the client takes exists.
    pub compress_on_the_fly: bool,
    /// Compressed-once variants, filled on first demand; `None` inside
    /// means compression did not make it smaller.
    pub otf: [tokio::sync::OnceCell<Option<Variant>>; 3],
    /// Whether responses carry `Vary: Accept-Encoding`.
    pub vary: bool,
    pub revalidate: Option<Revalidate>,
    referenced: AtomicBool,
    /// True while not in the map (before insertion, after removal).
    detached: AtomicBool,
    /// Bytes this entry has added to the cache total.
    charged: AtomicU64,
}

impl CachedFile {
    pub fn new(
        content_type: HeaderValue,
        identity: Variant,
        sidecars: Vec<(Encoding, Variant)>,
        compress_on_the_fly: bool,
        vary: bool,
        revalidate: Option<Revalidate>,
    ) -> Self {
        CachedFile {
            content_type,
            identity,
            sidecars,
            compress_on_the_fly,
            otf: Default::default(),
            vary,
            revalidate,
            referenced: AtomicBool::new(true),
            detached: AtomicBool::new(true),
            charged: AtomicU64::new(0),
        }
    }

    /// True while the entry is in the cache map.
    pub fn is_cached(&self) -> bool {
        !self.detached.load(Ordering::SeqCst)
    }

    /// Approximate memory held, for the budget.
    fn base_size(&self, key: &str) -> u64 {
        const OVERHEAD: u64 = 512;
        let bodies: usize = self.identity.body.len()
            + self
                .sidecars
                .iter()
                .map(|(_, v)| v.body.len())
                .sum::<usize>();
        bodies as u64 + key.len() as u64 + OVERHEAD
    }
}

/// The cache proper.
pub struct Cache {
    map: papaya::HashMap<Box<str>, Arc<CachedFile>>,
    max_bytes: u64,
    total: AtomicI64,
    /// Bumped before every invalidation; a miss that started under an older
    /// generation must not insert what it read (it may predate the change).
    generation: AtomicU64,
    sweeping: AtomicBool,
    /// Set when the watch on the root is lost (root deleted or moved):
    /// from then on nothing is cached, since nothing would invalidate it.
    disabled: AtomicBool,
    root: PathBuf,
}

impl Cache {
    pub fn new(max_bytes: u64, canonical_root: PathBuf) -> Self {
        Cache {
            map: papaya::HashMap::new(),
            max_bytes,
            total: AtomicI64::new(0),
            generation: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
            disabled: AtomicBool::new(false),
            root: canonical_root,
        }
    }

    /// The hot path: one lock-free lookup and a reference-count increment.
    pub fn get(&self, key: &str) -> Option<Arc<CachedFile>> {
        let map = self.map.pin();
        let e = map.get(key)?;
        // Only write when needed so hits on a hot entry don't bounce its
        // cache line between cores.
        if !e.referenced.load(Ordering::Relaxed) {
            e.referenced.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(e))
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Total bytes currently charged.
    pub fn total_bytes(&self) -> i64 {
        self.total.load(Ordering::SeqCst)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Inserts `entry` unless an invalidation happened since `gen0`, or it
    /// alone is larger than the budget. Returns whether it is now cached.
    pub fn insert(&self, key: &str, entry: &Arc<CachedFile>, gen0: u64) -> bool {
        let size = entry.base_size(key);
        if size > self.max_bytes
            || self.generation() != gen0
            || self.disabled.load(Ordering::SeqCst)
        {
            return false;
        }
        entry.detached.store(false, Ordering::SeqCst);
        self.charge(entry, size);
        let old = self
            .map
            .pin()
            .insert(key.into(), Arc::clone(entry))
            .cloned();
        if let Some(old) = old {
            self.discharge(&old);
        }
        // An invalidation may have run between the check and the insert;
        // if so, what we read may be stale: take it out again.
        if self.generation() != gen0 {
            self.remove_if_same(key, entry);
            return false;
        }
        self.evict_if_needed();
        true
    }

    /// Adds `n` bytes to `entry`'s charge (a compressed variant arrived).
    pub fn charge(&self, entry: &CachedFile, n: u64) {
        entry.charged.fetch_add(n, Ordering::SeqCst);
        self.total.fetch_add(n as i64, Ordering::SeqCst);
        if entry.detached.load(Ordering::SeqCst) {
            // Removed meanwhile (or never inserted): give it all back. The
            // swap makes this and `discharge` subtract each byte once.
            let c = entry.charged.swap(0, Ordering::SeqCst);
            self.total.fetch_sub(c as i64, Ordering::SeqCst);
        } else {
            self.evict_if_needed();
        }
    }

    fn discharge(&self, entry: &CachedFile) {
        entry.detached.store(true, Ordering::SeqCst);
        let c = entry.charged.swap(0, Ordering::SeqCst);
        self.total.fetch_sub(c as i64, Ordering::SeqCst);
    }

    /// Removes `key` only if it still maps to `entry`.
    pub fn remove_if_same(&self, key: &str, entry: &Arc<CachedFile>) {
        let map = self.map.pin();
        if let Ok(Some((_, old))) = map.remove_if(key, |_, v| Arc::ptr_eq(v, entry)) {
            self.discharge(old);
        }
    }

    fn remove(&self, key: &str) {
        if let Some(old) = self.map.pin().remove(key) {
            self.discharge(old);
        }
    }

    /// Stops caching for good and drops everything.
    pub fn disable(&self) {
        self.disabled.store(true, Ordering::SeqCst);
        self.clear();
    }

    /// Drops everything (watch overflow, watcher error).
    pub fn clear(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let map = self.map.pin();
        let keys: Vec<Box<str>> = map.keys().cloned().collect();
        for k in keys {
            if let Some(old) = map.remove(&k) {
                self.discharge(old);
            }
        }
    }

    /// Second-chance (clock) eviction: entries hit since the last sweep get
    /// their flag cleared and survive one more round. One sweeper at a time;
    /// others just go on (the budget is approximate by a few entries).
    fn evict_if_needed(&self) {
        let over = |c: &Cache| c.total.load(Ordering::SeqCst) > c.max_bytes as i64;
        if !over(self)
            || self
                .sweeping
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let map = self.map.pin();
        for _round in 0..3 {
            if !over(self) {
                break;
            }
            for (k, v) in map.iter() {
                if !over(self) {
                    break;
                }
                if v.referenced.swap(false, Ordering::Relaxed) {
                    continue;
                }
                if let Ok(Some((_, old))) = map.remove_if(k, |_, cur| Arc::ptr_eq(cur, v)) {
                    self.discharge(old);
                }
            }
        }
        self.sweeping.store(false, Ordering::Release);
    }

    /// Invalidates whatever a change at `abs` (an absolute path under the
    /// root) may affect: the file itself, the original of a sidecar, the
    /// parent directory's index entry, and, when `maybe_dir`, everything below.
    pub fn invalidate_path(&self, abs: &Path, maybe_dir: bool) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let Some(rel) = abs.strip_prefix(&self.root).ok().and_then(Path::to_str) else {
            self.clear();
            return;
        };
        let rel = rel.trim_matches('/');
        if rel.is_empty() {
            self.clear();
            return;
        }
        let key = format!("/{rel}");
        let parent = match key.rfind('/') {
            Some(i) => &key[..=i],
            None => "/",
        };
        self.remove(&key);
        self.remove(&format!("{key}/"));
        self.remove(parent);
        for enc in Encoding::ALL {
            if let Some(orig) = key.strip_suffix(enc.extension()) {
                self.remove(orig);
                if let Some(i) = orig.rfind('/') {
                    // `dir/index.html.br` changes `dir/` too.
                    self.remove(&orig[..=i]);
                }
            }
        }
        if maybe_dir {
            let prefix = format!("{key}/");
            let map = self.map.pin();
            let doomed: Vec<Box<str>> = map
                .keys()
                .filter(|k| k.starts_with(&prefix))
                .cloned()
                .collect();
            for k in doomed {
                if let Some(old) = map.remove(&k) {
                    self.discharge(old);
                }
            }
        }
    }
}

/// Starts a recursive watch on the cache's root. `None` when inotify can't
/// be set up (limits, unsupported file system): callers then revalidate by
/// stat.
pub fn watch(cache: &Arc<Cache>) -> Option<notify::RecommendedWatcher> {
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};
    use notify::{EventKind, RecursiveMode, Watcher};

    let weak = Arc::downgrade(cache);
    let handler = move |res: notify::Result<notify::Event>| {
        let Some(cache) = weak.upgrade() else { return };
        let ev = match res {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "static files: watch error, flushing cache");
                cache.clear();
                return;
            }
        };
        // Opens and reads (ours included) change nothing; a close after
        // writing does (mmap writers send nothing else).
        if let EventKind::Access(a) = ev.kind
            && a != AccessKind::Close(AccessMode::Write)
        {
            return;
        }
        if ev.need_rescan() || ev.paths.is_empty() {
            cache.clear();
            return;
        }
        // The root itself deleted or moved away: the watch is gone with it
        // (a new directory at the same path is not watched), so caching
        // would go stale. Serve uncached from now on.
        if matches!(
            ev.kind,
            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
        ) && ev.paths.iter().any(|p| p == &cache.root)
        {
            tracing::warn!(root = %cache.root.display(),
                "static files: root moved or deleted, caching disabled");
            cache.disable();
            return;
        }
        let maybe_dir = !matches!(
            ev.kind,
            EventKind::Create(CreateKind::File)
                | EventKind::Remove(RemoveKind::File)
                | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_))
                | EventKind::Access(_)
        );
        for p in &ev.paths {
            cache.invalidate_path(p, maybe_dir);
        }
    };
    let mut w = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "static files: no file watcher, revalidating by stat");
            return None;
        }
    };
    if let Err(e) = w.watch(&cache.root, RecursiveMode::Recursive) {
        tracing::warn!(error = %e, root = %cache.root.display(),
            "static files: cannot watch root, revalidating by stat");
        return None;
    }
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize) -> Arc<CachedFile> {
        let v = Variant {
            body: Bytes::from(vec![b'x'; n]),
            file: None,
            etag: HeaderValue::from_static("\"e\""),
            content_length: HeaderValue::from(n),
            last_modified: HeaderValue::from_static("x"),
            modified: 0,
        };
        Arc::new(CachedFile::new(
            HeaderValue::from_static("text/plain"),
            v,
            Vec::new(),
            false,
            false,
            None,
        ))
    }

    #[test]
    fn cache_budget_is_enforced_by_eviction() {
        let c = Cache::new(10_000, PathBuf::from("/nonexistent"));
        for i in 0..100 {
            let e = entry(1000);
            c.insert(&format!("/f{i}"), &e, c.generation());
            assert!(c.total_bytes() <= 10_000, "total {}", c.total_bytes());
        }
        assert!(c.len() >= 5 && c.len() <= 7, "len {}", c.len());
        c.clear();
        assert_eq!(c.total_bytes(), 0);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn cache_refuses_insert_after_invalidation() {
        let c = Cache::new(1 << 20, PathBuf::from("/r"));
        let g = c.generation();
        c.invalidate_path(Path::new("/r/a.txt"), false);
        assert!(!c.insert("/a.txt", &entry(10), g));
        assert!(c.get("/a.txt").is_none());
        assert_eq!(c.total_bytes(), 0);
    }

    #[test]
    fn cache_invalidation_covers_parent_sidecar_and_subtree() {
        let c = Cache::new(1 << 20, PathBuf::from("/r"));
        for k in ["/d/", "/d/index.html", "/d/x.css", "/d/sub/y", "/z"] {
            assert!(c.insert(k, &entry(10), c.generation()));
        }
        c.invalidate_path(Path::new("/r/d/x.css.br"), false);
        assert!(c.get("/d/x.css").is_none() && c.get("/d/").is_none());
        assert!(c.get("/d/index.html").is_some());
        c.invalidate_path(Path::new("/r/d"), true);
        assert!(c.get("/d/index.html").is_none() && c.get("/d/sub/y").is_none());
        assert!(c.get("/z").is_some());
        c.clear();
        assert_eq!(c.total_bytes(), 0);
    }

    #[test]
    fn late_variant_charge_on_removed_entry_is_returned() {
        let c = Cache::new(1 << 20, PathBuf::from("/r"));
        let e = entry(10);
        assert!(c.insert("/a", &e, c.generation()));
        c.remove("/a");
        c.charge(&e, 500);
        assert_eq!(c.total_bytes(), 0);
    }
}
