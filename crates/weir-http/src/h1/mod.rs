//! HTTP/1.1 message bodies and connection rules shared by weir's server and
//! its upstream client: the body [`Decoder`] (Content-Length and chunked,
//! with extensions and trailers) over bytes in memory, the chunk-size line
//! a sender writes ([`chunk_size_line`]), the keep-alive rule
//! ([`keeps_alive`]), the fields a trailer may carry ([`trailer_may_carry`]), and the request body a handler receives
//! ([`Incoming`]), fed by the connection loop through its [`Sender`].
//!
//! Owns the one chunk-size parser of weir ([`chunk_size`]); the decoder
//! reads chunk lines and trailers by the strict rules of `smuggling` (which
//! its guard shares), so there is one strict reading of HTTP/1.1 framing. Never does I/O, never buffers more
//! than one chunk line or one trailer section.

mod body;
mod decode;

pub use body::{Feed, Incoming, IncomingError, Sender, channel};
pub use decode::{DecodeError, Decoded, Decoder, chunk_size};

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

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        assert!(keeps_alive(false, []));
        assert!(!keeps_alive(false, [&b"Upgrade, Close"[..]]));
        assert!(!keeps_alive(true, []));
        assert!(keeps_alive(true, [&b"keep-alive"[..]]));
        assert!(!keeps_alive(true, [&b"keep-alive"[..], b"close"]));
    }
}
