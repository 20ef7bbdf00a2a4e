//! The running server: its sockets, workers and the config they serve, and
//! the one way that config changes, [`Server::reload`] (SIGHUP, `weir
//! reload` and the admin API all end there).
//!
//! A reload builds everything the new config needs first (sites, TLS
//! acceptors, sockets for new addresses) and changes nothing if any of it
//! fails. Then it swaps: each address's sites (connections read them at
//! their next request), its connection context (for the next connection),
//! new sockets to the workers, removed addresses told to stop and drain.
//! Listening sockets of addresses that stay are never closed. Never called
//! on a worker thread: it takes a lock and may read files.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, watch};

use crate::accept::{self, Assign, Command, Endpoint, Settings};
use crate::conn::ConnCtx;
use crate::http3::H3;
use crate::pipeline::{Current, Listener, Registry, Site};
use crate::upgrade::{Handover, Inherited, UpgradeError};
use crate::{ServerError, io, listen};
use weir_config::{AcceptSteering, Config, ConfigErrors, ListenerConfig, RuntimeMode};
use weir_http::metrics::ConnCounts;
use weir_http::sync::lock;
use weir_http::worker::Worker;
use weir_tls::CertManager;

/// Blocking threads per worker (file opens and reads, stat checks). tokio's
/// default is 512: 100 clients asking for a file not yet cached at start-up
/// made 100 threads, each with its own stack and malloc arena, for work that
/// takes microseconds from the page cache; queueing on a few threads is
/// faster and keeps RSS flat.
const BLOCKING_THREADS: usize = 16;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}")]
    Config(ConfigErrors),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("no config file to read again: weir was started without one")]
    NoFile,
}

/// What a reload did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReloadReport {
    /// Sites kept as they were (their connections, caches and logs).
    pub sites_kept: usize,
    /// Sites built anew.
    pub sites_new: usize,
    pub listeners_added: Vec<SocketAddr>,
    pub listeners_removed: Vec<SocketAddr>,
    /// Settings the new config changes that only a restart (or `weir
    /// upgrade`) applies.
    pub restart_needed: Vec<String>,
    /// Whether the certificate manager was started again (TLS settings
    /// changed); otherwise certificates and ACME state carried over.
    pub certificates_reloaded: bool,
    /// Whether `[cache]` changed, so the cache starts empty.
    pub cache_emptied: bool,
}

/// The last reload, for the admin API and the status page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReloadRecord {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub ok: bool,
    /// The errors of a refused config, or a summary of what changed.
    pub message: String,
}

/// Settings a running process keeps until it is restarted.
#[derive(Clone, PartialEq)]
struct Fixed {
    workers: usize,
    runtime: RuntimeMode,
    accept: AcceptSteering,
    http3: bool,
    /// The admin API is bound once, at start.
    admin: weir_config::admin::AdminConfig,
    /// The process joins its cluster once, at start.
    cluster: Option<weir_config::cluster::ClusterConfig>,
}

impl Fixed {
    fn of(cfg: &Config) -> Fixed {
        Fixed {
            workers: cfg.server.workers.max(1),
            runtime: cfg.server.runtime,
            accept: cfg.server.accept,
            http3: cfg.tls.http3,
            admin: cfg.admin.clone(),
            cluster: cfg.cluster.clone(),
        }
    }

    fn differences(&self, new: &Fixed) -> Vec<String> {
        let mut out = Vec::new();
        if self.workers != new.workers {
            out.push(format!(
                "server.workers ({} → {})",
                self.workers, new.workers
            ));
        }
        if self.runtime != new.runtime {
            out.push("server.runtime".into());
        }
        if self.accept != new.accept {
            out.push("server.accept".into());
        }
        if self.http3 != new.http3 {
            out.push("tls.http3".into());
        }
        if self.admin != new.admin {
            out.push("[admin]".into());
        }
        if self.cluster != new.cluster {
            out.push("[cluster]".into());
        }
        out
    }
}

/// One listening address.
struct Addr {
    tls: bool,
    /// The sites connections read per request.
    listener: Arc<Current>,
    /// What new connections are given.
    ctx: Arc<ArcSwap<ConnCtx>>,
    /// A duplicate of every socket of the address (one per worker under
    /// the per-core runtime), for a binary upgrade to hand over.
    socks: Vec<std::net::TcpListener>,
}

