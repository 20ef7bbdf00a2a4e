//! The file's text read into [`RawConfig`]: TOML syntax and types, and every
//! key no struct of `raw` has, each reported at its `file:line:col` with the
//! closest key allowed in its table ([`introspect`](crate::introspect)
//! reads them from the same structs).

use std::ops::Range;

use crate::error::{Collector, suggest};
use crate::introspect::fields_at;
use crate::raw::RawConfig;

/// The raw config, or `None` after a syntax or type error (reported in `c`
/// with the unknown keys seen before it).
pub(crate) fn raw(c: &mut Collector<'_>, src: &str) -> Option<RawConfig> {
    // serde stops at the first type error, so unknown keys are collected on
    // the way (serde_ignored) to report them all.
    let mut unknown: Vec<Vec<String>> = Vec::new();
    let parsed = toml::Deserializer::parse(src)
        .and_then(|de| serde_ignored::deserialize(de, |path| unknown.push(path_segments(&path))));
    let raw = match parsed {
        Ok(r) => Some(r),
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            c.at(span, e.message().trim().to_string());
            None
        }
    };
    report_unknown(c, src, &unknown);
    raw
}

fn path_segments(path: &serde_ignored::Path<'_>) -> Vec<String> {
    use serde_ignored::Path as P;
    match path {
        P::Root => Vec::new(),
        P::Seq { parent, index } => {
            let mut v = path_segments(parent);
            v.push(index.to_string());
            v
        }
        P::Map { parent, key } => {
            let mut v = path_segments(parent);
            // `Spanned<T>` deserializes through a private wrapper table.
            if !key.starts_with("$__serde_spanned") {
                v.push(key.clone());
            }
            v
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            path_segments(parent)
        }
    }
}

fn report_unknown(c: &mut Collector<'_>, src: &str, unknown: &[Vec<String>]) {
    let doc = toml::de::DeTable::parse(src).ok();
    for path in unknown {
        let Some((key, parent)) = path.split_last() else {
            continue;
        };
        let span = doc
            .as_ref()
            .and_then(|d| key_span(d.get_ref(), path))
            .unwrap_or(0..0);
        let dotted = path.join(".");
        let known = fields_at::<RawConfig>(parent);
        let msg = match suggest(key, known) {
            Some(s) => format!("unknown key `{dotted}`: did you mean `{s}`?"),
            None if !known.is_empty() => format!(
                "unknown key `{dotted}`; the keys allowed here are: {}",
                known.join(", ")
            ),
            None => format!("unknown key `{dotted}`"),
        };
        c.at(span, msg);
    }
}

/// The span of the key at `path`, through tables and arrays of tables (a
/// `[[site."x".route]]` is element `n` of `site.x.route`; serde_ignored
/// names it by its index).
pub(crate) fn key_span(table: &toml::de::DeTable<'_>, path: &[String]) -> Option<Range<usize>> {
    let (first, rest) = path.split_first()?;
    let (k, v) = table.iter().find(|(k, _)| k.get_ref().as_ref() == first)?;
    if rest.is_empty() {
        return Some(k.span());
    }
    value_key_span(v.get_ref(), rest)
}

fn value_key_span(v: &toml::de::DeValue<'_>, path: &[String]) -> Option<Range<usize>> {
    match v {
        toml::de::DeValue::Table(t) => key_span(t, path),
        toml::de::DeValue::Array(a) => {
            let (index, rest) = path.split_first()?;
            let elem = a.get(index.parse::<usize>().ok()?)?;
            value_key_span(elem.get_ref(), rest)
        }
        _ => None,
    }
}
