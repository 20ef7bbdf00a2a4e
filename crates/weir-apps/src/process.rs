//! One instance's process: started by `sh -c "exec RUN"` in a process
//! group of its own with where to listen in its environment, its stdout
//! and stderr written to weir's log line by line (tagged with the app and
//! the instance), readiness by a GET of the `ready` path, and a stop that
//! signals the whole group: SIGTERM, then SIGKILL after `stop_timeout`.
//! An instance also gets SIGTERM if weir dies without stopping it
//! ([`die_with_weir`]). Also the env file (refused when others may read
//! it), free ports, and the restart back-off. Never waits on a process
//! synchronously.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use weir_config::app::AppConfig;

/// Where an instance listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Port(u16),
    Socket(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot start `{run}`: {source}")]
    Spawn { run: String, source: std::io::Error },
    #[error("exited before it was ready ({0})")]
    Exited(std::process::ExitStatus),
    #[error("not ready within {0:?} (GET {1} never answered 2xx or 3xx)")]
    NotReady(Duration, String),
    #[error("env file {path}: {why}")]
    EnvFile { path: PathBuf, why: String },
}

/// A free loopback port for an instance, below the kernel's ephemeral
/// range: a port from that range may be taken by an outgoing connection
/// (weir's own, to another instance) while its instance is stopped, and
/// the next start could not bind it. None of the last [`RECENT`] ports
/// given is given again (one may still be held by a process draining).
/// The kernel's choice when nothing below is free.
pub fn free_port() -> std::io::Result<u16> {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    static GIVEN: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());
    const LOWEST: u16 = 10_000;
    let below = ephemeral_start().max(LOWEST + 1);
    let span = u32::from(below - LOWEST);
    // Spread over the range (two weirs on one machine rarely meet).
    let seed = std::process::id().wrapping_mul(2_654_435_761);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..span.min(4096) {
        let port = LOWEST + ((seed.wrapping_add(i * 7919)) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            if given.len() == RECENT {
                given.pop_front();
            }
            given.push_back(port);
            return Ok(port);
        }
    }
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// Ports [`free_port`] keeps from giving again: a bound, so a process that
/// restarts instances for months still finds ports below the ephemeral range.
const RECENT: usize = 1024;

