//! The command line as a user meets it: version, help, validate, the
//! built-in welcome page, file-server, and a bad config that must not start.

use std::process::Command;

use weir_test_support::ports::free_port;
use weir_test_support::process::*;

use crate::WEIR;

fn weir(args: &[&str]) -> std::process::Output {
    Command::new(WEIR).args(args).output().unwrap()
}

#[test]
fn version_prints_the_crate_version() {
    let out = weir(&["version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("weir {}", env!("CARGO_PKG_VERSION"))
    );
    let out = weir(&["--version"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn every_command_has_help() {
    for cmd in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["file-server", "--help"],
        vec!["validate", "--help"],
        vec!["version", "--help"],
    ] {
        let out = weir(&cmd);
        assert!(out.status.success(), "{cmd:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: weir"), "{cmd:?}: {text}");
    }
    let top = String::from_utf8_lossy(&weir(&["--help"]).stdout).to_string();
    for c in ["run", "file-server", "validate", "version"] {
        assert!(top.contains(c), "top-level help lists {c}: {top}");
    }
}

#[test]
fn validate_lists_every_error_with_position_and_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[server]\nwrokers = 2\n\n[site.\"example.com\"]\nroot = \"/definitely/not/here\"\nbrowze = true\ntls = { cert = \"missing.pem\", key = \"missing.key\" }\n",
    )
    .unwrap();
    let out = weir(&["validate", "--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let f = cfg.display();
    assert!(
        err.contains(&format!(
            "{f}:2:1: unknown key `server.wrokers`: did you mean `workers`?"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{f}:5:8: site \"example.com\": root /definitely/not/here"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{f}:6:1: unknown key `site.example.com.browze`: did you mean `browse`?"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{f}:7:")) && err.contains("missing.pem"),
        "{err}"
    );
    assert!(err.contains("4 error(s)"), "{err}");
}

#[test]
fn validate_accepts_a_good_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let cfg = dir.path().join("weir.toml");
    std::fs::write(&cfg, "[site.\"localhost:18999\"]\nroot = \"www\"\n").unwrap();
    let out = weir(&["validate", "--config", cfg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

/// PHP-FPM may start after weir: a socket that is not there yet is worth
/// a warning (a misspelt path looks the same), never an error.
#[test]
fn validate_warns_about_a_missing_fastcgi_socket() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let cfg = dir.path().join("weir.toml");
    let sock = dir.path().join("php-fmp.sock");
    std::fs::write(
        &cfg,
        format!(
            "[site.\"localhost:18999\"]\nroot = \"www\"\nphp = \"unix:{}\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let out = weir(&["validate", "--config", cfg.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    assert!(
        stderr.contains("warning:")
            && stderr.contains(&sock.display().to_string())
            && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn bad_config_never_starts_a_server() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("weir.toml");
    // One good site and one broken one: nothing may start.
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(
        &cfg,
        format!("[site.\"a:{port}\"]\nroot = \"www\"\n[site.\"b:{port}\"]\nroot = \"nope\"\n"),
    )
    .unwrap();
    let out = Command::new(WEIR)
        .args(["run", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("weir.toml:4:8: site \"b:{port}\": root")),
        "{err}"
    );
    assert!(err.contains("not starting"), "{err}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn no_config_serves_the_welcome_page_on_8080() {
    let dir = tempfile::tempdir().unwrap();
    let w = Weir::spawn(WEIR, dir, &[], &[8080]);
    let body = reqwest::blocking_get("http://127.0.0.1:8080/");
    assert_eq!(body.0, 200);
    assert!(body.1.contains("Welcome to weir"), "{}", body.1);
    assert!(
        body.1.contains("weir.toml"),
        "the page says how to configure weir"
    );
    assert_eq!(body.2.as_deref(), Some("text/html; charset=utf-8"));
    drop(w);
}

#[test]
fn run_picks_up_weir_toml_in_the_working_directory() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "from weir.toml\n").unwrap();
    std::fs::write(
        dir.path().join("weir.toml"),
        format!("[site.\"127.0.0.1:{port}\"]\nroot = \"www\"\n"),
    )
    .unwrap();
    let _w = Weir::spawn(WEIR, dir, &["run"], &[port]);
    let r = reqwest::blocking_get(&format!("http://127.0.0.1:{port}/"));
    assert_eq!((r.0, r.1.as_str()), (200, "from weir.toml\n"));
}

#[test]
fn file_server_serves_a_directory_and_browses() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello\n").unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let listen = format!("127.0.0.1:{port}");
    let _w = Weir::spawn(
        WEIR,
        tempfile::tempdir().unwrap(),
        &[
            "file-server",
            "--root",
            &root,
            "--listen",
            &listen,
            "--browse",
        ],
        &[port],
    );
    let r = reqwest::blocking_get(&format!("http://127.0.0.1:{port}/hello.txt"));
    assert_eq!((r.0, r.1.as_str()), (200, "hello\n"));
    assert_eq!(r.2.as_deref(), Some("text/plain; charset=utf-8"));
    let listing = reqwest::blocking_get(&format!("http://127.0.0.1:{port}/"));
    assert_eq!(listing.0, 200);
    assert!(listing.1.contains("hello.txt"), "{}", listing.1);
}

#[test]
fn file_server_with_a_missing_root_fails_clearly() {
    let out = weir(&[
        "file-server",
        "--root",
        "/no/such/dir",
        "--listen",
        "127.0.0.1:1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/dir"));
}

/// A tiny blocking GET over a fresh runtime, returning (status, body, content-type).
mod reqwest {
    pub fn blocking_get(url: &str) -> (u16, String, Option<String>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = ::reqwest::Client::new()
                .get(url)
                .timeout(std::time::Duration::from_secs(5))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let ct = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string());
            (status, r.text().await.unwrap(), ct)
        })
    }
}
