//! HTTP/1.1 message bodies and connection rules shared by weir's server and
//! its upstream client: head parsing ([`parse`]) and head encoding
//! ([`head`]) for both roles, the strict
//! framing rules ([`framing`]), the body [`Decoder`] (Content-Length and chunked,
//! with extensions and trailers) over bytes in memory, the data chunks and
//! last chunk a sender writes ([`Chunk`], [`encode_last_chunk`]), the keep-alive rule
//! ([`keeps_alive`]), the fields a trailer may carry ([`trailer_may_carry`]), and the request body a handler receives
//! ([`Incoming`]), fed by the connection loop through its [`Sender`].
//!
//! Owns the one chunk-size parser of weir ([`chunk_size`]); the decoder
//! reads chunk lines and trailers by the strict rules of [`framing`], so
//! there is one strict reading of HTTP/1.1 framing. Never does I/O, never
//! buffers more than one chunk line or one trailer section.

use bytes::Bytes;

mod body;
mod decode;
pub mod framing;
pub mod head;
pub mod parse;

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
fn chunk_size_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
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

/// A piece of a body on its way out, framed as one chunk of a chunked body
/// (size line, data, CRLF) or as it is: the one writer of data chunks for
/// both roles. The framing is a few bytes of its own around the caller's
/// `Bytes`, written together as slices of one vectored write, so a body is
/// never copied; [`Chunk::advance`] keeps the place across partial writes.
#[derive(Debug)]
pub struct Chunk {
    line: [u8; 18],
    /// Where the unwritten part of `line` starts (18: nothing left).
    line_at: usize,
    data: Bytes,
    end: &'static [u8],
}

impl Default for Chunk {
    fn default() -> Self {
        Chunk::plain(Bytes::new())
    }
}

impl Chunk {
    /// `data` as one chunk of a chunked body (`data` not empty: an empty
    /// chunk would end the body).
    pub fn framed(data: Bytes) -> Self {
        let mut c = Chunk::plain(data);
        c.line_at = 18 - chunk_size_line(c.data.len(), &mut c.line).len();
        c.end = b"\r\n";
        c
    }

    /// `data` as it is: a body of known length, or an encoded last chunk.
    pub fn plain(data: Bytes) -> Self {
        Chunk {
            line: [0; 18],
            line_at: 18,
            data,
            end: b"",
        }
    }

    /// Everything has been written.
    pub fn is_empty(&self) -> bool {
        self.line_at == 18 && self.data.is_empty() && self.end.is_empty()
    }

    /// What is left to write, in order.
    pub fn slices(&self) -> [std::io::IoSlice<'_>; 3] {
        [
            std::io::IoSlice::new(&self.line[self.line_at..]),
            std::io::IoSlice::new(&self.data),
            std::io::IoSlice::new(self.end),
        ]
    }

    /// `n` more bytes were written.
    pub fn advance(&mut self, mut n: usize) {
        let k = n.min(18 - self.line_at);
        self.line_at += k;
        n -= k;
        let k = n.min(self.data.len());
        bytes::Buf::advance(&mut self.data, k);
        n -= k;
        self.end = &self.end[n.min(self.end.len())..];
    }
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
    fn chunk_size_lines_are_hex() {
        let mut b = [0u8; 18];
        assert_eq!(chunk_size_line(0, &mut b), b"0\r\n");
        assert_eq!(chunk_size_line(0x10c0, &mut b), b"10C0\r\n");
        assert_eq!(chunk_size_line(usize::MAX, &mut b), b"FFFFFFFFFFFFFFFF\r\n");
    }

    /// A chunk is its size line, the caller's bytes (not a copy) and CRLF,
    /// and comes out whole however the writes split it.
    #[test]
    fn a_chunk_frames_the_callers_bytes_across_partial_writes() {
        let data = Bytes::from_static(b"hello, world");
        let c = Chunk::framed(data.clone());
        assert_eq!(c.slices()[1].as_ptr(), data.as_ptr());
        for step in 1..20 {
            let mut c = Chunk::framed(data.clone());
            let mut out = Vec::new();
            while !c.is_empty() {
                let all: Vec<u8> = c.slices().iter().flat_map(|s| s.iter().copied()).collect();
                let n = step.min(all.len());
                out.extend_from_slice(&all[..n]);
                c.advance(n);
            }
            assert_eq!(out, b"C\r\nhello, world\r\n", "step {step}");
        }
        let c = Chunk::plain(Bytes::from_static(b"0\r\n\r\n"));
        let all: Vec<u8> = c.slices().iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(all, b"0\r\n\r\n");
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
