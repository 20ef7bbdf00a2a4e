//! Upstream health: the active-check state machine (rise/fall thresholds),
//! passive ejection (failures in a row within a window take an upstream out
//! for a cooldown, then one trial request decides whether it is back: a
//! half-open circuit breaker), the ejection budget of a proxy, and the
//! lock-free view the request path reads.
//!
//! [`Health`] is a plain state machine with time passed in; tests drive it
//! with a simulated clock. [`Shared`] publishes its verdict in atomics so the
//! request path never takes a lock; the lock is taken only by the checker
//! task, when a request fails, when a trial is due, and on the first success
//! after a failure. Passive health must never leave a proxy without an
//! upstream to try: [`max_ejected`] bounds how many may be out at once, and
//! the picker (`Proxy::pick`) tries ejected upstreams rather than none. The
//! active checker task lives in `lib.rs` (it needs the connection code); it
//! never touches a request.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_config::proxy::PassiveConfig;

/// What the active checks changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp,
}

/// What a request's outcome changed in passive health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passive {
    /// Taken out of rotation for a cooldown.
    Ejected,
    /// Enough failures to eject, but the proxy's ejection budget is spent:
    /// stays in rotation (reported once per run of failures).
    Held,
    /// The trial request after a cooldown failed: out for another cooldown.
    TrialFailed,
    /// A request succeeded while out (the trial): back in rotation.
    Readmitted,
}

/// Where passive health has an upstream, as the picker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    In,
    /// Ejected, cooldown running (or a trial in flight).
    Out,
    /// Ejected, cooldown over: the next request to claim it is the trial.
    TrialDue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ejection {
    In,
    /// Out until `until`; `trial`: a trial request is in flight (claimed at
    /// `until - cooldown`; if it never reports, another is due at `until`).
    Out {
        until: Instant,
        trial: bool,
    },
}

#[derive(Debug)]
pub struct Health {
    /// The active checks' verdict (true until checks say otherwise).
    up: bool,
    ok_streak: u32,
    fail_streak: u32,
    /// Passive failures in a row, oldest first, within the window.
    failures: VecDeque<Instant>,
    ejection: Ejection,
    /// [`Passive::Held`] already reported for this run of failures.
    held: bool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            up: true,
            ok_streak: 0,
            fail_streak: 0,
            failures: VecDeque::new(),
            ejection: Ejection::In,
            held: false,
        }
    }
}

impl Health {
    /// One active check's result.
    pub fn active_result(&mut self, ok: bool, rise: u32, fall: u32) -> Option<Transition> {
        if ok {
            self.fail_streak = 0;
            self.ok_streak = self.ok_streak.saturating_add(1);
            if !self.up && self.ok_streak >= rise {
                self.up = true;
                return Some(Transition::CameUp);
            }
        } else {
            self.ok_streak = 0;
            self.fail_streak = self.fail_streak.saturating_add(1);
            if self.up && self.fail_streak >= fall {
                self.up = false;
                return Some(Transition::WentDown);
            }
        }
        None
    }

    /// A request to this upstream failed (connect error, reset, timeout).
    /// `may_eject` asks the proxy whether its budget allows one more
    /// ejection; it is called only when this failure would eject.
    pub fn passive_failure(
        &mut self,
        now: Instant,
        cfg: &PassiveConfig,
        may_eject: impl FnOnce() -> bool,
    ) -> Option<Passive> {
        if cfg.failures == 0 {
            return None;
        }
        match self.ejection {
            Ejection::Out { trial: true, .. } => {
                self.ejection = Ejection::Out {
                    until: now + cfg.cooldown,
                    trial: false,
                };
                return Some(Passive::TrialFailed);
            }
            // A request sent while out (no other upstream was left to try):
            // the cooldown runs on unchanged.
            Ejection::Out { trial: false, .. } => return None,
            Ejection::In => {}
        }
        while self
            .failures
            .front()
            .is_some_and(|&t| now.duration_since(t) > cfg.window)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        if (self.failures.len() as u32) < cfg.failures {
            self.held = false;
            return None;
        }
        if may_eject() {
            self.failures.clear();
            self.held = false;
            self.ejection = Ejection::Out {
                until: now + cfg.cooldown,
                trial: false,
            };
            return Some(Passive::Ejected);
        }
        // Kept at the threshold: the next failure asks again.
        self.failures.pop_front();
        (!std::mem::replace(&mut self.held, true)).then_some(Passive::Held)
    }

