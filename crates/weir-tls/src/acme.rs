//! ACME (RFC 8555) with instant-acme: the account, orders answered with
//! HTTP-01 or TLS-ALPN-01, and the renewal loop of each certificate.
//!
//! Owns `acme/` and `certs/acme-*` in storage. An order for a name happens
//! only under that name's storage lock and only after checking storage
//! again, so two weir processes sharing a directory never both order it and
//! a restart reuses what is stored. In a cluster the challenge answers are
//! announced to the other processes, and theirs answered here
//! ([`answer_remote`]), so the CA may validate through any of them. A
//! renewal failure never replaces the
//! certificate in use: the slot is only ever stored into with a new,
//! complete certificate, and failures back off exponentially with jitter.
//!
//! When the directory offers ACME Renewal Information (RFC 9773), renewals
//! follow the CA's suggested window (see [`renew::plan`]) and the new order
//! names the certificate it `replaces`; otherwise they happen at two thirds
//! of the lifetime.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, ExternalAccountKey,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::sign::CertifiedKey;

use super::certs::{Challenges, Slot};
use super::renew::{self, Ari, Backoff, Plan};
use super::storage::{Challenge, Storage, StorageError};
use weir_config::{AcmeConfig, ChallengeKind, KeyType};

#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME: {}", describe(.0))]
    Acme(#[from] instant_acme::Error),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("ACME: {0}")]
    Key(#[from] rcgen::Error),
    #[error("ACME: no usable challenge for {name} (offered: {offered}; weir can answer: {usable})")]
    NoChallenge {
        name: String,
        offered: String,
        usable: String,
    },
    #[error("ACME: order for {names} ended {status}")]
    Order { names: String, status: String },
    #[error("ACME: stored data: {0}")]
    Stored(String),
}

/// One ACME directory and account, shared by every certificate from it.
pub struct AcmeClient {
    cfg: AcmeConfig,
    storage: Storage,
    challenges: Arc<Challenges>,
    /// Whether a plain-HTTP listener can answer HTTP-01.
    http01: bool,
    /// `acme-<directory host>`: the storage namespace of this directory.
    issuer_key: String,
    account: tokio::sync::OnceCell<Account>,
    /// Orders placed by this process (for logs and tests).
    pub orders: std::sync::atomic::AtomicUsize,
    /// Each certificate's next renewal and last failure, by its names.
    status: std::sync::Mutex<std::collections::HashMap<Vec<String>, Status>>,
}

/// Where the upkeep of one certificate stands (for the admin API).
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// When it will next be renewed (or ordered again after a failure).
    pub next: Option<SystemTime>,
    /// The last failure, until an order succeeds.
    pub last_error: Option<String>,
}

