//! Test certificates: a throwaway CA and the leaves it signs (rcgen), so
//! every test makes certificates one way.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A self-signed CA for one test.
pub struct TestCa(CertifiedIssuer<'static, KeyPair>);

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A CA with rcgen's default subject.
    pub fn new() -> TestCa {
        Self::build(None)
    }

    /// A CA whose subject is `CN=<cn>`.
    pub fn named(cn: &str) -> TestCa {
        Self::build(Some(cn))
    }

    fn build(cn: Option<&str>) -> TestCa {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        TestCa(CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap())
    }

    /// The CA certificate as PEM.
    pub fn pem(&self) -> String {
        self.0.pem()
    }

    /// A leaf for `names` (DNS names or IPs): (cert PEM, key PEM).
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        self.leaf_with_cn(names, None)
    }

    /// A leaf for `names` with subject `CN=<cn>`: (cert PEM, key PEM).
    pub fn leaf_with_cn(&self, names: &[&str], cn: Option<&str>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        let cert = p.signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A CA and a leaf for `names`, written as PEM files into `dir`: returns
/// (cert path with the chain leaf + CA, key path, CA cert PEM).
pub fn make_cert(dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf, String) {
    let ca = TestCa::named(&format!("weir test CA {stem}"));
    let (cert, key) = ca.leaf_with_cn(names, Some(names[0]));
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    std::fs::write(&cert_path, cert + &ca.pem()).unwrap();
    std::fs::write(&key_path, key).unwrap();
    (cert_path, key_path, ca.pem())
}
