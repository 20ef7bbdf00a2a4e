//! The body decoder: what follows a request head, by its framing. A pure
//! state machine over a `BytesMut` the caller fills; it takes out exactly
//! the body's bytes and leaves what follows (a pipelined request) in place.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

use super::framing::{self, MAX_CHUNK_LINE, Violation};

/// Why a body could not be read; the connection cannot go on after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("request body framing: {0}")]
    Framing(#[from] Violation),
    #[error("request trailers larger than {0} bytes")]
    TrailersTooLarge(usize),
}

/// One step of decoding.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes (never empty).
    Data(Bytes),
    /// The trailer section of a chunked body; the body has ended.
    Trailers(HeaderMap),
    /// The body has ended (and stays ended).
    End,
    /// More bytes are needed.
    NeedMore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    Done,
}

/// The decoder of one message body (a request's, or a response's of known
/// length or chunked; a close-delimited response body is the caller's).
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    /// The largest trailer section accepted (the head limit).
    max_trailers: usize,
    /// Whitespace after a chunk size is tolerated (bodies from upstreams,
    /// as hyper's client reads them); requests get the strict reading.
    lenient: bool,
}

/// `1a` or `1a;name=value`: the size of a chunk from its line (without the
/// CRLF). Hex digits (16 at most), then optional `;` extensions of token
/// characters, `=` and quotes; no whitespace games.
pub fn chunk_size(line: &[u8]) -> Result<u64, Violation> {
    parse_chunk_size(line, false)
}

/// [`chunk_size`], or with `lenient` also spaces and tabs after the digits
/// and around extensions (`1a \r\n`, `5 ; x`): some origin servers pad the
/// size, and hyper's client accepts it. Never for requests: two readings of
/// a request's framing are what smuggling needs.
fn parse_chunk_size(line: &[u8], lenient: bool) -> Result<u64, Violation> {
    let hex_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if hex_end == 0 || hex_end > 16 {
        return Err(Violation::BadChunk);
    }
    let ext = &line[hex_end..];
    let ws = |b: u8| lenient && (b == b' ' || b == b'\t');
    let pad = ext.iter().take_while(|&&b| ws(b)).count();
    let ext = &ext[pad..];
    if !ext.is_empty()
        && (ext[0] != b';'
            || !ext[1..]
                .iter()
                .all(|&b| framing::is_tchar(b) || b == b';' || b == b'=' || b == b'"' || ws(b)))
    {
        return Err(Violation::BadChunk);
    }
    let s = std::str::from_utf8(&line[..hex_end]).map_err(|_| Violation::BadChunk)?;
    u64::from_str_radix(s, 16).map_err(|_| Violation::BadChunk)
}

impl Decoder {
    /// A body of exactly `n` bytes.
    pub fn length(n: u64) -> Self {
        Decoder {
            state: if n == 0 {
                State::Done
            } else {
                State::Length(n)
            },
            max_trailers: 0,
            lenient: false,
        }
    }

    /// A chunked body whose trailer section may take `max_trailers` bytes.
    pub fn chunked(max_trailers: usize) -> Self {
        Decoder {
            state: State::ChunkSize,
            max_trailers,
            lenient: false,
        }
    }

    /// The same decoder, tolerating padded chunk sizes (for response
    /// bodies; see [`chunk_size`]).
    pub fn lenient(mut self) -> Self {
        self.lenient = true;
        self
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The bytes still to come, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Takes the next piece of the body out of the front of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, DecodeError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Length(n) | State::ChunkData(n) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let k = (buf.len() as u64).min(n);
                    let left = n - k;
                    self.state = match (self.state, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), l) => State::Length(l),
                        (_, 0) => State::ChunkEnd,
                        (_, l) => State::ChunkData(l),
                    };
                    return Ok(Decoded::Data(take(buf, k as usize)));
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(Violation::BadChunk.into());
                    }
                    take(buf, 2);
                    self.state = State::ChunkSize;
                }
                State::ChunkSize => {
                    let Some(end) = framing::line_end(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    let size = parse_chunk_size(&buf[..end], self.lenient)?;
                    take(buf, end + 2);
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::Trailers => return self.trailers(buf),
            }
        }
    }

    /// The trailer section, taken whole once its empty line has arrived.
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, DecodeError> {
        if buf.starts_with(b"\r\n") {
            take(buf, 2);
            self.state = State::Done;
            return Ok(Decoded::End);
        }
        let scan = &buf[..buf.len().min(self.max_trailers + 4)];
        let Some(end) = memchr::memmem::find(scan, b"\r\n\r\n") else {
            if buf.len() > self.max_trailers + 2 {
                return Err(DecodeError::TrailersTooLarge(self.max_trailers));
            }
            // Line endings are checked as they come, not only at the end.
            framing::line_end(buf, usize::MAX - 2)?;
            return Ok(Decoded::NeedMore);
        };
        let section = take(buf, end + 4);
        let mut map = HeaderMap::new();
        let mut rest = &section[..end + 2];
        while let Some(eol) = framing::line_end(rest, usize::MAX - 2)? {
            let (name, value) = framing::check_field_line(&rest[..eol])?;
            let name = HeaderName::from_bytes(name).map_err(|_| Violation::BadHeaderName)?;
            let value = HeaderValue::from_maybe_shared(section.slice_ref(value))
                .map_err(|_| Violation::BadHeaderName)?;
            map.append(name, value);
            rest = &rest[eol + 2..];
        }
        self.state = State::Done;
        Ok(Decoded::Trailers(map))
    }
}

