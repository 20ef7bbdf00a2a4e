//! The `weir` binary as a process ([`Weir`], which every end-to-end test
//! starts it with): from a config in a temporary directory or the test's,
//! waited for, signalled, its log read; the other servers a test compares
//! weir with ([`Daemon`]); and blocking raw-TCP helpers to talk to them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::poll::poll_until;
use crate::ports::free_port;

/// A running weir process, killed when dropped: the one handle every
/// end-to-end test starts the binary with.
pub struct Weir {
    pub child: Child,
    /// 127.0.0.1 at the first port waited for (port 0 if none).
    pub addr: SocketAddr,
    dir: Dir,
    /// weir's stderr, when kept in a file rather than shown with the test's.
    log: Option<PathBuf>,
}

/// Where weir runs and its config is.
enum Dir {
    /// A temporary directory made for it, removed when it stops.
    Own(tempfile::TempDir),
    /// The test's own directory.
    Given(PathBuf),
}

/// How long weir may take to listen: debug logging and TLS set-up on a
/// loaded machine can take seconds.
const LISTEN_WITHIN: Duration = Duration::from_secs(20);

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

    /// [`Weir::start_in`] a fresh temporary directory.
    pub fn start_on(bin: impl AsRef<Path>, config: &str, wait_ports: &[u16]) -> Weir {
        Self::start_in(bin, tempfile::tempdir().unwrap(), config, wait_ports)
    }

    /// Runs `bin` with `args` in `dir`, its stderr kept for [`Weir::log`].
    pub fn spawn(
        bin: impl AsRef<Path>,
        dir: tempfile::TempDir,
        args: &[&str],
        wait_ports: &[u16],
    ) -> Weir {
        let log = dir.path().join("stderr.log");
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(args).current_dir(dir.path());
        Self::launch(cmd, Dir::Own(dir), Some(log), wait_ports)
    }

    /// Starts `bin` with `config`, where `{PORT}` is replaced by a free port
    /// (the one waited for, in [`Weir::addr`]) and `{DIR}` by a temporary
    /// directory. weir's log goes to the test's stderr, at `WEIR_TEST_LOG`
    /// (default `weir=warn`).
    pub fn start(bin: impl AsRef<Path>, config: &str) -> Weir {
        Self::templated(bin.as_ref(), config, false)
    }

    /// As [`Weir::start`], with weir's log (at its default level) kept
    /// in the directory for [`Weir::log`] instead.
    pub fn start_logged(bin: impl AsRef<Path>, config: &str) -> Weir {
        Self::templated(bin.as_ref(), config, true)
    }

    fn templated(bin: &Path, config: &str, logged: bool) -> Weir {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let text = config
            .replace("{PORT}", &port.to_string())
            .replace("{DIR}", &dir.path().display().to_string());
        let path = dir.path().join("weir.toml");
        std::fs::write(&path, text).unwrap();
        let mut cmd = Command::new(bin);
        cmd.args(["run", "-c"]).arg(&path);
        let log = logged.then(|| dir.path().join("stderr.log"));
        if !logged {
            // WEIR_TEST_LOG=weir=debug shows more when chasing a failure.
            cmd.env(
                "WEIR_LOG",
                std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "weir=warn".into()),
            );
        }
        Self::launch(cmd, Dir::Own(dir), log, &[port])
    }

    /// Starts `bin` with arguments; it must listen on `port`. Its log goes
    /// to the test's stderr.
    pub fn start_args(bin: impl AsRef<Path>, args: &[&str], port: u16) -> Weir {
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(args);
        Self::launch(cmd, Dir::Own(tempfile::tempdir().unwrap()), None, &[port])
    }

    /// Writes `config` to `dir/weir.toml` and starts `bin` on it with its
    /// debug log kept (the TLS tests read what the certificate manager
    /// did); waits for `port`.
    pub fn start_debug(bin: impl AsRef<Path>, dir: &Path, config: &str, port: u16) -> Weir {
        let cfg = dir.join("weir.toml");
        std::fs::write(&cfg, config).unwrap();
        // Several weirs may share `dir` in one test.
        let log = dir.join(format!("weir-{}.log", rand::random::<u32>()));
        let mut cmd = Command::new(bin.as_ref());
        cmd.args(["run", "--config"])
            .arg(&cfg)
            .env("WEIR_LOG", "weir=debug");
        Self::launch(cmd, Dir::Given(dir.to_path_buf()), Some(log), &[port])
    }

    /// Spawns `cmd` with its stderr in `log` (or the test's) and waits for
    /// `wait_ports`.
    fn launch(mut cmd: Command, dir: Dir, log: Option<PathBuf>, wait_ports: &[u16]) -> Weir {
        let stderr = match &log {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::inherit(),
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start weir");
        let port = wait_ports.first().copied().unwrap_or(0);
        let mut w = Weir {
            child,
            addr: addr(port),
            dir,
            log,
        };
        for &p in wait_ports {
            w.wait_port(p);
        }
        w
    }

    pub fn wait_port(&mut self, port: u16) {
        let deadline = Instant::now() + LISTEN_WITHIN;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "weir exited ({status}) before listening on {port}:\n{}",
                    self.log()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "weir did not listen on {port} within {LISTEN_WITHIN:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// weir's log so far (empty when it goes to the test's stderr).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Waits until the log has `needle`: a line logged as the server starts
    /// may come after its port already accepts connections.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        poll_until(timeout, || self.log().contains(needle))
    }

    /// The directory weir runs in and its config is.
    pub fn path(&self) -> &Path {
        match &self.dir {
            Dir::Own(d) => d.path(),
            Dir::Given(p) => p,
        }
    }

    /// `http://127.0.0.1:PORT{path}` at [`Weir::addr`].
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// VmRSS of the weir process in KiB.
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
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

    /// Sends SIGTERM, waits up to 10 s for the exit, and returns the log.
    pub fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.wait_exit(Duration::from_secs(10));
        self.log()
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server other than weir (nginx, apache2, caddy, haproxy…) that a test
/// runs in the foreground, stopped by its PID when dropped: never by name,
/// so the machine's own daemons are left alone.
pub struct Daemon {
    child: Child,
    /// Stop with SIGTERM and wait, for a parent that stops its own children
    /// (SIGKILL would leave them running).
    graceful: bool,
}

impl Daemon {
    /// Runs `cmd` and waits until it accepts connections on `port`. A missing
    /// program fails saying `install`; a program that exits first fails with
    /// the files in `logs`.
    pub fn start(mut cmd: Command, port: u16, install: &str, logs: &[PathBuf]) -> Daemon {
        let program = PathBuf::from(cmd.get_program());
        let name = program.file_name().unwrap_or_default().to_string_lossy();
        assert!(
            program.exists(),
            "{} not found: this test needs it ({install}; scripts/test.sh installs it)",
            program.display()
        );
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let deadline = Instant::now() + LISTEN_WITHIN;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                let logs: String = logs
                    .iter()
                    .map(|f| std::fs::read_to_string(f).unwrap_or_default())
                    .collect();
                panic!("{name} exited before listening on {port}: {st}\n{logs}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{name} did not listen on {port} within {LISTEN_WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon {
            child,
            graceful: false,
        }
    }

    /// Stops it with SIGTERM (then SIGKILL after 10 s) rather than SIGKILL.
    pub fn graceful(mut self) -> Daemon {
        self.graceful = true;
        self
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.graceful {
            let _ = Command::new("kill")
                .arg(self.child.id().to_string())
                .status();
            if poll_until(Duration::from_secs(10), || {
                matches!(self.child.try_wait(), Ok(Some(_)))
            }) {
                return;
            }
        }
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
