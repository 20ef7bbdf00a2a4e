//! Running a validated config: sockets, worker runtimes, signals and
//! graceful shutdown.
//!
//! Two runtime shapes (`server.runtime`):
//! - `per-core` (default): one OS thread per worker, each running a
//!   current-thread tokio runtime with its own SO_REUSEPORT socket per
//!   address (TCP, and UDP for HTTP/3). The kernel spreads connections; a
//!   connection never changes thread, so nothing on the request path is
//!   shared between cores.
//! - `shared`: one multi-threaded work-stealing runtime, one socket per address.
//!
//! On SIGTERM or SIGINT every worker stops accepting, lets in-flight requests
//! finish for `server.grace_period`, then the process exits 0. SIGHUP
//! reloads the config file ([`Server::reload`]).

mod accept;
pub mod access_log;
pub(crate) mod ask;
mod conn;
mod drain;
pub mod http1;
pub mod http3;
pub mod io;
pub mod layer4;
mod listen;
pub mod notify;
pub mod pipeline;
mod server;
mod trace_export;
pub mod upgrade;
pub mod welcome;
pub mod zero_copy;

use std::net::SocketAddr;
use std::sync::Arc;

use weir_config::Config;

pub use conn::{ConnCtx, serve_one};
pub use server::{ReloadError, ReloadRecord, ReloadReport, Server};

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
    #[error(transparent)]
    Cluster(#[from] weir_cluster::ClusterError),
}

/// Slots of per-worker state (`weir_http::worker::PerWorker`) an owner
/// keeps: one per worker (HTTP/3 runs on the workers too).
pub(crate) fn worker_slots(cfg: &Config) -> usize {
    cfg.server.workers.max(1)
}

/// Runs `cfg` until SIGTERM/SIGINT, then shuts down gracefully; SIGHUP
/// reads `path` again and reloads it; SIGUSR2 upgrades to the binary now at
/// this one's path ([`Server::upgrade`]). `inherited`: the sockets an
/// upgrading process handed over. `with` is called once the server runs
/// (the binary starts the admin API there).
pub fn run(
    cfg: Config,
    path: Option<std::path::PathBuf>,
    mut inherited: upgrade::Inherited,
    with: impl FnOnce(&Arc<Server>),
) -> Result<(), ServerError> {
    let grace = cfg.server.grace_period;
    let server = Server::start(cfg, path, &mut inherited)?;
    let mut exit = server.exit_requested();

    // Signals are waited for on this thread with a tiny runtime of its own.
    let signal_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Worker)?;
    signal_rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Handlers first: until they are installed, SIGHUP's and SIGUSR2's
        // default action ends the process, and a `systemctl reload` right
        // after READY would take weir down.
        let mut term = signal(SignalKind::terminate()).map_err(ServerError::Worker)?;
        let mut int = signal(SignalKind::interrupt()).map_err(ServerError::Worker)?;
        let mut hup = signal(SignalKind::hangup()).map_err(ServerError::Worker)?;
        let mut usr1 = signal(SignalKind::user_defined1()).map_err(ServerError::Worker)?;
        let mut usr2 = signal(SignalKind::user_defined2()).map_err(ServerError::Worker)?;
        with(&server);
        // Ready: systemd, and the process this one replaces, are told.
        inherited.signal_ready();
        if inherited.upgraded() {
            notify::main_pid(std::process::id());
        } else {
            notify::ready();
        }
        drop(inherited);
        loop {
            tokio::select! {
                _ = exit.wait_for(|e| *e) => break,
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1: reopening the access logs");
                    access_log::reopen();
                }
                _ = usr2.recv() => {
                    tracing::info!("SIGUSR2: upgrading to the binary at this one's path");
                    let s = server.clone();
                    let _ = tokio::task::spawn_blocking(move || s.upgrade()).await;
                }
                _ = term.recv() => {
                    tracing::info!("SIGTERM: shutting down gracefully (grace period {:?})", grace);
                    break;
                }
                _ = int.recv() => {
                    tracing::info!("SIGINT: shutting down gracefully (grace period {:?})", grace);
                    break;
                }
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading the config");
                    let s = server.clone();
                    // Reading files and building sites is blocking work.
                    let _ = tokio::task::spawn_blocking(move || {
                        notify::reloading();
                        let _ = s.reload_file(None);
                        notify::ready();
                    })
                    .await;
                }
            }
        }
        Ok::<(), ServerError>(())
    })?;
    notify::stopping();
    server.shutdown();
    tracing::info!("stopped");
    Ok(())
}
