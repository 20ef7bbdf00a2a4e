//! Sliding-window counters, as HAProxy's stick-table rates
//! (`http_req_rate(10s)`, `http_err_rate`, `bytes_out_rate`): the count of
//! the last period, estimated from the current period's count and the
//! previous one's, weighted by how much of the previous period the window
//! still covers. Two integers per counter; never reads a clock.

/// One counter over a sliding window of `period_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Start of the current period, in milliseconds on the caller's clock.
    start_ms: u64,
    current: u64,
    previous: u64,
}

impl Window {
    fn roll(&mut self, period_ms: u64, now_ms: u64) {
        let period_ms = period_ms.max(1);
        if now_ms < self.start_ms + period_ms {
            return;
        }
        let periods = (now_ms - self.start_ms) / period_ms;
        self.previous = if periods == 1 { self.current } else { 0 };
        self.current = 0;
        self.start_ms += periods * period_ms;
    }

    /// Adds `n` at `now_ms` (a request, an error, bytes).
    pub fn add(&mut self, period_ms: u64, now_ms: u64, n: u64) {
        self.roll(period_ms, now_ms);
        self.current = self.current.saturating_add(n);
    }

    /// The count over the last `period_ms` at `now_ms`.
    pub fn rate(&mut self, period_ms: u64, now_ms: u64) -> u64 {
        self.roll(period_ms, now_ms);
        let period_ms = period_ms.max(1);
        let into = now_ms.saturating_sub(self.start_ms).min(period_ms);
        // The share of the previous period still inside the window.
        let carried = self.previous * (period_ms - into) / period_ms;
        self.current + carried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_the_period() {
        let mut w = Window::default();
        for t in 0..10 {
            w.add(10_000, t * 100, 1);
        }
        assert_eq!(w.rate(10_000, 1000), 10);
    }

    #[test]
    fn the_previous_period_fades_out_linearly() {
        let mut w = Window::default();
        w.add(10_000, 0, 100);
        // A quarter into the next period: three quarters of the old count.
        assert_eq!(w.rate(10_000, 12_500), 75);
        w.add(10_000, 12_500, 10);
        assert_eq!(w.rate(10_000, 15_000), 60);
        // Two periods later nothing is left.
        assert_eq!(w.rate(10_000, 30_000), 0);
    }

    #[test]
    fn bytes_and_errors_count_like_requests() {
        let mut bytes = Window::default();
        bytes.add(1000, 0, 4096);
        bytes.add(1000, 500, 4096);
        assert_eq!(bytes.rate(1000, 999), 8192);
        assert_eq!(bytes.rate(1000, 1500), 4096);
    }
}