/// The config being served and what was built from it.
struct State {
    cfg: Arc<Config>,
    /// The file it came from, read again on SIGHUP.
    path: Option<PathBuf>,
    sites: Vec<Arc<Site>>,
    certs: Arc<CertManager>,
    /// Cached responses, kept across reloads while `[cache]` is unchanged.
    cache: Arc<weir_cache::Store>,
    addrs: HashMap<SocketAddr, Addr>,
    last_reload: Option<ReloadRecord>,
}

/// A running weir.
pub struct Server {
    state: Mutex<State>,
    fixed: Fixed,
    /// One command channel per worker.
    workers: Vec<mpsc::UnboundedSender<Command>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    stop: watch::Sender<bool>,
    h3: Mutex<Option<H3>>,
    /// Open connections across the whole process (the connection limit).
    connections: Arc<AtomicUsize>,
    started: SystemTime,
    /// Request counts by site and route.
    pub registry: Arc<Registry>,
    /// Connections by protocol, TLS handshakes.
    pub conns: Arc<ConnCounts>,
    reloads: [AtomicU64; 2],
    /// Turns true when the process should drain and exit (after an upgrade).
    exit: watch::Sender<bool>,
    /// The binary and arguments this process was started with, which an
    /// upgrade starts again.
    exe: Option<PathBuf>,
    args: Vec<std::ffi::OsString>,
    /// The admin API's socket, for an upgrade to hand over.
    admin_socket: Mutex<Option<std::os::fd::OwnedFd>>,
    upgrading: std::sync::atomic::AtomicBool,
    /// This process as a member of its cluster (`[cluster]`; a change
    /// needs a restart).
    cluster: Option<Arc<weir_cluster::Cluster>>,
}

/// A listener's sites and connection context, built before anything changes.
struct Built {
    l: ListenerConfig,
    listener: Listener,
    acceptor: Option<weir_tls::Acceptor>,
    quic: Option<quinn::ServerConfig>,
}

/// Whether the certificate manager of `old` serves `new` as it is: the
/// same global TLS settings and the same certificate sources.
fn same_tls(old: &Config, new: &Config) -> bool {
    let sources = |c: &Config| -> Vec<weir_config::TlsConfig> {
        c.sites.iter().filter_map(|s| s.tls.clone()).collect()
    };
    old.tls == new.tls && sources(old) == sources(new)
}

