//! Upstream health: the active-check state machine (rise/fall thresholds),
//! passive failure tracking (N failures within a window mark an upstream down
//! for a cool-down), and the lock-free view the request path reads.
//!
//! [`Health`] is a plain state machine with time passed in; tests drive it
//! with a simulated clock. [`Shared`] publishes its verdict in atomics so the
//! request path never takes a lock; the lock is taken only by the checker
//! task and when a request fails. The active checker task itself lives in
//! `proxy::mod` (it needs the connection code); it never touches a request.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_config::proxy::PassiveConfig;

/// What changed after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp,
}

#[derive(Debug)]
pub struct Health {
    /// The active checks' verdict (true until checks say otherwise).
    up: bool,
    ok_streak: u32,
    fail_streak: u32,
    /// Recent passive failures, oldest first, within the window.
    failures: VecDeque<Instant>,
    /// Passive cool-down end.
    down_until: Option<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            up: true,
            ok_streak: 0,
            fail_streak: 0,
            failures: VecDeque::new(),
            down_until: None,
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
    pub fn passive_failure(&mut self, now: Instant, cfg: &PassiveConfig) -> Option<Transition> {
        if cfg.failures == 0 {
            return None;
        }
        if self.down_until.is_some_and(|t| now < t) {
            return None;
        }
        while self
            .failures
            .front()
            .is_some_and(|&t| now.duration_since(t) > cfg.window)
        {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
        if self.failures.len() as u32 >= cfg.failures {
            self.failures.clear();
            self.down_until = Some(now + cfg.cooldown);
            return Some(Transition::WentDown);
        }
        None
    }

    pub fn is_up(&self, now: Instant) -> bool {
        self.up && self.down_until.is_none_or(|t| now >= t)
    }

    pub fn down_until(&self) -> Option<Instant> {
        self.down_until
    }

    pub fn active_up(&self) -> bool {
        self.up
    }
}

/// The process-wide view of one upstream's health.
#[derive(Debug, Default)]
pub struct Shared {
    state: Mutex<Health>,
    /// Mirror of `Health::up`.
    active_down: AtomicBool,
    /// Passive cool-down end, as nanoseconds since [`epoch`]; 0 = none.
    down_until: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn to_nanos(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64 + 1
}

impl Shared {
    /// Lock-free: whether requests may go to this upstream at `now`.
    pub fn is_up(&self, now: Instant) -> bool {
        self.is_up_with(|| now)
    }

    /// [`Shared::is_up`], reading the clock only for an upstream in a
    /// passive cool-down.
    pub fn is_up_with(&self, now: impl FnOnce() -> Instant) -> bool {
        if self.active_down.load(Ordering::Relaxed) {
            return false;
        }
        let until = self.down_until.load(Ordering::Relaxed);
        until == 0 || to_nanos(now()) >= until
    }

    pub fn active_result(&self, ok: bool, rise: u32, fall: u32) -> Option<Transition> {
        let mut h = self.state.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut h = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *h = Health::default();
        self.active_down.store(false, Ordering::Relaxed);
        self.down_until.store(0, Ordering::Relaxed);
    }

    pub fn passive_failure(&self, now: Instant, cfg: &PassiveConfig) -> Option<Transition> {
        let mut h = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let t = h.passive_failure(now, cfg);
        if let Some(until) = h.down_until() {
            self.down_until.store(to_nanos(until), Ordering::Relaxed);
        }
        t
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
        }
    }

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
    fn passive_failures_within_window_mark_down_for_cooldown() {
        let cfg = passive(3);
        let mut h = Health::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(h.passive_failure(t0, &cfg), None);
        assert_eq!(h.passive_failure(t0 + s(5), &cfg), None);
        // The first failure leaves the 10s window before the third arrives.
        assert_eq!(h.passive_failure(t0 + s(12), &cfg), None);
        assert_eq!(
            h.passive_failure(t0 + s(13), &cfg),
            Some(Transition::WentDown)
        );
        assert!(!h.is_up(t0 + s(14)));
        // Failures during the cool-down don't extend it.
        assert_eq!(h.passive_failure(t0 + s(20), &cfg), None);
        assert!(!h.is_up(t0 + s(42)));
        assert!(h.is_up(t0 + s(43)));
    }

    #[test]
    fn passive_off_with_zero() {
        let mut h = Health::default();
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(h.passive_failure(t0, &passive(0)), None);
        }
        assert!(h.is_up(t0));
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
        assert_eq!(s.passive_failure(t0, &cfg), Some(Transition::WentDown));
        assert!(!s.is_up(t0 + Duration::from_secs(29)));
        assert!(s.is_up(t0 + Duration::from_secs(31)));
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
