//! Turns for answering TLS ClientHellos on one worker, so that a storm of new
//! connections shares the worker with the connections already open instead
//! of queueing ahead of them.
//!
//! Answering a ClientHello is the one expensive step of a handshake (an
//! RSA-2048 signature is 0.4–0.8 ms of CPU here; a request on an open
//! connection is tens of microseconds). A worker runs its ready tasks in
//! order, so when 10,000 clients connect at once, 10,000 ClientHellos are
//! ready before the first client's request: each one signed when its task
//! came up, and the request that client sent waited behind every signature
//! still queued (seconds; at c10000 no request was answered within five).
//! A limit on handshakes in flight does not help: a turn taken and given back
//! within one poll never makes the next one wait.
//!
//! So a gate task per worker grants the turns. Each time it comes up, once
//! per pass through the worker's run queue, it grants as many turns as fit
//! in three times what the rest of the worker's work took in the pass
//! before (at least one, at most `limits.tls_handshakes`), to clients
//! waiting in arrival order. A granted client runs after everything already
//! queued. Under both kinds of load, handshakes get about three quarters of
//! the worker, so a storm of new clients is over soon (they have waited
//! longest), and the open connections the last quarter, so none of them
//! stalls; a worker with nothing else to do spends all its time on
//! handshakes. (At c5000 over HTTPS on 2 cores, half and half left the
//! storm running past the 5-second run, p99 4.8 s; three quarters, 0.7 s.) A turn is taken only once a whole ClientHello is in and is
//! given back as soon as the answer is written, so a client that stalls
//! never holds one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

/// Turns get this many times the time the rest of the worker's work had:
/// three quarters of a worker busy with both.
const SHARE: u32 = 3;

/// Clients waiting for a turn on every worker together, for the placement
/// controller (`server::balance`): a storm of handshakes is no time to
/// measure request rates, nor to pack.
static WAITING_EVERYWHERE: AtomicUsize = AtomicUsize::new(0);

/// Clients waiting for a turn now, on all workers.
pub fn waiting_everywhere() -> usize {
    WAITING_EVERYWHERE.load(Relaxed)
}

/// The cost of a turn assumed before any was measured.
const FIRST_COST: Duration = Duration::from_micros(500);

/// One worker's turns (a cheap handle; clones share them).
#[derive(Clone)]
pub struct Turns(Arc<Inner>);

struct Inner {
    /// Clients waiting for a turn.
    waiting: AtomicUsize,
    /// Turns granted and not yet taken.
    grants: Semaphore,
    /// Wakes the gate when it sleeps (nobody was waiting).
    wake: Notify,
    /// Time spent in turns, and turns ended, since the gate last ran.
    spent_ns: AtomicU64,
    ended: AtomicU64,
}

impl Turns {
    /// Starts the gate on the current runtime (a worker's); it ends when the
    /// runtime does. `batch` is the most turns granted in one pass.
    pub fn start(batch: usize) -> Turns {
        let turns = Turns(Arc::new(Inner {
            waiting: AtomicUsize::new(0),
            grants: Semaphore::new(0),
            wake: Notify::new(),
            spent_ns: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }));
        tokio::spawn(gate(turns.0.clone(), batch.max(1)));
        turns
    }

    /// Waits for a turn. Cancel-safe: a client dropped while it waits gives
    /// up its place (and a turn granted to it goes to the next).
    pub async fn take(&self) -> Turn<'_> {
        let inner = &*self.0;
        inner.waiting.fetch_add(1, Relaxed);
        WAITING_EVERYWHERE.fetch_add(1, Relaxed);
        let _waiting = Waiting(inner);
        inner.wake.notify_one();
        inner
            .grants
            .acquire()
            .await
            .expect("the turns' semaphore is never closed")
            .forget();
        Turn {
            inner,
            started: Instant::now(),
        }
    }
}

/// Counts a client out of the waiting ones, also when its wait is cancelled.
struct Waiting<'a>(&'a Inner);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Relaxed);
        WAITING_EVERYWHERE.fetch_sub(1, Relaxed);
    }
}

/// A turn being used; dropping it ends the turn and records its cost.
pub struct Turn<'a> {
    inner: &'a Inner,
    started: Instant,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let ns = self.started.elapsed().as_nanos() as u64;
        self.inner.spent_ns.fetch_add(ns, Relaxed);
        self.inner.ended.fetch_add(1, Relaxed);
    }
}

