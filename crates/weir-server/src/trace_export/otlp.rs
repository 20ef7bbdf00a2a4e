//! OTLP's `ExportTraceServiceRequest` in protobuf (opentelemetry-proto's
//! `collector/trace/v1` and `trace/v1`), written from weir's span records.
//! Only the fields weir fills; field numbers are the protocol's.

use weir_http::trace::{Record, Value};

/// One request holding every span of `spans`, under one resource (the
/// `service.name`) and one instrumentation scope (`weir`).
pub(super) fn encode(service: &str, version: &str, spans: &[Record]) -> Vec<u8> {
    let mut scope_spans = Vec::with_capacity(spans.len() * 200 + 32);
    message(&mut scope_spans, 1, |s| {
        string(s, 1, "weir");
        string(s, 2, version);
    });
    let mut one = Vec::with_capacity(256);
    for sp in spans {
        one.clear();
        span(&mut one, sp);
        bytes(&mut scope_spans, 2, &one);
    }
    let mut resource_spans = Vec::with_capacity(scope_spans.len() + 64);
    message(&mut resource_spans, 1, |r| {
        key_value(
            r,
            1,
            "service.name",
            &Value::Str(service.to_string().into()),
        );
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
    for (k, v) in &s.attrs {
        key_value(out, 9, k, v);
    }
    if s.error {
        // Status { code = STATUS_CODE_ERROR }.
        tag(out, 15, 2);
        varint(out, 2);
        varint_field(out, 3, 2);
    }
}

/// `KeyValue` with its `AnyValue`, as field `field`, written in place: the
/// lengths are computed first, so a span's dozen attributes cost no
/// allocation and no copy.
fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    let any = match v {
        Value::Str(s) => field_len(1, s.len()),
        Value::Bool(b) => 1 + varint_len(u64::from(*b)),
        Value::Int(n) => 1 + varint_len(*n as u64),
    };
    tag(out, field, 2);
    varint(out, (field_len(1, k.len()) + field_len(2, any)) as u64);
    string(out, 1, k);
    tag(out, 2, 2);
    varint(out, any as u64);
    match v {
        Value::Str(s) => string(out, 1, s),
        Value::Bool(b) => varint_field(out, 2, u64::from(*b)),
        Value::Int(n) => varint_field(out, 3, *n as u64),
    }
}

/// The bytes of a length-delimited field of `n` bytes (field numbers
/// below 16: a one-byte tag).
fn field_len(field: u32, n: usize) -> usize {
    debug_assert!(field < 16);
    1 + varint_len(n as u64) + n
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 0);
    varint(out, v);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
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

    #[test]
    fn varints_are_base_128_little_endian() {
        let mut v = Vec::new();
        varint(&mut v, 300);
        assert_eq!(v, [0xac, 0x02]);
        v.clear();
        varint(&mut v, (-1i64) as u64);
        assert_eq!(v.len(), 10);
        for n in [0, 1, 127, 128, 300, 16_383, 16_384, u64::MAX] {
            v.clear();
            varint(&mut v, n);
            assert_eq!(varint_len(n), v.len(), "{n}");
        }
    }

    /// An attribute written in place is the nested messages' bytes.
    #[test]
    fn a_string_attribute_is_a_key_value_holding_an_any_value() {
        let mut out = Vec::new();
        key_value(&mut out, 9, "url.path", &Value::Str("/a".into()));
        let mut want = vec![0x4a, 16, 0x0a, 8];
        want.extend_from_slice(b"url.path");
        want.extend_from_slice(&[0x12, 4, 0x0a, 2, b'/', b'a']);
        assert_eq!(out, want);
    }

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
            attrs: vec![("n", Value::Int(7))],
        };
        let mut s = Vec::new();
        span(&mut s, &r);
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
