//! The field names a serde struct accepts, read from its derived
//! `Deserialize` impl, so that "did you mean" suggestions come from the same
//! structs that parse the file and can never drift from them.
//!
//! serde has no public reflection; this deserializer only answers
//! `deserialize_struct` by recording the `fields` list and then failing.

use serde::Deserialize;
use serde::de::{self, Visitor};

#[derive(Debug)]
struct Captured(&'static [&'static str]);

impl std::fmt::Display for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("captured")
    }
}
impl std::error::Error for Captured {}
impl de::Error for Captured {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Captured(&[])
    }
}

struct Spy;

impl<'de> de::Deserializer<'de> for Spy {
    type Error = Captured;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Captured> {
        Err(Captured(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Captured> {
        Err(Captured(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The keys `T` accepts (empty if `T` is not a plain struct).
pub fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(Spy) {
        Err(Captured(f)) => f,
        Ok(_) => &[],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_fields_of_a_derived_struct() {
        let f = super::fields::<super::super::raw::RawTls>();
        assert_eq!(f, &["cert", "key", "issuer", "on_demand"]);
    }
}
