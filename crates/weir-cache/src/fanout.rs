//! Where purges made here go besides this process's store: the cluster
//! registers a sender once at start-up, and `PURGE` requests and the admin
//! API hand it what they removed. Process-wide because a process is one
//! member of a cluster, whatever stores its reloads make. Never blocks: the
//! sender only queues.

use std::sync::OnceLock;

use crate::store::Invalidation;

type Sender = Box<dyn Fn(&Invalidation) -> Option<u64> + Send + Sync>;

static SENDER: OnceLock<Sender> = OnceLock::new();

/// Registers where purges go (once per process; a second call is ignored).
pub fn register(f: Sender) {
    let _ = SENDER.set(f);
}

/// Hands a purge made here to the other processes; the id to ask the
/// cluster about its acknowledgements, `None` when there is no cluster.
pub fn send(what: &Invalidation) -> Option<u64> {
    SENDER.get().and_then(|f| f(what))
}
