//! `Cache-Control` (RFC 9111 §5.2) read into plain fields, for requests and
//! responses alike. Owns the parsing only: what the directives mean for
//! storing and reusing lives in [`crate::rules`].

use http::HeaderMap;
use http::header::CACHE_CONTROL;

/// delta-seconds above this are read as this (RFC 9111 §1.2.2).
const MAX_DELTA: u64 = 2_147_483_648;

/// The directives of one message's `Cache-Control` fields. A directive given
/// twice keeps its first value (§4.2.1); an unreadable number reads as 0
/// (stale), as §4.2.1 advises.
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
    /// §5.2.2.3: stored only by a cache that understands the status code.
    pub must_understand: bool,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
    /// Request: `max-stale` (`Some(None)`: any staleness).
    pub max_stale: Option<Option<u64>>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
}

/// A directive's argument as RFC 9110 §5.6.2 and §5.6.4 let it be written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Arg {
    None,
    /// A token, or a quoted-string unquoted.
    Value(String),
    /// Broken syntax: whitespace around `=`, nothing after it, an
    /// unterminated quoted-string.
    Invalid,
}

impl CacheControl {
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for v in headers.get_all(CACHE_CONTROL) {
            let Ok(s) = v.to_str() else { continue };
            for (name, arg) in directives(s) {
                cc.apply(&name, arg);
            }
        }
        cc
    }

    fn apply(&mut self, name: &str, arg: Arg) {
        // §4.2.1: invalid freshness information (`max-age=1.5`,
        // `max-age=100a`, `max-age= 5`) makes the response stale.
        let secs = |a: &Arg| match a {
            Arg::Value(v) => delta_seconds(v).unwrap_or(0),
            Arg::None | Arg::Invalid => 0,
        };
        match name {
            "max-age" => {
                self.max_age.get_or_insert(secs(&arg));
            }
            "s-maxage" => {
                self.s_maxage.get_or_insert(secs(&arg));
            }
            "no-store" => self.no_store = true,
            // A field list that cannot be read is the unqualified form,
            // the more restrictive one (§4.2.1).
            "no-cache" => match arg {
                Arg::Value(fields) => self.strip_fields.extend(field_list(&fields)),
                Arg::None | Arg::Invalid => self.no_cache = true,
            },
            "private" => match arg {
                Arg::Value(fields) => self.strip_fields.extend(field_list(&fields)),
                Arg::None | Arg::Invalid => self.private = true,
            },
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "must-understand" => self.must_understand = true,
            "stale-while-revalidate" => {
                self.stale_while_revalidate.get_or_insert(secs(&arg));
            }
            "stale-if-error" => {
                self.stale_if_error.get_or_insert(secs(&arg));
            }
            "max-stale" => {
                self.max_stale.get_or_insert(match arg {
                    Arg::None => None,
                    a => Some(secs(&a)),
                });
            }
            "min-fresh" => {
                self.min_fresh.get_or_insert(secs(&arg));
            }
            "only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }

    /// Whether a stale copy may never be served without validation, not
    /// even when the upstream fails or cannot be reached (§4.2.4):
    /// `no-cache`, `must-revalidate`, and for a shared cache
    /// `proxy-revalidate` and `s-maxage` (§5.2.2.10).
    pub fn forbids_stale(&self) -> bool {
        self.no_cache || self.must_revalidate || self.proxy_revalidate || self.s_maxage.is_some()
    }

    /// The directive that makes a shared cache answer with an error of its
    /// own (504) rather than reuse the response stale while disconnected:
    /// `must-revalidate` (§5.2.2.2), `proxy-revalidate` (§5.2.2.8), or
    /// `s-maxage`, which implies it (§5.2.2.10). `no-cache` forbids stale
    /// reuse too but asks for no such error.
    pub fn must_revalidate_shared(&self) -> Option<&'static str> {
        if self.must_revalidate {
            Some("must-revalidate")
        } else if self.proxy_revalidate {
            Some("proxy-revalidate")
        } else if self.s_maxage.is_some() {
            Some("s-maxage")
        } else {
            None
        }
    }
}

/// RFC 9111 §1.2.2 delta-seconds: digits only; values past 2^31 read as
/// 2^31. `None` for anything else (a sign, a fraction, a letter).
pub fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<u64>().unwrap_or(MAX_DELTA).min(MAX_DELTA))
}

