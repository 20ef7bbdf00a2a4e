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
