//! On-demand TLS: a certificate obtained at the first handshake for a name
//! no site has, only when the `ask` endpoint says yes or the name is on the
//! allow-list, and within a per-name and a global rate limit.
//!
//! Never orders a certificate for a name that was neither allowed nor
//! approved by `ask` (scanners sending random SNI names must not make weir
//! order certificates); never lets one name be tried again sooner than
//! `name_interval` after a refusal or failure; never has two orders for one
//! name in flight. The rate limiter is a plain state machine with the time
//! passed in.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::future::Shared;
use rustls::sign::CertifiedKey;

use super::acme::AcmeClient;
use super::certs::DynamicCerts;
use super::internal_ca::LocalCa;
use super::renew;
use super::storage::Storage;
use weir_config::OnDemandConfig;

#[derive(Debug, Clone, thiserror::Error)]
pub enum OnDemandError {
    #[error("refused: tried less than {0:?} ago")]
    NameTooSoon(Duration),
    #[error("refused: global on-demand rate limit reached")]
    RateLimited,
    #[error("refused by the ask endpoint (status {0})")]
    Denied(u16),
    #[error("not on the allow-list and no ask endpoint")]
    NotAllowed,
    #[error("ask endpoint: {0}")]
    Ask(String),
    #[error("not a name a certificate can be issued for")]
    BadName,
    #[error("issuing: {0}")]
    Issue(String),
}

/// Per-name and global limits on attempts. Time is passed in.
#[derive(Debug)]
pub struct RateLimiter {
    burst: u32,
    refill: Duration,
    name_interval: Duration,
    tokens: u32,
    last_refill: Instant,
    last_try: HashMap<String, Instant>,
}

impl RateLimiter {
    pub fn new(burst: u32, refill: Duration, name_interval: Duration, now: Instant) -> Self {
        RateLimiter {
            burst,
            refill,
            name_interval,
            tokens: burst,
            last_refill: now,
            last_try: HashMap::new(),
        }
    }

    /// May `name` be tried now? Records the try.
    pub fn check_name(&mut self, name: &str, now: Instant) -> Result<(), OnDemandError> {
        if let Some(t) = self.last_try.get(name)
            && now.saturating_duration_since(*t) < self.name_interval
        {
            return Err(OnDemandError::NameTooSoon(self.name_interval));
        }
        if self.last_try.len() > 100_000 {
            let keep = self.name_interval;
            self.last_try
                .retain(|_, t| now.saturating_duration_since(*t) < keep);
        }
        self.last_try.insert(name.to_string(), now);
        Ok(())
    }

    /// Takes one issuance from the global bucket.
    pub fn take(&mut self, now: Instant) -> Result<(), OnDemandError> {
        let elapsed = now.saturating_duration_since(self.last_refill);
        let n = (elapsed.as_nanos() / self.refill.as_nanos().max(1)) as u64;
        if n > 0 {
            self.tokens = (self.tokens as u64 + n).min(self.burst as u64) as u32;
            self.last_refill += self.refill * n as u32;
            if self.tokens == self.burst {
                self.last_refill = now;
            }
        }
        if self.tokens == 0 {
            return Err(OnDemandError::RateLimited);
        }
        self.tokens -= 1;
        Ok(())
    }

    /// A successful issuance clears the name's record.
    pub fn forget(&mut self, name: &str) {
        self.last_try.remove(name);
    }
}

/// Who issues on-demand certificates.
#[derive(Clone)]
pub enum OdIssuer {
    Acme(Arc<AcmeClient>),
    Internal(Arc<LocalCa>, Duration),
}

type Pending = Shared<Pin<Box<dyn Future<Output = Result<(), OnDemandError>> + Send>>>;

pub struct OnDemand {
    cfg: OnDemandConfig,
    issuer: OdIssuer,
    limiter: Mutex<RateLimiter>,
    dynamic: Arc<DynamicCerts>,
    inflight: Mutex<HashMap<String, Pending>>,
    ask: Arc<dyn AskClient>,
    rt: tokio::runtime::Handle,
}

