//! Apps weir runs (`app = …`), end to end with `weir-bench backend` as the
//! app: rolling restarts under open-loop load with no failed request and
//! no request after an instance's SIGTERM, one start for a hundred first
//! requests after scaling to zero, a killed instance restarted while GETs
//! go on, a release that never gets ready rolled back and reported (in
//! `/apps`, `/config` and the metrics, until a reload succeeds), a
//! failing app's 503, and no process of an app's group left once weir
//! stops, is killed outright, or the app leaves the config.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_test_support::poll::poll_until;
use weir_test_support::ports::free_ports;
use weir_test_support::process::Weir;

use crate::WEIR;
use crate::reload::{admin, get};

/// `weir-bench`, built beside weir by the workspace build.
pub(crate) fn bench() -> PathBuf {
    let p = std::path::Path::new(WEIR).with_file_name("weir-bench");
    assert!(
        p.exists(),
        "{} is missing: build the workspace (cargo build --release)",
        p.display()
    );
    p
}

fn config(adm: u16, site: u16, app: &str) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:{adm}\"\n[site.\"127.0.0.1:{site}\"]\napp = {{ {app} }}\n"
    )
}

fn backend_run(extra: &str) -> String {
    format!(
        "run = \"'{}' backend --listen 127.0.0.1:$PORT --threads 1 {extra}\"",
        bench().display()
    )
}

