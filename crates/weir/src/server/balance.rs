//! `server.accept = "adaptive"`: the client connections are either packed on
//! the first worker or spread over all of them, whichever serves more
//! requests, found by trying both; keep-alive connections move between
//! workers at a request boundary to follow.
//!
//! Why: on a machine a server shares with busy clients (a load generator, an
//! application server on the same host), cheap requests served from memory
//! go faster with every connection on one worker, because each extra
//! runnable weir thread takes a CPU from the clients and wakes across CPUs
//! (BENCHMARKS.md §6 "Packing, spinning and the upstream pool": 26,500
//! against 260 context switches a second, a p99 of 3.8–5.2 ms against
//! 1.5–2.0). Large files and proxied requests go faster spread. Neither CPU
//! use nor the connection count tells the two apart (a packed worker is
//! busy either way), and the right placement of the connections already
//! open matters as much as that of new ones. So a controller thread tries:
//! every epoch (100 ms) it reads the requests each worker started; after a
//! few steady epochs it switches to the other placement, lets the
//! connections move, measures, and keeps whichever served more (and still
//! served more than before it in its last epoch); packing, which leaves
//! cores idle, must serve 15 % more where a site proxies; where every site
//! answers from weir itself a tie goes to packing, kept unless it serves
//! 10 % less (`pack_margin`). A trial that
//! loses makes the next wait four times as long (2 s, 8 s, then 30 s); one
//! that wins, 8 s. A steady request rate 40 % away from the last one starts
//! a trial at once, and so does a kept placement serving 15 % less than its
//! trial measured. While a storm of TLS handshakes is on (64 or more clients
//! waiting for a turn, `tls::turns`), the connections are spread and nothing
//! is tried: every worker signs, and an epoch's request rate then says
//! nothing about either placement.
//!
//! The placement acts in two places:
//! - new connections: a one-instruction classic BPF program on each
//!   SO_REUSEPORT group returns socket 0 (pack) or an index past the end,
//!   which makes the kernel fall back to its own hash (spread), as in
//!   `server::pack`;
//! - open connections: the controller tells each worker how many of its
//!   connections to give up and to whom. weir's HTTP/1.1 loop checks that
//!   one counter between requests, when it holds no unread bytes, and hands
//!   the socket (with its TLS session) to the other worker's mailbox
//!   (`server::conn`). Connections that hyper serves (HTTP/2, upgrades)
//!   stay where they are.
//!
//! Per request this costs one store to a counter in the worker's own cache
//! line and one load of another.

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::conn::Arrival;

/// How often the controller reads the counters.
const EPOCH: Duration = Duration::from_millis(100);
/// Epochs of steady load in one placement before the other is tried.
const STEADY_EPOCHS: usize = 4;
/// Epochs a trial waits for the connections to move before it measures.
const SETTLE_EPOCHS: u32 = 1;
/// Epochs a trial measures.
const MEASURE_EPOCHS: u32 = 4;
/// Requests a second below which nothing is tried (nothing to gain).
const MIN_RATE: f64 = 200.0;
/// The placement tried must serve this much more than the one before it to
/// be kept: a tie keeps what was there, so noise does not flap it (except
/// where no site proxies: a tie there goes to packing, `PACK_MARGIN_LOCAL`).
const MARGIN: f64 = 0.05;
/// Packing must serve this much more to be kept when a site proxies. A
/// narrower lead is what the trials' noise and the moves themselves
/// produce for proxied requests: packing measured 6–16 % ahead in four of
/// nine trials, yet spreading served 10 % more than packing in runs with
/// the placement fixed.
const PACK_MARGIN_PROXY: f64 = 0.15;

