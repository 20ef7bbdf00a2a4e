//! The strict reading of HTTP/1.1 framing, weir's defence against request
//! smuggling, written once for both roles: [`RequestFraming`] (the framing
//! fields of a request head, RFC 9112 §6.3), [`check_line_endings`], the
//! field-line check ([`check_field_line`]) and the line rules the body
//! decoder ([`super::Decoder`]) applies to chunk lines and trailers.
//!
//! Refused, with a 400 and the connection closed: both Content-Length and
//! Transfer-Encoding, a Transfer-Encoding other than one exact `chunked`
//! (spaces, tabs, case, lists, duplicates), several or malformed
//! Content-Length values, Transfer-Encoding on HTTP/1.0, bad chunk sizes or
//! extensions, bare LF or CR line endings, obsolete line folding, invalid
//! header names. A proxy must not be lenient with any of these, since the
//! server behind it may read them differently. Pure functions over bytes:
//! never does I/O, never allocates.

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("bare LF or CR line ending")]
    BareLineEnding,
    #[error("obsolete header line folding")]
    ObsFold,
    #[error("invalid header name")]
    BadHeaderName,
    #[error("both Content-Length and Transfer-Encoding")]
    BothLengths,
    #[error("Transfer-Encoding other than one exact `chunked`")]
    BadTransferEncoding,
    #[error("several or malformed Content-Length values")]
    BadContentLength,
    #[error("Transfer-Encoding on HTTP/1.0")]
    TransferEncodingOnHttp10,
    #[error("bad chunk size or extension")]
    BadChunk,
    #[error("line too long")]
    TooLong,
}

/// The longest chunk-size line (with extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;
/// The strict reading of a request's framing fields, fed each
/// `Transfer-Encoding` and `Content-Length` value as its line is read: the
/// one set of rules weir's HTTP/1 server applies while it parses a head
/// (`weir_server::http1`), and the proxy applies to HTTP/2 and HTTP/3
/// requests before they go to an HTTP/1.1 upstream.
#[derive(Debug, Default)]
pub struct RequestFraming {
    te: usize,
    te_chunked: bool,
    cl: Option<u64>,
    cl_count: usize,
}

/// How a request's body follows its head, once its framing is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no framing field, or a length of zero).
    None,
    Length(u64),
    Chunked,
}

impl RequestFraming {
    /// A `Transfer-Encoding` value (trimmed): only one exact `chunked` is
    /// accepted, and only once.
    pub fn transfer_encoding(&mut self, value: &[u8]) {
        self.te += 1;
        self.te_chunked = value == b"chunked";
    }

    /// A `Content-Length` value (trimmed): digits only, at most 19.
    pub fn content_length(&mut self, value: &[u8]) -> Result<(), Violation> {
        self.cl_count += 1;
        if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
            return Err(Violation::BadContentLength);
        }
        self.cl = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
        Ok(())
    }

    /// The body's framing once every field line is in; `http10`: the
    /// request line says HTTP/1.0.
    pub fn finish(&self, http10: bool) -> Result<BodyFraming, Violation> {
        if self.te > 0 && self.cl_count > 0 {
            return Err(Violation::BothLengths);
        }
        if self.te > 1 || (self.te == 1 && !self.te_chunked) {
            return Err(Violation::BadTransferEncoding);
        }
        if self.te > 0 && http10 {
            return Err(Violation::TransferEncodingOnHttp10);
        }
        if self.cl_count > 1 {
            return Err(Violation::BadContentLength);
        }
        Ok(match self.cl {
            _ if self.te == 1 => BodyFraming::Chunked,
            Some(n) if n > 0 => BodyFraming::Length(n),
            _ => BodyFraming::None,
        })
    }
}

/// Every line of a complete head ends with CRLF: no bare LF, no bare CR.
/// One pass that jumps from one CR or LF to the next.
pub fn check_line_endings(head: &[u8]) -> Result<(), Violation> {
    let mut at = 0;
    while let Some(k) = memchr::memchr2(b'\r', b'\n', &head[at..]) {
        let i = at + k;
        if head[i] == b'\n' || head.get(i + 1) != Some(&b'\n') {
            return Err(Violation::BareLineEnding);
        }
        at = i + 2;
    }
    Ok(())
}

