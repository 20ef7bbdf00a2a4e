//! Basic-authentication passwords: bcrypt and argon2 hashes made
//! ([`hash`], for `weir hash-password`) and checked ([`Users::check`]),
//! with successful checks remembered so that a strong hash costs one
//! computation per client credential, not one per request (Caddy's users
//! see a core pegged by bcrypt without it).
//!
//! A check is seconds of CPU at high costs: callers run [`Users::verify`]
//! off the async threads. Wrong passwords are never remembered: each one
//! is checked, and refused.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use weir_config::traffic::BasicAuth;

/// Remembered successes at most; past it the memory starts over.
const REMEMBERED: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("bcrypt: {0}")]
    Bcrypt(#[from] bcrypt::BcryptError),
    #[error("argon2: {0}")]
    Argon2(String),
    #[error("unknown algorithm `{0}`; use bcrypt or argon2")]
    Algorithm(String),
}

/// A hash of `password`: `"bcrypt"` with `cost` (4 to 31), or `"argon2"`
/// (argon2id with its default parameters).
pub fn hash(algorithm: &str, password: &str, cost: u32) -> Result<String, HashError> {
    match algorithm {
        "bcrypt" => Ok(bcrypt::hash(password, cost)?),
        "argon2" | "argon2id" => {
            use argon2::PasswordHasher;
            argon2::Argon2::default()
                .hash_password(password.as_bytes())
                .map(|h| h.to_string())
                .map_err(|e| HashError::Argon2(e.to_string()))
        }
        other => Err(HashError::Algorithm(other.to_string())),
    }
}

/// Whether `password` matches `hash` (bcrypt or argon2).
pub fn matches(password: &str, hash: &str) -> bool {
    if hash.starts_with("$argon2") {
        use argon2::PasswordVerifier;
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), hash)
            .is_ok()
    } else {
        bcrypt::verify(password, hash).unwrap_or(false)
    }
}

/// The users of one `basic_auth`, and the credentials that passed.
pub struct Users {
    pub cfg: std::sync::Arc<BasicAuth>,
    /// Keyed digests of (user, password) that matched: a process-secret
    /// SipHash pair, so the passwords themselves are not kept.
    passed: Mutex<HashMap<u128, ()>>,
    /// Checks under way: concurrent requests with one new credential wait
    /// for the first one's result instead of hashing it again.
    flights: Mutex<HashMap<u128, Arc<OnceLock<bool>>>>,
    keys: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
}

/// What a request's `Authorization` field says.
pub enum Check<'a> {
    /// A credential that passed before.
    Known,
    /// To be verified (off the async threads) with [`Users::verify`].
    Verify {
        digest: u128,
        password: String,
        hash: &'a str,
    },
    /// No credentials, malformed ones, or an unknown user.
    Refused,
}

impl Users {
    pub fn new(cfg: std::sync::Arc<BasicAuth>) -> Users {
        Users {
            cfg,
            passed: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            keys: Default::default(),
        }
    }

    fn digest(&self, user: &str, password: &str) -> u128 {
        let one = |k: &std::collections::hash_map::RandomState| {
            let mut h = k.build_hasher();
            h.write(user.as_bytes());
            h.write_u8(0);
            h.write(password.as_bytes());
            h.finish()
        };
        ((one(&self.keys.0) as u128) << 64) | one(&self.keys.1) as u128
    }

    /// Reads `Authorization: Basic ...` and says what is left to do.
    pub fn check(&self, h: &http::HeaderMap) -> Check<'_> {
        let Some((user, password)) = h
            .get(http::header::AUTHORIZATION)
            .and_then(|v| basic_credentials(v.as_bytes()))
        else {
            return Check::Refused;
        };
        let Some((_, hash)) = self.cfg.users.iter().find(|(u, _)| *u == user) else {
            return Check::Refused;
        };
        let digest = self.digest(&user, &password);
        let known = self
            .passed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&digest);
        if known {
            Check::Known
        } else {
            Check::Verify {
                digest,
                password,
                hash,
            }
        }
    }

    /// Verifies a password against its hash (CPU-heavy; blocks while the
    /// same credential is being checked for another request) and remembers
    /// a success.
    pub fn verify(&self, digest: u128, password: &str, hash: &str) -> bool {
        let flight = self
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest)
            .or_default()
            .clone();
        let ok = *flight.get_or_init(|| matches(password, hash));
        self.flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest);
        if ok {
            let mut m = self.passed.lock().unwrap_or_else(|e| e.into_inner());
            if m.len() >= REMEMBERED {
                m.clear();
            }
            m.insert(digest, ());
        }
        ok
    }
}

