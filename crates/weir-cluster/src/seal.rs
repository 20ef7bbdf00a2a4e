//! Encryption at rest of what weir stores in Redis (account keys,
//! certificate keys, the local CA): AES-256-GCM under a key derived from
//! the cluster's secret, a random nonce per write, and the entry's name as
//! associated data so a value cannot be moved to another name. Owns the
//! format only; never talks to Redis.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::digest::{SHA256, digest};

/// Marks the format, so a later one can be told apart.
const MAGIC: &[u8] = b"weir1";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("not written by this weir (unknown format)")]
    Format,
    #[error("cannot be decrypted: is `cluster.key` the same on every instance?")]
    Key,
    #[error("no randomness for a nonce")]
    Random,
}

pub struct Seal {
    key: LessSafeKey,
}

impl Seal {
    pub fn new(secret: &[u8]) -> Seal {
        let mut m = secret.to_vec();
        m.extend_from_slice(b"\0weir storage");
        let k = digest(&SHA256, &m);
        Seal {
            key: LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, k.as_ref()).expect("a 32-byte key"),
            ),
        }
    }

    pub fn seal(&self, name: &str, data: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut body = data.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut body,
            )
            .map_err(|_| SealError::Key)?;
        let mut out = Vec::with_capacity(MAGIC.len() + NONCE_LEN + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    pub fn open(&self, name: &str, blob: &[u8]) -> Result<Vec<u8>, SealError> {
        let rest = blob.strip_prefix(MAGIC).ok_or(SealError::Format)?;
        if rest.len() < NONCE_LEN {
            return Err(SealError::Format);
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let mut body = body.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Format)?;
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut body)
            .map_err(|_| SealError::Key)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_the_key_and_under_their_name() {
        let s = Seal::new(b"0123456789abcdef0123456789abcdef");
        let b = s
            .seal("certs/a/key.pem", b"-----BEGIN PRIVATE KEY-----")
            .unwrap();
        assert!(
            !b.windows(7).any(|w| w == b"PRIVATE"),
            "stored in the clear"
        );
        assert_eq!(
            s.open("certs/a/key.pem", &b).unwrap(),
            b"-----BEGIN PRIVATE KEY-----"
        );
        assert_ne!(
            b,
            s.seal("certs/a/key.pem", b"-----BEGIN PRIVATE KEY-----")
                .unwrap()
        );
        assert_eq!(s.open("certs/b/key.pem", &b), Err(SealError::Key));
        let other = Seal::new(b"another secret of thirty-two chars!!");
        assert_eq!(other.open("certs/a/key.pem", &b), Err(SealError::Key));
        assert_eq!(s.open("x", b"plain text"), Err(SealError::Format));
    }
}
