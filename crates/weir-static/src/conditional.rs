//! Validators and conditional requests (RFC 9110 §8.8, §13).
//!
//! Owns ETag construction, entity-tag list parsing, and the precondition
//! evaluation order: If-Match, If-Unmodified-Since, If-None-Match,
//! If-Modified-Since, plus If-Range. Must never allocate on the hot path
//! (validators are compared as bytes) and never decide anything about bodies.

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method, header};

use super::Encoding;

/// What the preconditions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Proceed,
    NotModified,
    PreconditionFailed,
}

/// The validators of the selected representation.
pub struct Validators<'a> {
    /// Full strong entity-tag, quotes included.
    pub etag: &'a [u8],
    /// Last modification, whole seconds since the epoch.
    pub modified: u64,
}

/// Strong ETag from a content hash: changes whenever the bytes change.
pub fn etag_from_hash(hash: u64, len: u64) -> HeaderValue {
    let s = format!("\"h{hash:016x}-{len:x}\"");
    HeaderValue::from_str(&s).expect("hex is a valid header value")
}

/// Strong ETag from metadata, for files too large to hash on every miss:
/// nanosecond mtime, inode and length, so a rewrite or a replacement by
/// rename changes it.
pub fn etag_from_meta(mtime_ns: u128, ino: u64, len: u64) -> HeaderValue {
    let s = format!("\"{mtime_ns:x}-{ino:x}-{len:x}\"");
    HeaderValue::from_str(&s).expect("hex is a valid header value")
}

/// A distinct ETag for an encoded variant: the identity tag with `-br` etc.
pub fn etag_with_encoding(etag: &HeaderValue, enc: Encoding) -> HeaderValue {
    let b = etag.as_bytes();
    let inner = &b[1..b.len() - 1];
    let mut v = Vec::with_capacity(b.len() + 6);
    v.push(b'"');
    v.extend_from_slice(inner);
    v.push(b'-');
    v.extend_from_slice(enc.token().as_bytes());
    v.push(b'"');
    HeaderValue::from_bytes(&v).expect("derived from a valid header value")
}

/// 64-bit FNV-1a over 8-byte words: stable across builds and processes (so
/// ETags survive restarts), and fast enough for files up to the cache's
/// `max_file_size` on a miss.
pub fn content_hash(data: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
        h = (h ^ w).wrapping_mul(PRIME);
        h ^= h >> 29;
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(PRIME);
    }
    h ^ (data.len() as u64)
}

/// Whole seconds since the epoch (0 for times before it).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One entity-tag from a list: `(weak, opaque-tag-with-quotes)`, or `None`
/// for `*`.
type Tag<'a> = Option<(bool, &'a [u8])>;

/// Iterates an entity-tag list (`*`, or `"a", W/"b"`). Stops at the first
/// malformed element: a garbled header then simply matches less.
fn tags(v: &[u8]) -> impl Iterator<Item = Tag<'_>> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < v.len() && matches!(v[i], b' ' | b'\t' | b',') {
            i += 1;
        }
        if i >= v.len() {
            return None;
        }
        if v[i] == b'*' {
            i += 1;
            return Some(None);
        }
        let weak = v[i..].starts_with(b"W/");
        if weak {
            i += 2;
        }
        if v.get(i) != Some(&b'"') {
            i = v.len();
            return None;
        }
        let start = i;
        let end = v[i + 1..].iter().position(|&c| c == b'"')? + i + 1;
        i = end + 1;
        Some(Some((weak, &v[start..=end])))
    })
}

fn any_tag(
    headers: &HeaderMap,
    name: header::HeaderName,
    mut f: impl FnMut(Tag<'_>) -> bool,
) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| tags(v.as_bytes()).any(&mut f))
}

fn header_date(headers: &HeaderMap, name: header::HeaderName) -> Option<u64> {
    let v = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(v).ok().map(unix_secs)
}

