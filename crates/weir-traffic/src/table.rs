//! A limit's per-key state, bounded: at most `capacity` keys, and when it
//! is full the key used longest ago makes room (counted, so the metrics
//! and the log can say so; HAProxy's stick tables silently stop tracking
//! instead). Sharded so that requests for different keys rarely meet on a
//! lock; each shard is a hash map into a slab threaded as a
//! least-recently-used list, so every step is O(1) and a key costs its
//! own size plus about 40 bytes.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;
const NIL: usize = usize::MAX;

struct Node<K, S> {
    key: K,
    state: S,
    /// Towards the most recently used.
    prev: usize,
    /// Towards the least recently used.
    next: usize,
    /// In its shard's `marked` list (changed since the last exchange).
    marked: bool,
}

struct Shard<K, S> {
    index: HashMap<K, usize>,
    nodes: Vec<Node<K, S>>,
    /// Most and least recently used.
    head: usize,
    tail: usize,
    /// Nodes changed since [`Table::drain_marked`] last ran.
    marked: Vec<usize>,
}

impl<K: Hash + Eq + Clone, S> Shard<K, S> {
    fn new() -> Self {
        Shard {
            index: HashMap::new(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            marked: Vec::new(),
        }
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.nodes[i].prev, self.nodes[i].next);
        match p {
            NIL => self.head = n,
            p => self.nodes[p].next = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.nodes[n].prev = p,
        }
    }

