//! The fuzz targets' bodies, one function per target: each checks one
//! property on any input and panics when it breaks. `fuzz_targets/` hands
//! them libFuzzer's inputs (`scripts/fuzz.sh`); the normal test suite runs
//! them on stable over `fuzz/seeds/` and seeded mutations of it
//! (`crates/weir/tests/fuzz_targets.rs`, which includes this file), so they
//! compile and hold without a fuzzer. Never depends on libFuzzer.

use std::path::{Component, Path};

use bytes::BytesMut;
use weir_http::h1::framing::{self, BodyFraming, RequestFraming};
use weir_http::h1::{Decoded, Decoder};

/// A target's body: panics when its property breaks on the input.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/` file.
pub const TARGETS: &[(&str, Target)] = &[
    ("config_parse", config_parse),
    ("h1_body", h1_body),
    ("h1_framing", h1_framing),
    ("h1_parse", h1_parse),
    ("h1_response", h1_response),
    ("path_normalize", path_normalize),
    ("proxy_protocol", proxy_protocol),
];

/// Config validation: any text yields a config or positioned errors, never
/// a panic, and every error points inside the text.
pub fn config_parse(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errs) = weir_config::load_str("fuzz.toml", src, Path::new("/nonexistent")) {
        assert!(!errs.0.is_empty());
        let lines = src.lines().count().max(1) + 1;
        for d in &errs.0 {
            assert!((1..=lines).contains(&d.line), "{d} outside {lines} lines");
            assert!(d.col >= 1);
        }
    }
}

/// The HTTP/1.1 body decoder (`weir_http::h1::Decoder`, chunked with
/// trailers): never a panic, never more body bytes than it was given, and
/// the same bytes whole and split into pieces alike.
pub fn h1_body(data: &[u8]) {
    /// The body bytes and whether the body ended, feeding `data` in pieces
    /// of `split` bytes; `None` when the framing is refused.
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
}

/// The strict framing rules both roles share (`weir_http::h1::framing`):
/// never a panic, and a head they accept has one reading: a length only
/// from exactly one plain Content-Length, chunked only from exactly one
/// `chunked` and no length.
pub fn h1_framing(data: &[u8]) {
    let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
        let _ = framing::line_end(data, 64);
        return;
    };
    let head = &data[..end + 2];
    if framing::check_line_endings(head).is_err() {
        return;
    }
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let http10 = lines.next().is_some_and(|l| l.ends_with(b"HTTP/1.0"));
    let mut f = RequestFraming::default();
    let (mut te, mut cl) = (0, 0);
    for line in lines.filter(|l| !l.is_empty()) {
        let Ok((name, value)) = framing::check_field_line(line) else {
            return;
        };
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te += 1;
            f.transfer_encoding(value);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            cl += 1;
            if f.content_length(value).is_err() {
                return;
            }
        }
    }
    match f.finish(http10) {
        Ok(BodyFraming::Chunked) => assert!(te == 1 && cl == 0 && !http10),
        Ok(BodyFraming::Length(_)) => assert!(te == 0 && cl == 1),
        Ok(BodyFraming::None) => assert!(te == 0 && cl <= 1),
        Err(_) => assert!(te + cl > 0),
    }
}

/// weir's HTTP/1.1 request parser (`weir_server::http1::parse`): never a
/// panic; a request it takes is exactly one complete head of a shape it
/// may serve.
pub fn h1_parse(data: &[u8]) {
    let max_head = 64 + data.first().copied().unwrap_or(0) as usize * 16;
    weir_server::http1::check_parse(data, max_head);
}

/// weir's own upstream client (`weir_proxy::h1_client`): never a panic on
/// what an upstream sends, never more body than was sent or declared, and
/// a response decoded the same however its bytes are split across reads.
pub fn h1_response(data: &[u8]) {
    let step = data.first().copied().unwrap_or(1) as usize % 32 + 1;
    weir_proxy::h1_client::check_response(data, step);
}

/// `weir_static::path::normalize`: an accepted path has no `.`/`..`/empty
/// segment, no NUL or backslash, and joined to a root never leaves it;
/// already-normal input is its own key.
pub fn path_normalize(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = weir_static::path::normalize(raw) else {
        return;
    };
    let key = p.key();
    assert!(key.starts_with('/'), "{raw:?} -> {key:?}");
    assert!(!key.contains("//"), "{raw:?} -> {key:?}");
    assert!(
        !key.contains('\\') && !key.contains('\0'),
        "{raw:?} -> {key:?}"
    );
    for seg in p.segments() {
        assert!(
            !seg.is_empty() && seg != "." && seg != "..",
            "{raw:?} -> {key:?}"
        );
    }
    let root = Path::new("/srv/root");
    let mut joined = root.to_path_buf();
    for seg in p.segments() {
        joined.push(seg);
    }
    assert!(joined.starts_with(root), "{raw:?} -> {joined:?}");
    assert!(
        joined
            .components()
            .all(|c| !matches!(c, Component::ParentDir)),
        "{raw:?} -> {joined:?}"
    );
    if weir_static::path::is_already_normal(raw) {
        assert_eq!(key, raw);
    }
}

/// The PROXY protocol parser: never a panic, never more bytes claimed than
/// it was given, and what it parses written back reads the same.
pub fn proxy_protocol(data: &[u8]) {
    use weir_proxy::proxy_protocol::{parse, write_v1, write_v2};
    if let Ok(Some(h)) = parse(data) {
        assert!(h.len <= data.len());
        if let Some((src, dst)) = h.addrs {
            let v1 = write_v1(src, dst);
            assert_eq!(
                parse(&v1).unwrap().unwrap().addrs.map(|a| a.0.port()),
                Some(src.port())
            );
            let v2 = write_v2(src, dst);
            assert_eq!(parse(&v2).unwrap().unwrap().len, v2.len());
        }
    }
}
