//! The one re-armed deadline of weir: a timer that lives as long as what it
//! guards (a client connection, an upstream connection, a request body)
//! and whose deadline moves as that thing makes progress. Used by the
//! server's connection timeouts, the upstream client's response timeout and
//! the request body timeout.
//!
//! Why not a `tokio::time::Sleep` reset at every move, or a timeout per
//! request: registering a timer in the runtime's wheel and taking it out
//! again is paid at each. This timer is armed once; a later deadline only
//! lives in the caller's field, and the timer, when it fires before that
//! deadline, is re-armed to it: one wheel operation per timeout period, not
//! per request. Only a deadline earlier than the armed one resets the timer
//! at once. Never allocates but for the timer itself, at its first use.

use std::pin::Pin;
use std::task::{Context, Waker};

use tokio::time::{Instant, Sleep};

/// A timer re-armed lazily to whatever deadline it is asked about.
#[derive(Debug, Default)]
pub struct Deadline {
    /// Made at the first wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// When the timer is set to fire.
    armed: Option<Instant>,
    /// The waker the armed timer last registered, while it has not fired:
    /// a wait that finds it the same does not poll the timer again (a timer
    /// poll costs the task budget and the driver's state).
    waker: Option<Waker>,
}

impl Deadline {
    pub fn new() -> Self {
        Deadline::default()
    }

    /// When the timer fires, if it is armed.
    pub fn armed(&self) -> Option<Instant> {
        self.armed
    }

    /// Whether the armed timer is in the wheel and will wake `cx`'s task.
    pub fn will_wake(&self, cx: &Context<'_>) -> bool {
        self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
            && self.timer.as_ref().is_some_and(|t| !t.is_elapsed())
    }

    /// Whether `deadline` has passed; if not, `cx`'s task is woken at the
    /// latest when it does (possibly earlier, to be asked again).
    pub fn expired(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.timer {
            None => {
                self.armed = Some(deadline);
                self.waker = None;
                self.timer
                    .insert(Box::pin(tokio::time::sleep_until(deadline)))
            }
            Some(t) if self.armed.is_none_or(|a| deadline < a) => {
                self.armed = Some(deadline);
                t.as_mut().reset(deadline);
                self.waker = None;
                t
            }
            Some(t) => {
                if self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) && !t.is_elapsed() {
                    // It fires at or before `deadline` and wakes this task then.
                    return false;
                }
                t
            }
        };
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    self.waker = Some(cx.waker().clone());
                }
                return false;
            }
            self.waker = None;
            // The armed deadline passed; the real one may have moved later.
            if Instant::now() >= deadline {
                return true;
            }
            self.armed = Some(deadline);
            timer.as_mut().reset(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn expired(d: &mut Deadline, at: Instant) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        d.expired(at, &mut cx)
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_is_kept_and_an_earlier_one_at_once() {
        let start = Instant::now();
        let mut d = Deadline::new();
        assert!(!expired(&mut d, start + Duration::from_secs(5)));
        assert_eq!(d.armed(), Some(start + Duration::from_secs(5)));
        // Later: the timer stays where it is, and is moved on when it fires.
        assert!(!expired(&mut d, start + Duration::from_secs(8)));
        assert_eq!(d.armed(), Some(start + Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(!expired(&mut d, start + Duration::from_secs(8)));
        assert_eq!(d.armed(), Some(start + Duration::from_secs(8)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(expired(&mut d, start + Duration::from_secs(8)));
        // Earlier: the timer moves at once.
        let now = Instant::now();
        assert!(!expired(&mut d, now + Duration::from_secs(10)));
        assert!(!expired(&mut d, now + Duration::from_secs(1)));
        assert_eq!(d.armed(), Some(now + Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(expired(&mut d, now + Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_task_is_woken_when_the_deadline_passes() {
        let mut d = Deadline::new();
        let at = Instant::now() + Duration::from_millis(300);
        std::future::poll_fn(|cx| {
            if d.expired(at, cx) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        assert!(Instant::now() >= at);
    }
}