impl Server {
    /// Binds every address, starts the workers and serves `cfg`. `path`:
    /// the file `cfg` was read from, read again on SIGHUP.
    /// `inherited`: sockets handed over by the process this one upgrades.
    pub fn start(
        cfg: Config,
        path: Option<PathBuf>,
        inherited: &mut Inherited,
    ) -> Result<Arc<Server>, ServerError> {
        let fixed = Fixed::of(&cfg);
        // The cluster first: the limits built below count across it, and
        // certificates are ordered under its locks.
        let cluster = match &cfg.cluster {
            Some(c) => Some(weir_cluster::Cluster::start(c.clone())?),
            None => None,
        };
        let slots = crate::worker_slots(&cfg);
        let registry = Arc::new(Registry::new(slots));
        let conns = Arc::new(ConnCounts::new(slots));
        let cache = weir_cache::Store::new(&cfg.cache, slots);
        let sites = crate::pipeline::build_sites(&cfg, &[], &registry, &cache)?;
        crate::trace_export::configure(cfg.traces.as_ref());
        // Certificates: loaded, issued or ordered in the background; never
        // waits for the network.
        let certs = start_certs(&cfg)?;
        let connections = Arc::new(AtomicUsize::new(0));
        let built = build_listeners(&cfg, &sites, &certs)?;

        // Bind every socket before starting anything, so a port in use is
        // an error at start-up, not a worker dying later.
        let mut addrs = HashMap::new();
        let mut per_worker: Vec<Vec<(std::net::TcpListener, Endpoint)>> =
            (0..fixed.workers).map(|_| Vec::new()).collect();
        let mut quic = Vec::new();
        for b in built {
            let socks = match inherited.tcp.remove(&b.l.addr) {
                Some(taken) => {
                    tracing::info!(
                        "{}: serving {} sockets handed over at start",
                        b.l.addr,
                        taken.len()
                    );
                    adopt(&fixed, b.l.addr, taken)?
                }
                None => bind_addr(&fixed, b.l.addr)?,
            };
            let (listener, ctx) =
                new_addr(&cfg, &b.l, b.listener, b.acceptor, &connections, &conns);
            let ep = Endpoint {
                addr: b.l.addr,
                ctx: ctx.clone(),
            };
            let dups = dup_all(&socks, b.l.addr)?;
            for (i, s) in socks.into_iter().enumerate() {
                per_worker[i % fixed.workers].push((s, ep.clone()));
            }
            if let Some(q) = b.quic {
                quic.push((b.l.addr, q, listener.clone()));
            }
            addrs.insert(
                b.l.addr,
                Addr {
                    tls: b.l.tls,
                    listener,
                    ctx,
                    socks: dups,
                },
            );
        }

        let (stop, stop_rx) = watch::channel(false);
        // A worker's runtime ends once HTTP/3 has finished too (its
        // endpoints run there); the sender goes to HTTP/3, or is dropped.
        let (h3_done, h3_done_rx) = watch::channel(false);
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let set = |assign| Settings {
            grace: cfg.server.grace_period,
            batch: cfg.server.limits.tls_handshakes,
            assign,
        };
        let mut workers = Vec::new();
        let mut threads = Vec::new();
        match fixed.runtime {
            RuntimeMode::PerCore => {
                for (i, socks) in per_worker.into_iter().enumerate() {
                    let (tx, rx) = mpsc::unbounded_channel();
                    workers.push(tx);
                    let stop = stop_rx.clone();
                    let set = set(Assign::One(Worker::new(i)));
                    let (handle_tx, mut h3_done) = (handle_tx.clone(), h3_done_rx.clone());
                    let h = std::thread::Builder::new()
                        .name(format!("weir-worker-{i}"))
                        .spawn(move || {
                            let rt = tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .max_blocking_threads(BLOCKING_THREADS)
                                .build()
                                .expect("tokio runtime");
                            let _ = handle_tx.send((i, rt.handle().clone()));
                            drop(handle_tx);
                            rt.block_on(async move {
                                accept::worker(socks, rx, stop, set).await;
                                let _ = h3_done.wait_for(|d| *d).await;
                            });
                        })
                        .map_err(ServerError::Worker)?;
                    threads.push(h);
                }
            }
            RuntimeMode::Shared => {
                let socks = per_worker.into_iter().flatten().collect();
                let (tx, rx) = mpsc::unbounded_channel();
                workers.push(tx);
                let stop = stop_rx.clone();
                let n = fixed.workers;
                let set = set(Assign::ByPeer(n));
                let (handle_tx, mut h3_done) = (handle_tx.clone(), h3_done_rx.clone());
                let h = std::thread::Builder::new()
                    .name("weir-main".into())
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(n)
                            .enable_all()
                            .max_blocking_threads(BLOCKING_THREADS * n)
                            .build()
                            .expect("tokio runtime");
                        // Every HTTP/3 endpoint runs on the shared runtime.
                        for i in 0..n {
                            let _ = handle_tx.send((i, rt.handle().clone()));
                        }
                        drop(handle_tx);
                        rt.block_on(async move {
                            accept::worker(socks, rx, stop, set).await;
                            let _ = h3_done.wait_for(|d| *d).await;
                        });
                    })
                    .map_err(ServerError::Worker)?;
                threads.push(h);
            }
        }

        drop(handle_tx);
        drop(h3_done_rx);
        let mut handles: Vec<(usize, tokio::runtime::Handle)> = handle_rx.iter().collect();
        handles.sort_by_key(|(i, _)| *i);
        let handles: Vec<_> = handles.into_iter().map(|(_, h)| h).collect();
        let h3 = if fixed.http3 && handles.len() == fixed.workers {
            let mut h3 = H3::new(
                handles,
                cfg.tls.early_data,
                cfg.server.grace_period,
                conns.clone(),
                h3_done,
            );
            for (addr, server, listener) in quic {
                let taken = inherited.udp.remove(&addr).unwrap_or_default();
                let socks = H3::bind_or_take(addr, taken, fixed.workers)?;
                h3.serve(addr, socks, server, listener);
            }
            Some(h3)
        } else {
            if fixed.http3 {
                return Err(ServerError::Worker(std::io::Error::other(
                    "a worker ended before it started",
                )));
            }
            None
        };

        for l in &cfg.listeners {
            tracing::info!(
                "listening on {} ({} workers, {:?} runtime, {:?} accept)",
                describe(&cfg, l),
                fixed.workers,
                fixed.runtime,
                fixed.accept
            );
        }

        let server = Arc::new(Server {
            state: Mutex::new(State {
                cfg: Arc::new(cfg),
                path,
                sites,
                certs,
                cache,
                addrs,
                last_reload: None,
            }),
            fixed,
            workers,
            threads: Mutex::new(threads),
            stop,
            h3: Mutex::new(h3),
            connections,
            started: SystemTime::now(),
            registry,
            conns,
            reloads: Default::default(),
            exit: watch::channel(false).0,
            exe: std::env::current_exe().ok(),
            args: std::env::args_os().skip(1).collect(),
            admin_socket: Mutex::new(None),
            upgrading: Default::default(),
            cluster,
        });
        if let Some(c) = &server.cluster {
            // Purges from the other instances reach whichever store serves now.
            let weak = Arc::downgrade(&server);
            c.on_purge(Box::new(move |what| match weak.upgrade() {
                Some(s) => s.cache().invalidate(what),
                None => Ok(0),
            }));
        }
        Ok(server)
    }

    /// This process's cluster, when `[cluster]` is set.
    pub fn cluster(&self) -> Option<&Arc<weir_cluster::Cluster>> {
        self.cluster.as_ref()
    }

    /// The config being served.
    pub fn config(&self) -> Arc<Config> {
        lock(&self.state).cfg.clone()
    }

    /// The file the config came from, if any.
    pub fn config_path(&self) -> Option<PathBuf> {
        lock(&self.state).path.clone()
    }

    /// The sites being served.
    pub fn sites(&self) -> Vec<Arc<Site>> {
        lock(&self.state).sites.clone()
    }

    /// The store of cached responses.
    pub fn cache(&self) -> Arc<weir_cache::Store> {
        lock(&self.state).cache.clone()
    }

    /// The certificate manager serving the current config.
    pub fn certificates(&self) -> Arc<CertManager> {
        lock(&self.state).certs.clone()
    }

    pub fn last_reload(&self) -> Option<ReloadRecord> {
        lock(&self.state).last_reload.clone()
    }

    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Reads the config file again (`path`, or the one the running config
    /// came from) and reloads it.
    pub fn reload_file(&self, path: Option<PathBuf>) -> Result<ReloadReport, ReloadError> {
        let path = match path.or_else(|| self.config_path()) {
            Some(p) => p,
            None => {
                self.record(false, ReloadError::NoFile.to_string());
                return Err(ReloadError::NoFile);
            }
        };
        match weir_config::load_file_with(&path, &weir_tls::CertFiles) {
            Ok(cfg) => self.reload(cfg, Some(path)),
            Err(errs) => {
                self.record(false, errs.to_string());
                tracing::error!("reload refused, the running config stays:\n{errs}");
                Err(ReloadError::Config(errs))
            }
        }
    }

    /// Serves `cfg` from now on (see the module's comment). `path`: the file
    /// it came from (`None` keeps the current one for the next SIGHUP).
    pub fn reload(&self, cfg: Config, path: Option<PathBuf>) -> Result<ReloadReport, ReloadError> {
        let r = self.try_reload(cfg, path);
        match &r {
            Ok(rep) => {
                let mut msg = format!(
                    "reloaded: {} sites kept, {} new",
                    rep.sites_kept, rep.sites_new
                );
                for a in &rep.listeners_added {
                    msg.push_str(&format!("; listening on {a}"));
                }
                for a in &rep.listeners_removed {
                    msg.push_str(&format!("; stopped listening on {a}"));
                }
                if rep.certificates_reloaded {
                    msg.push_str("; certificates reloaded");
                }
                if rep.cache_emptied {
                    msg.push_str("; [cache] changed: a new, empty cache");
                }
                if !rep.restart_needed.is_empty() {
                    msg.push_str(&format!(
                        "; needs a restart to change: {}",
                        rep.restart_needed.join(", ")
                    ));
                    tracing::warn!(
                        "reload: {} only change at a restart or `weir upgrade`; still running with the old values",
                        rep.restart_needed.join(", ")
                    );
                }
                tracing::info!("{msg}");
                self.record(true, msg);
            }
            Err(e) => {
                tracing::error!("reload refused, the running config stays: {e}");
                self.record(false, e.to_string());
            }
        }
        r
    }

    /// Reloads since start-up: (succeeded, refused).
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads[0].load(Ordering::Relaxed),
            self.reloads[1].load(Ordering::Relaxed),
        )
    }

    /// Counts a config refused before it reached [`Server::reload`] (one
    /// the admin API could not parse), as a failed reload.
    pub fn note_refused(&self, errs: &ConfigErrors) {
        self.record(false, errs.to_string());
    }

    fn record(&self, ok: bool, message: String) {
        self.reloads[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        lock(&self.state).last_reload = Some(ReloadRecord { at, ok, message });
    }

    fn try_reload(
        &self,
        mut cfg: Config,
        path: Option<PathBuf>,
    ) -> Result<ReloadReport, ReloadError> {
        let mut st = lock(&self.state);
        let mut report = ReloadReport {
            restart_needed: self.fixed.differences(&Fixed::of(&cfg)),
            ..Default::default()
        };
        // What the process keeps, the config says too (GET /config shows
        // the values in force).
        cfg.server.workers = self.fixed.workers;
        cfg.server.runtime = self.fixed.runtime;
        cfg.server.accept = self.fixed.accept;
        cfg.tls.http3 = self.fixed.http3;
        cfg.admin = self.fixed.admin.clone();
        cfg.cluster = self.fixed.cluster.clone();

        // 1. Build: nothing running changes until every step has succeeded.
        let cache = if st.cache.storage() == &cfg.cache {
            st.cache.clone()
        } else {
            report.cache_emptied = true;
            weir_cache::Store::new(&cfg.cache, crate::worker_slots(&cfg))
        };
        let sites = crate::pipeline::build_sites(&cfg, &st.sites, &self.registry, &cache)
            .map_err(ServerError::from)?;
        crate::trace_export::configure(cfg.traces.as_ref());
        for s in &sites {
            if st.sites.iter().any(|o| Arc::ptr_eq(o, s)) {
                report.sites_kept += 1;
            } else {
                report.sites_new += 1;
            }
        }
        let certs = if same_tls(&st.cfg, &cfg) {
            st.certs.clone()
        } else {
            report.certificates_reloaded = true;
            start_certs(&cfg)?
        };
        let built = build_listeners(&cfg, &sites, &certs)?;
        let mut fresh = Vec::new();
        let mut fresh_udp = Vec::new();
        for b in &built {
            if !st.addrs.contains_key(&b.l.addr) {
                fresh.push((b.l.addr, bind_addr(&self.fixed, b.l.addr)?));
            }
            let serving_h3 = lock(&self.h3)
                .as_ref()
                .is_some_and(|h| h.addrs().any(|a| *a == b.l.addr));
            if b.quic.is_some() && !serving_h3 {
                fresh_udp.push((
                    b.l.addr,
                    H3::bind(b.l.addr, self.fixed.workers).map_err(ServerError::from)?,
                ));
            }
        }

        // 2. Swap. Nothing below fails.
        let mut addrs = std::mem::take(&mut st.addrs);
        let mut h3 = lock(&self.h3);
        let mut fresh: HashMap<_, _> = fresh.into_iter().collect();
        let mut fresh_udp: HashMap<_, _> = fresh_udp.into_iter().collect();
        let mut next = HashMap::new();
        for b in built {
            let addr = b.l.addr;
            let quic = b.quic;
            let entry = match addrs.remove(&addr) {
                Some(a) => {
                    a.listener.store(Arc::new(b.listener));
                    a.ctx.store(Arc::new(conn_ctx(
                        &cfg,
                        &b.l,
                        a.listener.clone(),
                        b.acceptor,
                        &self.connections,
                        &self.conns,
                    )));
                    Addr { tls: b.l.tls, ..a }
                }
                None => {
                    let (listener, ctx) = new_addr(
                        &cfg,
                        &b.l,
                        b.listener,
                        b.acceptor,
                        &self.connections,
                        &self.conns,
                    );
                    let socks = fresh.remove(&addr).unwrap_or_default();
                    let dups = socks.iter().filter_map(|s| s.try_clone().ok()).collect();
                    let ep = Endpoint {
                        addr,
                        ctx: ctx.clone(),
                    };
                    for (i, s) in socks.into_iter().enumerate() {
                        let _ =
                            self.workers[i % self.workers.len()].send(Command::Add(s, ep.clone()));
                    }
                    tracing::info!("listening on {}", describe(&cfg, &b.l));
                    report.listeners_added.push(addr);
                    Addr {
                        tls: b.l.tls,
                        listener,
                        ctx,
                        socks: dups,
                    }
                }
            };
            if let (Some(server), Some(h3)) = (quic, h3.as_mut()) {
                match fresh_udp.remove(&addr) {
                    Some(socks) => h3.serve(addr, socks, server, entry.listener.clone()),
                    None => h3.update(addr, server),
                }
            }
            next.insert(addr, entry);
        }
        // Addresses the new config does not name: stop accepting, drain.
        for (addr, gone) in addrs {
            for w in &self.workers {
                let _ = w.send(Command::Remove(addr));
            }
            if gone.tls
                && let Some(h3) = h3.as_mut()
            {
                h3.remove(addr);
            }
            tracing::info!("stopped listening on {addr}; its connections finish their requests");
            report.listeners_removed.push(addr);
        }
        drop(h3);
        // Proxies the new config does not keep: the long streams still
        // open through them end once the grace period is over.
        let kept: Vec<_> = sites
            .iter()
            .flat_map(|s| s.proxies())
            .map(|(_, p)| p)
            .collect();
        let replaced: Vec<std::sync::Weak<weir_proxy::Proxy>> = st
            .sites
            .iter()
            .flat_map(|s| s.proxies())
            .map(|(_, p)| p)
            .filter(|p| !kept.iter().any(|k| Arc::ptr_eq(k, p)))
            .map(|p| Arc::downgrade(&p))
            .collect();
        if !replaced.is_empty()
            && let Some(rt) = certs.handle()
        {
            let grace = cfg.server.grace_period;
            rt.spawn(async move {
                tokio::time::sleep(grace).await;
                for p in replaced.iter().filter_map(std::sync::Weak::upgrade) {
                    p.retire();
                }
            });
        }
        // Apps kept from the old config roll to their new release, if it
        // changed (their supervisors compare), now that it is in force.
        for site in &sites {
            if let (Some(app), Some(want)) = (site.app(), site.cfg.handler.app()) {
                app.apply(want.clone());
            }
        }
        st.addrs = next;
        st.sites = sites;
        st.certs = certs;
        st.cache = cache;
        st.cfg = Arc::new(cfg);
        if path.is_some() {
            st.path = path;
        }
        Ok(report)
    }

    /// Keeps a duplicate of the admin API's socket for a binary upgrade.
    pub fn keep_admin_socket(&self, fd: std::os::fd::OwnedFd) {
        *lock(&self.admin_socket) = Some(fd);
    }

    /// Resolves when the process should drain and exit (a successful
    /// upgrade asked for it).
    pub fn exit_requested(&self) -> watch::Receiver<bool> {
        self.exit.subscribe()
    }

    /// Starts the binary at this process's path (the new version, once it
    /// has been installed there) with the same arguments, hands it every
    /// listening socket, and once it serves, asks this process to drain and
    /// exit. On failure this process goes on serving. Returns the new
    /// process's id.
    pub fn upgrade(&self) -> Result<u32, UpgradeError> {
        if self.upgrading.swap(true, Ordering::AcqRel) {
            return Err(UpgradeError::Busy);
        }
        let r = (|| {
            let exe = self.exe.clone().ok_or_else(|| {
                UpgradeError::Io(std::io::Error::other(
                    "this process's binary path is unknown",
                ))
            })?;
            let mut fds: Vec<std::os::fd::OwnedFd> = Vec::new();
            {
                let st = lock(&self.state);
                for addr in st.addrs.values() {
                    for s in &addr.socks {
                        fds.push(s.try_clone()?.into());
                    }
                }
                if let Some(h3) = lock(&self.h3).as_ref() {
                    for (_, s) in h3.sockets() {
                        fds.push(s.try_clone()?.into());
                    }
                }
                if let Some(a) = lock(&self.admin_socket).as_ref() {
                    fds.push(a.try_clone()?);
                }
            }
            crate::upgrade::spawn(&exe, &self.args, Handover { fds })
        })();
        match &r {
            Ok(pid) => {
                tracing::info!(
                    "upgrade: process {pid} serves now; this one stops accepting and drains"
                );
                let _ = self.exit.send(true);
            }
            Err(e) => {
                tracing::error!("upgrade failed, this process goes on serving: {e}");
                self.upgrading.store(false, Ordering::Release);
            }
        }
        r
    }

    /// Stops accepting, lets in-flight requests finish for the grace
    /// period, and returns when every worker has ended.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
        // The duplicates kept for an upgrade would keep the sockets open
        // (and the kernel accepting into them) once the workers close theirs.
        for a in lock(&self.state).addrs.values_mut() {
            a.socks.clear();
        }
        // HTTP/3 drains alongside TCP, on the workers; they end after it.
        let h3 = lock(&self.h3).take();
        if let Some(h3) = h3 {
            h3.shutdown();
        }
        for h in std::mem::take(&mut *lock(&self.threads)) {
            let _ = h.join();
        }
        if let Some(c) = &self.cluster {
            c.leave();
        }
        // Once every request has finished, the apps' process groups end
        // with weir: SIGTERM, then SIGKILL.
        let apps: Vec<_> = lock(&self.state)
            .sites
            .iter()
            .filter_map(|s| s.app().cloned())
            .collect();
        if !apps.is_empty()
            && let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        {
            rt.block_on(async {
                for a in &apps {
                    a.stop().await;
                }
            });
        }
    }
}

