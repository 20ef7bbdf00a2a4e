//! `cargo +nightly fuzz run h1_parse`: weir's HTTP/1.1 request parser
//! (`server::http1::parse`) must never panic; a request it takes is exactly
//! one complete head of a shape it may serve.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let max_head = 64 + data.first().copied().unwrap_or(0) as usize * 16;
    weir_server::http1::check_parse(data, max_head);
});
