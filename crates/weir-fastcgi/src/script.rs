//! Which script a request runs, if any: the request path normalised as
//! for static files (no traversal, no hidden segment), split at `.php`
//! into the script and `PATH_INFO`, a directory's index script, or the
//! front controller for paths that name no file (Caddy's `php_fastcgi`
//! `try_files {path} {path}/index.php index.php`).
//!
//! A script runs only if it is an existing regular file under the root
//! whose name ends in a split extension: `/uploads/evil.jpg/x.php` names
//! no such file and is a 404, never the front controller nor `evil.jpg`
//! (the CVE-2019-11043 family). Touches the file system (call it on the
//! blocking pool); never runs anything.

use std::path::{Path, PathBuf};

use weir_config::fastcgi::FastCgiConfig;
use weir_static::path::normalize;

/// What a request path comes to.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Run `script_name` (root-relative, decoded) with `path_info`.
    Script {
        script_name: String,
        path_info: String,
        filename: PathBuf,
    },
    /// A file or directory of the root that is not a script: weir's static
    /// files answer it.
    Static,
    /// A directory with an index script asked without its slash: redirect
    /// to `location` (Caddy's canonical path).
    AddSlash,
    NotFound,
    /// A malformed path (encoded slash, NUL, traversal).
    BadPath,
}

/// The script for the percent-encoded `raw` path. `canonical_root`: the
/// root with its symbolic links resolved, for the symlink policy.
pub fn resolve(cfg: &FastCgiConfig, canonical_root: &Path, raw: &str) -> Resolved {
    let Ok(n) = normalize(raw) else {
        return Resolved::BadPath;
    };
    if n.has_hidden_segment() && !cfg.files.serve_hidden {
        return Resolved::NotFound;
    }
    let key = n.key();
    if let Some(end) = split_at(key, &cfg.split) {
        // A path naming a script: that script or nothing.
        let (script, info) = key.split_at(end);
        return match script_file(cfg, canonical_root, script) {
            Some(filename) => Resolved::Script {
                script_name: script.to_string(),
                path_info: info.to_string(),
                filename,
            },
            None => Resolved::NotFound,
        };
    }
    let full = join(&cfg.root, key);
    match std::fs::metadata(&full) {
        Ok(m) if m.is_file() => Resolved::Static,
        Ok(m) if m.is_dir() => {
            let dir = key.trim_end_matches('/');
            for idx in &cfg.index {
                let script = format!("{dir}/{idx}");
                if split_at(&script, &cfg.split).is_none() {
                    continue;
                }
                if let Some(filename) = script_file(cfg, canonical_root, &script) {
                    if !n.trailing_slash() {
                        return Resolved::AddSlash;
                    }
                    return Resolved::Script {
                        script_name: script,
                        path_info: String::new(),
                        filename,
                    };
                }
            }
            Resolved::Static
        }
        _ => match &cfg.front_controller {
            Some(fc) => match script_file(cfg, canonical_root, fc) {
                Some(filename) => Resolved::Script {
                    script_name: fc.clone(),
                    path_info: key.to_string(),
                    filename,
                },
                None => Resolved::NotFound,
            },
            None => Resolved::NotFound,
        },
    }
}

/// Where the script part of `path` ends: after the first split extension
/// (ASCII case ignored, so `x.PHP` is never sent as source) that ends a
/// segment.
pub fn split_at(path: &str, split: &[String]) -> Option<usize> {
    let lower = path.as_bytes();
    let mut best: Option<usize> = None;
    for ext in split {
        let e = ext.as_bytes();
        let mut from = 0;
        while from + e.len() <= lower.len() {
            let Some(i) = lower[from..]
                .windows(e.len())
                .position(|w| w.eq_ignore_ascii_case(e))
            else {
                break;
            };
            let end = from + i + e.len();
            if end == lower.len() || lower[end] == b'/' {
                best = Some(best.map_or(end, |b| b.min(end)));
                break;
            }
            from = from + i + 1;
        }
    }
    best
}

/// `root` + the root-relative `script`, if it is a regular file whose real
/// path stays under the root (unless links may leave it).
fn script_file(cfg: &FastCgiConfig, canonical_root: &Path, script: &str) -> Option<PathBuf> {
    let full = join(&cfg.root, script);
    let m = std::fs::metadata(&full).ok()?;
    if !m.is_file() {
        return None;
    }
    if !cfg.files.follow_symlinks {
        let real = std::fs::canonicalize(&full).ok()?;
        if !real.starts_with(canonical_root) {
            return None;
        }
    }
    Some(full)
}