/// What a listening address serves, for the log: `http://ADDR`,
/// `https://ADDR`, `tcp://ADDR` for a `[tcp]` relay, and the names a TLS
/// address passes through untouched.
fn describe(cfg: &Config, l: &ListenerConfig) -> String {
    let addr = l.addr;
    if l.layer4 {
        return format!("tcp://{addr}");
    }
    if !l.tls {
        return format!("http://{addr}");
    }
    let passed: Vec<&str> = l
        .sites
        .iter()
        .filter_map(|&i| cfg.sites.get(i))
        .filter(|s| s.passthrough.is_some())
        .map(|s| s.name.as_str())
        .collect();
    if passed.is_empty() {
        format!("https://{addr}")
    } else if passed.len() == l.sites.len() {
        format!(
            "tcp://{addr} (tls passthrough by SNI: {})",
            passed.join(", ")
        )
    } else {
        format!(
            "https://{addr} (tls passthrough by SNI: {})",
            passed.join(", ")
        )
    }
}

/// The certificate manager for `cfg`; a failure is named by its first
/// listening address.
fn start_certs(cfg: &Config) -> Result<Arc<CertManager>, ServerError> {
    CertManager::start(cfg, Arc::new(crate::ask::Ask))
        .map(Arc::new)
        .map_err(|source| ServerError::Tls {
            addr: cfg
                .listeners
                .first()
                .map_or(([0, 0, 0, 0], 0).into(), |l| l.addr),
            source,
        })
}

