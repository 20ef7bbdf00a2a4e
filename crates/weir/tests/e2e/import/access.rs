//! `weir import` never opens access silently, seen as a user sees it: the
//! real binary imports, then serves the output. An auth it cannot keep
//! exits 4 and the site refuses everyone (until `--allow-open`); an auth
//! whose users come from the environment is kept with them; an unset
//! variable stops the import naming it; a three-line config exits 0.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_test_support::ports::free_port;
use weir_test_support::proxy::Weir;

use super::import_as;
use crate::WEIR;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get(port: u16, auth: Option<(&str, &str)>) -> (u16, String) {
    let mut r = client().get(format!("http://127.0.0.1:{port}/"));
    if let Some((u, p)) = auth {
        r = r.basic_auth(u, Some(p));
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn serve(toml: &Path, port: u16) -> Weir {
    let text = std::fs::read_to_string(toml).unwrap();
    Weir::start_in(WEIR, tempfile::tempdir().unwrap(), &text, &[port])
}

#[tokio::test]
async fn an_auth_the_import_cannot_keep_exits_4_and_the_site_refuses_everyone() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "server {{\n    listen 127.0.0.1:{port};\n    location / {{\n        auth_request /auth;\n        return 200 \"secret\\n\";\n    }}\n}}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("weir.toml");
    let (code, report) = import_as("nginx", &conf, &out, &[]);
    assert_eq!(code, 4, "{report}");
    assert!(report.contains("auth_request /auth [access]"), "{report}");
    assert!(
        report.contains("every site written refuses every request"),
        "{report}"
    );
    {
        let _w = serve(&out, port);
        let (status, body) = get(port, None).await;
        assert_eq!(status, 403, "fails closed: {body}");
        assert!(!body.contains("secret"));
    }
    // Asked for, the approximation is written open, and says so.
    let (code, report) = import_as("nginx", &conf, &out, &["--allow-open"]);
    assert_eq!(code, 4, "{report}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("# WARNING: written with --allow-open"),
        "{text}"
    );
    let _w = serve(&out, port);
    assert_eq!(get(port, None).await, (200, "secret\n".to_string()));
}

fn hash(password: &str) -> String {
    let mut c = Command::new(WEIR)
        .args(["hash-password", "--cost", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn caddy_basic_auth_users_from_the_environment_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("Caddyfile");
    std::fs::write(
        &conf,
        format!(
            ":{port} {{\n\tbind 127.0.0.1\n\tbasic_auth {{\n\t\t{{$ADMIN_USER}} {{$ADMIN_PASSWORD_HASH}}\n\t}}\n\trespond \"secret\"\n}}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("weir.toml");
    // Unset: the import stops and names both variables.
    let o = Command::new(WEIR)
        .args(["import", "caddy"])
        .arg(&conf)
        .arg("-o")
        .arg(&out)
        .env_remove("ADMIN_USER")
        .env_remove("ADMIN_PASSWORD_HASH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the environment variables ADMIN_USER, ADMIN_PASSWORD_HASH are not set"),
        "{err}"
    );
    assert!(
        !out.exists(),
        "nothing is written for an input that cannot be read"
    );
    // Set: the users are written in, the hash kept out of the report.
    let h = hash("horse");
    let o = Command::new(WEIR)
        .args(["import", "caddy"])
        .arg(&conf)
        .arg("-o")
        .arg(&out)
        .env("ADMIN_USER", "alice")
        .env("ADMIN_PASSWORD_HASH", &h)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{report}");
    assert!(
        report.contains("{$ADMIN_USER}: ADMIN_USER from the environment at import time: \"alice\""),
        "{report}"
    );
    assert!(
        report.contains(
            "ADMIN_PASSWORD_HASH from the environment at import time: (hidden, 60 characters)"
        ),
        "{report}"
    );
    assert!(!report.contains(&h), "{report}");
    assert!(
        report.contains("basic_auth { … } -> basic_auth"),
        "{report}"
    );
    let _w = serve(&out, port);
    assert_eq!(get(port, None).await.0, 401);
    assert_eq!(get(port, Some(("alice", "wrong"))).await.0, 401);
    assert_eq!(
        get(port, Some(("alice", "horse"))).await,
        (200, "secret".to_string())
    );
}

#[tokio::test]
async fn a_config_that_maps_exactly_exits_0_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello\n").unwrap();
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "server {{\n    listen 127.0.0.1:{port};\n    root {};\n}}\n",
            www.display()
        ),
    )
    .unwrap();
    let out = dir.path().join("weir.toml");
    let (code, report) = import_as("nginx", &conf, &out, &[]);
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("3 mapped, 0 approximated, 0 without equivalent"),
        "{report}"
    );
    let _w = serve(&out, port);
    assert_eq!(get(port, None).await, (200, "hello\n".to_string()));
}
