//! A request-rate limit with a burst, as nginx's `limit_req` counts it: a
//! leaky bucket drained at `rate`, each request adding one. A request that
//! would fill the bucket past `burst` is refused; one within the burst
//! passes at once when it is among the first `delay` of it (all of them
//! with `nodelay`), else waits until the bucket has drained to that point.
//!
//! Counts in thousandths of a request and milliseconds, as nginx does, so
//! rates like `1r/m` keep their precision. Never reads a clock.

/// A limit's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests per second, in thousandths (`10r/s` is 10,000; `30r/m` 500).
    pub per_sec_milli: u64,
    /// Requests the bucket holds beyond the one being answered.
    pub burst: u64,
    /// How many of the burst pass at once (`nodelay`: all of them).
    pub delay_after: u64,
}

impl Rate {
    /// `n` requests per second.
    pub fn per_second(n: u64, burst: u64) -> Rate {
        Rate {
            per_sec_milli: n * 1000,
            burst,
            delay_after: 0,
        }
    }

    /// `n` requests per minute.
    pub fn per_minute(n: u64, burst: u64) -> Rate {
        Rate {
            per_sec_milli: n * 1000 / 60,
            burst,
            delay_after: 0,
        }
    }

    /// Every request within the burst passes at once (nginx's `nodelay`).
    pub fn nodelay(self) -> Rate {
        Rate {
            delay_after: self.burst,
            ..self
        }
    }

    /// The first `n` of the burst pass at once, the rest wait (nginx's `delay=n`).
    pub fn delay_after(self, n: u64) -> Rate {
        Rate {
            delay_after: n.min(self.burst),
            ..self
        }
    }
}

/// What a limit says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer it now.
    Pass,
    /// Answer it after this many milliseconds.
    Delay(u64),
    /// Refuse it; the bucket has room for one more after this many
    /// milliseconds (`Retry-After`).
    Refuse(u64),
}

/// One key's bucket: how full it was at its last request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Thousandths of a request in the bucket.
    excess: u64,
    /// When it was last filled, in milliseconds on the caller's clock.
    last_ms: u64,
    /// Whether it has seen a request.
    used: bool,
}

impl Bucket {
    /// Counts a request arriving at `now_ms` against `rate`.
    pub fn check(&mut self, rate: &Rate, now_ms: u64) -> Verdict {
        if !self.used {
            // A key's first request finds an empty bucket (nginx keeps its
            // excess at 0).
            *self = Bucket {
                excess: 0,
                last_ms: now_ms,
                used: true,
            };
            return Verdict::Pass;
        }
        let elapsed = now_ms.saturating_sub(self.last_ms);
        let drained = rate.per_sec_milli.saturating_mul(elapsed) / 1000;
        // Drained below empty before this request is added, as nginx does:
        // a request exactly one period after the last always fits.
        let excess = (self.excess.saturating_add(1000)).saturating_sub(drained);
        let burst = rate.burst * 1000;
        if excess > burst {
            // Room for one more once the bucket is back down to `burst`.
            let wait = (excess - burst) * 1000 / rate.per_sec_milli.max(1);
            return Verdict::Refuse(wait.max(1));
        }
        self.excess = excess;
        self.last_ms = now_ms;
        let free = rate.delay_after * 1000;
        if excess <= free {
            Verdict::Pass
        } else {
            Verdict::Delay((excess - free) * 1000 / rate.per_sec_milli.max(1))
        }
    }

    /// Adds `n` requests another process let through at `at_ms` (its
    /// last one; on this clock): the bucket fills as if they had come here
    /// then, so news that arrives late costs no extra wait. Never refused:
    /// they were answered; the debt drains before the next one here passes.
    pub fn add_remote(&mut self, n: u64, rate: &Rate, at_ms: u64) {
        if n == 0 {
            return;
        }
        let add = n.saturating_mul(1000);
        if !self.used {
            // As a first request here would: the first of them fills nothing.
            *self = Bucket {
                excess: add - 1000,
                last_ms: at_ms,
                used: true,
            };
            return;
        }
        let drain = |ms: u64| rate.per_sec_milli.saturating_mul(ms) / 1000;
        if at_ms >= self.last_ms {
            self.excess = self
                .excess
                .saturating_sub(drain(at_ms - self.last_ms))
                .saturating_add(add);
            self.last_ms = at_ms;
        } else {
            // Before this bucket's last request: what they added has partly
            // drained since.
            self.excess = self
                .excess
                .saturating_add(add.saturating_sub(drain(self.last_ms - at_ms)));
        }
    }

