//! Conditional requests (RFC 9110 §13): the five preconditions (If-Match,
//! If-Unmodified-Since, If-None-Match, If-Modified-Since, If-Range)
//! evaluated in the order of §13.2.2, entity-tag lists with their strong and
//! weak comparison (§8.8.3), and the fields a 304 keeps (§15.4.5). Every
//! handler that answers from a stored representation (static files, the
//! cache) asks here.
//!
//! Decides only; never builds a body, never allocates (validators are
//! compared as bytes where they lie).

use http::Method;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::fields::http_date;

/// The validators of the selected representation.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// Its `ETag` as sent (`W/` and quotes included); `None` without one.
    pub etag: Option<&'a [u8]>,
    /// Its `Last-Modified`, whole seconds since the epoch.
    pub last_modified: Option<u64>,
}

/// What the preconditions say about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answer as without preconditions; a `Range` may be honoured.
    Proceed,
    /// Answer with the whole representation: `If-Range` names another one
    /// (§13.1.5), so the `Range` is ignored.
    IgnoreRange,
    /// 304 (Not Modified), with [`not_modified_fields`].
    NotModified,
    /// 412 (Precondition Failed).
    PreconditionFailed,
}

/// One entity-tag (§8.8.3): `W/"xyzzy"` or `"xyzzy"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    pub weak: bool,
    /// The opaque-tag, quotes included.
    pub opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    /// Exactly one entity-tag, optional whitespace around it.
    pub fn parse(v: &'a [u8]) -> Option<EntityTag<'a>> {
        let v = v.trim_ascii();
        let (tag, rest) = one_tag(v)?;
        rest.is_empty().then_some(tag)
    }

    /// Strong comparison (§8.8.3.2): neither weak, same opaque-tag.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// Weak comparison: same opaque-tag, `W/` ignored on both sides.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }
}

/// An entity-tag at the start of `v`, and what follows it. `etagc` has no
/// `"`, so the first quote after the opening one closes the tag: a comma
/// inside it is part of the tag, not a list separator.
fn one_tag(v: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    // `W/` is case-sensitive (%s"W/").
    let (weak, v) = match v.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    if v.first() != Some(&b'"') {
        return None;
    }
    let close = v[1..].iter().position(|&c| c == b'"')? + 1;
    let inner = &v[1..close];
    if !inner.iter().all(|&c| c == 0x21 || (c >= 0x23 && c != 0x7f)) {
        return None;
    }
    Some((
        EntityTag {
            weak,
            opaque: &v[..=close],
        },
        &v[close + 1..],
    ))
}

/// One field line of `If-Match` or `If-None-Match`.
#[derive(Debug, PartialEq, Eq)]
enum TagLine {
    /// `*`: any current representation.
    Any,
    /// A list of entity-tags; true when one satisfies the comparison.
    Matched(bool),
    /// Not `*` nor an entity-tag list: it names nothing.
    Invalid,
}

/// Reads one field line, comparing each tag with `eq`. Empty list elements
/// are allowed (§5.6.1), `*` only alone.
fn tag_line<'a>(v: &'a [u8], mut eq: impl FnMut(&EntityTag<'a>) -> bool) -> TagLine {
    let mut rest = v.trim_ascii();
    if rest == b"*" {
        return TagLine::Any;
    }
    let mut matched = false;
    let mut any = false;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(r) = rest.strip_prefix(b",") {
            rest = r;
            continue;
        }
        if rest.is_empty() {
            break;
        }
        let Some((tag, r)) = one_tag(rest) else {
            return TagLine::Invalid;
        };
        any = true;
        matched |= eq(&tag);
        rest = r.trim_ascii_start();
        if !rest.is_empty() && rest[0] != b',' {
            return TagLine::Invalid;
        }
    }
    if any {
        TagLine::Matched(matched)
    } else {
        TagLine::Invalid
    }
}