/// Evaluates the preconditions in RFC 9110 §13.2.2 order.
pub fn evaluate(method: &Method, headers: &HeaderMap, v: &Validators<'_>) -> Outcome {
    if headers.contains_key(header::IF_MATCH) {
        // Strong comparison: weak tags never match.
        let ok = any_tag(headers, header::IF_MATCH, |t| match t {
            None => true,
            Some((weak, tag)) => !weak && tag == v.etag,
        });
        if !ok {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(since) = header_date(headers, header::IF_UNMODIFIED_SINCE)
        && v.modified > since
    {
        return Outcome::PreconditionFailed;
    }
    let get_or_head = method == Method::GET || method == Method::HEAD;
    if headers.contains_key(header::IF_NONE_MATCH) {
        // Weak comparison: `W/` is ignored on both sides.
        let matched = any_tag(headers, header::IF_NONE_MATCH, |t| match t {
            None => true,
            Some((_, tag)) => tag == v.etag,
        });
        if matched {
            return if get_or_head {
                Outcome::NotModified
            } else {
                Outcome::PreconditionFailed
            };
        }
    } else if get_or_head
        && let Some(since) = header_date(headers, header::IF_MODIFIED_SINCE)
        && v.modified <= since
    {
        return Outcome::NotModified;
    }
    Outcome::Proceed
}

/// If-Range (RFC 9110 §13.1.5): true when the Range header may be honoured.
/// An entity-tag must match strongly; a date must equal Last-Modified exactly.
pub fn if_range_allows(headers: &HeaderMap, v: &Validators<'_>) -> bool {
    let Some(h) = headers.get(header::IF_RANGE) else {
        return true;
    };
    let b = h.as_bytes();
    if b.first() == Some(&b'"') || b.starts_with(b"W/") {
        return !b.starts_with(b"W/") && b == v.etag;
    }
    match h
        .to_str()
        .ok()
        .and_then(|s| httpdate::parse_http_date(s).ok())
    {
        Some(t) => unix_secs(t) == v.modified,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const V: Validators<'static> = Validators {
        etag: b"\"abc\"",
        modified: 1_000_000,
    };
    const DATE_EQ: &str = "Mon, 12 Jan 1970 13:46:40 GMT"; // 1_000_000
    const DATE_BEFORE: &str = "Mon, 12 Jan 1970 13:46:39 GMT";

    #[test]
    fn entity_tag_lists_parse() {
        let all: Vec<_> = tags(br#"W/"a", "b,c" ,*"#).collect();
        assert_eq!(
            all,
            vec![
                Some((true, &b"\"a\""[..])),
                Some((false, &b"\"b,c\""[..])),
                None
            ]
        );
    }

    #[test]
    fn preconditions_follow_rfc9110_order() {
        let g = Method::GET;
        assert_eq!(evaluate(&g, &hm(&[]), &V), Outcome::Proceed);
        assert_eq!(
            evaluate(&g, &hm(&[("if-match", "\"x\"")]), &V),
            Outcome::PreconditionFailed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-match", "W/\"abc\"")]), &V),
            Outcome::PreconditionFailed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-match", "\"x\", \"abc\"")]), &V),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-match", "*")]), &V),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-unmodified-since", DATE_BEFORE)]), &V),
            Outcome::PreconditionFailed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-unmodified-since", DATE_EQ)]), &V),
            Outcome::Proceed
        );
        // If-Match present: If-Unmodified-Since is ignored.
        assert_eq!(
            evaluate(
                &g,
                &hm(&[("if-match", "*"), ("if-unmodified-since", DATE_BEFORE)]),
                &V
            ),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-none-match", "W/\"abc\"")]), &V),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-none-match", "\"q\", \"abc\"")]), &V),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-none-match", "*")]), &V),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-none-match", "\"q\"")]), &V),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-modified-since", DATE_EQ)]), &V),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-modified-since", DATE_BEFORE)]), &V),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &hm(&[("if-modified-since", "garbage")]), &V),
            Outcome::Proceed
        );
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(
            evaluate(
                &g,
                &hm(&[("if-none-match", "\"q\""), ("if-modified-since", DATE_EQ)]),
                &V
            ),
            Outcome::Proceed
        );
    }

    #[test]
    fn if_range_matches_strong_etag_or_exact_date() {
        assert!(if_range_allows(&hm(&[]), &V));
        assert!(if_range_allows(&hm(&[("if-range", "\"abc\"")]), &V));
        assert!(!if_range_allows(&hm(&[("if-range", "W/\"abc\"")]), &V));
        assert!(!if_range_allows(&hm(&[("if-range", "\"old\"")]), &V));
        assert!(if_range_allows(&hm(&[("if-range", DATE_EQ)]), &V));
        assert!(!if_range_allows(&hm(&[("if-range", DATE_BEFORE)]), &V));
    }

    #[test]
    fn etag_variants_are_distinct_and_valid() {
        let e = etag_from_hash(content_hash(b"hello"), 5);
        let br = etag_with_encoding(&e, Encoding::Br);
        assert_ne!(e, br);
        assert!(br.to_str().unwrap().ends_with("-br\""));
        assert_ne!(content_hash(b"hello"), content_hash(b"hellp"));
    }
}
