//! Byte ranges (RFC 9110 §14): parsing `Range`, the fields of a 206 and a
//! 416, and the framing of `multipart/byteranges` bodies, for every handler
//! that answers from a stored representation (static files, the cache), so
//! both answer a range alike.
//!
//! Owns the amplification limits: more than [`MAX_RANGES`] ranges, or ranges
//! adding up to more than the representation (overlap abuse), make the
//! server ignore `Range` and send the whole representation once, as nginx
//! does. Must never read files; it only computes offsets and part headers.
//! Whether `Range` applies at all (`If-Range`) is [`crate::conditional`]'s.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use crate::body::Body;

/// More ranges than this are treated as abuse.
pub const MAX_RANGES: usize = 100;

/// A satisfiable range, inclusive bounds, already clamped to the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes (never zero: bounds are inclusive).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
}

/// What to do with a `Range` header.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeDecision {
    /// Invalid, unknown unit, abusive, or empty file: send 200 with everything.
    Ignore,
    /// Valid syntax but nothing satisfiable: 416.
    Unsatisfiable,
    /// One or more satisfiable ranges, in request order.
    Ranges(Vec<ByteRange>),
}

/// Saturating decimal parse; `None` for empty or non-digits.
fn num(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Parses a `Range` header against a representation of `len` bytes.
pub fn parse(header: &HeaderValue, len: u64) -> RangeDecision {
    let Ok(s) = header.to_str() else {
        return RangeDecision::Ignore;
    };
    let s = s.trim();
    let Some((unit, set)) = s.split_once('=') else {
        return RangeDecision::Ignore;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeDecision::Ignore;
    }
    let mut ranges = Vec::new();
    let mut specs = 0usize;
    let mut total: u64 = 0;
    for spec in set.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        specs += 1;
        if specs > MAX_RANGES {
            return RangeDecision::Ignore;
        }
        let Some((a, b)) = spec.split_once('-') else {
            return RangeDecision::Ignore;
        };
        let (a, b) = (a.trim(), b.trim());
        let r = if a.is_empty() {
            let Some(n) = num(b) else {
                return RangeDecision::Ignore;
            };
            (n > 0 && len > 0).then(|| ByteRange {
                start: len.saturating_sub(n),
                end: len - 1,
            })
        } else {
            let Some(first) = num(a) else {
                return RangeDecision::Ignore;
            };
            let last = if b.is_empty() {
                u64::MAX
            } else {
                match num(b) {
                    Some(l) if l >= first => l,
                    _ => return RangeDecision::Ignore,
                }
            };
            (first < len).then(|| ByteRange {
                start: first,
                end: last.min(len - 1),
            })
        };
        if let Some(r) = r {
            total = total.saturating_add(r.len());
            ranges.push(r);
        }
    }
    if specs == 0 {
        return RangeDecision::Ignore;
    }
    if len == 0 {
        // Nothing to slice: the whole (empty) body is the honest answer.
        return RangeDecision::Ignore;
    }
    if ranges.is_empty() {
        return RangeDecision::Unsatisfiable;
    }
    if ranges.len() > 1 && total > len {
        // Overlapping ranges asking for more bytes than the file has.
        return RangeDecision::Ignore;
    }
    RangeDecision::Ranges(ranges)
}

/// `bytes START-END/LEN`
pub fn content_range(r: ByteRange, len: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes {}-{}/{}", r.start, r.end, len))
        .expect("digits are a valid header value")
}

/// `bytes */LEN`
pub fn unsatisfied_range(len: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("bytes */{len}")).expect("digits are a valid header value")
}

/// The 416 for a representation of `len` bytes: `Content-Range: bytes
/// */LEN` tells the client the current length (RFC 9110 §15.5.17).
pub fn unsatisfiable(len: u64) -> Response<Body> {
    let mut r = crate::response::error(StatusCode::RANGE_NOT_SATISFIABLE);
    r.headers_mut()
        .insert(header::CONTENT_RANGE, unsatisfied_range(len));
    r
}

