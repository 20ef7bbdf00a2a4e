//! Field values RFC 9110 defines once and several parts of weir read:
//! `Content-Length` (§8.6) and HTTP-date (§5.6.7). One strict reading each,
//! so the proxy, the cache, the pipeline's byte counts and the HTTP/1 codec
//! never disagree about a message.
//!
//! Only parses; never decides what to answer about a bad value.

use http::HeaderMap;
use http::header;

/// Why a `Content-Length` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContentLengthError {
    /// Empty, a sign, spaces inside, hex: anything but `1*DIGIT`.
    #[error("Content-Length is not a decimal number")]
    NotDigits,
    /// More than a 64-bit length holds.
    #[error("Content-Length is too large")]
    Overflow,
    /// Two values that differ (`5, 6`, or two lines `5` and `6`).
    #[error("Content-Length has values that differ")]
    Differ,
    /// The same value more than once, where [`Repeats::Refuse`] was asked.
    #[error("Content-Length is repeated")]
    Repeated,
}

/// What to do with the same value given more than once (`42, 42`, or two
/// lines of `42`). RFC 9110 §8.6 lets a recipient either refuse the message
/// or read it as the one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeats {
    /// Refuse: a request read as a proxy's framing, where two readers
    /// disagreeing about a repeated field is how smuggling starts.
    Refuse,
    /// Read the one value: a response, or a length only counted.
    Collapse,
}

/// `1*DIGIT` as a `u64`; the optional whitespace around a list member
/// allowed.
fn digits(v: &[u8]) -> Result<u64, ContentLengthError> {
    let v = v.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(ContentLengthError::NotDigits);
    }
    v.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(ContentLengthError::Overflow)
    })
}

/// The length the `Content-Length` field lines `values` give (raw bytes, as
/// an HTTP/1 head parser has them); `Ok(None)` when there is none.
pub fn content_length_values<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
    repeats: Repeats,
) -> Result<Option<u64>, ContentLengthError> {
    let mut len = None;
    for line in values {
        // A parsed field value has none; a value that still does was
        // built by hand or smuggled.
        if line.first().is_some_and(u8::is_ascii_whitespace)
            || line.last().is_some_and(u8::is_ascii_whitespace)
        {
            return Err(ContentLengthError::NotDigits);
        }
        for member in line.split(|&b| b == b',') {
            let n = digits(member)?;
            match len {
                None => len = Some(n),
                Some(l) if l != n => return Err(ContentLengthError::Differ),
                Some(_) if repeats == Repeats::Refuse => {
                    return Err(ContentLengthError::Repeated);
                }
                Some(_) => {}
            }
        }
    }
    Ok(len)
}

/// The length a message's `Content-Length` gives, a list of one repeated
/// value read as that value (RFC 9110 §8.6); `Ok(None)` when absent.
pub fn content_length(h: &HeaderMap) -> Result<Option<u64>, ContentLengthError> {
    content_length_values(
        h.get_all(header::CONTENT_LENGTH)
            .iter()
            .map(|v| v.as_bytes()),
        Repeats::Collapse,
    )
}

/// An HTTP-date (RFC 9110 §5.6.7) in seconds since the epoch: the
/// IMF-fixdate, and the obsolete RFC 850 and asctime forms a recipient must
/// accept. Names are matched case-insensitively (RFC 9111 §4.2 asks it of
/// caches, and nothing is gained by refusing `GMT` written `gmt`); any zone
/// but GMT, or a weekday that is not the date's, is invalid.
pub fn http_date(v: &[u8]) -> Option<u64> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Near enough: only a two-digit year 50 years away depends on it.
    http_date_in(v, 1970 + secs / 31_556_952)
}