impl OnDemand {
    pub fn new(
        cfg: OnDemandConfig,
        issuer: OdIssuer,
        dynamic: Arc<DynamicCerts>,
        ask: Arc<dyn AskClient>,
        rt: tokio::runtime::Handle,
    ) -> Arc<Self> {
        let limiter = RateLimiter::new(cfg.burst, cfg.refill, cfg.name_interval, Instant::now());
        let od = Arc::new(OnDemand {
            cfg,
            issuer,
            limiter: Mutex::new(limiter),
            dynamic,
            inflight: Mutex::new(HashMap::new()),
            ask,
            rt: rt.clone(),
        });
        rt.spawn(od.clone().renew_loop());
        od
    }

    /// Makes sure `name` (lower-case) has a certificate in the dynamic set,
    /// obtaining one if the gate allows. Shares one attempt among
    /// concurrent handshakes for the same name.
    pub async fn obtain(self: &Arc<Self>, name: &str) -> Result<(), OnDemandError> {
        if self.dynamic.get(name).is_some() {
            return Ok(());
        }
        let fut = {
            let mut m = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            match m.get(name) {
                Some(f) => f.clone(),
                None => {
                    let this = self.clone();
                    let n = name.to_string();
                    let handle = self.rt.spawn(async move { this.attempt(&n).await });
                    let f: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
                        handle
                            .await
                            .unwrap_or_else(|e| Err(OnDemandError::Issue(e.to_string())))
                    });
                    let f = f.shared();
                    m.insert(name.to_string(), f.clone());
                    f
                }
            }
        };
        let r = fut.await;
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        r
    }

    async fn attempt(&self, name: &str) -> Result<(), OnDemandError> {
        if name.is_empty() || name.parse::<std::net::IpAddr>().is_ok() || !name.contains('.') {
            return Err(OnDemandError::BadName);
        }
        self.lock_limiter().check_name(name, Instant::now())?;
        self.allowed(name).await?;
        self.lock_limiter().take(Instant::now())?;
        let key = self.issue(name).await?;
        self.dynamic.insert(name.to_string(), Arc::new(key));
        self.lock_limiter().forget(name);
        tracing::info!("on-demand certificate for {name} obtained");
        Ok(())
    }

    fn lock_limiter(&self) -> std::sync::MutexGuard<'_, RateLimiter> {
        self.limiter.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn issue(&self, name: &str) -> Result<CertifiedKey, OnDemandError> {
        let names = vec![name.to_string()];
        match &self.issuer {
            OdIssuer::Acme(acme) => acme
                .obtain(&names)
                .await
                .map_err(|e| OnDemandError::Issue(e.to_string())),
            OdIssuer::Internal(ca, lifetime) => ca
                .issue(&names, *lifetime)
                .map_err(|e| OnDemandError::Issue(e.to_string())),
        }
    }

    async fn allowed(&self, name: &str) -> Result<(), OnDemandError> {
        if self.cfg.allow.iter().any(|p| p.matches(name)) {
            return Ok(());
        }
        let Some(ask) = &self.cfg.ask else {
            return Err(OnDemandError::NotAllowed);
        };
        let status =
            tokio::time::timeout(Duration::from_secs(10), ask_status(&*self.ask, ask, name))
                .await
                .map_err(|_| OnDemandError::Ask("timed out".into()))??;
        if status == 200 {
            Ok(())
        } else {
            Err(OnDemandError::Denied(status))
        }
    }

    /// Renews on-demand certificates as they come due.
    async fn renew_loop(self: Arc<Self>) {
        loop {
            let now = SystemTime::now();
            let mut next = Duration::from_secs(3600);
            for name in self.dynamic.names() {
                let Some((nb, na)) = self
                    .dynamic
                    .get(&name)
                    .and_then(|k| super::certs::key_validity(&k))
                else {
                    continue;
                };
                let wait = renew::wait_until_due(Some((nb, na)), now, 0.0);
                if wait.is_zero() {
                    match self.issue(&name).await {
                        Ok(k) => self.dynamic.insert(name, Arc::new(k)),
                        Err(e) => {
                            tracing::warn!(
                                "renewing on-demand certificate for {name}: {e}; keeping the one in use"
                            );
                            next = next.min(Duration::from_secs(60));
                        }
                    }
                } else {
                    next = next.min(wait);
                }
            }
            tokio::time::sleep(next.max(Duration::from_secs(1))).await;
        }
    }
}