/// The first `n` bytes of `buf`; an emptied `buf` lets go of its memory.
fn take(buf: &mut BytesMut, n: usize) -> Bytes {
    let out = buf.split_to(n).freeze();
    if buf.is_empty() {
        *buf = BytesMut::new();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data, the trailers, and what is left after the body.
    type Run = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

    /// Decodes `input` fed in the pieces `cuts` makes: the data, the
    /// trailers, and what is left after the body.
    fn run(mut d: Decoder, input: &[u8], cuts: &[usize]) -> Result<Run, DecodeError> {
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        let mut trailers = None;
        let mut at = 0;
        let mut ends = cuts.to_vec();
        ends.push(input.len());
        for end in ends {
            buf.extend_from_slice(&input[at..end]);
            at = end;
            loop {
                match d.decode(&mut buf)? {
                    Decoded::Data(b) => {
                        assert!(!b.is_empty());
                        data.extend_from_slice(&b);
                    }
                    Decoded::Trailers(t) => trailers = Some(t),
                    Decoded::End => return Ok((data, trailers, input[at - buf.len()..].to_vec())),
                    Decoded::NeedMore => break,
                }
            }
        }
        panic!("body did not end: {:?}", String::from_utf8_lossy(input));
    }

    const CHUNKED: &[u8] =
        b"5;ext=1;q=\"x\"\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nx-more: a b\r\n\r\nGET / HTTP/1.1\r\n";

    #[test]
    fn a_chunked_body_decodes_the_same_at_every_split_point() {
        for cut in 0..=CHUNKED.len() {
            let (data, trailers, rest) = run(Decoder::chunked(1024), CHUNKED, &[cut]).unwrap();
            assert_eq!(data, b"hello world", "cut at {cut}");
            let t = trailers.expect("trailers");
            assert_eq!(t["x-sum"], "42");
            assert_eq!(t["x-more"], "a b");
            assert_eq!(rest, b"GET / HTTP/1.1\r\n", "cut at {cut}");
        }
        // And a byte at a time.
        let every: Vec<usize> = (1..CHUNKED.len()).collect();
        let (data, _, _) = run(Decoder::chunked(1024), CHUNKED, &every).unwrap();
        assert_eq!(data, b"hello world");
    }

    #[test]
    fn a_chunked_body_without_trailers_ends_at_its_empty_line() {
        let (data, trailers, rest) =
            run(Decoder::chunked(1024), b"3\r\nabc\r\n0\r\n\r\nnext", &[]).unwrap();
        assert_eq!(
            (data.as_slice(), trailers, rest.as_slice()),
            (&b"abc"[..], None, &b"next"[..])
        );
    }

    #[test]
    fn bad_chunk_framing_is_refused() {
        let bad: &[(&[u8], DecodeError)] = &[
            (b"zz\r\n", Violation::BadChunk.into()),
            (b"5 ;x\r\n", Violation::BadChunk.into()),
            (b"-5\r\n", Violation::BadChunk.into()),
            (b"\r\n", Violation::BadChunk.into()),
            (b"11111111111111111\r\n", Violation::BadChunk.into()),
            (b"5\r\nhelloXX0\r\n\r\n", Violation::BadChunk.into()),
            (b"5\nhello", Violation::BareLineEnding.into()),
            (b"0\r\nX: 1\nY: 2\r\n\r\n", Violation::BareLineEnding.into()),
            (b"0\r\nBad Name: 1\r\n\r\n", Violation::BadHeaderName.into()),
            (b"0\r\n folded\r\n\r\n", Violation::ObsFold.into()),
        ];
        for (input, want) in bad {
            for cut in 0..=input.len() {
                let mut d = Decoder::chunked(1024);
                let got = run_to_error(&mut d, input, cut);
                assert_eq!(
                    got,
                    Some(*want),
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(input)
                );
            }
        }
        let mut line = vec![b'1'; MAX_CHUNK_LINE + 8];
        line.extend_from_slice(b"\r\n");
        assert_eq!(
            run_to_error(&mut Decoder::chunked(1024), &line, 0),
            Some(Violation::TooLong.into())
        );
        let mut big = b"0\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'a', 200));
        assert_eq!(
            run_to_error(&mut Decoder::chunked(64), &big, 0),
            Some(DecodeError::TrailersTooLarge(64))
        );
    }

    fn run_to_error(d: &mut Decoder, input: &[u8], cut: usize) -> Option<DecodeError> {
        let mut buf = BytesMut::new();
        for piece in [&input[..cut], &input[cut..]] {
            buf.extend_from_slice(piece);
            loop {
                match d.decode(&mut buf) {
                    Err(e) => return Some(e),
                    Ok(Decoded::NeedMore | Decoded::End) => break,
                    Ok(_) => {}
                }
            }
        }
        None
    }

    #[test]
    fn a_length_takes_exactly_its_bytes() {
        // Underflow: fewer bytes than announced wait for more.
        let mut d = Decoder::length(5);
        let mut buf = BytesMut::from(&b"hel"[..]);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"hel")))
        );
        assert_eq!(d.remaining(), Some(2));
        assert_eq!(d.decode(&mut buf), Ok(Decoded::NeedMore));
        // Overflow: what follows the body stays for the next request.
        buf.extend_from_slice(b"loGET");
        assert_eq!(
            d.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"lo")))
        );
        assert_eq!(d.decode(&mut buf), Ok(Decoded::End));
        assert_eq!(&buf[..], b"GET");
        assert!(d.is_done());
        assert_eq!(Decoder::length(0).decode(&mut buf), Ok(Decoded::End));
        // The largest length there is counts down like any other.
        let mut d = Decoder::length(u64::MAX);
        assert_eq!(
            d.decode(&mut buf),
            Ok(Decoded::Data(Bytes::from_static(b"GET")))
        );
        assert_eq!(d.remaining(), Some(u64::MAX - 3));
    }

    #[test]
    fn chunk_sizes_parse_as_the_guard_reads_them() {
        assert_eq!(chunk_size(b"1a"), Ok(26));
        assert_eq!(chunk_size(b"FFFFFFFFFFFFFFFF"), Ok(u64::MAX));
        assert_eq!(chunk_size(b"0;a=b;c"), Ok(0));
        assert_eq!(chunk_size(b"0x1"), Err(Violation::BadChunk));
        assert_eq!(chunk_size(b""), Err(Violation::BadChunk));
        assert_eq!(chunk_size(b"1 "), Err(Violation::BadChunk));
        assert_eq!(parse_chunk_size(b"1a \t", true), Ok(26));
        assert_eq!(parse_chunk_size(b"5 ; x=\"a b\"", true), Ok(5));
        assert_eq!(parse_chunk_size(b" 5", true), Err(Violation::BadChunk));
        assert_eq!(parse_chunk_size(b"5 x", true), Err(Violation::BadChunk));
    }

    /// Seeded mutation of chunked bodies: never a panic, and whatever is
    /// decoded is never more than the input held.
    #[test]
    fn decoding_holds_up_under_mutation() {
        let seeds: [&[u8]; 3] = [
            CHUNKED,
            b"3\r\nabc\r\n0\r\n\r\n",
            b"a;x\r\n0123456789\r\n0\r\nT: v\r\n\r\n",
        ];
        let alphabet = b"\r\n;=\" :0123456789abcdefxXT";
        let mut rng = fastrand::Rng::with_seed(0x5eed_b0d1);
        for _ in 0..20_000 {
            let input = crate::test_support::mutated(&mut rng, &seeds, alphabet);
            let mut d = Decoder::chunked(rng.usize(0..64));
            let mut buf = BytesMut::from(&input[..]);
            let mut out = 0;
            while let Ok(step) = d.decode(&mut buf) {
                match step {
                    Decoded::Data(b) => out += b.len(),
                    Decoded::NeedMore | Decoded::End => break,
                    Decoded::Trailers(_) => {}
                }
            }
            assert!(out <= input.len());
        }
    }
}
