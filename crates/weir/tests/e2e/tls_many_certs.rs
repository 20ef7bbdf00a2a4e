//! Many certificates: 10,000 stored certificates load in seconds, and the
//! memory each one costs is measured and printed (`--nocapture`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_tls::certs::{DynamicCerts, Resolver};
use weir_tls::internal_ca::LocalCa;
use weir_tls::storage::Storage;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn ten_thousand_stored_certificates_load_fast() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    const N: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(dir.path()).unwrap();
    let ca = LocalCa::load_or_create(&storage).unwrap();
    let t = Instant::now();
    for i in 0..N {
        let name = format!("site{i}.example.com");
        let (chain, key) = ca
            .issue_pem(std::slice::from_ref(&name), Duration::from_secs(90 * 86400))
            .unwrap();
        // Plain writes: storage's fsync per file would make set-up, not
        // loading, the slow part of this test.
        let d = storage.path(&Storage::cert_dir("acme-test", &name));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cert.pem"), chain).unwrap();
        std::fs::write(d.join("key.pem"), key).unwrap();
    }
    eprintln!("generated {N} certificates in {:?}", t.elapsed());

    let dynamic = Arc::new(DynamicCerts::default());
    let before = rss_kib();
    let t = Instant::now();
    let n = weir_tls::ondemand::load_stored(&storage, "acme-test", &dynamic);
    let took = t.elapsed();
    let after = rss_kib();
    assert_eq!(n, N);
    let per_cert = (after.saturating_sub(before)) * 1024 / N as u64;
    eprintln!(
        "loaded {n} stored certificates in {took:?}; RSS +{} KiB, about {per_cert} bytes per certificate",
        after.saturating_sub(before)
    );
    assert!(took < Duration::from_secs(20), "{took:?}");

    // Lookups stay hash-map fast with all of them loaded.
    let mut r = Resolver::default();
    r.set_dynamic(dynamic);
    let t = Instant::now();
    for i in 0..N {
        assert!(r.find(&format!("site{i}.example.com")).is_some());
    }
    eprintln!("{N} SNI lookups in {:?}", t.elapsed());
}