/// Sets the fields of a 206 for `ranges` of a `len`-byte representation
/// on `h`, which holds the representation's `Content-Type`: one range gets
/// its `Content-Range` and length; several get a `multipart/byteranges`
/// type and length, and the framing of that body is returned.
pub fn partial_fields(h: &mut HeaderMap, ranges: &[ByteRange], len: u64) -> Option<Multipart> {
    if let [one] = ranges {
        h.insert(header::CONTENT_RANGE, content_range(*one, len));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(one.len()));
        return None;
    }
    let ct = h
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let m = multipart(ranges, len, &ct);
    h.insert(header::CONTENT_TYPE, m.content_type.clone());
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(m.body_len));
    h.remove(header::CONTENT_RANGE);
    Some(m)
}

/// A fresh boundary: random enough that it does not occur in file contents
/// by chance (std's `RandomState` is seeded per process from the OS).
pub fn new_boundary() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("weir{:016x}", h.finish())
}

/// The framing around each part of a `multipart/byteranges` body.
pub struct Multipart {
    /// One header block per range, emitted before that range's bytes.
    pub part_heads: Vec<Bytes>,
    /// Closing delimiter.
    pub tail: Bytes,
    /// Exact total body length.
    pub body_len: u64,
    /// `multipart/byteranges; boundary=...`
    pub content_type: HeaderValue,
}

impl Multipart {
    /// The whole body for `ranges` of a representation held in memory.
    pub fn assemble(&self, ranges: &[ByteRange], data: &[u8]) -> Bytes {
        let mut out = BytesMut::with_capacity(self.body_len as usize);
        for (head, r) in self.part_heads.iter().zip(ranges) {
            out.extend_from_slice(head);
            out.extend_from_slice(&data[r.start as usize..=r.end as usize]);
        }
        out.extend_from_slice(&self.tail);
        out.freeze()
    }
}