impl AcmeClient {
    pub fn new(
        cfg: AcmeConfig,
        storage: Storage,
        challenges: Arc<Challenges>,
        http01: bool,
    ) -> Self {
        let host = cfg
            .directory
            .split("://")
            .nth(1)
            .unwrap_or(&cfg.directory)
            .split('/')
            .next()
            .unwrap_or("ca")
            .to_string();
        AcmeClient {
            status: Default::default(),
            issuer_key: format!("acme-{}", super::storage::safe_name(&host)),
            cfg,
            storage,
            challenges,
            http01,
            account: tokio::sync::OnceCell::new(),
            orders: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The storage namespace (`certs/<issuer_key>/<name>`).
    pub fn issuer_key(&self) -> &str {
        &self.issuer_key
    }

    fn cert_dir(&self, names: &[String]) -> String {
        Storage::cert_dir(&self.issuer_key, names.first().map_or("_", |s| s.as_str()))
    }

    /// The stored certificate for `names`, if there is a usable one.
    pub fn load_stored(&self, names: &[String]) -> Option<CertifiedKey> {
        let dir = self.cert_dir(names);
        let cert = self.storage.read(&format!("{dir}/cert.pem")).ok()??;
        let key = self.storage.read(&format!("{dir}/key.pem")).ok()??;
        match super::certified_key_from_pem(&cert, &key) {
            Ok(k) => {
                let (_, not_after) = super::certs::key_validity(&k)?;
                (not_after > SystemTime::now()).then_some(k)
            }
            Err(e) => {
                tracing::warn!("stored certificate {dir}: {e}; ordering a new one");
                None
            }
        }
    }

    async fn account(&self) -> Result<&Account, AcmeError> {
        self.account
            .get_or_try_init(|| async {
                let path = format!("acme/{}/account.json", &self.issuer_key[5..]);
                let storage = self.storage.clone();
                let _lock = tokio::task::spawn_blocking(move || storage.lock("acme-account"))
                    .await
                    .map_err(|e| AcmeError::Stored(e.to_string()))??;
                if let Some(b) = self.storage.read(&path)? {
                    let creds: instant_acme::AccountCredentials = serde_json::from_slice(&b)
                        .map_err(|e| AcmeError::Stored(format!("{path}: {e}")))?;
                    return Ok(self.builder()?.from_credentials(creds).await?);
                }
                let contact: Vec<String> = self
                    .cfg
                    .email
                    .iter()
                    .map(|e| format!("mailto:{e}"))
                    .collect();
                let contact_refs: Vec<&str> = contact.iter().map(String::as_str).collect();
                let eab = self
                    .cfg
                    .eab
                    .as_ref()
                    .map(|(kid, key)| ExternalAccountKey::new(kid.clone(), key));
                let (account, creds) = self
                    .builder()?
                    .create(
                        &NewAccount {
                            contact: &contact_refs,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        self.cfg.directory.clone(),
                        eab.as_ref(),
                    )
                    .await?;
                let json =
                    serde_json::to_vec(&creds).map_err(|e| AcmeError::Stored(e.to_string()))?;
                self.storage.write(&path, &json)?;
                tracing::info!("ACME account created at {}", self.cfg.directory);
                Ok(account)
            })
            .await
    }

    fn builder(&self) -> Result<instant_acme::AccountBuilder, AcmeError> {
        Ok(match &self.cfg.ca_root {
            Some(root) => Account::builder_with_root(root)?,
            None => Account::builder()?,
        })
    }

    /// A certificate for `names`: the stored one if another process (or an
    /// earlier run) already has one that is not due, else a new order.
    pub async fn obtain(&self, names: &[String]) -> Result<CertifiedKey, AcmeError> {
        self.renew(names, None, None).await
    }

    /// A certificate to replace `current` (`None`: there is none yet). Under
    /// the name's lock: a stored certificate other than `current` that is
    /// not due means another process renewed it first, and it is used;
    /// otherwise a new order, marked as replacing `replaces` (ARI).
    async fn renew(
        &self,
        names: &[String],
        current: Option<&CertifiedKey>,
        replaces: Option<CertificateIdentifier<'static>>,
    ) -> Result<CertifiedKey, AcmeError> {
        let storage = self.storage.clone();
        let lock_name = format!("{}-{}", self.issuer_key, names[0]);
        let _lock = tokio::task::spawn_blocking(move || storage.lock(&lock_name))
            .await
            .map_err(|e| AcmeError::Stored(e.to_string()))??;
        if let Some(k) = self.load_stored(names)
            && current.is_none_or(|c| c.cert.first() != k.cert.first())
            && let Some((nb, na)) = super::certs::key_validity(&k)
            && !renew::is_due(nb, na, SystemTime::now())
        {
            tracing::info!(
                "using the certificate for {} found in storage (stored by another weir process or an earlier run)",
                names.join(", ")
            );
            return Ok(k);
        }
        let k = self.order(names, replaces).await?;
        Ok(k)
    }

    /// What the CA suggests for renewing `cert` (RFC 9773).
    async fn renewal_info(&self, cert: &CertifiedKey) -> Ari {
        let Some(id) = cert_id(cert) else {
            return Ari::Unsupported;
        };
        let account = match self.account().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("ACME renewal information: {e}");
                return Ari::Failed;
            }
        };
        match account.renewal_info(&id).await {
            Ok((info, retry_after)) => Ari::Window {
                start: info.suggested_window.start.into(),
                end: info.suggested_window.end.into(),
                retry_after,
            },
            Err(instant_acme::Error::Unsupported(_)) => Ari::Unsupported,
            Err(e) => {
                tracing::warn!("ACME renewal information for {id}: {e}");
                Ari::Failed
            }
        }
    }

    async fn order(
        &self,
        names: &[String],
        replaces: Option<CertificateIdentifier<'static>>,
    ) -> Result<CertifiedKey, AcmeError> {
        let account = self.account().await?;
        let idents: Vec<Identifier> = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => Identifier::Ip(ip),
                Err(_) => Identifier::Dns(n.clone()),
            })
            .collect();
        self.orders
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut order = match replaces {
            Some(id) => {
                tracing::info!(
                    "ordering a certificate for {} from {} (replaces {id})",
                    names.join(", "),
                    self.cfg.directory
                );
                match account
                    .new_order(&NewOrder::new(&idents).replaces(id.clone()))
                    .await
                {
                    Ok(o) => o,
                    // e.g. alreadyReplaced: still renew, just without the link.
                    Err(instant_acme::Error::Api(p)) => {
                        tracing::warn!(
                            "the CA refused an order replacing {id}: {p}; ordering without `replaces`"
                        );
                        account.new_order(&NewOrder::new(&idents)).await?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => {
                tracing::info!(
                    "ordering a certificate for {} from {}",
                    names.join(", "),
                    self.cfg.directory
                );
                account.new_order(&NewOrder::new(&idents)).await?
            }
        };
        let mut http_tokens = Vec::new();
        let mut alpn_names = Vec::new();
        let result = async {
            let mut authzs = order.authorizations();
            while let Some(a) = authzs.next().await {
                let mut a = a?;
                match a.status {
                    AuthorizationStatus::Pending => {}
                    AuthorizationStatus::Valid => continue,
                    other => {
                        return Err(AcmeError::Order {
                            names: a.identifier().to_string(),
                            status: format!("{other:?}"),
                        });
                    }
                }
                let name = a.identifier().to_string();
                let offered: Vec<ChallengeType> =
                    a.challenges.iter().map(|c| c.r#type.clone()).collect();
                let kind = self
                    .cfg
                    .challenges
                    .iter()
                    .copied()
                    .filter(|k| *k != ChallengeKind::Http01 || self.http01)
                    .find(|k| offered.contains(&challenge_type(*k)))
                    .ok_or_else(|| AcmeError::NoChallenge {
                        name: name.clone(),
                        offered: format!("{offered:?}"),
                        usable: format!("{:?}", self.cfg.challenges),
                    })?;
                let mut ch = a
                    .challenge(challenge_type(kind))
                    .expect("offered challenge is present");
                let ka = ch.key_authorization();
                match kind {
                    ChallengeKind::Http01 => {
                        self.challenges
                            .set_http01(ch.token.clone(), ka.as_str().to_string());
                        self.storage
                            .announce(Challenge::Http {
                                token: ch.token.clone(),
                                key_auth: ka.as_str().to_string(),
                            })
                            .await;
                        http_tokens.push(ch.token.clone());
                    }
                    ChallengeKind::TlsAlpn01 => {
                        let cert = alpn_challenge_cert(&name, ka.digest().as_ref())?;
                        self.challenges.set_alpn01(name.clone(), Arc::new(cert));
                        self.storage
                            .announce(Challenge::Alpn {
                                name: name.clone(),
                                digest: ka.digest().as_ref().to_vec(),
                            })
                            .await;
                        alpn_names.push(name.clone());
                    }
                }
                tracing::debug!("answering {kind:?} for {name}");
                ch.set_ready().await?;
            }
            let retry = RetryPolicy::new()
                .initial_delay(Duration::from_millis(250))
                .timeout(Duration::from_secs(90));
            let status = order.poll_ready(&retry).await?;
            if status != OrderStatus::Ready {
                return Err(AcmeError::Order {
                    names: names.join(", "),
                    status: format!("{status:?}"),
                });
            }
            let key = match self.cfg.key_type {
                KeyType::P256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
                KeyType::Rsa2048 => {
                    KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)?
                }
            };
            let mut params = CertificateParams::new(names.to_vec())?;
            params.distinguished_name = DistinguishedName::new();
            let csr = params.serialize_request(&key)?;
            order.finalize_csr(csr.der()).await?;
            let chain = order.poll_certificate(&retry).await?;
            Ok((chain, key.serialize_pem()))
        }
        .await;
        for t in &http_tokens {
            self.challenges.remove_http01(t);
            self.storage
                .announce(Challenge::HttpDone { token: t.clone() })
                .await;
        }
        for n in &alpn_names {
            self.challenges.remove_alpn01(n);
            self.storage
                .announce(Challenge::AlpnDone { name: n.clone() })
                .await;
        }
        let (chain, key_pem) = result?;
        let ck = super::certified_key_from_pem(chain.as_bytes(), key_pem.as_bytes())
            .map_err(AcmeError::Stored)?;
        let dir = self.cert_dir(names);
        self.storage
            .write(&format!("{dir}/key.pem"), key_pem.as_bytes())?;
        self.storage
            .write(&format!("{dir}/cert.pem"), chain.as_bytes())?;
        tracing::info!("obtained a certificate for {}", names.join(", "));
        Ok(ck)
    }

    /// Where the upkeep of the certificate for `names` stands.
    pub fn status(&self, names: &[String]) -> Status {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(names)
            .cloned()
            .unwrap_or_default()
    }

    fn set_status(&self, names: &[String], f: impl FnOnce(&mut Status)) {
        let mut all = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(all.entry(names.to_vec()).or_default());
    }

    /// Keeps `slot` filled with a valid certificate for `names`: obtains one
    /// at once when there is none, renews when [`renew::plan`] says (ARI
    /// window or two thirds of the lifetime), backs off after failures.
    /// Runs until the runtime stops.
    pub async fn maintain(self: Arc<Self>, names: Vec<String>, slot: Slot) {
        let mut backoff = Backoff::new(self.cfg.retry_min, self.cfg.retry_max);
        loop {
            let current = slot.load_full();
            let validity = current.as_deref().and_then(super::certs::key_validity);
            let ari = match current.as_deref() {
                Some(k) => self.renewal_info(k).await,
                None => Ari::Unsupported,
            };
            let now = SystemTime::now();
            let plan = renew::plan(validity, ari, now, rand::random::<f64>());
            if let Ari::Window { start, end, .. } = ari {
                tracing::info!(
                    "renewal window for {} from the CA: {} to {}; next: {plan:?}",
                    names.join(", "),
                    httpdate::fmt_http_date(start),
                    httpdate::fmt_http_date(end)
                );
            }
            match plan {
                Plan::RecheckAt(at) => {
                    self.set_status(&names, |s| s.next = Some(at));
                    tokio::time::sleep(at.duration_since(now).unwrap_or_default()).await;
                    continue;
                }
                Plan::RenewAt(at) => {
                    self.set_status(&names, |s| s.next = Some(at));
                    tokio::time::sleep(at.duration_since(now).unwrap_or_default()).await
                }
            }
            let replaces = match (ari, current.as_deref()) {
                (Ari::Window { .. }, Some(k)) => cert_id(k),
                _ => None,
            };
            match self.renew(&names, current.as_deref(), replaces).await {
                Ok(k) => {
                    slot.store(Some(Arc::new(k)));
                    backoff.reset();
                    self.set_status(&names, |s| s.last_error = None);
                }
                Err(e) => {
                    let delay = backoff.next_delay(rand::random::<f64>());
                    self.set_status(&names, |s| {
                        s.last_error = Some(e.to_string());
                        s.next = Some(SystemTime::now() + delay);
                    });
                    tracing::warn!(
                        "certificate for {}: {e}; keeping the certificate in use, retrying in {delay:?}",
                        names.join(", ")
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// `e` with the cause a user can act on. A failed connection shows as the
/// HTTP client's `client error (Connect)`; the reason (the CA's certificate
/// refused, the connection refused) is deeper in the source chain, where an
/// `io::Error` wraps the rustls error (and its `source()` skips it, so the
/// wrapped error is taken with `get_ref`). The chain is walked through
/// `std::error::Error` alone: no client's error type is named.
pub fn describe(e: &instant_acme::Error) -> String {
    use std::error::Error as _;
    // `Other` is `#[error(transparent)]`: its `source()` would skip the
    // client's error itself.
    let top: &(dyn std::error::Error + 'static) = match e {
        instant_acme::Error::Other(inner) => inner.as_ref(),
        other => other,
    };
    // An I/O error other than a file's means the transport failed: the
    // server was never reached (refused, unreachable, no such host), or not
    // as HTTPS.
    let mut connect = false;
    let mut innermost = top;
    let mut cur = Some(top);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return match refused_certificate(tls) {
                Some(reason) => format!(
                    "cannot connect to the ACME server: its certificate was refused: {reason} ({tls})"
                ),
                None => format!("cannot connect to the ACME server: TLS: {tls}"),
            };
        }
        innermost = err;
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => {
                connect |= !is_file_error(io.kind());
                match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => io.source(),
                }
            }
            None => err.source(),
        };
    }
    match (connect, std::ptr::addr_eq(innermost, top)) {
        (true, _) => format!("cannot connect to the ACME server: {innermost}"),
        (false, true) => top.to_string(),
        (false, false) => format!("{top}: {innermost}"),
    }
}

/// An error of reading a file (`ca_root`), not of reaching the server.
fn is_file_error(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::NotFound | K::PermissionDenied | K::IsADirectory | K::InvalidData | K::InvalidInput
    )
}

/// Why the ACME server's certificate was refused, in the words an operator
/// checks `ca_root` with; `None` when `e` is not about its certificate.
fn refused_certificate(e: &rustls::Error) -> Option<&'static str> {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(c) = e else {
        return None;
    };
    Some(match c {
        C::UnknownIssuer => {
            "unknown issuer: not signed by the CA in `ca_root` (or, without `ca_root`, by a root the system trusts)"
        }
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "name mismatch: not valid for the host in the directory URL"
        }
        C::Expired | C::ExpiredContext { .. } => "expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet",
        C::Revoked => "revoked",
        // A CA of the same name but another key, e.g. one made again.
        C::BadSignature => {
            "bad signature: its issuer has the name of the CA in `ca_root` but another key"
        }
        C::BadEncoding => "malformed certificate",
        _ => "invalid certificate",
    })
}