    fn mark(&mut self, i: usize) {
        if !self.nodes[i].marked {
            self.nodes[i].marked = true;
            self.marked.push(i);
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }
}

/// Per-key state `S` of one limit, at most `capacity` keys.
pub struct Table<K, S> {
    shards: Box<[Mutex<Shard<K, S>>]>,
    per_shard: usize,
    hasher: std::collections::hash_map::RandomState,
    evicted: AtomicU64,
}

impl<K: Hash + Eq + Clone, S: Default> Table<K, S> {
    pub fn new(capacity: usize) -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: Default::default(),
            evicted: AtomicU64::new(0),
        }
    }

    /// Runs `f` on `key`'s state (a new key starts from `S::default()`,
    /// evicting the least recently used key of its shard when full).
    pub fn with<R>(&self, key: &K, f: impl FnOnce(&mut S) -> R) -> R {
        self.with_marked(key, |s| (f(s), false))
    }

    /// As [`Table::with`]; when `f` says so, the key is marked as changed
    /// for the next [`Table::drain_marked`] (limits shared with other
    /// processes send what changed, not the whole table).
    pub fn with_marked<R>(&self, key: &K, f: impl FnOnce(&mut S) -> (R, bool)) -> R {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
        let i = match s.index.get(key) {
            Some(&i) => {
                s.unlink(i);
                i
            }
            None if s.nodes.len() < self.per_shard => {
                s.nodes.push(Node {
                    key: key.clone(),
                    state: S::default(),
                    prev: NIL,
                    next: NIL,
                    marked: false,
                });
                let i = s.nodes.len() - 1;
                s.index.insert(key.clone(), i);
                i
            }
            None => {
                // Full: the least recently used key gives its slot.
                let i = s.tail;
                s.unlink(i);
                let old = std::mem::replace(&mut s.nodes[i].key, key.clone());
                s.index.remove(&old);
                s.index.insert(key.clone(), i);
                s.nodes[i].state = S::default();
                self.evicted.fetch_add(1, Ordering::Relaxed);
                i
            }
        };
        s.push_front(i);
        let (r, mark) = f(&mut s.nodes[i].state);
        if mark {
            s.mark(i);
        }
        r
    }

    /// Runs `f` on `key`'s state if the key is held (never adds it nor
    /// changes the order: releasing what a request held).
    pub fn with_present<R>(&self, key: &K, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        self.with_present_marked(key, false, f)
    }

    /// As [`Table::with_present`], marking the key as changed when `mark`.
    pub fn with_present_marked<R>(
        &self,
        key: &K,
        mark: bool,
        f: impl FnOnce(&mut S) -> R,
    ) -> Option<R> {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
        let i = *s.index.get(key)?;
        let r = f(&mut s.nodes[i].state);
        if mark {
            s.mark(i);
        }
        Some(r)
    }

    /// Runs `f` on every key marked since the last call, one shard's lock
    /// at a time, and clears the marks. (A marked slot given to another key
    /// since is visited under its new key: harmless, its state is new.)
    pub fn drain_marked(&self, mut f: impl FnMut(&K, &mut S)) {
        for shard in self.shards.iter() {
            let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
            let marked = std::mem::take(&mut s.marked);
            for &i in &marked {
                let n = &mut s.nodes[i];
                n.marked = false;
                f(&n.key, &mut n.state);
            }
            // Keep the list's allocation for the next round.
            let mut marked = marked;
            marked.clear();
            s.marked = marked;
        }
    }

    /// Runs `f` on every key held (a full snapshot; not on the request path).
    pub fn for_each(&self, mut f: impl FnMut(&K, &S)) {
        for shard in self.shards.iter() {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            for n in &s.nodes {
                f(&n.key, &n.state);
            }
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).nodes.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys evicted to stay within the capacity, since the table was made.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The most keys it holds.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::{Bucket, Rate, Verdict};

    #[test]
    fn keys_do_not_share_a_budget() {
        let t: Table<u32, Bucket> = Table::new(100);
        let r = Rate::per_second(1, 0);
        assert_eq!(t.with(&1, |b| b.check(&r, 0)), Verdict::Pass);
        assert!(matches!(t.with(&1, |b| b.check(&r, 1)), Verdict::Refuse(_)));
        assert_eq!(t.with(&2, |b| b.check(&r, 1)), Verdict::Pass);
    }

    #[test]
    fn the_least_recently_used_key_is_evicted_when_full() {
        // One shard's worth: keys that land in the same shard.
        let t: Table<u32, u32> = Table::new(SHARDS * 2);
        let shard_of = |k: &u32| t.hasher.hash_one(k) as usize % SHARDS;
        let same: Vec<u32> = (0..)
            .filter(|k| shard_of(k) == shard_of(&0))
            .take(3)
            .collect();
        t.with(&same[0], |s| *s = 10);
        t.with(&same[1], |s| *s = 20);
        // Using the first makes the second the oldest.
        t.with(&same[0], |s| *s += 1);
        t.with(&same[2], |s| *s = 30);
        assert_eq!(t.evicted(), 1);
        assert_eq!(t.with(&same[0], |s| *s), 11);
        // The evicted key starts again from nothing.
        assert_eq!(t.with(&same[1], |s| *s), 0);
    }

    #[test]
    fn marked_keys_are_drained_once() {
        let t: Table<u32, u32> = Table::new(1000);
        for k in 0..10 {
            t.with_marked(&k, |s| {
                *s += 1;
                ((), k % 2 == 0)
            });
        }
        t.with_marked(&2, |s| {
            ((), {
                *s += 1;
                true
            })
        });
        t.with_present_marked(&3, true, |s| *s += 1);
        let mut seen = Vec::new();
        t.drain_marked(|k, s| seen.push((*k, *s)));
        seen.sort();
        assert_eq!(seen, [(0, 1), (2, 2), (3, 2), (4, 1), (6, 1), (8, 1)]);
        let mut again = 0;
        t.drain_marked(|_, _| again += 1);
        assert_eq!(again, 0);
    }

    #[test]
    fn a_million_keys_stay_within_the_bound() {
        let t: Table<u64, Bucket> = Table::new(100_000);
        let r = Rate::per_second(10, 5);
        for k in 0..1_000_000u64 {
            t.with(&k, |b| b.check(&r, k));
        }
        assert!(t.len() <= t.capacity());
        assert!(t.capacity() < 100_000 + SHARDS);
        assert_eq!(t.evicted() as usize, 1_000_000 - t.len());
    }
}
