//! `cargo +nightly fuzz run h1_framing`: the request-smuggling framing
//! check must never panic and never release more bytes than it was given,
//! however the input is split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_http::smuggling::{Framing, Step};

fuzz_target!(|data: &[u8]| {
    let split = data.first().copied().unwrap_or(1).max(1) as usize;
    let mut f = Framing::new(8192);
    let mut pending: Vec<u8> = Vec::new();
    for piece in data.chunks(split) {
        pending.extend_from_slice(piece);
        loop {
            match f.advance(&pending) {
                Ok(Step::Release(n)) => {
                    assert!(n <= pending.len());
                    if n == 0 {
                        break;
                    }
                    pending.drain(..n);
                }
                Ok(Step::NeedMore) | Err(_) => break,
            }
        }
    }
});
