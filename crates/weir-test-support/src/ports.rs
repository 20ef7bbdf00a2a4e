//! Ports for the servers the tests start, unique within a test process
//! and reserved against other test processes.
//!
//! Handed out in order from a per-process start below Linux's ephemeral
//! range (32768 and up), so no client socket's ephemeral port can take one
//! between the check and the server's bind, and checked free for both TCP
//! and UDP (HTTP/3). Two tests in one binary never get the same port.
//!
//! Test processes running side by side (two `cargo test` runs, or weir's
//! and weir-bench's suites at once) can have overlapping ranges, so each
//! port is also reserved across processes: a lock on a file named for it,
//! held until the process exits (the kernel drops the lock with the
//! process, also when it crashes). Without the reservation two processes
//! could both start a server on one port (weir's sockets use SO_REUSEPORT),
//! and a client of one reached the other.
//!
//! The check binds without listening. A listening check socket, however
//! briefly, accepted connections meant for another process's server on the
//! same port, and reset them as it closed: seen as a rare
//! "Connection reset by peer" in `proxy_upgrade` with another suite beside it.

use std::fs::File;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};

use socket2::{Domain, Protocol, Socket, Type};

static NEXT: AtomicU16 = AtomicU16::new(0);

/// The lock files of the ports this process holds, kept open to its end.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// A port free on 127.0.0.1 for TCP and UDP, never returned twice, nor
/// to another test process while this one runs.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive ports, each as [`free_port`] gives.
pub fn free_ports(n: u16) -> u16 {
    let base = 10_000 + (std::process::id() % 1_000) as u16 * 20;
    let _ = NEXT.compare_exchange(0, base, Ordering::SeqCst, Ordering::SeqCst);
    'search: loop {
        let mut first = NEXT.fetch_add(n, Ordering::SeqCst);
        if first + n > 32_000 {
            // Wrapped past the range: start again from the bottom.
            let _ =
                NEXT.compare_exchange(first + n, 10_000 + n, Ordering::SeqCst, Ordering::SeqCst);
            first = 10_000;
        }
        let mut locks = Vec::new();
        for p in first..first + n {
            match reserve(p) {
                Some(lock) if unbound(p) => locks.push(lock),
                _ => continue 'search,
            }
        }
        HELD.lock().unwrap().extend(locks);
        return first;
    }
}

/// Locks the file for `port`; `None` if another process holds it. A
/// temporary directory that cannot hold the files fails the test at once
/// (every port would look taken, and the search would never end).
fn reserve(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("weir-test-ports");
    let path = dir.join(port.to_string());
    let file = std::fs::create_dir_all(&dir)
        .and_then(|()| {
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
        })
        .unwrap_or_else(|e| panic!("test ports: cannot open {}: {e}", path.display()));
    match file.try_lock() {
        Ok(()) => Some(file),
        Err(std::fs::TryLockError::WouldBlock) => None,
        Err(std::fs::TryLockError::Error(e)) => {
            panic!("test ports: cannot lock {}: {e}", path.display())
        }
    }
}

/// Nothing holds `port` for TCP or UDP. Bound, never listening: no
/// connection can land on the check socket.
fn unbound(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let free = |ty: Type, proto: Protocol| {
        Socket::new(Domain::IPV4, ty, Some(proto))
            .and_then(|s| {
                // As servers bind: a connection in TIME_WAIT does not hold the port.
                s.set_reuse_address(true)?;
                s.bind(&addr.into())
            })
            .is_ok()
    };
    free(Type::STREAM, Protocol::TCP) && free(Type::DGRAM, Protocol::UDP)
}
