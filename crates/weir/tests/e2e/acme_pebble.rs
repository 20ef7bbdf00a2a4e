//! ACME end to end against Debian's `pebble`, with real validation (no
//! PEBBLE_VA_ALWAYS_VALID): pebble resolves every name to 127.0.0.1 through
//! `pebble-challtestsrv`'s DNS and connects to weir on loopback for HTTP-01
//! and TLS-ALPN-01. Also: the HTTP→HTTPS redirect that leaves the challenge
//! path alone, a restart that reuses the stored certificate (no second
//! order), renewal of short-lived certificates, and on-demand TLS refused
//! for a name the `ask` endpoint rejects, two weir processes sharing one
//! storage directory (one order, one certificate), and a renewal driven by
//! the CA's ACME Renewal Information window, and a wrong `ca_root` logged
//! with its reason.
//!
//! pebble is installed with apt-get when missing; Debian's pebble 2.4 has no
//! ARI, so the ARI test uses pebble v2.10.1 built with `go install` (done
//! here when missing). A test never skips.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_test_support::certs::*;
use weir_test_support::ports::free_port;
use weir_test_support::tls::*;

use crate::WEIR;

/// Debian's pebble, by its full path: a newer pebble elsewhere in PATH
/// must not stand in for it.
const PEBBLE_DEBIAN: &str = "/usr/bin/pebble";

