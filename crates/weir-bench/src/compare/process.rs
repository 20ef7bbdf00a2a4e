//! Starting a server by hand, waiting for its port, checking its answer,
//! and stopping it by PID (SIGTERM, then SIGKILL for whatever of its own
//! process tree is left). Never signals a process it did not start.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::procstat;
use super::servers::{Launch, Ready};

/// A server process we started.
pub struct Running {
    child: Child,
    /// PID of the process we started.
    pub pid: u32,
    /// The processes started before it ([`Launch::companions`]), stopped
    /// after it.
    companions: Vec<Running>,
}

impl Running {
    /// Starts `launch` with output to `log` (standard output to
    /// `launch.stdout` instead, when set), confined to `cpus` with taskset
    /// when given: taskset sets the affinity and execs the server, so the
    /// PID we hold is the server's and every thread and child it makes
    /// inherits the set. Its companions are started first, each logging
    /// to `<name>.log` beside `log`, and must listen ([`Companion::ready`])
    /// within 10 s.
    ///
    /// [`Companion::ready`]: super::servers::Companion::ready
    pub fn start(launch: &Launch, log: &Path, cpus: Option<&[usize]>) -> std::io::Result<Running> {
        let mut companions: Vec<Running> = Vec::new();
        for c in &launch.companions {
            let clog = log.with_file_name(format!("{}.log", c.name));
            let mut r = Running::start(&c.launch, &clog, cpus)?;
            if let Err(e) = r.wait_listening(&c.ready, Duration::from_secs(10)) {
                r.stop();
                companions.into_iter().rev().for_each(Running::stop);
                return Err(std::io::Error::other(format!(
                    "{}: {e} ({})",
                    c.name,
                    clog.display()
                )));
            }
            companions.push(r);
        }
        let err = std::fs::File::create(log)?;
        let out = match &launch.stdout {
            Some(p) => std::fs::File::create(p)?,
            None => err.try_clone()?,
        };
        let mut cmd = match cpus {
            Some(c) => {
                let mut cmd = Command::new("taskset");
                cmd.arg("-c")
                    .arg(super::limits::cpu_list(c))
                    .arg(&launch.program);
                cmd
            }
            None => Command::new(&launch.program),
        };
        // Its own process group: lighttpd's master signals its whole group on
        // shutdown, which must not include us.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.args(&launch.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in &launch.env {
            cmd.env(k, v);
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                companions.into_iter().rev().for_each(Running::stop);
                return Err(e);
            }
        };
        Ok(Running {
            pid: child.id(),
            child,
            companions,
        })
    }

    /// The PIDs of the process and its companions: every process tree that
    /// makes the server.
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(self.pid)
            .chain(self.companions.iter().flat_map(Running::pids))
            .collect()
    }

    /// Waits until `port` accepts connections; `Err` with the reason if the
    /// process exits or `limit` passes.
    pub fn wait_ready(&mut self, port: u16, limit: Duration) -> Result<(), String> {
        self.wait_listening(&Ready::Port(port), limit)
    }

    /// Waits until `ready` accepts connections (a port on 127.0.0.1 or a
    /// Unix socket); `Err` with the reason if the process exits or `limit`
    /// passes.
    pub fn wait_listening(&mut self, ready: &Ready, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited ({status}) before listening"));
            }
            let up = match ready {
                Ready::Port(port) => {
                    let addr = SocketAddr::from(([127, 0, 0, 1], *port));
                    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                }
                Ready::Unix(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
            };
            if up {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(format!("not listening on {ready} after {limit:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `Some(reason)` once the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status})")),
            _ => None,
        }
    }

    /// Stops the server: SIGTERM to its PID, then SIGKILL to what remains of
    /// the tree it had, after 5 s; then its companions, the same way.
    pub fn stop(mut self) {
        let companions = std::mem::take(&mut self.companions);
        let tree = procstat::process_tree(self.pid);
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in tree {
            if procstat::cpu_time(p).is_some() {
                let _ = kill(Pid::from_raw(p as i32), Signal::SIGKILL);
            }
        }
        let _ = self.child.wait();
        // Give the kernel a moment to release the port.
        std::thread::sleep(Duration::from_millis(100));
        companions.into_iter().rev().for_each(Running::stop);
    }
}

/// Is `port` free on 127.0.0.1? The check binds without listening: a
/// listening check socket, however briefly, would accept (and then reset)
/// connections meant for a server about to start on the port.
pub fn port_free(port: u16) -> bool {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .and_then(|s| {
            // As servers bind: a connection in TIME_WAIT does not hold the port.
            s.set_reuse_address(true)?;
            s.bind(&addr.into())
        })
        .is_ok()
}

/// Fetches `path` once (Host: localhost, Connection: close) and returns the
/// status and body. TLS accepts any certificate.
pub fn fetch(port: u16, tls: bool, path: &str) -> Result<(u16, Vec<u8>), String> {
    fetch_as(port, tls, "localhost", path)
}

