//! HTTP/3 on every worker (issue 57): QUIC connections spread over the
//! workers and each is served; a client that moves to new UDP ports keeps
//! its connection (its datagrams reach other workers' sockets and are
//! passed on to the worker that has it); a reload keeps HTTP/3 serving; an
//! upgrade hands it to the new process, and the old one's clients get
//! GOAWAY and a graceful close.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use weir_test_support::poll::poll_until;
use weir_test_support::ports::free_port;
use weir_test_support::tls::*;

use crate::WEIR;

const PAGE: &[u8] = b"<h1>hello from every worker</h1>\n";

/// How long one request or handshake may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

struct Site {
    weir: Weir,
    port: u16,
    addr: SocketAddr,
    roots: rustls::RootCertStore,
    _dir: tempfile::TempDir,
}

impl Site {
    fn url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    async fn client(&self) -> H3Client {
        tokio::time::timeout(
            PATIENCE,
            H3Client::connect(self.addr, "localhost", self.roots.clone()),
        )
        .await
        .expect("QUIC handshake")
    }
}

/// weir with `workers` workers serving [`PAGE`] over HTTP/3 from a
/// local-CA site, its debug log kept; `server` goes under `[server]`.
fn start(workers: usize, server: &str) -> Site {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), PAGE).unwrap();
    let storage = dir.path().join("storage");
    let port = free_port();
    let cfg = format!(
        "[server]\nworkers = {workers}\n{server}\n[tls]\nstorage = \"{}\"\n\n[site.\"https://localhost:{port}\"]\nroot = \"{}\"\n",
        storage.display(),
        root.display()
    );
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, port);
    assert!(weir.wait_log("(HTTP/3, udp", PATIENCE), "{}", weir.log());
    let roots = roots_from_pem(&std::fs::read(storage.join("local-ca/root.pem")).unwrap());
    Site {
        weir,
        port,
        addr: ([127, 0, 0, 1], port).into(),
        roots,
        _dir: dir,
    }
}

async fn get_page(h3: &mut H3Client, url: &str) {
    let seen = tokio::time::timeout(PATIENCE, h3.request("GET", url))
        .await
        .expect("HTTP/3 request");
    assert_eq!(seen.status, 200);
    assert_eq!(&seen.body[..], PAGE);
}

/// The workers that took HTTP/3 connections, from the debug log.
fn serving_workers(log: &str) -> Vec<usize> {
    log.lines()
        .filter_map(|l| l.split("HTTP/3 connection served by worker ").nth(1))
        .filter_map(|w| w.split_whitespace().next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_connections_spread_over_the_workers_and_each_is_served() {
    const WORKERS: usize = 4;
    const CONNS: usize = 48;
    const REQUESTS: usize = 5;
    let site = start(WORKERS, "");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNS {
        // Each client has a UDP port of its own, which the kernel hashes
        // to one of the workers' sockets.
        let (addr, roots, url) = (site.addr, site.roots.clone(), site.url());
        tasks.spawn(async move {
            let mut h3 =
                tokio::time::timeout(PATIENCE, H3Client::connect(addr, "localhost", roots))
                    .await
                    .expect("QUIC handshake");
            for _ in 0..REQUESTS {
                get_page(&mut h3, &url).await;
            }
            REQUESTS
        });
    }
    let mut answered = 0;
    while let Some(r) = tasks.join_next().await {
        answered += r.expect("a client failed");
    }
    assert_eq!(answered, CONNS * REQUESTS);
    let weir = &site.weir;
    let seen = tokio::task::block_in_place(|| {
        poll_until(PATIENCE, || serving_workers(&weir.log()).len() == CONNS)
    });
    let workers = serving_workers(&weir.log());
    assert!(seen, "{} connections logged: {workers:?}", workers.len());
    // 48 ports over 4 sockets leave one idle with odds of about 1 in 250,000.
    let distinct: HashSet<usize> = workers.iter().copied().collect();
    assert_eq!(distinct.len(), WORKERS, "{workers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_moves_to_new_ports_keeps_its_connection() {
    let site = start(4, "");
    let url = site.url();
    let mut h3 = site.client().await;
    get_page(&mut h3, &url).await;
    let id = h3.conn.stable_id();
    let mut ports = HashSet::from([h3.endpoint.local_addr().unwrap().port()]);
    // Eight moves: each new port lands on another worker's socket with odds
    // of 3 in 4, so some datagrams are passed on between workers.
    for _ in 0..8 {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        ports.insert(sock.local_addr().unwrap().port());
        h3.endpoint.rebind(sock).unwrap();
        get_page(&mut h3, &url).await;
        assert_eq!(h3.conn.stable_id(), id);
        assert!(h3.conn.close_reason().is_none());
    }
    assert_eq!(ports.len(), 9);
    let log = site.weir.log();
    // One connection all along, on one worker; datagrams of it that reached
    // the other sockets were passed on.
    assert_eq!(serving_workers(&log).len(), 1, "{log}");
    assert!(log.contains("passed on to worker"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_http3_serving() {
    let site = start(2, "");
    let url = site.url();
    let mut before = site.client().await;
    get_page(&mut before, &url).await;
    site.weir.signal("HUP");
    let weir = &site.weir;
    assert!(
        tokio::task::block_in_place(|| weir.wait_log("reloaded:", PATIENCE)),
        "{}",
        weir.log()
    );
    // The connection open across the reload, and a new one.
    get_page(&mut before, &url).await;
    let mut after = site.client().await;
    get_page(&mut after, &url).await;
    assert!(before.conn.close_reason().is_none());
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_http3_to_the_new_process() {
    let mut site = start(2, "grace_period = \"10s\"");
    let url = site.url();
    let mut old = site.client().await;
    get_page(&mut old, &url).await;

    site.weir.signal("USR2");
    let weir = &site.weir;
    assert!(
        tokio::task::block_in_place(|| weir.wait_log("serves now; this one stops", PATIENCE)),
        "{}",
        weir.log()
    );
    let log = weir.log();
    let new_pid: u32 = log
        .lines()
        .find_map(|l| l.split("upgrade: process ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no process id in {log}"));
    // The new process is not this test's child: it is stopped whatever happens.
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("kill").arg(self.0.to_string()).status();
        }
    }
    let _kill = Kill(new_pid);

    // The old process's client is sent GOAWAY and closed gracefully, with
    // H3_NO_ERROR, well within the grace period.
    let closed = tokio::time::timeout(PATIENCE, old.conn.closed())
        .await
        .expect("the old process's connection stayed open");
    match &closed {
        quinn::ConnectionError::ApplicationClosed(c) => {
            assert_eq!(c.error_code, quinn::VarInt::from_u32(0x100), "{closed}")
        }
        other => panic!("closed with {other}"),
    }
    let status = tokio::task::block_in_place(|| site.weir.wait_exit(PATIENCE))
        .expect("the old process did not exit");
    assert!(status.success(), "{status}");

    // Only the new process holds the sockets now: it serves new connections.
    let mut new = site.client().await;
    get_page(&mut new, &url).await;
    get_page(&mut new, &url).await;
    drop(new);
    let ok = Command::new("kill")
        .args(["-TERM", &new_pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    assert!(
        tokio::task::block_in_place(|| poll_until(PATIENCE, || ended(new_pid))),
        "the new process did not exit"
    );
}
