//! Validating `[tls]` and a site's `tls`: which sites get automatic HTTPS,
//! from which issuer, and the ACME, local-CA and on-demand settings.
//!
//! Only checks and defaults: nothing here touches the network or the
//! storage directory (that is `weir_tls`'s job at start-up).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_spanned::Spanned;

use super::error::Collector;
use super::raw::{RawSite, RawTls, RawTlsGlobal, Value};
use super::{HostPattern, units};

/// Let's Encrypt's production directory: the default.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// How a TLS site gets its certificate.
#[derive(Clone, PartialEq)]
pub enum TlsConfig {
    /// From files, reloaded when they change.
    Files {
        cert_path: PathBuf,
        key_path: PathBuf,
    },
    /// Obtained and renewed by weir.
    Auto {
        issuer: Issuer,
        /// The names (host names or IPs) the certificate covers; empty for
        /// a catch-all site that only serves on-demand names.
        names: Vec<String>,
        /// Also obtain certificates for unknown names at their first handshake.
        on_demand: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Issuer {
    Acme,
    Internal,
}

impl Issuer {
    pub fn as_str(self) -> &'static str {
        match self {
            Issuer::Acme => "acme",
            Issuer::Internal => "internal",
        }
    }
}

/// `[tls]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsGlobal {
    pub storage: PathBuf,
    pub http3: bool,
    pub early_data: bool,
    pub acme: AcmeConfig,
    pub internal_lifetime: Duration,
    pub on_demand: OnDemandConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AcmeConfig {
    pub directory: String,
    pub email: Option<String>,
    /// (key id, HMAC key bytes)
    pub eab: Option<(String, Vec<u8>)>,
    pub key_type: KeyType,
    pub challenges: Vec<ChallengeKind>,
    pub ca_root: Option<PathBuf>,
    pub retry_min: Duration,
    pub retry_max: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    P256,
    Rsa2048,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    Http01,
    TlsAlpn01,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OnDemandConfig {
    pub ask: Option<String>,
    pub allow: Vec<HostPattern>,
    pub burst: u32,
    pub refill: Duration,
    pub name_interval: Duration,
}

impl Default for TlsGlobal {
    fn default() -> Self {
        TlsGlobal {
            storage: default_storage_dir(),
            http3: true,
            early_data: false,
            acme: AcmeConfig {
                directory: LETS_ENCRYPT.into(),
                email: None,
                eab: None,
                key_type: KeyType::P256,
                challenges: vec![ChallengeKind::Http01, ChallengeKind::TlsAlpn01],
                ca_root: None,
                retry_min: Duration::from_secs(60),
                retry_max: Duration::from_secs(3600),
            },
            internal_lifetime: Duration::from_secs(12 * 3600),
            on_demand: OnDemandConfig {
                ask: None,
                allow: Vec::new(),
                burst: 10,
                refill: Duration::from_secs(6),
                name_interval: Duration::from_secs(600),
            },
        }
    }
}

fn duration(c: &mut Collector<'_>, key: &str, v: &Option<Spanned<Value>>, slot: &mut Duration) {
    if let Some(v) = v {
        match units::parse_duration(v.get_ref()) {
            Ok(d) if d.is_zero() => c.at(v.span(), format!("{key}: must be more than zero")),
            Ok(d) => *slot = d,
            Err(m) => c.at(v.span(), format!("{key}: {m}")),
        }
    }
}

pub(super) fn validate_global(c: &mut Collector<'_>, base: &Path, raw: &RawTlsGlobal) -> TlsGlobal {
    let mut out = TlsGlobal::default();
    if let Some(s) = &raw.storage {
        out.storage = base.join(s.get_ref());
    }
    if let Some(b) = raw.http3 {
        out.http3 = b;
    }
    if let Some(b) = raw.early_data {
        out.early_data = b;
    }
    let a = &raw.acme;
    if let Some(d) = &a.directory {
        match d.get_ref().as_str() {
            "production" | "letsencrypt" => out.acme.directory = LETS_ENCRYPT.into(),
            "staging" => out.acme.directory = LETS_ENCRYPT_STAGING.into(),
            u if u.starts_with("https://") || u.starts_with("http://") => {
                out.acme.directory = u.to_string()
            }
            o => c.at(
                d.span(),
                format!(
                    "tls.acme.directory: `{o}` is not a URL; use \"staging\", \"production\" or \"https://...\""
                ),
            ),
        }
    }
    if let Some(e) = &a.email {
        if e.get_ref().contains('@') {
            out.acme.email = Some(e.get_ref().clone());
        } else {
            c.at(
                e.span(),
                format!("tls.acme.email: `{}` is not an e-mail address", e.get_ref()),
            );
        }
    }
    if let Some(eab) = &a.eab {
        match base64url_decode(&eab.get_ref().hmac_key) {
            Some(k) if !k.is_empty() => out.acme.eab = Some((eab.get_ref().kid.clone(), k)),
            _ => c.at(
                eab.span(),
                "tls.acme.eab: hmac_key is not base64url (as the CA shows it)",
            ),
        }
    }
    if let Some(k) = &a.key_type {
        match k.get_ref().as_str() {
            "p256" | "ecdsa" | "p-256" => out.acme.key_type = KeyType::P256,
            "rsa2048" | "rsa" => out.acme.key_type = KeyType::Rsa2048,
            o => c.at(
                k.span(),
                format!("tls.acme.key_type: `{o}` is unknown; use \"p256\" or \"rsa2048\""),
            ),
        }
    }
    if let Some(ch) = &a.challenges {
        let mut v = Vec::new();
        for name in ch.get_ref() {
            match name.as_str() {
                "http-01" => v.push(ChallengeKind::Http01),
                "tls-alpn-01" => v.push(ChallengeKind::TlsAlpn01),
                o => c.at(
                    ch.span(),
                    format!(
                        "tls.acme.challenges: `{o}` is unknown; use \"http-01\" and/or \"tls-alpn-01\""
                    ),
                ),
            }
        }
        if v.is_empty() && ch.get_ref().is_empty() {
            c.at(
                ch.span(),
                "tls.acme.challenges: needs at least one challenge",
            );
        }
        out.acme.challenges = v;
    }
    if let Some(r) = &a.ca_root {
        let p = base.join(r.get_ref());
        if let Err(e) = std::fs::metadata(&p) {
            c.at_file(r.span(), format!("tls.acme.ca_root {}: {e}", p.display()));
        }
        out.acme.ca_root = Some(p);
    }
    duration(
        c,
        "tls.acme.retry_min",
        &a.retry_min,
        &mut out.acme.retry_min,
    );
    duration(
        c,
        "tls.acme.retry_max",
        &a.retry_max,
        &mut out.acme.retry_max,
    );
    duration(
        c,
        "tls.internal.lifetime",
        &raw.internal.lifetime,
        &mut out.internal_lifetime,
    );
    let od = &raw.on_demand;
    if let Some(ask) = &od.ask {
        if ask.get_ref().starts_with("http://") || ask.get_ref().starts_with("https://") {
            out.on_demand.ask = Some(ask.get_ref().clone());
        } else {
            c.at(
                ask.span(),
                format!(
                    "tls.on_demand.ask: `{}` is not an http:// URL",
                    ask.get_ref()
                ),
            );
        }
    }
    for a in od.allow.iter().flatten() {
        match super::parse_site_name(a) {
            Ok((p, None, None)) => out.on_demand.allow.push(p),
            _ => c.at(
                0..0,
                format!("tls.on_demand.allow: `{a}` is not a host name or *.pattern"),
            ),
        }
    }
    if let Some(b) = &od.burst {
        match u32::try_from(*b.get_ref()) {
            Ok(n) if n >= 1 => out.on_demand.burst = n,
            _ => c.at(
                b.span(),
                format!(
                    "tls.on_demand.burst: {} is out of range (at least 1)",
                    b.get_ref()
                ),
            ),
        }
    }
    duration(
        c,
        "tls.on_demand.refill",
        &od.refill,
        &mut out.on_demand.refill,
    );
    duration(
        c,
        "tls.on_demand.name_interval",
        &od.name_interval,
        &mut out.on_demand.name_interval,
    );
    out
}

/// The site's `tls`, or automatic HTTPS when the site qualifies; `None`
/// for a plain-HTTP site.
pub(super) fn site_tls(
    c: &mut Collector<'_>,
    base: &Path,
    name: &str,
    site: &RawSite,
    (host, name_port, name_ip): (&HostPattern, Option<u16>, Option<IpAddr>),
    global: &TlsGlobal,
) -> Option<TlsConfig> {
    let trimmed = name.trim();
    let https_scheme = trimmed.starts_with("https://");
    let http_scheme = trimmed.starts_with("http://");
    let default_raw = RawTls::default();
    let (raw, span) = match &site.tls {
        Some(t) => (t.get_ref(), t.span()),
        None => {
            // Automatic only where nothing says otherwise: a name or IP with
            // no port and no `listen`, or an explicit https:// name.
            let named = !matches!(host, HostPattern::Any) || name_ip.is_some();
            let auto = https_scheme
                || (!http_scheme && named && name_port.is_none() && site.listen.is_none());
            if !auto {
                return None;
            }
            (&default_raw, 0..0)
        }
    };
    if raw.cert.is_some() || raw.key.is_some() {
        if raw.issuer.is_some() || raw.on_demand.is_some() {
            c.at(
                span.clone(),
                format!(
                    "site \"{name}\": tls: `cert`/`key` cannot be combined with `issuer` or `on_demand`"
                ),
            );
        }
        let (Some(cert), Some(key)) = (&raw.cert, &raw.key) else {
            c.at(
                span,
                format!("site \"{name}\": tls needs both `cert` and `key`"),
            );
            return None;
        };
        return super::load_tls(c, base, name, cert, key);
    }
    let names: Vec<String> = match (host, name_ip) {
        (HostPattern::Exact(h), _) => vec![h.clone()],
        (HostPattern::Wildcard(s), _) => vec![format!("*{s}")],
        (HostPattern::Any, Some(ip)) => vec![ip.to_string()],
        (HostPattern::Any, None) => Vec::new(),
    };
    let issuer = match &raw.issuer {
        Some(i) => {
            match i.get_ref().as_str() {
                "acme" => Issuer::Acme,
                "internal" | "local" => Issuer::Internal,
                o => {
                    c.at(
                    i.span(),
                    format!("site \"{name}\": tls.issuer `{o}` is unknown; use \"acme\" or \"internal\""),
                );
                    Issuer::Internal
                }
            }
        }
        None if names.iter().all(|n| is_internal_name(n)) => Issuer::Internal,
        None => Issuer::Acme,
    };
    let on_demand = raw.on_demand.as_ref().is_some_and(|b| *b.get_ref());
    if on_demand && global.on_demand.ask.is_none() && global.on_demand.allow.is_empty() {
        let sp = raw.on_demand.as_ref().map_or(span.clone(), |b| b.span());
        c.at(
            sp,
            format!(
                "site \"{name}\": on-demand TLS needs [tls.on_demand] `ask` or `allow`, so that scanners cannot make weir order certificates"
            ),
        );
    }
    if names.is_empty() && !on_demand {
        c.at(
            span,
            format!(
                "site \"{name}\": automatic HTTPS needs a host name or IP in the site name, or tls = {{ on_demand = true }}"
            ),
        );
        return None;
    }
    if issuer == Issuer::Acme && names.iter().any(|n| n.starts_with('*')) {
        c.at(
            span,
            format!(
                "site \"{name}\": ACME wildcard certificates need the DNS-01 challenge, which weir does not do; use tls = {{ on_demand = true }} or certificate files"
            ),
        );
        return None;
    }
    Some(TlsConfig::Auto {
        issuer,
        names,
        on_demand,
    })
}

fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in s.trim_end_matches('=').bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Whether a host name or address gets its certificate from the local CA
/// rather than from ACME: `localhost`, `*.localhost`, names under `.local`,
/// `.internal`, `.home.arpa`, single-label names, and every IP address.
pub fn is_internal_name(host: &str) -> bool {
    let h = host.trim_start_matches("*.").trim_end_matches('.');
    if h.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok()
    {
        return true;
    }
    h == "localhost"
        || !h.contains('.')
        || [".localhost", ".local", ".internal", ".home.arpa"]
            .iter()
            .any(|s| h.ends_with(s))
}

/// Where certificates, keys and the local CA live unless `tls.storage` says.
pub fn default_storage_dir() -> PathBuf {
    dirs::data_dir()
        .map(|d| d.join("weir"))
        .unwrap_or_else(|| PathBuf::from("weir-data"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url() {
        assert_eq!(base64url_decode("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64url_decode("_-8").unwrap(), vec![0xff, 0xef]);
        assert!(base64url_decode("a b").is_none());
    }
}
