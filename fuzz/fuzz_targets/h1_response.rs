//! `scripts/fuzz.sh h1_response`: libFuzzer's inputs to `weir_fuzz::h1_response`, whose
//! doc says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::h1_response(data));