/// The HTTP client the `ask` check goes through. weir-tls has none of its
/// own: the server passes weir's (the proxy's HTTP/1.1 client), which sits
/// above this crate.
pub trait AskClient: Send + Sync {
    /// `GET uri` (an `http://` URL with a host) over plain HTTP/1.1; the
    /// answer's status code, or why there is none.
    fn status<'a>(&'a self, uri: &'a http::Uri) -> AskFuture<'a>;
}

/// What [`AskClient::status`] returns.
pub type AskFuture<'a> = Pin<Box<dyn Future<Output = Result<u16, String>> + Send + 'a>>;

/// `GET <ask>?domain=<name>` through `client`; the status code.
async fn ask_status(client: &dyn AskClient, ask: &str, name: &str) -> Result<u16, OnDemandError> {
    let sep = if ask.contains('?') { '&' } else { '?' };
    let url = format!("{ask}{sep}domain={name}");
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| OnDemandError::Ask(e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(OnDemandError::Ask(
            "only http:// ask URLs are supported".into(),
        ));
    }
    if uri.host().is_none() {
        return Err(OnDemandError::Ask("no host".into()));
    }
    client.status(&uri).await.map_err(OnDemandError::Ask)
}

/// Loads every certificate stored under `certs/<issuer_key>/` into `dynamic`;
/// returns how many loaded. Unreadable entries are logged and skipped.
pub fn load_stored(storage: &Storage, issuer_key: &str, dynamic: &DynamicCerts) -> usize {
    let base = format!("certs/{issuer_key}");
    let mut n = 0;
    for name in storage.list_dirs(&base) {
        let dir = format!("{base}/{name}");
        let (Ok(Some(c)), Ok(Some(k))) = (
            storage.read(&format!("{dir}/cert.pem")),
            storage.read(&format!("{dir}/key.pem")),
        ) else {
            continue;
        };
        match super::certified_key_from_pem(&c, &k) {
            Ok(key) => {
                dynamic.insert(name, Arc::new(key));
                n += 1;
            }
            Err(e) => tracing::warn!("stored certificate {dir}: {e}"),
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_tried_once_per_interval() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(10, Duration::from_secs(6), Duration::from_secs(600), t0);
        r.check_name("a.test", t0).unwrap();
        assert!(matches!(
            r.check_name("a.test", t0 + Duration::from_secs(599)),
            Err(OnDemandError::NameTooSoon(_))
        ));
        r.check_name("b.test", t0).unwrap();
        r.check_name("a.test", t0 + Duration::from_secs(600))
            .unwrap();
        r.forget("a.test");
        r.check_name("a.test", t0 + Duration::from_secs(601))
            .unwrap();
    }

    #[test]
    fn global_bucket_refills_over_simulated_time() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(3, Duration::from_secs(6), Duration::from_secs(600), t0);
        for _ in 0..3 {
            r.take(t0).unwrap();
        }
        assert!(matches!(r.take(t0), Err(OnDemandError::RateLimited)));
        assert!(r.take(t0 + Duration::from_secs(5)).is_err());
        r.take(t0 + Duration::from_secs(6)).unwrap();
        assert!(r.take(t0 + Duration::from_secs(7)).is_err());
        // A long quiet time refills only up to the burst.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            r.take(later).unwrap();
        }
        assert!(r.take(later).is_err());
        // Over a simulated minute at most burst + 60/6 issuances pass.
        let mut r = RateLimiter::new(3, Duration::from_secs(6), Duration::from_secs(600), t0);
        let passed = (0..600)
            .filter(|i| r.take(t0 + Duration::from_millis(100 * i)).is_ok())
            .count();
        assert_eq!(passed, 3 + 9, "{passed}");
    }
}
