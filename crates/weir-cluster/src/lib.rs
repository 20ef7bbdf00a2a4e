//! Several weir processes as one, through Redis (or Valkey): `[cluster]`.
//!
//! What is shared, and how, each without a request ever waiting on Redis:
//! - certificates ([`storage`]): the storage directory's files are mirrored
//!   into Redis, encrypted ([`seal`]); a name's order is taken under a
//!   Redis lock, and whoever takes it next finds the certificate there;
//! - limit counts: every `exchange` interval each process publishes what
//!   its limits counted (`weir_traffic::shared`) and adds the others' in;
//! - cache purges: a purge made here is published; the others apply it and
//!   acknowledge; while Redis is away purges queue and are replayed.
//!
//! [`session`] owns the connection: it connects, runs until Redis fails,
//! says so (log, metrics, admin API), lets everything fall back to local
//! state, and reconnects. This module is the handle the rest of weir holds.
//! It never runs on a request's path: its work is on a thread of its own.

pub mod seal;
mod session;
pub mod storage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{Notify, mpsc};
use weir_cache::Invalidation;
use weir_config::cluster::ClusterConfig;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster.redis: {0}")]
    Address(redis::RedisError),
    #[error("cluster: cannot start its thread: {0}")]
    Thread(std::io::Error),
    #[error("cluster.ca: {path}: {source}")]
    Ca {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// How a local purge is applied (set by whoever owns the cache stores).
type LocalPurge = Box<dyn Fn(&Invalidation) -> Result<usize, String> + Send + Sync>;

/// An instance another one has not heard of for this long is gone.
const GONE_AFTER: Duration = Duration::from_secs(5);

/// This process as a member of its cluster.
pub struct Cluster {
    pub cfg: ClusterConfig,
    cmds: mpsc::UnboundedSender<session::Cmd>,
    seal: seal::Seal,
    up: AtomicBool,
    shown: Mutex<Shown>,
    local_purge: OnceLock<LocalPurge>,
    acks: Mutex<HashMap<u64, Acks>>,
    acked: Notify,
    next_id: AtomicU64,
    /// The last purge taken from the stream (`None` before the first
    /// connection).
    last_purge: Mutex<Option<(u64, u64)>>,
    /// Redis's `epoch` marker when last seen (`None` before the first
    /// connection): a different one means Redis lost what it held.
    epoch: Mutex<Option<String>>,
    /// The storage directories opened here: what is written back to a
    /// Redis that lost it.
    roots: Mutex<Vec<std::path::PathBuf>>,
    pub counts: Counts,
}

/// What the admin API and the metrics show.
#[derive(Default)]
struct Shown {
    /// Since when Redis is reachable (or not).
    since: Option<SystemTime>,
    error: Option<String>,
    /// The other instances, with when they were last heard of (Unix ms).
    members: Vec<(String, u64)>,
}

#[derive(Default)]
pub struct Counts {
    pub reconnects: AtomicU64,
    pub purges_sent: AtomicU64,
    pub purges_received: AtomicU64,
    pub purges_queued: AtomicU64,
    pub exchanges_sent: AtomicU64,
    pub exchanges_received: AtomicU64,
}

/// Which instances acknowledged a purge.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Acks {
    /// The other instances seen when it was sent.
    pub instances: Vec<String>,
    pub acked: Vec<String>,
    /// Those that have not acknowledged (yet).
    pub missing: Vec<String>,
    /// Redis was away: the purge waits to be replayed when it returns.
    pub queued: bool,
}