fn join(root: &Path, key: &str) -> PathBuf {
    root.join(key.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split() -> Vec<String> {
        vec![".php".to_string()]
    }

    #[test]
    fn the_path_splits_after_the_first_php_that_ends_a_segment() {
        assert_eq!(split_at("/index.php", &split()), Some(10));
        assert_eq!(split_at("/index.php/a/b", &split()), Some(10));
        assert_eq!(split_at("/x.phpx/y.php/z", &split()), Some(13));
        assert_eq!(split_at("/a/INDEX.PHP", &split()), Some(12));
        assert_eq!(split_at("/uploads/evil.jpg/x.php", &split()), Some(23));
        assert_eq!(split_at("/a/b", &split()), None);
        assert_eq!(split_at("/php/.phpnot", &split()), None);
    }

    fn app() -> (tempdir::Dir, FastCgiConfig) {
        let d = tempdir::Dir::new();
        let root = d.0.clone();
        std::fs::write(root.join("index.php"), "<?php").unwrap();
        std::fs::create_dir_all(root.join("uploads")).unwrap();
        std::fs::write(root.join("uploads/evil.jpg"), "<?php system($_GET['c']);").unwrap();
        std::fs::create_dir_all(root.join("admin")).unwrap();
        std::fs::write(root.join("admin/index.php"), "<?php").unwrap();
        std::fs::write(root.join("style.css"), "body{}").unwrap();
        std::fs::write(root.join(".env.php"), "<?php").unwrap();
        let mut files = weir_config::files::Options::new(root.clone());
        files.follow_symlinks = false;
        let cfg = FastCgiConfig {
            upstream: std::sync::Arc::new(weir_config::proxy::ProxyConfig::defaults()),
            root: root.clone(),
            split: split(),
            index: vec!["index.php".into()],
            front_controller: Some("/index.php".into()),
            env: Vec::new(),
            send_timeout: std::time::Duration::from_secs(1),
            keep_conn: false,
            files,
        };
        (d, cfg)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "weir-fcgi-{}-{}",
                    std::process::id(),
                    fastrand::u64(..)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p.canonicalize().unwrap())
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn scripts_files_directories_and_the_front_controller() {
        let (_d, cfg) = app();
        let root = cfg.root.clone();
        let script = |name: &str, info: &str| Resolved::Script {
            script_name: name.into(),
            path_info: info.into(),
            filename: root.join(name.trim_start_matches('/')),
        };
        let r = |p: &str| resolve(&cfg, &root, p);
        assert_eq!(r("/index.php"), script("/index.php", ""));
        assert_eq!(r("/index.php/a/b"), script("/index.php", "/a/b"));
        assert_eq!(r("/a/b"), script("/index.php", "/a/b"));
        assert_eq!(r("/"), script("/index.php", ""));
        assert_eq!(r("/admin/"), script("/admin/index.php", ""));
        assert_eq!(r("/admin"), Resolved::AddSlash);
        assert_eq!(r("/style.css"), Resolved::Static);
        assert_eq!(r("/uploads/"), Resolved::Static);
        // The upload attack: no such script, and never the front controller.
        assert_eq!(r("/uploads/evil.jpg/x.php"), Resolved::NotFound);
        assert_eq!(r("/uploads/evil.jpg%2fx.php"), Resolved::BadPath);
        assert_eq!(r("/missing.php"), Resolved::NotFound);
        assert_eq!(r("/.env.php"), Resolved::NotFound);
        assert_eq!(r("/../etc/passwd.php"), Resolved::BadPath);
        assert_eq!(r("/%2e%2e/x.php"), Resolved::BadPath);
    }

    #[test]
    fn a_script_linked_from_outside_the_root_is_not_run() {
        let (_d, cfg) = app();
        let outside = tempdir::Dir::new();
        std::fs::write(outside.0.join("x.php"), "<?php").unwrap();
        std::os::unix::fs::symlink(outside.0.join("x.php"), cfg.root.join("link.php")).unwrap();
        assert_eq!(resolve(&cfg, &cfg.root, "/link.php"), Resolved::NotFound);
    }
}