/// Every listener's sites, acceptor and QUIC config for `cfg`.
fn build_listeners(
    cfg: &Config,
    sites: &[Arc<Site>],
    certs: &CertManager,
) -> Result<Vec<Built>, ServerError> {
    let mut out = Vec::new();
    for l in &cfg.listeners {
        let tls_err = |source| ServerError::Tls {
            addr: l.addr,
            source,
        };
        let acceptor = if l.tls {
            Some(certs.acceptor(cfg, l).map_err(tls_err)?)
        } else {
            None
        };
        let mut listener = Listener::new(sites, &l.sites, l.default_site, &cfg.server);
        if l.tls {
            if cfg.tls.http3 {
                listener.set_alt_svc(l.addr.port());
            }
        } else {
            listener.set_acme_challenges(certs.challenges());
        }
        let quic = if l.tls && cfg.tls.http3 {
            Some(crate::http3::server_config(cfg, l, certs)?)
        } else {
            None
        };
        out.push(Built {
            l: l.clone(),
            listener,
            acceptor,
            quic,
        });
    }
    Ok(out)
}

fn conn_ctx(
    cfg: &Config,
    l: &ListenerConfig,
    listener: Arc<Current>,
    acceptor: Option<weir_tls::Acceptor>,
    connections: &Arc<AtomicUsize>,
    conns: &Arc<ConnCounts>,
) -> ConnCtx {
    ConnCtx::new(
        listener,
        acceptor,
        cfg.server.limits.clone(),
        io::Limits::from(&cfg.server.timeouts),
        connections.clone(),
        conns.clone(),
    )
    .accept_proxy_protocol(l.proxy_protocol.clone())
    .layer4(l.layer4)
}