/// Builds the framing for `ranges` of a `len`-byte representation of
/// `content_type`.
pub fn multipart(ranges: &[ByteRange], len: u64, content_type: &HeaderValue) -> Multipart {
    let boundary = new_boundary();
    let mut body_len = 0u64;
    let mut part_heads = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        let mut b = BytesMut::with_capacity(128);
        // Each part after the first is preceded by the CRLF that ends the
        // previous part's data.
        if i > 0 {
            b.put_slice(b"\r\n");
        }
        b.put_slice(b"--");
        b.put_slice(boundary.as_bytes());
        b.put_slice(b"\r\nContent-Type: ");
        b.put_slice(content_type.as_bytes());
        b.put_slice(b"\r\nContent-Range: ");
        b.put_slice(content_range(*r, len).as_bytes());
        b.put_slice(b"\r\n\r\n");
        body_len += b.len() as u64 + r.len();
        part_heads.push(b.freeze());
    }
    let tail = Bytes::from(format!("\r\n--{boundary}--\r\n"));
    body_len += tail.len() as u64;
    let content_type = HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}"))
        .expect("boundary is alphanumeric");
    Multipart {
        part_heads,
        tail,
        body_len,
        content_type,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str, len: u64) -> RangeDecision {
        parse(&HeaderValue::from_str(s).unwrap(), len)
    }
    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    #[test]
    fn range_forms_parse_and_clamp() {
        assert_eq!(p("bytes=0-9", 100), RangeDecision::Ranges(vec![r(0, 9)]));
        assert_eq!(
            p("bytes=90-200", 100),
            RangeDecision::Ranges(vec![r(90, 99)])
        );
        assert_eq!(p("bytes=50-", 100), RangeDecision::Ranges(vec![r(50, 99)]));
        assert_eq!(p("bytes=-10", 100), RangeDecision::Ranges(vec![r(90, 99)]));
        assert_eq!(p("bytes=-500", 100), RangeDecision::Ranges(vec![r(0, 99)]));
        assert_eq!(
            p("bytes=0-0, -1", 100),
            RangeDecision::Ranges(vec![r(0, 0), r(99, 99)])
        );
        assert_eq!(
            p("bytes=0-99999999999999999999999", 100),
            RangeDecision::Ranges(vec![r(0, 99)])
        );
        assert_eq!(p("Bytes=1-2", 100), RangeDecision::Ranges(vec![r(1, 2)]));
    }

    #[test]
    fn unsatisfiable_ranges_give_416() {
        assert_eq!(p("bytes=100-", 100), RangeDecision::Unsatisfiable);
        assert_eq!(p("bytes=200-300", 100), RangeDecision::Unsatisfiable);
        assert_eq!(p("bytes=-0", 100), RangeDecision::Unsatisfiable);
        // One satisfiable range among unsatisfiable ones is served.
        assert_eq!(
            p("bytes=500-600, 0-1", 100),
            RangeDecision::Ranges(vec![r(0, 1)])
        );
    }

    #[test]
    fn invalid_syntax_is_ignored() {
        for s in [
            "bytes=",
            "bytes=a-b",
            "bytes=5-1",
            "bytes=1",
            "items=0-1",
            "bytes",
            "bytes=--1",
            "bytes=1-2-3",
            "bytes=-",
        ] {
            assert_eq!(p(s, 100), RangeDecision::Ignore, "{s}");
        }
        assert_eq!(p("bytes=0-1", 0), RangeDecision::Ignore);
    }

    #[test]
    fn amplification_is_refused() {
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(p(&many, 100), RangeDecision::Ignore);
        let overlap = format!("bytes={}", ["0-99"; 3].join(","));
        assert_eq!(p(&overlap, 100), RangeDecision::Ignore);
        let ok = format!("bytes={}", vec!["0-0"; MAX_RANGES].join(","));
        assert!(matches!(p(&ok, 1000), RangeDecision::Ranges(v) if v.len() == MAX_RANGES));
    }

    #[test]
    fn suffix_multiple_and_overlapping_ranges() {
        // Suffix longer than the representation: all of it.
        assert_eq!(p("bytes=-1000", 10), RangeDecision::Ranges(vec![r(0, 9)]));
        // Several, kept in request order, even out of order.
        assert_eq!(
            p("bytes=5-6,0-1, -2", 10),
            RangeDecision::Ranges(vec![r(5, 6), r(0, 1), r(8, 9)])
        );
        // Overlapping but asking no more than the whole: served as asked.
        assert_eq!(
            p("bytes=0-4,2-6", 100),
            RangeDecision::Ranges(vec![r(0, 4), r(2, 6)])
        );
        // Overlapping past the whole: the whole, once.
        assert_eq!(p("bytes=0-7,2-9", 10), RangeDecision::Ignore);
    }

    #[test]
    fn a_416_says_the_current_length() {
        let resp = unsatisfiable(1234);
        assert_eq!(resp.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(resp.headers()[header::CONTENT_RANGE], "bytes */1234");
    }

    #[test]
    fn partial_fields_for_one_range_and_several() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(10));
        assert!(partial_fields(&mut h, &[r(2, 4)], 10).is_none());
        assert_eq!(h[header::CONTENT_RANGE], "bytes 2-4/10");
        assert_eq!(h[header::CONTENT_LENGTH], "3");
        assert_eq!(h[header::CONTENT_TYPE], "text/plain");

        let rs = [r(0, 1), r(8, 9)];
        let m = partial_fields(&mut h, &rs, 10).unwrap();
        assert!(!h.contains_key(header::CONTENT_RANGE));
        let ct = h[header::CONTENT_TYPE].to_str().unwrap().to_string();
        let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
        let body = m.assemble(&rs, b"0123456789");
        assert_eq!(h[header::CONTENT_LENGTH], body.len().to_string().as_str());
        let want = format!(
            "--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01\r\n\
             --{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 8-9/10\r\n\r\n89\r\n\
             --{boundary}--\r\n"
        );
        assert_eq!(body, want.as_bytes());
    }

    #[test]
    fn multipart_length_is_exact() {
        let ct = HeaderValue::from_static("text/plain");
        let ranges = [r(0, 1), r(5, 9)];
        let m = multipart(&ranges, 10, &ct);
        let total: u64 = m.part_heads.iter().map(|h| h.len() as u64).sum::<u64>()
            + ranges.iter().map(ByteRange::len).sum::<u64>()
            + m.tail.len() as u64;
        assert_eq!(m.body_len, total);
    }
}
