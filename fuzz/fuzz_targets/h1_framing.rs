//! `cargo +nightly fuzz run h1_framing`: the strict framing rules both
//! roles share (`weir_http::h1::framing`) must never panic, and a head they
//! accept has one reading: a length only from exactly one plain
//! Content-Length, chunked only from exactly one `chunked` and no length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_http::h1::framing::{self, BodyFraming, RequestFraming};

fuzz_target!(|data: &[u8]| {
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
});