/// The ARI identifier (authority key identifier and serial) of `cert`'s leaf.
fn cert_id(cert: &CertifiedKey) -> Option<CertificateIdentifier<'static>> {
    let leaf = cert.cert.first()?;
    match CertificateIdentifier::try_from(leaf) {
        Ok(id) => Some(id.into_owned()),
        Err(e) => {
            tracing::debug!("no ARI identifier for the certificate: {e}");
            None
        }
    }
}

fn challenge_type(k: ChallengeKind) -> ChallengeType {
    match k {
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
    }
}

/// The challenge answers of every certificate manager of the process
/// (a reload may run two for a while).
static LIVE: std::sync::Mutex<Vec<std::sync::Weak<Challenges>>> = std::sync::Mutex::new(Vec::new());

/// Makes `c` answer the challenges other processes announce.
pub fn answer_shared(c: &Arc<Challenges>) {
    let mut l = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    l.retain(|w| w.strong_count() > 0);
    l.push(Arc::downgrade(c));
}

/// A challenge another process announced: answered here too.
pub fn answer_remote(c: &Challenge) {
    let alpn = match c {
        Challenge::Alpn { name, digest } => match alpn_challenge_cert(name, digest) {
            Ok(k) => Some(Arc::new(k)),
            Err(e) => {
                tracing::warn!("TLS-ALPN-01 answer for {name} from another instance: {e}");
                return;
            }
        },
        _ => None,
    };
    let live: Vec<_> = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    for ch in live {
        match c {
            Challenge::Http { token, key_auth } => ch.set_http01(token.clone(), key_auth.clone()),
            Challenge::Alpn { name, .. } => {
                if let Some(k) = &alpn {
                    ch.set_alpn01(name.clone(), k.clone());
                }
            }
            Challenge::HttpDone { token } => ch.remove_http01(token),
            Challenge::AlpnDone { name } => ch.remove_alpn01(name),
        }
    }
}

