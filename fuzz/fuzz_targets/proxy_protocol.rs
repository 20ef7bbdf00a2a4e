//! `scripts/fuzz.sh proxy_protocol`: libFuzzer's inputs to `weir_fuzz::proxy_protocol`, whose
//! doc says what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::proxy_protocol(data));