/// The first port of `net.ipv4.ip_local_port_range` (32768 by default).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// `KEY=value` lines (blank lines and `#` comments skipped, optional
/// quotes removed), refused when the file is readable or writable by
/// anyone but its owner and group's owner (mode `& 0o007`), as secrets.
pub fn read_env_file(path: &Path) -> Result<Vec<(String, String)>, StartError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |why: String| StartError::EnvFile {
        path: path.to_path_buf(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    let mode = meta.permissions().mode();
    if mode & 0o007 != 0 {
        return Err(err(format!(
            "mode {:o} lets others read it; `chmod o-rwx` it",
            mode & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            return Err(err(format!("line {}: no `=`", n + 1)));
        };
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        out.push((k.trim().to_string(), v.to_string()));
    }
    Ok(out)
}

/// A single command is exec'd, so the instance's first process is the app
/// itself (its pid, its exit status); a compound one (`a; b`, `a & b`,
/// `a | b`) runs under the shell.
fn shell_line(run: &str) -> String {
    if run.contains([';', '&', '|', '\n', '(', '`']) {
        run.to_string()
    } else {
        format!("exec {run}")
    }
}

/// Starts instance `n` of `cfg` listening on `target`, its output logged.
pub fn spawn(cfg: &AppConfig, n: usize, target: &Target) -> Result<Child, StartError> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(shell_line(&cfg.run))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a stop reaches every process the command starts.
        .process_group(0)
        .kill_on_drop(true);
    die_with_weir(&mut cmd);
    // A config read from the working directory has an empty base.
    if !cfg.dir.as_os_str().is_empty() {
        cmd.current_dir(&cfg.dir);
    }
    if let Some(f) = &cfg.env_file {
        for (k, v) in read_env_file(f)? {
            cmd.env(k, v);
        }
    }
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    match target {
        Target::Port(p) => {
            cmd.env("PORT", p.to_string()).env("HOST", "127.0.0.1");
        }
        Target::Socket(s) => {
            cmd.env("SOCKET", s);
        }
    }
    cmd.env("WEIR_APP", &cfg.name)
        .env("WEIR_INSTANCE", n.to_string());
    let mut child = cmd.spawn().map_err(|source| StartError::Spawn {
        run: cfg.run.clone(),
        source,
    })?;
    let tag = format!("app {} #{n}", cfg.name);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(log_lines(out, tag.clone()));
    }
    // Apps log to stderr as much as to stdout: both are info, stderr marked.
    if let Some(err) = child.stderr.take() {
        tokio::spawn(log_lines(err, format!("{tag} (stderr)")));
    }
    Ok(child)
}

/// Asks the kernel to send the instance SIGTERM when weir dies (SIGKILL,
/// the OOM killer, a crash), which a stop by weir itself would have done:
/// no app outlives the weir that ran it. The signal reaches the command's
/// first process, which is the app itself unless the command is compound.
/// The kernel sends it when the thread that forked exits: instances are
/// started from their supervisor's own thread, which outlives them.
#[allow(unsafe_code)]
fn die_with_weir(cmd: &mut Command) {
    let weir = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child before exec; it makes only
    // async-signal-safe system calls (prctl, getppid) and allocates
    // nothing (its errors are bare errno values).
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
            // weir died before the request took effect: go no further.
            if nix::unistd::getppid() != weir {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

async fn log_lines<R: tokio::io::AsyncRead + Unpin>(r: R, tag: String) {
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "weir::app", "{tag}: {line}");
    }
}

/// Waits until a GET of `path` on `target` answers 2xx or 3xx, checking
/// every 50 ms, within `timeout`; an exit of `child` ends the wait.
pub async fn wait_ready(
    child: &mut Child,
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<(), StartError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(StartError::Exited(st));
        }
        if check(target, path).await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StartError::NotReady(timeout, path.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One readiness or health check: `GET path` answered 2xx or 3xx within a second.
pub async fn check(target: &Target, path: &str) -> bool {
    match target {
        Target::Port(p) => match tokio::net::TcpStream::connect(("127.0.0.1", *p)).await {
            Ok(s) => check_on(s, path).await,
            Err(_) => false,
        },
        Target::Socket(sock) => match tokio::net::UnixStream::connect(sock).await {
            Ok(s) => check_on(s, path).await,
            Err(_) => false,
        },
    }
}

/// The check on an open connection, through the proxy's HTTP/1.1 client
/// (the one codec weir writes and reads HTTP/1 with).
async fn check_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static>(
    s: S,
    path: &str,
) -> bool {
    use weir_proxy::h1_client::one_shot;
    let host = http::HeaderValue::from_static("localhost");
    let mut fields = http::HeaderMap::new();
    fields.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    let once = one_shot::send(s, &http::Method::GET, path, &host, &fields, None);
    let Ok(Ok((head, c))) = tokio::time::timeout(Duration::from_secs(1), once).await else {
        return false;
    };
    // The rest of the answer is read (a little of it, briefly) so the app
    // does not see its check hang up on it mid-write.
    let rest = one_shot::read_body(c, head.framing, 64 * 1024);
    let _ = tokio::time::timeout(Duration::from_millis(200), rest).await;
    let status = head.parts.status;
    status.is_success() || status.is_redirection()
}

/// Stops an instance: SIGTERM to its process group `pgid` (its first
/// process's id: it may have exited already, leaving others), SIGKILL to
/// the group after `grace` if the first has not exited; waits for it.
pub async fn stop(child: &mut Child, pgid: u32, grace: Duration) {
    // 0 would be weir's own group.
    if pgid == 0 {
        return;
    }
    let group = Pid::from_raw(pgid as i32);
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    } else {
        // The leader is gone; anything it left in the group goes too.
        let _ = killpg(group, Signal::SIGKILL);
    }
}

/// A digest of a release: the settings, the env file's text, and the
/// paths, sizes and modification times under `watch` (at most
/// [`WATCH_LIMIT`] entries). Equal digests: a reload leaves the app alone.
/// Reads the file system: call it off the workers.
pub fn release(cfg: &AppConfig) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{cfg:?}").hash(&mut h);
    if let Some(f) = &cfg.env_file {
        std::fs::read(f).ok().hash(&mut h);
    }
    let mut budget = WATCH_LIMIT;
    for p in &cfg.watch {
        walk(p, &mut h, &mut budget, 0);
    }
    h.finish()
}

/// The most files and directories [`release`] looks at.
pub const WATCH_LIMIT: usize = 10_000;

fn walk(p: &Path, h: &mut impl std::hash::Hasher, budget: &mut usize, depth: usize) {
    use std::hash::Hash;
    if *budget == 0 || depth > 32 {
        return;
    }
    *budget -= 1;
    p.hash(h);
    // Links are not followed: a link out of the tree counts by its target name.
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    (m.len(), m.modified().ok()).hash(h);
    if m.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for e in entries {
            walk(&e, h, budget, depth + 1);
        }
    }
}