/// Grants turns once per pass through the run queue, to the clients
/// waiting and not yet granted one, at most `batch` a pass.
async fn gate(inner: Arc<Inner>, batch: usize) {
    let mut pace = Pace::new(batch);
    let mut last = Instant::now();
    loop {
        if inner.waiting.load(Relaxed) == 0 {
            inner.wake.notified().await;
            // The time asleep was not work of the worker's.
            last = Instant::now();
        }
        let now = Instant::now();
        let pass = now - last;
        last = now;
        let spent = Duration::from_nanos(inner.spent_ns.swap(0, Relaxed));
        let ended = inner.ended.swap(0, Relaxed) as u32;
        let want = pace.next(pass, spent, ended);
        let unclaimed = inner.grants.available_permits();
        let grant = want.min(inner.waiting.load(Relaxed).saturating_sub(unclaimed));
        if grant > 0 {
            inner.grants.add_permits(grant);
        }
        // To the back of the run queue: the clients just granted, and
        // everything queued before them, run before the gate's next pass.
        tokio::task::yield_now().await;
    }
}

/// How many turns a pass gets.
struct Pace {
    batch: usize,
    /// What a turn has cost lately.
    cost: Duration,
}

impl Pace {
    fn new(batch: usize) -> Pace {
        Pace {
            batch,
            cost: FIRST_COST,
        }
    }

    /// The turns for the next pass, after one that took `pass` in all, of
    /// which `ended` turns took `spent`: as many as fit in `SHARE` times the
    /// rest, at least one and at most `batch`.
    fn next(&mut self, pass: Duration, spent: Duration, ended: u32) -> usize {
        if ended > 0 {
            // A moving average over about four passes.
            self.cost = (self.cost * 3 + spent / ended) / 4;
        }
        let other = pass.saturating_sub(spent);
        let fit = SHARE as u128 * other.as_nanos() / self.cost.as_nanos().max(1);
        (fit.min(self.batch as u128) as usize).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    /// Twenty handshakes become ready at once on a worker that is also
    /// serving an open connection. The old turns (a semaphore with free
    /// places) let all twenty sign before the connection's next request; the
    /// gate lets a pass's turns through (at most `batch`, here 4) between
    /// two of its requests, and every pass has turns.
    #[test]
    fn handshakes_take_turns_with_the_open_connections() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        rt.block_on(async {
            let turns = Turns::start(4);
            let open = {
                let log = log.clone();
                tokio::spawn(async move {
                    for _ in 0..200 {
                        log.lock().unwrap().push('r');
                        spin(Duration::from_micros(300));
                        tokio::task::yield_now().await;
                    }
                })
            };
            let mut handshakes = Vec::new();
            for _ in 0..20 {
                let (turns, log) = (turns.clone(), log.clone());
                handshakes.push(tokio::spawn(async move {
                    let _turn = turns.take().await;
                    log.lock().unwrap().push('S');
                    spin(Duration::from_micros(300));
                }));
            }
            for h in handshakes {
                h.await.unwrap();
            }
            open.abort();
        });
        let log = log.lock().unwrap().clone();
        let signed = log.rfind('S').unwrap();
        let during = &log[log.find('S').unwrap()..=signed];
        let longest = |c: char| during.split(|x| x != c).map(str::len).max().unwrap_or(0);
        assert_eq!(during.matches('S').count(), 20, "{log}");
        assert!(
            longest('S') <= 4,
            "requests waited behind handshakes: {log}"
        );
        assert!(
            longest('r') <= 2,
            "handshakes waited behind requests: {log}"
        );
    }

    /// A client that gives up while it waits is counted out and leaves no
    /// turn stuck: the next one still gets its turn.
    #[tokio::test]
    async fn a_cancelled_wait_gives_its_place_up() {
        let turns = Turns::start(1);
        {
            let mut waiting = std::pin::pin!(turns.take());
            assert!(futures_util::poll!(waiting.as_mut()).is_pending());
            assert_eq!(turns.0.waiting.load(Relaxed), 1);
        }
        assert_eq!(turns.0.waiting.load(Relaxed), 0);
        tokio::time::timeout(Duration::from_secs(5), turns.take())
            .await
            .expect("a turn after a cancelled wait");
        assert_eq!(turns.0.waiting.load(Relaxed), 0);
    }

    /// A pass's turns fit in three times the rest of its work, at the cost
    /// turns have had lately; never none, never more than `batch`.
    #[test]
    fn a_pass_gets_three_times_the_rest() {
        let us = Duration::from_micros;
        let mut pace = Pace::new(128);
        // Turns of 500 us (the first guess), nothing else: one at a time.
        assert_eq!(pace.next(us(500), us(500), 1), 1);
        assert_eq!(pace.next(us(0), us(0), 0), 1);
        // 1 ms of other work: 3 ms of turns.
        assert_eq!(pace.next(us(1500), us(500), 1), 6);
        // Turns got dearer (1 ms each): the average moves a quarter of the way.
        assert_eq!(pace.next(us(2000), us(1000), 1), 4);
        assert_eq!(pace.cost, us(625));
        // A long pass of other work is capped at `batch`.
        assert_eq!(pace.next(us(1_000_000), us(0), 0), 128);
        let mut small = Pace::new(2);
        assert_eq!(small.next(us(10_000), us(0), 0), 2);
    }
}
