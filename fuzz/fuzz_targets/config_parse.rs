//! Fuzzes config validation: any text must yield a config or positioned
//! errors, never a panic, and every error must point inside the text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errs) = weir_config::load_str("fuzz.toml", src, std::path::Path::new("/nonexistent")) {
        assert!(!errs.0.is_empty());
        let lines = src.lines().count().max(1) + 1;
        for d in &errs.0 {
            assert!(d.line >= 1 && d.line <= lines, "{d} outside {lines} lines");
            assert!(d.col >= 1);
        }
    }
});
