//! Listening sockets, made with socket2 so that SO_REUSEPORT (one socket per
//! worker), the backlog, TCP_NODELAY and IPV6_V6ONLY are ours to set.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog like nginx's default on Linux (511) rounded up: a burst of
/// thousands of connects must not be refused.
const BACKLOG: i32 = 4096;

/// Fails with `AddrInUse` if anything listens on `addr` already. SO_REUSEPORT
/// would otherwise let a second weir (or anything of the same user with the
/// option set) share the port silently, each getting part of the
/// connections; a socket without the option cannot join such a group.
pub fn ensure_unbound(addr: SocketAddr) -> io::Result<()> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())
}

pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if reuse_port {
        sock.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one
    // system call here instead of one per connection.
    sock.set_tcp_nodelay(true)?;
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    Ok(sock.into())
}

/// Steers each new connection of a SO_REUSEPORT group to the socket whose
/// index is the CPU that received it (modulo `workers`), with a classic BPF
/// program on the group (`SO_ATTACH_REUSEPORT_CBPF`; the kernel's
/// `reuseport_bpf_cpu` selftest does the same).
pub fn steer_by_cpu(sock: &TcpListener, workers: usize) -> io::Result<()> {
    use nix::libc;
    // BPF_LD|BPF_W|BPF_ABS, BPF_ALU|BPF_MOD|BPF_K, BPF_RET|BPF_A
    let mut prog = [
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: (libc::SKF_AD_OFF + libc::SKF_AD_CPU) as u32,
        },
        libc::sock_filter {
            code: 0x94,
            jt: 0,
            jf: 0,
            k: workers.max(1) as u32,
        },
        libc::sock_filter {
            code: 0x16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    attach_program(sock, &mut prog)
}

/// Attaches the classic BPF program `prog` to the SO_REUSEPORT group of
/// `sock` (replacing any before it): its return value picks the socket.
pub fn attach_program(
    sock: &impl std::os::fd::AsFd,
    prog: &mut [nix::libc::sock_filter],
) -> io::Result<()> {
    let fprog = nix::libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::AttachReusePortCbpf, &fprog)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connects from a thread pinned to `cpu`; on loopback the kernel takes
    /// the SYN on the sending CPU, so that is the CPU the program sees.
    fn connect_from(cpu: usize, addr: SocketAddr) -> std::net::TcpStream {
        std::thread::spawn(move || {
            let mut set = nix::sched::CpuSet::new();
            set.set(cpu).unwrap();
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
            std::net::TcpStream::connect(addr).unwrap()
        })
        .join()
        .unwrap()
    }

    /// Which of `socks` has the pending connection.
    fn accepted_by(socks: &[TcpListener]) -> usize {
        for _ in 0..200 {
            for (i, s) in socks.iter().enumerate() {
                if s.accept().is_ok() {
                    return i;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("no socket of the group got the connection");
    }

    #[test]
    fn cpu_steering_gives_each_connection_to_its_cpus_worker() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = 2;
        let first = bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let socks = vec![first, bind(addr, true).unwrap()];
        steer_by_cpu(&socks[0], workers).unwrap();
        for round in 0..8 {
            for cpu in 0..cpus.min(4) {
                let _c = connect_from(cpu, addr);
                assert_eq!(
                    accepted_by(&socks),
                    cpu % workers,
                    "round {round}: a connection from CPU {cpu}"
                );
            }
        }
    }
}
