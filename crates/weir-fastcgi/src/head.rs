//! The CGI response head (RFC 3875 §6) that starts a FastCGI responder's
//! STDOUT: header fields, `Status` and `Location` turned into an HTTP status.
//!
//! Never reads past the head's empty line (the body is the caller's), never
//! accepts a head longer than the caller's limit however the bytes arrive,
//! and never lets a field through that would not be a valid HTTP field.

use http::header::{HeaderName, HeaderValue, LOCATION};
use http::response::Parts;
use http::{Response, StatusCode};

/// Why the CGI response head cannot become an HTTP response head.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("CGI response head is longer than {0} bytes")]
    TooLarge(usize),
    #[error("bad CGI response header line {0:?}")]
    BadLine(String),
    #[error("bad CGI Status field {0:?}")]
    BadStatus(String),
}

/// Longest piece of a bad line quoted in an error.
const QUOTE_MAX: usize = 80;

/// Parses the CGI head at the start of `buf`: lines ending in "\r\n" or
/// "\n", ended by an empty line.
///
/// `Ok(None)`: incomplete; the caller appends more STDOUT and calls again.
/// A head whose empty line does not end within the first `max` bytes is
/// [`HeadError::TooLarge`] as soon as `buf` holds more than `max` bytes.
///
/// `Ok(Some((parts, consumed)))`: the status comes from `Status: 404 Not
/// Found` (the reason phrase ignored), else 302 if a `Location` field is
/// present (RFC 3875 §6.3.2 client redirect), else 200; every other field is
/// appended to `parts.headers` in order. `consumed` counts the bytes of the
/// head, its empty line included.
pub fn parse_head(buf: &[u8], max: usize) -> Result<Option<(Parts, usize)>, HeadError> {
    let window = &buf[..buf.len().min(max)];
    let Some(consumed) = head_len(window) else {
        return if buf.len() > max {
            Err(HeadError::TooLarge(max))
        } else {
            Ok(None)
        };
    };

    let (mut parts, ()) = Response::new(()).into_parts();
    let mut status = None;
    for line in window[..consumed].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let (name, value) = field(line)?;
        if name.as_str() == "status" {
            if status.is_some() {
                return Err(HeadError::BadStatus("repeated Status field".into()));
            }
            status = Some(parse_status(value)?);
        } else {
            let value = HeaderValue::from_bytes(value).map_err(|_| bad_line(line))?;
            parts.headers.append(name, value);
        }
    }
    parts.status = match status {
        Some(status) => status,
        None if parts.headers.contains_key(LOCATION) => StatusCode::FOUND,
        None => StatusCode::OK,
    };
    Ok(Some((parts, consumed)))
}

/// The length of the head up to and including its empty line, if it is all
/// in `buf`.
fn head_len(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    loop {
        let end = start + buf[start..].iter().position(|&b| b == b'\n')?;
        if matches!(&buf[start..end], b"" | b"\r") {
            return Some(end + 1);
        }
        start = end + 1;
    }
}

/// Splits `name: value`, checking the name as an HTTP token and trimming the
/// value's surrounding whitespace. A line that starts with whitespace is an
/// obs-fold continuation, which RFC 9112 §5.2 lets a proxy reject.
fn field(line: &[u8]) -> Result<(HeaderName, &[u8]), HeadError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| bad_line(line))?;
    let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| bad_line(line))?;
    Ok((name, trim_ows(&line[colon + 1..])))
}

/// `404`, or `404 Not Found`: the three digits are the status, the rest is
/// a reason phrase that HTTP/2 and 3 cannot carry, so it is ignored.
fn parse_status(value: &[u8]) -> Result<StatusCode, HeadError> {
    let bad = || HeadError::BadStatus(quote(value));
    let (code, rest) = value.split_at_checked(3).ok_or_else(bad)?;
    if !code.iter().all(u8::is_ascii_digit) || !matches!(rest.first(), None | Some(b' ' | b'\t')) {
        return Err(bad());
    }
    let status = StatusCode::from_bytes(code).map_err(|_| bad())?;
    // An informational status cannot end a response; above 599 no client
    // knows what the class means.
    if !(200..=599).contains(&status.as_u16()) {
        return Err(bad());
    }
    Ok(status)
}

/// Trims RFC 9110's optional whitespace (SP and HTAB, nothing else) from
/// both ends.
fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

fn bad_line(line: &[u8]) -> HeadError {
    HeadError::BadLine(quote(line))
}