/// [`fetch`] naming `host` (Host, and SNI over TLS).
pub fn fetch_as(port: u16, tls: bool, host: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    fetch_on(tcp, tls, host, path)
}

/// Fetches `path` once with `Host: host` (and SNI `host` over TLS) on an
/// already connected stream.
pub fn fetch_on(
    tcp: TcpStream,
    tls: bool,
    host: &str,
    path: &str,
) -> Result<(u16, Vec<u8>), String> {
    fetch_full(tcp, tls, host, path, &[]).map(|f| (f.status, f.body))
}

/// One answer as [`fetch_with`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Status code.
    pub status: u16,
    /// Its `Content-Encoding`, if any.
    pub content_encoding: Option<String>,
    /// The body, de-chunked (still in its content coding).
    pub body: Vec<u8>,
}

/// [`fetch_as`] sending `headers` too (an `Accept-Encoding`, say).
pub fn fetch_with(
    port: u16,
    tls: bool,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Fetched, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    fetch_full(tcp, tls, host, path, headers)
}

fn fetch_full(
    mut tcp: TcpStream,
    tls: bool,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<Fetched, String> {
    let extra: String = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    if tls {
        let cfg = crate::load::tls::client_config(true, None, &[b"http/1.1"])
            .map_err(|e| e.to_string())?;
        let name = crate::load::tls::server_name(host).map_err(|e| e.to_string())?;
        let mut conn = rustls::ClientConnection::new(cfg, name).map_err(|e| format!("tls: {e}"))?;
        let mut s = rustls::Stream::new(&mut conn, &mut tcp);
        s.write_all(req.as_bytes())
            .map_err(|e| format!("tls write: {e}"))?;
        match s.read_to_end(&mut raw) {
            Ok(_) => {}
            // Some servers close without close_notify; the data is complete.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) => return Err(format!("tls read: {e}")),
        }
    } else {
        tcp.write_all(req.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        tcp.read_to_end(&mut raw)
            .map_err(|e| format!("read: {e}"))?;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(&raw) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => {
            return Err(format!(
                "bad response head: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(200)])
            ));
        }
    };
    let status = resp.code.unwrap_or(0);
    let content_encoding = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-encoding"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    let chunked = resp.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding") && h.value.eq_ignore_ascii_case(b"chunked")
    });
    let mut body = raw[n..].to_vec();
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            match httparse::parse_chunk_size(rest) {
                Ok(httparse::Status::Complete((i, 0))) => {
                    let _ = i;
                    break;
                }
                Ok(httparse::Status::Complete((i, size))) => {
                    let size = size as usize;
                    if rest.len() < i + size + 2 {
                        return Err("truncated chunk".into());
                    }
                    out.extend_from_slice(&rest[i..i + size]);
                    rest = &rest[i + size + 2..];
                }
                _ => return Err("bad chunk".into()),
            }
        }
        body = out;
    }
    Ok(Fetched {
        status,
        content_encoding,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::limits::{self, CpuSplit};

    #[test]
    fn a_pinned_server_and_the_generator_run_on_disjoint_cpus() {
        let Ok(split) = CpuSplit::of_this_process() else {
            return; // one CPU: no pinned mode
        };
        let dir = std::env::temp_dir().join(format!("wb-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A shell with a child of its own: the whole tree must be confined.
        let launch = Launch {
            program: "sh".into(),
            args: vec!["-c".into(), "sleep 5 & sleep 5; wait".into()],
            env: vec![],
            config: PathBuf::new(),
            validate: None,
            stdout: None,
            companions: vec![],
        };
        let running = Running::start(&launch, &dir.join("log"), Some(&split.server)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let tree = procstat::process_tree(running.pid);
        let server_cpus: Vec<procstat::TaskCpus> =
            tree.iter().flat_map(|&p| procstat::task_cpus(p)).collect();
        let confined = procstat::tree_confined(running.pid, &split.server);
        let generator = split.generator.clone();
        let generator_cpus = std::thread::spawn(move || {
            limits::pin_current_thread(&generator).unwrap();
            std::thread::yield_now();
            procstat::task_cpus(std::process::id())
                .into_iter()
                .find(|t| t.tid == nix::unistd::gettid().as_raw() as u32)
                .unwrap()
        })
        .join()
        .unwrap();
        running.stop();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(tree.len() >= 2, "the shell and its sleeps: {tree:?}");
        confined.unwrap();
        assert_eq!(generator_cpus.allowed, split.generator);
        assert!(split.generator.contains(&generator_cpus.last_cpu));
        for t in &server_cpus {
            assert!(
                t.allowed
                    .iter()
                    .all(|c| !generator_cpus.allowed.contains(c)),
                "server thread {t:?} may share the generator's {generator_cpus:?}"
            );
        }
    }
}
