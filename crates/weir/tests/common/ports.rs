//! Ports for the servers the tests start.
//!
//! Handed out in order from a per-process start below Linux's ephemeral
//! range (32768 and up), and checked free for both TCP and UDP (HTTP/3): two
//! tests in one binary never get the same port, and no client socket's
//! ephemeral port can take one between the check and the server's bind.
//! (Asking the kernel for port 0 and releasing it let two parallel tests get
//! the same port, and with SO_REUSEPORT both servers then started.)

use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};

static NEXT: AtomicU16 = AtomicU16::new(0);

/// A port free on 127.0.0.1 for TCP and UDP, never returned twice.
pub fn free_port() -> u16 {
    let base = 10_000 + (std::process::id() % 1_000) as u16 * 20;
    let _ = NEXT.compare_exchange(0, base, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let mut p = NEXT.fetch_add(1, Ordering::SeqCst);
        if p >= 32_000 {
            // Wrapped past the range: start again from the bottom.
            let _ = NEXT.compare_exchange(p + 1, 10_001, Ordering::SeqCst, Ordering::SeqCst);
            p = 10_000;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
        {
            return p;
        }
    }
}