/// Whether any field line of `name` is `*` or lists a tag that `eq` takes.
/// A line that does not parse names nothing, so a garbled `If-Match` fails
/// and a garbled `If-None-Match` never turns into a 304.
fn any_tag<'h>(
    h: &'h HeaderMap,
    name: HeaderName,
    mut eq: impl FnMut(&EntityTag<'h>) -> bool,
) -> bool {
    h.get_all(name)
        .iter()
        .any(|v| match tag_line(v.as_bytes(), &mut eq) {
            TagLine::Any | TagLine::Matched(true) => true,
            TagLine::Matched(false) | TagLine::Invalid => false,
        })
}

/// The one line of a single-valued field; `None` when absent or repeated.
fn single(h: &HeaderMap, name: HeaderName) -> Option<&HeaderValue> {
    let mut all = h.get_all(name).iter();
    let v = all.next()?;
    all.next().is_none().then_some(v)
}

/// A date precondition's value; `None` makes the recipient ignore the field
/// (§13.1.3, §13.1.4): absent, not an HTTP-date, or a list of dates.
fn date_field(h: &HeaderMap, name: HeaderName) -> Option<u64> {
    http_date(single(h, name)?.as_bytes())
}

/// If-Range (§13.1.5): true when the validator names this representation:
/// an entity-tag by strong comparison (a weak one never), a date exactly
/// equal to Last-Modified.
fn if_range(v: &HeaderValue, rep: &Validators<'_>, rep_tag: Option<&EntityTag<'_>>) -> bool {
    let b = v.as_bytes().trim_ascii();
    // "examining the first three characters for a DQUOTE" (`W/"`).
    if b.iter().take(3).any(|&c| c == b'"') {
        return EntityTag::parse(b)
            .zip(rep_tag)
            .is_some_and(|(t, r)| t.strong_eq(r));
    }
    http_date(b)
        .zip(rep.last_modified)
        .is_some_and(|(d, lm)| d == lm)
}

