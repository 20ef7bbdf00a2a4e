//! The certificates in use and how a handshake finds one.
//!
//! Every certificate source (a pair of files, an ACME name, a local-CA name)
//! owns one [`Slot`]: an `ArcSwapOption` that its maintainer (the file
//! watcher, the ACME renewer, the local CA) replaces whole. A [`Resolver`],
//! built once per TLS listener, maps SNI names to slots with hash maps:
//! exact name → wildcard → catch-all → the listener's default, plus the
//! certificates obtained on demand. The handshake path only loads atomics
//! and looks up hash maps: it never locks, never blocks, never allocates
//! beyond lower-casing a name that has upper-case letters.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;

use weir_config::HostPattern;

/// Where one certificate source keeps its current certificate.
pub type Slot = Arc<ArcSwapOption<CertifiedKey>>;

pub fn new_slot(initial: Option<CertifiedKey>) -> Slot {
    Arc::new(ArcSwapOption::new(initial.map(Arc::new)))
}

/// Certificates that are not tied to a configured site: those obtained on
/// demand, by lower-case name.
#[derive(Default)]
pub struct DynamicCerts {
    map: papaya::HashMap<String, Arc<CertifiedKey>>,
}

impl DynamicCerts {
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.map.pin().get(name).cloned()
    }

    pub fn insert(&self, name: String, key: Arc<CertifiedKey>) {
        self.map.pin().insert(name, key);
    }

    /// Every certificate held, once each (one may cover several names).
    pub fn all(&self) -> Vec<Arc<CertifiedKey>> {
        let mut out: Vec<Arc<CertifiedKey>> = Vec::new();
        for (_, k) in self.map.pin().iter() {
            if !out.iter().any(|o| Arc::ptr_eq(o, k)) {
                out.push(k.clone());
            }
        }
        out
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A snapshot of the names held.
    pub fn names(&self) -> Vec<String> {
        self.map.pin().keys().cloned().collect()
    }
}

/// Answers for ACME challenges in progress: HTTP-01 tokens and TLS-ALPN-01
/// certificates. Filled by the ACME client, read by the plain listeners and
/// the TLS acceptor.
#[derive(Default)]
pub struct Challenges {
    http: papaya::HashMap<String, String>,
    alpn: papaya::HashMap<String, Arc<CertifiedKey>>,
}

impl Challenges {
    /// The key authorization for an HTTP-01 token.
    pub fn http01(&self, token: &str) -> Option<String> {
        self.http.pin().get(token).cloned()
    }

    pub fn set_http01(&self, token: String, key_auth: String) {
        self.http.pin().insert(token, key_auth);
    }

    pub fn remove_http01(&self, token: &str) {
        self.http.pin().remove(token);
    }

    pub fn alpn01(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.alpn.pin().get(name).cloned()
    }

    pub fn set_alpn01(&self, name: String, key: Arc<CertifiedKey>) {
        self.alpn.pin().insert(name, key);
    }

    pub fn remove_alpn01(&self, name: &str) {
        self.alpn.pin().remove(name);
    }
}

/// Picks the certificate for a handshake on one listener.
#[derive(Default)]
pub struct Resolver {
    exact: HashMap<String, Slot>,
    /// `*.example.com` is stored as `.example.com`.
    wildcard: HashMap<String, Slot>,
    any: Option<Slot>,
    default: Option<Slot>,
    dynamic: Option<Arc<DynamicCerts>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("exact", &self.exact.len())
            .field("wildcard", &self.wildcard.len())
            .finish_non_exhaustive()
    }
}

impl Resolver {
    /// Adds a site's slot; the first slot added for a pattern wins, as the
    /// first site with a name wins in the server's `pipeline::Listener`.
    pub fn add(&mut self, pattern: &HostPattern, slot: Slot) {
        match pattern {
            HostPattern::Exact(n) => {
                self.exact.entry(n.to_ascii_lowercase()).or_insert(slot);
            }
            HostPattern::Wildcard(s) => {
                self.wildcard.entry(s.to_ascii_lowercase()).or_insert(slot);
            }
            HostPattern::Any => {
                self.any.get_or_insert(slot);
            }
        }
    }

    /// The certificate for clients that send no SNI or a name no site has.
    pub fn set_default(&mut self, slot: Slot) {
        self.default = Some(slot);
    }

    pub fn set_dynamic(&mut self, d: Arc<DynamicCerts>) {
        self.dynamic = Some(d);
    }

