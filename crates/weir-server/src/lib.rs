//! Running a validated config: sockets, worker runtimes, signals and
//! graceful shutdown.
//!
//! Two runtime shapes (`server.runtime`), measured against each other in
//! BENCHMARKS.md:
//! - `per-core` (default): one OS thread per worker, each running a
//!   current-thread tokio runtime with its own SO_REUSEPORT socket per
//!   address. The kernel spreads connections; a connection never changes
//!   thread, so nothing on the request path is shared between cores.
//! - `shared`: one multi-threaded work-stealing runtime, one socket per address.
//!
//! On SIGTERM or SIGINT every worker stops accepting, lets in-flight requests
//! finish for `server.grace_period`, then the process exits 0.

pub mod access_log;
mod conn;
mod drain;
pub mod http1;
pub mod http3;
pub mod io;
mod listen;
pub mod pipeline;
pub mod welcome;
pub mod zero_copy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::sync::watch;

use crate::pipeline::Listener;
use weir_config::{AcceptSteering, Config, Http1Engine, RuntimeMode};
use weir_http::worker::Worker;

pub use conn::ConnCtx;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Site(#[from] crate::pipeline::SiteError),
    #[error("TLS for {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: weir_tls::TlsError,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start worker: {0}")]
    Worker(std::io::Error),
    #[error(transparent)]
    Http3(#[from] crate::http3::H3Error),
}

/// Blocking threads per worker (file opens and reads, stat checks). tokio's
/// default is 512: 100 clients asking for a file not yet cached at start-up
/// made 100 threads, each with its own stack and malloc arena, for work that
/// takes microseconds from the page cache; queueing on a few threads is
/// faster and keeps RSS flat.
const BLOCKING_THREADS: usize = 16;

/// Slots of per-worker state (`weir_http::worker::PerWorker`) an owner
/// keeps: one per request worker, and one for HTTP/3, which runs on a
/// thread of its own.
pub(crate) fn worker_slots(cfg: &Config) -> usize {
    cfg.server.workers.max(1) + 1
}

/// HTTP/3's worker: the slot after the request workers'.
pub(crate) fn http3_worker(cfg: &Config) -> Worker {
    Worker::new(cfg.server.workers.max(1))
}

/// Which worker an accepted connection's requests use.
#[derive(Clone, Copy)]
enum Assign {
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

/// Everything a worker needs to serve one listening address.
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    ctx: Arc<ConnCtx>,
}

/// Runs `cfg` until SIGTERM/SIGINT, then shuts down gracefully.
pub fn run(cfg: Config) -> Result<(), ServerError> {
    let sites = crate::pipeline::build_sites(&cfg)?;
    let connections = Arc::new(AtomicUsize::new(0));
    let timeouts = io::Limits::from(&cfg.server.timeouts);

    // Certificates: loaded, issued or ordered in the background; never
    // waits for the network.
    let certs = weir_tls::CertManager::start(&cfg).map_err(|source| ServerError::Tls {
        addr: cfg
            .listeners
            .first()
            .map_or(([0, 0, 0, 0], 0).into(), |l| l.addr),
        source,
    })?;
    let mut endpoints = Vec::new();
    for l in &cfg.listeners {
        let tls = if l.tls {
            Some(certs.acceptor(&cfg, l).map_err(|source| ServerError::Tls {
                addr: l.addr,
                source,
            })?)
        } else {
            None
        };
        let mut listener =
            Listener::new(&sites, &l.sites, l.default_site, cfg.server.limits.clone());
        if l.tls {
            if cfg.tls.http3 {
                listener.set_alt_svc(l.addr.port());
            }
        } else {
            listener.set_acme_challenges(certs.challenges());
        }
        endpoints.push(Endpoint {
            addr: l.addr,
            ctx: Arc::new(
                ConnCtx::new(
                    listener,
                    tls,
                    cfg.server.limits.clone(),
                    timeouts,
                    connections.clone(),
                )
                .accept_proxy_protocol(l.proxy_protocol.clone())
                .fast_http1(cfg.server.http1 == Http1Engine::Fast),
            ),
        });
    }

    let workers = cfg.server.workers.max(1);
    let (stop_tx, stop_rx) = watch::channel(false);
    let grace = cfg.server.grace_period;
    let batch = cfg.server.limits.tls_handshakes;

    let handles = match cfg.server.runtime {
        RuntimeMode::PerCore => {
            // Bind every socket before starting anything, so a port in use is
            // an error at start-up, not a worker dying later.
            let mut per_worker: Vec<Vec<(std::net::TcpListener, Endpoint)>> = Vec::new();
            for ep in &endpoints {
                listen::ensure_unbound(ep.addr).map_err(|source| ServerError::Bind {
                    addr: ep.addr,
                    source,
                })?;
            }
            for _ in 0..workers {
                let mut socks = Vec::new();
                for ep in &endpoints {
                    let s = listen::bind(ep.addr, true).map_err(|source| ServerError::Bind {
                        addr: ep.addr,
                        source,
                    })?;
                    socks.push((s, ep.clone()));
                }
                per_worker.push(socks);
            }
            if cfg.server.accept == AcceptSteering::Cpu {
                for (j, ep) in endpoints.iter().enumerate() {
                    listen::steer_by_cpu(&per_worker[0][j].0, workers).map_err(|source| {
                        ServerError::Bind {
                            addr: ep.addr,
                            source,
                        }
                    })?;
                }
            }
            let mut handles = Vec::new();
            for (i, socks) in per_worker.into_iter().enumerate() {
                let stop = stop_rx.clone();
                let h = std::thread::Builder::new()
                    .name(format!("weir-worker-{i}"))
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .max_blocking_threads(BLOCKING_THREADS)
                            .build()
                            .expect("tokio runtime");
                        rt.block_on(worker(
                            socks,
                            stop,
                            grace,
                            batch,
                            Assign::One(Worker::new(i)),
                        ));
                    })
                    .map_err(ServerError::Worker)?;
                handles.push(h);
            }
            handles
        }
        RuntimeMode::Shared => {
            let mut socks = Vec::new();
            for ep in &endpoints {
                let s = listen::bind(ep.addr, false).map_err(|source| ServerError::Bind {
                    addr: ep.addr,
                    source,
                })?;
                socks.push((s, ep.clone()));
            }
            let stop = stop_rx.clone();
            let h = std::thread::Builder::new()
                .name("weir-main".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(workers)
                        .enable_all()
                        .max_blocking_threads(BLOCKING_THREADS * workers)
                        .build()
                        .expect("tokio runtime");
                    rt.block_on(worker(socks, stop, grace, batch, Assign::ByPeer(workers)));
                })
                .map_err(ServerError::Worker)?;
            vec![h]
        }
    };

    let h3 = if cfg.tls.http3 {
        crate::http3::start(&cfg, &sites, &certs, stop_rx.clone(), grace)?
    } else {
        None
    };

    for ep in &endpoints {
        tracing::info!(
            "listening on {}://{} ({} workers, {:?} runtime, {:?} accept)",
            if ep.ctx.is_tls() { "https" } else { "http" },
            ep.addr,
            workers,
            cfg.server.runtime,
            cfg.server.accept
        );
    }

    // Signals are waited for on this thread with a tiny runtime of its own.
    let signal_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Worker)?;
    signal_rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(ServerError::Worker)?;
        let mut int = signal(SignalKind::interrupt()).map_err(ServerError::Worker)?;
        // SIGHUP's default action ends the process: an operator used to
        // nginx (`kill -HUP` reloads it) or a unit file's `ExecReload`
        // would take the site down. weir ignores it, and says so.
        let mut hup = signal(SignalKind::hangup()).map_err(ServerError::Worker)?;
        loop {
            tokio::select! {
                _ = term.recv() => {
                    tracing::info!("SIGTERM: shutting down gracefully (grace period {:?})", grace);
                    break;
                }
                _ = int.recv() => {
                    tracing::info!("SIGINT: shutting down gracefully (grace period {:?})", grace);
                    break;
                }
                _ = hup.recv() => tracing::warn!(
                    "SIGHUP ignored: weir does not reload its configuration on a signal; \
                     restart it to apply a changed config (SIGTERM stops it gracefully)"
                ),
            }
        }
        Ok::<(), ServerError>(())
    })?;
    let _ = stop_tx.send(true);
    for h in handles.into_iter().chain(h3) {
        let _ = h.join();
    }
    tracing::info!("stopped");
    Ok(())
}