    /// The bucket's fill in requests, drained to `now_ms` (for `RateLimit`
    /// fields and for deciding a key can be forgotten).
    pub fn level(&self, rate: &Rate, now_ms: u64) -> f64 {
        let drained = rate
            .per_sec_milli
            .saturating_mul(now_ms.saturating_sub(self.last_ms))
            / 1000;
        self.excess.saturating_sub(drained) as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: Rate, times: &[u64]) -> Vec<Verdict> {
        let mut b = Bucket::default();
        times.iter().map(|&t| b.check(&rate, t)).collect()
    }

    #[test]
    fn a_burst_with_nodelay_passes_one_plus_burst_and_refuses_the_rest() {
        // 10r/s, burst 5, nodelay: 20 requests at the same instant.
        let v = run(Rate::per_second(10, 5).nodelay(), &[1000; 20]);
        assert_eq!(v.iter().filter(|v| **v == Verdict::Pass).count(), 6);
        assert_eq!(
            v[6..]
                .iter()
                .filter(|v| matches!(v, Verdict::Refuse(_)))
                .count(),
            14
        );
        // The bucket drains 1 request per 100 ms: room again after 100 ms.
        assert_eq!(v[6], Verdict::Refuse(100));
    }

    #[test]
    fn without_nodelay_the_burst_waits_its_turn() {
        let v = run(Rate::per_second(10, 5), &[0; 7]);
        assert_eq!(
            v,
            [
                Verdict::Pass,
                Verdict::Delay(100),
                Verdict::Delay(200),
                Verdict::Delay(300),
                Verdict::Delay(400),
                Verdict::Delay(500),
                Verdict::Refuse(100),
            ]
        );
    }

    #[test]
    fn delay_after_lets_the_first_of_the_burst_through() {
        let v = run(Rate::per_second(10, 4).delay_after(2), &[0; 5]);
        assert_eq!(
            v,
            [
                Verdict::Pass,
                Verdict::Pass,
                Verdict::Pass,
                Verdict::Delay(100),
                Verdict::Delay(200),
            ]
        );
    }

    #[test]
    fn the_bucket_refills_over_time() {
        let r = Rate::per_second(10, 0);
        let mut b = Bucket::default();
        assert_eq!(b.check(&r, 0), Verdict::Pass);
        assert_eq!(b.check(&r, 50), Verdict::Refuse(50));
        assert_eq!(b.check(&r, 100), Verdict::Pass);
        // A refused request does not fill the bucket.
        assert_eq!(b.check(&r, 150), Verdict::Refuse(50));
        assert_eq!(b.check(&r, 200), Verdict::Pass);
        // Steady at the rate: every request passes.
        for t in (300..2000).step_by(100) {
            assert_eq!(b.check(&r, t), Verdict::Pass, "at {t} ms");
        }
    }

    #[test]
    fn per_minute_rates_keep_their_precision() {
        let r = Rate::per_minute(30, 0);
        let mut b = Bucket::default();
        assert_eq!(b.check(&r, 0), Verdict::Pass);
        assert_eq!(b.check(&r, 1000), Verdict::Refuse(1000));
        assert_eq!(b.check(&r, 2000), Verdict::Pass);
        assert_eq!(b.check(&r, 2100), Verdict::Refuse(1900));
        let r = Rate::per_minute(30, 3);
        let mut b = Bucket::default();
        for _ in 0..4 {
            b.check(&r, 0);
        }
        assert!((b.level(&r, 0) - 3.0).abs() < 1e-9);
        assert!((b.level(&r, 3000) - 1.5).abs() < 1e-9);
        assert_eq!(b.level(&r, 6000), 0.0);
    }
}
