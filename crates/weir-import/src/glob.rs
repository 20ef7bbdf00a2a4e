//! Shell globs in include paths (`*`, `?`, `[…]`), as glob(3) expands
//! them for nginx's `include` and Caddy's `import`: files only, in name
//! order, dot-files left out. Reads directories; never reads a file.

use std::path::{Path, PathBuf};

pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The files a glob names, sorted; directories are left out.
pub fn expand_glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from(if pattern.is_absolute() { "/" } else { "" })];
    for comp in pattern.components() {
        use std::path::Component;
        let part = match comp {
            Component::RootDir | Component::Prefix(_) => continue,
            Component::CurDir => ".".to_string(),
            Component::ParentDir => "..".to_string(),
            Component::Normal(s) => s.to_string_lossy().into_owned(),
        };
        let mut next = Vec::new();
        for base in &found {
            if has_wildcard(&part) {
                let dir = if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base.as_path()
                };
                let Ok(rd) = std::fs::read_dir(dir) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.') && glob_match(part.as_bytes(), n.as_bytes()))
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
            } else {
                next.push(base.join(&part));
            }
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found
}

/// glob(3) on one name: `*`, `?` and `[…]` (with `!` or `^` and ranges).
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    match p[0] {
        b'*' => (0..=s.len()).any(|i| glob_match(&p[1..], &s[i..])),
        b'?' => !s.is_empty() && glob_match(&p[1..], &s[1..]),
        b'[' => {
            let Some(end) = p.iter().skip(2).position(|&b| b == b']').map(|i| i + 2) else {
                return !s.is_empty() && s[0] == b'[' && glob_match(&p[1..], &s[1..]);
            };
            if s.is_empty() {
                return false;
            }
            let mut set = &p[1..end];
            let negate = matches!(set.first(), Some(b'!' | b'^'));
            if negate {
                set = &set[1..];
            }
            let c = s[0];
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&p[end + 1..], &s[1..])
        }
        c => !s.is_empty() && s[0] == c && glob_match(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"*.conf", b"a.conf"));
        assert!(!glob_match(b"*.conf", b"a.conf~"));
        assert!(glob_match(b"[a-c]?", b"bx"));
        assert!(!glob_match(b"[!a-c]?", b"bx"));
    }
}
