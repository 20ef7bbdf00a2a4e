//! The certificate manager: turns the config's TLS sites into slots, fills
//! them (files now, local-CA leaves now, ACME from storage now and from the
//! CA in the background) and keeps them filled on its own small runtime.
//!
//! Start-up never waits for the network: a site whose certificate is still
//! being ordered is served with the listener's default certificate until
//! the order completes. Never blocks a worker: all renewals, reloads and
//! orders run on the `weir-tls` runtime.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::acme::AcmeClient;
use super::certs::{Challenges, DynamicCerts, Resolver, Slot, new_slot};
use super::internal_ca::LocalCa;
use super::ondemand::{AskClient, OdIssuer, OnDemand};
use super::reload::{self, FileWatch};
use super::renew::{self, Backoff};
use super::storage::Storage;
use super::{Acceptor, TlsError};
use weir_config::{Config, Issuer, ListenerConfig, TlsConfig};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SlotKey {
    Files(PathBuf, PathBuf),
    Auto(Issuer, Vec<String>),
}

pub struct CertManager {
    rt: Option<tokio::runtime::Runtime>,
    challenges: Arc<Challenges>,
    slots: HashMap<SlotKey, Slot>,
    dynamic: Arc<DynamicCerts>,
    on_demand: Option<Arc<OnDemand>>,
    local_ca: Option<Arc<LocalCa>>,
    acme: Option<Arc<AcmeClient>>,
    _watch: Option<FileWatch>,
}

impl Drop for CertManager {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// One certificate weir serves, as the admin API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CertInfo {
    /// The names the config asks it for (for files: the certificate's).
    pub names: Vec<String>,
    /// `files`, `acme`, `internal` or `on-demand`.
    pub source: &'static str,
    /// The issuer's distinguished name; `None` while still being ordered.
    pub issuer: Option<String>,
    /// Seconds since the Unix epoch.
    pub not_after: Option<u64>,
    /// When weir will renew it (seconds since the Unix epoch): as ACME's
    /// upkeep planned it, else two thirds into its lifetime; `None` for
    /// files (reloaded when they change).
    pub renew_at: Option<u64>,
    /// The last failure to obtain or renew it, until one succeeds.
    pub last_error: Option<String>,
}