fn apps(adm: u16) -> serde_json::Value {
    let (status, body) = admin(adm, "GET", "/apps", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()[0].clone()
}

fn pids(app: &serde_json::Value) -> Vec<u64> {
    let mut p: Vec<u64> = app["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    p.sort();
    p
}

/// Processes whose process group is `pgid`.
fn group(pgid: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp …: comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // A zombie has exited already.
        if f.first() != Some(&"Z") && f.get(2).and_then(|g| g.parse::<u64>().ok()) == Some(pgid) {
            out.push(pid);
        }
    }
    out
}

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// GETs of `/` sent every `every`, whatever the answers (open loop),
/// until `stop`; returns (200s, other statuses, errors).
async fn open_loop(
    port: u16,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (u64, u64, u64) {
    let client = reqwest::Client::new();
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tick = tokio::time::interval(every);
    let mut tasks = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let (client, ok, bad, failed) = (client.clone(), ok.clone(), bad.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            match client
                .get(format!("http://127.0.0.1:{port}/"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
            {
                Ok(r) => {
                    let status = r.status();
                    match r.bytes().await {
                        Ok(b) if status == 200 && b.len() == 164 => {
                            ok.fetch_add(1, Ordering::SeqCst)
                        }
                        b => {
                            eprintln!("answer {status}: {b:?}");
                            bad.fetch_add(1, Ordering::SeqCst)
                        }
                    }
                }
                Err(e) => {
                    eprintln!("request failed: {e}");
                    failed.fetch_add(1, Ordering::SeqCst)
                }
            };
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (
        ok.load(Ordering::SeqCst),
        bad.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst),
    )
}

/// [`open_loop`] on a runtime of its own while the test goes on.
struct Load {
    rt: tokio::runtime::Runtime,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(u64, u64, u64)>,
}

impl Load {
    fn start(port: u16, every: Duration) -> Load {
        let rt = runtime();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = rt.spawn(open_loop(port, every, stop.clone()));
        Load { rt, stop, task }
    }

    /// Stops sending; (200s, other statuses, errors) once all are answered.
    fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        self.rt.block_on(self.task).unwrap()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn five_rolling_restarts_under_open_loop_load_lose_nothing() {
    let adm = free_ports(2);
    let site = adm + 1;
    let w = Weir::start_on(
        WEIR,
        &config(
            adm,
            site,
            &format!("{}, instances = 2", backend_run("--term-grace 300")),
        ),
        &[adm, site],
    );
    assert!(poll_until(Duration::from_secs(20), || apps(adm)["ready"] == 2));
    let first = pids(&apps(adm));
    let load = Load::start(site, Duration::from_millis(4));
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..5 {
        let out = std::process::Command::new(WEIR)
            .args(["app", "restart", &format!("127.0.0.1:{site}")])
            .args(["--admin", &format!("127.0.0.1:{adm}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "restart {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("restarted; processes now"));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (ok, bad, failed) = load.finish();
    assert!(ok > 1000, "only {ok} requests answered");
    assert_eq!((bad, failed), (0, 0), "{ok} answered");

    let app = apps(adm);
    assert_eq!(app["ready"], 2);
    assert_eq!(app["starts"], 12, "{app}");
    assert_eq!(app["restarts"], 0, "{app}");
    assert!(pids(&app).iter().all(|p| !first.contains(p)), "{app}");
    for p in first {
        assert!(group(p).is_empty(), "process group {p} still runs");
    }
    // Each retired instance counted its requests at SIGTERM, went on
    // listening 300 ms, and counted again: the same number, every time.
    let log = w.log();
    let terms: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("backend: SIGTERM after") || l.contains("backend: exiting after"))
        .collect();
    assert_eq!(terms.len(), 20, "{log}");
    for pair in terms.chunks(2) {
        let n = |l: &str| {
            l.split("after ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let slot = |l: &str| {
            l.split(" #")
                .nth(1)
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .to_string()
        };
        assert!(
            pair[0].contains("SIGTERM") && pair[1].contains("exiting"),
            "{pair:?}"
        );
        assert_eq!(slot(pair[0]), slot(pair[1]), "{pair:?}");
        assert_eq!(n(pair[0]), n(pair[1]), "a request after SIGTERM: {pair:?}");
    }
}

#[test]
fn from_zero_a_hundred_first_requests_start_one_process_and_idle_stops_it() {
    let adm = free_ports(2);
    let site = adm + 1;
    let w = Weir::start_on(
        WEIR,
        &config(
            adm,
            site,
            &format!("{}, idle = \"2s\"", backend_run("--delay 50")),
        ),
        &[adm, site],
    );
    let app = apps(adm);
    assert_eq!(
        (app["phase"].as_str(), app["starts"].as_u64()),
        (Some("idle"), Some(0))
    );
    let rt = runtime();
    let statuses = rt.block_on(async {
        let client = reqwest::Client::new();
        let all: Vec<_> = (0..100)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move {
                    c.get(format!("http://127.0.0.1:{site}/"))
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0)
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in all {
            out.push(t.await.unwrap());
        }
        out
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let app = apps(adm);
    assert_eq!(app["starts"], 1, "{app}");
    assert_eq!(count(&w.log(), "started (pid"), 1);
    let pid = pids(&app)[0];
    // Idle for 2 s: stopped, nothing of it left.
    assert!(poll_until(Duration::from_secs(10), || apps(adm)["phase"] == "idle"));
    assert!(poll_until(Duration::from_secs(5), || group(pid).is_empty()));
    assert!(w.log().contains("idle for 2s; stopping its instances"));
    // A restart with nothing running starts nothing, and says so.
    let out = std::process::Command::new(WEIR)
        .args(["app", "restart", &format!("127.0.0.1:{site}")])
        .args(["--admin", &format!("127.0.0.1:{adm}")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("nothing to restart: no process runs (phase: idle)"),
        "{said}"
    );
    assert_eq!(apps(adm)["starts"], 1);
    // And the next request wakes it.
    assert_eq!(get(site, "/").0, 200);
    assert_eq!(apps(adm)["starts"], 2);
}

#[test]
fn a_killed_instance_comes_back_and_gets_see_no_error() {
    let adm = free_ports(2);
    let site = adm + 1;
    let w = Weir::start_on(
        WEIR,
        &config(adm, site, &format!("{}, instances = 2", backend_run(""))),
        &[adm, site],
    );
    assert!(poll_until(Duration::from_secs(20), || apps(adm)["ready"] == 2));
    let before = pids(&apps(adm));
    let load = Load::start(site, Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &before[0].to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        poll_until(Duration::from_secs(15), || {
            let a = apps(adm);
            a["ready"] == 2 && a["restarts"] == 1
        }),
        "{}",
        apps(adm)
    );
    std::thread::sleep(Duration::from_millis(300));
    let (ok, bad, failed) = load.finish();
    assert!(ok > 200, "only {ok}");
    assert_eq!((bad, failed), (0, 0), "{ok} answered");
    let after = pids(&apps(adm));
    assert!(
        after.contains(&before[1]) && !after.contains(&before[0]),
        "{before:?} → {after:?}"
    );
    let log = w.log();
    assert!(log.contains("exited (signal: 9"), "{log}");
    let (_, metrics) = admin(adm, "GET", "/metrics", "");
    assert!(
        metrics.contains(&format!(
            "weir_app_restarts_total{{app=\"127.0.0.1:{site}\"}} 1"
        )),
        "{metrics}"
    );
}

#[test]
fn a_release_that_never_gets_ready_is_rolled_back_and_a_failing_app_says_why() {
    let adm = free_ports(3);
    let (site, broken) = (adm + 1, adm + 2);
    let good = format!("{}, instances = 2, start_timeout = \"2s\"", backend_run(""));
    let broken_site = format!(
        "[site.\"127.0.0.1:{broken}\"]\napp = {{ run = \"echo cannot open the database >&2; exit 3\", start_timeout = \"2s\" }}\n"
    );
    // The app is the fallback of the site's routes: kept by reloads all the same.
    let route = format!(
        "[[site.\"127.0.0.1:{site}\".route]]\npath = \"/ping\"\nrespond = {{ status = 200, body = \"pong\" }}\n"
    );
    let broken_site = route + &broken_site;
    let dir = tempfile::tempdir().unwrap();
    let w = Weir::start_in(
        WEIR,
        dir,
        &(config(adm, site, &good) + &broken_site),
        &[adm, site, broken],
    );
    assert!(poll_until(Duration::from_secs(20), || apps(adm)["ready"] == 2));
    let old = pids(&apps(adm));
    let (status, pong) = get(site, "/ping");
    assert!(status == 200 && pong.ends_with("pong"), "{pong}");

    // The app that cannot start: a 503 that says why, the metric, the log.
    let (status, resp) = get(broken, "/");
    assert_eq!(status, 503, "{resp}");
    assert!(
        resp.contains("Retry-After: 1") || resp.contains("retry-after: 1"),
        "{resp}"
    );
    assert!(
        resp.contains(&format!("app \"127.0.0.1:{broken}\" has no ready instance (failing: exited before it was ready (exit status: 3))")),
        "{resp}"
    );
    assert!(w.log().contains("(stderr): cannot open the database"));
    let (_, metrics) = admin(adm, "GET", "/metrics", "");
    assert!(
        metrics.contains(&format!("weir_app_failing{{app=\"127.0.0.1:{broken}\"}} 1")),
        "{metrics}"
    );

    // A release whose command never answers: rolled back.
    let cfg_path = w.path().join("weir.toml");
    std::fs::write(
        &cfg_path,
        config(
            adm,
            site,
            "run = \"sleep 60\", instances = 2, start_timeout = \"2s\"",
        ) + &broken_site,
    )
    .unwrap();
    let (status, body) = admin(adm, "POST", "/reload", "");
    assert_eq!(status, 200, "{body}");
    let reported = || {
        let (_, ups) = admin(adm, "GET", "/upstreams", "");
        let ups: serde_json::Value = serde_json::from_str(&ups).unwrap();
        ups.as_array().unwrap().iter().any(|u| {
            u["site"] == format!("127.0.0.1:{site}")
                && u["app"]["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("the old one serves: not ready within 2s"))
        })
    };
    assert!(poll_until(Duration::from_secs(15), reported), "{}", w.log());
    let app = apps(adm);
    assert_eq!(pids(&app), old, "{app}");
    assert_eq!(app["ready"], 2);
    assert!(app["run"].as_str().unwrap().contains("backend"), "{app}");
    for _ in 0..20 {
        assert_eq!(get(site, "/").0, 200);
    }
    assert!(w.log().contains("restart rolled back"));

    // Which release runs and which was refused, in /apps, /config and the
    // metrics, also after an instance of the running release restarts.
    let shows_refusal = |app: &serde_json::Value| {
        app["refused"]["run"] == "sleep 60"
            && app["refused"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("not ready within 2s"))
            && app["release"].is_string()
            && app["release"] != app["refused"]["release"]
    };
    let app = apps(adm);
    assert!(shows_refusal(&app), "{app}");
    let running = app["release"].clone();
    let config_says_refused = || {
        let req =
            format!("GET /config HTTP/1.1\r\nHost: 127.0.0.1:{adm}\r\nConnection: close\r\n\r\n");
        let resp = String::from_utf8_lossy(&weir_test_support::process::raw(
            adm,
            req.as_bytes(),
            Duration::from_secs(10),
        ))
        .into_owned();
        let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let comment = format!(
            "# weir: app \"127.0.0.1:{site}\": the release below (run = \"sleep 60\", release {}) was refused and rolled back: the new release was stopped, the old one serves: not ready within 2s",
            app["refused"]["release"].as_str().unwrap()
        );
        let runs = format!(
            "# weir: app \"127.0.0.1:{site}\" runs release {} (run = ",
            running.as_str().unwrap()
        );
        let header = resp
            .to_ascii_lowercase()
            .contains(&format!("weir-app-refused: 127.0.0.1:{site}\r\n"));
        assert!(body.starts_with(&comment), "{resp}");
        assert!(body.contains(&runs), "{resp}");
        assert!(header, "{resp}");
    };
    config_says_refused();
    let (_, metrics) = admin(adm, "GET", "/metrics", "");
    assert!(
        metrics.contains(&format!("weir_app_refused{{app=\"127.0.0.1:{site}\"}} 1")),
        "{metrics}"
    );
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &old[0].to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        poll_until(Duration::from_secs(15), || {
            let a = apps(adm);
            a["ready"] == 2 && a["restarts"] == 1
        }),
        "{}",
        apps(adm)
    );
    let app = apps(adm);
    assert!(shows_refusal(&app), "{app}");
    assert_eq!(app["release"], running, "the old release restarted");
    assert!(app["run"].as_str().unwrap().contains("backend"), "{app}");
    config_says_refused();

    // A good release by reload: every process replaced, the error gone.
    std::fs::write(
        &cfg_path,
        config(adm, site, &format!("{good}, env = {{ RELEASE = \"2\" }}")) + &broken_site,
    )
    .unwrap();
    let (status, body) = admin(adm, "POST", "/reload", "");
    assert_eq!(status, 200, "{body}");
    assert!(
        poll_until(Duration::from_secs(20), || {
            let a = apps(adm);
            a["ready"] == 2
                && pids(&a).iter().all(|p| !old.contains(p))
                && a["error"].is_null()
                && a["refused"].is_null()
                && a["release"] != running
        }),
        "{}",
        apps(adm)
    );
    let (_, text) = admin(adm, "GET", "/config", "");
    assert!(!text.contains("# weir: app"), "{text}");
    // And a reload that changes nothing leaves it alone.
    let now = pids(&apps(adm));
    let (status, _) = admin(adm, "POST", "/reload", "");
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pids(&apps(adm)), now);
}

#[test]
fn no_process_of_an_app_survives_weir_or_its_removal() {
    let adm = free_ports(3);
    let (site, other) = (adm + 1, adm + 2);
    // The app leaves a child of its own in its group.
    let app = format!(
        "run = \"sleep 600 & exec '{}' backend --listen 127.0.0.1:$PORT\", instances = 2",
        bench().display()
    );
    let second = format!(
        "[site.\"127.0.0.1:{other}\"]\napp = {{ run = \"sleep 600 & exec '{}' backend --listen 127.0.0.1:$PORT\" }}\n",
        bench().display()
    );
    let mut w = Weir::start_on(
        WEIR,
        &(config(adm, site, &app) + &second),
        &[adm, site, other],
    );
    let all = || -> Vec<u64> {
        let (_, body) = admin(adm, "GET", "/apps", "");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v.as_array().unwrap().iter().flat_map(pids).collect()
    };
    assert!(poll_until(Duration::from_secs(20), || all().len() == 3));
    let groups = all();
    for g in &groups {
        assert_eq!(group(*g).len(), 2, "the app and its sleep in group {g}");
    }
    // Removed from the config: its group ends.
    let (gone, kept): (Vec<u64>, Vec<u64>) = {
        let first = pids(&apps(adm));
        groups.iter().partition(|g| !first.contains(g))
    };
    std::fs::write(w.path().join("weir.toml"), config(adm, site, &app)).unwrap();
    let (status, body) = admin(adm, "POST", "/reload", "");
    assert_eq!(status, 200, "{body}");
    assert!(
        poll_until(Duration::from_secs(15), || gone
            .iter()
            .all(|g| group(*g).is_empty())),
        "the removed app's processes run on"
    );
    assert!(kept.iter().all(|g| group(*g).len() == 2));
    // weir stops: every group ends with it.
    let started = Instant::now();
    w.terminate();
    assert!(w.wait_exit(Duration::from_secs(20)).is_some());
    for g in &kept {
        assert!(group(*g).is_empty(), "process group {g} outlived weir");
    }
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// weir killed outright (SIGKILL: it stops nothing itself): the kernel
/// sends each instance SIGTERM and no app process outlives it.
#[test]
fn a_weir_killed_outright_takes_its_apps_with_it() {
    let adm = free_ports(2);
    let site = adm + 1;
    let mut w = Weir::start_on(
        WEIR,
        &config(adm, site, &(backend_run("") + ", instances = 2")),
        &[adm, site],
    );
    assert!(poll_until(Duration::from_secs(20), || pids(&apps(adm))
        .len()
        == 2));
    let groups = pids(&apps(adm));
    for g in &groups {
        assert_eq!(group(*g), [*g], "the instance alone in its group");
    }
    w.signal("KILL");
    assert!(w.wait_exit(Duration::from_secs(10)).is_some());
    assert!(
        poll_until(Duration::from_secs(10), || groups
            .iter()
            .all(|g| group(*g).is_empty())),
        "app processes outlived a killed weir: {:?}",
        groups.iter().map(|g| group(*g)).collect::<Vec<_>>()
    );
}
