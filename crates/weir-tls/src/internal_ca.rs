//! The local certificate authority for `localhost`, `*.localhost`, loopback
//! and private addresses: a root and an intermediate generated once with
//! rcgen and kept in storage, and short-lived leaf certificates issued from
//! the intermediate in memory.
//!
//! Owns `local-ca/` in the storage directory. Never overwrites an existing
//! root (a root that `weir trust` installed must stay valid); the
//! intermediate is re-issued from the root when it nears its end. Leaf keys
//! never touch the disk.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::storage::{Storage, StorageError};

const ROOT_CERT: &str = "local-ca/root.pem";
const ROOT_KEY: &str = "local-ca/root.key";
const INTER_CERT: &str = "local-ca/intermediate.pem";
const INTER_KEY: &str = "local-ca/intermediate.key";

/// The root lives ten years, the intermediate one (re-issued in its last 30 days).
const ROOT_LIFETIME: Duration = Duration::from_secs(10 * 365 * 86400);
const INTER_LIFETIME: Duration = Duration::from_secs(365 * 86400);
const INTER_RENEW_BEFORE: Duration = Duration::from_secs(30 * 86400);
/// Leaves are back-dated a little for clocks that lag.
const BACKDATE: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("local CA: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("local CA: {0}")]
    Invalid(String),
}

/// The local CA, ready to issue.
pub struct LocalCa {
    root_pem: String,
    inter_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for LocalCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCa").finish_non_exhaustive()
    }
}

impl LocalCa {
    /// Loads the CA from storage, generating the root and the intermediate
    /// the first time (under the storage lock, so two processes agree).
    pub fn load_or_create(storage: &Storage) -> Result<LocalCa, CaError> {
        let _lock = storage.lock("local-ca")?;
        let (root_pem, root_key) = match (storage.read(ROOT_CERT)?, storage.read(ROOT_KEY)?) {
            (Some(c), Some(k)) => (utf8(c)?, KeyPair::from_pem(&utf8(k)?)?),
            _ => {
                let key = KeyPair::generate()?;
                let mut p = ca_params("weir local CA root", ROOT_LIFETIME);
                p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                let cert = p.self_signed(&key)?;
                storage.write(ROOT_KEY, key.serialize_pem().as_bytes())?;
                storage.write(ROOT_CERT, cert.pem().as_bytes())?;
                // A new root makes any old intermediate useless.
                let _ = std::fs::remove_file(storage.path(INTER_CERT));
                (cert.pem(), key)
            }
        };
        let root_issuer = Issuer::from_ca_cert_pem(&root_pem, root_key)?;

        let existing = match (storage.read(INTER_CERT)?, storage.read(INTER_KEY)?) {
            (Some(c), Some(k)) => {
                let pem = utf8(c)?;
                let der = CertificateDer::from_pem_slice(pem.as_bytes())
                    .map_err(|e| CaError::Invalid(format!("{INTER_CERT}: {e}")))?;
                let fresh = super::certs::validity(&der).is_some_and(|(_, not_after)| {
                    not_after > SystemTime::now() + INTER_RENEW_BEFORE
                });
                fresh.then_some((pem, der, KeyPair::from_pem(&utf8(k)?)?))
            }
            _ => None,
        };
        let (inter_pem, inter_der, inter_key) = match existing {
            Some(e) => e,
            None => {
                let key = KeyPair::generate()?;
                let mut p = ca_params("weir local CA intermediate", INTER_LIFETIME);
                p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
                let cert = p.signed_by(&key, &root_issuer)?;
                storage.write(INTER_KEY, key.serialize_pem().as_bytes())?;
                storage.write(INTER_CERT, cert.pem().as_bytes())?;
                (cert.pem(), cert.der().clone(), key)
            }
        };
        let issuer = Issuer::from_ca_cert_pem(&inter_pem, inter_key)?;
        Ok(LocalCa {
            root_pem,
            inter_der,
            issuer,
        })
    }

    /// The root certificate, PEM: what `weir trust` installs.
    pub fn root_pem(&self) -> &str {
        &self.root_pem
    }

    /// Issues a leaf for `names` (host names or IP addresses) valid for
    /// `lifetime`; the chain includes the intermediate.
    pub fn issue(&self, names: &[String], lifetime: Duration) -> Result<CertifiedKey, CaError> {
        let (cert, key) = self.sign(names, lifetime)?;
        certified_key(
            vec![cert.der().clone(), self.inter_der.clone()],
            key.serialize_der(),
        )
    }

