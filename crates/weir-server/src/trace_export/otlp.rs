//! OTLP's `ExportTraceServiceRequest` in protobuf (opentelemetry-proto's
//! `collector/trace/v1` and `trace/v1`), written from weir's span records.
//! Only the fields weir fills; field numbers are the protocol's. The
//! spans' attributes are OTLP bytes already (`weir_http::trace::wire`).

use weir_http::trace::wire::{
    bytes, field_len, fixed64, key_value, string, tag, varint, varint_field, varint_len,
};
use weir_http::trace::{Record, Value};

/// One request holding every span of `spans`, under one resource (the
/// `service.name`) and one instrumentation scope (`weir`).
pub(super) fn encode(service: &str, version: &str, spans: &[Record]) -> Vec<u8> {
    let mut scope_spans = Vec::with_capacity(spans.len() * 400 + 32);
    message(&mut scope_spans, 1, |s| {
        string(s, 1, "weir");
        string(s, 2, version);
    });
    for sp in spans {
        // The length first, so the span is written in place.
        let len = span_len(sp);
        tag(&mut scope_spans, 2, 2);
        varint(&mut scope_spans, len as u64);
        let start = scope_spans.len();
        span(&mut scope_spans, sp);
        debug_assert_eq!(scope_spans.len() - start, len);
    }
    let mut resource_spans = Vec::with_capacity(scope_spans.len() + 64);
    message(&mut resource_spans, 1, |r| {
        key_value(r, 1, "service.name", Value::Str(service));
    });
    bytes(&mut resource_spans, 2, &scope_spans);
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    bytes(&mut out, 1, &resource_spans);
    out
}

/// `Span`.
fn span(out: &mut Vec<u8>, s: &Record) {
    bytes(out, 1, &s.trace_id.to_be_bytes());
    bytes(out, 2, &s.span_id.to_be_bytes());
    if s.parent_id != 0 {
        bytes(out, 4, &s.parent_id.to_be_bytes());
    }
    string(out, 5, &s.name);
    varint_field(out, 6, s.kind as u64);
    fixed64(out, 7, s.start);
    fixed64(out, 8, s.end.max(s.start));
    out.extend_from_slice(&s.attrs);
    if s.error {
        // Status { code = STATUS_CODE_ERROR }.
        tag(out, 15, 2);
        varint(out, 2);
        varint_field(out, 3, 2);
    }
}

/// How many bytes [`span`] writes for `s`.
fn span_len(s: &Record) -> usize {
    let parent = if s.parent_id != 0 { field_len(4, 8) } else { 0 };
    let status = if s.error { 4 } else { 0 };
    field_len(1, 16)
        + field_len(2, 8)
        + parent
        + field_len(5, s.name.len())
        + 1
        + varint_len(s.kind as u64)
        + 2 * 9
        + s.attrs.len()
        + status
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
    use weir_http::trace::Kind;

    /// The bytes of a one-span request, field by field.
    #[test]
    fn a_span_is_written_with_the_protocols_field_numbers() {
        let r = Record {
            trace_id: 1,
            span_id: 2,
            parent_id: 3,
            name: "GET".into(),
            kind: Kind::Client,
            start: 10,
            end: 20,
            error: true,
            attrs: {
                let mut a = Vec::new();
                key_value(&mut a, 9, "n", Value::Int(7));
                a
            },
        };
        let mut s = Vec::new();
        span(&mut s, &r);
        assert_eq!(span_len(&r), s.len());
        let root = Record {
            parent_id: 0,
            error: false,
            name: "a longer name, of more than a few bytes".into(),
            ..r.clone()
        };
        let mut one = Vec::new();
        span(&mut one, &root);
        assert_eq!(span_len(&root), one.len());
        let mut want = vec![0x0a, 16];
        want.extend_from_slice(&1u128.to_be_bytes());
        want.extend_from_slice(&[0x12, 8]);
        want.extend_from_slice(&2u64.to_be_bytes());
        want.extend_from_slice(&[0x22, 8]);
        want.extend_from_slice(&3u64.to_be_bytes());
        want.extend_from_slice(&[0x2a, 3, b'G', b'E', b'T', 0x30, 3, 0x39]);
        want.extend_from_slice(&10u64.to_le_bytes());
        want.push(0x41);
        want.extend_from_slice(&20u64.to_le_bytes());
        // attributes: KeyValue { key "n", value AnyValue { int_value 7 } }
        want.extend_from_slice(&[0x4a, 7, 0x0a, 1, b'n', 0x12, 2, 0x18, 7]);
        // status: { code 2 }
        want.extend_from_slice(&[0x7a, 2, 0x18, 2]);
        assert_eq!(s, want);
    }
}
