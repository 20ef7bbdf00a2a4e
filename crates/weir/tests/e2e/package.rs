//! The Debian package as an operator installs it: `cargo deb` packs the
//! release binary with its systemd unit, config and welcome page; `dpkg -i`
//! installs them and creates the `weir` user; the installed config validates
//! and the installed unit passes `systemd-analyze verify`; `dpkg --purge`
//! leaves nothing behind. Needs root, cargo-deb, dpkg and systemd-analyze
//! (scripts/test.sh installs them): a missing one fails the test, never
//! skips it.

use std::path::Path;
use std::process::{Command, Output};

use crate::WEIR;

const CONFIG: &str = "/etc/weir/weir.toml";
const UNIT: &str = "/lib/systemd/system/weir.service";
const LOGROTATE: &str = "/etc/logrotate.d/weir";
const INSTALLED: [&str; 5] = [
    "/usr/bin/weir",
    CONFIG,
    UNIT,
    LOGROTATE,
    "/var/www/weir/index.html",
];

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

/// Asserts that a command succeeded, showing everything it printed if not.
fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fails with what to install when a tool is missing.
fn require(program: &str, args: &[&str], install: &str) {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`{program} {}` failed: this test needs it ({install}; scripts/test.sh installs it)",
        args.join(" ")
    );
}

/// Purges the package when the test ends, passed or failed, so the machine is
/// left as it was.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "weir"]).output();
    }
}

#[test]
fn deb_installs_a_valid_service_and_purges_clean() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    require(
        &cargo,
        &["deb", "--version"],
        "cargo install cargo-deb --locked",
    );
    require("dpkg", &["--version"], "apt-get install dpkg");
    require("logrotate", &["--version"], "apt-get install logrotate");
    require("systemd-analyze", &["--version"], "apt-get install systemd");
    // cargo-deb packs target/release/weir as it is (--no-build).
    assert!(
        Path::new(WEIR)
            .parent()
            .is_some_and(|d| d.ends_with("release")),
        "{WEIR}: the package is made from target/release/weir; run `cargo test --release`"
    );
    // Purging would delete an operator's weir and its certificates.
    assert!(
        !run("dpkg", &["-s", "weir"]).status.success() && !run("id", &["weir"]).status.success(),
        "the package or user weir already exists on this machine; this test installs and \
         purges them: remove them first (dpkg --purge weir; userdel weir)"
    );

    let out_dir = tempfile::tempdir().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // --fast: this test reads the package's contents, not its compression.
    let out = Command::new(&cargo)
        .current_dir(&workspace)
        .args(["deb", "-p", "weir", "--no-build", "--fast", "--output"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    check(&out, "cargo deb -p weir --no-build");
    let debs: Vec<_> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(
        debs.len(),
        1,
        "one .deb in {}: {debs:?}",
        out_dir.path().display()
    );

    let purge = Purge;
    let out = run("dpkg", &["-i", debs[0].to_str().unwrap()]);
    check(&out, "dpkg -i (needs root)");
    for path in INSTALLED {
        assert!(Path::new(path).exists(), "{path} not installed");
    }
    check(
        &run("id", &["weir"]),
        "id weir: the package creates the user",
    );
    let owner = run("stat", &["-c", "%U:%G", "/var/lib/weir"]);
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), "weir:weir");
    let listed = run("dpkg", &["-L", "weir"]);
    check(&listed, "dpkg -L weir");
    let listed = String::from_utf8_lossy(&listed.stdout);
    for path in INSTALLED {
        assert!(
            listed.lines().any(|l| l == path),
            "dpkg -L weir lacks {path}:\n{listed}"
        );
    }
    // The packaged binary is the one under test.
    assert_eq!(
        run("/usr/bin/weir", &["version"]).stdout,
        run(WEIR, &["version"]).stdout
    );

    let out = run("/usr/bin/weir", &["validate", "--config", CONFIG]);
    check(&out, "weir validate of the packaged config");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));

    // logrotate reads the packaged rule without an error (a dry run).
    let out = run("logrotate", &["--debug", LOGROTATE]);
    let said = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        out.status.success() && !said.contains("error"),
        "logrotate --debug {LOGROTATE}: {}\n{said}",
        out.status
    );
    assert!(said.contains("/var/log/weir/*.log"), "{said}");

    // Works without systemd as PID 1. An unknown key is only a warning (exit
    // 0), so a line naming the unit fails the test too.
    let out = run("systemd-analyze", &["verify", UNIT]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("weir.service"),
        "systemd-analyze verify {UNIT}: {}\n{stderr}",
        out.status
    );

    drop(purge);
    assert!(
        !run("dpkg", &["-s", "weir"]).status.success(),
        "weir still installed"
    );
    assert!(
        !run("id", &["weir"]).status.success(),
        "user weir not removed"
    );
    for path in INSTALLED.iter().chain(&["/var/lib/weir", "/var/log/weir"]) {
        assert!(!Path::new(path).exists(), "{path} left after purge");
    }
}
