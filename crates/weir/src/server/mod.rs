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

mod balance;
mod conn;
mod drain;
pub mod http1;
pub mod io;
mod listen;
mod pack;
pub mod zero_copy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::sync::watch;

use crate::config::{AcceptSteering, Config, Http1Engine, RuntimeMode};
use crate::site::{self, Listener};
use crate::tls;

pub use conn::ConnCtx;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Site(#[from] site::SiteError),
    #[error("TLS for {addr}: {source}")]
    Tls {
        addr: SocketAddr,
        source: tls::TlsError,
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

/// Everything a worker needs to serve one listening address.
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    ctx: Arc<ConnCtx>,
}

/// Runs `cfg` until SIGTERM/SIGINT, then shuts down gracefully.
pub fn run(cfg: Config) -> Result<(), ServerError> {
    let sites = site::build_sites(&cfg)?;
    let connections = Arc::new(AtomicUsize::new(0));
    let timeouts = io::Limits::from(&cfg.server.timeouts);

    // Certificates: loaded, issued or ordered in the background; never
    // waits for the network.
    let certs = tls::CertManager::start(&cfg).map_err(|source| ServerError::Tls {
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
    let balance_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
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
            // With "adaptive", a controller thread places the connections
            // (`balance`) and each worker has a mailbox for those handed to it.
            let mut mailboxes = Vec::new();
            if cfg.server.accept == AcceptSteering::Adaptive && workers > 1 {
                let (b, boxes) = balance::Balance::new(workers);
                let mut groups = Vec::new();
                for (j, ep) in endpoints.iter().enumerate() {
                    let dup =
                        per_worker[0][j]
                            .0
                            .try_clone()
                            .map_err(|source| ServerError::Bind {
                                addr: ep.addr,
                                source,
                            })?;
                    groups.push(std::os::fd::OwnedFd::from(dup));
                }
                let proxies = cfg.sites.iter().any(|s| s.handler.proxies());
                handles.push(
                    balance::start(
                        b,
                        groups,
                        balance_stop.clone(),
                        balance::pack_margin(proxies),
                    )
                    .map_err(ServerError::Worker)?,
                );
                mailboxes = boxes.into_iter().map(|rx| Some((b, rx))).collect();
            }
            mailboxes.resize_with(workers, || None);
            for ((i, socks), mailbox) in per_worker.into_iter().enumerate().zip(mailboxes) {
                let stop = stop_rx.clone();
                // With "pack", worker 0 steers each socket group by how busy it is.
                let packs = i == 0 && workers > 1 && cfg.server.accept == AcceptSteering::Pack;
                let mailbox = mailbox.map(|(b, rx)| (b, i, rx));
                let h = std::thread::Builder::new()
                    .name(format!("weir-worker-{i}"))
                    .spawn(move || {
                        let mut rt = tokio::runtime::Builder::new_current_thread();
                        rt.enable_all().max_blocking_threads(BLOCKING_THREADS);
                        if packs {
                            rt.on_thread_park(pack::parking)
                                .on_thread_unpark(pack::unparked);
                        }
                        let rt = rt.build().expect("tokio runtime");
                        rt.block_on(worker(socks, stop, grace, batch, packs, mailbox));
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
                    rt.block_on(worker(socks, stop, grace, batch, false, None));
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
    balance_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in handles.into_iter().chain(h3) {
        let _ = h.join();
    }
    tracing::info!("stopped");
    Ok(())
}

/// One worker: accept on its sockets until told to stop, then drain.
/// `batch`: the most TLS handshakes it answers in one pass (`tls::turns`).
/// `packs`: this is worker 0 with `server.accept = "pack"`; each of its
/// accept loops steers its socket group (`pack`). `mailbox`: with
/// `"adaptive"`, the balance, this worker's index in it and the connections
/// other workers hand to it.
async fn worker(
    socks: Vec<(std::net::TcpListener, Endpoint)>,
    mut stop: watch::Receiver<bool>,
    grace: std::time::Duration,
    batch: usize,
    packs: bool,
    mailbox: Option<(
        &'static balance::Balance,
        usize,
        tokio::sync::mpsc::UnboundedReceiver<conn::Arrival>,
    )>,
) {
    let watcher = Arc::new(drain::Drain::new());
    let turns = crate::tls::turns::Turns::start(batch);
    let mut accept_tasks = Vec::new();
    if let Some((b, i, mut rx)) = mailbox {
        b.enter(i);
        let watcher = watcher.clone();
        let mut stop = stop.clone();
        accept_tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = stop.changed() => break,
                    a = rx.recv() => match a {
                        Some(a) => {
                            conn::resume(a, &watcher);
                            // Every arrival waiting, now: `recv` alone
                            // takes 128 a turn (tokio's budget), and a turn
                            // comes once per pass through the worker's run
                            // queue, which at c10000 over TLS is a fifth of
                            // a second. Clients whose connections were
                            // among 5,000 moving waited seconds for their
                            // next response that way (BENCHMARKS.md §6,
                            // "... moving connections in a handshake
                            // storm").
                            while let Ok(a) = rx.try_recv() {
                                conn::resume(a, &watcher);
                            }
                        }
                        None => break,
                    }
                }
            }
        }));
    }
    for (sock, ep) in socks {
        let listener = match tokio::net::TcpListener::from_std(sock) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("listener {}: {e}", ep.addr);
                continue;
            }
        };
        let mut packer = if packs {
            match pack::Packer::start(&listener) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(
                        "listener {}: accept = \"pack\" unavailable, spreading by hash: {e}",
                        ep.addr
                    );
                    None
                }
            }
        } else {
            None
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
                            if let Some(p) = &mut packer {
                                p.on_accept(&listener);
                            }
                            conn::spawn(stream, peer, ep.addr, ep.ctx.clone(), &watcher, &turns)
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
