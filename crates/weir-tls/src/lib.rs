//! TLS termination: where certificates come from (files, ACME, the local
//! CA, on demand), choosing one by SNI, and the rustls server configuration
//! every TLS listener shares.
//!
//! rustls with the aws-lc-rs provider; TLS 1.2 and 1.3 only, the provider's
//! modern cipher suites, stateless session tickets with rotating keys plus a
//! session cache for resumption, ALPN `h2` then `http/1.1` (and `h3` on QUIC).
//!
//! - [`certs`]: slots and the SNI resolver the handshake reads lock-free
//! - [`manager`]: builds the slots from the config and keeps them filled
//! - [`reload`]: certificate files reloaded when they change
//! - [`internal_ca`]: the local CA for localhost and private addresses
//! - [`acme`]: ACME orders (HTTP-01, TLS-ALPN-01), [`renew`]: when to renew
//! - [`ondemand`]: certificates at the first handshake, behind `ask`
//! - [`storage`]: the storage directory
//! - [`turns`]: when a worker answers a ClientHello (the signature)
//!
//! Never lets a failed renewal or reload replace a certificate in use.

pub mod acme;
pub mod certs;
pub mod internal_ca;
pub mod manager;
pub mod ondemand;
pub mod reload;
pub mod renew;
pub mod storage;
pub mod turns;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use certs::{Challenges, Resolver};
pub use manager::{CertInfo, CertManager};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate file {path}: {reason}")]
    Cert { path: PathBuf, reason: String },
    #[error("key file {path}: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
    #[error(transparent)]
    Storage(#[from] storage::StorageError),
    #[error(transparent)]
    LocalCa(#[from] internal_ca::CaError),
    #[error("cannot start the certificate runtime: {0}")]
    Runtime(std::io::Error),
}

/// The full check of a site's certificate files for config validation:
/// both parse, and the key belongs to the certificate.
pub struct CertFiles;

impl weir_config::CertCheck for CertFiles {
    fn check(&self, cert: &Path, key: &Path) -> Result<(), weir_config::error::CertProblem> {
        use weir_config::error::CertProblem;
        match load_certified_key(cert, key) {
            Ok(_) => Ok(()),
            Err(e @ TlsError::Key { .. }) => Err(CertProblem::Key(e.to_string())),
            Err(e) => Err(CertProblem::Cert(e.to_string())),
        }
    }
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

/// A certificate chain and key from PEM bytes (what storage holds); the
/// error says which part is wrong.
pub fn certified_key_from_pem(cert: &[u8], key: &[u8]) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate: {}", pem_reason(e)))?;
    if chain.is_empty() {
        return Err("certificate: no CERTIFICATE block found".into());
    }
    let der = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("key: {}", pem_reason(e)))?;
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("key: {e}"))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match()
        .map_err(|_| "the key does not match the certificate".to_string())?;
    Ok(ck)
}

fn pem_reason(e: rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error as E;
    match e {
        E::Io(io) => io.to_string(),
        E::NoItemsFound => "no PEM block of the expected kind found".into(),
        other => format!("invalid PEM: {other:?}"),
    }
}

/// The rustls config for TLS over TCP on one listener: TLS 1.3 and 1.2,
/// session tickets with rotating keys plus a session cache, ALPN `h2` then
/// `http/1.1`.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut cfg = base_config(
        resolver,
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The rustls config for QUIC: TLS 1.3 only, ALPN `h3`, early data (0-RTT)
/// only when asked for.
pub fn quic_server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    early_data: bool,
) -> Result<ServerConfig, TlsError> {
    let mut cfg = base_config(resolver, &[&rustls::version::TLS13])?;
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    cfg.max_early_data_size = if early_data { u32::MAX } else { 0 };
    Ok(cfg)
}

fn base_config(
    resolver: Arc<dyn ResolvesServerCert>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
    cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(cfg)
}

const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Accepts TLS connections on one listener: reads the ClientHello first, so
/// that a TLS-ALPN-01 validation gets its challenge certificate and an
/// unknown name on an on-demand listener can wait for its certificate
/// before the handshake goes on.
pub struct Acceptor {
    config: Arc<ServerConfig>,
    challenge: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
    on_demand: Option<Arc<ondemand::OnDemand>>,
}

impl Acceptor {
    pub fn new(
        resolver: Arc<Resolver>,
        challenges: Arc<Challenges>,
        on_demand: Option<Arc<ondemand::OnDemand>>,
    ) -> Result<Self, TlsError> {
        let config = server_config(resolver.clone())?;
        let mut ch = base_config(
            Arc::new(certs::ChallengeResolver(challenges)),
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        )?;
        ch.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        Ok(Acceptor {
            config,
            challenge: Arc::new(ch),
            resolver,
            on_demand,
        })
    }

    /// The handshake. `Ok(None)`: the connection was an ACME validation and
    /// is done.
    ///
    /// Once the ClientHello is in, answering it (a signature) waits for a
    /// turn from the worker's `turns`, which share the worker between new
    /// handshakes and the connections already open.
    pub async fn accept<IO>(
        &self,
        stream: IO,
        turns: &turns::Turns,
    ) -> std::io::Result<Option<tokio_rustls::server::TlsStream<IO>>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let start =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream)
                .await?;
        let hello = start.client_hello();
        let is_challenge = hello
            .alpn()
            .is_some_and(|mut a| a.any(|p| p == ACME_TLS_ALPN));
        if is_challenge {
            use tokio::io::AsyncWriteExt;
            let mut s = start.into_stream(self.challenge.clone()).await?;
            let _ = s.shutdown().await;
            return Ok(None);
        }
        if let Some(od) = &self.on_demand
            && let Some(sni) = hello.server_name()
            && !self.resolver.covers(sni)
            && self.resolver.find(sni).is_none()
        {
            let name = sni.to_ascii_lowercase();
            if let Err(e) = od.obtain(&name).await {
                tracing::info!("on-demand TLS for {name}: {e}");
                return Err(std::io::Error::other(format!("no certificate for {name}")));
            }
        }
        let turn = turns.take().await;
        // `into_stream` signs (rustls answers the ClientHello in
        // `Accepted::into_connection`); one poll writes the server's flight.
        // Then the turn ends: the rest is waiting a round trip for the
        // client's Finished, which costs no CPU.
        let mut handshake = std::pin::pin!(start.into_stream(self.config.clone()));
        if let std::task::Poll::Ready(r) = futures_util::poll!(handshake.as_mut()) {
            return r.map(Some);
        }
        drop(turn);
        handshake.await.map(Some)
    }
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
