//! Binary upgrade: the running process starts a new one (the binary now on
//! disk at its path, with its own command line) and hands it every
//! listening socket, as nginx does on USR2 and HAProxy with `-x`. The new
//! process serves from the very same sockets, so no connection in a queue
//! is refused; once it says it is ready the old one drains and exits. If
//! the new one fails or never gets ready, it is stopped and the old one
//! goes on serving.
//!
//! The sockets travel as inherited descriptors in systemd's socket
//! activation protocol (`LISTEN_FDS`, read with the listenfd crate, which
//! also makes weir take sockets from a systemd `.socket` unit); each is
//! matched to the config by its own local address. Readiness travels as a
//! datagram to the socket path `WEIR_UPGRADE_READY` names. Descriptors are
//! mapped into the child by command-fds: both crates keep the unsafe
//! descriptor handling out of weir. Owns the hand-over only; never decides
//! when to upgrade.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const READY: &str = "WEIR_UPGRADE_READY";

/// How long the new process may take to start serving.
const READY_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("cannot start {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("the new process exited before it was ready ({0})")]
    Exited(std::process::ExitStatus),
    #[error("the new process was not ready within {0:?}; it was stopped")]
    NotReady(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("an upgrade is already under way")]
    Busy,
}

/// Sockets this process was given at start: by the process it upgrades,
/// or by systemd.
#[derive(Default)]
pub struct Inherited {
    /// Listening TCP sockets by local address (several per address under
    /// the per-core runtime).
    pub tcp: HashMap<SocketAddr, Vec<TcpListener>>,
    /// UDP sockets (HTTP/3) by local address: one per worker.
    pub udp: HashMap<SocketAddr, Vec<UdpSocket>>,
    /// Listening Unix sockets by path (the admin API's).
    pub unix: HashMap<PathBuf, UnixListener>,
    /// Where to say "ready" when an upgrade started this process.
    ready: Option<PathBuf>,
}

/// What the old process hands over: duplicates of its sockets.
pub struct Handover {
    pub fds: Vec<OwnedFd>,
}

impl Inherited {
    /// Takes the sockets passed in `LISTEN_FDS` (none if it is not set).
    /// Call before any thread starts: it clears those variables.
    pub fn from_env() -> Inherited {
        let mut out = Inherited {
            ready: std::env::var_os(READY).map(PathBuf::from),
            ..Default::default()
        };
        let mut fds = listenfd::ListenFd::from_env();
        for i in 0..fds.len() {
            if let Ok(Some(s)) = fds.take_tcp_listener(i) {
                match s.local_addr() {
                    Ok(a) => out.tcp.entry(a).or_default().push(s),
                    Err(e) => tracing::warn!("inherited socket {i}: {e}; ignored"),
                }
            } else if let Ok(Some(s)) = fds.take_udp_socket(i) {
                if let Ok(a) = s.local_addr() {
                    out.udp.entry(a).or_default().push(s);
                }
            } else if let Ok(Some(s)) = fds.take_unix_listener(i) {
                if let Some(p) = s
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(PathBuf::from))
                {
                    out.unix.insert(p, s);
                }
            } else {
                tracing::warn!("inherited descriptor {i} is not a listening socket; ignored");
            }
        }
        out
    }

    /// Whether this process was started by an upgrade.
    pub fn upgraded(&self) -> bool {
        self.ready.is_some()
    }

    /// Tells the process that started this one that it serves now.
    pub fn signal_ready(&mut self) {
        if let Some(p) = self.ready.take() {
            let sent = UnixDatagram::unbound().and_then(|s| s.send_to(b"ready", &p));
            if let Err(e) = sent {
                tracing::warn!("upgrade: cannot tell the old process that this one is ready: {e}");
            }
        }
    }
}

/// Starts `exe args` with the sockets in `h` and waits until it is ready.
/// Returns its process id.
pub fn spawn(exe: &PathBuf, args: &[OsString], h: Handover) -> Result<u32, UpgradeError> {
    use command_fds::{CommandFdExt, FdMapping};

    let ready_path = std::env::temp_dir().join(format!(
        "weir-upgrade-{}-{}.sock",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let ready = UnixDatagram::bind(&ready_path)?;
    let _cleanup = RemoveOnDrop(ready_path.clone());
    ready.set_read_timeout(Some(Duration::from_millis(100)))?;

    let n = h.fds.len();
    let mappings = h
        .fds
        .into_iter()
        .enumerate()
        .map(|(i, fd)| FdMapping {
            parent_fd: fd,
            child_fd: 3 + i as i32,
        })
        .collect();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args)
        .env("LISTEN_FDS", n.to_string())
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS_FIRST_FD")
        .env(READY, &ready_path);
    cmd.fd_mappings(mappings)
        .map_err(|e| UpgradeError::Io(std::io::Error::other(e)))?;
    let mut child = cmd.spawn().map_err(|source| UpgradeError::Spawn {
        exe: exe.clone(),
        source,
    })?;
    // The command holds the parent's copies of the descriptors.
    drop(cmd);
    let pid = child.id();
    tracing::info!("upgrade: started {} as process {pid}", exe.display());

    let deadline = Instant::now() + READY_WITHIN;
    let mut buf = [0u8; 16];
    loop {
        if ready.recv(&mut buf).is_ok() {
            // Reaped by a thread of its own: it normally outlives this
            // process, but must not become a zombie if it fails first.
            std::thread::spawn(move || child.wait());
            return Ok(pid);
        }
        if let Some(status) = child.try_wait()? {
            return Err(UpgradeError::Exited(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(UpgradeError::NotReady(READY_WITHIN));
        }
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
