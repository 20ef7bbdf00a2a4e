//! HTTP/1.1 message bodies and connection rules shared by weir's server and
//! its upstream client: head encoding for both roles ([`head`]), the strict
//! framing rules ([`framing`]), the body [`Decoder`] (Content-Length and chunked,
//! with extensions and trailers) over bytes in memory, the chunk-size line
//! a sender writes ([`chunk_size_line`]), the keep-alive rule
//! ([`keeps_alive`]), the fields a trailer may carry ([`trailer_may_carry`]), and the request body a handler receives
//! ([`Incoming`]), fed by the connection loop through its [`Sender`].
//!
//! Owns the one chunk-size parser of weir ([`chunk_size`]); the decoder
//! reads chunk lines and trailers by the strict rules of [`framing`], so
//! there is one strict reading of HTTP/1.1 framing. Never does I/O, never
//! buffers more than one chunk line or one trailer section.

mod body;
mod decode;
pub mod framing;
pub mod head;

pub use body::{Feed, Incoming, IncomingError, Sender, channel};
pub use decode::{DecodeError, Decoded, Decoder, chunk_size};
pub use framing::{BodyFraming, RequestFraming, Violation};

/// A response's reason phrase when it is not the status code's standard
/// one, kept in the response's extensions: the upstream client puts it
/// there as it parses a head, and the server writes it back out as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonPhrase(bytes::Bytes);

impl ReasonPhrase {
    /// `bytes` when every one may stand in a reason phrase (RFC 9112 §4:
    /// HTAB, SP, VCHAR, obs-text), so writing it back cannot break the head.
    pub fn new(bytes: bytes::Bytes) -> Option<ReasonPhrase> {
        bytes
            .iter()
            .all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
            .then_some(ReasonPhrase(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// `{len:X}\r\n` into `buf`: the line in front of a chunk of `len` bytes.
pub fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut i = 16;
    let mut n = len;
    loop {
        i -= 1;
        buf[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf[16] = b'\r';
    buf[17] = b'\n';
    &buf[i..]
}

/// The end of a chunked body into `dst`: `0\r\n`, every field of
/// `trailers` that `named` names and a trailer may carry (each value of a
/// repeated field, in order), and `\r\n`. Both roles write it: the server
/// for a response's trailers, the upstream client for a request's.
pub fn encode_last_chunk(
    trailers: &http::HeaderMap,
    mut named: impl FnMut(&http::HeaderName) -> bool,
    dst: &mut Vec<u8>,
) {
    dst.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        if trailer_may_carry(name) && named(name) {
            dst.extend_from_slice(name.as_str().as_bytes());
            dst.extend_from_slice(b": ");
            dst.extend_from_slice(value.as_bytes());
            dst.extend_from_slice(b"\r\n");
        }
    }
    dst.extend_from_slice(b"\r\n");
}

/// Whether a trailer section may carry `name`: not the fields that frame,
/// route, authenticate or describe the content (RFC 9110 §6.5.1), which
/// hyper drops from trailers too.
pub fn trailer_may_carry(name: &http::HeaderName) -> bool {
    use http::header;
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}

/// Whether a message leaves its connection open, from its version and its
/// `Connection` values (RFC 9112 §9.3): HTTP/1.1 unless `close`, HTTP/1.0
/// only with `keep-alive` and no `close`.
pub fn keeps_alive<'v>(http10: bool, connection: impl IntoIterator<Item = &'v [u8]>) -> bool {
    let mut close = false;
    let mut keep = false;
    for v in connection {
        for tok in v.split(|&b| b == b',') {
            let tok = tok.trim_ascii();
            close |= tok.eq_ignore_ascii_case(b"close");
            keep |= tok.eq_ignore_ascii_case(b"keep-alive");
        }
    }
    if http10 { keep && !close } else { !close }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeated trailer field keeps every value (the server once kept
    /// only the last, the client all); fields a trailer must not carry, or
    /// that were not announced, stay out.
    #[test]
    fn the_last_chunk_carries_every_value_of_an_announced_field() {
        use http::{HeaderMap, HeaderValue, header};
        let mut t = HeaderMap::new();
        t.append("x-sum", HeaderValue::from_static("1"));
        t.append("x-sum", HeaderValue::from_static("2"));
        t.append("x-other", HeaderValue::from_static("3"));
        t.append(header::CONTENT_LENGTH, HeaderValue::from_static("4"));
        let mut out = Vec::new();
        encode_last_chunk(&t, |n| n != "x-other", &mut out);
        assert_eq!(out, b"0\r\nx-sum: 1\r\nx-sum: 2\r\n\r\n");
        out.clear();
        encode_last_chunk(&HeaderMap::new(), |_| true, &mut out);
        assert_eq!(out, b"0\r\n\r\n");
    }

    #[test]
    fn reason_phrases_hold_only_what_a_status_line_may() {
        let ok = ReasonPhrase::new(bytes::Bytes::from_static(b"Quite\tFine \xe9"));
        assert_eq!(ok.unwrap().as_bytes(), b"Quite\tFine \xe9");
        for bad in [&b"a\r\nX-Injected: 1"[..], b"nul\0", b"del\x7f"] {
            assert_eq!(ReasonPhrase::new(bytes::Bytes::from_static(bad)), None);
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        assert!(keeps_alive(false, []));
        assert!(!keeps_alive(false, [&b"Upgrade, Close"[..]]));
        assert!(!keeps_alive(true, []));
        assert!(keeps_alive(true, [&b"keep-alive"[..]]));
        assert!(!keeps_alive(true, [&b"keep-alive"[..], b"close"]));
    }
}
