//! `cargo +nightly fuzz run proxy_protocol`: the PROXY protocol parser must
//! never panic, never claim more bytes than it was given, and round-trip
//! what it parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proxy::proxy_protocol::{parse, write_v1, write_v2};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(h)) = parse(data) {
        assert!(h.len <= data.len());
        if let Some((src, dst)) = h.addrs {
            let v1 = write_v1(src, dst);
            assert_eq!(parse(&v1).unwrap().unwrap().addrs.map(|a| a.0.port()), Some(src.port()));
            let v2 = write_v2(src, dst);
            assert_eq!(parse(&v2).unwrap().unwrap().len, v2.len());
        }
    }
});
