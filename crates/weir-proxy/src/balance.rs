//! Choosing an upstream: round robin (smooth weighted, as nginx does it),
//! least connections, random, power of two choices, first available, client
//! IP hash and consistent hashing on a key.
//!
//! A plain state machine: it is handed a snapshot of the candidates (up or
//! not, weight, requests in flight, full) and a hash key, and returns an
//! index. It never does I/O, never reads a clock, and its randomness comes
//! from a seeded generator, so the tests replay exact sequences. One
//! `Balancer` lives in each worker's slot of its proxy; nothing here is shared.

use weir_config::proxy::Balance;

/// One upstream as the balancer sees it at the moment of a pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Healthy and not excluded (already tried for this request).
    pub eligible: bool,
    pub weight: u32,
    /// Requests in flight to it.
    pub active: u32,
    /// At its `max_conns`: picked only when every eligible one is full.
    pub full: bool,
}

/// Points per unit of weight on the consistent-hash ring.
const VNODES: u32 = 160;

pub struct Balancer {
    alg: Balance,
    /// Smooth weighted round robin: each upstream's current weight.
    current: Vec<i64>,
    rng: fastrand::Rng,
    /// Consistent-hash ring: (point, upstream index), sorted by point.
    ring: Vec<(u64, usize)>,
}

impl Balancer {
    /// `names` are the upstreams' stable names (they place them on the hash ring).
    pub fn new(alg: Balance, names: &[&str], weights: &[u32], seed: u64) -> Self {
        let mut ring = Vec::new();
        if matches!(alg, Balance::IpHash | Balance::Hash(_)) {
            for (i, (name, w)) in names.iter().zip(weights).enumerate() {
                for v in 0..VNODES * w {
                    ring.push((hash_parts(&[name.as_bytes(), &v.to_le_bytes()]), i));
                }
            }
            ring.sort_unstable();
        }
        Balancer {
            alg,
            current: vec![0; names.len()],
            rng: fastrand::Rng::with_seed(seed),
            ring,
        }
    }

    /// Picks an upstream, or `None` when none is eligible. `key` is the hash
    /// of the client IP or of the configured key (for the hashing modes).
    pub fn pick(&mut self, c: &[Candidate], key: Option<u64>) -> Option<usize> {
        // Prefer upstreams with a free slot; fall back to full ones (they queue).
        let free = c.iter().any(|x| x.eligible && !x.full);
        let ok = |x: &Candidate| x.eligible && (!free || !x.full);
        if !c.iter().any(ok) {
            return None;
        }
        match &self.alg {
            Balance::RoundRobin => self.smooth_wrr(c, ok),
            Balance::LeastConn => self.least_conn(c, ok),
            Balance::Random => self.weighted_random(c, ok),
            Balance::PowerOfTwo => {
                let a = self.weighted_random(c, ok)?;
                let b = self.weighted_random(c, ok)?;
                // Load relative to weight; ties go to the first draw.
                let load = |i: usize| c[i].active as u64 * 1000 / c[i].weight.max(1) as u64;
                Some(if load(b) < load(a) { b } else { a })
            }
            Balance::First => c.iter().position(ok),
            Balance::IpHash | Balance::Hash(_) => match key {
                Some(k) => self.ring_lookup(k, c, ok),
                None => self.smooth_wrr(c, ok),
            },
        }
    }

