//! `weir-bench compare --quick` end to end against nginx: asserts the SHAPE
//! of the run folder (files, JSON, table rows and columns), never a speed.

use std::path::{Path, PathBuf};
use std::process::Command;

// weir's test port allocator, so that this suite and weir's, run side by
// side, never start servers on the same port.
use weir_test_support::ports;

/// Debian's `package` must be installed (its `binary` in /usr/sbin or
/// /usr/bin); install it, or fail loudly saying how.
fn ensure(package: &str, binary: &str) {
    let present = || {
        ["/usr/sbin", "/usr/bin"]
            .iter()
            .any(|d| Path::new(d).join(binary).is_file())
    };
    if present() {
        return;
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", "-q", package])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok && present(),
        "this test needs {package}: `apt-get install -y {package}` failed; install it (bench/setup) and rerun"
    );
}

/// Runs `weir-bench compare --quick ARGS` with `weir` into a fresh folder
/// named for `tag`, on three ports of its own (the server's, the
/// backend's, the chain's Varnish's), and returns the folder.
fn quick_compare(tag: &str, weir: &Path, args: &[&str]) -> PathBuf {
    ensure("nginx", "nginx");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("compare-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let port = ports::free_ports(3);
    let status = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args(["compare", "--quick"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .args(["--port", &port.to_string()])
        .arg("--weir")
        .arg(weir)
        .status()
        .expect("run weir-bench");
    assert!(status.success());
    out
}

#[test]
fn quick_compare_writes_the_expected_shape() {
    let out = quick_compare(
        "quick",
        Path::new("/nonexistent/weir"),
        &["--servers", "weir,nginx", "--scenarios", "static,proxy,ab"],
    );

    for f in [
        "summary.json",
        "README.md",
        "static.md",
        "static.svg",
        "proxy.md",
        "proxy.svg",
        "ab.md",
        "ab.svg",
        "report.html",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    assert!(out.join("configs/static/http/nginx/nginx.conf").is_file());
    assert!(out.join("configs/proxy/https/nginx/nginx.conf").is_file());

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    // static: http+https, proxy: http+https, ab: 1 case; x 2 servers.
    assert_eq!(rows.len(), 10, "{rows:#?}");
    for r in rows {
        match r["server"].as_str().unwrap() {
            "weir" => assert_eq!(r["status"], "not installed"),
            "nginx" => {
                assert_eq!(r["status"], "ok", "{r}");
                assert_eq!(r["repeats"], 3);
                assert!(r["ok_responses"].as_u64().unwrap() > 0, "{r}");
                assert!(r["rps_median"].as_f64().unwrap() > 0.0);
                assert!(r["rss_peak_mib"].as_f64().unwrap() > 0.0);
            }
            other => panic!("unexpected server {other}"),
        }
    }
    // ab cases send exactly their request count.
    let ab = rows
        .iter()
        .find(|r| r["scenario"] == "ab" && r["server"] == "nginx")
        .unwrap();
    assert_eq!(ab["ok_responses"], 1000);

    // Raw JSON per repeat parses and holds a load report.
    let raw = out.join("raw/static/http/nginx-3.json");
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(raw).unwrap()).unwrap();
    assert!(rec["load"]["successes"].as_u64().unwrap() > 0);

    let md = std::fs::read_to_string(out.join("static.md")).unwrap();
    let header = md
        .lines()
        .find(|l| l.starts_with("| case |"))
        .expect("table header");
    assert_eq!(
        header,
        format!("| {} |", weir_bench::compare::report::COLUMNS.join(" | "))
    );
    let body: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| http") || l.starts_with("| https"))
        .collect();
    assert_eq!(body.len(), 4, "{md}");
    for line in &body {
        assert_eq!(
            line.matches('|').count(),
            weir_bench::compare::report::COLUMNS.len() + 1,
            "{line}"
        );
    }
    assert!(md.contains("| http | weir | not installed |"));
    let svg = std::fs::read_to_string(out.join("static.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("nginx"));

    // The run's one page, as a browser builds it.
    let dom = chromium_dom(&out.join("report.html"));
    for id in ["static", "proxy", "ab", "configs"] {
        assert!(
            dom.contains(&format!("<section id=\"{id}\">")),
            "no {id} section"
        );
    }
    // The README's facts, each scenario's table and its chart inline.
    assert!(dom.contains("What each server got"), "no README part");
    assert!(dom.contains("RSA-2048"), "the certificate is not named");
    assert!(dom.matches("<table>").count() >= 3, "tables missing");
    assert!(dom.matches("<svg").count() >= 3, "charts not inline");
    assert!(
        dom.contains("<th>weir ÷ this</th>"),
        "table header not rendered"
    );
    assert!(
        dom.contains("<td>http</td><td>weir</td><td>not installed</td>"),
        "weir's row not rendered"
    );
    assert!(
        dom.contains("href=\"configs/static/http/nginx/nginx.conf\""),
        "configs not linked"
    );
}

/// Chromium must be installed; install it, or fail loudly saying how.
/// `page` opened in headless Chromium: the DOM it built, serialised.
fn chromium_dom(page: &Path) -> String {
    weir_test_support::browser::dump_dom(
        &format!("file://{}", page.display()),
        &page.with_file_name("chromium-profile"),
        0,
    )
}

/// Repeats go in rounds: every server runs once per round, so the machine's
/// drift over minutes cannot favour whichever server ran in a fast stretch,
/// and the order within a round changes, so no server always runs first.
/// (weir runs with `--weir-accept cpu` here, so its repeats also show that
/// setting serving.)
#[test]
fn repeats_alternate_between_servers() {
    let out = quick_compare(
        "rounds",
        &weir_binary(),
        &[
            "--servers",
            "weir,nginx",
            "--scenarios",
            "proxy",
            "--weir-accept",
            "cpu",
        ],
    );
    // A non-default weir setting is in weir's config and said in the report.
    let conf = std::fs::read_to_string(out.join("configs/proxy/http/weir/weir.toml")).unwrap();
    assert!(conf.contains("accept = \"cpu\"\n"), "{conf}");
    let md = std::fs::read_to_string(out.join("proxy.md")).unwrap();
    assert!(
        md.contains("weir ran with `server.accept = \"cpu\"`"),
        "{md}"
    );
    let started = |server: &str, repeat: u32| -> u64 {
        let path = out.join(format!("raw/proxy/http/{server}-{repeat}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["repeat"], repeat - 1);
        v["started_unix_ms"].as_u64().expect("started_unix_ms")
    };
    // Rounds one after another, and the order turns from round to round so
    // neither server always runs first: weir, nginx; nginx, weir; weir,
    // nginx. Each start comes after the one before.
    let order: Vec<u64> = vec![
        started("weir", 1),
        started("nginx", 1),
        started("nginx", 2),
        started("weir", 2),
        started("weir", 3),
        started("nginx", 3),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");

    // The per-round column: the median of weir's req/s over nginx's, round
    // by round, from the raw repeats.
    let rps = |server: &str, repeat: u32| -> f64 {
        let path = out.join(format!("raw/proxy/http/{server}-{repeat}.json"));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["load"]["requests_per_sec"].as_f64().unwrap()
    };
    let mut ratios: Vec<f64> = (1..=3).map(|r| rps("weir", r) / rps("nginx", r)).collect();
    ratios.sort_by(f64::total_cmp);
    let row = md
        .lines()
        .find(|l| l.starts_with("| http | nginx |"))
        .expect("nginx's http row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let column = |name: &str| {
        1 + weir_bench::compare::report::COLUMNS
            .iter()
            .position(|c| *c == name)
            .unwrap()
    };
    assert_eq!(
        cells[column("weir ÷ this, per round (median)")],
        format!("{:.2}", ratios[1]),
        "{row}"
    );
    // Three rounds are too few for an interval with 90 % confidence (the
    // smallest and largest of three hold the median with 75 %).
    assert_eq!(
        cells[column("per-round median: interval (confidence)")],
        "n/a",
        "{row}"
    );
    // summary.json records the same ratio.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let ratio = summary["ratios"]
        .as_array()
        .expect("ratios")
        .iter()
        .find(|r| r["case"] == "http" && r["server"] == "nginx")
        .expect("nginx's http ratio");
    assert_eq!(ratio["scenario"], "proxy");
    let per_round = ratio["per_round"].as_f64().unwrap();
    assert!((per_round - ratios[1]).abs() < 1e-9, "{ratio}");
    assert!(ratio["interval"].is_null(), "{ratio}");

    // `pool` over the folder twice: six rounds, the same median, and now an
    // interval (the smallest and largest of six: 96.9 %).
    let pooled = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .arg("pool")
        .args([&out, &out])
        .output()
        .expect("run weir-bench pool");
    assert!(pooled.status.success(), "{pooled:?}");
    let table = String::from_utf8(pooled.stdout).unwrap();
    let name = out.file_name().unwrap().to_str().unwrap();
    let expected = format!(
        "| proxy | http | nginx | 2 | 6 | {m:.2} | {lo:.2}–{hi:.2} (97 %) | {name}: {m:.2} (3), {name}: {m:.2} (3) |",
        m = ratios[1],
        lo = ratios[0],
        hi = ratios[2],
    );
    assert!(table.lines().any(|l| l == expected), "{expected}\n{table}");
    // A folder without a run in it is named in the error.
    let bad = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args(["pool", "/nonexistent-run"])
        .output()
        .expect("run weir-bench pool");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("cannot read /nonexistent-run/summary.json"),
        "{err}"
    );
}

/// Apache and Caddy take their rows with `--require`: Apache as a proxy
/// and as its fair cache (mod_cache_socache, every measured request a hit,
/// which the harness checks), Caddy as a proxy, each with its config and
/// version in the run's README.
#[test]
fn quick_compare_runs_apache_and_caddy_with_require() {
    ensure("apache2", "apache2");
    ensure("caddy", "caddy");
    let out = quick_compare(
        "apache-caddy",
        &weir_binary(),
        &[
            "--servers",
            "weir,apache,caddy",
            "--scenarios",
            "proxy,cache",
            "--require",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    let row = |scenario: &str, case: &str, server: &str| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["case"] == case && r["server"] == server)
            .unwrap_or_else(|| panic!("no {scenario} {case} {server} row in {rows:#?}"))
    };
    for (scenario, case, server) in [
        ("proxy", "http", "apache"),
        ("proxy", "https", "apache"),
        ("proxy", "http", "caddy"),
        ("proxy", "https", "caddy"),
        ("cache", "http", "apache"),
    ] {
        let r = row(scenario, case, server);
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["repeats"], 3, "{r}");
        assert!(r["rps_median"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["non_2xx_max"], 0, "{r}");
    }
    // Caddy has no cache of its own in Debian's build: no row there.
    assert!(
        !rows
            .iter()
            .any(|r| r["scenario"] == "cache" && r["server"] == "caddy")
    );
    // Apache's cache answered from memory: a handful of misses at most.
    let misses = row("cache", "http", "apache")["backend_requests_max"]
        .as_u64()
        .unwrap();
    assert!(misses <= 5, "{misses} backend requests");
    let apache =
        std::fs::read_to_string(out.join("configs/cache/http/apache/apache2.conf")).unwrap();
    assert!(apache.contains("CacheEnable socache /"), "{apache}");
    let caddy = std::fs::read_to_string(out.join("configs/proxy/https/caddy/Caddyfile")).unwrap();
    assert!(caddy.contains("reverse_proxy 127.0.0.1:"), "{caddy}");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains("| apache | Server version: Apache/2.4"),
        "{readme}"
    );
    assert!(readme.contains("| caddy | 2."), "{readme}");
}

/// `--require` with a server missing fails before measuring anything,
/// naming it and saying how to get it.
#[test]
fn require_names_what_to_install() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("compare-require-{}", std::process::id()));
    let port = ports::free_ports(3);
    let run = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args(["compare", "--quick", "--require", "--servers", "weir,caddy"])
        .args(["--scenarios", "static", "--weir", "/nonexistent/weir"])
        .arg("--out")
        .arg(&out)
        .args(["--port", &port.to_string()])
        .output()
        .expect("run weir-bench");
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("weir is not installed (/nonexistent/weir not found): build it with `cargo build --release -p weir`"),
        "{err}"
    );
    assert!(!out.join("summary.json").exists());
}

/// The weir binary of this workspace, built if it is not there yet.
fn weir_binary() -> std::path::PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let bin = tmp.join("..").join(profile).join("weir");
    if !bin.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "weir"]);
        if profile == "release" {
            cmd.arg("--release");
        }
        let ok = cmd.status().is_ok_and(|s| s.success());
        assert!(ok && bin.is_file(), "cannot build weir ({})", bin.display());
    }
    bin
}

