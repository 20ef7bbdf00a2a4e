//! `cargo +nightly fuzz run h1_response`: weir's own upstream client
//! (`proxy::h1_client`) must never panic on what an upstream sends, never
//! yield more body than was sent or declared, and decode a response the
//! same however its bytes are split across reads.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let step = data.first().copied().unwrap_or(1) as usize % 32 + 1;
    weir_proxy::h1_client::check_response(data, step);
});
