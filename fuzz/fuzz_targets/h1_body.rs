//! `cargo +nightly fuzz run h1_body`: the HTTP/1.1 body decoder
//! (`weir_http::h1::Decoder`, chunked with trailers) must never panic,
//! never yield more body bytes than it was given, and decode the same
//! bytes whole and split into pieces alike.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_http::h1::{Decoded, Decoder};

/// The body bytes and whether the body ended, feeding `data` in pieces of
/// `split` bytes; `None` when the framing is refused.
fn decode(data: &[u8], split: usize) -> Option<(Vec<u8>, bool)> {
    let mut d = Decoder::chunked(8192);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    for piece in data.chunks(split) {
        buf.extend_from_slice(piece);
        loop {
            match d.decode(&mut buf).ok()? {
                Decoded::Data(b) => {
                    assert!(!b.is_empty());
                    body.extend_from_slice(&b);
                }
                Decoded::Trailers(_) | Decoded::End => return Some((body, true)),
                Decoded::NeedMore => break,
            }
        }
    }
    Some((body, false))
}

fuzz_target!(|data: &[u8]| {
    let split = data.first().copied().unwrap_or(1).max(1) as usize;
    let whole = decode(data, data.len().max(1));
    let pieces = decode(data, split);
    if let Some((body, _)) = &whole {
        assert!(body.len() <= data.len());
    }
    // Split input may stop earlier only by needing more bytes at the end.
    if let (Some((a, true)), Some((b, true))) = (&whole, &pieces) {
        assert_eq!(a, b, "the same body however the input is split");
    }
});