impl CertManager {
    /// Every certificate served now: the config's and those obtained on demand.
    pub fn certificates(&self) -> Vec<CertInfo> {
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        };
        let describe =
            |key: Option<&rustls::sign::CertifiedKey>, names: Vec<String>, source, renews: bool| {
                let leaf = key.and_then(|k| k.cert.first());
                let (own_names, issuer) = leaf
                    .and_then(super::certs::names_and_issuer)
                    .map_or((Vec::new(), None), |(n, i)| (n, Some(i)));
                let validity = key.and_then(super::certs::key_validity);
                CertInfo {
                    names: if names.is_empty() { own_names } else { names },
                    source,
                    issuer,
                    not_after: validity.and_then(|(_, to)| secs(to)),
                    renew_at: validity
                        .filter(|_| renews)
                        .and_then(|(from, to)| secs(from + to.duration_since(from).ok()? * 2 / 3)),
                    last_error: None,
                }
            };
        let mut out: Vec<CertInfo> = self
            .slots
            .iter()
            .map(|(k, slot)| {
                let key = slot.load();
                match k {
                    SlotKey::Files(..) => describe(key.as_deref(), Vec::new(), "files", false),
                    SlotKey::Auto(Issuer::Internal, names) => {
                        describe(key.as_deref(), names.clone(), "internal", true)
                    }
                    SlotKey::Auto(Issuer::Acme, names) => {
                        let mut c = describe(key.as_deref(), names.clone(), "acme", true);
                        if let Some(acme) = &self.acme {
                            let st = acme.status(names);
                            c.renew_at = st.next.and_then(secs).or(c.renew_at);
                            c.last_error = st.last_error;
                        }
                        c
                    }
                }
            })
            .collect();
        for key in self.dynamic.all() {
            out.push(describe(Some(&key), Vec::new(), "on-demand", true));
        }
        out.sort_by(|a, b| a.names.cmp(&b.names));
        out
    }

    /// Builds every slot and starts the background work. Fails only on
    /// local problems (storage not writable, local CA unreadable). `ask`:
    /// the HTTP client of on-demand TLS's `ask` check.
    pub fn start(cfg: &Config, ask: Arc<dyn AskClient>) -> Result<CertManager, TlsError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-tls")
            .enable_all()
            .build()
            .map_err(TlsError::Runtime)?;
        let handle = rt.handle().clone();
        let challenges = Arc::new(Challenges::default());
        super::acme::answer_shared(&challenges);
        let dynamic = Arc::new(DynamicCerts::default());
        let mut slots: HashMap<SlotKey, Slot> = HashMap::new();
        let mut pairs = Vec::new();
        let mut storage: Option<Storage> = None;
        let mut local_ca: Option<Arc<LocalCa>> = None;
        let mut acme: Option<Arc<AcmeClient>> = None;
        let mut on_demand_issuer: Option<Issuer> = None;
        let http01 = cfg.listeners.iter().any(|l| !l.tls);

        for site in &cfg.sites {
            let Some(tls) = &site.tls else { continue };
            match tls {
                TlsConfig::Files {
                    cert_path,
                    key_path,
                } => {
                    let k = SlotKey::Files(cert_path.clone(), key_path.clone());
                    if let std::collections::hash_map::Entry::Vacant(e) = slots.entry(k) {
                        let key = crate::load_certified_key(cert_path, key_path)?;
                        let slot = new_slot(Some(key));
                        pairs.push(reload::Pair {
                            cert: cert_path.clone(),
                            key: key_path.clone(),
                            slot: slot.clone(),
                        });
                        e.insert(slot);
                    }
                }
                TlsConfig::Auto {
                    issuer,
                    names,
                    on_demand,
                } => {
                    if storage.is_none() {
                        storage = Some(Storage::open(&cfg.tls.storage)?);
                    }
                    let st = storage.as_ref().expect("opened above");
                    if *on_demand {
                        on_demand_issuer.get_or_insert(*issuer);
                    }
                    let needs_ca = *issuer == Issuer::Internal
                        || (*on_demand && on_demand_issuer == Some(Issuer::Internal));
                    if needs_ca && local_ca.is_none() {
                        local_ca = Some(Arc::new(LocalCa::load_or_create(st)?));
                    }
                    if *issuer == Issuer::Acme && acme.is_none() {
                        acme = Some(Arc::new(AcmeClient::new(
                            cfg.tls.acme.clone(),
                            st.clone(),
                            challenges.clone(),
                            http01,
                        )));
                    }
                    if names.is_empty() {
                        continue;
                    }
                    let k = SlotKey::Auto(*issuer, names.clone());
                    if slots.contains_key(&k) {
                        continue;
                    }
                    let slot = match issuer {
                        Issuer::Internal => {
                            let ca = local_ca.clone().expect("made above");
                            let lifetime = cfg.tls.internal_lifetime;
                            let slot = new_slot(Some(ca.issue(names, lifetime)?));
                            handle.spawn(renew_internal(ca, names.clone(), lifetime, slot.clone()));
                            slot
                        }
                        Issuer::Acme => {
                            let client = acme.clone().expect("made above");
                            let stored = client.load_stored(names);
                            if stored.is_some() {
                                tracing::info!(
                                    "using the stored certificate for {}",
                                    names.join(", ")
                                );
                            }
                            let slot = new_slot(stored);
                            handle.spawn(client.maintain(names.clone(), slot.clone()));
                            slot
                        }
                    };
                    slots.insert(k, slot);
                }
            }
        }

        let on_demand = match on_demand_issuer {
            None => None,
            Some(issuer) => {
                let od_issuer = match issuer {
                    Issuer::Internal => OdIssuer::Internal(
                        local_ca.clone().expect("made for on-demand"),
                        cfg.tls.internal_lifetime,
                    ),
                    Issuer::Acme => {
                        let client = acme.clone().expect("made for on-demand");
                        let st = storage.as_ref().expect("opened for on-demand");
                        let t = std::time::Instant::now();
                        let n = super::ondemand::load_stored(st, client.issuer_key(), &dynamic);
                        if n > 0 {
                            tracing::info!("loaded {n} stored certificates in {:?}", t.elapsed());
                        }
                        OdIssuer::Acme(client)
                    }
                };
                Some(OnDemand::new(
                    cfg.tls.on_demand.clone(),
                    od_issuer,
                    dynamic.clone(),
                    ask,
                    handle.clone(),
                ))
            }
        };

        let watch = if pairs.is_empty() {
            None
        } else {
            match reload::watch(pairs, &handle) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!("cannot watch certificate files for changes: {e}");
                    None
                }
            }
        };

        Ok(CertManager {
            rt: Some(rt),
            challenges,
            slots,
            dynamic,
            on_demand,
            local_ca,
            acme,
            _watch: watch,
        })
    }

    /// The answers to ACME challenges, for the plain-HTTP listeners.
    pub fn challenges(&self) -> Arc<Challenges> {
        self.challenges.clone()
    }

    /// The background runtime, for other long-lived tasks.
    pub fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.rt.as_ref().map(|r| r.handle().clone())
    }

    pub fn local_ca(&self) -> Option<&Arc<LocalCa>> {
        self.local_ca.as_ref()
    }

    pub fn acme(&self) -> Option<&Arc<AcmeClient>> {
        self.acme.as_ref()
    }

    pub fn dynamic(&self) -> &Arc<DynamicCerts> {
        &self.dynamic
    }

    fn slot_for(&self, tls: &TlsConfig) -> Option<Slot> {
        let k = match tls {
            TlsConfig::Files {
                cert_path,
                key_path,
                ..
            } => SlotKey::Files(cert_path.clone(), key_path.clone()),
            TlsConfig::Auto { issuer, names, .. } => SlotKey::Auto(*issuer, names.clone()),
        };
        self.slots.get(&k).cloned()
    }

    /// The SNI resolver of one TLS listener.
    pub fn resolver(&self, cfg: &Config, l: &ListenerConfig) -> Arc<Resolver> {
        let mut r = Resolver::default();
        let mut first: Option<Slot> = None;
        let mut on_demand = false;
        for &i in &l.sites {
            let s = &cfg.sites[i];
            let Some(tls) = &s.tls else { continue };
            if let TlsConfig::Auto {
                on_demand: true, ..
            } = tls
            {
                on_demand = true;
            }
            if let Some(slot) = self.slot_for(tls) {
                r.add(&s.host, slot.clone());
                first.get_or_insert(slot);
            }
        }
        let default = cfg.sites[l.default_site]
            .tls
            .as_ref()
            .and_then(|t| self.slot_for(t))
            .or(first);
        if let Some(d) = default {
            r.set_default(d);
        }
        if on_demand || !self.dynamic.is_empty() {
            r.set_dynamic(self.dynamic.clone());
        }
        Arc::new(r)
    }

    /// The acceptor of one TLS listener.
    pub fn acceptor(&self, cfg: &Config, l: &ListenerConfig) -> Result<Acceptor, TlsError> {
        let on_demand = l.sites.iter().any(|&i| {
            matches!(
                cfg.sites[i].tls,
                Some(TlsConfig::Auto {
                    on_demand: true,
                    ..
                })
            )
        });
        Acceptor::new(
            self.resolver(cfg, l),
            self.challenges.clone(),
            if on_demand {
                self.on_demand.clone()
            } else {
                None
            },
        )
    }
}

/// Re-issues a local-CA leaf at two thirds of its lifetime.
async fn renew_internal(ca: Arc<LocalCa>, names: Vec<String>, lifetime: Duration, slot: Slot) {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
    loop {
        let validity = slot.load().as_deref().and_then(super::certs::key_validity);
        let wait = renew::wait_until_due(validity, SystemTime::now(), rand::random::<f64>());
        tokio::time::sleep(wait).await;
        match ca.issue(&names, lifetime) {
            Ok(k) => {
                slot.store(Some(Arc::new(k)));
                backoff.reset();
                tracing::debug!("renewed the local certificate for {}", names.join(", "));
            }
            Err(e) => {
                tracing::error!(
                    "local CA certificate for {}: {e}; keeping the one in use",
                    names.join(", ")
                );
                tokio::time::sleep(backoff.next_delay(rand::random::<f64>())).await;
            }
        }
    }
}
