//! One app at run time: its instances in the slots of a
//! [`weir_proxy::Proxy`] (two per instance, so a new process can start
//! beside the old one), kept running on a thread of its own: an instance
//! that exits is restarted after a back-off; a rolling restart starts a new
//! instance, waits until it is ready, puts it in rotation, drains the old
//! one (no new request, those in flight finish), then stops it, one at a
//! time, and keeps the old ones when the new one never gets ready; after
//! `idle` with no request every instance stops, and the next request
//! starts one (one start however many requests wait). Slots not running a
//! ready instance are in maintenance, so the proxy never picks them.
//! Never blocks a worker: requests only read atomics or wait on a watch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::sync::{mpsc, oneshot, watch};

use weir_config::app::AppConfig;
use weir_config::proxy::{ProxyConfig, UpstreamConfig, UpstreamScheme, UpstreamTarget};
use weir_proxy::{AdminState, Proxy};

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

enum Cmd {
    Restart(oneshot::Sender<Result<(), String>>),
    Wake,
    Stop(oneshot::Sender<()>),
}

/// A running app.
pub struct App {
    pub cfg: Arc<AppConfig>,
    pub proxy: Arc<Proxy>,
    started: Instant,
    /// Milliseconds after `started` of the last request.
    last_request: AtomicU64,
    /// Instances ready now.
    ready: watch::Receiver<usize>,
    phase: Arc<Mutex<Phase>>,
    cmds: mpsc::UnboundedSender<Cmd>,
    restarts: AtomicU64,
}

