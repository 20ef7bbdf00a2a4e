//! TLS termination: loading certificates from files, choosing one by SNI,
//! and the rustls server configuration every TLS listener shares.
//!
//! rustls with the aws-lc-rs provider; TLS 1.2 and 1.3 only, the provider's
//! modern cipher suites, stateless session tickets with rotating keys plus a
//! session cache for resumption, ALPN `h2` then `http/1.1`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::HostPattern;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate file {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("key file {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Reads a PEM certificate chain and its private key, and checks that the key
/// belongs to the first certificate.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_err = |reason: String| TlsError::Cert {
        path: cert.to_path_buf(),
        reason,
    };
    let key_err = |reason: String| TlsError::Key {
        path: key.to_path_buf(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(pem_reason(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(pem_reason(e)))?;
    if chain.is_empty() {
        return Err(cert_err("no CERTIFICATE block found".into()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| key_err(pem_reason(e)))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| key_err(format!("unsupported or invalid private key: {e}")))?;
    let ck = CertifiedKey::new(chain, signing);
    match ck.keys_match() {
        Ok(()) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(_)) => Err(key_err(format!(
            "this key does not match the certificate in {}",
            cert.display()
        ))),
        Err(e) => Err(cert_err(format!(
            "cannot check the certificate against its key: {e}"
        ))),
    }
}

fn pem_reason(e: rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error as E;
    match e {
        E::Io(io) => io.to_string(),
        E::NoItemsFound => "no PEM block of the expected kind found".into(),
        other => format!("invalid PEM: {other:?}"),
    }
}

/// Picks a certificate by SNI among the sites of one listener.
#[derive(Debug)]
pub struct SniResolver {
    entries: Vec<(HostPattern, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl SniResolver {
    pub fn new(
        entries: Vec<(HostPattern, Arc<CertifiedKey>)>,
        default: Option<Arc<CertifiedKey>>,
    ) -> Self {
        SniResolver { entries, default }
    }

    fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = sni {
            // Exact names win over wildcards, wildcards over catch-alls.
            for rank in 0..3 {
                for (pat, key) in &self.entries {
                    let r = match pat {
                        HostPattern::Exact(_) => 0,
                        HostPattern::Wildcard(_) => 1,
                        HostPattern::Any => 2,
                    };
                    if r == rank && pat.matches(name) {
                        return Some(key.clone());
                    }
                }
            }
        }
        self.default.clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// The rustls config for one TLS listener.
pub fn server_config(resolver: SniResolver) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
    cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_cert_file_is_named() {
        let e = load_certified_key(
            Path::new("/nonexistent/c.pem"),
            Path::new("/nonexistent/k.pem"),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("certificate file /nonexistent/c.pem"),
            "{e}"
        );
    }
}
