//! Waiting for a condition instead of sleeping a fixed time: a test polls
//! until what it needs holds, up to a deadline generous enough for a slow,
//! busy machine, and then asserts as before.

use std::time::{Duration, Instant};

/// How long a condition that should hold within milliseconds may take on a
/// loaded CI machine before the test gives up.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How often a condition is checked.
const EVERY: Duration = Duration::from_millis(10);

/// Checks `cond` until it holds (true) or `timeout` has passed (false).
/// Blocks the thread: for async tests use [`poll_until_async`], which lets
/// servers on the test's own runtime go on.
#[must_use = "assert on it: a condition that never held must fail the test"]
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(EVERY);
    }
}

/// [`poll_until`] for async tests: `cond` may await, and the wait yields.
#[must_use = "assert on it: a condition that never held must fail the test"]
pub async fn poll_until_async(timeout: Duration, mut cond: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(EVERY).await;
    }
}
