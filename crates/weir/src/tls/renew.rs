//! When to renew a certificate and how long to wait after a failure: a
//! plain state machine with the time and the randomness passed in, so it is
//! tested with simulated clocks and fixed jitter.
//!
//! Never schedules a renewal after a certificate's end, and never retries
//! faster than the minimum back-off, whatever the CA or the clock says.

use std::time::{Duration, SystemTime};

/// Renewal starts at two thirds of the lifetime, like Let's Encrypt advises.
const RENEW_FRACTION: f64 = 2.0 / 3.0;
/// Up to this share of the lifetime is taken off at random, so that many
/// certificates issued together do not all renew in the same second.
const JITTER_FRACTION: f64 = 0.05;

/// When to start renewing a certificate valid from `not_before` to
/// `not_after`; `jitter` is a random number in `0.0..1.0`.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    let at = lifetime.mul_f64(RENEW_FRACTION);
    let early = lifetime.mul_f64(JITTER_FRACTION * jitter.clamp(0.0, 1.0));
    not_before + at.saturating_sub(early)
}

/// Whether a certificate is due for renewal at `now` (without jitter).
pub fn is_due(not_before: SystemTime, not_after: SystemTime, now: SystemTime) -> bool {
    now >= renew_at(not_before, not_after, 0.0)
}

/// Exponential back-off with jitter between failed attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// The wait after one more failure: `min * 2^failures`, capped at `max`,
    /// then spread over its upper half by `jitter` (`0.0..1.0`).
    pub fn next_delay(&mut self, jitter: f64) -> Duration {
        let exp = self.failures.min(30);
        self.failures = self.failures.saturating_add(1);
        let base = self.min.saturating_mul(1u32 << exp).min(self.max);
        let half = base / 2;
        (half + half.mul_f64(jitter.clamp(0.0, 1.0))).max(self.min)
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// How long to wait at `now` before the next renewal attempt of a
/// certificate with `validity`; `None` (no certificate yet) means at once.
pub fn wait_until_due(
    validity: Option<(SystemTime, SystemTime)>,
    now: SystemTime,
    jitter: f64,
) -> Duration {
    match validity {
        Some((nb, na)) => renew_at(nb, na, jitter)
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
        None => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86400);

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn ninety_day_certificate_renews_after_sixty_days() {
        let nb = t(1_000_000);
        let na = nb + 90 * DAY;
        assert_eq!(renew_at(nb, na, 0.0), nb + 60 * DAY);
        // Full jitter takes off 5% of the lifetime: 4.5 days.
        assert_eq!(renew_at(nb, na, 1.0), nb + 60 * DAY - DAY * 9 / 2);
        assert!(!is_due(nb, na, nb + 59 * DAY));
        assert!(is_due(nb, na, nb + 60 * DAY));
    }

    #[test]
    fn short_certificates_renew_at_two_thirds_too() {
        let nb = t(0);
        let na = t(30);
        assert_eq!(
            wait_until_due(Some((nb, na)), t(5), 0.0),
            Duration::from_secs(15)
        );
        assert_eq!(wait_until_due(Some((nb, na)), t(25), 0.5), Duration::ZERO);
        assert_eq!(wait_until_due(None, t(25), 0.5), Duration::ZERO);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(3600));
        // No jitter: the lower half of each step.
        let seq: Vec<u64> = (0..8).map(|_| b.next_delay(0.0).as_secs()).collect();
        assert_eq!(seq, vec![60, 60, 120, 240, 480, 960, 1800, 1800]);
        b.reset();
        assert_eq!(b.failures(), 0);
        // Full jitter: the whole step.
        let seq: Vec<u64> = (0..8).map(|_| b.next_delay(1.0).as_secs()).collect();
        assert_eq!(seq, vec![60, 120, 240, 480, 960, 1920, 3600, 3600]);
    }

    #[test]
    fn backoff_simulated_failures_over_a_day_stay_bounded() {
        // A CA that is down for a day: attempts stay between min and max apart.
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(3600));
        let mut now = Duration::ZERO;
        let mut attempts = 0;
        while now < DAY {
            let d = b.next_delay(rng.random::<f64>());
            assert!(d >= Duration::from_secs(60) && d <= Duration::from_secs(3600));
            now += d;
            attempts += 1;
        }
        assert!((24..=60).contains(&attempts), "{attempts}");
    }
}