/// [`http_date`] as read in `this_year`.
fn http_date_in(v: &[u8], this_year: u64) -> Option<u64> {
    // httpdate reads the canonical case only: "Thu", "Aug", "GMT".
    let mut canon = [0u8; 40];
    if v.len() > canon.len() {
        return None;
    }
    let mut word_start = true;
    for (i, &c) in v.iter().enumerate() {
        canon[i] = if c.is_ascii_alphabetic() {
            let first = word_start;
            word_start = false;
            if first {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        } else {
            word_start = true;
            c
        };
    }
    let canon = &mut canon[..v.len()];
    if let Some(zone) = canon.windows(4).position(|w| w == b" Gmt") {
        canon[zone + 2..zone + 4].copy_from_slice(b"MT");
    }
    let s = std::str::from_utf8(canon).ok()?;
    let imf = rfc850_as_imf_fixdate(s, this_year);
    httpdate::parse_http_date(imf.as_deref().unwrap_or(s))
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

/// An rfc850-date (`Sunday, 06-Nov-94 08:49:37 GMT`) rewritten as the
/// IMF-fixdate it names, its two-digit year placed as §5.6.7 says: within
/// 50 years of `this_year` (httpdate's fixed 1970–2069 window drifts from
/// that rule as years pass). `None` for the other forms.
fn rfc850_as_imf_fixdate(s: &str, this_year: u64) -> Option<String> {
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let (day, rest) = s.split_once(", ")?;
    if !DAYS.contains(&day) {
        return None;
    }
    let b = rest.as_bytes();
    if b.len() != 22 || b[2] != b'-' || b[6] != b'-' || b[9] != b' ' {
        return None;
    }
    let yy = rest.get(7..9)?;
    if !yy.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let yy: u64 = yy.parse().ok()?;
    let mut year = this_year / 100 * 100 + yy;
    if year > this_year + 50 {
        year -= 100;
    } else if year + 50 < this_year {
        year += 100;
    }
    Some(format!(
        "{}, {} {} {year} {}",
        &day[..3],
        &rest[..2],
        &rest[3..6],
        &rest[10..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn cl(lines: &[&str], repeats: Repeats) -> Result<Option<u64>, ContentLengthError> {
        content_length_values(lines.iter().map(|l| l.as_bytes()), repeats)
    }

    #[test]
    fn content_length_is_digits_only() {
        use ContentLengthError::*;
        assert_eq!(cl(&[], Repeats::Refuse), Ok(None));
        assert_eq!(cl(&["0"], Repeats::Refuse), Ok(Some(0)));
        assert_eq!(cl(&["42"], Repeats::Refuse), Ok(Some(42)));
        assert_eq!(cl(&["007"], Repeats::Refuse), Ok(Some(7)));
        for bad in [
            "", " ", "+5", "-5", "0x10", "5 5", "5.0", "١", "5,", ",5", " 5", "5\t",
        ] {
            assert_eq!(cl(&[bad], Repeats::Collapse), Err(NotDigits), "{bad:?}");
        }
    }

    #[test]
    fn content_length_overflow_is_refused() {
        assert_eq!(
            cl(&["18446744073709551615"], Repeats::Refuse),
            Ok(Some(u64::MAX))
        );
        for big in ["18446744073709551616", "99999999999999999999999"] {
            assert_eq!(
                cl(&[big], Repeats::Refuse),
                Err(ContentLengthError::Overflow)
            );
        }
    }

    #[test]
    fn rfc9110_8_6_a_list_of_one_value_is_that_value_or_refused() {
        use ContentLengthError::*;
        assert_eq!(cl(&["42, 42"], Repeats::Collapse), Ok(Some(42)));
        assert_eq!(cl(&["42 ,42,42"], Repeats::Collapse), Ok(Some(42)));
        assert_eq!(cl(&["42", "42"], Repeats::Collapse), Ok(Some(42)));
        assert_eq!(cl(&["42, 42"], Repeats::Refuse), Err(Repeated));
        assert_eq!(cl(&["42", "42"], Repeats::Refuse), Err(Repeated));
        assert_eq!(cl(&["42, 43"], Repeats::Collapse), Err(Differ));
        assert_eq!(cl(&["42", "43"], Repeats::Collapse), Err(Differ));
    }

    #[test]
    fn content_length_of_a_header_map() {
        let mut h = HeaderMap::new();
        assert_eq!(content_length(&h), Ok(None));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("10"));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("10, 10"));
        assert_eq!(content_length(&h), Ok(Some(10)));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("11"));
        assert_eq!(content_length(&h), Err(ContentLengthError::Differ));
    }

    #[test]
    fn rfc9110_5_6_7_the_three_date_forms_are_read() {
        const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(T));
        assert_eq!(
            http_date_in(b"Sunday, 06-Nov-94 08:49:37 GMT", 2026),
            Some(T)
        );
        assert_eq!(http_date(b"Sun Nov  6 08:49:37 1994"), Some(T));
        assert_eq!(http_date(b"sun, 06 nov 1994 08:49:37 gmt"), Some(T));
        // A two-digit year is the one within 50 years of now.
        let y = |day: &str, yy: &str, this_year| {
            let v = format!("{day}, 01-Jan-{yy} 00:00:00 GMT");
            let t = http_date_in(v.as_bytes(), this_year)?;
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
            Some(httpdate::fmt_http_date(t))
        };
        let jan1 = |day: &str, year: u32| Some(format!("{day}, 01 Jan {year} 00:00:00 GMT"));
        assert_eq!(y("Wednesday", "70", 2026), jan1("Wed", 2070));
        assert_eq!(y("Thursday", "70", 2019), jan1("Thu", 1970));
        assert_eq!(y("Thursday", "26", 2026), jan1("Thu", 2026));
        assert_eq!(y("Wednesday", "76", 2026), jan1("Wed", 2076));
        assert_eq!(y("Saturday", "77", 2026), jan1("Sat", 1977));
        // httpdate alone would read 1975 here.
        assert_eq!(y("Tuesday", "75", 2030), jan1("Tue", 2075));
        // The weekday must still be the date's.
        assert_eq!(y("Thursday", "75", 2030), None);
        for bad in [
            "",
            "0",
            "Sundae, 06-Nov-94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 CET",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(http_date(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