#[test]
fn quick_startup_and_idle_write_one_row_per_server() {
    let out = quick_compare(
        "startup-idle",
        &weir_binary(),
        &["--servers", "weir,nginx", "--scenarios", "startup,idle"],
    );
    for f in [
        "startup.md",
        "startup.svg",
        "idle.md",
        "idle.svg",
        "summary.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    for server in ["weir", "nginx"] {
        assert!(out.join("configs/startup/10-sites").join(server).is_dir());
        assert!(
            out.join(format!("raw/startup/10-sites/{server}.json"))
                .is_file()
        );
        assert!(out.join(format!("raw/idle/c200/{server}-3.json")).is_file());
    }
    let nginx_conf =
        std::fs::read_to_string(out.join("configs/startup/10-sites/nginx/nginx.conf")).unwrap();
    assert_eq!(nginx_conf.matches("server_name site").count(), 10);

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let startup = summary["startup"].as_array().unwrap();
    assert_eq!(startup.len(), 2, "{startup:#?}");
    for r in startup {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["repeats"], 3);
        assert_eq!(r["samples_ms"].as_array().unwrap().len(), 3);
        let (min, med, max) = (
            r["min_ms"].as_f64().unwrap(),
            r["median_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(
            min > 0.0 && min <= med && med <= max && max < 10_000.0,
            "{r}"
        );
    }
    let idle = summary["idle"].as_array().unwrap();
    assert_eq!(idle.len(), 2, "{idle:#?}");
    for r in idle {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["connections"], 200);
        assert!(r["rss_idle_mib"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["rss_held_mib"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["kib_per_conn"].as_f64().unwrap() >= 0.0, "{r}");
        if r["server"] == "weir" {
            assert_eq!(r["established"], 200, "{r}");
            assert_eq!(r["served"], 200, "{r}");
            assert_eq!(r["held"], 200, "{r}");
            assert_eq!(r["errors"], 0, "{r}");
        }
    }
    let raw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("raw/idle/c200/weir-1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(raw["hold"]["requested"], 200);
    assert!(raw["rss_held_bytes"].as_u64().unwrap() > 0);

    for (file, cols) in [
        (
            "startup.md",
            &weir_bench::compare::report::STARTUP_COLUMNS[..],
        ),
        ("idle.md", &weir_bench::compare::report::IDLE_COLUMNS[..]),
    ] {
        let md = std::fs::read_to_string(out.join(file)).unwrap();
        let header = md.lines().find(|l| l.starts_with("| case |")).unwrap();
        assert_eq!(header, format!("| {} |", cols.join(" | ")));
        let body: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| 10 sites |") || l.starts_with("| c200 |"))
            .collect();
        assert_eq!(body.len(), 2, "{md}");
        for line in body {
            assert_eq!(line.matches('|').count(), cols.len() + 1, "{line}");
        }
    }
    let svg = std::fs::read_to_string(out.join("idle.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("nginx") && svg.contains("weir"));
}

/// `weir-b`: a second weir build in the same rounds, with weir's configs,
/// so two versions are compared as any two servers are (here the same
/// build twice).
#[test]
fn weir_b_runs_a_second_build_against_weir() {
    let weir = weir_binary();
    let out = quick_compare(
        "weir-b",
        &weir,
        &[
            "--servers",
            "weir,weir-b",
            "--scenarios",
            "proxy",
            "--weir-b",
            weir.to_str().unwrap(),
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let versions = summary["versions"].as_array().unwrap();
    assert!(
        versions
            .iter()
            .any(|v| v[0] == "weir-b" && v[1].as_str().unwrap().starts_with("weir ")),
        "{versions:?}"
    );
    // weir's own config, run by the second build.
    let a = std::fs::read_to_string(out.join("configs/proxy/http/weir/weir.toml")).unwrap();
    let b = std::fs::read_to_string(out.join("configs/proxy/http/weir-b/weir.toml")).unwrap();
    assert!(b.contains("proxy"), "{b}");
    assert_eq!(a.replace("/weir/", "/weir-b/"), b);
    // weir-b's entry of `list` ("rows" or "ratios") for `case`.
    let weir_b = |list: &str, case: &str| {
        summary[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["case"] == case && r["server"] == "weir-b")
            .unwrap_or_else(|| panic!("weir-b's {case} entry in {list}"))
            .clone()
    };
    for case in ["http", "https"] {
        let row = weir_b("rows", case);
        assert_eq!(row["status"], "ok", "{row}");
        assert!(row["rps_median"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["non_2xx"], 0, "{row}");
        let ratio = weir_b("ratios", case);
        assert!(ratio["per_round"].as_f64().unwrap() > 0.0, "{ratio}");
    }
    let md = std::fs::read_to_string(out.join("proxy.md")).unwrap();
    assert!(md.contains("| http | weir-b | "), "{md}");
}

/// `weir-b` and `--weir-b` go together.
#[test]
fn weir_b_needs_its_build_and_its_build_needs_weir_b() {
    let refused = |args: &[&str], why: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
            .args(["compare", "--quick", "--scenarios", "proxy"])
            .args(args)
            .output()
            .expect("run weir-bench");
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{err}");
    };
    refused(&["--servers", "weir,weir-b"], "no --weir-b");
    refused(
        &["--servers", "weir,nginx", "--weir-b", "/usr/bin/true"],
        "--servers has no weir-b",
    );
}

/// The caching scenarios for real, with Varnish, nginx and the HAProxy →
/// Varnish chain: every row measured, every cache answering from its cache
/// (the backend's count), and the ratio tables with their targets.
#[test]
fn quick_cache_and_chain_measure_hits_only() {
    ensure("varnish", "varnishd");
    ensure("haproxy", "haproxy");
    let out = quick_compare(
        "cache",
        &weir_binary(),
        &[
            "--servers",
            "weir,nginx,varnish,haproxy-varnish",
            "--scenarios",
            "cache,chain",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    let row = |scenario: &str, server: &str| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["server"] == server)
            .unwrap_or_else(|| panic!("no {scenario} row of {server}: {rows:?}"))
    };
    for (scenario, server) in [
        ("cache", "weir"),
        ("cache", "weir-static"),
        ("cache", "nginx"),
        ("cache", "varnish"),
        ("chain", "weir"),
        ("chain", "haproxy-varnish"),
    ] {
        let r = row(scenario, server);
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["repeats"], 3, "{r}");
        assert!(r["rps_median"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["non_2xx"], 0, "{r}");
        if server == "weir-static" {
            assert!(r["backend_requests_max"].is_null(), "{r}");
        } else {
            // The cache was filled before the load: no request of it missed.
            assert_eq!(r["backend_requests_max"], 0, "{r}");
        }
    }
    assert_eq!(rows.len(), 6, "{rows:?}");
    // The chain's CPU is both processes': HAProxy's TLS alone costs some.
    assert!(
        row("chain", "haproxy-varnish")["server_cpu"]
            .as_f64()
            .unwrap()
            > 0.05
    );
    let ratio = |scenario: &str, server: &str| {
        summary["ratios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["scenario"] == scenario && r["server"] == server)
            .unwrap_or_else(|| panic!("no ratio of {server}"))["per_round"]
            .as_f64()
            .unwrap()
    };
    for (scenario, server) in [
        ("cache", "weir-static"),
        ("cache", "nginx"),
        ("cache", "varnish"),
        ("chain", "haproxy-varnish"),
    ] {
        assert!(ratio(scenario, server) > 0.0);
    }
    for (scenario, lines) in [
        (
            "cache",
            &[
                "| http | weir-static |",
                "| http | varnish |",
                "| http | nginx |",
            ][..],
        ),
        ("chain", &["| https | haproxy-varnish |"][..]),
    ] {
        let md = std::fs::read_to_string(out.join(format!("{scenario}.md"))).unwrap();
        assert!(
            md.contains(&format!(
                "| {} |",
                weir_bench::compare::report::CACHE_RATIO_COLUMNS.join(" | ")
            )),
            "{md}"
        );
        assert!(md.contains("Requests that reached the backend"), "{md}");
        for l in lines {
            assert_eq!(
                md.matches(l).count(),
                2,
                "{l} in the table and the ratios: {md}"
            );
        }
    }
    let cache_md = std::fs::read_to_string(out.join("cache.md")).unwrap();
    assert!(
        cache_md
            .lines()
            .any(|l| l.starts_with("| http | weir-static |") && l.contains("| ≥ 0.90 |")),
        "{cache_md}"
    );
    for f in [
        "configs/cache/http/weir/weir.toml",
        "configs/cache/http/weir-static/weir.toml",
        "configs/cache/http/nginx/nginx.conf",
        "configs/cache/http/varnish/default.vcl",
        "configs/chain/https/weir/weir.toml",
        "configs/chain/https/haproxy-varnish/haproxy.cfg",
        "configs/chain/https/haproxy-varnish/default.vcl",
        "raw/cache/http/weir-static-1.json",
        "raw/chain/https/haproxy-varnish-3.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let raw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("raw/cache/http/varnish-2.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(raw["backend_requests"], 0, "{raw}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The PHP and passthrough scenarios for real: weir, nginx and Apache in
/// front of php-fpm, weir and HAProxy passing TLS through by SNI, every row
/// measured with only 2xx answers, and their targets in the report.
#[test]
fn quick_php_and_tcp_measure_every_competitor() {
    ensure("haproxy", "haproxy");
    ensure("apache2", "apache2");
    ensure("php-fpm", "php-fpm8.2");
    let out = quick_compare(
        "php-tcp",
        &weir_binary(),
        &[
            "--servers",
            "weir,nginx,apache,haproxy",
            "--scenarios",
            "php,tcp",
            "--require",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    for (scenario, server) in [
        ("php", "weir"),
        ("php", "nginx"),
        ("php", "apache"),
        ("tcp", "weir"),
        ("tcp", "haproxy"),
        ("tcp", "backend-direct"),
    ] {
        let r = rows
            .iter()
            .find(|r| r["scenario"] == scenario && r["server"] == server)
            .unwrap_or_else(|| panic!("no {scenario} row of {server}: {rows:?}"));
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["rps_median"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["non_2xx"], 0, "{r}");
    }
    let php = std::fs::read_to_string(out.join("php.md")).unwrap();
    assert!(
        php.contains("| http | nginx |") && php.contains("≥ 1.00"),
        "{php}"
    );
    let weir_conf = std::fs::read_to_string(out.join("configs/php/http/weir/weir.toml")).unwrap();
    assert!(weir_conf.contains("php = { to = \"unix:"), "{weir_conf}");
    let tcp = std::fs::read_to_string(out.join("tcp.md")).unwrap();
    assert!(tcp.contains("| https | haproxy |"), "{tcp}");
}

/// The app scenario for real: weir running the app's two processes
/// itself, nginx and HAProxy in front of the same two started by the
/// harness, every row measured clean, the app's processes counted.
#[test]
fn quick_app_measures_every_competitor() {
    ensure("haproxy", "haproxy");
    let out = quick_compare(
        "app",
        &weir_binary(),
        &[
            "--servers",
            "weir,nginx,haproxy",
            "--scenarios",
            "app",
            "--require",
        ],
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    for server in ["weir", "nginx", "haproxy"] {
        let r = rows
            .iter()
            .find(|r| r["scenario"] == "app" && r["server"] == server)
            .unwrap_or_else(|| panic!("no app row of {server}: {rows:?}"));
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["case"], "c200", "{r}");
        assert!(r["rps_median"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(
            (&r["non_2xx_max"], &r["client_errors_max"]),
            (&0.into(), &0.into()),
            "{r}"
        );
    }
    let md = std::fs::read_to_string(out.join("app.md")).unwrap();
    for server in ["weir", "nginx", "haproxy"] {
        assert!(
            md.contains(&format!("| c200 | {server} | 0 | 0 | yes |")),
            "{md}"
        );
    }
    let weir_conf = std::fs::read_to_string(out.join("configs/app/c200/weir/weir.toml")).unwrap();
    assert!(
        weir_conf.contains("backend --listen 127.0.0.1:$PORT")
            && weir_conf.contains("instances = 2"),
        "{weir_conf}"
    );
    // nginx's and HAProxy's apps are their companions, each with its log.
    for server in ["nginx", "haproxy"] {
        for app in ["app-1.log", "app-2.log"] {
            assert!(
                out.join("configs/app/c200")
                    .join(server)
                    .join(app)
                    .is_file(),
                "{server} {app}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
