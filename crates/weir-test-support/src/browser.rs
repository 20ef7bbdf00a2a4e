//! Headless Chromium for tests of pages: the DOM a page builds, after its
//! scripts ran, and a screenshot of it. Installs Chromium if it is missing,
//! or fails saying how.

use std::path::Path;
use std::process::Command;

/// The Chromium binary, installed with apt-get if missing.
pub fn chromium() -> &'static str {
    let found = || {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
    };
    if let Some(p) = found() {
        return p;
    }
    let _ = Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends", "chromium"])
        .status();
    found().expect(
        "this test needs Chromium: `apt-get install -y chromium` failed; install it (scripts/test.sh does) and rerun",
    )
}

/// `url` opened in headless Chromium with a profile in `profile`: the DOM
/// it built, serialised. `wait_ms`: virtual time the page's scripts get
/// (timers and fetches) before the DOM is taken; 0 for none.
pub fn dump_dom(url: &str, profile: &Path, wait_ms: u32) -> String {
    let mut cmd = Command::new(chromium());
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()));
    if wait_ms > 0 {
        cmd.arg(format!("--virtual-time-budget={wait_ms}"));
    }
    let out = cmd.arg(url).output().expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the DOM is UTF-8")
}

/// `url` rendered by headless Chromium (1200×900) into the PNG `out`, after
/// `wait_ms` of virtual time for its scripts; fails unless a PNG was written.
pub fn screenshot(url: &str, profile: &Path, wait_ms: u32, out: &Path) {
    let _ = std::fs::remove_file(out);
    let res = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={wait_ms}"))
        .arg(format!("--screenshot={}", out.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    let png = std::fs::read(out).unwrap_or_default();
    assert!(
        res.status.success() && png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "chromium wrote no screenshot to {}: {}",
        out.display(),
        String::from_utf8_lossy(&res.stderr)
    );
}
