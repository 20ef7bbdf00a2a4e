//! The protobuf wire format OTLP spans are written in: varints, tags,
//! length-delimited fields and the `KeyValue` attributes a span's record
//! holds. Writing only: nothing here allocates beyond the buffer it grows.

use super::Value;

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
}