    /// Like [`LocalCa::issue`], as PEM: (chain, private key). For tools and
    /// tests that need files.
    pub fn issue_pem(
        &self,
        names: &[String],
        lifetime: Duration,
    ) -> Result<(String, String), CaError> {
        let (cert, key) = self.sign(names, lifetime)?;
        let inter = pem_block("CERTIFICATE", &self.inter_der);
        Ok((cert.pem() + &inter, key.serialize_pem()))
    }

    fn sign(
        &self,
        names: &[String],
        lifetime: Duration,
    ) -> Result<(rcgen::Certificate, KeyPair), CaError> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::default();
        let now = SystemTime::now();
        // Short test lifetimes must not be mostly back-dating.
        p.not_before = (now - BACKDATE.min(lifetime / 10)).into();
        p.not_after = (now + lifetime).into();
        let mut dn = DistinguishedName::new();
        if let Some(first) = names.first() {
            dn.push(DnType::CommonName, first.clone());
        }
        p.distinguished_name = dn;
        for n in names {
            let san = match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    n.clone()
                        .try_into()
                        .map_err(|_| CaError::Invalid(format!("`{n}` is not a DNS name")))?,
                ),
            };
            p.subject_alt_names.push(san);
        }
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        let cert = p.signed_by(&key, &self.issuer)?;
        Ok((cert, key))
    }
}

fn pem_block(tag: &str, der: &[u8]) -> String {
    // rcgen's PEM encoder via a throwaway parse is not public; base64 by hand.
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::with_capacity(der.len() * 4 / 3 + 4);
    for c in der.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= c.len() {
                b64.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut s = format!("-----BEGIN {tag}-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(line).unwrap_or(""));
        s.push('\n');
    }
    s.push_str(&format!("-----END {tag}-----\n"));
    s
}

fn ca_params(cn: &str, lifetime: Duration) -> CertificateParams {
    let mut p = CertificateParams::default();
    let now = SystemTime::now();
    p.not_before = (now - BACKDATE).into();
    p.not_after = (now + lifetime).into();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn.push(DnType::OrganizationName, "weir");
    p.distinguished_name = dn;
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.use_authority_key_identifier_extension = true;
    p
}

/// A rustls key from a DER chain and a PKCS#8 DER key.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    pkcs8: Vec<u8>,
) -> Result<CertifiedKey, CaError> {
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8));
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| CaError::Invalid(e.to_string()))?;
    Ok(CertifiedKey::new(chain, signing))
}

fn utf8(b: Vec<u8>) -> Result<String, CaError> {
    String::from_utf8(b).map_err(|_| CaError::Invalid("a PEM file is not UTF-8".into()))
}

use rustls_pki_types::pem::PemObject;

pub use weir_config::is_internal_name;

/// Shared handle.
pub type SharedCa = Arc<LocalCa>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_made_once_and_leaves_chain_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let st = Storage::open(dir.path()).unwrap();
        let ca = LocalCa::load_or_create(&st).unwrap();
        let again = LocalCa::load_or_create(&st).unwrap();
        assert_eq!(ca.root_pem(), again.root_pem());
        let leaf = again
            .issue(
                &["localhost".into(), "127.0.0.1".into()],
                Duration::from_secs(3600),
            )
            .unwrap();
        assert_eq!(leaf.cert.len(), 2);
        leaf.keys_match().unwrap();
        let (_, not_after) = crate::certs::validity(&leaf.cert[0]).unwrap();
        assert!(not_after <= SystemTime::now() + Duration::from_secs(3601));

        // The chain verifies against the root with webpki, as a browser would.
        let root = CertificateDer::from_pem_slice(ca.root_pem().as_bytes()).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(root).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
            .build()
            .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        verifier
            .verify_server_cert(
                &leaf.cert[0],
                &leaf.cert[1..],
                &rustls_pki_types::ServerName::try_from("localhost").unwrap(),
                &[],
                rustls_pki_types::UnixTime::now(),
            )
            .unwrap();
    }

    #[test]
    fn internal_names() {
        for n in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "::1",
            "10.0.0.1",
            "printer.local",
            "nas",
        ] {
            assert!(is_internal_name(n), "{n}");
        }
        for n in ["example.com", "www.example.org"] {
            assert!(!is_internal_name(n), "{n}");
        }
    }
}