    fn smooth_wrr(&mut self, c: &[Candidate], ok: impl Fn(&Candidate) -> bool) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, x) in c.iter().enumerate() {
            if !ok(x) {
                continue;
            }
            let w = x.weight.max(1) as i64;
            self.current[i] += w;
            total += w;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(b)
    }

    fn least_conn(&mut self, c: &[Candidate], ok: impl Fn(&Candidate) -> bool) -> Option<usize> {
        // active/weight compared without division: scale by 1000.
        let load = |x: &Candidate| x.active as u64 * 1000 / x.weight.max(1) as u64;
        let least = c.iter().filter(|x| ok(x)).map(load).min()?;
        // Ties go by weight in turn, as nginx's least_conn breaks them.
        self.smooth_wrr(c, |x| ok(x) && load(x) == least)
    }

    fn weighted_random(
        &mut self,
        c: &[Candidate],
        ok: impl Fn(&Candidate) -> bool,
    ) -> Option<usize> {
        let total: u64 = c
            .iter()
            .filter(|x| ok(x))
            .map(|x| x.weight.max(1) as u64)
            .sum();
        if total == 0 {
            return None;
        }
        let mut r = self.rng.u64(0..total);
        for (i, x) in c.iter().enumerate() {
            if !ok(x) {
                continue;
            }
            let w = x.weight.max(1) as u64;
            if r < w {
                return Some(i);
            }
            r -= w;
        }
        None
    }

    /// The first ring point at or after `key` whose upstream is usable, so
    /// a down upstream moves only its own keys.
    fn ring_lookup(
        &self,
        key: u64,
        c: &[Candidate],
        ok: impl Fn(&Candidate) -> bool,
    ) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let start = self.ring.partition_point(|(p, _)| *p < key);
        (0..self.ring.len())
            .map(|k| self.ring[(start + k) % self.ring.len()].1)
            .find(|&i| ok(&c[i]))
    }
}

