//! `scripts/fuzz.sh path_normalize`: libFuzzer's inputs to `weir_fuzz::path_normalize`, whose
//! doc says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::path_normalize(data));
