//! Milliseconds on the limits' clock: one monotonic origin per process, so
//! the request filters and the cluster exchange count in the same time.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since the clock's origin (the first call).
pub fn now_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}
