//! One app at run time: its instances in the slots of a
//! [`weir_proxy::Proxy`] (two per instance, so a new process can start
//! beside the old one), kept running on a thread of its own: an instance
//! that exits, or fails its health checks, is restarted after a back-off;
//! a rolling restart (asked for, or a reload that changed the release)
//! starts a new instance, waits until it is ready, puts it in rotation,
//! drains the old one (no new request, those in flight finish), then stops
//! it, one at a time, and goes back to the old release when a new instance
//! never gets ready; after `idle` with no request every instance stops,
//! and the next request starts one (one start however many requests
//! wait). Slots not running a ready instance are in maintenance, so the
//! proxy never picks them. Never blocks a worker: requests only read
//! atomics or wait on a watch.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::sync::{mpsc, oneshot, watch};

use weir_config::app::AppConfig;
use weir_config::proxy::{
    HealthConfig, ProxyConfig, UpstreamConfig, UpstreamScheme, UpstreamTarget,
};
use weir_proxy::{AdminState, Proxy, Upstream};

use crate::process::{self, Backoff, StartError, Target};

/// What an app is doing, for the admin API and the 503 body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Running,
    /// Scaled to zero.
    Idle,
    /// No instance is ready and the last start failed.
    Failing(String),
    Stopped,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Starting => f.write_str("starting"),
            Phase::Running => f.write_str("running"),
            Phase::Idle => f.write_str("idle"),
            Phase::Failing(why) => write!(f, "failing: {why}"),
            Phase::Stopped => f.write_str("stopped"),
        }
    }
}

/// Why a request finds no instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unready {
    /// `queue` requests already wait for an instance to start.
    QueueFull(usize),
    /// None was ready within `start_timeout`; the app's phase says why.
    NotReady(Phase),
}

impl std::fmt::Display for Unready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unready::QueueFull(n) => write!(f, "{n} requests already wait for it to start"),
            Unready::NotReady(p) => write!(f, "{p}"),
        }
    }
}

enum Cmd {
    /// A rolling restart, to `Some` new settings (a reload) or the same.
    Restart(Option<Arc<AppConfig>>, oneshot::Sender<Result<(), String>>),
    Wake,
    Stop(oneshot::Sender<()>),
}

/// What the admin API shows of an app.
#[derive(Debug, Clone)]
pub struct Status {
    pub phase: Phase,
    /// The last failed start or rolled-back restart, while it is the news.
    pub error: Option<String>,
    /// Process ids of the instances, by slot.
    pub pids: Vec<(usize, u32)>,
    pub run: String,
    /// The release running (or starting): [`release_id`] of its digest.
    pub release: Option<String>,
    /// The release a reload asked for and a rolling restart refused.
    pub refused: Option<Refused>,
}

/// A release a reload asked for that never got ready: the old one runs
/// (and restarts, asked for or after a crash, start the old one) until a
/// reload succeeds, so the config's text no longer says what runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Its `run` command.
    pub run: String,
    /// [`release_id`] of its digest.
    pub release: Option<String>,
    /// Why it was stopped.
    pub error: String,
}

/// A release's digest as the admin API shows it.
pub fn release_id(digest: u64) -> String {
    format!("{digest:016x}")
}

#[derive(Debug)]
struct Shown {
    phase: Phase,
    error: Option<String>,
    pids: Vec<(usize, u32)>,
    release: Option<u64>,
    refused: Option<Refused>,
}

/// A running app.
pub struct App {
    /// The site's name.
    pub name: String,
    /// Instances kept running; fixed for the app's life (a reload that
    /// changes it, or `socket`, starts a new app).
    pub instances: usize,
    pub socket: bool,
    pub proxy: Arc<Proxy>,
    /// The release running (or starting).
    cfg: Mutex<Arc<AppConfig>>,
    started: Instant,
    /// Milliseconds after `started` of the last request.
    last_request: AtomicU64,
    /// Requests waiting for an instance.
    waiting: AtomicUsize,
    /// Instances ready now.
    ready: watch::Receiver<usize>,
    shown: Mutex<Shown>,
    cmds: mpsc::UnboundedSender<Cmd>,
    /// Processes started, and restarted after an exit or failed checks.
    starts: AtomicU64,
    restarts: AtomicU64,
}

