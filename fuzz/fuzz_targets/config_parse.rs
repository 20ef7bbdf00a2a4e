//! `scripts/fuzz.sh config_parse`: libFuzzer's inputs to `weir_fuzz::config_parse`, whose
//! doc says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::config_parse(data));
