//! OTLP's `ExportTraceServiceRequest` in protobuf (opentelemetry-proto's
//! `collector/trace/v1` and `trace/v1`) around spans that are OTLP bytes
//! already (`weir_http::trace::wire`), and cutting those into batches.
//! Only the fields weir fills; field numbers are the protocol's.

use weir_http::trace::Value;
use weir_http::trace::wire::{SCOPE_SPANS, bytes, key_value, string};

/// One request holding `spans` (`ScopeSpans.spans` fields as
/// `weir_http::trace::emit` wrote them), under one resource (the
/// `service.name`) and one instrumentation scope (`weir`).
pub(super) fn encode(service: &str, version: &str, spans: &[u8]) -> Vec<u8> {
    let mut scope_spans = Vec::with_capacity(spans.len() + 32);
    message(&mut scope_spans, 1, |s| {
        string(s, 1, "weir");
        string(s, 2, version);
    });
    scope_spans.extend_from_slice(spans);
    let mut resource_spans = Vec::with_capacity(scope_spans.len() + 64);
    message(&mut resource_spans, 1, |r| {
        key_value(r, 1, "service.name", Value::Str(service));
    });
    bytes(&mut resource_spans, 2, &scope_spans);
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    bytes(&mut out, 1, &resource_spans);
    out
}

/// `spans` cut into runs of at most `most` spans, each with its count.
pub(super) fn batches(spans: &[u8], most: usize) -> Vec<(&[u8], usize)> {
    let mut out = Vec::new();
    let (mut start, mut at, mut n) = (0, 0, 0);
    while at < spans.len() {
        debug_assert_eq!(spans[at], (SCOPE_SPANS << 3 | 2) as u8);
        // The tag's byte, then the length as a varint.
        let (mut len, mut shift) = (0usize, 0);
        at += 1;
        while let Some(&b) = spans.get(at) {
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        at = (at + len).min(spans.len());
        n += 1;
        if n == most {
            out.push((&spans[start..at], n));
            (start, n) = (at, 0);
        }
    }
    if n > 0 {
        out.push((&spans[start..], n));
    }
    out
}

/// A nested message: written apart, then as length-delimited bytes.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    bytes(out, field, &inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_http::trace::wire::span_field;
    use weir_http::trace::{Kind, Record};

    fn spans(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let mut r = Record::new(1, 0, "GET", Kind::Server);
            // Some spans past a one-byte length.
            r.attr("k", "v".repeat(i * 40).as_str());
            span_field(&mut out, &r);
        }
        out
    }

    #[test]
    fn spans_are_cut_into_batches_at_span_boundaries() {
        let all = spans(7);
        let b = batches(&all, 3);
        assert_eq!(b.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [3, 3, 1]);
        let joined: Vec<u8> = b.iter().flat_map(|(s, _)| s.iter().copied()).collect();
        assert_eq!(joined, all);
        assert_eq!(batches(&all, 7).len(), 1);
        assert!(batches(&[], 3).is_empty());
        assert_eq!(batches(&spans(1), 3)[0].1, 1);
    }
}
