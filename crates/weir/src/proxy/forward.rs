//! Headers on the way through the proxy: hop-by-hop removal in both
//! directions, X-Forwarded-For/-Proto/-Host, RFC 7239 `Forwarded`, `Via`,
//! the client address in trusted-proxy mode, and the request-smuggling
//! checks on a parsed request head.
//!
//! Pure functions over `HeaderMap`s: never does I/O, never decides where a
//! request goes.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Removes the hop-by-hop headers (RFC 9110 7.6.1): `Connection` and every
/// header it names, plus the ones that are hop-by-hop by definition.
/// `keep_upgrade` keeps `Upgrade` (and `Connection: upgrade`) for a tunnel.
pub fn strip_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool) {
    if let Some(conn) = h.get(header::CONNECTION) {
        // Names listed in Connection; collected first to release the borrow.
        let mut named: Vec<HeaderName> = Vec::new();
        for v in h.get_all(header::CONNECTION) {
            if let Ok(s) = v.to_str() {
                for tok in s.split(',') {
                    let tok = tok.trim();
                    if keep_upgrade && tok.eq_ignore_ascii_case("upgrade") {
                        continue;
                    }
                    if let Ok(n) = HeaderName::from_bytes(tok.as_bytes()) {
                        named.push(n);
                    }
                }
            }
        }
        let _ = conn;
        for n in named {
            h.remove(n);
        }
        h.remove(header::CONNECTION);
    }
    h.remove(&KEEP_ALIVE);
    h.remove(&PROXY_CONNECTION);
    h.remove(header::TRANSFER_ENCODING);
    h.remove(header::TE);
    h.remove(header::PROXY_AUTHORIZATION);
    h.remove(header::PROXY_AUTHENTICATE);
    if keep_upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(header::UPGRADE);
    }
}

/// How the client's address is found.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr<'a> {
    /// The TCP peer (after the PROXY protocol on the listener, if any).
    pub peer: IpAddr,
    /// Trusted proxies; empty = direct mode.
    pub trusted: &'a [IpNet],
}

impl ClientAddr<'_> {
    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// Whether forwarding headers from the peer are believed.
    pub fn peer_trusted(&self) -> bool {
        !self.trusted.is_empty() && self.is_trusted(self.peer)
    }

    /// The client: the peer in direct mode; in trusted mode, the right-most
    /// address of `X-Forwarded-For` + peer that is not a trusted proxy.
    pub fn resolve(&self, headers: &HeaderMap) -> IpAddr {
        if !self.peer_trusted() {
            return self.peer;
        }
        let mut chain: Vec<IpAddr> = Vec::new();
        for v in headers.get_all(&X_FORWARDED_FOR) {
            let Ok(s) = v.to_str() else { return self.peer };
            for part in s.split(',') {
                match parse_xff_addr(part.trim()) {
                    Some(ip) => chain.push(ip),
                    // A garbled chain: trust nothing in it.
                    None => return self.peer,
                }
            }
        }
        let mut last = self.peer;
        for ip in chain.into_iter().rev() {
            last = ip;
            if !self.is_trusted(ip) {
                return ip;
            }
        }
        last
    }
}

fn parse_xff_addr(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    // `[::1]:port` or `1.2.3.4:port`.
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    s.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// Whether the client takes trailers in the response: always over HTTP/2
/// and HTTP/3, over HTTP/1.1 only when its `TE` lists `trailers`.
pub fn accepts_trailers(version: http::Version, h: &HeaderMap) -> bool {
    version >= http::Version::HTTP_2
        || h.get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
            })
}

/// What the forwarding headers say.
#[derive(Debug, Clone, Copy)]
pub struct Forwarding<'a> {
    pub client: ClientAddr<'a>,
    pub tls: bool,
    /// The Host the client asked for (with port), if any.
    pub host: Option<&'a str>,
    pub x_forwarded: bool,
    pub forwarded: bool,
    pub via: Option<&'static str>,
}

