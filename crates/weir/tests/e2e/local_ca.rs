//! The local CA end to end with the real binary: a `localhost` site with no
//! `tls` gets a certificate that chains to the stored root, the leaf is
//! renewed before it ends, the root survives a restart, and `weir trust` /
//! `weir untrust` change the system store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_test_support::ports::free_port;
use weir_test_support::tls::*;

use crate::WEIR;

fn config(root: &std::path::Path, storage: &std::path::Path, port: u16, lifetime: &str) -> String {
    format!(
        "[tls]\nstorage = \"{}\"\nhttp3 = false\n[tls.internal]\nlifetime = \"{lifetime}\"\n\n[site.\"https://localhost:{port}\"]\nroot = \"{}\"\n",
        storage.display(),
        root.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_gets_a_trusted_certificate_that_is_renewed() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello local\n").unwrap();
    let storage = dir.path().join("storage");
    let port = free_port();
    let weir = Weir::start_debug(WEIR, dir.path(), &config(&root, &storage, port, "6s"), port);

    let root_pem = std::fs::read(storage.join("local-ca/root.pem")).unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let cfg = Arc::new(client_config(roots_from_pem(&root_pem), &[b"http/1.1"]));
    let chain = handshake(addr, "localhost", cfg.clone()).await.unwrap();
    assert_eq!(chain.len(), 2, "leaf and intermediate");
    let first = serial(&chain[0]);

    let client = reqwest_client(&root_pem, "localhost", addr, false);
    let r = reqwest_get(
        &client,
        "GET",
        &format!("https://localhost:{port}/"),
        http::Version::HTTP_11,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"hello local\n");

    // A 6s leaf is renewed at about 4s.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let chain = handshake(addr, "localhost", cfg.clone()).await.unwrap();
        if serial(&chain[0]) != first {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leaf not renewed:\n{}",
            weir.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    weir.stop();

    // A restart keeps the same root (a trusted root must stay valid).
    let port2 = free_port();
    let weir = Weir::start_debug(
        WEIR,
        dir.path(),
        &config(&root, &storage, port2, "1h"),
        port2,
    );
    assert_eq!(
        std::fs::read(storage.join("local-ca/root.pem")).unwrap(),
        root_pem
    );
    let addr2: SocketAddr = ([127, 0, 0, 1], port2).into();
    handshake(addr2, "localhost", cfg.clone()).await.unwrap();
    // Storage is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(storage.join("local-ca/root.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(weir);
}

#[test]
fn trust_and_untrust_change_the_system_store() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if std::process::Command::new("update-ca-certificates")
        .arg("--help")
        .output()
        .is_err()
    {
        let st = std::process::Command::new("apt-get")
            .args(["install", "-y", "ca-certificates"])
            .status()
            .expect("update-ca-certificates is missing and apt-get cannot run");
        assert!(st.success(), "cannot install ca-certificates");
    }
    let run = |cmd: &str| {
        let out = std::process::Command::new(WEIR)
            .arg(cmd)
            .arg("--storage")
            .arg(&storage)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "weir {cmd}: {text}");
        text
    };
    let text = run("trust");
    assert!(
        text.contains("installed /usr/local/share/ca-certificates/weir-local-ca.crt"),
        "{text}"
    );
    assert!(text.contains("added the weir local CA"), "{text}");
    let root = std::fs::read_to_string(storage.join("local-ca/root.pem")).unwrap();
    let body: String = root
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("\n");
    let store = std::fs::read_to_string(bundle).unwrap();
    assert!(store.contains(&body), "root not in {bundle}");

    let text = run("untrust");
    assert!(
        text.contains("removed /usr/local/share/ca-certificates/weir-local-ca.crt"),
        "{text}"
    );
    let store = std::fs::read_to_string(bundle).unwrap();
    assert!(!store.contains(&body), "root still in {bundle}");
    let text = run("untrust");
    assert!(text.contains("was not installed"), "{text}");
}
