//! `[cluster]`: several weir processes sharing certificates, limit counts
//! and cache purges through one Redis (or Valkey). Owns the settings, their
//! defaults and their mistakes; never connects to anything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Collector;
use crate::raw::RawCluster;
use crate::units;

/// What the instances share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    pub certificates: bool,
    pub limits: bool,
    pub cache: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS.
    pub redis: String,
    /// With TLS: the CA that signed Redis's certificate (PEM), instead of
    /// the system's trust store.
    pub ca: Option<PathBuf>,
    /// This instance's name among the others (default: host name and pid).
    pub name: String,
    /// Prefix of every Redis key and channel, so clusters can share a Redis.
    pub prefix: String,
    /// The secret every instance shares: encrypts what is stored in Redis
    /// and keys the limit tables.
    pub key: Vec<u8>,
    /// How often limit counts are exchanged.
    pub exchange: Duration,
    pub share: Shared,
}

/// A secret shorter than this is refused: it is the key of everything at rest.
const MIN_KEY: usize = 32;

pub(crate) fn validate(
    c: &mut Collector<'_>,
    base: &Path,
    raw: &Option<RawCluster>,
) -> Option<ClusterConfig> {
    let r = raw.as_ref()?;
    let redis = r.redis.get_ref().trim().to_string();
    if let Err(m) = check_url(&redis) {
        c.at(r.redis.span(), format!("cluster.redis: {m}"));
    }
    let key = match (&r.key, &r.key_file) {
        (Some(k), None) => {
            if k.get_ref().len() < MIN_KEY {
                c.at(
                    k.span(),
                    format!(
                        "cluster.key: use at least {MIN_KEY} characters (for example `openssl rand -hex 32`)"
                    ),
                );
            }
            k.get_ref().as_bytes().to_vec()
        }
        (None, Some(f)) => {
            let p: PathBuf = base.join(f.get_ref());
            match read_key_file(&p) {
                Ok(k) if k.len() >= MIN_KEY => k,
                Ok(_) => {
                    c.at(
                        f.span(),
                        format!(
                            "cluster.key_file: {} holds fewer than {MIN_KEY} characters",
                            p.display()
                        ),
                    );
                    Vec::new()
                }
                Err(m) => {
                    c.at(f.span(), format!("cluster.key_file: {m}"));
                    Vec::new()
                }
            }
        }
        (Some(k), Some(_)) => {
            c.at(k.span(), "cluster: give `key` or `key_file`, not both");
            Vec::new()
        }
        (None, None) => {
            c.at(
                r.redis.span(),
                "cluster: set `key` (or `key_file`): the secret every instance shares, \
                 which encrypts what weir keeps in Redis (for example `openssl rand -hex 32`)",
            );
            Vec::new()
        }
    };
    let exchange = match &r.exchange {
        None => Duration::from_millis(50),
        Some(v) => match units::parse_duration(v) {
            Ok(d) if d >= Duration::from_millis(10) && d <= Duration::from_secs(1) => d,
            Ok(_) => {
                c.at(r.redis.span(), "cluster.exchange: use 10ms to 1s");
                Duration::from_millis(50)
            }
            Err(m) => {
                c.at(r.redis.span(), format!("cluster.exchange: {m}"));
                Duration::from_millis(50)
            }
        },
    };
    let mut share = Shared {
        certificates: true,
        limits: true,
        cache: true,
    };
    if let Some(s) = &r.share {
        share = Shared {
            certificates: false,
            limits: false,
            cache: false,
        };
        for w in s.get_ref() {
            match w.as_str() {
                "certificates" => share.certificates = true,
                "limits" => share.limits = true,
                "cache" => share.cache = true,
                other => c.at(
                    s.span(),
                    format!("cluster.share: `{other}` is not shared; use \"certificates\", \"limits\" or \"cache\""),
                ),
            }
        }
    }
    let ca = r.ca.as_ref().map(|f| {
        let p = base.join(f.get_ref());
        if !redis.starts_with("rediss://") {
            c.at(
                f.span(),
                "cluster.ca: only with a TLS address (`rediss://…`)",
            );
        } else if let Err(e) = std::fs::metadata(&p) {
            c.at_file(f.span(), format!("cluster.ca: {}: {e}", p.display()));
        }
        p
    });
    let prefix = r.prefix.clone().unwrap_or_else(|| "weir".into());
    if prefix.is_empty() || prefix.contains(char::is_whitespace) {
        c.at(r.redis.span(), "cluster.prefix: use a word without spaces");
    }
    let name = r.name.clone().unwrap_or_else(default_name);
    Some(ClusterConfig {
        redis,
        ca,
        name,
        prefix,
        key,
        exchange,
        share,
    })
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "weir".into());
    format!("{host}-{}", std::process::id())
}