fn quote(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(QUOTE_MAX)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(head: &[u8]) -> (Parts, usize) {
        parse_head(head, 8192).unwrap().expect("complete head")
    }

    fn header_values(parts: &Parts, name: &str) -> Vec<String> {
        parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn status_field_sets_the_status_and_is_not_a_header() {
        let (parts, consumed) =
            parse(b"Status: 404 Not Found\r\nContent-Type: text/html\r\n\r\nbody");
        assert_eq!(parts.status, StatusCode::NOT_FOUND);
        assert!(!parts.headers.contains_key("status"));
        assert_eq!(header_values(&parts, "content-type"), ["text/html"]);
        assert_eq!(consumed, 50);
        let (parts, _) = parse(b"status:503\n\n");
        assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn location_without_status_is_a_302() {
        let (parts, _) = parse(b"Location: https://example.com/\r\n\r\n");
        assert_eq!(parts.status, StatusCode::FOUND);
        assert_eq!(header_values(&parts, "location"), ["https://example.com/"]);
        let (parts, _) = parse(b"Location: /moved\r\nStatus: 301 Moved\r\n\r\n");
        assert_eq!(parts.status, StatusCode::MOVED_PERMANENTLY);
    }

    #[test]
    fn no_status_no_location_is_a_200() {
        let (parts, _) = parse(b"Content-Type: text/plain\r\n\r\n");
        assert_eq!(parts.status, StatusCode::OK);
    }

    #[test]
    fn repeated_fields_are_kept_in_order() {
        let (parts, _) = parse(
            b"Set-Cookie: a=1; Path=/\r\nX-A: 1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\n\r\n",
        );
        assert_eq!(
            header_values(&parts, "set-cookie"),
            ["a=1; Path=/", "b=2", "c=3"]
        );
        assert_eq!(parts.headers.len(), 4);
    }

    #[test]
    fn lf_only_and_crlf_and_mixed_line_endings() {
        let lf = b"Status: 201\nX-Y:  spaced value \t\n\nrest";
        let (parts, consumed) = parse(lf);
        assert_eq!(parts.status, StatusCode::CREATED);
        assert_eq!(header_values(&parts, "x-y"), ["spaced value"]);
        assert_eq!(&lf[consumed..], b"rest");

        let crlf = b"Status: 201\r\nX-Y: v\r\n\r\nrest";
        let (_, consumed) = parse(crlf);
        assert_eq!(&crlf[consumed..], b"rest");

        let mixed = b"X-Y: v\r\nX-Z: w\n\r\nrest";
        let (parts, consumed) = parse(mixed);
        assert_eq!(header_values(&parts, "x-z"), ["w"]);
        assert_eq!(&mixed[consumed..], b"rest");
    }

    #[test]
    fn just_the_blank_line_is_an_empty_200_head() {
        let (parts, consumed) = parse(b"\r\n<html>");
        assert_eq!(
            (parts.status, parts.headers.len(), consumed),
            (StatusCode::OK, 0, 2)
        );
        let (_, consumed) = parse(b"\n<html>");
        assert_eq!(consumed, 1);
    }

    #[test]
    fn incomplete_head_asks_for_more() {
        for head in [&b""[..], b"Status: 200", b"Status: 200\r\n", b"X: y\r\n\r"] {
            assert!(parse_head(head, 8192).unwrap().is_none(), "{head:?}");
        }
    }

    #[test]
    fn head_longer_than_max_is_too_large_however_it_arrives() {
        let head = b"X-Long: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        assert!(parse_head(&head[..20], 20).unwrap().is_none());
        assert!(matches!(
            parse_head(&head[..21], 20),
            Err(HeadError::TooLarge(20))
        ));
        // Complete in one read but still over the limit.
        assert!(matches!(parse_head(head, 20), Err(HeadError::TooLarge(20))));
        // Exactly at the limit is fine.
        assert!(parse_head(head, head.len()).unwrap().is_some());
    }

    #[test]
    fn bad_lines_are_rejected() {
        for head in [
            &b"Bad Name: x\r\n\r\n"[..],
            b"X-A : x\r\n\r\n",
            b": empty name\r\n\r\n",
            b"no colon\r\n\r\n",
            b"X-A: one\r\n two\r\n\r\n",
            b"X-A: one\r\n\tfolded\r\n\r\n",
            b"X-A: nul\0byte\r\n\r\n",
            b"X-A: bare\rcr\r\n\r\n",
            b"X-A: two crs\r\r\n\r\n",
            b"X(A): x\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(head, 8192), Err(HeadError::BadLine(_))),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn bad_statuses_are_rejected() {
        for head in [
            &b"Status: 99\r\n\r\n"[..],
            b"Status: 1000\r\n\r\n",
            b"Status: abc\r\n\r\n",
            b"Status: 100 Continue\r\n\r\n",
            b"Status: 600\r\n\r\n",
            b"Status:\r\n\r\n",
            b"Status: 200\r\nStatus: 404\r\n\r\n",
        ] {
            assert!(
                matches!(parse_head(head, 8192), Err(HeadError::BadStatus(_))),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn obs_text_in_values_passes_through() {
        let (parts, _) = parse(b"X-Name: caf\xc3\xa9\r\n\r\n");
        assert_eq!(parts.headers["x-name"].as_bytes(), b"caf\xc3\xa9");
    }
}