/// One slot's process.
struct Running {
    slot: usize,
    /// Its Unix socket, removed once it stops.
    socket: Option<std::path::PathBuf>,
    child: Child,
    /// The first process's id: the group's.
    pgid: u32,
    since: Instant,
}

impl Running {
    async fn stop(&mut self, grace: Duration) {
        process::stop(&mut self.child, self.pgid, grace).await;
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl App {
    /// Starts `cfg`'s instances (unless it scales to zero) on a thread of
    /// its own; `template`: the proxy settings of the app's upstreams.
    pub fn start(
        cfg: Arc<AppConfig>,
        template: &ProxyConfig,
        workers: usize,
    ) -> std::io::Result<Arc<App>> {
        let mut slots = Vec::new();
        let mut pc = template.clone();
        pc.upstreams.clear();
        // The readiness path is the health check: an instance that stops
        // answering leaves the rotation, and is restarted.
        pc.health = Some(HealthConfig {
            path: Some(cfg.ready.clone()),
            method: http::Method::GET,
            status: None,
            body: None,
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            rise: 2,
            fall: 3,
        });
        for i in 0..cfg.instances * 2 {
            let target = if cfg.socket {
                Target::Socket(std::env::temp_dir().join(format!(
                    "weir-app-{}-{}-{i}.sock",
                    std::process::id(),
                    sanitize(&cfg.name)
                )))
            } else {
                Target::Port(process::free_port()?)
            };
            pc.upstreams.push(UpstreamConfig {
                name: format!("{} #{i}", cfg.name),
                scheme: UpstreamScheme::Http,
                target: match &target {
                    Target::Port(p) => UpstreamTarget::Tcp {
                        host: "127.0.0.1".into(),
                        port: *p,
                    },
                    Target::Socket(s) => UpstreamTarget::Unix(s.clone()),
                },
                weight: 1,
            });
            slots.push(target);
        }
        let proxy = Proxy::new(Arc::new(pc), workers);
        for u in proxy.upstreams() {
            u.set_admin_state(AdminState::Maint);
        }
        let (ready_tx, ready) = watch::channel(0usize);
        let (cmds, rx) = mpsc::unbounded_channel();
        let phase = if cfg.idle.is_some() {
            Phase::Idle
        } else {
            Phase::Starting
        };
        let app = Arc::new(App {
            name: cfg.name.clone(),
            instances: cfg.instances,
            socket: cfg.socket,
            cfg: Mutex::new(cfg),
            proxy,
            started: Instant::now(),
            last_request: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            ready,
            shown: Mutex::new(Shown {
                phase,
                error: None,
                pids: Vec::new(),
                release: None,
                refused: None,
            }),
            cmds,
            starts: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&app);
        weir_http::background::spawn(
            format!("weir-app-{}", sanitize(&app.name)),
            "app supervisor",
            move || async move {
                if let Some(s) = Supervisor::new(weak, slots, ready_tx) {
                    s.run(rx).await;
                }
            },
        )?;
        Ok(app)
    }

    /// The release running (or starting).
    pub fn cfg(&self) -> Arc<AppConfig> {
        lock(&self.cfg).clone()
    }

    pub fn phase(&self) -> Phase {
        lock(&self.shown).phase.clone()
    }

    pub fn status(&self) -> Status {
        let s = lock(&self.shown);
        Status {
            phase: s.phase.clone(),
            error: s.error.clone(),
            pids: s.pids.clone(),
            run: self.cfg().run.clone(),
            release: s.release.map(release_id),
            refused: s.refused.clone(),
        }
    }

    /// Instances ready now.
    pub fn ready(&self) -> usize {
        *self.ready.borrow()
    }

    /// Processes started since the app was.
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Instances restarted after they exited or failed their checks.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Whether a reload with `cfg` can keep this app (and roll it to
    /// `cfg`) rather than start another.
    pub fn can_become(&self, cfg: &AppConfig) -> bool {
        cfg.name == self.name && cfg.instances == self.instances && cfg.socket == self.socket
    }

    /// A request is here: note it (for `idle`) and, when no instance is
    /// ready, ask for one and wait for it up to `start_timeout`, one of at
    /// most `queue` waiting requests.
    pub async fn ready_for_request(&self) -> Result<(), Unready> {
        self.note_request();
        if *self.ready.borrow() > 0 {
            return Ok(());
        }
        let cfg = self.cfg();
        let _waiting =
            Waiting::enter(&self.waiting, cfg.queue).ok_or(Unready::QueueFull(cfg.queue))?;
        let _ = self.cmds.send(Cmd::Wake);
        let mut rx = self.ready.clone();
        match tokio::time::timeout(cfg.start_timeout, rx.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Unready::NotReady(self.phase())),
        }
    }

    fn note_request(&self) {
        self.last_request
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// A rolling restart; `Err` says why the new instances were stopped
    /// and the old ones kept.
    pub async fn restart(&self) -> Result<(), String> {
        self.send_restart(None).await
    }

    /// After a reload: a rolling restart to `cfg` when the release it makes
    /// (settings, env file, watched files) differs from the running one.
    /// Returns at once; the outcome goes to the log and [`App::status`].
    pub fn apply(self: &Arc<Self>, cfg: Arc<AppConfig>) {
        let (tx, _rx) = oneshot::channel();
        let _ = self.cmds.send(Cmd::Restart(Some(cfg), tx));
    }

    async fn send_restart(&self, to: Option<Arc<AppConfig>>) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Restart(to, tx))
            .map_err(|_| "the app is stopped".to_string())?;
        rx.await
            .unwrap_or_else(|_| Err("the app is stopped".into()))
    }

    /// Stops every instance (SIGTERM, then SIGKILL after `stop_timeout`).
    pub async fn stop(&self) {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Stop(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_request.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One request counted among those waiting for an instance.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(n: &'a AtomicUsize, max: usize) -> Option<Self> {
        if n.fetch_add(1, Ordering::AcqRel) >= max {
            n.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Waiting(n))
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The supervisor's own state, on the app's thread.
struct Supervisor {
    app: std::sync::Weak<App>,
    slots: Vec<Target>,
    ups: Vec<Arc<Upstream>>,
    running: Vec<Running>,
    ready: watch::Sender<usize>,
    cfg: Arc<AppConfig>,
    /// The running release's digest (`None`: not computed yet).
    release: Option<u64>,
    /// Instances should run (false while scaled to zero).
    want: bool,
    /// After a failed start or an exit, the next start waits until then.
    retry_at: Option<Instant>,
    backoff: Backoff,
}

impl Supervisor {
    fn new(
        app: std::sync::Weak<App>,
        slots: Vec<Target>,
        ready: watch::Sender<usize>,
    ) -> Option<Self> {
        let (cfg, ups) = app
            .upgrade()
            .map(|a| (a.cfg(), a.proxy.upstreams().to_vec()))?;
        Some(Supervisor {
            app,
            slots,
            ups,
            running: Vec::new(),
            ready,
            want: cfg.idle.is_none(),
            cfg,
            release: None,
            retry_at: None,
            backoff: Backoff::default(),
        })
    }

    fn show(&self, f: impl FnOnce(&mut Shown)) {
        if let Some(app) = self.app.upgrade() {
            f(&mut lock(&app.shown));
        }
    }

    fn set_phase(&self, p: Phase) {
        self.show(|s| s.phase = p);
    }

    /// Tells the waiting requests and the admin API what runs now.
    /// The pids first, so whoever sees the ready count sees its pids too.
    fn publish(&self) {
        let pids = self.running.iter().map(|r| (r.slot, r.pgid)).collect();
        self.show(|s| s.pids = pids);
        self.ready.send_replace(self.running.len());
    }

    async fn run(mut self, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
        self.release = digest(&self.cfg).await;
        let release = self.release;
        self.show(|s| s.release = release);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            if self.app.strong_count() == 0 {
                break;
            }
            // Keep the wanted number running (an exited one comes back
            // after its back-off); a command still comes through while
            // one starts.
            if self.want
                && self.running.len() < self.cfg.instances
                && self.retry_at.is_none_or(|t| Instant::now() >= t)
            {
                self.set_phase(Phase::Starting);
                let cfg = self.cfg.clone();
                let mut start = {
                    let (cfg, slots, ups, app) = (
                        cfg.clone(),
                        self.slots.clone(),
                        self.ups.clone(),
                        self.app.clone(),
                    );
                    let used: Vec<usize> = self.running.iter().map(|r| r.slot).collect();
                    Box::pin(async move { start_one(&cfg, &slots, &ups, &used, &app).await })
                };
                // A reload while it starts applies once this start is over.
                let mut pending = None;
                let started = loop {
                    tokio::select! {
                        r = &mut start => break r,
                        cmd = cmds.recv() => match cmd {
                            // The app was dropped: nothing may outlive it.
                            None => {
                                drop(start);
                                self.stop_running().await;
                                return;
                            }
                            Some(Cmd::Stop(done)) => {
                                // The instance starting goes first (its
                                // group is killed when the start is dropped).
                                drop(start);
                                self.stop_all().await;
                                let _ = done.send(());
                                return;
                            }
                            Some(Cmd::Restart(Some(to), reply)) => {
                                pending = Some(to);
                                let _ = reply.send(Ok(()));
                            }
                            Some(Cmd::Restart(None, reply)) => {
                                let _ = reply.send(Err("the app is starting; restart it once it runs".into()));
                            }
                            // Many first requests: one start.
                            Some(Cmd::Wake) => {}
                        }
                    }
                };
                match started {
                    Ok(r) => {
                        tracing::info!("app {}: instance #{} ready", cfg.name, r.slot);
                        // The idle clock starts when the requests that woke
                        // it can go on, not when they came: a start slower
                        // than `idle` must not stop it before they reach it.
                        if let Some(app) = self.app.upgrade() {
                            app.note_request();
                        }
                        self.running.push(r);
                        self.publish();
                        self.retry_at = None;
                        self.show(|s| {
                            s.phase = Phase::Running;
                            s.error = None;
                        });
                    }
                    Err(e) => {
                        let wait = self.backoff.after(Duration::ZERO);
                        tracing::error!("app {}: {e}; trying again in {wait:?}", cfg.name);
                        self.retry_at = Some(Instant::now() + wait);
                        let empty = self.running.is_empty();
                        self.show(|s| {
                            s.error = Some(e.to_string());
                            if empty {
                                s.phase = Phase::Failing(e.to_string());
                            }
                        });
                    }
                }
                if let Some(to) = pending
                    && let Err(e) = self.restart(Some(to)).await
                {
                    tracing::error!("app {}: {e}", self.cfg.name);
                }
                continue;
            }
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    None => break,
                    Some(Cmd::Wake) => self.want = true,
                    Some(Cmd::Stop(done)) => {
                        self.stop_all().await;
                        let _ = done.send(());
                        return;
                    }
                    Some(Cmd::Restart(to, reply)) => {
                        let r = self.restart(to).await;
                        let _ = reply.send(r);
                    }
                },
                _ = tick.tick() => {
                    self.reap().await;
                    self.scale_to_zero().await;
                }
            }
        }
        // The app was dropped (a reload removed it): nothing may outlive it.
        self.stop_running().await;
    }

    /// Stops every instance at once, with no drain: nothing serves them.
    async fn stop_running(&mut self) {
        let grace = self.cfg.stop_timeout;
        for mut r in std::mem::take(&mut self.running) {
            r.stop(grace).await;
        }
    }

    /// Instances that exited or fail their health checks leave the
    /// rotation and come back after the back-off.
    async fn reap(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            let why = match r.child.try_wait() {
                Ok(Some(st)) => Some(format!("exited ({st})")),
                _ if !self.ups[r.slot].health.active_up() => {
                    Some("failed its health checks".to_string())
                }
                _ => None,
            };
            let Some(why) = why else {
                i += 1;
                continue;
            };
            let mut r = self.running.remove(i);
            self.ups[r.slot].set_admin_state(AdminState::Maint);
            self.publish();
            r.stop(self.cfg.stop_timeout).await;
            let wait = self.backoff.after(r.since.elapsed());
            tracing::warn!(
                "app {}: instance #{} {why}; restarting in {wait:?}",
                self.cfg.name,
                r.slot
            );
            self.retry_at = Some(Instant::now() + wait);
            if let Some(app) = self.app.upgrade() {
                app.restarts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn scale_to_zero(&mut self) {
        let (Some(idle), Some(app)) = (self.cfg.idle, self.app.upgrade()) else {
            return;
        };
        if self.want && !self.running.is_empty() && app.idle_for() >= idle {
            drop(app);
            tracing::info!(
                "app {}: idle for {idle:?}; stopping its instances",
                self.cfg.name
            );
            self.want = false;
            for r in std::mem::take(&mut self.running) {
                retire(&self.cfg, &self.ups, r).await;
                self.publish();
            }
            self.set_phase(Phase::Idle);
        }
    }

    async fn stop_all(&mut self) {
        for r in std::mem::take(&mut self.running) {
            retire(&self.cfg, &self.ups, r).await;
        }
        self.publish();
        self.set_phase(Phase::Stopped);
    }

    /// A rolling restart: to `to` (a reload) when the release it makes
    /// differs from the running one, else (asked for) to the same. With no
    /// instance running, the new settings apply to the next start.
    async fn restart(&mut self, to: Option<Arc<AppConfig>>) -> Result<(), String> {
        let reload = to.is_some();
        let new = to.unwrap_or_else(|| self.cfg.clone());
        let digest = digest(&new).await;
        if reload && digest == self.release {
            // The config asks for what runs again: nothing is refused now.
            self.forget_refused(&new.name);
            return Ok(());
        }
        if self.running.is_empty() {
            if reload {
                tracing::info!("app {}: new release; it runs from the next start", new.name);
                // A fix for a crash loop is tried at once.
                self.retry_at = None;
                self.backoff = Backoff::default();
                self.forget_refused(&new.name);
            }
            self.adopt(new, digest);
            return Ok(());
        }
        tracing::info!(
            "app {}: rolling restart{}",
            new.name,
            if reload { " to a new release" } else { "" }
        );
        let old = self.cfg.clone();
        let olds: Vec<usize> = self.running.iter().map(|r| r.slot).collect();
        let mut news = Vec::new();
        for slot in olds {
            match start_one(&new, &self.slots, &self.ups, &self.used(), &self.app).await {
                Ok(r) => {
                    news.push(r.slot);
                    self.replace(slot, r, &old).await;
                }
                Err(e) => {
                    let why = format!("the new release was stopped, the old one serves: {e}");
                    tracing::error!("app {}: restart rolled back: {why}", new.name);
                    // Instances of the new release already in rotation
                    // give way to the old one again.
                    for n in news {
                        match start_one(&old, &self.slots, &self.ups, &self.used(), &self.app).await
                        {
                            Ok(r) => self.replace(n, r, &new).await,
                            Err(e) => tracing::error!(
                                "app {}: the old release did not start again either, the new instance #{n} stays: {e}",
                                new.name
                            ),
                        }
                    }
                    let shown = why.clone();
                    // Only a reload brings a release that differs.
                    let refused = reload.then(|| Refused {
                        run: new.run.clone(),
                        release: digest.map(release_id),
                        error: why.clone(),
                    });
                    self.show(|s| {
                        s.error = Some(shown);
                        if refused.is_some() {
                            s.refused = refused;
                        }
                    });
                    return Err(why);
                }
            }
        }
        tracing::info!("app {}: restarted", new.name);
        if reload {
            self.forget_refused(&new.name);
        }
        self.adopt(new, digest);
        self.show(|s| s.error = None);
        Ok(())
    }

    /// A reload succeeded: the release it asked for runs (or runs from the
    /// next start), so no release is refused any more.
    fn forget_refused(&self, name: &str) {
        let mut was = None;
        self.show(|s| was = s.refused.take());
        if let Some(r) = was {
            tracing::info!(
                "app {name}: the config no longer asks for the refused release (run = {:?})",
                r.run
            );
        }
    }

    fn used(&self) -> Vec<usize> {
        self.running.iter().map(|r| r.slot).collect()
    }

    /// Puts `new` (ready) in rotation, then retires the instance in `slot`.
    async fn replace(&mut self, slot: usize, new: Running, cfg: &AppConfig) {
        self.running.push(new);
        self.publish();
        if let Some(i) = self.running.iter().position(|r| r.slot == slot) {
            let r = self.running.remove(i);
            retire(cfg, &self.ups, r).await;
            self.publish();
        }
    }

    fn adopt(&mut self, cfg: Arc<AppConfig>, digest: Option<u64>) {
        if let Some(app) = self.app.upgrade() {
            *lock(&app.cfg) = cfg.clone();
        }
        self.cfg = cfg;
        self.release = digest;
        self.show(|s| s.release = digest);
    }
}

/// [`process::release`] on the blocking pool.
async fn digest(cfg: &Arc<AppConfig>) -> Option<u64> {
    let c = cfg.clone();
    tokio::task::spawn_blocking(move || process::release(&c))
        .await
        .ok()
}

/// Starts an instance in a free slot and waits until it is ready; it joins
/// the rotation only then.
async fn start_one(
    cfg: &AppConfig,
    slots: &[Target],
    ups: &[Arc<Upstream>],
    used: &[usize],
    app: &std::sync::Weak<App>,
) -> Result<Running, StartError> {
    let slot = (0..slots.len())
        .find(|s| !used.contains(s))
        .expect("two slots per instance");
    if let Target::Socket(p) = &slots[slot] {
        let _ = std::fs::remove_file(p);
    }
    let child = process::spawn(cfg, slot, &slots[slot])?;
    let pgid = child.id().unwrap_or(0);
    // Dropped before it is ready (weir stops): its whole group goes.
    let mut child = KillGroupOnDrop(Some(child), pgid);
    if let Some(app) = app.upgrade() {
        app.starts.fetch_add(1, Ordering::Relaxed);
    }
    tracing::info!("app {}: instance #{slot} started (pid {pgid})", cfg.name);
    let c = child.0.as_mut().expect("set above");
    if let Err(e) = process::wait_ready(c, &slots[slot], &cfg.ready, cfg.start_timeout).await {
        process::stop(c, pgid, cfg.stop_timeout).await;
        return Err(e);
    }
    let child = child.0.take().expect("set above");
    ups[slot].health.reset();
    ups[slot].set_admin_state(AdminState::Ready);
    Ok(Running {
        slot,
        socket: match &slots[slot] {
            Target::Socket(p) => Some(p.clone()),
            Target::Port(_) => None,
        },
        child,
        pgid,
        since: Instant::now(),
    })
}

/// A process starting; killed with its group if the start is abandoned.
struct KillGroupOnDrop(Option<Child>, u32);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if self.0.is_some() && self.1 > 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.1 as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Takes a running instance out of rotation, lets its requests finish
/// (within `stop_timeout`), then stops it: no request reaches it after its
/// SIGTERM.
async fn retire(cfg: &AppConfig, ups: &[Arc<Upstream>], mut r: Running) {
    let up = &ups[r.slot];
    up.set_admin_state(AdminState::Drain);
    // A request that chose it just before the drain may not count itself
    // in flight yet.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let deadline = Instant::now() + cfg.stop_timeout;
    while up.in_flight() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    up.set_admin_state(AdminState::Maint);
    // A health check that began before maintenance finishes first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    tracing::info!(
        "app {}: instance #{} (pid {}) drained; stopping it",
        cfg.name,
        r.slot,
        r.pgid
    );
    r.stop(cfg.stop_timeout).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &std::path::Path, instances: usize, idle: Option<Duration>) -> Arc<AppConfig> {
        std::fs::write(dir.join("index.html"), "ok").unwrap();
        Arc::new(AppConfig {
            name: "t".into(),
            run: "python3 -m http.server \"$PORT\" --bind \"$HOST\"".into(),
            instances,
            dir: dir.to_path_buf(),
            env: Vec::new(),
            env_file: None,
            ready: "/".into(),
            start_timeout: Duration::from_secs(20),
            stop_timeout: Duration::from_secs(2),
            idle,
            socket: false,
            queue: 64,
            watch: Vec::new(),
        })
    }

    fn in_rotation(app: &App) -> Vec<usize> {
        app.proxy
            .upstreams()
            .iter()
            .enumerate()
            .filter(|(_, u)| u.admin_state() == AdminState::Ready)
            .map(|(i, _)| i)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instances_start_restart_rolling_and_come_back_after_a_crash() {
        let d = tempfile::tempdir().unwrap();
        let app = App::start(cfg(d.path(), 2, None), &ProxyConfig::defaults(), 1).unwrap();
        assert!(app.ready_for_request().await.is_ok());
        let mut ready = app.ready.clone();
        ready.wait_for(|n| *n == 2).await.unwrap();
        assert_eq!(app.starts(), 2);
        let before = in_rotation(&app);
        assert_eq!(before.len(), 2);
        // Rolling: never fewer than one ready instance along the way, and
        // the processes are new (their slots change: one moves to a spare).
        let min = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let watcher = {
            let mut rx = app.ready.clone();
            let min = min.clone();
            tokio::spawn(async move {
                loop {
                    min.fetch_min(*rx.borrow_and_update(), Ordering::SeqCst);
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            })
        };
        app.restart().await.unwrap();
        watcher.abort();
        assert!(
            min.load(Ordering::SeqCst) >= 1,
            "a moment with no ready instance"
        );
        let after = in_rotation(&app);
        assert_eq!(after.len(), 2);
        assert_ne!(after, before);
        // kill -9 of one: it leaves the rotation and comes back.
        let (_, pid) = app.status().pids[0];
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while in_rotation(&app).len() < 2 || app.restarts() == 0 {
            assert!(
                Instant::now() < deadline,
                "not restarted: {:?}",
                app.phase()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!app.status().pids.iter().any(|(_, p)| *p == pid));
        app.stop().await;
        assert!(in_rotation(&app).is_empty());
        assert_eq!(app.phase(), Phase::Stopped);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_release_that_never_gets_ready_is_rolled_back() {
        let d = tempfile::tempdir().unwrap();
        let good = cfg(d.path(), 2, None);
        let app = App::start(good.clone(), &ProxyConfig::defaults(), 1).unwrap();
        let mut ready = app.ready.clone();
        ready.wait_for(|n| *n == 2).await.unwrap();
        let pids = app.status().pids;
        let mut bad = (*good).clone();
        bad.run = "sleep 30".into();
        bad.start_timeout = Duration::from_millis(500);
        let e = app.send_restart(Some(Arc::new(bad))).await.unwrap_err();
        assert!(e.contains("not ready within"), "{e}");
        assert_eq!(app.status().pids, pids, "the old instances go on");
        assert_eq!(app.cfg().run, good.run);
        let st = app.status();
        assert!(st.error.unwrap().contains("old one serves"));
        let refused = st.refused.expect("the refused release is shown");
        assert_eq!(refused.run, "sleep 30");
        assert!(refused.error.contains("not ready within"), "{refused:?}");
        let running = st.release.expect("the running release is shown");
        assert_ne!(refused.release.as_deref(), Some(running.as_str()));
        // A restart asked for starts the running release, and the refused
        // one is still shown.
        app.restart().await.unwrap();
        let st = app.status();
        assert_eq!(st.release.as_deref(), Some(running.as_str()));
        assert_eq!(st.refused.as_ref(), Some(&refused));
        // The same settings again: nothing to do but forget the refusal.
        let pids = st.pids;
        app.send_restart(Some(good.clone())).await.unwrap();
        assert_eq!(app.status().pids, pids);
        assert_eq!(app.status().refused, None);
        app.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instances_on_unix_sockets_answer_there_and_leave_no_socket() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("app.py"),
            "import os, socketserver, http.server\n\
             class H(http.server.BaseHTTPRequestHandler):\n\
             \x20   def log_message(self, *a): pass\n\
             \x20   def do_GET(self):\n\
             \x20       b = ('instance %s' % os.environ['WEIR_INSTANCE']).encode()\n\
             \x20       self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)\n\
             socketserver.UnixStreamServer(os.environ['SOCKET'], H).serve_forever()\n",
        )
        .unwrap();
        let mut c = (*cfg(d.path(), 2, None)).clone();
        c.run = "python3 app.py".into();
        c.socket = true;
        let app = App::start(Arc::new(c), &ProxyConfig::defaults(), 1).unwrap();
        let mut ready = app.ready.clone();
        ready.wait_for(|n| *n == 2).await.unwrap();
        let socks: Vec<std::path::PathBuf> = in_rotation(&app)
            .into_iter()
            .map(|i| match &app.proxy.upstreams()[i].cfg.target {
                UpstreamTarget::Unix(p) => p.clone(),
                t => panic!("not a socket: {t:?}"),
            })
            .collect();
        for s in &socks {
            assert!(process::check(&Target::Socket(s.clone()), "/").await);
        }
        app.stop().await;
        for s in &socks {
            assert!(!s.exists(), "{} left behind", s.display());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_over_the_queue_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let mut c = (*cfg(d.path(), 1, Some(Duration::from_secs(60)))).clone();
        c.run = "sleep 30".into();
        c.queue = 2;
        c.start_timeout = Duration::from_secs(2);
        let app = App::start(Arc::new(c), &ProxyConfig::defaults(), 1).unwrap();
        let waits: Vec<_> = (0..2)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { app.ready_for_request().await })
            })
            .collect();
        while app.waiting.load(Ordering::Relaxed) < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(app.ready_for_request().await, Err(Unready::QueueFull(2)));
        for w in waits {
            assert!(matches!(w.await.unwrap(), Err(Unready::NotReady(_))));
        }
        app.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_start_slower_than_idle_keeps_the_instance_for_the_requests_that_woke_it() {
        let d = tempfile::tempdir().unwrap();
        let idle = Duration::from_secs(1);
        let mut slow = (*cfg(d.path(), 1, Some(idle))).clone();
        slow.run = format!("sleep 1.5; exec {}", slow.run);
        let app = App::start(Arc::new(slow), &ProxyConfig::defaults(), 1).unwrap();
        assert!(app.ready_for_request().await.is_ok());
        let ready_at = Instant::now();
        let deadline = ready_at + Duration::from_secs(10);
        while app.phase() != Phase::Idle {
            assert!(Instant::now() < deadline, "never scaled to zero");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The idle clock runs from when the request could go on: the
        // instance lives about `idle` after it, not one tick.
        let lived = ready_at.elapsed();
        assert!(
            lived >= idle * 7 / 10,
            "stopped {lived:?} after the request it started for could go on"
        );
        app.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_app_stops_and_the_next_request_starts_one() {
        let d = tempfile::tempdir().unwrap();
        let app = App::start(
            cfg(d.path(), 1, Some(Duration::from_millis(500))),
            &ProxyConfig::defaults(),
            1,
        )
        .unwrap();
        assert_eq!(app.phase(), Phase::Idle);
        assert!(
            in_rotation(&app).is_empty(),
            "nothing runs before a request"
        );
        // Many first requests: one start.
        let waits: Vec<_> = (0..20)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move { app.ready_for_request().await })
            })
            .collect();
        for w in waits {
            assert!(w.await.unwrap().is_ok());
        }
        assert_eq!(in_rotation(&app).len(), 1);
        assert_eq!(app.starts(), 1, "one start for twenty requests");
        let deadline = Instant::now() + Duration::from_secs(10);
        while app.phase() != Phase::Idle {
            assert!(Instant::now() < deadline, "never scaled to zero");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(in_rotation(&app).is_empty());
        app.stop().await;
    }
}