/// Where every site answers from weir itself (files, the welcome page,
/// redirects), a tie goes to packing: it is kept unless it serves 10 %
/// less than spreading did. Measured by hand with the placement fixed (two
/// workers, the load generator on the same two cores, c100): the 164-byte
/// page packed 117–128 K req/s at a p99 of 1.2–1.4 ms and 7.8–8.5 µs of
/// weir's CPU a request, spread 108–110 K at 4.4–4.6 ms and 8.9–9.1 µs;
/// 4 KiB 90–110 K packed against 94–100 K spread, 256 KiB 32–33 K against
/// 30–35 K, each at half the p99 packed. A trial cannot tell those leads
/// from its noise: with a 5 % lead asked of packing, half of the fresh
/// starts measured it at −9.5 to +0.3 % and left the page spread, at three
/// times the p99 (BENCHMARKS.md §6 "Packing where no site proxies" and
/// "A tie goes to packing"). Large files lose packed by far more (1 MiB:
/// 36–57 % of spreading), so the trial still sends them back; spreading,
/// tried from packing, still needs its 5 % lead (`MARGIN`).
const PACK_MARGIN_LOCAL: f64 = -0.10;

/// The lead packing must show to be kept: `proxies` is whether any site
/// proxies a request upstream.
pub fn pack_margin(proxies: bool) -> f64 {
    if proxies {
        PACK_MARGIN_PROXY
    } else {
        PACK_MARGIN_LOCAL
    }
}

/// A trial serving this much less than before it ends at once.
const LOSING: f64 = 0.15;
/// A change of the request rate by this share ends a steady stretch.
const SHIFT: f64 = 0.4;
/// A handshake storm: this many TLS clients waiting for a turn
/// (`tls::turns`) at an epoch's end, on all workers together. Their RSA
/// signatures are about 30 ms of a core's work (0.4–0.8 ms each), more than
/// a steady trickle of new clients leaves waiting.
const STORM: usize = 64;
/// The wait before the next trial after one that lost; four times as long
/// after each further loss, up to `MAX_HOLD`.
const MIN_HOLD: Duration = Duration::from_secs(2);
const MAX_HOLD: Duration = Duration::from_secs(30);
/// The wait before the next trial after one that won. A placement that just
/// served more in a measured comparison is not tried against again soon: each
/// trial of the other costs requests and latency. A win that does not hold
/// (below) and a change of load start a trial sooner.
const KEPT_HOLD: Duration = Duration::from_secs(8);

/// Where the client connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// All on worker 0.
    Pack,
    /// Evenly over every worker.
    Spread,
}

impl Placement {
    fn other(self) -> Placement {
        match self {
            Placement::Pack => Placement::Spread,
            Placement::Spread => Placement::Pack,
        }
    }
}

/// One worker's counters, each in a cache line of its own: the worker
/// writes `served` and `open`, the controller `shed` and `target`.
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// Requests started on this worker (single writer: the worker).
    served: AtomicU64,
    /// Client connections open on this worker (single writer: the worker).
    open: AtomicUsize,
    /// Connections this worker should hand over at their next boundary.
    shed: AtomicUsize,
    /// The worker they go to.
    target: AtomicUsize,
}

/// What the workers and the controller share for one run of the server.
pub struct Balance {
    slots: Box<[Slot]>,
    mail: Vec<mpsc::UnboundedSender<Arrival>>,
}