/// Sets the forwarding headers on a request going upstream.
pub fn add_forwarding(h: &mut HeaderMap, f: &Forwarding<'_>) {
    let trusted = f.client.peer_trusted();
    let peer = f.client.peer;
    let proto = if f.tls { "https" } else { "http" };
    if f.x_forwarded {
        let xff = match (trusted, joined(h, &X_FORWARDED_FOR)) {
            (true, Some(prev)) => format!("{prev}, {peer}"),
            _ => peer.to_string(),
        };
        h.remove(&X_FORWARDED_FOR);
        if let Ok(v) = HeaderValue::from_str(&xff) {
            h.insert(X_FORWARDED_FOR.clone(), v);
        }
        if !(trusted && h.contains_key(&X_FORWARDED_PROTO)) {
            h.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
        }
        if !(trusted && h.contains_key(&X_FORWARDED_HOST)) {
            h.remove(&X_FORWARDED_HOST);
            if let Some(v) = f.host.and_then(|s| HeaderValue::from_str(s).ok()) {
                h.insert(X_FORWARDED_HOST.clone(), v);
            }
        }
    } else if !trusted {
        h.remove(&X_FORWARDED_FOR);
        h.remove(&X_FORWARDED_PROTO);
        h.remove(&X_FORWARDED_HOST);
    }
    if f.forwarded {
        let mut elem = String::with_capacity(48);
        elem.push_str("for=");
        match peer {
            IpAddr::V4(ip) => elem.push_str(&ip.to_string()),
            IpAddr::V6(ip) => {
                elem.push_str("\"[");
                elem.push_str(&ip.to_string());
                elem.push_str("]\"");
            }
        }
        if let Some(host) = f.host.filter(|h| is_token(h)) {
            elem.push_str(";host=");
            elem.push_str(host);
        } else if let Some(host) = f.host.filter(|h| !h.contains('"') && !h.contains('\\')) {
            elem.push_str(";host=\"");
            elem.push_str(host);
            elem.push('"');
        }
        elem.push_str(";proto=");
        elem.push_str(proto);
        let value = match (trusted, joined(h, &header::FORWARDED)) {
            (true, Some(prev)) => format!("{prev}, {elem}"),
            _ => elem,
        };
        h.remove(header::FORWARDED);
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(header::FORWARDED, v);
        }
    } else if !trusted {
        h.remove(header::FORWARDED);
    }
    if let Some(via) = f.via {
        append_via(h, via);
    }
}

/// Appends `1.1 weir` (or `2 weir`) to `Via`.
pub fn append_via(h: &mut HeaderMap, via: &'static str) {
    let value = match joined(h, &header::VIA) {
        Some(prev) => HeaderValue::from_str(&format!("{prev}, {via}"))
            .unwrap_or(HeaderValue::from_static(via)),
        None => HeaderValue::from_static(via),
    };
    h.insert(header::VIA, value);
}