/// A stable 64-bit hash (FNV-1a, then a splitmix64 finaliser so nearby
/// keys land far apart on the ring). Stable across runs and builds: sticky
/// cookies and hash placements survive restarts.
pub fn hash_parts(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_config::proxy::HashKey;

    fn cands(weights: &[u32]) -> Vec<Candidate> {
        weights
            .iter()
            .map(|&w| Candidate {
                eligible: true,
                weight: w,
                active: 0,
                full: false,
            })
            .collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    fn balancer(alg: Balance, weights: &[u32]) -> Balancer {
        let n = names(weights.len());
        let refs: Vec<&str> = n.iter().map(String::as_str).collect();
        Balancer::new(alg, &refs, weights, 42)
    }

    fn counts(b: &mut Balancer, c: &[Candidate], rounds: usize) -> Vec<usize> {
        let mut out = vec![0; c.len()];
        for _ in 0..rounds {
            out[b.pick(c, None).unwrap()] += 1;
        }
        out
    }

    #[test]
    fn round_robin_cycles_in_order() {
        let c = cands(&[1, 1, 1]);
        let mut b = balancer(Balance::RoundRobin, &[1, 1, 1]);
        let seq: Vec<usize> = (0..6).map(|_| b.pick(&c, None).unwrap()).collect();
        assert_eq!(seq, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn smooth_weighted_round_robin_interleaves() {
        // nginx's example: weights 5,1,1 give a a b a c a a, not a a a a a b c.
        let c = cands(&[5, 1, 1]);
        let mut b = balancer(Balance::RoundRobin, &[5, 1, 1]);
        let seq: Vec<usize> = (0..7).map(|_| b.pick(&c, None).unwrap()).collect();
        assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(counts(&mut b, &c, 700), vec![500, 100, 100]);
    }

    #[test]
    fn down_upstreams_get_nothing_and_return_fairly() {
        let mut c = cands(&[1, 1, 1]);
        c[1].eligible = false;
        let mut b = balancer(Balance::RoundRobin, &[1, 1, 1]);
        assert_eq!(counts(&mut b, &c, 100), vec![50, 0, 50]);
        c[1].eligible = true;
        let got = counts(&mut b, &c, 99);
        assert!(got.iter().all(|&n| n == 33), "{got:?}");
        for x in &mut c {
            x.eligible = false;
        }
        assert_eq!(b.pick(&c, None), None);
    }

    #[test]
    fn least_conn_takes_the_least_loaded_and_spreads_ties() {
        let mut c = cands(&[1, 1, 1]);
        c[0].active = 5;
        c[1].active = 2;
        c[2].active = 9;
        let mut b = balancer(Balance::LeastConn, &[1, 1, 1]);
        assert_eq!(b.pick(&c, None), Some(1));
        let c = cands(&[1, 1, 1]);
        let got = counts(&mut b, &c, 300);
        assert_eq!(got, vec![100, 100, 100]);
    }

    #[test]
    fn least_conn_spreads_ties_by_weight() {
        let c = cands(&[3, 1]);
        let mut b = balancer(Balance::LeastConn, &[3, 1]);
        assert_eq!(counts(&mut b, &c, 400), vec![300, 100]);
    }

    #[test]
    fn least_conn_weighs_load() {
        let mut c = cands(&[4, 1]);
        c[0].active = 3; // 0.75 per weight unit
        c[1].active = 1; // 1.0
        let mut b = balancer(Balance::LeastConn, &[4, 1]);
        assert_eq!(b.pick(&c, None), Some(0));
    }

    #[test]
    fn random_follows_weights_within_tolerance() {
        let c = cands(&[3, 1]);
        let mut b = balancer(Balance::Random, &[3, 1]);
        let got = counts(&mut b, &c, 40_000);
        assert!((29_000..31_000).contains(&got[0]), "{got:?}");
    }

    #[test]
    fn p2c_avoids_the_loaded_upstream() {
        let mut c = cands(&[1, 1, 1]);
        c[0].active = 100;
        let mut b = balancer(Balance::PowerOfTwo, &[1, 1, 1]);
        let got = counts(&mut b, &c, 3000);
        // Upstream 0 wins only when both draws are 0: about 1/9 of picks.
        assert!(got[0] < 450, "{got:?}");
        assert!(got[1] > 1100 && got[2] > 1100, "{got:?}");
    }

    #[test]
    fn first_fills_in_order_and_skips_full() {
        let mut c = cands(&[1, 1, 1]);
        let mut b = balancer(Balance::First, &[1, 1, 1]);
        assert_eq!(b.pick(&c, None), Some(0));
        c[0].full = true;
        assert_eq!(b.pick(&c, None), Some(1));
        c[1].eligible = false;
        assert_eq!(b.pick(&c, None), Some(2));
        c[2].full = true;
        // Everything full: still an answer (the request queues).
        assert_eq!(b.pick(&c, None), Some(0));
    }

    #[test]
    fn consistent_hash_is_stable_and_moves_only_the_lost_keys() {
        let mut c = cands(&[1, 1, 1, 1]);
        let mut b = balancer(Balance::Hash(HashKey::Uri), &[1, 1, 1, 1]);
        let keys: Vec<u64> = (0..2000u32)
            .map(|i| hash_parts(&[format!("/item/{i}").as_bytes()]))
            .collect();
        let before: Vec<usize> = keys.iter().map(|&k| b.pick(&c, Some(k)).unwrap()).collect();
        // Same key, same upstream.
        let again: Vec<usize> = keys.iter().map(|&k| b.pick(&c, Some(k)).unwrap()).collect();
        assert_eq!(before, again);
        // Spread: each gets a fair share.
        for i in 0..4 {
            let n = before.iter().filter(|&&u| u == i).count();
            assert!((350..650).contains(&n), "upstream {i}: {n}");
        }
        // Upstream 2 goes down: only its keys move.
        c[2].eligible = false;
        let after: Vec<usize> = keys.iter().map(|&k| b.pick(&c, Some(k)).unwrap()).collect();
        for (x, y) in before.iter().zip(&after) {
            if *x != 2 {
                assert_eq!(x, y);
            } else {
                assert_ne!(*y, 2);
            }
        }
    }

    #[test]
    fn ip_hash_pins_a_client() {
        let c = cands(&[1, 1, 1]);
        let mut b = balancer(Balance::IpHash, &[1, 1, 1]);
        let k = hash_parts(&[&[192, 0, 2, 7]]);
        let first = b.pick(&c, Some(k));
        for _ in 0..10 {
            assert_eq!(b.pick(&c, Some(k)), first);
        }
    }

    #[test]
    fn seeded_randomness_replays() {
        let c = cands(&[1, 1, 1]);
        let mut a = balancer(Balance::Random, &[1, 1, 1]);
        let mut b = balancer(Balance::Random, &[1, 1, 1]);
        let x: Vec<_> = (0..50).map(|_| a.pick(&c, None)).collect();
        let y: Vec<_> = (0..50).map(|_| b.pick(&c, None)).collect();
        assert_eq!(x, y);
    }
}
