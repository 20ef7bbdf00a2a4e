//! When to renew a certificate and how long to wait after a failure: a
//! plain state machine with the time and the randomness passed in, so it is
//! tested with simulated clocks and fixed jitter.
//!
//! Two sources for "when": the CA's ACME Renewal Information (ARI, RFC 9773)
//! when its directory offers it, a suggested window in which a random
//! instant is chosen and which is asked for again at the CA's Retry-After;
//! otherwise two thirds of the lifetime, with jitter. [`plan`] decides.
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

/// Shortest and longest wait between two ARI checks, whatever the CA's
/// Retry-After says (RFC 9773 §4.3.2 lets clients clamp it).
pub const ARI_RECHECK_MIN: Duration = Duration::from_secs(60);
pub const ARI_RECHECK_MAX: Duration = Duration::from_secs(24 * 3600);
/// After a failed ARI request, ask again this soon (never later than the
/// two-thirds rule would renew).
pub const ARI_RETRY_AFTER_ERROR: Duration = Duration::from_secs(3600);

/// What the CA said about renewing the certificate in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ari {
    /// The directory has no `renewalInfo` (or there is no certificate yet).
    Unsupported,
    /// The CA offers ARI but the request failed.
    Failed,
    /// The suggested window and when to ask again.
    Window {
        start: SystemTime,
        end: SystemTime,
        retry_after: Duration,
    },
}

/// What the renewal loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Sleep until then, then renew.
    RenewAt(SystemTime),
    /// Sleep until then, then ask the CA (and decide) again.
    RecheckAt(SystemTime),
}

/// The renewal decision at `now` for a certificate with `validity` (`None`:
/// there is none yet), given what ARI said; `jitter` is random in `0.0..1.0`.
///
/// With a window: a uniformly random instant in it (RFC 9773 §4.2); at once
/// if that instant is past; otherwise renew then if it comes before the next
/// check, else check again at the (clamped) Retry-After. Never later than
/// the certificate's end. Without ARI: the two-thirds rule.
pub fn plan(
    validity: Option<(SystemTime, SystemTime)>,
    ari: Ari,
    now: SystemTime,
    jitter: f64,
) -> Plan {
    let Some((nb, na)) = validity else {
        return Plan::RenewAt(now);
    };
    let jitter = jitter.clamp(0.0, 1.0);
    match ari {
        Ari::Unsupported => Plan::RenewAt(renew_at(nb, na, jitter).max(now)),
        Ari::Failed => {
            let due = renew_at(nb, na, jitter);
            if due <= now {
                Plan::RenewAt(now)
            } else {
                Plan::RecheckAt(due.min(now + ARI_RETRY_AFTER_ERROR))
            }
        }
        Ari::Window {
            start,
            end,
            retry_after,
        } => {
            let span = end.duration_since(start).unwrap_or(Duration::ZERO);
            let at = (start + span.mul_f64(jitter)).min(na);
            let next_check = now + retry_after.clamp(ARI_RECHECK_MIN, ARI_RECHECK_MAX);
            if at <= now {
                Plan::RenewAt(now)
            } else if at <= next_check {
                Plan::RenewAt(at)
            } else {
                Plan::RecheckAt(next_check)
            }
        }
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

    fn window(start: u64, end: u64, retry: u64) -> Ari {
        Ari::Window {
            start: t(start),
            end: t(end),
            retry_after: Duration::from_secs(retry),
        }
    }

    #[test]
    fn ari_window_picks_an_instant_inside_it() {
        let v = Some((t(0), t(90 * 86400)));
        let now = t(1000);
        // The window is within the next check: renew at the chosen instant.
        assert_eq!(
            plan(v, window(2000, 4000, 6 * 3600), now, 0.0),
            Plan::RenewAt(t(2000))
        );
        assert_eq!(
            plan(v, window(2000, 4000, 6 * 3600), now, 0.5),
            Plan::RenewAt(t(3000))
        );
        assert_eq!(
            plan(v, window(2000, 4000, 6 * 3600), now, 1.0),
            Plan::RenewAt(t(4000))
        );
        // Seeded random instants all land in the window.
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..1000 {
            match plan(v, window(2000, 4000, 6 * 3600), now, rng.random::<f64>()) {
                Plan::RenewAt(at) => assert!(at >= t(2000) && at <= t(4000), "{at:?}"),
                p => panic!("{p:?}"),
            }
        }
    }

    #[test]
    fn ari_window_past_means_now_and_far_window_means_recheck() {
        let v = Some((t(0), t(90 * 86400)));
        let now = t(100_000);
        // The CA wants it renewed already (e.g. revoked): at once.
        assert_eq!(plan(v, window(10, 20, 3600), now, 0.7), Plan::RenewAt(now));
        // A window after the next check: ask again at Retry-After.
        assert_eq!(
            plan(v, window(5_000_000, 5_100_000, 6 * 3600), now, 0.5),
            Plan::RecheckAt(now + Duration::from_secs(6 * 3600))
        );
        // Retry-After is clamped to between a minute and a day.
        assert_eq!(
            plan(v, window(5_000_000, 5_100_000, 1), now, 0.5),
            Plan::RecheckAt(now + ARI_RECHECK_MIN)
        );
        assert_eq!(
            plan(v, window(5_000_000, 5_100_000, 30 * 86400), now, 0.5),
            Plan::RecheckAt(now + ARI_RECHECK_MAX)
        );
        // A window beyond the certificate's end is cut at the end.
        let short = Some((t(0), t(200)));
        assert_eq!(
            plan(short, window(150, 10_000, 86400), t(100), 1.0),
            Plan::RenewAt(t(200))
        );
        // An inverted window is its start.
        assert_eq!(
            plan(v, window(200_000, 150_000, 86400), t(150_000), 0.9),
            Plan::RenewAt(t(200_000))
        );
    }

    #[test]
    fn without_ari_the_two_thirds_rule_holds() {
        let nb = t(0);
        let na = nb + 90 * DAY;
        assert_eq!(
            plan(Some((nb, na)), Ari::Unsupported, t(10), 0.0),
            Plan::RenewAt(nb + 60 * DAY)
        );
        assert_eq!(
            plan(Some((nb, na)), Ari::Unsupported, nb + 70 * DAY, 0.0),
            Plan::RenewAt(nb + 70 * DAY)
        );
        assert_eq!(
            plan(None, Ari::Unsupported, t(10), 0.3),
            Plan::RenewAt(t(10))
        );
        // ARI failing: ask again within the hour, but renew by the rule.
        assert_eq!(
            plan(Some((nb, na)), Ari::Failed, t(10), 0.0),
            Plan::RecheckAt(t(10) + ARI_RETRY_AFTER_ERROR)
        );
        assert_eq!(
            plan(Some((nb, na)), Ari::Failed, nb + 61 * DAY, 0.0),
            Plan::RenewAt(nb + 61 * DAY)
        );
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
