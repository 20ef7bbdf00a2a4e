//! The validators static files send (RFC 9110 §8.8): ETags built from a
//! file's bytes or metadata, one per encoded variant, and modification
//! times in whole seconds. Evaluating a request's preconditions against
//! them is `weir_http::conditional`'s.

use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderValue;

use super::Encoding;

/// Strong ETag from a content hash (`weir_http::hash::stable_hash`):
/// changes whenever the bytes change.
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

/// Whole seconds since the epoch (0 for times before it).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_http::hash::stable_hash;

    #[test]
    fn etag_variants_are_distinct_and_valid() {
        let e = etag_from_hash(stable_hash(b"hello"), 5);
        let br = etag_with_encoding(&e, Encoding::Br);
        assert_ne!(e, br);
        assert!(br.to_str().unwrap().ends_with("-br\""));
    }
}
