//! A worker's accept loops: one per listening socket it holds, each handing
//! connections to `conn` and draining its own connections when it stops. A
//! reload adds and removes sockets through [`Command`]s; nothing here reads
//! the config or decides what a request gets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot, watch};

use crate::conn::{self, ConnCtx};
use crate::drain::Drain;
use weir_http::worker::Worker;

/// One listening address as a worker serves it: the connection context a
/// reload replaces (new connections take the current one).
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub addr: SocketAddr,
    pub ctx: Arc<ArcSwap<ConnCtx>>,
}

/// What a reload tells a worker.
pub(crate) enum Command {
    /// Accept on this socket too.
    Add(std::net::TcpListener, Endpoint),
    /// Stop accepting on `addr`; its connections finish their requests.
    Remove(SocketAddr),
}

/// Which worker an accepted connection's requests use.
#[derive(Clone, Copy)]
pub(crate) enum Assign {
    /// Per-core: the thread that accepted it.
    One(Worker),
    /// Shared: the thread is the scheduler's choice, so the client's port
    /// spreads connections over the `n` slots (nothing shared to count with).
    ByPeer(usize),
}

impl Assign {
    fn worker(self, peer: SocketAddr) -> Worker {
        match self {
            Assign::One(w) => w,
            Assign::ByPeer(n) => Worker::new(usize::from(peer.port()) % n.max(1)),
        }
    }
}

/// How a worker's loops run.
#[derive(Clone, Copy)]
pub(crate) struct Settings {
    pub grace: Duration,
    /// The most TLS handshakes answered in one pass (`weir_tls::turns`).
    pub batch: usize,
    pub assign: Assign,
}

struct Accepting {
    addr: SocketAddr,
    remove: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// One worker: accepts on its sockets, and on the ones reloads add, until
/// `stop`; then every loop drains its connections.
pub(crate) async fn worker(
    socks: Vec<(std::net::TcpListener, Endpoint)>,
    mut cmds: mpsc::UnboundedReceiver<Command>,
    stop: watch::Receiver<bool>,
    set: Settings,
) {
    let turns = weir_tls::turns::Turns::start(set.batch);
    let mut loops: Vec<Accepting> = Vec::new();
    let start = |sock: std::net::TcpListener, ep: Endpoint| {
        let (remove, removed) = oneshot::channel();
        let addr = ep.addr;
        let task = tokio::spawn(accept_loop(
            sock,
            ep,
            stop.clone(),
            removed,
            turns.clone(),
            set,
        ));
        Accepting { addr, remove, task }
    };
    for (sock, ep) in socks {
        loops.push(start(sock, ep));
    }
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut stopping) => break,
            cmd = cmds.recv() => match cmd {
                Some(Command::Add(sock, ep)) => loops.push(start(sock, ep)),
                Some(Command::Remove(addr)) => {
                    // The loop drains by itself; it is not waited for here.
                    let (gone, kept): (Vec<_>, Vec<_>) =
                        loops.into_iter().partition(|l| l.addr == addr);
                    loops = kept;
                    for l in gone {
                        let _ = l.remove.send(());
                    }
                }
                None => break,
            },
        }
    }
    for l in loops {
        let _ = l.task.await;
    }
}

/// Accepts on one socket until the server stops or a reload removes its
/// address, then closes the socket and lets its connections finish within
/// the grace period.
async fn accept_loop(
    sock: std::net::TcpListener,
    ep: Endpoint,
    mut stop: watch::Receiver<bool>,
    mut removed: oneshot::Receiver<()>,
    turns: weir_tls::turns::Turns,
    set: Settings,
) {
    let listener = match tokio::net::TcpListener::from_std(sock) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("listener {}: {e}", ep.addr);
            return;
        }
    };
    let drain = Drain::new();
    loop {
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            _ = &mut removed => break,
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let worker = set.assign.worker(peer);
                    let ctx = ep.ctx.load_full();
                    conn::spawn(stream, peer, ep.addr, ctx, worker, &drain, &turns)
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept on {}: {e}", ep.addr);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(set.grace, drain.drain())
        .await
        .is_err()
    {
        tracing::warn!(
            "{}: grace period over: closing connections still open",
            ep.addr
        );
    }
}

/// Resolves once `stop` is true; holds no borrow of the channel afterwards.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
