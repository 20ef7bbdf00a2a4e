//! The access log's connection and filter variables as the real binary
//! writes them: TLS version, cipher suite, name and ALPN of a connection
//! the test's client chose them for; what limits and authentication did
//! and the Basic user; mistyped keys of `access_log` and `request_id`
//! refused; and entries to systemd's journal in its native protocol, read
//! from a datagram socket of the test's.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_test_support::poll::{PATIENCE, poll_until};
use weir_test_support::ports::free_port;
use weir_test_support::proxy::{Weir, client};

use crate::WEIR;

/// The log's lines once it has `n` of them (all of them, if it never does).
fn lines(path: &Path, n: usize) -> Vec<String> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let _ = poll_until(PATIENCE, || read().len() >= n);
    read()
}

fn json(l: &str) -> serde_json::Value {
    serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
}

/// One HTTP/1.1 GET over TLS to `name` at `port`, with only `version`
/// and `suite` offered: the answer's status line.
async fn tls_get(
    port: u16,
    ca_pem: &str,
    name: &str,
    version: &'static rustls::SupportedProtocolVersion,
    suite: rustls::SupportedCipherSuite,
) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = rustls::crypto::CryptoProvider {
        cipher_suites: vec![suite],
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .unwrap();
    let req = format!("GET /x HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// TLS 1.3 and 1.2 connections, each with one cipher suite offered, log
/// the version, the suite's IANA name, the SNI and ALPN; the JSON format
/// has them as strings; a plain connection has `-` and JSON nulls.
#[tokio::test]
async fn tls_version_cipher_and_name_of_each_connection() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, ca) =
        weir_test_support::certs::make_cert(certs.path(), "ab", &["a.test", "b.test"]);
    let tls_port = free_port();
    let tpl = "{scheme} {tls_protocol} {tls_cipher} {tls_server_name} {tls_alpn}";
    let cfg = format!(
        r#"[server]
workers = 1

[site."a.test"]
listen = "127.0.0.1:{tls_port}"
tls = {{ cert = "{cert}", key = "{key}" }}
respond = {{ status = 200, body = "a" }}
access_log = {{ path = "{{DIR}}/tls.log", format = "{tpl}" }}

[site."b.test"]
listen = "127.0.0.1:{tls_port}"
tls = {{ cert = "{cert}", key = "{key}" }}
respond = {{ status = 200, body = "b" }}
access_log = {{ path = "{{DIR}}/tls.json", format = "json" }}

[site."127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
access_log = {{ path = "{{DIR}}/plain.log", format = "{tpl}" }}

[site."plain.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
access_log = {{ path = "{{DIR}}/plain.json", format = "json" }}
"#,
        cert = cert.display(),
        key = key.display(),
        tpl = tpl,
    );
    let mut w = Weir::start(WEIR, &cfg);
    w.wait_port(tls_port);
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    use rustls::version::{TLS12, TLS13};
    let got = tls_get(
        tls_port,
        &ca,
        "a.test",
        &TLS13,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    )
    .await;
    assert_eq!(got, "HTTP/1.1 200 OK");
    let got = tls_get(
        tls_port,
        &ca,
        "a.test",
        &TLS12,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    )
    .await;
    assert_eq!(got, "HTTP/1.1 200 OK");
    assert_eq!(
        lines(&w.path().join("tls.log"), 2),
        [
            "https TLSv1.3 TLS_CHACHA20_POLY1305_SHA256 a.test http/1.1",
            "https TLSv1.2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 a.test http/1.1",
        ]
    );
    let got = tls_get(
        tls_port,
        &ca,
        "b.test",
        &TLS13,
        cs::TLS13_AES_256_GCM_SHA384,
    )
    .await;
    assert_eq!(got, "HTTP/1.1 200 OK");
    let j = json(&lines(&w.path().join("tls.json"), 1)[0]);
    assert_eq!(j["tls_protocol"], "TLSv1.3", "{j}");
    assert_eq!(j["tls_cipher"], "TLS_AES_256_GCM_SHA384", "{j}");
    assert_eq!(j["tls_server_name"], "b.test", "{j}");
    assert_eq!(j["tls_alpn"], "http/1.1", "{j}");

    let c = client();
    c.get(w.url("/")).send().await.unwrap();
    c.get(w.url("/"))
        .header("host", "plain.test")
        .send()
        .await
        .unwrap();
    assert_eq!(lines(&w.path().join("plain.log"), 1), ["http - - - -"]);
    let j = json(&lines(&w.path().join("plain.json"), 1)[0]);
    for k in ["tls_protocol", "tls_cipher", "tls_server_name", "tls_alpn"] {
        assert!(j.get(k).is_none(), "{k} in {j}");
    }
}

/// A rate limit's outcome and name; `basic_auth`'s outcome and user, in
/// a template, in `combined` (as nginx's `$remote_user`) and in JSON.
#[tokio::test]
async fn limit_and_auth_outcomes_and_the_basic_user() {
    let out = std::process::Command::new(WEIR)
        .args(["hash-password", "--cost", "4"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"horse\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let cfg = format!(
        r#"[server]
workers = 1

[site."127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
limit = [{{ name = "per-client", rate = "1r/m" }}]
access_log = {{ path = "{{DIR}}/limit.log", format = "{{status}} {{limit_status}} {{limit_name}} {{auth_status}}" }}

[site."dry.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
limit = [{{ name = "trial", rate = "1r/m", dry_run = true }}]
access_log = {{ path = "{{DIR}}/limit.json", format = "json" }}

[site."auth.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
basic_auth = {{ realm = "staff", users = {{ alice = "{hash}" }} }}
access_log = {{ path = "{{DIR}}/auth.log", format = "{{status}} {{remote_user}} {{auth_status}} {{limit_status}}" }}

[site."combined.test:{{PORT}}"]
listen = ["127.0.0.1:{{PORT}}"]
respond = {{ status = 200 }}
basic_auth = {{ realm = "staff", users = {{ alice = "{hash}" }} }}
access_log = {{ path = "{{DIR}}/combined.log" }}
"#
    );
    let w = Weir::start(WEIR, &cfg);
    let c = client();
    for want in [200, 429] {
        assert_eq!(c.get(w.url("/")).send().await.unwrap().status(), want);
    }
    assert_eq!(
        lines(&w.path().join("limit.log"), 2),
        ["200 PASSED - -", "429 REJECTED per-client -"]
    );
    for _ in 0..2 {
        let r = c
            .get(w.url("/"))
            .header("host", "dry.test")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let got = lines(&w.path().join("limit.json"), 2);
    assert_eq!(got.len(), 2, "{got:?}");
    let (first, second) = (json(&got[0]), json(&got[1]));
    assert_eq!(first["limit_status"], "PASSED", "{first}");
    assert!(first.get("limit_name").is_none(), "{first}");
    assert_eq!(second["limit_status"], "REJECTED_DRY_RUN", "{second}");
    assert_eq!(second["limit_name"], "trial", "{second}");
    assert!(second.get("remote_user").is_none(), "{second}");
    assert!(second.get("auth_status").is_none(), "{second}");

    for host in ["auth.test", "combined.test"] {
        let get = |user: Option<(&str, &str)>| {
            let mut r = c.get(w.url("/")).header("host", host);
            if let Some((u, p)) = user {
                r = r.basic_auth(u, Some(p));
            }
            r.send()
        };
        assert_eq!(get(None).await.unwrap().status(), 401);
        assert_eq!(get(Some(("alice", "cow"))).await.unwrap().status(), 401);
        assert_eq!(get(Some(("alice", "horse"))).await.unwrap().status(), 200);
    }
    assert_eq!(
        lines(&w.path().join("auth.log"), 3),
        [
            "401 - REFUSED -",
            "401 alice REFUSED -",
            "200 alice PASSED -"
        ]
    );
    let combined = lines(&w.path().join("combined.log"), 3);
    assert_eq!(combined.len(), 3, "{combined:?}");
    for (l, user) in combined.iter().zip(["-", "alice", "alice"]) {
        assert!(
            l.starts_with(&format!("127.0.0.1 - {user} [")),
            "{l} has not the user {user}"
        );
    }
}

/// A mistyped key inside `access_log = {…}` or `request_id = {…}` is a
/// config error naming it, with the key meant.
#[test]
fn mistyped_keys_of_access_log_and_request_id_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[site.\"a.test:8080\"]\nrespond = { status = 200 }\n\
         access_log = { path = \"a.log\", fromat = \"json\" }\n\
         request_id = { heder = \"X-Id\", response = true }\n",
    )
    .unwrap();
    let out = std::process::Command::new(WEIR)
        .args(["validate", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        ":3:32: unknown key `site.a.test:8080.access_log.fromat`: did you mean `format`?",
        ":4:16: unknown key `site.a.test:8080.request_id.heder`: did you mean `header`?",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

/// The fields of one journal entry in the native protocol: `KEY=value`
/// lines, or `KEY`, a 64-bit little-endian length and that many bytes.
fn journal_fields(mut d: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !d.is_empty() {
        let nl = d.iter().position(|&b| b == b'\n').expect("a field ends");
        let line = &d[..nl];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            out.push((
                String::from_utf8(line[..eq].to_vec()).unwrap(),
                line[eq + 1..].to_vec(),
            ));
            d = &d[nl + 1..];
        } else {
            let key = String::from_utf8(line.to_vec()).unwrap();
            let len = u64::from_le_bytes(d[nl + 1..nl + 9].try_into().unwrap()) as usize;
            let v = d[nl + 9..nl + 9 + len].to_vec();
            assert_eq!(d[nl + 9 + len], b'\n', "a binary field ends with a newline");
            out.push((key, v));
            d = &d[nl + 10 + len..];
        }
    }
    out
}

/// Entries to the journal's native protocol on a socket of the test's:
/// the line as MESSAGE, priority and identifier, and fields of weir's
/// own; with the socket gone, requests are answered as before and the
/// lost entries counted in the metrics.
#[tokio::test]
async fn journal_entries_carry_fields_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("journal.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let admin = free_port();
    let cfg = format!(
        r#"[server]
workers = 1

[admin]
listen = "127.0.0.1:{admin}"

[site."127.0.0.1:{{PORT}}"]
respond = {{ status = 404 }}
request_id = {{ response = true }}
access_log = {{ journal = "{sock}", tag = "weir-test", format = "{{status}} {{uri}}" }}
"#,
        sock = sock_path.display()
    );
    let mut w = Weir::start(WEIR, &cfg);
    w.wait_port(admin);
    let c = client();
    let r = c.get(w.url("/a?b=1")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let mut buf = vec![0u8; 65536];
    let n = sock
        .recv(&mut buf)
        .expect("no journal entry within PATIENCE");
    let fields = journal_fields(&buf[..n]);
    let get = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_else(|| panic!("no {k} in {fields:?}"))
    };
    assert_eq!(get("MESSAGE"), "404 /a?b=1");
    assert_eq!(get("PRIORITY"), "6");
    assert_eq!(get("SYSLOG_IDENTIFIER"), "weir-test");
    assert_eq!(get("WEIR_SITE"), format!("127.0.0.1:{}", w.addr.port()));
    assert_eq!(get("WEIR_STATUS"), "404");
    assert_eq!(get("WEIR_METHOD"), "GET");
    assert_eq!(get("WEIR_URI"), "/a?b=1");
    assert_eq!(get("WEIR_CLIENT_IP"), "127.0.0.1");
    assert_eq!(get("WEIR_REQUEST_ID"), id);
    assert!(get("WEIR_DURATION_MS").parse::<f64>().is_ok());

    // No journal: the requests are answered, the entries counted as lost.
    drop(sock);
    std::fs::remove_file(&sock_path).unwrap();
    for _ in 0..3 {
        assert_eq!(c.get(w.url("/")).send().await.unwrap().status(), 404);
    }
    let metrics = format!("http://127.0.0.1:{admin}/metrics");
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut dropped = 0.0;
    while std::time::Instant::now() < deadline {
        let m = c.get(&metrics).send().await.unwrap().text().await.unwrap();
        dropped = m
            .lines()
            .find_map(|l| l.strip_prefix("weir_access_log_dropped_total "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        if dropped >= 3.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(dropped, 3.0, "the lost entries were not counted");
}
