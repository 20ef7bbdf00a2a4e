//! Cheap clock reads for the request path's bookkeeping: the kernel's
//! coarse clocks, the time of its last tick, read from the vDSO without
//! reading the TSC.
//!
//! Why: a proxied request reads the clock several times (the pool's idle
//! stamps, the balancer's health check, the `Date` field, the connection's
//! activity stamps and the response's deadline), and a precise read costs
//! several times a coarse one. What these reads decide is measured in
//! seconds (idle upstream connections, a passive cool-down,
//! the second of `Date`, idle and slow connections, a response timeout),
//! so a clock that lags by up to one tick (4 ms at `HZ=250`) and never
//! runs ahead of real time does for them.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::time::{ClockId, clock_gettime};

fn read(clock: ClockId) -> Duration {
    // Cannot fail for these clocks on Linux; zero would only make a stamp old.
    clock_gettime(clock).map_or(Duration::ZERO, Duration::from)
}

/// An `Instant` and the monotonic clock read right after it: the coarse
/// clock counts from the same origin, so its reading maps onto `Instant`s.
struct Origin {
    instant: Instant,
    monotonic: Duration,
}

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        let instant = Instant::now();
        let monotonic = read(ClockId::CLOCK_MONOTONIC);
        Origin { instant, monotonic }
    })
}

/// Now, as of the kernel's last tick: at most one tick behind
/// `Instant::now()`, never ahead of it.
pub fn now() -> Instant {
    let o = origin();
    o.instant + read(ClockId::CLOCK_MONOTONIC_COARSE).saturating_sub(o.monotonic)
}

/// [`now`] on tokio's timeline, for the deadlines of tokio's timers (the
/// connection's idle, head and write timeouts, the response timeout),
/// which then fall due up to one tick early. A deadline's check when its
/// timer fires reads the precise clock. Unit tests read tokio's clock, so
/// the ones that pause it keep working; the end-to-end tests run this.
///
/// Call it through [`tokio_now!`](crate::tokio_now) so that the calling
/// crate's unit tests read tokio's clock instead.
pub fn tokio_now() -> tokio::time::Instant {
    #[cfg(test)]
    return tokio::time::Instant::now();
    #[cfg(not(test))]
    tokio::time::Instant::from_std(now())
}

/// Now in whole seconds since the Unix epoch, as of the kernel's last tick.
pub fn unix_secs() -> u64 {
    read(ClockId::CLOCK_REALTIME_COARSE).as_secs()
}

/// `SystemTime` of a whole second since the Unix epoch.
pub fn system_time(unix_secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix_secs)
}

/// [`clock::tokio_now`](crate::clock::tokio_now) in a build, and tokio's own
/// clock in the calling crate's unit tests, which may pause it (a `cfg(test)`
/// in a macro's expansion is the caller's).
#[macro_export]
macro_rules! tokio_now {
    () => {{
        #[cfg(test)]
        let now = ::tokio::time::Instant::now();
        #[cfg(not(test))]
        let now = $crate::clock::tokio_now();
        now
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lags_by_at_most_a_tick_and_never_leads() {
        for _ in 0..1000 {
            let before = Instant::now();
            let coarse = now();
            let after = Instant::now();
            assert!(coarse <= after, "coarse {coarse:?} ahead of {after:?}");
            // A tick is 1–10 ms (HZ 1000 to 100); allow a preempted thread.
            let lag = before.saturating_duration_since(coarse);
            assert!(lag < Duration::from_millis(50), "lag {lag:?}");
        }
    }

    #[test]
    fn moves_with_the_precise_clock() {
        let a = now();
        std::thread::sleep(Duration::from_millis(30));
        let b = now();
        let moved = b.duration_since(a);
        assert!(
            moved >= Duration::from_millis(15) && moved < Duration::from_millis(200),
            "moved {moved:?}"
        );
    }

    #[test]
    fn unix_seconds_match_the_system_clock() {
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let coarse = unix_secs();
        assert!(precise.abs_diff(coarse) <= 1, "{precise} against {coarse}");
        assert_eq!(
            system_time(coarse)
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            coarse
        );
    }
}