/// The self-signed certificate RFC 8737 asks for: the name as its only SAN
/// and the acmeIdentifier extension holding the key authorization digest.
pub fn alpn_challenge_cert(name: &str, digest: &[u8]) -> Result<CertifiedKey, AcmeError> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(vec![name.to_string()])?;
    p.distinguished_name = DistinguishedName::new();
    p.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = p.self_signed(&key)?;
    super::internal_ca::certified_key(vec![cert.der().clone()], key.serialize_der())
        .map_err(|e| AcmeError::Stored(e.to_string()))
}

#[cfg(test)]
mod tests {
    //! The reason a connection to the ACME server failed, against a plain
    //! rustls server presenting the certificate of each case.

    use std::path::Path;

    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    use weir_test_support::ports::free_port;

    use super::*;

    fn ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
    }

    /// A leaf for `names` signed by `ca`: (cert PEM, key PEM).
    fn leaf(
        ca: &CertifiedIssuer<'static, KeyPair>,
        names: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        edit(&mut p);
        (p.signed_by(&key, ca).unwrap().pem(), key.serialize_pem())
    }

    /// A TLS server on a free port presenting `cert`; its directory URL.
    async fn tls_server(cert: &str, key: &str) -> String {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let port = free_port();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        format!("https://127.0.0.1:{port}/dir")
    }

    /// The error of creating an account at `url` trusting only `ca_root`.
    async fn account_error(url: &str, ca_root: &str, dir: &Path) -> String {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let path = dir.join("ca_root.pem");
        std::fs::write(&path, ca_root).unwrap();
        let new = NewAccount {
            contact: &[],
            terms_of_service_agreed: true,
            only_return_existing: false,
        };
        let err = Account::builder_with_root(&path)
            .unwrap()
            .create(&new, url.to_string(), None)
            .await
            .err()
            .expect("the connection must fail");
        AcmeError::from(err).to_string()
    }

    #[tokio::test]
    async fn a_ca_root_that_did_not_sign_the_servers_certificate_is_named_unknown_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let (signer, other) = (ca("ACME server CA"), ca("another CA"));
        let (cert, key) = leaf(&signer, &["127.0.0.1"], |_| {});
        let url = tls_server(&cert, &key).await;
        let msg = account_error(&url, &other.pem(), dir.path()).await;
        assert!(
            msg.starts_with("ACME: cannot connect to the ACME server: its certificate was refused: unknown issuer"),
            "{msg}"
        );
        assert!(!msg.contains("client error (Connect)"), "{msg}");
    }

    #[tokio::test]
    async fn a_ca_root_of_the_same_name_with_another_key_is_named_bad_signature() {
        let dir = tempfile::tempdir().unwrap();
        // As pebble's root, made again at each start under one name.
        let (signer, remade) = (ca("Pebble Root CA"), ca("Pebble Root CA"));
        let (cert, key) = leaf(&signer, &["127.0.0.1"], |_| {});
        let url = tls_server(&cert, &key).await;
        let msg = account_error(&url, &remade.pem(), dir.path()).await;
        assert!(msg.contains("refused: bad signature"), "{msg}");
    }

    #[tokio::test]
    async fn a_self_signed_certificate_as_ca_root_is_named_unknown_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let signer = ca("ACME server CA");
        let (cert, key) = leaf(&signer, &["127.0.0.1"], |_| {});
        let url = tls_server(&cert, &key).await;
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "a self-signed leaf");
        let self_signed = p.self_signed(&key).unwrap();
        let msg = account_error(&url, &self_signed.pem(), dir.path()).await;
        assert!(msg.contains("refused: unknown issuer"), "{msg}");
    }

    #[tokio::test]
    async fn a_certificate_for_another_name_is_named_name_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let signer = ca("ACME server CA");
        let (cert, key) = leaf(&signer, &["acme.example"], |_| {});
        let url = tls_server(&cert, &key).await;
        let msg = account_error(&url, &signer.pem(), dir.path()).await;
        assert!(msg.contains("refused: name mismatch"), "{msg}");
        assert!(msg.contains("acme.example"), "{msg}");
    }

    #[tokio::test]
    async fn an_expired_certificate_is_named_expired() {
        let dir = tempfile::tempdir().unwrap();
        let signer = ca("ACME server CA");
        let (cert, key) = leaf(&signer, &["127.0.0.1"], |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        });
        let url = tls_server(&cert, &key).await;
        let msg = account_error(&url, &signer.pem(), dir.path()).await;
        assert!(msg.contains("refused: expired"), "{msg}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_named() {
        let dir = tempfile::tempdir().unwrap();
        // Reserved and never listened on.
        let url = format!("https://127.0.0.1:{}/dir", free_port());
        let msg = account_error(&url, &ca("a CA").pem(), dir.path()).await;
        assert!(
            msg.starts_with("ACME: cannot connect to the ACME server: Connection refused"),
            "{msg}"
        );
    }
}
