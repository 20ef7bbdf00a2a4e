//! The run's certificate: always a self-signed RSA-2048 one (seed 000's
//! type), so every run's TLS rows measure the same handshake. The key is
//! made by `openssl genpkey`: rcgen generates RSA keys only with its
//! aws-lc-rs backend, which weir-bench built alone does not have, and a
//! silent fallback to ECDSA once made 70 runs measure another handshake.

use std::process::Command;

use rcgen::PublicKeyData as _;

use super::CompareError;

/// The one key type runs use, as recorded in summary.json.
pub const KEY_TYPE: &str = "RSA-2048";

/// A certificate for `localhost` and 127.0.0.1 and its key, both PEM.
pub struct Generated {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key (PKCS #8), PEM.
    pub key_pem: String,
    /// The key type read back from the certificate ("RSA-2048").
    pub key_type: String,
}

/// Makes the certificate; `Err` (never another key type) if it cannot.
pub fn generate() -> Result<Generated, CompareError> {
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .map_err(|e| {
            CompareError::Cert(format!(
                "cannot run `openssl genpkey` for the {KEY_TYPE} key ({e}); install openssl"
            ))
        })?;
    if !out.status.success() {
        return Err(CompareError::Cert(format!(
            "`openssl genpkey` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let key_pem = String::from_utf8(out.stdout)
        .map_err(|_| CompareError::Cert("openssl wrote a key that is not PEM text".into()))?;
    let key = rcgen::KeyPair::from_pem(&key_pem)
        .map_err(|e| CompareError::Cert(format!("cannot load the {KEY_TYPE} key: {e}")))?;
    let key_type = key_type(&key.subject_public_key_info());
    if key_type != KEY_TYPE {
        return Err(CompareError::Cert(format!(
            "the key is {key_type}, not {KEY_TYPE}"
        )));
    }
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(|e| CompareError::Cert(e.to_string()))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| CompareError::Cert(e.to_string()))?;
    let key_type = certificate_key_type(cert.der());
    if key_type != KEY_TYPE {
        return Err(CompareError::Cert(format!(
            "the certificate's key is {key_type}, not {KEY_TYPE}"
        )));
    }
    Ok(Generated {
        cert_pem: cert.pem(),
        key_pem,
        key_type,
    })
}

/// "RSA-<bits>", "ECDSA" or "unknown", from a DER SubjectPublicKeyInfo.
pub fn key_type(spki: &[u8]) -> String {
    // rsaEncryption 1.2.840.113549.1.1.1 and id-ecPublicKey 1.2.840.10045.2.1.
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    const EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let parse = || -> Option<String> {
        let (_, spki, _) = tlv(spki, 0x30)?;
        let (_, alg, rest) = tlv(spki, 0x30)?;
        let (_, oid, _) = tlv(alg, 0x06)?;
        if oid == EC {
            return Some("ECDSA".into());
        }
        if oid != RSA {
            return None;
        }
        let (_, bits, _) = tlv(rest, 0x03)?;
        // The bit string's first byte counts unused bits (0), then RSAPublicKey.
        let (_, rsa, _) = tlv(bits.get(1..)?, 0x30)?;
        let (_, n, _) = tlv(rsa, 0x02)?;
        let first = n.iter().position(|&b| b != 0)?;
        let n = &n[first..];
        Some(format!(
            "RSA-{}",
            (n.len() - 1) * 8 + (8 - n[0].leading_zeros() as usize)
        ))
    };
    parse().unwrap_or_else(|| "unknown".into())
}

/// The key type of a DER X.509 certificate (its SubjectPublicKeyInfo).
pub fn certificate_key_type(der: &[u8]) -> String {
    let spki = || -> Option<&[u8]> {
        let (_, cert, _) = tlv(der, 0x30)?;
        let (_, mut tbs, _) = tlv(cert, 0x30)?;
        if tbs.first() == Some(&0xa0) {
            tbs = tlv(tbs, 0xa0)?.2; // [0] version
        }
        let mut rest = tlv(tbs, 0x02)?.2; // serial
        for _ in 0..4 {
            rest = tlv(rest, 0x30)?.2; // signature, issuer, validity, subject
        }
        // The whole element, tag and length too, as `key_type` reads it.
        let (_, _, after) = tlv(rest, 0x30)?;
        Some(&rest[..rest.len() - after.len()])
    };
    spki().map_or_else(|| "unknown".into(), key_type)
}

/// One DER element of tag `tag` at the start of `b`: (tag, content, rest).
fn tlv(b: &[u8], tag: u8) -> Option<(u8, &[u8], &[u8])> {
    if *b.first()? != tag {
        return None;
    }
    let first = *b.get(1)? as usize;
    let (len, head) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, 2 + n)
    };
    let content = b.get(head..head + len)?;
    Some((tag, content, &b[head + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_carries_an_rsa_2048_key() {
        let g = generate().expect("an RSA-2048 certificate (needs openssl)");
        assert_eq!(g.key_type, "RSA-2048");
        assert!(g.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        use rustls_pki_types::pem::PemObject;
        // Read back from the certificate itself, not from the key we made.
        let der = rustls_pki_types::CertificateDer::from_pem_slice(g.cert_pem.as_bytes())
            .expect("a PEM certificate");
        let key = rcgen::KeyPair::from_pem(&g.key_pem).unwrap();
        let spki = key.subject_public_key_info();
        assert!(
            der.windows(spki.len()).any(|w| w == spki.as_slice()),
            "the certificate carries the key"
        );
        assert_eq!(key_type(&spki), KEY_TYPE);
        assert_eq!(certificate_key_type(&der), KEY_TYPE);
    }

    #[test]
    fn ecdsa_keys_are_told_apart() {
        let ec = rcgen::KeyPair::generate().unwrap();
        assert_eq!(key_type(&ec.subject_public_key_info()), "ECDSA");
        assert_eq!(key_type(&[0x30, 0x00]), "unknown");
        assert_eq!(key_type(&[]), "unknown");
    }
}