/// The end of the line (index of its CR) once a CRLF has arrived.
pub fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, Violation> {
    let scan = &buf[..buf.len().min(max + 2)];
    match scan.iter().position(|&b| b == b'\n' || b == b'\r') {
        Some(i) if scan[i] == b'\n' => Err(Violation::BareLineEnding),
        Some(i) if i + 1 < scan.len() => {
            if scan[i + 1] == b'\n' {
                Ok(Some(i))
            } else {
                Err(Violation::BareLineEnding)
            }
        }
        Some(_) => Ok(None),
        None if buf.len() > max => Err(Violation::TooLong),
        None => Ok(None),
    }
}

/// RFC 9110 `tchar`, by table: it is asked of every byte of every field name.
const TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

pub fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// One `name: value` line: returns the name and the trimmed value.
pub fn check_field_line(line: &[u8]) -> Result<(&[u8], &[u8]), Violation> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(Violation::ObsFold);
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(Violation::BadHeaderName)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(Violation::BadHeaderName);
    }
    let value = trim_ows(&line[colon + 1..]);
    if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(Violation::BadHeaderName);
    }
    Ok((name, value))
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_fields_follow_rfc_9112_strictly() {
        let framing = |te: &[&[u8]], cl: &[&[u8]], http10: bool| {
            let mut f = RequestFraming::default();
            for v in te {
                f.transfer_encoding(v);
            }
            for v in cl {
                f.content_length(v)?;
            }
            f.finish(http10)
        };
        use Violation as V;
        assert_eq!(framing(&[], &[], false), Ok(BodyFraming::None));
        assert_eq!(framing(&[], &[b"0"], false), Ok(BodyFraming::None));
        assert_eq!(framing(&[], &[b"12"], true), Ok(BodyFraming::Length(12)));
        assert_eq!(framing(&[b"chunked"], &[], false), Ok(BodyFraming::Chunked));
        assert_eq!(framing(&[b"chunked"], &[b"3"], false), Err(V::BothLengths));
        assert_eq!(
            framing(&[b"Chunked"], &[], false),
            Err(V::BadTransferEncoding)
        );
        assert_eq!(
            framing(&[b"gzip, chunked"], &[], false),
            Err(V::BadTransferEncoding)
        );
        assert_eq!(
            framing(&[b"chunked", b"chunked"], &[], false),
            Err(V::BadTransferEncoding)
        );
        assert_eq!(
            framing(&[b"chunked"], &[], true),
            Err(V::TransferEncodingOnHttp10)
        );
        assert_eq!(framing(&[], &[b"3", b"3"], false), Err(V::BadContentLength));
        for bad in [
            &b"+3"[..],
            b"3, 3",
            b"0x3",
            b"",
            b"-1",
            b"99999999999999999999",
        ] {
            assert_eq!(
                framing(&[], &[bad], false),
                Err(V::BadContentLength),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn lines_and_field_lines_are_read_strictly() {
        assert_eq!(
            check_line_endings(b"GET / HTTP/1.1\r\nA: b\r\n\r\n"),
            Ok(())
        );
        assert_eq!(
            check_line_endings(b"GET / HTTP/1.1\nA: b\r\n\r\n"),
            Err(Violation::BareLineEnding)
        );
        assert_eq!(
            check_line_endings(b"GET / HTTP/1.1\r\nA: b\rC: d\r\n\r\n"),
            Err(Violation::BareLineEnding)
        );
        assert_eq!(
            check_field_line(b"A-b:  c d \t"),
            Ok((&b"A-b"[..], &b"c d"[..]))
        );
        assert_eq!(check_field_line(b" folded"), Err(Violation::ObsFold));
        for bad in [
            &b"X A: b"[..],
            b": b",
            b"X(A): b",
            b"Transfer-Encoding : chunked",
            b"no colon",
        ] {
            assert_eq!(
                check_field_line(bad),
                Err(Violation::BadHeaderName),
                "{bad:?}"
            );
        }
        assert_eq!(line_end(b"5\r\nhello", 4096), Ok(Some(1)));
        assert_eq!(line_end(b"5\r", 4096), Ok(None));
        assert_eq!(line_end(b"5\nhello", 4096), Err(Violation::BareLineEnding));
        assert_eq!(line_end(b"55555", 3), Err(Violation::TooLong));
    }
}
