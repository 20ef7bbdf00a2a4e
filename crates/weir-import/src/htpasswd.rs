//! htpasswd files read into weir's `basic_auth` users, for every importer:
//! bcrypt and argon2 lines kept, others reported (weir checks those two
//! only). Reads the one file; never writes.

use std::path::Path;

use crate::error::Origin;
use crate::report::Report;
use crate::toml::V;

/// A bcrypt hash of a random secret nobody kept: a `basic_auth` that must
/// exist (weir needs a user) but let no one in gets it.
pub const REFUSE_ALL_HASH: &str = "$2b$10$r5pu.7DWXcATE2T3tXMM9.7q.cvKyKkjS1W7vcbc5wnZKHiD69a5.";

/// The users of the htpasswd file at `path` (written `file` in the config,
/// by `directive`), or `None` when it cannot be read or holds no user weir
/// can check (each reported).
pub fn users(
    path: &Path,
    directive: &str,
    file: &str,
    at: &Origin,
    r: &mut Report,
) -> Option<Vec<(String, V)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            r.none(
                at,
                format!("{directive} {file}"),
                format!(
                    "cannot read {}: {e}; access is denied to everyone until you add users",
                    path.display()
                ),
            );
            return None;
        }
    };
    let mut users = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, rest)) = line.split_once(':') else {
            continue;
        };
        let hash = rest.split(':').next().unwrap_or(rest);
        if ["$2a$", "$2b$", "$2y$", "$argon2"]
            .iter()
            .any(|p| hash.starts_with(p))
        {
            users.push((user.to_string(), V::s(hash)));
        } else {
            r.stricter(at, format!("{directive} {file}: user {user}"), "its hash is not bcrypt or argon2, which weir checks: left out (make one with `weir hash-password`, or `htpasswd -B`)");
        }
    }
    if users.is_empty() {
        return None;
    }
    Some(users)
}