/// The wait before restarting an instance that exited: doubling from
/// 100 ms to 30 s, back to the start after a run of a minute.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Self::FIRST }
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(30);
    const STABLE: Duration = Duration::from_secs(60);

    /// The wait after a run of `ran`.
    pub fn after(&mut self, ran: Duration) -> Duration {
        if ran >= Self::STABLE {
            self.next = Self::FIRST;
        }
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(run: &str, dir: &Path) -> AppConfig {
        AppConfig {
            name: "t".into(),
            run: run.into(),
            instances: 1,
            dir: dir.to_path_buf(),
            env: vec![("GREETING".into(), "hi".into())],
            env_file: None,
            ready: "/".into(),
            start_timeout: Duration::from_secs(10),
            stop_timeout: Duration::from_secs(2),
            idle: None,
            socket: false,
            queue: 16,
            watch: vec![dir.to_path_buf()],
        }
    }

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_given_twice() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        for p in &ports {
            assert!(*p >= 10_000 && *p < ephemeral_start(), "{p}");
        }
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }

    #[test]
    fn a_release_changes_with_its_settings_env_file_and_watched_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("server.js"), "v1").unwrap();
        let c = cfg("node server.js", d.path());
        let first = release(&c);
        assert_eq!(release(&c), first, "nothing changed");
        std::fs::write(d.path().join("server.js"), "v2 longer").unwrap();
        let second = release(&c);
        assert_ne!(second, first, "a file changed");
        let mut c2 = c.clone();
        c2.run = "node server.js --fast".into();
        assert_ne!(release(&c2), second, "the command changed");
        let env = d.path().join("app.env");
        std::fs::write(&env, "A=1").unwrap();
        let mut c3 = c.clone();
        c3.watch.clear();
        c3.env_file = Some(env.clone());
        let with_env = release(&c3);
        std::fs::write(&env, "A=2").unwrap();
        assert_ne!(release(&c3), with_env, "the env file changed");
    }

    #[tokio::test]
    async fn an_instance_starts_is_ready_and_its_whole_group_stops() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("index.html"), "ok").unwrap();
        // A shell that starts a child: the group stop must reach both.
        let c = cfg(
            "sh -c 'sleep 300 & exec python3 -m http.server \"$PORT\" --bind \"$HOST\"'",
            d.path(),
        );
        let port = free_port().unwrap();
        let target = Target::Port(port);
        let mut child = spawn(&c, 0, &target).unwrap();
        let pid = child.id().unwrap() as i32;
        wait_ready(&mut child, &target, "/", Duration::from_secs(20))
            .await
            .unwrap();
        assert!(check(&target, "/index.html").await);
        stop(&mut child, pid as u32, Duration::from_secs(2)).await;
        assert!(!check(&target, "/").await);
        // Nothing of the group is left running (the `sleep` included; a
        // zombie waiting for its reaper runs nothing).
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while !group_members(pid).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "processes of the group survived: {:?}",
                group_members(pid)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Live (not zombie) processes whose process group is `pgid`.
    fn group_members(pgid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // Fields after the command's closing parenthesis: state, ppid, pgrp.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string() {
                out.push(pid);
            }
        }
        out
    }

    #[tokio::test]
    async fn a_command_that_fails_is_reported_not_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg("exit 3", d.path());
        let target = Target::Port(free_port().unwrap());
        let mut child = spawn(&c, 0, &target).unwrap();
        let t = std::time::Instant::now();
        let e = wait_ready(&mut child, &target, "/", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(matches!(e, StartError::Exited(_)), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        // One that never listens: not ready within its timeout.
        let c = cfg("sleep 30", d.path());
        let mut child = spawn(&c, 0, &target).unwrap();
        let pid = child.id().unwrap();
        let e = wait_ready(&mut child, &target, "/", Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, StartError::NotReady(..)), "{e}");
        stop(&mut child, pid, Duration::from_millis(200)).await;
    }

    #[test]
    fn env_files_others_can_read_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("app.env");
        std::fs::write(
            &f,
            "# secrets\nexport DB=\"postgres://x\"\nTOKEN='a=b'\n\nPLAIN=1\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_env_file(&f).unwrap_err();
        assert!(e.to_string().contains("lets others read it"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read_env_file(&f).unwrap(),
            [
                ("DB".to_string(), "postgres://x".to_string()),
                ("TOKEN".to_string(), "a=b".to_string()),
                ("PLAIN".to_string(), "1".to_string()),
            ]
        );
    }

    #[test]
    fn backoff_doubles_to_thirty_seconds_and_resets_after_a_stable_run() {
        let mut b = Backoff::default();
        let short = Duration::from_secs(1);
        let waits: Vec<u64> = (0..12).map(|_| b.after(short).as_millis() as u64).collect();
        assert_eq!(
            waits,
            [
                100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000
            ]
        );
        assert_eq!(
            b.after(Duration::from_secs(120)),
            Duration::from_millis(100)
        );
    }
}