/// (user, password) of a `Basic` credential.
pub fn basic_credentials(v: &[u8]) -> Option<(String, String)> {
    let s = std::str::from_utf8(v).ok()?;
    let (scheme, rest) = s.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// The user name of a `Basic` credential, decoded into `buf` (the access
/// log's `{remote_user}`: no allocation per line); `None` when `v` is not
/// one or its credential is longer than `buf`.
pub fn basic_user<'b>(v: &[u8], buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let v = v.trim_ascii();
    let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    use base64::Engine;
    let n = base64::engine::general_purpose::STANDARD
        .decode_slice(rest.trim_ascii(), buf)
        .ok()?;
    let raw = &buf[..n];
    let colon = raw.iter().position(|&b| b == b':')?;
    Some(&raw[..colon])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_of_a_basic_credential_without_allocating() {
        let mut buf = [0u8; 64];
        let v = format!("Basic {}", encode("alice:s3cr:et"));
        assert_eq!(basic_user(v.as_bytes(), &mut buf), Some(&b"alice"[..]));
        let v = format!("basic  {} ", encode(":pw"));
        assert_eq!(basic_user(v.as_bytes(), &mut buf), Some(&b""[..]));
        assert_eq!(basic_user(b"Bearer abc", &mut buf), None);
        assert_eq!(basic_user(b"Basic !!!", &mut buf), None);
        let long = format!("Basic {}", encode(&"x".repeat(100)));
        assert_eq!(basic_user(long.as_bytes(), &mut buf), None);
    }

    #[test]
    fn credentials_are_read_as_rfc_7617_writes_them() {
        // "Aladdin:open sesame"
        assert_eq!(
            basic_credentials(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
            Some(("Aladdin".into(), "open sesame".into()))
        );
        assert_eq!(
            basic_credentials(b"basic YTpi"),
            Some(("a".into(), "b".into()))
        );
        assert_eq!(basic_credentials(b"Bearer YTpi"), None);
        assert_eq!(basic_credentials(b"Basic YTpi="), None);
        assert_eq!(basic_credentials(b"Basic !!!!"), None);
        // No colon.
        assert_eq!(basic_credentials(b"Basic YWI="), None);
    }

    #[test]
    fn both_hashes_check_and_a_success_is_remembered_but_a_failure_never() {
        for algo in ["bcrypt", "argon2"] {
            let h = hash(algo, "s3cret", 4).unwrap();
            assert!(matches("s3cret", &h), "{algo}");
            assert!(!matches("wrong", &h), "{algo}");
            let users = Users::new(Arc::new(BasicAuth {
                realm: "r".into(),
                users: vec![("alice".into(), h)],
            }));
            let auth = |pw: &str| {
                let mut m = http::HeaderMap::new();
                let token = encode(&format!("alice:{pw}"));
                m.insert(
                    http::header::AUTHORIZATION,
                    format!("Basic {token}").parse().unwrap(),
                );
                m
            };
            let Check::Verify {
                digest,
                password,
                hash,
            } = users.check(&auth("wrong"))
            else {
                panic!("a new credential is verified");
            };
            assert!(!users.verify(digest, &password, hash));
            assert!(matches!(users.check(&auth("wrong")), Check::Verify { .. }));
            let Check::Verify {
                digest,
                password,
                hash,
            } = users.check(&auth("s3cret"))
            else {
                panic!("a new credential is verified");
            };
            assert!(users.verify(digest, &password, hash));
            assert!(matches!(users.check(&auth("s3cret")), Check::Known));
            assert!(matches!(users.check(&auth("wrong")), Check::Verify { .. }));
            assert!(matches!(
                users.check(&http::HeaderMap::new()),
                Check::Refused
            ));
        }
    }

    fn encode(s: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    }
}