    /// A request to this upstream succeeded: the run of failures ends, and
    /// an ejected upstream is back.
    pub fn passive_success(&mut self) -> Option<Passive> {
        self.failures.clear();
        self.held = false;
        match std::mem::replace(&mut self.ejection, Ejection::In) {
            Ejection::Out { .. } => Some(Passive::Readmitted),
            Ejection::In => None,
        }
    }

    /// Claims the trial request of an ejected upstream whose cooldown is
    /// over: true for exactly one caller per cooldown.
    pub fn claim_trial(&mut self, now: Instant, cooldown: Duration) -> bool {
        match self.ejection {
            Ejection::Out { until, .. } if now >= until => {
                self.ejection = Ejection::Out {
                    until: now + cooldown,
                    trial: true,
                };
                true
            }
            _ => false,
        }
    }

    pub fn standing(&self, now: Instant) -> Standing {
        match self.ejection {
            Ejection::In => Standing::In,
            Ejection::Out { until, .. } if now >= until => Standing::TrialDue,
            Ejection::Out { .. } => Standing::Out,
        }
    }

    /// Up for the active checks and in rotation for passive health.
    pub fn is_up(&self, now: Instant) -> bool {
        self.up && self.standing(now) == Standing::In
    }

    /// When the current cooldown ends, if ejected.
    fn out_until(&self) -> Option<Instant> {
        match self.ejection {
            Ejection::Out { until, .. } => Some(until),
            Ejection::In => None,
        }
    }

    pub fn active_up(&self) -> bool {
        self.up
    }
}

/// How many of a proxy's `usable` upstreams (in rotation, not down for the
/// active checks) passive health may hold out at once: `percent` of them,
/// rounded down, but at least one when there are two or more (as Envoy's
/// `max_ejection_percent`), and never the last one; none when `percent` is 0.
pub fn max_ejected(usable: usize, percent: u8) -> usize {
    if percent == 0 || usable < 2 {
        return 0;
    }
    (usable * percent as usize / 100).clamp(1, usable - 1)
}

/// The process-wide view of one upstream's health.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<Health>,
    /// Mirror of `Health::up`.
    active_down: AtomicBool,
    /// Mirror of the ejection: 0 in rotation, else when the cooldown ends,
    /// as nanoseconds since [`epoch`] (plus one).
    out_until: AtomicU64,
    /// Failures are counted: the next success takes the lock to end the run.
    failing: AtomicBool,
}

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn to_nanos(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64 + 1
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `h`'s passive state to the atomics.
    fn mirror(&self, h: &Health) {
        self.out_until
            .store(h.out_until().map_or(0, to_nanos), Ordering::Relaxed);
        self.failing
            .store(!h.failures.is_empty(), Ordering::Relaxed);
    }

    /// Lock-free: whether requests may go to this upstream at `now` (up for
    /// the active checks, in rotation for passive health).
    pub fn is_up(&self, now: Instant) -> bool {
        self.active_up() && self.standing_with(|| now) == Standing::In
    }

    /// Lock-free: passive health's verdict, reading the clock only for an
    /// ejected upstream.
    pub fn standing_with(&self, now: impl FnOnce() -> Instant) -> Standing {
        match self.out_until.load(Ordering::Relaxed) {
            0 => Standing::In,
            until if to_nanos(now()) >= until => Standing::TrialDue,
            _ => Standing::Out,
        }
    }

    /// Whether passive health holds this upstream out (cooldown or trial).
    pub fn is_ejected(&self) -> bool {
        self.out_until.load(Ordering::Relaxed) != 0
    }

    pub fn active_result(&self, ok: bool, rise: u32, fall: u32) -> Option<Transition> {
        let mut h = self.lock();
        let t = h.active_result(ok, rise, fall);
        self.active_down.store(!h.active_up(), Ordering::Relaxed);
        t
    }

    /// Whether the active checks (if any) pass, passive failures aside.
    pub fn active_up(&self) -> bool {
        !self.active_down.load(Ordering::Relaxed)
    }

    /// Up again with no history: a new process now listens where the
    /// failing one did (an app's instance that just passed readiness).
    pub fn reset(&self) {
        let mut h = self.lock();
        *h = Health::default();
        self.active_down.store(false, Ordering::Relaxed);
        self.mirror(&h);
    }

    pub fn passive_failure(
        &self,
        now: Instant,
        cfg: &PassiveConfig,
        may_eject: impl FnOnce() -> bool,
    ) -> Option<Passive> {
        let mut h = self.lock();
        let t = h.passive_failure(now, cfg, may_eject);
        self.mirror(&h);
        t
    }

    /// A request succeeded; lock-free unless failures were being counted
    /// or the upstream was out.
    pub fn passive_success(&self) -> Option<Passive> {
        if !self.failing.load(Ordering::Relaxed) && !self.is_ejected() {
            return None;
        }
        let mut h = self.lock();
        let t = h.passive_success();
        self.mirror(&h);
        t
    }

    /// See [`Health::claim_trial`].
    pub fn claim_trial(&self, now: Instant, cooldown: Duration) -> bool {
        let mut h = self.lock();
        let won = h.claim_trial(now, cooldown);
        self.mirror(&h);
        won
    }
}

