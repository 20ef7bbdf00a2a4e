//! The storage directory shared through Redis (`weir_tls::storage::Shared`):
//! locks are Redis keys with an expiry, files are a Redis hash of encrypted
//! values. Called on blocking threads only; each call is a command to the
//! session, answered over a channel. Never writes a file it did not
//! decrypt, and never one that is the same here already.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_tls::storage::{Challenge, Shared, Storage};

use crate::Cluster;
use crate::session::{Cmd, Held};

pub struct SharedStorage {
    c: Arc<Cluster>,
}

impl std::fmt::Debug for SharedStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedStorage({})", crate::redact(&self.c.cfg.redis))
    }
}

impl SharedStorage {
    pub(crate) fn new(c: Arc<Cluster>) -> SharedStorage {
        SharedStorage { c }
    }
}

/// Releases the Redis lock when the storage lock is dropped (after the
/// writes made under it, which the session sends first).
struct Guard {
    held: Option<Held>,
    c: Arc<Cluster>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(h) = self.held.take() {
            h.released.store(true, Ordering::Relaxed);
            let _ = self.c.cmds.send(Cmd::Unlock(h));
        }
    }
}

impl Shared for SharedStorage {
    fn lock(&self, name: &str) -> Option<Box<dyn Send + Sync>> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.c.cmds.send(Cmd::Lock(name.to_string(), tx)).ok()?;
        // The session answers: taken, or Redis away (then the local lock alone).
        let held = rx.recv_timeout(Duration::from_secs(600)).ok()??;
        tracing::debug!("cluster: {} taken", held.key);
        Some(Box::new(Guard {
            held: Some(held),
            c: self.c.clone(),
        }))
    }

    fn pull(&self, into: &Storage) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.c.cmds.send(Cmd::Pull(tx)).is_err() {
            return;
        }
        let Ok(files) = rx.recv_timeout(Duration::from_secs(10)) else {
            return;
        };
        for (rel, data) in files {
            if !safe_rel(&rel) {
                tracing::error!("cluster: {rel:?} in Redis is not a storage path; ignored");
                continue;
            }
            if into.read(&rel).ok().flatten().as_deref() == Some(&data[..]) {
                continue;
            }
            match into.write_local(&rel, &data) {
                Ok(()) => tracing::info!("cluster: {rel} brought in from Redis"),
                Err(e) => tracing::error!("cluster: {e}"),
            }
        }
    }

    fn push(&self, rel: &str, data: &[u8]) {
        let _ = self.c.cmds.send(Cmd::Push(rel.to_string(), data.to_vec()));
    }

    fn opened(&self, storage: &Storage) {
        self.c.opened(storage.root());
    }

    fn announce(&self, c: Challenge) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.c.cmds.send(Cmd::Challenge(c, tx));
        rx
    }
}

/// A relative path inside the storage directory (what weir writes there):
/// no `..`, no absolute path, no empty part.
fn safe_rel(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|p| !p.is_empty() && p != ".." && p != ".")
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_paths_inside_the_directory_are_written() {
        assert!(super::safe_rel("certs/acme-x/a.test/cert.pem"));
        assert!(!super::safe_rel("../etc/passwd"));
        assert!(!super::safe_rel("/etc/passwd"));
        assert!(!super::safe_rel("certs//x"));
        assert!(!super::safe_rel("certs/./x"));
    }
}
