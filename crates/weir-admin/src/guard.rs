//! Who may use the admin API: the `Host` must name the admin address (a
//! DNS-rebinding page cannot), no cross-origin request passes (a page on
//! another origin must not drive it: the shape of Caddy's CVE-2026-27589),
//! and, when configured, the bearer token must match. Decides only; never
//! answers the request itself.

use std::net::SocketAddr;

use http::header::{AUTHORIZATION, HOST, ORIGIN};
use http::{HeaderMap, StatusCode};

/// What requests must show.
pub struct Guard {
    /// `Host` values accepted; empty for a Unix socket (no browser reaches
    /// one, and clients send any host there).
    hosts: Vec<String>,
    token: Option<String>,
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub reason: String,
}

impl Guard {
    /// For an admin API on `addr` (`None`: a Unix socket).
    pub fn new(addr: Option<SocketAddr>, token: Option<String>) -> Guard {
        let mut hosts = Vec::new();
        if let Some(a) = addr {
            hosts.push(a.to_string());
            if a.ip().is_loopback() || a.ip().is_unspecified() {
                let p = a.port();
                hosts.extend([
                    format!("localhost:{p}"),
                    format!("127.0.0.1:{p}"),
                    format!("[::1]:{p}"),
                ]);
            }
        }
        Guard { hosts, token }
    }

    pub fn check(&self, h: &HeaderMap) -> Result<(), Refusal> {
        let refuse = |status, reason: String| Err(Refusal { status, reason });
        let host = h.get(HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !self.hosts.is_empty() && !self.hosts.iter().any(|a| a.eq_ignore_ascii_case(host)) {
            return refuse(
                StatusCode::FORBIDDEN,
                format!("Host `{host}` is not this admin address"),
            );
        }
        if let Some(origin) = h.get(ORIGIN) {
            let o = origin.to_str().unwrap_or("");
            let same = o
                .strip_prefix("http://")
                .is_some_and(|rest| !self.hosts.is_empty() && rest.eq_ignore_ascii_case(host));
            if !same {
                return refuse(
                    StatusCode::FORBIDDEN,
                    format!("cross-origin request from `{o}` refused"),
                );
            }
        }
        if h.get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"cross-site")
        {
            return refuse(StatusCode::FORBIDDEN, "cross-site request refused".into());
        }
        if let Some(token) = &self.token {
            let given = h
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !same_secret(given.as_bytes(), token.as_bytes()) {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "a valid `Authorization: Bearer` token is required".into(),
                );
            }
        }
        Ok(())
    }
}

/// Compares in time that does not depend on where the inputs differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn host_must_name_the_admin_address() {
        let g = Guard::new(Some("127.0.0.1:2019".parse().unwrap()), None);
        assert!(g.check(&headers(&[("host", "127.0.0.1:2019")])).is_ok());
        assert!(g.check(&headers(&[("host", "localhost:2019")])).is_ok());
        let r = g
            .check(&headers(&[("host", "evil.example:2019")]))
            .unwrap_err();
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(g.check(&headers(&[])).is_err());
        assert!(g.check(&headers(&[("host", "localhost:2020")])).is_err());
    }

    #[test]
    fn a_foreign_origin_is_refused_and_its_own_passes() {
        let g = Guard::new(Some("127.0.0.1:2019".parse().unwrap()), None);
        let own = [
            ("host", "127.0.0.1:2019"),
            ("origin", "http://127.0.0.1:2019"),
        ];
        assert!(g.check(&headers(&own)).is_ok());
        for o in ["http://evil.example", "https://127.0.0.1:2019", "null"] {
            let r = g
                .check(&headers(&[("host", "127.0.0.1:2019"), ("origin", o)]))
                .unwrap_err();
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{o}");
        }
        let cross = [("host", "127.0.0.1:2019"), ("sec-fetch-site", "cross-site")];
        assert!(g.check(&headers(&cross)).is_err());
        // On a Unix socket no Origin is ever the API's own.
        let unix = Guard::new(None, None);
        assert!(unix.check(&headers(&[("host", "anything")])).is_ok());
        assert!(unix.check(&headers(&[("origin", "http://x")])).is_err());
    }

    #[test]
    fn the_token_is_required_when_set() {
        let g = Guard::new(
            Some("127.0.0.1:2019".parse().unwrap()),
            Some("0123456789abcdef".into()),
        );
        let host = ("host", "127.0.0.1:2019");
        let r = g.check(&headers(&[host])).unwrap_err();
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(
            g.check(&headers(&[
                host,
                ("authorization", "Bearer 0123456789abcdeX")
            ]))
            .is_err()
        );
        assert!(
            g.check(&headers(&[
                host,
                ("authorization", "Bearer 0123456789abcdef")
            ]))
            .is_ok()
        );
    }
}