/// Whether a health check response passes.
pub fn check_passes(
    status: u16,
    expect: Option<u16>,
    body: &[u8],
    expect_body: Option<&str>,
) -> bool {
    let status_ok = match expect {
        Some(s) => status == s,
        None => (200..400).contains(&status),
    };
    let body_ok = match expect_body {
        Some(want) => body
            .windows(want.len().max(1))
            .any(|w| w == want.as_bytes()),
        None => true,
    };
    status_ok && body_ok
}

/// Bounded read size for health-check bodies.
pub const MAX_CHECK_BODY: usize = 64 * 1024;

/// A short pause used when a check has nothing to do.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn passive(n: u32) -> PassiveConfig {
        PassiveConfig {
            failures: n,
            window: Duration::from_secs(10),
            cooldown: Duration::from_secs(30),
            max_ejected: 50,
        }
    }

    const YES: fn() -> bool = || true;

    #[test]
    fn fall_then_rise_thresholds() {
        let mut h = Health::default();
        let t0 = Instant::now();
        assert_eq!(h.active_result(false, 2, 3), None);
        assert_eq!(h.active_result(false, 2, 3), None);
        assert!(h.is_up(t0));
        assert_eq!(h.active_result(false, 2, 3), Some(Transition::WentDown));
        assert!(!h.is_up(t0));
        // A success resets nothing until `rise` in a row.
        assert_eq!(h.active_result(true, 2, 3), None);
        assert_eq!(h.active_result(false, 2, 3), None);
        assert_eq!(h.active_result(true, 2, 3), None);
        assert_eq!(h.active_result(true, 2, 3), Some(Transition::CameUp));
        assert!(h.is_up(t0));
    }

    #[test]
    fn failures_in_a_row_within_the_window_eject_for_the_cooldown() {
        let cfg = passive(3);
        let mut h = Health::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(h.passive_failure(t0, &cfg, YES), None);
        assert_eq!(h.passive_failure(t0 + s(5), &cfg, YES), None);
        // The first failure leaves the 10s window before the third arrives.
        assert_eq!(h.passive_failure(t0 + s(12), &cfg, YES), None);
        assert_eq!(
            h.passive_failure(t0 + s(13), &cfg, YES),
            Some(Passive::Ejected)
        );
        assert_eq!(h.standing(t0 + s(14)), Standing::Out);
        // Failures of requests sent while out don't extend the cooldown.
        assert_eq!(h.passive_failure(t0 + s(20), &cfg, YES), None);
        assert_eq!(h.standing(t0 + s(42)), Standing::Out);
        assert_eq!(h.standing(t0 + s(43)), Standing::TrialDue);
    }

    #[test]
    fn a_success_ends_a_run_of_failures() {
        let cfg = passive(3);
        let mut h = Health::default();
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(h.passive_failure(t0, &cfg, YES), None);
            assert_eq!(h.passive_failure(t0, &cfg, YES), None);
            assert_eq!(h.passive_success(), None);
        }
        assert!(h.is_up(t0));
    }

    #[test]
    fn after_the_cooldown_one_trial_decides() {
        let cfg = passive(1);
        let mut h = Health::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(h.passive_failure(t0, &cfg, YES), Some(Passive::Ejected));
        assert!(!h.claim_trial(t0 + s(29), cfg.cooldown));
        // One trial per cooldown: the second caller is refused.
        assert!(h.claim_trial(t0 + s(30), cfg.cooldown));
        assert!(!h.claim_trial(t0 + s(30), cfg.cooldown));
        assert_eq!(h.standing(t0 + s(31)), Standing::Out);
        // The trial fails: out for another whole cooldown from then.
        assert_eq!(
            h.passive_failure(t0 + s(31), &cfg, YES),
            Some(Passive::TrialFailed)
        );
        assert_eq!(h.standing(t0 + s(60)), Standing::Out);
        assert_eq!(h.standing(t0 + s(61)), Standing::TrialDue);
        assert!(h.claim_trial(t0 + s(61), cfg.cooldown));
        // This one succeeds: back, with no failures counted.
        assert_eq!(h.passive_success(), Some(Passive::Readmitted));
        assert!(h.is_up(t0 + s(61)));
        assert_eq!(h.passive_success(), None);
    }

    #[test]
    fn a_trial_that_never_reports_is_followed_by_another() {
        let cfg = passive(1);
        let mut h = Health::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        h.passive_failure(t0, &cfg, YES);
        assert!(h.claim_trial(t0 + s(30), cfg.cooldown));
        // The trial request was cancelled: nothing reported.
        assert!(!h.claim_trial(t0 + s(59), cfg.cooldown));
        assert!(h.claim_trial(t0 + s(60), cfg.cooldown));
    }

    #[test]
    fn a_spent_budget_keeps_the_upstream_in_and_says_so_once() {
        let cfg = passive(2);
        let mut h = Health::default();
        let t0 = Instant::now();
        let no = || false;
        assert_eq!(h.passive_failure(t0, &cfg, no), None);
        assert_eq!(h.passive_failure(t0, &cfg, no), Some(Passive::Held));
        for _ in 0..20 {
            assert_eq!(h.passive_failure(t0, &cfg, no), None);
        }
        assert!(h.is_up(t0));
        // The budget frees up: the next failure ejects.
        assert_eq!(h.passive_failure(t0, &cfg, YES), Some(Passive::Ejected));
    }

    #[test]
    fn passive_off_with_zero() {
        let mut h = Health::default();
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(h.passive_failure(t0, &passive(0), YES), None);
        }
        assert!(h.is_up(t0));
    }

    #[test]
    fn the_budget_never_ejects_the_last_upstream() {
        // One upstream: never. Two: one. Then the share, rounded down.
        let got: Vec<usize> = (0..=6).map(|n| max_ejected(n, 50)).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 3]);
        assert_eq!(max_ejected(10, 10), 1);
        assert_eq!(max_ejected(3, 10), 1);
        assert_eq!(max_ejected(4, 100), 3);
        assert_eq!(max_ejected(4, 0), 0);
    }

    #[test]
    fn shared_view_follows_the_state_machine() {
        let s = Shared::default();
        let t0 = Instant::now();
        assert!(s.is_up(t0));
        s.active_result(false, 1, 1);
        assert!(!s.is_up(t0));
        s.active_result(true, 1, 1);
        assert!(s.is_up(t0));
        let cfg = passive(1);
        assert_eq!(s.passive_failure(t0, &cfg, YES), Some(Passive::Ejected));
        assert!(s.is_ejected());
        assert_eq!(
            s.standing_with(|| t0 + Duration::from_secs(29)),
            Standing::Out
        );
        let due = t0 + Duration::from_secs(31);
        assert_eq!(s.standing_with(|| due), Standing::TrialDue);
        assert!(s.claim_trial(due, cfg.cooldown));
        assert_eq!(s.standing_with(|| due), Standing::Out);
        assert_eq!(s.passive_success(), Some(Passive::Readmitted));
        assert!(s.is_up(due));
        assert!(!s.is_ejected());
    }

    #[test]
    fn check_expectations() {
        assert!(check_passes(200, None, b"", None));
        assert!(check_passes(301, None, b"", None));
        assert!(!check_passes(500, None, b"", None));
        assert!(check_passes(204, Some(204), b"", None));
        assert!(!check_passes(200, Some(204), b"", None));
        assert!(check_passes(200, None, b"status: ok\n", Some("ok")));
        assert!(!check_passes(200, None, b"status: degraded", Some("ok")));
    }
}
