//! `[admin]`: where the admin API listens and what it demands of callers.
//! Owns the setting and its default only; never opens a socket.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::error::Collector;
use crate::raw::RawAdmin;

/// Caddy's admin port, on loopback.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:2019";

/// Where the admin API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminListen {
    Off,
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: AdminListen,
    /// Whether the config named the address: a named address that cannot be
    /// bound stops start-up; the default one taken only disables the API.
    pub explicit: bool,
    /// A bearer token every request must carry (`Authorization: Bearer …`).
    pub token: Option<String>,
}

impl AdminConfig {
    /// The default: `127.0.0.1:2019`, not named by the config.
    pub fn default_on() -> Self {
        AdminConfig {
            listen: AdminListen::Tcp(DEFAULT_ADMIN.parse().expect("a socket address")),
            explicit: false,
            token: None,
        }
    }

    /// No admin API (the no-config commands without `--admin`).
    pub fn off() -> Self {
        AdminConfig {
            listen: AdminListen::Off,
            explicit: false,
            token: None,
        }
    }
}

/// Parses an admin address as written in the file or on the command line:
/// `off`, a Unix socket path (`/run/weir/admin.sock` or `unix:…`), or a
/// socket address.
pub fn parse_listen(s: &str) -> Result<AdminListen, String> {
    let s = s.trim();
    if s == "off" {
        return Ok(AdminListen::Off);
    }
    if let Some(p) = s.strip_prefix("unix:") {
        return Ok(AdminListen::Unix(PathBuf::from(p)));
    }
    if s.starts_with('/') {
        return Ok(AdminListen::Unix(PathBuf::from(s)));
    }
    s.parse::<SocketAddr>().map(AdminListen::Tcp).map_err(|_| {
        format!("`{s}` is not an address: use \"127.0.0.1:2019\", a Unix socket path, or \"off\"")
    })
}

pub(crate) fn validate(c: &mut Collector<'_>, raw: &RawAdmin) -> AdminConfig {
    let mut out = AdminConfig::default_on();
    if let Some(t) = &raw.token {
        if t.get_ref().len() < 16 {
            c.at(
                t.span(),
                "admin.token: use at least 16 characters (for example `openssl rand -hex 24`)",
            );
        } else {
            out.token = Some(t.get_ref().clone());
        }
    }
    if let Some(l) = &raw.listen {
        out.explicit = true;
        match parse_listen(l.get_ref()) {
            Ok(AdminListen::Tcp(a)) if !a.ip().is_loopback() && out.token.is_none() => c.at(
                l.span(),
                format!(
                    "admin.listen: {a} is not a loopback address; anyone who reaches it could \
                     change the config, so set admin.token too"
                ),
            ),
            Ok(v) => out.listen = v,
            Err(e) => c.at(l.span(), format!("admin.listen: {e}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(parse_listen("off"), Ok(AdminListen::Off));
        assert_eq!(
            parse_listen("/run/weir/admin.sock"),
            Ok(AdminListen::Unix("/run/weir/admin.sock".into()))
        );
        assert_eq!(
            parse_listen("unix:admin.sock"),
            Ok(AdminListen::Unix("admin.sock".into()))
        );
        assert_eq!(
            parse_listen("127.0.0.1:9"),
            Ok(AdminListen::Tcp("127.0.0.1:9".parse().unwrap()))
        );
        assert!(parse_listen("localhost").is_err());
    }
}