fn check_url(u: &str) -> Result<(), String> {
    let rest = if let Some(r) = u.strip_prefix("redis://") {
        r
    } else if let Some(r) = u.strip_prefix("rediss://") {
        r
    } else if u.starts_with("redis+sentinel://") || u.starts_with("redis+cluster://") {
        return Err(format!(
            "`{u}`: Sentinel and Redis Cluster addresses are not supported yet; give the primary's `redis://host:port`"
        ));
    } else {
        return Err(format!(
            "`{u}` is not a Redis address: use \"redis://127.0.0.1:6379\" (or `rediss://` for TLS)"
        ));
    };
    let host = rest.rsplit('@').next().unwrap_or(rest);
    if host.split(['/', '?']).next().unwrap_or("").is_empty() {
        return Err(format!("`{u}` names no host"));
    }
    Ok(())
}

/// The key file, refused when others may read it (it unlocks every key
/// weir stores in Redis).
fn read_key_file(p: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} can be read by others; `chmod 600` it",
            p.display()
        ));
    }
    let text = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(text.trim_ascii().to_vec())
}

#[cfg(test)]
mod tests {
    fn parse_str(src: &str, file: &str) -> Result<crate::Config, crate::ConfigErrors> {
        let src = format!("[site.\"a.test\"]\nroot = \"/srv\"\n{src}");
        crate::load_str(file, &src, std::path::Path::new("/srv/conf"))
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn defaults_and_every_key() {
        let cfg = parse_str(
            &format!("[cluster]\nredis = \"redis://127.0.0.1:6379\"\nkey = \"{KEY}\"\n"),
            "t.toml",
        )
        .unwrap();
        let c = cfg.cluster.unwrap();
        assert_eq!(c.redis, "redis://127.0.0.1:6379");
        assert_eq!(c.prefix, "weir");
        assert_eq!(c.exchange, std::time::Duration::from_millis(50));
        assert!(c.share.certificates && c.share.limits && c.share.cache);
        assert!(c.name.ends_with(&format!("-{}", std::process::id())));
        let cfg = parse_str(
            &format!(
                "[cluster]\nredis = \"rediss://:pw@r.example:6380/2\"\nkey = \"{KEY}\"\nname = \"a\"\n\
                 prefix = \"shop\"\nexchange = \"20ms\"\nshare = [\"limits\"]\n"
            ),
            "t.toml",
        )
        .unwrap();
        let c = cfg.cluster.unwrap();
        assert_eq!((c.name.as_str(), c.prefix.as_str()), ("a", "shop"));
        assert_eq!(c.exchange, std::time::Duration::from_millis(20));
        assert!(c.share.limits && !c.share.cache && !c.share.certificates);
        assert!(parse_str("", "t.toml").unwrap().cluster.is_none());
    }

    #[test]
    fn mistakes_are_reported() {
        let bad = |src: &str, want: &str| {
            let e = parse_str(src, "t.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{src}: {e}");
        };
        bad("[cluster]\nredis = \"redis://h:1\"\n", "set `key`");
        bad(
            "[cluster]\nredis = \"redis://h:1\"\nkey = \"short\"\n",
            "at least 32",
        );
        bad(
            &format!("[cluster]\nredis = \"http://h\"\nkey = \"{KEY}\"\n"),
            "not a Redis address",
        );
        bad(
            &format!("[cluster]\nredis = \"redis+sentinel://h:26379/m\"\nkey = \"{KEY}\"\n"),
            "not supported yet",
        );
        bad(
            &format!("[cluster]\nredis = \"redis://h:1\"\nkey = \"{KEY}\"\nca = \"ca.pem\"\n"),
            "only with a TLS address",
        );
        bad(
            &format!(
                "[cluster]\nredis = \"rediss://h:1\"\nkey = \"{KEY}\"\nca = \"/nonexistent/ca.pem\"\n"
            ),
            "cluster.ca: /nonexistent/ca.pem",
        );
        bad(
            &format!("[cluster]\nredis = \"redis://h:1\"\nkey = \"{KEY}\"\nshare = [\"files\"]\n"),
            "`files` is not shared",
        );
        bad(
            &format!("[cluster]\nredis = \"redis://h:1\"\nkey = \"{KEY}\"\nexchange = \"5s\"\n"),
            "10ms to 1s",
        );
        bad(
            &format!("[cluster]\nredis = \"redis://h:1\"\nkey = \"{KEY}\"\nreddis = 1\n"),
            "redis",
        );
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("k");
        std::fs::write(&f, KEY).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let src = format!(
            "[cluster]\nredis = \"redis://h:1\"\nkey_file = \"{}\"\n",
            f.display()
        );
        bad(&src, "can be read by others");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = parse_str(&src, "t.toml").unwrap().cluster.unwrap();
        assert_eq!(c.key, KEY.as_bytes());
    }
}
