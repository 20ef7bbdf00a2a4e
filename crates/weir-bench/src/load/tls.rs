//! TLS client configuration for the load generator: `--insecure`, `--cacert`,
//! SNI and ALPN. Never used for anything but benchmarking.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::LoadError;

/// Installs aws-lc-rs as the process-wide rustls provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Builds the client config. `alpn` is offered as-is (e.g. `["h2"]`).
pub fn client_config(
    insecure: bool,
    cacert: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, LoadError> {
    install_crypto_provider();
    let mut config = if insecure {
        ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        let path = cacert.ok_or(LoadError::NoTrustAnchor)?;
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| LoadError::CaFile(path.display().to_string(), e.to_string()))?;
        for cert in certs {
            let cert =
                cert.map_err(|e| LoadError::CaFile(path.display().to_string(), e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| LoadError::CaFile(path.display().to_string(), e.to_string()))?;
        }
        ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth()
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The server name for SNI and verification: `--sni`, else the URL's host.
pub fn server_name(name: &str) -> Result<ServerName<'static>, LoadError> {
    ServerName::try_from(name.to_string()).map_err(|_| LoadError::BadServerName(name.to_string()))
}

/// Accepts any certificate: `--insecure`, for self-signed benchmark certs.
#[derive(Debug)]
struct AcceptAnyCert;

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