thread_local! {
    /// The balance this worker thread takes part in, and its index.
    static HERE: Cell<Option<(&'static Balance, usize)>> = const { Cell::new(None) };
}

impl Balance {
    /// A balance for `workers` workers, and each worker's mailbox for the
    /// connections handed to it. Leaked: it lives as long as the process's
    /// one server run.
    pub fn new(workers: usize) -> (&'static Balance, Vec<mpsc::UnboundedReceiver<Arrival>>) {
        let (mail, boxes) = (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
        let b = Balance {
            slots: (0..workers).map(|_| Slot::default()).collect(),
            mail,
        };
        (Box::leak(Box::new(b)), boxes)
    }

    /// Makes the calling thread worker `index` of this balance.
    pub fn enter(&'static self, index: usize) {
        HERE.with(|h| h.set(Some((self, index))));
    }
}

/// Counts a request started on the calling worker (if it takes part).
#[inline]
pub fn request_started() {
    HERE.with(|h| {
        if let Some((b, i)) = h.get() {
            let s = &b.slots[i].served;
            s.store(s.load(Relaxed).wrapping_add(1), Relaxed);
        }
    });
}

/// Counts a client connection opened (`+1`) or closed (`-1`) on the
/// calling worker.
pub fn connection(delta: isize) {
    // `try_with`: also called from drops while the thread ends.
    let _ = HERE.try_with(|h| {
        if let Some((b, i)) = h.get() {
            let o = &b.slots[i].open;
            o.store(o.load(Relaxed).saturating_add_signed(delta), Relaxed);
        }
    });
}

/// Whether the calling worker has connections to hand over: one load.
#[inline]
pub fn wants_move() -> bool {
    HERE.with(|h| {
        h.get()
            .is_some_and(|(b, i)| b.slots[i].shed.load(Relaxed) > 0)
    })
}

/// Takes one of the calling worker's hand-overs: the worker to move a
/// connection to.
pub fn take_move() -> Option<usize> {
    let (b, i) = HERE.with(Cell::get)?;
    let slot = &b.slots[i];
    slot.shed
        .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
        .ok()?;
    let to = slot.target.load(Relaxed);
    (to != i && to < b.slots.len()).then_some(to)
}

/// Hands a connection to worker `to`; gives it back if that worker is gone
/// (shutting down).
pub fn send(to: usize, a: Arrival) -> Result<(), Arrival> {
    let Some((b, _)) = HERE.with(Cell::get) else {
        return Err(a);
    };
    b.mail[to].send(a).map_err(|e| e.0)
}

/// Decides the placement from the request rate of each epoch.
pub struct Controller {
    placement: Placement,
    /// Rates of the last steady epochs, in the current placement.
    recent: VecDeque<f64>,
    /// The mean rate of the last steady stretch, across pauses in the load.
    steady: Option<f64>,
    hold: Duration,
    next_trial: Instant,
    trial: Option<Trial>,
    /// The rate a trial just kept measured, until the first steady stretch
    /// after it checks that the placement still serves that.
    kept: Option<f64>,
    /// The lead packing must show to be kept (`pack_margin`).
    pack_margin: f64,
}

struct Trial {
    from: Placement,
    /// The mean rate of the steady epochs before it.
    base: f64,
    epochs: u32,
    sum: f64,
    measured: u32,
    /// The rate of its last measured epoch.
    last: f64,
}

fn mean(v: &VecDeque<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

impl Controller {
    pub fn new(now: Instant, pack_margin: f64) -> Controller {
        Controller {
            placement: Placement::Spread,
            recent: VecDeque::with_capacity(STEADY_EPOCHS + 1),
            steady: None,
            hold: MIN_HOLD,
            next_trial: now,
            trial: None,
            kept: None,
            pack_margin,
        }
    }

    #[cfg(test)]
    fn placement(&self) -> Placement {
        self.placement
    }

    /// An epoch that ended in a storm of TLS handshakes: spread, so that
    /// every worker signs, and no trial. The request rate of such an epoch
    /// says nothing about either placement: a trial taken in one at
    /// c10000 kept packing at 4,875 against 3,559 req/s, which left one
    /// worker to answer the rest of the storm and the clients that moved to
    /// it waiting seconds for their next response (BENCHMARKS.md §6,
    /// "... moving connections in a handshake storm"). Trials start again
    /// once the load is steady after it.
    pub fn storm(&mut self, now: Instant) -> Placement {
        self.placement = Placement::Spread;
        self.trial = None;
        self.recent.clear();
        self.steady = None;
        self.kept = None;
        self.hold = MIN_HOLD;
        self.next_trial = now;
        self.placement
    }

    /// One epoch's rate of requests a second; the placement for the next.
    pub fn epoch(&mut self, now: Instant, rate: f64) -> Placement {
        if let Some(t) = &mut self.trial {
            t.epochs += 1;
            if rate < MIN_RATE / 2.0 {
                // The load went away mid-trial: nothing to learn.
                self.placement = t.from;
                self.trial = None;
                self.recent.clear();
                return self.placement;
            }
            if t.epochs > SETTLE_EPOCHS {
                t.sum += rate;
                t.measured += 1;
                t.last = rate;
            }
            let tried = t.sum / f64::from(t.measured.max(1));
            // A placement clearly losing is not measured to the end: each
            // epoch of it costs requests (packing 1 MiB files serves 40 % of
            // spreading them).
            let losing = t.measured > 0 && tried < t.base * (1.0 - LOSING);
            if t.measured == MEASURE_EPOCHS || losing {
                // A win must still hold in its last epoch: right after a
                // switch, the responses already queued in the sockets keep
                // a losing placement's rate up for an epoch or two (1 MiB
                // files packed: 3,441 req/s measured against 3,132 spread,
                // then 1,743).
                let margin = if self.placement == Placement::Pack {
                    self.pack_margin
                } else {
                    MARGIN
                };
                // Below the base where a tie goes to packing
                // (`PACK_MARGIN_LOCAL`): the last epoch must then clear the
                // same floor rather than the base.
                let floor = t.base * (1.0 + margin);
                let keep = tried > floor && t.last > t.base.min(floor);
                tracing::debug!(
                    "accept: tried {:?} at {tried:.0} req/s against {:?} at {:.0}: {}",
                    self.placement,
                    t.from,
                    t.base,
                    if keep { "kept" } else { "back" }
                );
                if keep {
                    self.hold = MIN_HOLD;
                    self.next_trial = now + KEPT_HOLD;
                    // The new placement's rate is not a change of load.
                    self.steady = None;
                    self.kept = Some(tried);
                } else {
                    self.placement = t.from;
                    self.hold = (self.hold * 4).min(MAX_HOLD);
                    self.next_trial = now + self.hold;
                }
                self.trial = None;
                self.recent.clear();
            }
            return self.placement;
        }
        if rate < MIN_RATE {
            self.recent.clear();
            return self.placement;
        }
        if let Some(m) = mean(&self.recent)
            && (rate - m).abs() > SHIFT * m
        {
            // Not steady (a load starting or ending).
            self.recent.clear();
        }
        self.recent.push_back(rate);
        if self.recent.len() > STEADY_EPOCHS {
            self.recent.pop_front();
        }
        if self.recent.len() < STEADY_EPOCHS {
            return self.placement;
        }
        let m = mean(&self.recent).unwrap_or(0.0);
        if let Some(k) = self.kept.take()
            && m < k * (1.0 - LOSING)
        {
            // The placement kept serves clearly less than its trial
            // measured: the trial caught a passing moment (connections
            // still opening, TCP windows still growing). Try again now.
            self.next_trial = now;
        }
        if let Some(before) = self.steady
            && (m - before).abs() > SHIFT * before
        {
            // A different load from the last steady one (a pause between
            // two runs of the same load is not): try again now.
            self.next_trial = now;
        }
        self.steady = Some(m);
        if now >= self.next_trial {
            self.trial = Some(Trial {
                from: self.placement,
                base: m,
                epochs: 0,
                sum: 0.0,
                measured: 0,
                last: 0.0,
            });
            self.placement = self.placement.other();
        }
        self.placement
    }
}

/// How many connections each worker should hand over, and to whom, for
/// `placement` given the connections open on each: `(shed, target)`.
fn hand_overs(placement: Placement, open: &[usize]) -> Vec<(usize, usize)> {
    match placement {
        Placement::Pack => open
            .iter()
            .enumerate()
            .map(|(i, &n)| if i == 0 { (0, 0) } else { (n, 0) })
            .collect(),
        Placement::Spread => {
            let total: usize = open.iter().sum();
            let fair = total.div_ceil(open.len().max(1));
            let least = (0..open.len()).min_by_key(|&i| open[i]).unwrap_or(0);
            open.iter()
                .map(|&n| {
                    // Only a clear excess moves: the hash is never exact.
                    if n > fair + fair / 4 + 1 {
                        (n - fair, least)
                    } else {
                        (0, least)
                    }
                })
                .collect()
        }
    }
}

/// Runs the controller on a thread of its own until `stop` is set.
/// `groups`: the first socket of each listening group (duplicates of worker
/// 0's), where the accept program goes. `pack_margin`: the lead packing
/// must show (`pack_margin()`).
pub fn start(
    b: &'static Balance,
    groups: Vec<OwnedFd>,
    stop: Arc<AtomicBool>,
    pack_margin: f64,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("weir-balance".into())
        .spawn(move || {
            let mut c = Controller::new(Instant::now(), pack_margin);
            let mut applied = Placement::Spread;
            let mut last = (Instant::now(), total_served(b));
            while !stop.load(Relaxed) {
                std::thread::sleep(EPOCH);
                let now = Instant::now();
                let served = total_served(b);
                let dt = now.duration_since(last.0).as_secs_f64();
                let rate = served.wrapping_sub(last.1) as f64 / dt.max(1e-3);
                last = (now, served);
                let p = if crate::tls::turns::waiting_everywhere() >= STORM {
                    c.storm(now)
                } else {
                    c.epoch(now, rate)
                };
                if p != applied {
                    for g in &groups {
                        let k = if p == Placement::Pack { 0 } else { u32::MAX };
                        if let Err(e) = super::pack::attach(g, k) {
                            tracing::warn!("accept: cannot switch to {p:?}: {e}");
                        }
                    }
                    tracing::debug!("accept: {p:?}");
                    applied = p;
                }
                let open: Vec<usize> = b.slots.iter().map(|s| s.open.load(Relaxed)).collect();
                for (s, (shed, to)) in b.slots.iter().zip(hand_overs(p, &open)) {
                    s.target.store(to, Relaxed);
                    s.shed.store(shed, Relaxed);
                }
            }
        })
}

fn total_served(b: &Balance) -> u64 {
    b.slots.iter().map(|s| s.served.load(Relaxed)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `rates` one epoch apart; the placements chosen after each.
    fn run(
        c: &mut Controller,
        start: &mut Instant,
        rate: impl Fn(Placement) -> f64,
        n: usize,
    ) -> Vec<Placement> {
        (0..n)
            .map(|_| {
                *start += EPOCH;
                let r = rate(c.placement());
                c.epoch(*start, r)
            })
            .collect()
    }

    /// Rates where packing serves `packed` requests a second and spreading
    /// 100,000.
    fn packing_serves(packed: f64) -> impl Fn(Placement) -> f64 {
        move |p| {
            if p == Placement::Pack {
                packed
            } else {
                100_000.0
            }
        }
    }

    /// Twelve epochs from a fresh controller where spreading serves
    /// 100,000 requests a second and packing's epochs serve `packed` in
    /// turn (a rate riding on what spreading queued), then 60,000.
    fn packing_decays(pack_margin: f64, packed: &[f64]) -> Vec<Placement> {
        let mut t = Instant::now();
        let mut c = Controller::new(t, pack_margin);
        let n = std::cell::Cell::new(0);
        run(
            &mut c,
            &mut t,
            |p| match p {
                Placement::Pack => {
                    n.set(n.get() + 1);
                    packed.get(n.get() - 1).copied().unwrap_or(60_000.0)
                }
                Placement::Spread => 100_000.0,
            },
            12,
        )
    }

    #[test]
    fn keeps_pack_when_it_serves_more_and_spread_when_it_does_not() {
        let mut t = Instant::now();
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        // Packing serves 25 % more: after the first trial it stays packed.
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 20);
        assert_eq!(p[2], Placement::Spread);
        assert_eq!(
            p[3],
            Placement::Pack,
            "the trial starts after 4 steady epochs"
        );
        assert!(p[4..].iter().all(|&x| x == Placement::Pack), "{p:?}");
        // Later trials of spreading lose and end early; each waits longer.
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 200);
        let spread: usize = p.iter().filter(|&&x| x == Placement::Spread).count();
        assert!(spread > 0 && spread <= 3 * 6, "{spread} epochs spread");
        assert_eq!(*p.last().unwrap(), Placement::Pack);

        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        // Packing serves 30 % less: it is tried and dropped.
        let p = run(&mut c, &mut t, packing_serves(70_000.0), 100);
        assert!(p[..3].iter().all(|&x| x == Placement::Spread));
        assert_eq!(p[3], Placement::Pack);
        assert!(
            p[9..].iter().take(10).all(|&x| x == Placement::Spread),
            "{p:?}"
        );
        let packed = p.iter().filter(|&&x| x == Placement::Pack).count();
        assert!(packed <= 4 * 6, "{packed} epochs packed in 10 s");
    }

    #[test]
    fn a_handshake_storm_spreads_and_ends_any_trial() {
        let mut t = Instant::now();
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        // Packed after its first trial...
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 20);
        assert_eq!(*p.last().unwrap(), Placement::Pack);
        // ...a storm spreads at once.
        t += EPOCH;
        assert_eq!(c.storm(t), Placement::Spread);
        // A trial under way when a storm starts is dropped, and spread.
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 4);
        assert_eq!(p[3], Placement::Pack, "a trial of packing started");
        t += EPOCH;
        assert_eq!(c.storm(t), Placement::Spread);
        assert!(c.trial.is_none());
        // After it, a steady load is tried again at once (4 steady epochs).
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 20);
        assert_eq!(p[..3], [Placement::Spread; 3]);
        assert_eq!(p[3], Placement::Pack, "{p:?}");
        assert_eq!(*p.last().unwrap(), Placement::Pack);
    }

    #[test]
    fn a_win_holds_for_8_s_unless_it_does_not_last() {
        let mut t = Instant::now();
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        // Packing serves 25 % more: no trial of spreading for 8 s after.
        let p = run(&mut c, &mut t, packing_serves(125_000.0), 80);
        assert_eq!(p[3], Placement::Pack);
        assert!(p[4..].iter().all(|&x| x == Placement::Pack), "{p:?}");

        // Packing looks 50 % better while it is tried (the connections
        // were still warming up), then serves 40 % less: it is tried
        // against spreading again at once, and dropped.
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let n = std::cell::Cell::new(0);
        let p = run(
            &mut c,
            &mut t,
            |p| {
                n.set(n.get() + 1);
                match p {
                    Placement::Pack if n.get() <= 8 => 150_000.0,
                    Placement::Pack => 60_000.0,
                    Placement::Spread => 100_000.0,
                }
            },
            40,
        );
        assert_eq!(p[3], Placement::Pack);
        assert!(p[20..].iter().all(|&x| x == Placement::Spread), "{p:?}");
    }

    #[test]
    fn a_trial_whose_rate_falls_below_the_base_by_its_end_is_not_kept() {
        // Packing's first epochs ride on what spreading queued (mean of the
        // measured epochs 120,000, 20 % more than spreading), but its last
        // one serves less than spreading did: back to spreading.
        let p = packing_decays(
            PACK_MARGIN_PROXY,
            &[150_000.0, 150_000.0, 130_000.0, 110_000.0, 90_000.0],
        );
        assert_eq!(p[3], Placement::Pack);
        assert_eq!(&p[3..8], &[Placement::Pack; 5], "{p:?}");
        assert!(p[8..].iter().all(|&x| x == Placement::Spread), "{p:?}");
    }

    #[test]
    fn packing_is_kept_only_for_a_clear_win_and_spreading_for_any() {
        // Packing 10 % ahead: tried, not kept.
        let mut t = Instant::now();
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let p = run(&mut c, &mut t, packing_serves(110_000.0), 40);
        assert_eq!(&p[3..8], &[Placement::Pack; 5], "{p:?}");
        assert!(p[8..].iter().all(|&x| x == Placement::Spread), "{p:?}");
        // Packing 20 % ahead: kept.
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let p = run(&mut c, &mut t, packing_serves(120_000.0), 40);
        assert!(p[3..].iter().all(|&x| x == Placement::Pack), "{p:?}");
        // Packed, with spreading 10 % ahead: spreading is kept.
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        c.placement = Placement::Pack;
        let p = run(
            &mut c,
            &mut t,
            |p| match p {
                Placement::Pack => 100_000.0,
                Placement::Spread => 110_000.0,
            },
            40,
        );
        assert!(p[3..].iter().all(|&x| x == Placement::Spread), "{p:?}");
    }

    #[test]
    fn where_no_site_proxies_a_tie_goes_to_packing() {
        assert_eq!(pack_margin(true), PACK_MARGIN_PROXY);
        assert_eq!(pack_margin(false), PACK_MARGIN_LOCAL);
        let kept = |packed: f64| {
            let mut t = Instant::now();
            let mut c = Controller::new(t, pack_margin(false));
            let p = run(&mut c, &mut t, packing_serves(packed), 40);
            assert_eq!(p[3], Placement::Pack, "{p:?}");
            if p[3..].iter().all(|&x| x == Placement::Pack) {
                true
            } else {
                assert!(p[8..].iter().all(|&x| x == Placement::Spread), "{p:?}");
                false
            }
        };
        // Ahead, level, or a little behind (what a trial's noise measures
        // when the two serve alike): kept.
        assert!(kept(110_000.0));
        assert!(kept(103_000.0));
        assert!(kept(100_000.0));
        assert!(kept(95_000.0));
        // Clearly behind, or far behind (large files): not kept.
        assert!(!kept(88_000.0));
        assert!(!kept(40_000.0));

        // Packed, spreading tried: it needs its 5 % lead to be kept.
        let spreading_serves = |spread: f64| {
            move |p| match p {
                Placement::Pack => 100_000.0,
                Placement::Spread => spread,
            }
        };
        let mut t = Instant::now();
        let mut c = Controller::new(t, pack_margin(false));
        c.placement = Placement::Pack;
        let p = run(&mut c, &mut t, spreading_serves(103_000.0), 40);
        assert_eq!(&p[3..8], &[Placement::Spread; 5], "{p:?}");
        assert!(p[8..].iter().all(|&x| x == Placement::Pack), "{p:?}");
        let mut c = Controller::new(t, pack_margin(false));
        c.placement = Placement::Pack;
        let p = run(&mut c, &mut t, spreading_serves(110_000.0), 40);
        assert!(p[3..].iter().all(|&x| x == Placement::Spread), "{p:?}");

        // A tie measured on what spreading queued: packing's mean level
        // with spreading, its last epoch 20 % behind: not kept.
        let p = packing_decays(
            pack_margin(false),
            &[110_000.0, 110_000.0, 100_000.0, 100_000.0, 80_000.0],
        );
        assert_eq!(&p[3..8], &[Placement::Pack; 5], "{p:?}");
        assert!(p[8..].iter().all(|&x| x == Placement::Spread), "{p:?}");
    }

    #[test]
    fn a_tie_keeps_what_was_there_and_light_load_tries_nothing() {
        let mut t = Instant::now();
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let p = run(&mut c, &mut t, |_| 100_000.0, 60);
        assert_eq!(*p.last().unwrap(), Placement::Spread);
        let mut c = Controller::new(t, PACK_MARGIN_PROXY);
        let p = run(&mut c, &mut t, |_| 100.0, 60);
        assert!(p.iter().all(|&x| x == Placement::Spread));
    }

    #[test]
    fn hands_every_connection_to_worker_0_to_pack_and_the_excess_to_spread() {
        assert_eq!(hand_overs(Placement::Pack, &[3, 50]), vec![(0, 0), (50, 0)]);
        assert_eq!(
            hand_overs(Placement::Spread, &[100, 0]),
            vec![(50, 1), (0, 1)]
        );
        // The hash's usual unevenness moves nothing.
        assert_eq!(
            hand_overs(Placement::Spread, &[56, 44]),
            vec![(0, 1), (0, 1)]
        );
        assert_eq!(
            hand_overs(Placement::Spread, &[0, 0, 9]),
            vec![(0, 0), (0, 0), (6, 0)]
        );
    }
}
