//! Fuzzes `static_files::path::normalize`: whatever the input, an accepted
//! path has no `.`/`..`/empty segment, no NUL or backslash, is idempotent,
//! and joined to a root never leaves it. Run with
//! `cargo +nightly fuzz run path_normalize` from the repository root.

#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use weir_static::path::normalize;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = normalize(raw) else {
        return;
    };
    let key = p.key();
    assert!(key.starts_with('/'), "{raw:?} -> {key:?}");
    assert!(!key.contains("//"), "{raw:?} -> {key:?}");
    assert!(!key.contains('\\') && !key.contains('\0'), "{raw:?} -> {key:?}");
    for seg in p.segments() {
        assert!(!seg.is_empty() && seg != "." && seg != "..", "{raw:?} -> {key:?}");
    }
    let root = Path::new("/srv/root");
    let mut joined = root.to_path_buf();
    for seg in p.segments() {
        joined.push(seg);
    }
    assert!(joined.starts_with(root), "{raw:?} -> {joined:?}");
    assert!(
        joined.components().all(|c| !matches!(c, Component::ParentDir)),
        "{raw:?} -> {joined:?}"
    );
    // Already-normal input is its own key.
    if weir_static::path::is_already_normal(raw) {
        assert_eq!(key, raw);
    }
});
