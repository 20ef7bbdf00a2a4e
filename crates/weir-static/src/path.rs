//! Request-path safety: turns the raw, percent-encoded path below a route into
//! a normalised, root-relative path, or refuses it.
//!
//! Owns: percent-decoding (exactly once), UTF-8 validation, rejection of NUL,
//! backslashes and encoded slashes, `.`/`..` resolution, hidden-segment
//! detection. Pure functions only: it must never touch the file system and
//! must never return a path that contains a `..` segment or climbs above the
//! root, whatever the input (the fuzz target `path_normalize` pins this).

use std::fmt;

/// Why a request path was refused. The server answers every variant with
/// 400 Bad Request; all of them mean "never touch the disk".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("malformed percent-encoding")]
    BadEscape,
    #[error("path is not valid UTF-8")]
    InvalidUtf8,
    #[error("NUL byte in path")]
    Nul,
    #[error("backslash in path")]
    Backslash,
    #[error("encoded slash in path")]
    EncodedSlash,
    #[error("path climbs above the root")]
    Traversal,
    #[error("control character in path")]
    Control,
}

/// A safe, normalised path relative to the root.
///
/// `key()` is `/` for the root, otherwise `/seg1/seg2` with a trailing `/`
/// when the request named a directory (`/dir/`). Segments are decoded, never
/// empty, never `.` or `..`, never contain `/`, `\` or NUL.
#[derive(Clone, PartialEq, Eq)]
pub struct NormalizedPath {
    key: String,
    trailing_slash: bool,
}

impl NormalizedPath {
    /// The canonical form, used as the cache key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// True when the request ended in `/` (or named the root), i.e. it asked for a directory.
    pub fn trailing_slash(&self) -> bool {
        self.trailing_slash
    }

    /// True for the root itself.
    pub fn is_root(&self) -> bool {
        self.key == "/"
    }

    /// The decoded segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.key.split('/').filter(|s| !s.is_empty())
    }

    /// True when some segment starts with `.` (`.git`, `.env`), except the
    /// RFC 8615 `.well-known` directory which ACME and friends need.
    pub fn has_hidden_segment(&self) -> bool {
        self.segments().any(is_hidden_name)
    }
}

impl fmt::Debug for NormalizedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NormalizedPath({:?})", self.key)
    }
}

/// True for names a listing or a request must treat as hidden.
pub fn is_hidden_name(name: &str) -> bool {
    name.starts_with('.') && name != ".well-known"
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes one raw segment (no `/` in it). Decoding happens exactly once:
/// `%252e` becomes the literal name `%2e`, never `.`.
fn decode_segment(raw: &[u8], out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let decoded = if b == b'%' {
            let (Some(h), Some(l)) = (
                raw.get(i + 1).copied().and_then(hex_val),
                raw.get(i + 2).copied().and_then(hex_val),
            ) else {
                return Err(PathError::BadEscape);
            };
            i += 3;
            let d = (h << 4) | l;
            if d == b'/' {
                return Err(PathError::EncodedSlash);
            }
            d
        } else {
            i += 1;
            b
        };
        match decoded {
            0 => return Err(PathError::Nul),
            b'\\' => return Err(PathError::Backslash),
            // Other control characters have no business in a file name on a
            // web server and only help log-injection and terminal tricks.
            1..=0x1f | 0x7f => return Err(PathError::Control),
            _ => out.push(decoded),
        }
    }
    Ok(())
}

/// Cheap check that `raw` is already in normal form, so the hot path can use
/// it as the cache key without allocating: starts with `/`, no `%`, `\`, NUL
/// or control bytes, no empty segment except a final one, and no segment
/// starting with `.` (which covers `.`, `..` and hidden names).
pub fn is_already_normal(raw: &str) -> bool {
    let b = raw.as_bytes();
    if b.first() != Some(&b'/') {
        return false;
    }
    let mut prev = b'/';
    for (i, &c) in b.iter().enumerate() {
        if c == b'%' || c == b'\\' || c < 0x20 || c == 0x7f {
            return false;
        }
        if prev == b'/' && (c == b'.' || (c == b'/' && i > 0)) {
            return false;
        }
        prev = c;
    }
    true
}