/// Evaluates the request's preconditions against the selected
/// representation in the order of RFC 9110 §13.2.2. Call it only when the
/// answer without them would be 2xx (§13.2.1).
pub fn evaluate(method: &Method, req: &HeaderMap, rep: &Validators<'_>) -> Outcome {
    let tag = rep.etag.and_then(EntityTag::parse);
    let get_or_head = method == Method::GET || method == Method::HEAD;
    // Step 1, else step 2.
    if req.contains_key(header::IF_MATCH) {
        // `*` holds: the representation being evaluated is current.
        if !any_tag(req, header::IF_MATCH, |t| {
            tag.as_ref().is_some_and(|r| t.strong_eq(r))
        }) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(since) = date_field(req, header::IF_UNMODIFIED_SINCE)
        && let Some(lm) = rep.last_modified
        && lm > since
    {
        return Outcome::PreconditionFailed;
    }
    // Step 3, else step 4.
    if req.contains_key(header::IF_NONE_MATCH) {
        if any_tag(req, header::IF_NONE_MATCH, |t| {
            tag.as_ref().is_some_and(|r| t.weak_eq(r))
        }) {
            return if get_or_head {
                Outcome::NotModified
            } else {
                Outcome::PreconditionFailed
            };
        }
    } else if get_or_head
        && let Some(since) = date_field(req, header::IF_MODIFIED_SINCE)
        && let Some(lm) = rep.last_modified
        && lm <= since
    {
        return Outcome::NotModified;
    }
    // Step 5.
    if method == Method::GET
        && req.contains_key(header::RANGE)
        && req.contains_key(header::IF_RANGE)
        && !single(req, header::IF_RANGE).is_some_and(|v| if_range(v, rep, tag.as_ref()))
    {
        return Outcome::IgnoreRange;
    }
    Outcome::Proceed
}

/// Turns the fields of the 200 that would have been sent into those of a
/// 304 (§15.4.5): the body's framing and the representation metadata go;
/// the validators (`ETag`, `Last-Modified`), `Cache-Control`, `Expires`,
/// `Vary`, `Content-Location`, `Date` and fields about the response stay.
pub fn not_modified_fields(h: &mut HeaderMap) {
    for name in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::CONTENT_RANGE,
        header::CONTENT_TYPE,
        header::CONTENT_ENCODING,
        header::CONTENT_LANGUAGE,
        header::ACCEPT_RANGES,
    ] {
        h.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const V: Validators<'static> = Validators {
        etag: Some(b"\"abc\""),
        last_modified: Some(1_000_000),
    };
    const WEAK: Validators<'static> = Validators {
        etag: Some(b"W/\"abc\""),
        last_modified: Some(1_000_000),
    };
    const NONE: Validators<'static> = Validators {
        etag: None,
        last_modified: None,
    };
    const DATE_EQ: &str = "Mon, 12 Jan 1970 13:46:40 GMT"; // 1_000_000
    const DATE_BEFORE: &str = "Mon, 12 Jan 1970 13:46:39 GMT";
    const DATE_AFTER: &str = "Mon, 12 Jan 1970 13:46:41 GMT";

    fn get(pairs: &[(&str, &str)], v: &Validators<'_>) -> Outcome {
        evaluate(&Method::GET, &hm(pairs), v)
    }

    use Outcome::*;

    fn tags(v: &str) -> Result<Vec<EntityTag<'_>>, TagLine> {
        let mut out = Vec::new();
        match tag_line(v.as_bytes(), |t| {
            out.push(*t);
            false
        }) {
            TagLine::Matched(_) => Ok(out),
            other => Err(other),
        }
    }

    fn t(weak: bool, opaque: &str) -> EntityTag<'_> {
        EntityTag {
            weak,
            opaque: opaque.as_bytes(),
        }
    }

    #[test]
    fn entity_tag_lists_respect_quoted_commas() {
        assert_eq!(
            tags(r#"W/"a", "b,c" ,, "d""#),
            Ok(vec![
                t(true, "\"a\""),
                t(false, "\"b,c\""),
                t(false, "\"d\"")
            ])
        );
        assert_eq!(tags(r#""""#), Ok(vec![t(false, "\"\"")]));
        assert_eq!(tag_line(b" * ", |_| false), TagLine::Any);
        for bad in [
            "abc",
            r#""a" "b""#,
            r#""a"#,
            r#"W/ "a""#,
            r#"w/"a""#,
            r#""a", *"#,
            r#""a b""#,
            ",",
            "",
        ] {
            assert_eq!(tags(bad), Err(TagLine::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn strong_and_weak_comparison_follow_rfc9110_8_8_3_2() {
        let (s, w) = (t(false, "\"1\""), t(true, "\"1\""));
        assert!(s.strong_eq(&s));
        assert!(!w.strong_eq(&w) && !w.strong_eq(&s) && !s.strong_eq(&w));
        assert!(w.weak_eq(&w) && w.weak_eq(&s) && s.weak_eq(&w));
        assert!(!s.weak_eq(&t(false, "\"2\"")));
    }

    #[test]
    fn if_match_uses_strong_comparison() {
        assert_eq!(get(&[], &V), Proceed);
        assert_eq!(get(&[("if-match", "\"abc\"")], &V), Proceed);
        assert_eq!(get(&[("if-match", "\"x\"")], &V), PreconditionFailed);
        assert_eq!(get(&[("if-match", "W/\"abc\"")], &V), PreconditionFailed);
        assert_eq!(get(&[("if-match", "\"abc\"")], &WEAK), PreconditionFailed);
        assert_eq!(get(&[("if-match", "\"x\", \"abc\"")], &V), Proceed);
        assert_eq!(
            get(&[("if-match", "\"x\""), ("if-match", "\"abc\"")], &V),
            Proceed
        );
        assert_eq!(get(&[("if-match", "*")], &V), Proceed);
        assert_eq!(get(&[("if-match", "*")], &NONE), Proceed);
        assert_eq!(get(&[("if-match", "\"abc\"")], &NONE), PreconditionFailed);
        assert_eq!(get(&[("if-match", "garbage")], &V), PreconditionFailed);
        let comma = Validators {
            etag: Some(b"\"v1,comma\""),
            ..V
        };
        assert_eq!(
            get(&[("if-match", "\"v1\", \"v1,comma\"")], &comma),
            Proceed
        );
        assert_eq!(
            get(&[("if-match", "\"v1\", \"comma\"")], &comma),
            PreconditionFailed
        );
    }

    #[test]
    fn if_unmodified_since_fails_on_a_later_modification() {
        assert_eq!(
            get(&[("if-unmodified-since", DATE_BEFORE)], &V),
            PreconditionFailed
        );
        assert_eq!(get(&[("if-unmodified-since", DATE_EQ)], &V), Proceed);
        assert_eq!(get(&[("if-unmodified-since", DATE_AFTER)], &V), Proceed);
        // Ignored: not a date, a list, no modification date.
        assert_eq!(get(&[("if-unmodified-since", "yesterday")], &V), Proceed);
        let two = [
            ("if-unmodified-since", DATE_BEFORE),
            ("if-unmodified-since", DATE_BEFORE),
        ];
        assert_eq!(get(&two, &V), Proceed);
        assert_eq!(get(&[("if-unmodified-since", DATE_BEFORE)], &NONE), Proceed);
    }

    #[test]
    fn if_none_match_uses_weak_comparison() {
        assert_eq!(get(&[("if-none-match", "\"abc\"")], &V), NotModified);
        assert_eq!(get(&[("if-none-match", "W/\"abc\"")], &V), NotModified);
        assert_eq!(get(&[("if-none-match", "\"abc\"")], &WEAK), NotModified);
        assert_eq!(get(&[("if-none-match", "\"q\", \"abc\"")], &V), NotModified);
        assert_eq!(get(&[("if-none-match", "*")], &V), NotModified);
        assert_eq!(get(&[("if-none-match", "*")], &NONE), NotModified);
        assert_eq!(get(&[("if-none-match", "\"q\"")], &V), Proceed);
        assert_eq!(get(&[("if-none-match", "\"abc\"")], &NONE), Proceed);
        assert_eq!(get(&[("if-none-match", "abc")], &V), Proceed);
        // Quoted commas: the cache's old reading split "v1,comma" in two.
        let comma = Validators {
            etag: Some(b"\"v1,comma\""),
            ..V
        };
        assert_eq!(
            get(&[("if-none-match", "\"x\", \"v1,comma\"")], &comma),
            NotModified
        );
        assert_eq!(
            get(&[("if-none-match", "\"v1\", \"comma\"")], &comma),
            Proceed
        );
        // Other methods: 412 instead of 304.
        let h = hm(&[("if-none-match", "\"abc\"")]);
        assert_eq!(evaluate(&Method::HEAD, &h, &V), NotModified);
        assert_eq!(evaluate(&Method::POST, &h, &V), PreconditionFailed);
        assert_eq!(
            evaluate(&Method::PUT, &hm(&[("if-none-match", "*")]), &V),
            PreconditionFailed
        );
    }

    #[test]
    fn if_modified_since_gives_304_for_get_and_head_only() {
        assert_eq!(get(&[("if-modified-since", DATE_EQ)], &V), NotModified);
        assert_eq!(get(&[("if-modified-since", DATE_AFTER)], &V), NotModified);
        assert_eq!(get(&[("if-modified-since", DATE_BEFORE)], &V), Proceed);
        assert_eq!(get(&[("if-modified-since", "garbage")], &V), Proceed);
        assert_eq!(get(&[("if-modified-since", DATE_EQ)], &NONE), Proceed);
        let list = format!("{DATE_EQ}, {DATE_EQ}");
        assert_eq!(get(&[("if-modified-since", &list)], &V), Proceed);
        let h = hm(&[("if-modified-since", DATE_EQ)]);
        assert_eq!(evaluate(&Method::HEAD, &h, &V), NotModified);
        assert_eq!(evaluate(&Method::POST, &h, &V), Proceed);
        // The obsolete date forms are read (`fields::http_date`).
        let asctime = "Mon Jan 12 13:46:40 1970";
        assert_eq!(get(&[("if-modified-since", asctime)], &V), NotModified);
    }

    #[test]
    fn if_range_needs_a_strong_etag_or_the_exact_date() {
        let r = |ir: &str, v: &Validators<'_>| get(&[("range", "bytes=0-1"), ("if-range", ir)], v);
        assert_eq!(get(&[("range", "bytes=0-1")], &V), Proceed);
        assert_eq!(r("\"abc\"", &V), Proceed);
        assert_eq!(r("W/\"abc\"", &V), IgnoreRange);
        assert_eq!(r("\"abc\"", &WEAK), IgnoreRange);
        assert_eq!(r("W/\"abc\"", &WEAK), IgnoreRange);
        assert_eq!(r("\"old\"", &V), IgnoreRange);
        assert_eq!(r(DATE_EQ, &V), Proceed);
        assert_eq!(r(DATE_BEFORE, &V), IgnoreRange);
        assert_eq!(r(DATE_AFTER, &V), IgnoreRange);
        assert_eq!(r(DATE_EQ, &NONE), IgnoreRange);
        assert_eq!(r("garbage", &V), IgnoreRange);
        // Without Range, or for HEAD, If-Range says nothing.
        assert_eq!(get(&[("if-range", "\"old\"")], &V), Proceed);
        let h = hm(&[("range", "bytes=0-1"), ("if-range", "\"old\"")]);
        assert_eq!(evaluate(&Method::HEAD, &h, &V), Proceed);
    }

    #[test]
    fn rfc9110_13_2_2_order_decides_between_preconditions() {
        // A failing If-Match beats a matching If-None-Match.
        assert_eq!(
            get(&[("if-match", "\"x\""), ("if-none-match", "\"abc\"")], &V),
            PreconditionFailed
        );
        // If-Match passes, then If-None-Match matches: 304.
        assert_eq!(
            get(&[("if-match", "\"abc\""), ("if-none-match", "\"abc\"")], &V),
            NotModified
        );
        // If-Match present: If-Unmodified-Since is ignored.
        assert_eq!(
            get(
                &[("if-match", "*"), ("if-unmodified-since", DATE_BEFORE)],
                &V
            ),
            Proceed
        );
        // A failing If-Unmodified-Since beats a 304 from If-Modified-Since.
        assert_eq!(
            get(
                &[
                    ("if-unmodified-since", DATE_BEFORE),
                    ("if-modified-since", DATE_EQ)
                ],
                &V
            ),
            PreconditionFailed
        );
        // If-None-Match present: If-Modified-Since is ignored.
        assert_eq!(
            get(
                &[("if-none-match", "\"q\""), ("if-modified-since", DATE_EQ)],
                &V
            ),
            Proceed
        );
        // 304 comes before If-Range is looked at.
        assert_eq!(
            get(
                &[
                    ("if-none-match", "\"abc\""),
                    ("range", "bytes=0-1"),
                    ("if-range", "\"old\"")
                ],
                &V
            ),
            NotModified
        );
        // A failing If-Match comes before If-Range.
        assert_eq!(
            get(
                &[
                    ("if-match", "\"x\""),
                    ("range", "bytes=0-1"),
                    ("if-range", "\"abc\"")
                ],
                &V
            ),
            PreconditionFailed
        );
    }

    #[test]
    fn a_304_keeps_validators_and_caching_fields_only() {
        let mut h = hm(&[
            ("etag", "\"abc\""),
            ("last-modified", DATE_EQ),
            ("cache-control", "max-age=60"),
            ("expires", DATE_AFTER),
            ("vary", "accept-encoding"),
            ("content-location", "/a"),
            ("date", DATE_EQ),
            ("x-custom", "1"),
            ("content-length", "10"),
            ("content-type", "text/plain"),
            ("content-encoding", "br"),
            ("content-language", "en"),
            ("accept-ranges", "bytes"),
            ("transfer-encoding", "chunked"),
        ]);
        not_modified_fields(&mut h);
        let mut kept: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            [
                "cache-control",
                "content-location",
                "date",
                "etag",
                "expires",
                "last-modified",
                "vary",
                "x-custom"
            ]
        );
    }
}
