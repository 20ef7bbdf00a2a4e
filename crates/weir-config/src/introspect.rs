//! The keys a table of the file accepts, read from the derived `Deserialize`
//! impls of the `raw` structs, so that "did you mean" suggestions come from
//! the same structs that parse the file and can never drift from them: a new
//! field is a new allowed key, with no table to update.
//!
//! serde has no public reflection. [`Spy`] is a deserializer that walks a
//! path of keys (`site`, `x`, `route`, `0`, `proxy`) through the types as
//! serde drives it: each struct or map is handed one entry, the next key of
//! the path, each sequence one element. Where the path ends, the struct
//! being read names its `fields` to `deserialize_struct`; the spy records
//! them and fails, so nothing is ever built.
//!
//! A hand-written `Deserialize` that reads a table through `deserialize_any`
//! (a shorthand like `cache = true` or `php = "addr"`) must call
//! `deserialize_struct` with the table's fields instead ([`fields`] gives
//! them), or its keys are invisible here; TOML treats the two calls alike.

use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// The outcome of every walk: the fields where the path ended (empty if it
/// ended anywhere but at a struct).
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

/// The rest of the path still to walk.
#[derive(Clone, Copy)]
struct Spy<'p>(&'p [String]);

impl<'p> Spy<'p> {
    /// A table holding only the next key of the path.
    fn table<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Captured> {
        match self.0 {
            [key, rest @ ..] => visitor.visit_map(Entry {
                key: Some(Key::Path(key)),
                value: Spy(rest),
            }),
            [] => Err(Captured(&[])),
        }
    }
}

impl<'de> de::Deserializer<'de> for Spy<'_> {
    type Error = Captured;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Captured> {
        self.table(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Captured> {
        if serde_spanned::de::is_spanned(name) {
            // `Spanned<T>` reads a private table of start, end and value;
            // only the value lies on the path (serde_ignored's paths skip it).
            let value = fields.iter().find(|f| f.ends_with("value"));
            return visitor.visit_map(Entry {
                key: value.copied().map(Key::Static),
                value: self,
            });
        }
        if self.0.is_empty() {
            return Err(Captured(fields));
        }
        self.table(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Captured> {
        // The path names an element by its index; every element has one type.
        match self.0 {
            [_, rest @ ..] => visitor.visit_seq(Element(Some(Spy(rest)))),
            [] => Err(Captured(&[])),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Captured> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Captured> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct map enum identifier
        ignored_any
    }
}

enum Key<'p> {
    Path(&'p str),
    Static(&'static str),
}

/// A table of one entry (or none).
struct Entry<'p> {
    key: Option<Key<'p>>,
    value: Spy<'p>,
}

impl<'de> MapAccess<'de> for Entry<'_> {
    type Error = Captured;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Captured> {
        match self.key.take() {
            Some(Key::Path(k)) => seed
                .deserialize(StrDeserializer::<Captured>::new(k))
                .map(Some),
            // Borrowed: `Spanned` reads its keys as `&str`.
            Some(Key::Static(k)) => seed
                .deserialize(BorrowedStrDeserializer::<Captured>::new(k))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Captured> {
        seed.deserialize(self.value)
    }
}

/// A sequence of one element.
struct Element<'p>(Option<Spy<'p>>);

impl<'de> SeqAccess<'de> for Element<'_> {
    type Error = Captured;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Captured> {
        self.0.take().map(|s| seed.deserialize(s)).transpose()
    }
}

/// The keys `T` accepts (empty if `T` is not a plain struct).
pub fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    fields_at::<T>(&[])
}

/// The keys accepted in the table at `path` under `T`, as serde_ignored
/// names a path (map keys and sequence indexes); empty where no struct is
/// (a map of names, a value, a path that leads nowhere).
pub fn fields_at<'de, T: Deserialize<'de>>(path: &[String]) -> &'static [&'static str] {
    match T::deserialize(Spy(path)) {
        Err(Captured(f)) => f,
        Ok(_) => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::{fields, fields_at};
    use crate::raw::*;

    fn at(path: &str) -> &'static [&'static str] {
        let p: Vec<String> = path.split('.').map(String::from).collect();
        fields_at::<RawConfig>(if path.is_empty() { &[] } else { &p })
    }

    #[test]
    fn reads_the_fields_of_a_derived_struct() {
        let f = fields::<RawTls>();
        assert_eq!(f, &["cert", "key", "issuer", "on_demand"]);
    }

    #[test]
    fn walks_maps_sequences_options_and_spans() {
        assert_eq!(at(""), fields::<RawConfig>());
        assert_eq!(at("server.timeouts"), fields::<RawTimeouts>());
        assert_eq!(at("site.a"), fields::<RawSite>());
        assert_eq!(at("site.a.tls"), fields::<RawTls>());
        assert_eq!(at("site.a.route.3"), fields::<RawRoute>());
        assert_eq!(at("site.a.route.0.match"), fields::<RawMatch>());
        assert_eq!(at("site.a.limit.1"), fields::<RawLimit>());
        assert_eq!(at("tcp.pg"), fields::<RawStream>());
        assert_eq!(at("tcp.pg.passive"), fields::<RawPassive>());
        assert_eq!(at("tls.on_demand"), fields::<RawOnDemand>());
        assert_eq!(at("cache.disk"), fields::<RawCacheDisk>());
        assert_eq!(at("cluster"), fields::<RawCluster>());
        // A table the hand-kept list this replaced had missed.
        assert_eq!(at("tls.acme.eab"), fields::<RawEab>());
    }

    /// The hand-written shorthands (`cache = true`, `proxy = "addr"`,
    /// `php = "addr"`) still show the table they stand for.
    #[test]
    fn sees_through_the_shorthands() {
        assert_eq!(at("site.a.cache"), fields::<RawCache>());
        assert_eq!(at("site.a.route.0.cache.key"), fields::<RawCacheKey>());
        assert_eq!(at("site.a.proxy"), fields::<RawProxy>());
        assert_eq!(at("site.a.route.2.proxy.health"), fields::<RawHealth>());
        assert_eq!(at("site.a.php"), fields::<RawFastCgi>());
        assert_eq!(at("site.a.route.0.fastcgi.passive"), fields::<RawPassive>());
        assert_eq!(at("site.a.app"), fields::<RawApp>());
        assert_eq!(at("site.a.passthrough.health"), fields::<RawHealth>());
        assert!(at("site.a.proxy").contains(&"retries"));
    }

    #[test]
    fn no_fields_where_no_struct_is() {
        assert!(at("site").is_empty(), "a map of names");
        assert!(at("site.a.root").is_empty(), "a value");
        assert!(at("site.a.nothing").is_empty(), "an unknown key");
        assert!(at("site.a.headers").is_empty(), "a map of fields");
    }
}
