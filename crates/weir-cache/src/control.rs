//! `Cache-Control` (RFC 9111 §5.2) read into plain fields, for requests and
//! responses alike. Owns the parsing only: what the directives mean for
//! storing and reusing lives in [`crate::rules`].

use http::HeaderMap;
use http::header::CACHE_CONTROL;

/// delta-seconds above this are read as this (RFC 9111 §1.2.2).
const MAX_DELTA: u64 = 2_147_483_648;

/// The directives of one message's `Cache-Control` fields. A directive given
/// twice keeps its first value; an unreadable number reads as 0 (stale),
/// as §4.2.1 advises.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CacheControl {
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub no_store: bool,
    /// Unqualified `no-cache`: reuse only after validation.
    pub no_cache: bool,
    /// `no-cache="a, b"` and `private="a, b"`: fields a shared cache must not
    /// hand out without validation; weir stores the response without them.
    pub strip_fields: Vec<String>,
    /// Unqualified `private`: never stored by a shared cache.
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// Request: `max-stale` (`Some(None)`: any staleness).
    pub max_stale: Option<Option<u64>>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
}

impl CacheControl {
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for v in headers.get_all(CACHE_CONTROL) {
            let Ok(s) = v.to_str() else { continue };
            for (name, value) in directives(s) {
                cc.apply(&name, value);
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, value: Option<String>) {
        let secs = |v: &Option<String>| -> u64 {
            match v.as_deref().map(str::trim) {
                Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                    s.parse::<u64>().unwrap_or(MAX_DELTA).min(MAX_DELTA)
                }
                _ => 0,
            }
        };
        match name {
            "max-age" => {
                self.max_age.get_or_insert(secs(&value));
            }
            "s-maxage" => {
                self.s_maxage.get_or_insert(secs(&value));
            }
            "no-store" => self.no_store = true,
            "no-cache" => match value {
                Some(fields) => self.strip_fields.extend(field_list(&fields)),
                None => self.no_cache = true,
            },
            "private" => match value {
                Some(fields) => self.strip_fields.extend(field_list(&fields)),
                None => self.private = true,
            },
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "stale-while-revalidate" => {
                self.stale_while_revalidate.get_or_insert(secs(&value));
            }
            "stale-if-error" => {
                self.stale_if_error.get_or_insert(secs(&value));
            }
            "max-stale" => {
                self.max_stale
                    .get_or_insert(value.as_ref().map(|_| secs(&value)));
            }
            "min-fresh" => {
                self.min_fresh.get_or_insert(secs(&value));
            }
            "only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }

    /// Whether stale copies may never be served without validation
    /// (§4.2.4: `must-revalidate`, and for a shared cache `proxy-revalidate`
    /// and `s-maxage`, §5.2.2.10).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }
}

/// `name[=value]` pairs, names lower-cased, quoted values unquoted.
fn directives(s: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b',') {
            i += 1;
        }
        let start = i;
        while i < b.len() && !matches!(b[i], b'=' | b',' | b' ' | b'\t') {
            i += 1;
        }
        if start == i {
            break;
        }
        let name = s[start..i].to_ascii_lowercase();
        while i < b.len() && matches!(b[i], b' ' | b'\t') {
            i += 1;
        }
        let mut value = None;
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && matches!(b[i], b' ' | b'\t') {
                i += 1;
            }
            if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    v.push(b[i] as char);
                    i += 1;
                }
                i += 1;
                value = Some(v);
            } else {
                let vs = i;
                while i < b.len() && !matches!(b[i], b',' | b' ' | b'\t') {
                    i += 1;
                }
                value = Some(s[vs..i].to_string());
            }
        }
        // Skip anything up to the next comma (garbage after a directive).
        while i < b.len() && b[i] != b',' {
            i += 1;
        }
        out.push((name, value));
    }
    out
}

fn field_list(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .filter(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(v: &str) -> CacheControl {
        let mut h = HeaderMap::new();
        h.insert(CACHE_CONTROL, v.parse().unwrap());
        CacheControl::parse(&h)
    }

    #[test]
    fn directives_are_read_case_insensitively_first_value_wins() {
        let c = cc("Public, MAX-AGE=60, max-age=5, s-maxage=\"30\"");
        assert!(c.public);
        assert_eq!(c.max_age, Some(60));
        assert_eq!(c.s_maxage, Some(30));
    }

    #[test]
    fn invalid_numbers_read_as_zero_and_huge_ones_are_capped() {
        assert_eq!(cc("max-age=abc").max_age, Some(0));
        assert_eq!(cc("max-age=-5").max_age, Some(0));
        assert_eq!(cc("max-age=99999999999999999999").max_age, Some(MAX_DELTA));
    }

    #[test]
    fn qualified_private_and_no_cache_name_fields() {
        let c = cc("private=\"Set-Cookie, X-User\", no-cache=\"x-debug\"");
        assert!(!c.private && !c.no_cache);
        assert_eq!(c.strip_fields, ["set-cookie", "x-user", "x-debug"]);
        let c = cc("no-cache, private");
        assert!(c.private && c.no_cache);
    }

    #[test]
    fn request_directives() {
        let c = cc("max-stale, min-fresh=10, only-if-cached");
        assert_eq!(c.max_stale, Some(None));
        assert_eq!(c.min_fresh, Some(10));
        assert!(c.only_if_cached);
        assert_eq!(cc("max-stale=30").max_stale, Some(Some(30)));
    }

    #[test]
    fn several_fields_are_one_list() {
        let mut h = HeaderMap::new();
        h.append(CACHE_CONTROL, "max-age=10".parse().unwrap());
        h.append(
            CACHE_CONTROL,
            "stale-while-revalidate=5, stale-if-error=60"
                .parse()
                .unwrap(),
        );
        let c = CacheControl::parse(&h);
        assert_eq!(c.max_age, Some(10));
        assert_eq!(c.stale_while_revalidate, Some(5));
        assert_eq!(c.stale_if_error, Some(60));
    }
}
