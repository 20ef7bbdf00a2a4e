//! `weir-bench compare --quick` end to end against nginx: asserts the SHAPE
//! of the run folder (files, JSON, table rows and columns), never a speed.

use std::path::Path;
use std::process::Command;

/// nginx must be installed; install it, or fail loudly saying how.
fn ensure_nginx() {
    let present = |p: &str| Path::new(p).is_file();
    if present("/usr/sbin/nginx") || present("/usr/bin/nginx") {
        return;
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", "-q", "nginx"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok && present("/usr/sbin/nginx"),
        "this test needs nginx: `apt-get install -y nginx` failed; install it (bench/setup) and rerun"
    );
}

#[test]
fn quick_compare_writes_the_expected_shape() {
    ensure_nginx();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("compare-quick-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let port = 30000 + (std::process::id() % 20000) as u16;
    let status = Command::new(env!("CARGO_BIN_EXE_weir-bench"))
        .args([
            "compare",
            "--quick",
            "--servers",
            "weir,nginx",
            "--scenarios",
            "static,proxy,ab",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--port", &port.to_string(), "--weir", "/nonexistent/weir"])
        .status()
        .expect("run weir-bench");
    assert!(status.success());

    for f in [
        "summary.json",
        "README.md",
        "static.md",
        "static.svg",
        "proxy.md",
        "proxy.svg",
        "ab.md",
        "ab.svg",
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
}