    /// The certificate for `sni` from a configured site or the dynamic set,
    /// without falling back to the default.
    pub fn find(&self, sni: &str) -> Option<Arc<CertifiedKey>> {
        let lower;
        let name = if sni.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = sni.to_ascii_lowercase();
            lower.as_str()
        } else {
            sni
        };
        if let Some(k) = self.exact.get(name).and_then(|s| s.load_full()) {
            return Some(k);
        }
        if let Some(dot) = name.find('.')
            && let Some(k) = self.wildcard.get(&name[dot..]).and_then(|s| s.load_full())
        {
            return Some(k);
        }
        if let Some(k) = self.dynamic.as_ref().and_then(|d| d.get(name)) {
            return Some(k);
        }
        self.any.as_ref().and_then(|s| s.load_full())
    }

    /// The full choice: [`Resolver::find`], then the default.
    pub fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        sni.and_then(|n| self.find(n))
            .or_else(|| self.default.as_ref().and_then(|s| s.load_full()))
    }

    /// Whether a configured exact or wildcard site covers `sni` (it may
    /// still be waiting for its certificate).
    pub fn covers(&self, sni: &str) -> bool {
        let name = sni.to_ascii_lowercase();
        self.exact.contains_key(&name)
            || name
                .find('.')
                .is_some_and(|d| self.wildcard.contains_key(&name[d..]))
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(hello.server_name())
    }
}

/// Answers TLS-ALPN-01 handshakes with the challenge certificate for the name.
#[derive(Debug)]
pub struct ChallengeResolver(pub Arc<Challenges>);

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Challenges").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ChallengeResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.alpn01(&hello.server_name()?.to_ascii_lowercase())
    }
}

/// The validity period (not before, not after) of a DER certificate.
pub fn validity(der: &CertificateDer<'_>) -> Option<(SystemTime, SystemTime)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let v = cert.validity();
    let to_sys = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64))
        } else {
            None
        }
    };
    Some((to_sys(v.not_before)?, to_sys(v.not_after)?))
}

/// The names (DNS and IP subject alternative names) and issuer of a leaf.
pub fn names_and_issuer(der: &CertificateDer<'_>) -> Option<(Vec<String>, String)> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(d.to_string()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => Some(
                            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).ok()?).to_string(),
                        ),
                        16 => Some(
                            std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).ok()?).to_string(),
                        ),
                        _ => None,
                    },
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some((names, cert.issuer().to_string()))
}

/// The validity period of the leaf of a certified key.
pub fn key_validity(key: &CertifiedKey) -> Option<(SystemTime, SystemTime)> {
    validity(key.cert.first()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> CertifiedKey {
        let k = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        super::super::internal_ca::certified_key(
            vec![k.cert.der().clone()],
            k.signing_key.serialize_der(),
        )
        .unwrap()
    }

    fn leaf_name(k: &CertifiedKey) -> String {
        let (_, c) = x509_parser::parse_x509_certificate(&k.cert[0]).unwrap();
        c.subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names[0]
            .to_string()
    }

    #[test]
    fn exact_then_wildcard_then_dynamic_then_any_then_default() {
        let mut r = Resolver::default();
        r.add(
            &HostPattern::Exact("a.example.com".into()),
            new_slot(Some(key("a.example.com"))),
        );
        r.add(
            &HostPattern::Wildcard(".example.com".into()),
            new_slot(Some(key("*.example.com"))),
        );
        r.set_default(new_slot(Some(key("default.test"))));
        let dynamic = Arc::new(DynamicCerts::default());
        dynamic.insert("dyn.test".into(), Arc::new(key("dyn.test")));
        r.set_dynamic(dynamic);
        let name = |sni: Option<&str>| r.pick(sni).map(|k| leaf_name(&k));
        assert_eq!(
            name(Some("A.example.com")).unwrap(),
            "DNSName(a.example.com)"
        );
        assert_eq!(
            name(Some("b.example.com")).unwrap(),
            "DNSName(*.example.com)"
        );
        assert_eq!(name(Some("dyn.test")).unwrap(), "DNSName(dyn.test)");
        assert_eq!(
            name(Some("x.y.example.com")).unwrap(),
            "DNSName(default.test)"
        );
        assert_eq!(name(None).unwrap(), "DNSName(default.test)");
        assert!(r.covers("b.example.com"));
        assert!(!r.covers("dyn.test"));

        r.add(&HostPattern::Any, new_slot(Some(key("any.test"))));
        let got = r.pick(Some("other.test")).map(|k| leaf_name(&k));
        assert_eq!(got.unwrap(), "DNSName(any.test)");
    }

    #[test]
    fn a_swapped_slot_is_seen_by_the_next_handshake() {
        let slot = new_slot(None);
        let mut r = Resolver::default();
        r.add(&HostPattern::Exact("a.test".into()), slot.clone());
        assert!(r.pick(Some("a.test")).is_none());
        slot.store(Some(Arc::new(key("a.test"))));
        assert!(r.pick(Some("a.test")).is_some());
    }
}