/// An instance as `GET /cluster` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub name: String,
    pub this: bool,
    /// Milliseconds since it was last heard of.
    pub last_contact_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub name: String,
    /// The Redis address without its password.
    pub redis: String,
    pub connected: bool,
    /// What happened last when it is not.
    pub error: Option<String>,
    /// Seconds in the current state (connected or not).
    pub for_secs: u64,
    pub instances: Vec<Member>,
    pub shared: Vec<&'static str>,
    pub limits_shared: usize,
    pub purges_sent: u64,
    pub purges_received: u64,
    pub purges_queued: u64,
    pub reconnects: u64,
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Cluster {
    /// Joins the cluster: turns on what `cfg` shares (process-wide) and
    /// starts the session; waits up to a few seconds for the first
    /// connection, so certificates are not ordered before the cluster's
    /// locks can be taken. A Redis that is not there yet is no error: weir
    /// serves on local state and keeps trying.
    pub fn start(cfg: ClusterConfig) -> Result<Arc<Cluster>, ClusterError> {
        let client = match &cfg.ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| ClusterError::Ca {
                    path: path.clone(),
                    source,
                })?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                redis::Client::build_with_tls(cfg.redis.as_str(), certs)
            }
            None => redis::Client::open(cfg.redis.as_str()),
        }
        .map_err(ClusterError::Address)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let c = Arc::new(Cluster {
            seal: seal::Seal::new(&cfg.key),
            cfg,
            cmds: tx,
            up: AtomicBool::new(false),
            shown: Mutex::new(Shown::default()),
            local_purge: OnceLock::new(),
            acks: Mutex::new(HashMap::new()),
            acked: Notify::new(),
            next_id: AtomicU64::new(1),
            last_purge: Mutex::new(None),
            epoch: Mutex::new(None),
            roots: Mutex::new(Vec::new()),
            counts: Counts::default(),
        });
        if c.cfg.share.limits {
            let mut k = c.cfg.key.clone();
            k.extend_from_slice(b"\0weir limits");
            weir_traffic::shared::enable(&k);
        }
        if c.cfg.share.certificates {
            weir_tls::storage::share(Arc::new(storage::SharedStorage::new(c.clone())));
        }
        if c.cfg.share.cache {
            let weak = Arc::downgrade(&c);
            weir_cache::fanout::register(Box::new(move |w| weak.upgrade().map(|c| c.purge(w))));
        }
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let s = c.clone();
        weir_http::background::spawn("weir-cluster".into(), "cluster", move || {
            session::run(s, client, rx, first_tx)
        })
        .map_err(ClusterError::Thread)?;
        let _ = first_rx.recv_timeout(Duration::from_secs(5));
        Ok(c)
    }

    /// Where purges from other instances are applied here.
    pub fn on_purge(&self, f: LocalPurge) {
        let _ = self.local_purge.set(f);
    }

    /// Whether Redis is reachable now.
    pub fn connected(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The other instances heard of within the last few seconds.
    pub fn others(&self) -> Vec<String> {
        let now = unix_ms();
        lock(&self.shown)
            .members
            .iter()
            .filter(|(n, seen)| {
                *n != self.cfg.name && now.saturating_sub(*seen) < GONE_AFTER.as_millis() as u64
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Sends a purge made here to the other instances; the id to ask
    /// [`Cluster::acks`] about.
    pub fn purge(&self, what: &Invalidation) -> u64 {
        let id = (unix_ms() << 16) ^ self.next_id.fetch_add(1, Ordering::Relaxed);
        let instances = self.others();
        let mut acks = lock(&self.acks);
        // Answers are asked for within a second; keep a minute's.
        if acks.len() >= 1000 {
            let cut = unix_ms().saturating_sub(60_000) << 16;
            acks.retain(|k, _| *k >= cut);
        }
        acks.insert(
            id,
            Acks {
                missing: instances.clone(),
                instances,
                acked: Vec::new(),
                queued: !self.connected(),
            },
        );
        drop(acks);
        let _ = self.cmds.send(session::Cmd::Purge(id, what.clone()));
        id
    }

    /// The acknowledgements of purge `id`, waiting up to `wait` for the
    /// missing ones.
    pub async fn acks(&self, id: u64, wait: Duration) -> Acks {
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.acked.notified();
            let a = lock(&self.acks).get(&id).cloned().unwrap_or_default();
            if a.missing.is_empty() || a.queued || Instant::now() >= deadline {
                return a;
            }
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }

    fn ack(&self, id: u64, by: &str) {
        if let Some(a) = lock(&self.acks).get_mut(&id) {
            a.missing.retain(|m| m != by);
            if !a.acked.iter().any(|x| x == by) {
                a.acked.push(by.to_string());
            }
        }
        self.acked.notify_waiters();
    }

    fn apply_purge(&self, from: &str, what: &Invalidation) {
        self.counts.purges_received.fetch_add(1, Ordering::Relaxed);
        match self.local_purge.get().map(|f| f(what)) {
            Some(Ok(n)) => {
                tracing::info!("cluster: cache purge of {what} from {from}: {n} responses removed")
            }
            Some(Err(e)) => tracing::warn!("cluster: cache purge of {what} from {from}: {e}"),
            None => {}
        }
    }

    fn set_state(&self, up: bool, error: Option<String>) {
        let was = self.up.swap(up, Ordering::Relaxed);
        let mut s = lock(&self.shown);
        if was != up || s.since.is_none() {
            s.since = Some(SystemTime::now());
        }
        s.error = error;
        if !up {
            s.members.clear();
        }
    }

    fn set_members(&self, members: Vec<(String, u64)>) {
        lock(&self.shown).members = members;
    }

    pub fn status(&self) -> Status {
        let s = lock(&self.shown);
        let now = unix_ms();
        let mut instances: Vec<Member> = s
            .members
            .iter()
            .filter(|(n, _)| *n != self.cfg.name)
            .map(|(n, seen)| Member {
                name: n.clone(),
                this: false,
                last_contact_ms: now.saturating_sub(*seen),
            })
            .collect();
        instances.insert(
            0,
            Member {
                name: self.cfg.name.clone(),
                this: true,
                last_contact_ms: 0,
            },
        );
        let sh = self.cfg.share;
        Status {
            name: self.cfg.name.clone(),
            redis: redact(&self.cfg.redis),
            connected: self.connected(),
            error: s.error.clone(),
            for_secs: s
                .since
                .and_then(|t| t.elapsed().ok())
                .map_or(0, |d| d.as_secs()),
            instances,
            shared: [
                (sh.certificates, "certificates"),
                (sh.limits, "limits"),
                (sh.cache, "cache"),
            ]
            .into_iter()
            .filter_map(|(on, what)| on.then_some(what))
            .collect(),
            limits_shared: weir_traffic::shared::get().map_or(0, |x| x.limits()),
            purges_sent: self.counts.purges_sent.load(Ordering::Relaxed),
            purges_received: self.counts.purges_received.load(Ordering::Relaxed),
            purges_queued: self.counts.purges_queued.load(Ordering::Relaxed),
            reconnects: self.counts.reconnects.load(Ordering::Relaxed),
        }
    }

    /// Leaves the cluster as weir stops: the others stop counting this
    /// instance at once instead of after it falls silent.
    pub fn leave(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.cmds.send(session::Cmd::Leave(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(1));
        }
    }

    /// A storage directory opened here: remembered (to write back to a
    /// Redis that lost it), and what it holds that Redis lacks is written
    /// there now.
    fn opened(&self, root: &std::path::Path) {
        let mut roots = lock(&self.roots);
        if !roots.iter().any(|r| r == root) {
            roots.push(root.to_path_buf());
        }
        drop(roots);
        let _ = self.cmds.send(session::Cmd::Restore(root.to_path_buf()));
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.cfg.prefix)
    }
}

/// `redis://user:password@host` without the password.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((auth, host)) => {
            let user = auth.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            super::redact("rediss://default:s3cret@r.example:6380/0"),
            "rediss://default:***@r.example:6380/0"
        );
        assert_eq!(
            super::redact("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
    }
}
