//! Certificates from files with the real binary: SNI picks among sites with
//! a default for unknown names, a replaced file is picked up without a
//! restart, a key that does not match its certificate is refused with the
//! file's name while the old certificate stays, TLS 1.2 works, and sessions
//! resume.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_test_support::certs::*;
use weir_test_support::ports::free_port;
use weir_test_support::tls::*;

use crate::WEIR;

/// Replaces a file the way deploy tools do: write aside, rename over.
fn replace(path: &Path, data: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn served_serial(addr: SocketAddr, sni: &str, cfg: Arc<rustls::ClientConfig>) -> String {
    serial(&handshake(addr, sni, cfg).await.unwrap()[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_default_reload_and_mismatched_key() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let d = dir.path();
    let (a_cert, a_key) = ca.leaf(&["a.test"]);
    let (b_cert, b_key) = ca.leaf(&["b.test"]);
    std::fs::write(d.join("a.pem"), &a_cert).unwrap();
    std::fs::write(d.join("a.key"), &a_key).unwrap();
    std::fs::write(d.join("b.pem"), &b_cert).unwrap();
    std::fs::write(d.join("b.key"), &b_key).unwrap();
    std::fs::create_dir(d.join("www")).unwrap();
    let port = free_port();
    let cfg = format!(
        "[tls]\nhttp3 = false\n[site.\"a.test:{port}\"]\nroot = \"www\"\ntls = {{ cert = \"a.pem\", key = \"a.key\" }}\n\
         [site.\"b.test:{port}\"]\nroot = \"www\"\ntls = {{ cert = \"b.pem\", key = \"b.key\" }}\n"
    );
    let weir = Weir::start_debug(WEIR, d, &cfg, port);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let roots = roots_from_pem(ca.pem().as_bytes());
    let tls = Arc::new(client_config(roots.clone(), &[b"http/1.1"]));
    let parse = |pem: &str| {
        serial(&rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes()).unwrap())
    };
    assert_eq!(
        served_serial(addr, "a.test", tls.clone()).await,
        parse(&a_cert)
    );
    assert_eq!(
        served_serial(addr, "b.test", tls.clone()).await,
        parse(&b_cert)
    );
    // Unknown names get the default (first) site's certificate: a verified
    // handshake for a.test's certificate under another name fails.
    assert!(handshake(addr, "c.test", tls.clone()).await.is_err());

    // TLS 1.2 only.
    let tls12 = Arc::new({
        let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        c
    });
    handshake(addr, "a.test", tls12).await.unwrap();

    // Session resumption: a second connection with the same client config resumes.
    let resume = Arc::new(client_config(roots.clone(), &[b"http/1.1"]));
    for round in 0..2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut s = tokio_rustls::TlsConnector::from(resume.clone())
            .connect("a.test".try_into().unwrap(), tcp)
            .await
            .unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        let kind = s.get_ref().1.handshake_kind();
        if round == 1 {
            assert_eq!(kind, Some(rustls::HandshakeKind::Resumed));
        }
    }

    // Replacing the files: picked up without a restart.
    let (a2_cert, a2_key) = ca.leaf(&["a.test"]);
    replace(&d.join("a.key"), &a2_key);
    replace(&d.join("a.pem"), &a2_cert);
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_serial(addr, "a.test", tls.clone()).await != parse(&a2_cert) {
        assert!(Instant::now() < deadline, "not reloaded:\n{}", weir.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        weir.log().contains("reloaded certificate"),
        "{}",
        weir.log()
    );

    // A certificate whose key is not in the key file: refused, named, old one kept.
    let (a3_cert, _) = ca.leaf(&["a.test"]);
    replace(&d.join("a.pem"), &a3_cert);
    assert!(
        weir.wait_log("does not match the certificate", Duration::from_secs(10)),
        "{}",
        weir.log()
    );
    let logs = weir.log();
    let line = logs.lines().find(|l| l.contains("does not match")).unwrap();
    assert!(line.contains("a.key") && line.contains("a.pem"), "{line}");
    assert!(line.contains("keeping the certificate in use"), "{line}");
    assert_eq!(
        served_serial(addr, "a.test", tls.clone()).await,
        parse(&a2_cert)
    );
}
