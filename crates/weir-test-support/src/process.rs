//! The `weir` binary as a plain process for the static-file, CLI and
//! lifecycle tests: started from a config in a temporary directory, signalled,
//! its log read; and blocking raw-TCP helpers to talk to it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::poll::poll_until;

/// A running weir process, killed when dropped.
pub struct Weir {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub stderr_path: PathBuf,
}

impl Weir {
    /// Writes `config` as `weir.toml` in a fresh directory (with `dir` holding
    /// anything the test put there first) and runs `bin run --config` on it,
    /// waiting until every port in `wait_ports` accepts connections.
    pub fn start_in(
        bin: impl AsRef<Path>,
        dir: tempfile::TempDir,
        config: &str,
        wait_ports: &[u16],
    ) -> Weir {
        let cfg = dir.path().join("weir.toml");
        std::fs::write(&cfg, config).unwrap();
        let args = ["run", "--config", cfg.to_str().unwrap()];
        Self::spawn(bin, dir, &args, wait_ports)
    }

    pub fn start(bin: impl AsRef<Path>, config: &str, wait_ports: &[u16]) -> Weir {
        Self::start_in(bin, tempfile::tempdir().unwrap(), config, wait_ports)
    }

    /// Runs `bin` with `args` in `dir`, its stderr kept for [`Weir::stderr`].
    pub fn spawn(
        bin: impl AsRef<Path>,
        dir: tempfile::TempDir,
        args: &[&str],
        wait_ports: &[u16],
    ) -> Weir {
        let stderr_path = dir.path().join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(bin.as_ref())
            .args(args)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start weir");
        let mut w = Weir {
            child,
            dir,
            stderr_path,
        };
        for &p in wait_ports {
            w.wait_port(p);
        }
        w
    }

    pub fn wait_port(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "weir exited ({status}) before listening on {port}:\n{}",
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "weir did not listen on {port} within 10 s:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits until the log has `needle`: a line logged as the server starts
    /// may come after its port already accepts connections.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        poll_until(timeout, || self.stderr().contains(needle))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends the signal `name` ("TERM", "HUP"…).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends raw bytes and returns everything the server sends until it closes
/// the connection or `timeout` passes without data.
pub fn raw(port: u16, request: &[u8], timeout: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(request).unwrap();
    read_all(&mut s)
}

pub fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

/// The status code of the first response in `resp`.
pub fn status_of(resp: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(resp);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The 164-byte page of the published benchmarks.
pub const PAGE_164: &str = "<!DOCTYPE html><html><head><title>Benchmark</title></head><body><h1>Hello from the benchmark page</h1><p>This page is exactly one hundred sixty four bytes.</p></bo\n";
