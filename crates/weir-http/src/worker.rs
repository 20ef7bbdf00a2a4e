//! The worker a connection runs on ([`Worker`]), and state kept one slot
//! per worker ([`PerWorker`]).
//!
//! A connection is given its worker when it is accepted, and the worker
//! travels down the pipeline with it in [`crate::conn::ConnInfo`]. What the
//! request path changes (a proxy's idle upstream connections, its balancer,
//! its DNS answers) lives in a `PerWorker` owned by the thing it belongs
//! to, so no two workers contend for a slot, and the state goes when its
//! owner goes (a proxy dropped with an old config takes its pools along).
//! Never holds scratch buffers: those belong to the thread a task happens
//! to run on, not to a worker.

/// One of the server's workers: with the per-core runtime, one thread and
/// its listening sockets (HTTP/3's UDP ones too); with the shared runtime,
/// a share of the connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Worker(usize);

impl Worker {
    pub const fn new(index: usize) -> Worker {
        Worker(index)
    }

    pub const fn index(self) -> usize {
        self.0
    }
}

/// A slot of `T` for each worker. Slots are a cache line apart, so one
/// worker's writes never slow another's reads.
pub struct PerWorker<T> {
    slots: Box<[Padded<T>]>,
}

#[repr(align(128))]
struct Padded<T>(T);

impl<T> PerWorker<T> {
    /// `workers` slots (at least one), each made by `make`.
    pub fn new(workers: usize, mut make: impl FnMut() -> T) -> PerWorker<T> {
        PerWorker {
            slots: (0..workers.max(1)).map(|_| Padded(make())).collect(),
        }
    }

    /// The slot of `w`. A worker beyond the slots made (an owner built for
    /// fewer workers) shares one rather than failing.
    pub fn get(&self, w: Worker) -> &T {
        &self.slots[w.0 % self.slots.len()].0
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|p| &p.0)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn each_worker_has_its_own_slot() {
        let p = PerWorker::new(3, || AtomicUsize::new(0));
        p.get(Worker::new(1)).fetch_add(5, Ordering::Relaxed);
        let seen: Vec<usize> = p.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        assert_eq!(seen, [0, 5, 0]);
        // A worker past the slots shares one instead of panicking.
        p.get(Worker::new(4)).fetch_add(1, Ordering::Relaxed);
        assert_eq!(p.get(Worker::new(1)).load(Ordering::Relaxed), 6);
        assert_eq!(PerWorker::new(0, || ()).len(), 1);
        assert!(std::mem::align_of::<Padded<u8>>() >= 128);
    }
}