/// One worker: accept on its sockets until told to stop, then drain.
/// `batch`: the most TLS handshakes it answers in one pass (`weir_tls::turns`).
async fn worker(
    socks: Vec<(std::net::TcpListener, Endpoint)>,
    mut stop: watch::Receiver<bool>,
    grace: std::time::Duration,
    batch: usize,
    assign: Assign,
) {
    let watcher = Arc::new(drain::Drain::new());
    let turns = weir_tls::turns::Turns::start(batch);
    let mut accept_tasks = Vec::new();
    for (sock, ep) in socks {
        let listener = match tokio::net::TcpListener::from_std(sock) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("listener {}: {e}", ep.addr);
                continue;
            }
        };
        let watcher = watcher.clone();
        let turns = turns.clone();
        let mut stop = stop.clone();
        accept_tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = stop.changed() => break,
                    r = listener.accept() => match r {
                        Ok((stream, peer)) => {
                            let worker = assign.worker(peer);
                            conn::spawn(stream, peer, ep.addr, ep.ctx.clone(), worker, &watcher, &turns)
                        }
                        Err(e) => {
                            // EMFILE and friends: back off instead of spinning.
                            tracing::warn!("accept on {}: {e}", ep.addr);
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        }));
    }
    let _ = stop.wait_for(|s| *s).await;
    for t in accept_tasks {
        let _ = t.await;
    }
    let drain = match Arc::try_unwrap(watcher) {
        Ok(g) => g,
        Err(_) => return,
    };
    if tokio::time::timeout(grace, drain.drain()).await.is_err() {
        tracing::warn!("grace period over: closing connections still open");
    }
}