/// Normalises `raw` (the percent-encoded path below the route, starting with
/// `/`; a missing leading `/` is tolerated).
pub fn normalize(raw: &str) -> Result<NormalizedPath, PathError> {
    if is_already_normal(raw) {
        // Still must be valid after decoding: there is nothing to decode and
        // no dot segment, so the raw form is the normal form.
        return Ok(NormalizedPath {
            trailing_slash: raw.ends_with('/'),
            key: raw.to_owned(),
        });
    }
    // Raw backslashes are refused before anything else: some platforms and
    // proxies treat them as separators.
    if raw.as_bytes().contains(&b'\\') {
        return Err(PathError::Backslash);
    }
    let mut stack: Vec<String> = Vec::new();
    let mut buf = Vec::new();
    let mut trailing_slash = true;
    for raw_seg in raw.as_bytes().split(|&c| c == b'/') {
        decode_segment(raw_seg, &mut buf)?;
        let seg = std::str::from_utf8(&buf).map_err(|_| PathError::InvalidUtf8)?;
        match seg {
            // An empty segment (`//` or the final one after a `/`) is not a
            // name; it keeps `trailing_slash` true only when it is the last.
            "" | "." => trailing_slash = true,
            ".." => {
                if stack.pop().is_none() {
                    return Err(PathError::Traversal);
                }
                trailing_slash = true;
            }
            s => {
                stack.push(s.to_owned());
                trailing_slash = false;
            }
        }
    }
    let mut key = String::with_capacity(raw.len() + 1);
    for s in &stack {
        key.push('/');
        key.push_str(s);
    }
    if stack.is_empty() || trailing_slash {
        key.push('/');
    }
    Ok(NormalizedPath {
        key,
        trailing_slash: trailing_slash || stack.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: &str) -> Result<String, PathError> {
        normalize(raw).map(|p| p.key().to_owned())
    }

    #[test]
    fn normalize_plain_and_dot_segments() {
        assert_eq!(key("/").unwrap(), "/");
        assert_eq!(key("").unwrap(), "/");
        assert_eq!(key("/a/b.txt").unwrap(), "/a/b.txt");
        assert_eq!(key("/a/b/").unwrap(), "/a/b/");
        assert_eq!(key("/a/./b").unwrap(), "/a/b");
        assert_eq!(key("/a//b").unwrap(), "/a/b");
        assert_eq!(key("/a/b/..").unwrap(), "/a/");
        assert_eq!(key("/a/b/../c").unwrap(), "/a/c");
        assert_eq!(key("/a/%2e%2e/c").unwrap(), "/c");
        assert_eq!(key("/sp%20ace").unwrap(), "/sp ace");
        assert_eq!(key("/caf%C3%A9").unwrap(), "/café");
        assert!(!normalize("/a/b").unwrap().trailing_slash());
        assert!(normalize("/a/b/.").unwrap().trailing_slash());
    }

    #[test]
    fn normalize_decodes_exactly_once() {
        assert_eq!(key("/%252e%252e/x").unwrap(), "/%2e%2e/x");
    }

    #[test]
    fn normalize_refuses_each_attack() {
        assert_eq!(key("/.."), Err(PathError::Traversal));
        assert_eq!(key("/../etc/passwd"), Err(PathError::Traversal));
        assert_eq!(key("/a/../../etc"), Err(PathError::Traversal));
        assert_eq!(key("/%2e%2e/etc"), Err(PathError::Traversal));
        assert_eq!(key("/%2E%2e/etc"), Err(PathError::Traversal));
        assert_eq!(key("/..%2fetc"), Err(PathError::EncodedSlash));
        assert_eq!(key("/a%2fb"), Err(PathError::EncodedSlash));
        assert_eq!(key("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(key("/a\\..\\b"), Err(PathError::Backslash));
        assert_eq!(key("/a%5c..%5cb"), Err(PathError::Backslash));
        assert_eq!(key("/a%00.txt"), Err(PathError::Nul));
        assert_eq!(key("/a\0.txt"), Err(PathError::Nul));
        assert_eq!(key("/%c0%ae%c0%ae/etc"), Err(PathError::InvalidUtf8));
        assert_eq!(key("/%ff"), Err(PathError::InvalidUtf8));
        assert_eq!(key("/%zz"), Err(PathError::BadEscape));
        assert_eq!(key("/%2"), Err(PathError::BadEscape));
        assert_eq!(key("/a%0ab"), Err(PathError::Control));
    }

    #[test]
    fn hidden_segments_detected_but_well_known_allowed() {
        assert!(normalize("/.git/config").unwrap().has_hidden_segment());
        assert!(normalize("/.env").unwrap().has_hidden_segment());
        assert!(normalize("/a/%2eenv").unwrap().has_hidden_segment());
        assert!(!normalize("/a/b.env").unwrap().has_hidden_segment());
        assert!(
            !normalize("/.well-known/acme-challenge/x")
                .unwrap()
                .has_hidden_segment()
        );
    }

    #[test]
    fn fast_path_agrees_with_slow_path() {
        for raw in ["/", "/a", "/a/", "/a/b.c", "/x-y_z~/q", "/a/b/c/"] {
            assert!(is_already_normal(raw), "{raw}");
            assert_eq!(key(raw).unwrap(), raw);
        }
        for raw in [
            "", "a", "//a", "/a//b", "/.a", "/a/.", "/%41", "/a\\b", "/a\u{1}",
        ] {
            assert!(!is_already_normal(raw), "{raw}");
        }
    }

    /// Tiny deterministic PRNG (xorshift) so the test needs no extra crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    /// The invariants the fuzz target also asserts.
    pub(crate) fn check_invariants(raw: &str) {
        if let Ok(p) = normalize(raw) {
            let k = p.key();
            assert!(k.starts_with('/'), "{raw:?} -> {k:?}");
            assert!(!k.contains("//"), "{raw:?} -> {k:?}");
            assert!(!k.contains('\\') && !k.contains('\0'), "{raw:?} -> {k:?}");
            for s in p.segments() {
                assert!(s != ".." && s != "." && !s.is_empty(), "{raw:?} -> {k:?}");
            }
            // Idempotent: the key, re-encoded, normalises to itself.
            let reenc: String =
                percent_encoding::utf8_percent_encode(k, percent_encoding::NON_ALPHANUMERIC)
                    .to_string()
                    .replace("%2F", "/");
            assert_eq!(normalize(&reenc).unwrap().key(), k, "{raw:?}");
            // Joined to a root, it never leaves it.
            let root = std::path::Path::new("/srv/root");
            let mut joined = root.to_path_buf();
            for s in p.segments() {
                joined.push(s);
            }
            assert!(joined.starts_with(root), "{raw:?} -> {joined:?}");
            assert!(
                joined
                    .components()
                    .all(|c| !matches!(c, std::path::Component::ParentDir)),
                "{raw:?} -> {joined:?}"
            );
        }
    }

    #[test]
    fn normalize_survives_generated_nasty_inputs() {
        let pieces = [
            "/",
            "//",
            ".",
            "..",
            "%2e",
            "%2E",
            "%2e%2e",
            "%2f",
            "%2F",
            "%5c",
            "\\",
            "%00",
            "%c0%ae",
            "%c0%af",
            "%e0%80%ae",
            "%ff",
            "%",
            "%2",
            "%%",
            "a",
            "b.txt",
            ".git",
            ".env",
            "é",
            "%C3%A9",
            "%252e",
            "%20",
            "~",
            ";",
            "?",
            "#",
            "%0a",
            "\u{0}",
            "..;",
            ".%2e",
            "%2e.",
            "etc",
            "passwd",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut ok = 0;
        for _ in 0..20_000 {
            let n = 1 + rng.next() % 10;
            let mut s = String::new();
            if !rng.next().is_multiple_of(8) {
                s.push('/');
            }
            for _ in 0..n {
                s.push_str(rng.pick(&pieces));
            }
            check_invariants(&s);
            ok += usize::from(normalize(&s).is_ok());
        }
        // The generator must exercise both outcomes.
        assert!(ok > 1000 && ok < 19_000, "ok={ok}");
    }
}