/// One slot's process.
struct Running {
    slot: usize,
    child: Child,
    since: Instant,
    backoff: Backoff,
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
        let proxy = Proxy::new(Arc::new(pc), true, workers);
        for u in proxy.upstreams() {
            u.set_admin_state(AdminState::Maint);
        }
        let (ready_tx, ready) = watch::channel(0usize);
        let (cmds, rx) = mpsc::unbounded_channel();
        let phase = Arc::new(Mutex::new(if cfg.idle.is_some() {
            Phase::Idle
        } else {
            Phase::Starting
        }));
        let app = Arc::new(App {
            cfg,
            proxy,
            started: Instant::now(),
            last_request: AtomicU64::new(0),
            ready,
            phase,
            cmds,
            restarts: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&app);
        std::thread::Builder::new()
            .name(format!("weir-app-{}", sanitize(&app.cfg.name)))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("app supervisor: cannot start a runtime: {e}");
                        return;
                    }
                };
                rt.block_on(supervise(weak, slots, rx, ready_tx));
            })?;
        Ok(app)
    }

    pub fn phase(&self) -> Phase {
        self.phase
            .lock()
            .map(|p| p.clone())
            .unwrap_or(Phase::Stopped)
    }

    /// Instances restarted after they exited, since start.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// A request is here: note it (for `idle`) and, when no instance is
    /// ready, ask for one and wait for it up to `start_timeout`. `false`:
    /// none came (the caller answers 503).
    pub async fn ready_for_request(&self) -> bool {
        self.last_request
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        if *self.ready.borrow() > 0 {
            return true;
        }
        let _ = self.cmds.send(Cmd::Wake);
        let mut rx = self.ready.clone();
        tokio::time::timeout(self.cfg.start_timeout, rx.wait_for(|n| *n > 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// A rolling restart; `Err` says why the new version was rolled back.
    pub async fn restart(&self) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Restart(tx))
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

    fn set_phase(&self, p: Phase) {
        if let Ok(mut g) = self.phase.lock() {
            *g = p;
        }
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

async fn supervise(
    weak: std::sync::Weak<App>,
    slots: Vec<Target>,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
    ready: watch::Sender<usize>,
) {
    let Some(app) = weak.upgrade() else { return };
    let cfg = app.cfg.clone();
    let ups: Vec<_> = app.proxy.upstreams().to_vec();
    drop(app);
    let mut running: Vec<Running> = Vec::new();
    let publish = |running: &Vec<Running>| {
        ready.send_replace(running.len());
    };

    // Starts an instance in a free slot and waits until it is ready;
    // it joins the rotation only then.
    async fn start_one(
        cfg: &AppConfig,
        slots: &[Target],
        ups: &[Arc<weir_proxy::Upstream>],
        running: &[Running],
    ) -> Result<Running, StartError> {
        let slot = (0..slots.len())
            .find(|s| !running.iter().any(|r| r.slot == *s))
            .expect("two slots per instance");
        if let Target::Socket(p) = &slots[slot] {
            let _ = std::fs::remove_file(p);
        }
        let mut child = process::spawn(cfg, slot, &slots[slot])?;
        if let Err(e) =
            process::wait_ready(&mut child, &slots[slot], &cfg.ready, cfg.start_timeout).await
        {
            process::stop(&mut child, cfg.stop_timeout).await;
            return Err(e);
        }
        ups[slot].set_admin_state(AdminState::Ready);
        Ok(Running {
            slot,
            child,
            since: Instant::now(),
            backoff: Backoff::default(),
        })
    }

    // Takes a running instance out of rotation, lets its requests finish
    // (within stop_timeout), then stops it.
    async fn retire(cfg: &AppConfig, ups: &[Arc<weir_proxy::Upstream>], mut r: Running) {
        let up = &ups[r.slot];
        up.set_admin_state(AdminState::Drain);
        // A request that chose it just before the drain may not count
        // itself in flight yet.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let deadline = Instant::now() + cfg.stop_timeout;
        while up.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        up.set_admin_state(AdminState::Maint);
        process::stop(&mut r.child, cfg.stop_timeout).await;
    }

    let mut want = cfg.idle.is_none();
    // After a failed start, the next attempt waits until then.
    let mut retry_at: Option<Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        // Keep the wanted number running (a crashed one comes back after
        // its back-off); a stop still comes through while one starts.
        if want && running.len() < cfg.instances && retry_at.is_none_or(|t| Instant::now() >= t) {
            let Some(app) = weak.upgrade() else { break };
            app.set_phase(Phase::Starting);
            drop(app);
            let mut stop_now = None;
            let started = tokio::select! {
                r = start_one(&cfg, &slots, &ups, &running) => Some(r),
                cmd = cmds.recv() => {
                    match cmd {
                        None => break,
                        Some(Cmd::Stop(done)) => stop_now = Some(done),
                        Some(Cmd::Restart(reply)) => {
                            let _ = reply.send(Err("the app is starting; restart it once it runs".into()));
                        }
                        Some(Cmd::Wake) => {}
                    }
                    None
                }
            };
            if let Some(done) = stop_now {
                for r in running.drain(..) {
                    retire(&cfg, &ups, r).await;
                }
                publish(&running);
                if let Some(app) = weak.upgrade() {
                    app.set_phase(Phase::Stopped);
                }
                let _ = done.send(());
                return;
            }
            match started {
                Some(Ok(r)) => {
                    tracing::info!("app {}: instance #{} ready", cfg.name, r.slot);
                    running.push(r);
                    publish(&running);
                    retry_at = None;
                    if let Some(app) = weak.upgrade() {
                        app.set_phase(Phase::Running);
                    }
                }
                Some(Err(e)) => {
                    tracing::error!("app {}: {e}", cfg.name);
                    retry_at = Some(Instant::now() + Duration::from_secs(1));
                    if let Some(app) = weak.upgrade()
                        && running.is_empty()
                    {
                        app.set_phase(Phase::Failing(e.to_string()));
                    }
                }
                None => {}
            }
            continue;
        }
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                None => break,
                Some(Cmd::Wake) => want = true,
                Some(Cmd::Stop(done)) => {
                    for r in running.drain(..) {
                        retire(&cfg, &ups, r).await;
                    }
                    publish(&running);
                    if let Some(app) = weak.upgrade() { app.set_phase(Phase::Stopped); }
                    let _ = done.send(());
                    return;
                }
                Some(Cmd::Restart(reply)) => {
                    let mut result = Ok(());
                    let old: Vec<usize> = running.iter().map(|r| r.slot).collect();
                    for slot in old {
                        match start_one(&cfg, &slots, &ups, &running).await {
                            Ok(new) => {
                                running.push(new);
                                let i = running.iter().position(|r| r.slot == slot).expect("old instance");
                                let r = running.remove(i);
                                retire(&cfg, &ups, r).await;
                                publish(&running);
                            }
                            Err(e) => {
                                let why = format!("new instance not started, the old ones keep serving: {e}");
                                tracing::error!("app {}: restart rolled back: {why}", cfg.name);
                                result = Err(why);
                                break;
                            }
                        }
                    }
                    if result.is_ok() {
                        tracing::info!("app {}: restarted", cfg.name);
                    }
                    let _ = reply.send(result);
                }
            },
            _ = tick.tick() => {
                // Exits: out of rotation, restarted after the back-off.
                let mut i = 0;
                while i < running.len() {
                    if let Ok(Some(st)) = running[i].child.try_wait() {
                        let mut r = running.remove(i);
                        ups[r.slot].set_admin_state(AdminState::Maint);
                        publish(&running);
                        let wait = r.backoff.after(r.since.elapsed());
                        tracing::warn!("app {}: instance #{} exited ({st}); restarting in {wait:?}", cfg.name, r.slot);
                        if let Some(app) = weak.upgrade() { app.restarts.fetch_add(1, Ordering::Relaxed); }
                        tokio::time::sleep(wait).await;
                        // Its replacement starts on the next pass, in this slot or another.
                        drop(r.child.wait().await);
                        continue;
                    }
                    i += 1;
                }
                // Scale to zero.
                if let (Some(idle), Some(app)) = (cfg.idle, weak.upgrade()) {
                    if want && !running.is_empty() && app.idle_for() >= idle {
                        tracing::info!("app {}: idle for {idle:?}; stopping its instances", cfg.name);
                        want = false;
                        for r in running.drain(..) {
                            retire(&cfg, &ups, r).await;
                        }
                        publish(&running);
                        app.set_phase(Phase::Idle);
                    }
                } else if weak.strong_count() == 0 {
                    break;
                }
            }
        }
    }
    // The app was dropped: nothing may outlive it.
    for mut r in running {
        process::stop(&mut r.child, cfg.stop_timeout).await;
    }
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
            queue: 16,
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
        assert!(app.ready_for_request().await);
        let mut ready = app.ready.clone();
        ready.wait_for(|n| *n == 2).await.unwrap();
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
        let port = match &app.proxy.upstreams()[after[0]].cfg.target {
            UpstreamTarget::Tcp { port, .. } => *port,
            _ => unreachable!(),
        };
        let out = std::process::Command::new("fuser")
            .arg(format!("{port}/tcp"))
            .output();
        if let Ok(o) = out {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = std::process::Command::new("kill")
                    .args(["-9", pid])
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while in_rotation(&app).len() < 2 || app.restarts() == 0 {
            assert!(
                Instant::now() < deadline,
                "not restarted: {:?}",
                app.phase()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        app.stop().await;
        assert!(in_rotation(&app).is_empty());
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
            assert!(w.await.unwrap());
        }
        assert_eq!(in_rotation(&app).len(), 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while app.phase() != Phase::Idle {
            assert!(Instant::now() < deadline, "never scaled to zero");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(in_rotation(&app).is_empty());
        app.stop().await;
    }
}
