//! `scripts/fuzz.sh h1_body`: libFuzzer's inputs to `weir_fuzz::h1_body`, whose
//! doc says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::h1_body(data));