/// Every line of a header joined with `, `; `None` if absent or not text.
fn joined(h: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for v in h.get_all(name) {
        let s = v.to_str().ok()?;
        match &mut out {
            Some(o) => {
                o.push_str(", ");
                o.push_str(s);
            }
            None => out = Some(s.to_string()),
        }
    }
    out
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Why a request head could smuggle a second request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Smuggling {
    #[error("both Content-Length and Transfer-Encoding")]
    BothLengths,
    #[error("Transfer-Encoding other than a single `chunked`")]
    BadTransferEncoding,
    #[error("several or malformed Content-Length values")]
    BadContentLength,
    #[error("Transfer-Encoding on HTTP/1.0")]
    TransferEncodingOnHttp10,
}

/// Checks a parsed request head for framing that a proxy and its upstream
/// could read differently. hyper has already refused the worst (invalid
/// names, obs-fold, a final coding other than chunked, conflicting lengths);
/// this refuses what it lets through.
pub fn check_smuggling(version: http::Version, h: &HeaderMap) -> Result<(), Smuggling> {
    let mut te = h.get_all(header::TRANSFER_ENCODING).iter();
    let te_first = te.next();
    if let Some(v) = te_first {
        if version == http::Version::HTTP_10 {
            return Err(Smuggling::TransferEncodingOnHttp10);
        }
        if te.next().is_some() || v.as_bytes() != b"chunked" {
            return Err(Smuggling::BadTransferEncoding);
        }
        if h.contains_key(header::CONTENT_LENGTH) {
            return Err(Smuggling::BothLengths);
        }
    }
    let mut cl = h.get_all(header::CONTENT_LENGTH).iter();
    if let Some(v) = cl.next() {
        if cl.next().is_some() {
            return Err(Smuggling::BadContentLength);
        }
        let b = v.as_bytes();
        if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
            return Err(Smuggling::BadContentLength);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn trailers_are_accepted_over_h2_or_when_te_says_so() {
        use http::Version as V;
        assert!(accepts_trailers(V::HTTP_2, &HeaderMap::new()));
        assert!(!accepts_trailers(V::HTTP_11, &HeaderMap::new()));
        assert!(accepts_trailers(
            V::HTTP_11,
            &map(&[("te", "gzip, Trailers")])
        ));
        assert!(!accepts_trailers(V::HTTP_11, &map(&[("te", "gzip")])));
    }

    #[test]
    fn upgrade_kept_for_tunnels() {
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
    }

    fn fwd<'a>(peer: &str, trusted: &'a [IpNet], host: Option<&'a str>) -> Forwarding<'a> {
        Forwarding {
            client: ClientAddr {
                peer: peer.parse().unwrap(),
                trusted,
            },
            tls: false,
            host,
            x_forwarded: true,
            forwarded: true,
            via: Some("1.1 weir"),
        }
    }

    #[test]
    fn direct_mode_replaces_client_supplied_headers() {
        let mut h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6"),
            ("x-forwarded-host", "evil"),
        ]);
        add_forwarding(&mut h, &fwd("10.1.2.3", &[], Some("example.com:8080")));
        assert_eq!(h["x-forwarded-for"], "10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com:8080");
        assert_eq!(
            h["forwarded"],
            "for=10.1.2.3;host=\"example.com:8080\";proto=http"
        );
        assert_eq!(h["via"], "1.1 weir");
    }

    #[test]
    fn ipv6_forwarded_is_quoted() {
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, &fwd("::1", &[], Some("a.test")));
        assert_eq!(h["forwarded"], "for=\"[::1]\";host=a.test;proto=http");
    }

    #[test]
    fn trusted_peer_chain_is_appended_and_client_is_rightmost_untrusted() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut h = map(&[("x-forwarded-for", "1.1.1.1, 2.2.2.2, 10.0.0.5")]);
        let f = fwd("10.0.0.9", &trusted, Some("a.test"));
        assert_eq!(f.client.resolve(&h), "2.2.2.2".parse::<IpAddr>().unwrap());
        add_forwarding(&mut h, &f);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.0.0.5, 10.0.0.9");
        // An untrusted peer is the client whatever it claims.
        let h2 = map(&[("x-forwarded-for", "1.1.1.1")]);
        let f2 = fwd("8.8.8.8", &trusted, None);
        assert_eq!(f2.client.resolve(&h2), "8.8.8.8".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn via_is_appended() {
        let mut h = map(&[("via", "1.0 fred")]);
        append_via(&mut h, "1.1 weir");
        assert_eq!(h["via"], "1.0 fred, 1.1 weir");
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        use http::Version as V;
        let ok = |p: &[(&str, &str)]| check_smuggling(V::HTTP_11, &map(p));
        assert_eq!(ok(&[("transfer-encoding", "chunked")]), Ok(()));
        assert_eq!(ok(&[("content-length", "10")]), Ok(()));
        assert_eq!(
            ok(&[("transfer-encoding", "chunked"), ("content-length", "3")]),
            Err(Smuggling::BothLengths)
        );
        for te in [
            "Chunked",
            " chunked",
            "chunked ",
            "gzip, chunked",
            "chunked, chunked",
            "\tchunked",
        ] {
            assert_eq!(
                ok(&[("transfer-encoding", te)]),
                Err(Smuggling::BadTransferEncoding),
                "{te:?}"
            );
        }
        assert_eq!(
            ok(&[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked")
            ]),
            Err(Smuggling::BadTransferEncoding)
        );
        for cl in ["+5", "5,5", "0x10", " 5", ""] {
            assert_eq!(
                ok(&[("content-length", cl)]),
                Err(Smuggling::BadContentLength),
                "{cl:?}"
            );
        }
        assert_eq!(
            ok(&[("content-length", "5"), ("content-length", "5")]),
            Err(Smuggling::BadContentLength)
        );
        assert_eq!(
            check_smuggling(V::HTTP_10, &map(&[("transfer-encoding", "chunked")])),
            Err(Smuggling::TransferEncodingOnHttp10)
        );
    }
}