fn ensure_pebble() -> PathBuf {
    let have = |b: &str| Command::new(b).arg("-h").output().is_ok();
    if have(PEBBLE_DEBIAN) && have("pebble-challtestsrv") {
        return PathBuf::from(PEBBLE_DEBIAN);
    }
    let st = Command::new("apt-get")
        .args(["install", "-y", "pebble"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .expect("pebble is missing and apt-get cannot run");
    assert!(st.success(), "apt-get install pebble failed");
    assert!(have(PEBBLE_DEBIAN), "pebble still missing after apt-get");
    PathBuf::from(PEBBLE_DEBIAN)
}

/// The pebble version with ACME Renewal Information (RFC 9773).
const PEBBLE_ARI: &str = "github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.1";

/// pebble with ARI: `$(go env GOPATH)/pebble-ari/pebble`, built with
/// `go install` when missing (scripts/test.sh does the same), kept out of
/// PATH so it does not shadow Debian's; fails loudly without Go.
fn ensure_pebble_ari() -> PathBuf {
    ensure_pebble(); // pebble-challtestsrv for DNS
    let gopath = Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .expect("Go is needed to build pebble with ARI (install golang)");
    let gobin = PathBuf::from(String::from_utf8(gopath.stdout).unwrap().trim()).join("pebble-ari");
    let bin = gobin.join("pebble");
    let is_ari = |b: &Path| {
        Command::new(b)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !is_ari(&bin) {
        let st = Command::new("go")
            .args(["install", PEBBLE_ARI])
            .env("GOFLAGS", "-mod=mod")
            .env("GOBIN", &gobin)
            .status()
            .expect("cannot run go install");
        assert!(st.success(), "go install {PEBBLE_ARI} failed");
    }
    assert!(
        is_ari(&bin),
        "{} is not a pebble with -version",
        bin.display()
    );
    bin
}

/// pebble and its DNS helper; both killed by PID on drop.
struct Pebble {
    pebble: Child,
    dns: Child,
    pub dir_url: String,
    pub mgmt: u16,
    pub ca_root: PathBuf,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.pebble.kill();
        let _ = self.pebble.wait();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

impl Pebble {
    /// pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port`, issuing certificates valid for `validity` seconds.
    fn start(dir: &Path, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        let bin = ensure_pebble();
        Self::start_bin(&bin, dir, http_port, tls_port, validity)
    }

    fn start_bin(bin: &Path, dir: &Path, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        // pebble ships no certificate for its own HTTPS: make one.
        let ca = TestCa::new();
        let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"]);
        std::fs::write(dir.join("pebble-ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("pebble-cert.pem"), cert).unwrap();
        std::fs::write(dir.join("pebble-key.pem"), key).unwrap();

        let acme_port = free_port();
        let mgmt = free_port();
        let dns_port = free_port();
        let cfg = serde_json::json!({
            "pebble": {
                "listenAddress": format!("127.0.0.1:{acme_port}"),
                "managementListenAddress": format!("127.0.0.1:{mgmt}"),
                "certificate": dir.join("pebble-cert.pem"),
                "privateKey": dir.join("pebble-key.pem"),
                "httpPort": http_port,
                "tlsPort": tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "certificateValidityPeriod": validity,
            }
        });
        std::fs::write(dir.join("pebble.json"), cfg.to_string()).unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args([
                "-dns01",
                &format!("127.0.0.1:{dns_port}"),
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-management",
                &format!("127.0.0.1:{}", free_port()),
                "-defaultIPv6",
                "",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("challtestsrv.log")).unwrap())
            .spawn()
            .unwrap();
        let pebble = Command::new(bin)
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{dns_port}"))
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env_remove("PEBBLE_VA_ALWAYS_VALID")
            .stdout(std::fs::File::create(dir.join("pebble.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", acme_port)).is_err() {
            assert!(Instant::now() < deadline, "pebble did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Pebble {
            pebble,
            dns,
            dir_url: format!("https://127.0.0.1:{acme_port}/dir"),
            mgmt,
            ca_root: dir.join("pebble-ca.pem"),
        }
    }

    /// pebble's issuing root (it changes at every pebble start).
    async fn issuing_root(&self) -> Vec<u8> {
        let pem = std::fs::read(&self.ca_root).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .build()
            .unwrap();
        let r = client
            .get(format!("https://127.0.0.1:{}/roots/0", self.mgmt))
            .send()
            .await
            .unwrap();
        r.bytes().await.unwrap().to_vec()
    }
}

fn acme_config(
    pebble: &Pebble,
    storage: &Path,
    www: &Path,
    name: &str,
    https_port: u16,
    http_port: u16,
    challenge: &str,
) -> String {
    format!(
        r#"[tls]
storage = "{storage}"
http3 = false
[tls.acme]
directory = "{dir}"
ca_root = "{root}"
email = "admin@example.com"
challenges = ["{challenge}"]
retry_min = "1s"
retry_max = "2s"

[site."{name}"]
root = "{www}"
listen = "127.0.0.1:{https_port}"
tls = {{ issuer = "acme" }}
http_redirect = "127.0.0.1:{http_port}"
"#,
        storage = storage.display(),
        dir = pebble.dir_url,
        root = pebble.ca_root.display(),
        www = www.display(),
    )
}

/// Waits until a verified handshake for `name` succeeds; its leaf.
async fn wait_for_cert(
    weir: &Weir,
    addr: SocketAddr,
    name: &str,
    roots: &[u8],
    timeout: Duration,
) -> rustls::pki_types::CertificateDer<'static> {
    let cfg = Arc::new(client_config(roots_from_pem(roots), &[b"http/1.1"]));
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(chain) = handshake(addr, name, cfg.clone()).await {
            return chain[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no valid certificate for {name}:\n{}",
            weir.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn www(dir: &Path) -> PathBuf {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "acme ok\n").unwrap();
    www
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http01_issue_redirect_restart_and_renew() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let (https_port, http_port) = (free_port(), free_port());
    // 30-second certificates: renewal due at about 20s.
    let pebble = Pebble::start(dir.path(), http_port, https_port, 30);
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let name = "weir-http01.example.com";
    let cfg = acme_config(
        &pebble, &storage, &www, name, https_port, http_port, "http-01",
    );
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let roots = pebble.issuing_root().await;
    let addr: SocketAddr = ([127, 0, 0, 1], https_port).into();
    let leaf = wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(30)).await;
    assert!(
        weir.log()
            .contains("ordering a certificate for weir-http01.example.com")
    );
    // Validated for real: pebble fetched the token from weir's plain listener.
    assert!(
        weir.log()
            .contains("answering Http01 for weir-http01.example.com")
    );

    // HTTPS serves the site; plain HTTP redirects, except the challenge path.
    let client = reqwest_client(&roots, name, addr, false);
    let r = reqwest_get(
        &client,
        "GET",
        &format!("https://{name}:{https_port}/"),
        http::Version::HTTP_11,
    )
    .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"acme ok\n"[..]));
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(name, ([127, 0, 0, 1], http_port).into())
        .build()
        .unwrap();
    let r = plain
        .get(format!("http://{name}:{http_port}/a?b=c"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(
        r.headers()["location"],
        format!("https://{name}:{https_port}/a?b=c").as_str()
    );
    let r = plain
        .get(format!(
            "http://{name}:{http_port}/.well-known/acme-challenge/unknown"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 308, "unknown tokens fall through to the site");

    // Stored privately.
    use std::os::unix::fs::PermissionsExt;
    let key_path = std::fs::read_dir(storage.join("certs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join(name)
        .join("key.pem");
    assert_eq!(
        std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Renewal of the 30s certificate, while the old one stays in use.
    let deadline = Instant::now() + Duration::from_secs(40);
    let renewed = loop {
        let now = wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(5)).await;
        if serial(&now) != serial(&leaf) {
            break now;
        }
        assert!(Instant::now() < deadline, "not renewed:\n{}", weir.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let logs = weir.stop();
    assert_eq!(logs.matches("ordering a certificate").count(), 2, "{logs}");

    // A restart reuses the stored certificate: same serial, no new order.
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let again = wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(10)).await;
    assert_eq!(serial(&again), serial(&renewed));
    // A window in which a wrongful new order would show in the log: an
    // absence cannot be polled for.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let logs = weir.stop();
    assert!(logs.contains("using the stored certificate"), "{logs}");
    assert!(!logs.contains("ordering a certificate"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_alpn01_issue_without_a_plain_listener() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let https_port = free_port();
    let pebble = Pebble::start(dir.path(), free_port(), https_port, 3600);
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let name = "weir-alpn.example.com";
    let cfg = acme_config(&pebble, &storage, &www, name, https_port, 0, "tls-alpn-01")
        .replace("http_redirect = \"127.0.0.1:0\"\n", "");
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let roots = pebble.issuing_root().await;
    let addr: SocketAddr = ([127, 0, 0, 1], https_port).into();
    wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(30)).await;
    assert!(
        weir.log()
            .contains("answering TlsAlpn01 for weir-alpn.example.com"),
        "{}",
        weir.log()
    );
    let client = reqwest_client(&roots, name, addr, true);
    let r = reqwest_get(
        &client,
        "GET",
        &format!("https://{name}:{https_port}/"),
        http::Version::HTTP_2,
    )
    .await;
    assert_eq!(r.status, 200);
}

/// `ca_root` naming a CA that did not sign pebble's HTTPS certificate: the
/// log says the certificate was refused and why, not `client error (Connect)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_root_is_logged_as_an_unknown_issuer() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let (https_port, http_port) = (free_port(), free_port());
    let pebble = Pebble::start(dir.path(), http_port, https_port, 3600);
    let wrong = dir.path().join("wrong-ca.pem");
    std::fs::write(&wrong, TestCa::named("not pebble's CA").pem()).unwrap();
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let name = "weir-wrong-root.example.com";
    let cfg = acme_config(
        &pebble, &storage, &www, name, https_port, http_port, "http-01",
    )
    .replace(
        &format!("ca_root = \"{}\"", pebble.ca_root.display()),
        &format!("ca_root = \"{}\"", wrong.display()),
    );
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let said = "cannot connect to the ACME server: its certificate was refused: unknown issuer";
    assert!(
        weir.wait_log(said, Duration::from_secs(20)),
        "{}",
        weir.log()
    );
    assert!(
        !weir.log().contains("client error (Connect)"),
        "{}",
        weir.log()
    );
}

/// A tiny `ask` endpoint: 200 for names starting with "yes", 403 otherwise.
async fn ask_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = asked.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let count = count.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let ok = req.uri().query().unwrap_or("").contains("domain=yes");
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(if ok { 200 } else { 403 })
                                    .body(http_body_util::Empty::<bytes::Bytes>::new())
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (port, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_only_for_names_the_ask_endpoint_approves() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let https_port = free_port();
    let pebble = Pebble::start(dir.path(), free_port(), https_port, 3600);
    let (ask_port, asked) = ask_server().await;
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let cfg = format!(
        r#"[tls]
storage = "{storage}"
http3 = false
[tls.acme]
directory = "{dir}"
ca_root = "{root}"
challenges = ["tls-alpn-01"]
[tls.on_demand]
ask = "http://127.0.0.1:{ask_port}/check"

[site."*"]
listen = "127.0.0.1:{https_port}"
root = "{www}"
tls = {{ issuer = "acme", on_demand = true }}
"#,
        storage = storage.display(),
        dir = pebble.dir_url,
        root = pebble.ca_root.display(),
        www = www.display(),
    );
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let roots = pebble.issuing_root().await;
    let addr: SocketAddr = ([127, 0, 0, 1], https_port).into();
    let tls = Arc::new(client_config(roots_from_pem(&roots), &[b"http/1.1"]));

    // Refused by ask: the handshake fails and nothing is ordered.
    let e = handshake(addr, "no-thanks.example.com", tls.clone()).await;
    assert!(e.is_err());
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Asked again right away: refused by the per-name limit, ask not called.
    assert!(
        handshake(addr, "no-thanks.example.com", tls.clone())
            .await
            .is_err()
    );
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(
        !weir.log().contains("ordering a certificate"),
        "{}",
        weir.log()
    );

    // Approved: the first handshake waits for the certificate.
    let chain = handshake(addr, "yes-please.example.com", tls.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", weir.log()));
    assert!(!chain.is_empty());
    let logs = weir.log();
    assert_eq!(logs.matches("ordering a certificate").count(), 1, "{logs}");
    assert!(logs.contains("on-demand certificate for yes-please.example.com obtained"));
    // The second handshake uses it without asking again.
    handshake(addr, "yes-please.example.com", tls.clone())
        .await
        .unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_sharing_storage_order_once_and_serve_the_same_certificate() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    // pebble validates TLS-ALPN-01 on `port_a` only: process A answers it.
    let (port_a, port_b) = (free_port(), free_port());
    let pebble = Pebble::start(dir.path(), free_port(), port_a, 3600);
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let name = "weir-shared.example.com";
    let cfg = |port| {
        acme_config(&pebble, &storage, &www, name, port, 0, "tls-alpn-01")
            .replace("http_redirect = \"127.0.0.1:0\"\n", "")
    };
    let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let a = Weir::start_debug(WEIR, &dir_a, &cfg(port_a), port_a);
    // B starts while A holds the name's lock for its order.
    assert!(
        a.wait_log("ordering a certificate", Duration::from_secs(20)),
        "{}",
        a.log()
    );
    let b = Weir::start_debug(WEIR, &dir_b, &cfg(port_b), port_b);
    let roots = pebble.issuing_root().await;
    let leaf_a = wait_for_cert(
        &a,
        ([127, 0, 0, 1], port_a).into(),
        name,
        &roots,
        Duration::from_secs(30),
    )
    .await;
    let leaf_b = wait_for_cert(
        &b,
        ([127, 0, 0, 1], port_b).into(),
        name,
        &roots,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        leaf_a, leaf_b,
        "the two processes serve different certificates"
    );
    // A window in which a wrongful order by B would show in its log: an
    // absence cannot be polled for.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (logs_a, logs_b) = (a.stop(), b.stop());
    // One order in all: A's. B waited for the lock and took the stored one.
    assert_eq!(
        logs_a.matches("ordering a certificate").count(),
        1,
        "{logs_a}"
    );
    assert_eq!(
        logs_b.matches("ordering a certificate").count(),
        0,
        "{logs_b}"
    );
    assert!(
        logs_b.contains(&format!(
            "using the certificate for {name} found in storage"
        )),
        "B did not wait for A's order:\n{logs_b}"
    );
    // pebble agrees: one order in all.
    let plog = std::fs::read_to_string(dir.path().join("pebble.log")).unwrap();
    assert_eq!(plog.matches("Added order").count(), 1, "{plog}");
}

/// RFC 3339 (UTC, whole seconds) for pebble's ARI override.
fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ari_window_from_the_ca_drives_the_renewal() {
    install_crypto();
    let bin = ensure_pebble_ari();
    let dir = tempfile::tempdir().unwrap();
    let https_port = free_port();
    // pebble's default validity (years): the two-thirds rule would wait long.
    let pebble = Pebble::start_bin(&bin, dir.path(), free_port(), https_port, 0);
    let storage = dir.path().join("storage");
    let www = www(dir.path());
    let name = "weir-ari.example.com";
    let cfg = acme_config(&pebble, &storage, &www, name, https_port, 0, "tls-alpn-01")
        .replace("http_redirect = \"127.0.0.1:0\"\n", "");
    let addr: SocketAddr = ([127, 0, 0, 1], https_port).into();

    // First run: a certificate, and the CA's default window, far away.
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let roots = pebble.issuing_root().await;
    let first = wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(30)).await;
    assert!(
        weir.wait_log(
            "renewal window for weir-ari.example.com",
            Duration::from_secs(10)
        ),
        "no ARI window asked for:\n{}",
        weir.log()
    );
    let logs = weir.stop();
    assert!(logs.contains("RecheckAt"), "{logs}");
    assert_eq!(logs.matches("ordering a certificate").count(), 1, "{logs}");

    // The CA now suggests renewing in a window starting in 3 s.
    let start = std::time::SystemTime::now() + Duration::from_secs(3);
    let end = start + Duration::from_secs(3);
    let ari = serde_json::json!({
        "suggestedWindow": { "start": rfc3339(start), "end": rfc3339(end) }
    });
    let first_pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64_lines(&first)
    );
    let mgmt = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&pebble.ca_root).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    let r = mgmt
        .post(format!(
            "https://127.0.0.1:{}/set-renewal-info/",
            pebble.mgmt
        ))
        .header("content-type", "application/json")
        .header("user-agent", "weir-test")
        .body(
            serde_json::json!({ "Certificate": first_pem, "ARIResponse": ari.to_string() })
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // Second run: loads the stored certificate, asks ARI, renews inside the
    // window, and the order names the certificate it replaces.
    let weir = Weir::start_debug(WEIR, dir.path(), &cfg, https_port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let renewed = loop {
        let now = wait_for_cert(&weir, addr, name, &roots, Duration::from_secs(5)).await;
        if serial(&now) != serial(&first) {
            break now;
        }
        assert!(Instant::now() < deadline, "not renewed:\n{}", weir.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let seen_at = std::time::SystemTime::now();
    assert!(seen_at >= start, "renewed before the window opened");
    assert_ne!(serial(&renewed), serial(&first));
    let logs = weir.stop();
    assert!(logs.contains("using the stored certificate"), "{logs}");
    assert_eq!(logs.matches("ordering a certificate").count(), 1, "{logs}");
    assert!(logs.contains("(replaces "), "{logs}");
    assert!(!logs.contains("refused an order replacing"), "{logs}");
    // pebble linked the new order to the old certificate's.
    let plog = std::fs::read_to_string(dir.path().join("pebble.log")).unwrap();
    assert_eq!(plog.matches("Added order").count(), 2, "{plog}");
    assert!(plog.contains("is a replacement of"), "{plog}");
}

fn base64_lines(der: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in der.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out.as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Three instances in a cluster (one Redis, a storage directory each),
/// configured for the same new name: one order in all, taken by B or C
/// while pebble validates TLS-ALPN-01 on A's port only, so A answers the
/// challenge the orderer shared; all three then serve the same
/// certificate, and no key is in Redis in the clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_in_a_cluster_order_once_and_serve_the_same_certificate() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let pebble = Pebble::start(dir.path(), free_port(), ports[0], 3600);
    let www = www(dir.path());
    let name = "weir-cluster.example.com";
    let redis = crate::cluster::Redis::start();
    // The name's lock, held by the test until all three wait for it.
    let host = pebble
        .dir_url
        .split("://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let lock = format!("weir:lock:acme-{}-{name}", host.replace(':', "-"));
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &redis.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (it comes with redis-server)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(cli(&["SET", &lock, "the-test", "PX", "60000"]).trim(), "OK");
    let all: Vec<Weir> = ports
        .iter()
        .zip(["a", "b", "c"])
        .map(|(&port, n)| {
            let d = dir.path().join(n);
            std::fs::create_dir_all(&d).unwrap();
            let cfg = acme_config(
                &pebble,
                &d.join("storage"),
                &www,
                name,
                port,
                0,
                "tls-alpn-01",
            )
            .replace("http_redirect = \"127.0.0.1:0\"\n", "")
                + &crate::cluster::cluster_section(redis.port, n);
            Weir::start_debug(WEIR, &d, &cfg, port)
        })
        .collect();
    for w in &all {
        assert!(
            w.wait_log(
                "is held by another instance; waiting",
                Duration::from_secs(20)
            ),
            "{}",
            w.log()
        );
    }
    // A cannot take the lock while stopped: B or C orders.
    let signal = |sig: &str, w: &Weir| {
        assert!(
            Command::new("kill")
                .args([sig, &w.child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP", &all[0]);
    cli(&["DEL", &lock]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !all[1..]
        .iter()
        .any(|w| w.log().contains("ordering a certificate"))
    {
        assert!(
            Instant::now() < deadline,
            "nobody ordered:\n{}\n{}",
            all[1].log(),
            all[2].log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal("-CONT", &all[0]);

    let roots = pebble.issuing_root().await;
    let mut leaves = Vec::new();
    for (w, &port) in all.iter().zip(&ports) {
        leaves.push(
            wait_for_cert(
                w,
                ([127, 0, 0, 1], port).into(),
                name,
                &roots,
                Duration::from_secs(60),
            )
            .await,
        );
    }
    assert!(
        leaves.iter().all(|l| *l == leaves[0]),
        "the instances serve different certificates"
    );
    // A answered the challenge another instance shared.
    assert!(
        all[0].log().contains("cluster: ACME challenge from"),
        "{}",
        all[0].log()
    );
    // A window in which a wrongful second order would show: an absence
    // cannot be polled for.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let logs: Vec<String> = all.iter().map(|w| w.log()).collect();
    let orders: usize = logs
        .iter()
        .map(|l| l.matches("ordering a certificate").count())
        .sum();
    assert_eq!(orders, 1, "{logs:#?}");
    let plog = std::fs::read_to_string(dir.path().join("pebble.log")).unwrap();
    assert_eq!(plog.matches("Added order").count(), 1, "{plog}");
    // Stored in Redis, encrypted: the key's PEM armour is nowhere in it.
    let fields = cli(&["HKEYS", "weir:storage"]);
    assert!(fields.contains(&format!("/{name}/key.pem")), "{fields}");
    let dump = Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "--no-raw",
            "HGETALL",
            "weir:storage",
        ])
        .output()
        .unwrap()
        .stdout;
    assert!(
        !String::from_utf8_lossy(&dump).contains("PRIVATE KEY"),
        "a key in the clear in Redis"
    );
}