/// RFC 9110 §5.6.2 tchar.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `name[=value]` pairs (RFC 9110 §5.6.1 lists of §5.6.2 tokens and
/// §5.6.4 quoted-strings), names lower-cased. A member that is not a
/// token is skipped; a comma inside a quoted-string never ends a member.
fn directives(s: &str) -> Vec<(String, Arg)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let ows = |i: &mut usize| {
        while *i < b.len() && matches!(b[*i], b' ' | b'\t') {
            *i += 1;
        }
    };
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b',') {
            i += 1;
        }
        let start = i;
        while i < b.len() && tchar(b[i]) {
            i += 1;
        }
        let name = s[start..i].to_ascii_lowercase();
        let mut arg = Arg::None;
        let mut j = i;
        ows(&mut j);
        if j < b.len() && b[j] == b'=' {
            // No whitespace may stand on either side of `=`.
            let spaced = j != i;
            i = j + 1;
            let vstart = i;
            ows(&mut i);
            let spaced = spaced || i != vstart;
            if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                let mut closed = false;
                while i < b.len() {
                    match b[i] {
                        b'"' => {
                            closed = true;
                            i += 1;
                            break;
                        }
                        b'\\' if i + 1 < b.len() => {
                            v.push(b[i + 1] as char);
                            i += 2;
                        }
                        c => {
                            v.push(c as char);
                            i += 1;
                        }
                    }
                }
                arg = if closed { Arg::Value(v) } else { Arg::Invalid };
            } else {
                let vs = i;
                while i < b.len() && tchar(b[i]) {
                    i += 1;
                }
                arg = if i == vs {
                    Arg::Invalid
                } else {
                    Arg::Value(s[vs..i].to_string())
                };
            }
            if spaced {
                arg = Arg::Invalid;
            }
        }
        // Anything else before the next comma makes the member invalid
        // (`max-age=5 x`), outside quoted-strings.
        ows(&mut i);
        let mut junk = false;
        let mut quoted = false;
        while i < b.len() && (quoted || b[i] != b',') {
            match b[i] {
                b'"' => quoted = !quoted,
                b'\\' if quoted => i += 1,
                _ => {}
            }
            junk = true;
            i += 1;
        }
        if name.is_empty() {
            continue;
        }
        if junk && arg != Arg::None {
            arg = Arg::Invalid;
        }
        out.push((name, arg));
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

    #[test]
    fn s5_2_quoted_values_are_read_and_quoted_text_is_never_a_directive() {
        assert_eq!(cc("max-age=\"3600\"").max_age, Some(3600));
        // RFC 9110 §5.6.4: a comma or a directive inside quotes is text.
        let c = cc("extension=\"max-age=3600, public\", max-age=1");
        assert_eq!((c.max_age, c.public), (Some(1), false));
        let c = cc("max-age=1, ext=\"a, \\\"b\\\", max-age=3600\"");
        assert_eq!(c.max_age, Some(1));
        // An unterminated quoted-string is no value at all: stale.
        assert_eq!(cc("max-age=\"3600").max_age, Some(0));
        // Single quotes are not quotes.
        assert_eq!(cc("max-age='3600'").max_age, Some(0));
    }

    #[test]
    fn s4_2_1_duplicates_keep_the_first_occurrence() {
        assert_eq!(cc("max-age=1800, max-age=1").max_age, Some(1800));
        assert_eq!(cc("max-age=1, max-age=1800").max_age, Some(1));
        let mut h = HeaderMap::new();
        h.append(CACHE_CONTROL, "s-maxage=5".parse().unwrap());
        h.append(CACHE_CONTROL, "s-maxage=500".parse().unwrap());
        assert_eq!(CacheControl::parse(&h).s_maxage, Some(5));
    }

    #[test]
    fn s4_2_1_invalid_numbers_make_the_response_stale() {
        for v in [
            "max-age=100a",
            "max-age=1.5",
            "max-age=3600.0",
            "max-age=a3600",
            "max-age=-1",
            "max-age=",
            "max-age",
            "max-age =3600",
            "max-age= 3600",
            "max-age=3600 x",
        ] {
            assert_eq!(cc(v).max_age, Some(0), "{v}");
        }
        assert_eq!(cc("max-age=003600").max_age, Some(3600));
        assert_eq!(cc("s-maxage=1.5").s_maxage, Some(0));
        assert_eq!(cc("stale-if-error=x").stale_if_error, Some(0));
    }

    #[test]
    fn s1_2_2_delta_seconds() {
        assert_eq!(delta_seconds("0"), Some(0));
        assert_eq!(delta_seconds("2147483649"), Some(MAX_DELTA));
        assert_eq!(delta_seconds("99999999999999999999999"), Some(MAX_DELTA));
        for bad in ["", "-1", "+1", "1.0", "1 ", "1;a=b"] {
            assert_eq!(delta_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn s5_2_2_3_must_understand_and_the_restrictive_unqualified_forms() {
        assert!(cc("no-store, must-understand").must_understand);
        // A field list that cannot be read counts as the unqualified form.
        assert!(cc("no-cache=\"x-a").no_cache);
        assert!(cc("private=").private);
        assert!(cc("no-cache").forbids_stale());
    }
}
