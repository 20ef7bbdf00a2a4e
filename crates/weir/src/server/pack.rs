//! `server.accept = "pack"`: new connections go to the first worker while it
//! keeps up, and are spread by the kernel's hash while it is saturated.
//!
//! This is what nginx's shared accept socket does by accident (the worker
//! that is idle takes the connection, and under light load that is usually
//! the same one), made deliberate: a classic BPF program on the SO_REUSEPORT
//! group returns either socket 0 (pack) or an index past the end, which makes
//! the kernel fall back to its own 4-tuple hash (spread). Worker 0 measures
//! how busy it is from its runtime's park and unpark hooks, and its accept
//! loop switches the program when the answer changes. No other worker takes
//! part, and nothing runs per request.
//!
//! Why: a worker that serves cheap requests (static files from memory) spends
//! more on being woken than on the request when its connections are spread
//! thin; on a machine it shares with other busy processes (a load generator,
//! an application server), every extra runnable weir thread also takes a CPU
//! from them. Packing until the first worker saturates avoids both.

use std::cell::Cell;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::libc;

/// The span over which worker 0's busy share is measured.
const WINDOW: Duration = Duration::from_millis(10);
/// Busy share at or above which new connections are spread.
const SPREAD_AT: f64 = 0.9;
/// Busy share at or below which they are packed again.
const PACK_AT: f64 = 0.5;
/// Connections open on worker 0 at which new ones are spread whatever its
/// load: keep-alive connections never move, so this bounds what a burst on
/// the packed ones can put on a single worker (nginx, which packs the same
/// way by accident, has no such bound).
const PACK_MAX_CONNS: usize = 256;

/// How worker 0 has been spending its time (its runtime's hooks write it).
struct Load {
    /// When the current run began; `None` while parked.
    running_since: Cell<Option<Instant>>,
    window_start: Cell<Instant>,
    busy_in_window: Cell<Duration>,
    /// Busy share of the last complete window.
    last: Cell<f64>,
}

thread_local! {
    static OPEN_HERE: Cell<usize> = const { Cell::new(0) };
    static LOAD: Load = Load {
        running_since: Cell::new(Some(Instant::now())),
        window_start: Cell::new(Instant::now()),
        busy_in_window: Cell::new(Duration::ZERO),
        last: Cell::new(0.0),
    };
}

impl Load {
    fn close_window_if_due(&self, now: Instant) {
        let elapsed = now.duration_since(self.window_start.get());
        if elapsed >= WINDOW {
            self.last
                .set(self.busy_in_window.get().as_secs_f64() / elapsed.as_secs_f64());
            self.window_start.set(now);
            self.busy_in_window.set(Duration::ZERO);
        }
    }
}

/// For the runtime's `on_thread_unpark`.
pub fn unparked() {
    let now = Instant::now();
    LOAD.with(|l| {
        l.close_window_if_due(now);
        l.running_since.set(Some(now));
    });
}

/// For the runtime's `on_thread_park`.
pub fn parking() {
    let now = Instant::now();
    LOAD.with(|l| {
        if let Some(since) = l.running_since.take() {
            // The part of this run inside the current window.
            let from = since.max(l.window_start.get());
            l.busy_in_window
                .set(l.busy_in_window.get() + now.saturating_duration_since(from));
        }
        l.close_window_if_due(now);
    });
}

/// The calling worker's busy share: 1.0 if it has run without a break for a
/// whole window, else that of its last complete window. Busy is wall time
/// between unpark and park, so time spent waiting for a CPU counts: on a
/// crowded machine worker 0 looks busier than it is and spreads sooner (a
/// thread CPU clock would be exact, at a system call per park).
fn busy_share(now: Instant) -> f64 {
    LOAD.with(|l| match l.running_since.get() {
        Some(since) if now.duration_since(since) >= WINDOW => 1.0,
        _ => l.last.get(),
    })
}

/// Counts a client connection as open on the worker thread that created it,
/// until dropped (on the same thread: per-core runtimes never move a task).
pub struct OpenHere(());

impl OpenHere {
    pub fn new() -> OpenHere {
        OPEN_HERE.with(|c| c.set(c.get() + 1));
        super::balance::connection(1);
        OpenHere(())
    }
}

impl Drop for OpenHere {
    fn drop(&mut self) {
        let _ = OPEN_HERE.try_with(|c| c.set(c.get().saturating_sub(1)));
        super::balance::connection(-1);
    }
}

/// Which way new connections of one listening group are going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pack,
    Spread,
}

/// The next mode, given the current one, worker 0's busy share and the
/// client connections open on it.
pub fn next(mode: Mode, busy: f64, open: usize) -> Mode {
    match mode {
        Mode::Pack if busy >= SPREAD_AT || open >= PACK_MAX_CONNS => Mode::Spread,
        Mode::Spread if busy <= PACK_AT && open < PACK_MAX_CONNS / 2 => Mode::Pack,
        m => m,
    }
}

/// The steering of one listening group, owned by worker 0's accept loop.
pub struct Packer {
    mode: Mode,
}