/// The sites and connection context of an address served for the first
/// time, each in the cell a reload replaces it through.
fn new_addr(
    cfg: &Config,
    l: &ListenerConfig,
    sites: Listener,
    acceptor: Option<weir_tls::Acceptor>,
    connections: &Arc<AtomicUsize>,
    conns: &Arc<ConnCounts>,
) -> (Arc<Current>, Arc<ArcSwap<ConnCtx>>) {
    let listener = Arc::new(Current::from_pointee(sites));
    let ctx = conn_ctx(cfg, l, listener.clone(), acceptor, connections, conns);
    (listener, Arc::new(ArcSwap::from_pointee(ctx)))
}

/// The sockets of one address: one per worker under the per-core runtime
/// (a SO_REUSEPORT group, steered by CPU if asked), one otherwise.
fn bind_addr(fixed: &Fixed, addr: SocketAddr) -> Result<Vec<std::net::TcpListener>, ServerError> {
    let err = |source| ServerError::Bind { addr, source };
    match fixed.runtime {
        RuntimeMode::PerCore => {
            listen::ensure_unbound(addr).map_err(err)?;
            let mut socks = Vec::new();
            for _ in 0..fixed.workers {
                socks.push(listen::bind(addr, true).map_err(err)?);
            }
            if fixed.accept == AcceptSteering::Cpu {
                listen::steer_by_cpu(&socks[0], fixed.workers).map_err(err)?;
            }
            Ok(socks)
        }
        RuntimeMode::Shared => Ok(vec![listen::bind(addr, false).map_err(err)?]),
    }
}

/// Sockets handed over by the previous process for `addr`: under the
/// per-core runtime each worker needs one, so more are bound into the same
/// SO_REUSEPORT group when there are fewer than workers (extra ones are
/// shared out among the workers: closing one would drop its queue).
fn adopt(
    fixed: &Fixed,
    addr: SocketAddr,
    mut taken: Vec<std::net::TcpListener>,
) -> Result<Vec<std::net::TcpListener>, ServerError> {
    let err = |source| ServerError::Bind { addr, source };
    for s in &taken {
        s.set_nonblocking(true).map_err(err)?;
    }
    if fixed.runtime == RuntimeMode::PerCore {
        while taken.len() < fixed.workers {
            taken.push(listen::bind(addr, true).map_err(err)?);
        }
    }
    if taken.is_empty() {
        return bind_addr(fixed, addr);
    }
    Ok(taken)
}

fn dup_all(
    socks: &[std::net::TcpListener],
    addr: SocketAddr,
) -> Result<Vec<std::net::TcpListener>, ServerError> {
    socks
        .iter()
        .map(|s| {
            s.try_clone()
                .map_err(|source| ServerError::Bind { addr, source })
        })
        .collect()
}
