//! The protobuf wire format OTLP spans are written in: varints, tags,
//! length-delimited fields, the `KeyValue` attributes a span's record
//! holds, and the `Span` message itself. Writing only: nothing here
//! allocates beyond the buffer it grows.

use super::{Record, Value};

/// `ScopeSpans.spans`' field number.
pub const SCOPE_SPANS: u32 = 2;

/// `Span.attributes`' field number.
pub const SPAN_ATTRIBUTES: u32 = 9;

/// `KeyValue` with its `AnyValue`, as field `field`, written in place: the
/// lengths are computed first, so an attribute costs no allocation and no
/// copy beyond its own bytes.
pub fn key_value(out: &mut Vec<u8>, field: u32, k: &str, v: Value<'_>) {
    let any = match v {
        Value::Str(s) => field_len(1, s.len()),
        Value::Bool(b) => 1 + varint_len(u64::from(b)),
        Value::Int(n) => 1 + varint_len(n as u64),
    };
    tag(out, field, 2);
    varint(out, (field_len(1, k.len()) + field_len(2, any)) as u64);
    string(out, 1, k);
    tag(out, 2, 2);
    varint(out, any as u64);
    match v {
        Value::Str(s) => string(out, 1, s),
        Value::Bool(b) => varint_field(out, 2, u64::from(b)),
        Value::Int(n) => varint_field(out, 3, n as u64),
    }
}

/// The bytes of a length-delimited field of `n` bytes (field numbers
/// below 16: a one-byte tag).
pub fn field_len(field: u32, n: usize) -> usize {
    debug_assert!(field < 16);
    1 + varint_len(n as u64) + n
}

pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

pub fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 0);
    varint(out, v);
}

pub fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

/// `s` as a `ScopeSpans.spans` field: its length first, so the span is
/// written in place.
pub fn span_field(out: &mut Vec<u8>, s: &Record) {
    let len = span_len(s);
    tag(out, SCOPE_SPANS, 2);
    varint(out, len as u64);
    let start = out.len();
    span(out, s);
    debug_assert_eq!(out.len() - start, len);
}

/// `Span`: IDs, name, kind, times, the attributes as written, and status
/// ERROR when it failed.
fn span(out: &mut Vec<u8>, s: &Record) {
    bytes(out, 1, &s.trace_id.to_be_bytes());
    bytes(out, 2, &s.span_id.to_be_bytes());
    if s.parent_id != 0 {
        bytes(out, 4, &s.parent_id.to_be_bytes());
    }
    tag(out, 5, 2);
    varint(out, name_len(s) as u64);
    out.extend_from_slice(s.name.as_bytes());
    if let Some(r) = &s.route {
        out.push(b' ');
        out.extend_from_slice(r.as_bytes());
    }
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

/// The span's name: its own, then its route after a space.
fn name_len(s: &Record) -> usize {
    s.name.len() + s.route.as_ref().map_or(0, |r| 1 + r.len())
}

/// How many bytes [`span`] writes for `s`.
fn span_len(s: &Record) -> usize {
    let parent = if s.parent_id != 0 { field_len(4, 8) } else { 0 };
    let status = if s.error { 4 } else { 0 };
    field_len(1, 16)
        + field_len(2, 8)
        + parent
        + field_len(5, name_len(s))
        + 1
        + varint_len(s.kind as u64)
        + 2 * 9
        + s.attrs.len()
        + status
}

#[cfg(test)]
mod tests {
    use super::*;

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
        key_value(&mut out, 9, "url.path", Value::Str("/a"));
        let mut want = vec![0x4a, 16, 0x0a, 8];
        want.extend_from_slice(b"url.path");
        want.extend_from_slice(&[0x12, 4, 0x0a, 2, b'/', b'a']);
        assert_eq!(out, want);
    }

    /// A value past 127 bytes takes two-byte lengths at every level.
    #[test]
    fn a_long_attribute_has_multi_byte_lengths() {
        let long = "u".repeat(200);
        let mut out = Vec::new();
        key_value(&mut out, 9, "k", Value::Str(&long));
        let mut want = vec![
            0x4a, 0xd1, 0x01, 0x0a, 1, b'k', 0x12, 0xcb, 0x01, 0x0a, 0xc8, 0x01,
        ];
        want.extend_from_slice(long.as_bytes());
        assert_eq!(out, want);
    }

    /// The bytes of a span, field by field; its length computed first.
    #[test]
    fn a_span_is_written_with_the_protocols_field_numbers() {
        let r = Record {
            trace_id: 1,
            span_id: 2,
            parent_id: 3,
            name: "GET".into(),
            route: None,
            kind: super::super::Kind::Client,
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
        assert_eq!(span_len(&r), s.len());
        let mut field = Vec::new();
        span_field(&mut field, &r);
        assert_eq!(field[..2], [0x12, s.len() as u8]);
        assert_eq!(field[2..], s[..]);
        // A root span, no status, a name past a one-byte length.
        let root = Record {
            parent_id: 0,
            error: false,
            name: "n".repeat(200).into(),
            ..r.clone()
        };
        let mut one = Vec::new();
        span(&mut one, &root);
        assert_eq!(span_len(&root), one.len());
        // A route's label follows the name after a space.
        let routed = Record {
            route: Some("/api/*".into()),
            ..r.clone()
        };
        let mut named = Vec::new();
        span(&mut named, &routed);
        assert_eq!(span_len(&routed), named.len());
        let name = b"\x2a\x0aGET /api/*";
        assert!(named.windows(name.len()).any(|w| w == name), "{named:?}");
    }
}