impl Packer {
    /// Starts packing: every new connection of the group goes to `first`,
    /// the group's first socket (worker 0's).
    pub fn start(first: &impl AsFd) -> io::Result<Packer> {
        attach(first, 0)?;
        Ok(Packer { mode: Mode::Pack })
    }

    /// Called by worker 0 on each connection it accepts: switches the group
    /// if worker 0's load says so. A failed switch is logged and the group
    /// keeps its mode (both modes serve every connection).
    pub fn on_accept(&mut self, sock: &impl AsFd) {
        let open = OPEN_HERE.with(Cell::get);
        let want = next(self.mode, busy_share(Instant::now()), open);
        if want == self.mode {
            return;
        }
        let ret = match want {
            Mode::Pack => 0,
            // Past the end of any group: the kernel falls back to its hash.
            Mode::Spread => u32::MAX,
        };
        match attach(sock, ret) {
            Ok(()) => {
                tracing::debug!("accept: {want:?} ({open} connections open on worker 0)");
                self.mode = want;
            }
            Err(e) => tracing::warn!("accept: cannot switch to {want:?}: {e}"),
        }
    }
}

/// Attaches the one-instruction program `ret k` to the group of `sock`.
pub(super) fn attach(sock: &impl AsFd, k: u32) -> io::Result<()> {
    let mut prog = [libc::sock_filter {
        code: 0x06, // BPF_RET|BPF_K
        jt: 0,
        jf: 0,
        k,
    }];
    super::listen::attach_program(sock, &mut prog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn spreads_when_saturated_or_full_and_packs_again_only_when_well_below() {
        assert_eq!(next(Mode::Pack, 0.0, 0), Mode::Pack);
        assert_eq!(next(Mode::Pack, 0.85, 255), Mode::Pack);
        assert_eq!(next(Mode::Pack, 0.9, 10), Mode::Spread);
        assert_eq!(next(Mode::Pack, 0.1, 256), Mode::Spread);
        assert_eq!(next(Mode::Spread, 0.7, 10), Mode::Spread);
        assert_eq!(next(Mode::Spread, 0.1, 128), Mode::Spread);
        assert_eq!(next(Mode::Spread, 0.5, 127), Mode::Pack);
    }

    #[test]
    fn open_connections_are_counted_on_their_thread() {
        std::thread::spawn(|| {
            let a = OpenHere::new();
            let b = OpenHere::new();
            assert_eq!(OPEN_HERE.with(Cell::get), 2);
            drop(a);
            assert_eq!(OPEN_HERE.with(Cell::get), 1);
            drop(b);
            assert_eq!(OPEN_HERE.with(Cell::get), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_busy_share_follows_park_and_unpark() {
        // A fresh thread starts out running.
        std::thread::spawn(|| {
            parking();
            std::thread::sleep(WINDOW * 2);
            unparked();
            assert!(busy_share(Instant::now()) < 0.2, "idle window");
            // Runs without parking for more than a window: saturated.
            let t = Instant::now();
            while t.elapsed() < WINDOW + Duration::from_millis(2) {}
            assert_eq!(busy_share(Instant::now()), 1.0);
            // Busy for a whole window with short parks: the closed window says so.
            parking();
            unparked();
            let t = Instant::now();
            while t.elapsed() < WINDOW + Duration::from_millis(2) {}
            parking();
            unparked();
            assert!(
                busy_share(Instant::now()) > 0.9,
                "{}",
                busy_share(Instant::now())
            );
        })
        .join()
        .unwrap();
    }

    fn group(n: usize) -> Vec<TcpListener> {
        let first = crate::server::listen::bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let mut v = vec![first];
        for _ in 1..n {
            v.push(crate::server::listen::bind(addr, true).unwrap());
        }
        v
    }

    /// How many pending connections each socket of `socks` holds.
    fn accepted(socks: &[TcpListener], total: usize) -> Vec<usize> {
        let mut counts = vec![0; socks.len()];
        let t = Instant::now();
        while counts.iter().sum::<usize>() < total {
            assert!(t.elapsed() < Duration::from_secs(5), "{counts:?}");
            for (i, s) in socks.iter().enumerate() {
                while s.accept().is_ok() {
                    counts[i] += 1;
                }
            }
        }
        counts
    }

    #[test]
    fn pack_sends_every_connection_to_the_first_socket_and_spread_to_all() {
        let socks = group(2);
        let addr = socks[0].local_addr().unwrap();
        let p = Packer::start(&socks[0]).unwrap();
        assert_eq!(p.mode, Mode::Pack);
        let conns: Vec<_> = (0..40)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        assert_eq!(accepted(&socks, 40), vec![40, 0]);
        drop(conns);
        attach(&socks[1], u32::MAX).unwrap();
        let conns: Vec<_> = (0..40)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let counts = accepted(&socks, 40);
        // The kernel's hash: both get some (all 40 on one has odds of 2^-39).
        assert!(counts[0] > 0 && counts[1] > 0, "{counts:?}");
        drop(conns);
    }
}
