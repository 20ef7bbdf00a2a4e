//! FastCGI 1.0 records, the client's side: encoders that append a request's
//! records to the caller's buffer, and [`Decoder`], which takes the
//! application's records for one request out of the bytes the caller read.
//!
//! Never does I/O, never copies record content on the decode path, and never
//! needs more than one record (header, at most [`MAX_CONTENT`] bytes of
//! content and 255 of padding) buffered to make progress; never panics on
//! what the application sends.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes in a record header.
pub const HEADER_LEN: usize = 8;
/// Most content bytes one record can carry (its length field is 16 bits).
pub const MAX_CONTENT: usize = 65535;

const VERSION: u8 = 1;
const ROLE_RESPONDER: u16 = 1;
const FLAG_KEEP_CONN: u8 = 1;
/// Largest name or value length that the 4-byte length form can express.
const MAX_PAIR_LEN: usize = 0x7fff_ffff;

/// A record's type (FastCGI 1.0 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    BeginRequest = 1,
    AbortRequest = 2,
    EndRequest = 3,
    Params = 4,
    Stdin = 5,
    Stdout = 6,
    Stderr = 7,
    Data = 8,
    GetValues = 9,
    GetValuesResult = 10,
    UnknownType = 11,
}

impl RecordType {
    /// The type with this code, if FastCGI 1.0 defines one.
    pub const fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::BeginRequest,
            2 => Self::AbortRequest,
            3 => Self::EndRequest,
            4 => Self::Params,
            5 => Self::Stdin,
            6 => Self::Stdout,
            7 => Self::Stderr,
            8 => Self::Data,
            9 => Self::GetValues,
            10 => Self::GetValuesResult,
            11 => Self::UnknownType,
            _ => return None,
        })
    }
}

/// Zero bytes that pad `len` bytes of content to a multiple of 8, as php-fpm
/// and nginx do, so that the next header starts aligned.
fn padding_for(len: usize) -> u8 {
    ((8 - len % 8) % 8) as u8
}

fn header_bytes(ty: RecordType, id: u16, len: usize) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_CONTENT);
    let [id_hi, id_lo] = id.to_be_bytes();
    let [len_hi, len_lo] = (len as u16).to_be_bytes();
    [
        VERSION,
        ty as u8,
        id_hi,
        id_lo,
        len_hi,
        len_lo,
        padding_for(len),
        0,
    ]
}

/// Appends one record; `content` is at most [`MAX_CONTENT`] bytes.
fn record(out: &mut BytesMut, ty: RecordType, id: u16, content: &[u8]) {
    let padding = padding_for(content.len());
    out.reserve(HEADER_LEN + content.len() + usize::from(padding));
    out.put_slice(&header_bytes(ty, id, content.len()));
    out.put_slice(content);
    out.put_bytes(0, usize::from(padding));
}

/// Appends a BEGIN_REQUEST record, role RESPONDER, flags FCGI_KEEP_CONN when
/// `keep_conn`.
pub fn begin_request(out: &mut BytesMut, id: u16, keep_conn: bool) {
    let [role_hi, role_lo] = ROLE_RESPONDER.to_be_bytes();
    let flags = if keep_conn { FLAG_KEEP_CONN } else { 0 };
    record(
        out,
        RecordType::BeginRequest,
        id,
        &[role_hi, role_lo, flags, 0, 0, 0, 0, 0],
    );
}

/// Appends PARAMS records holding the name-value pairs (FastCGI's 1- or
/// 4-byte lengths), split into records of at most [`MAX_CONTENT`] bytes (a
/// pair may span records), then the empty PARAMS record that ends the stream.
///
/// # Panics
///
/// If a name or value is 2 GiB or longer, which FastCGI cannot express.
pub fn params<'a>(
    out: &mut BytesMut,
    id: u16,
    pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
) {
    let mut stream = Stream::new(out, RecordType::Params, id);
    for (name, value) in pairs {
        stream.put_len(name.len());
        stream.put_len(value.len());
        stream.put(name);
        stream.put(value);
    }
    stream.finish();
}

/// Appends STDIN records carrying `data` (split at [`MAX_CONTENT`]; nothing
/// for empty data).
pub fn stdin(out: &mut BytesMut, id: u16, data: &[u8]) {
    let records = data.len().div_ceil(MAX_CONTENT);
    out.reserve(data.len() + records * (HEADER_LEN + 7));
    for chunk in data.chunks(MAX_CONTENT) {
        record(out, RecordType::Stdin, id, chunk);
    }
}

/// Appends the empty STDIN record that ends the request body.
pub fn stdin_end(out: &mut BytesMut, id: u16) {
    record(out, RecordType::Stdin, id, &[]);
}

/// Appends an ABORT_REQUEST record: the application should end request `id`
/// (it still answers with END_REQUEST).
pub fn abort_request(out: &mut BytesMut, id: u16) {
    record(out, RecordType::AbortRequest, id, &[]);
}

/// A stream of records of one type whose content is written straight into
/// `out`: each header is reserved first and filled in once its record is full
/// or the stream ends, so no pair is copied twice.
struct Stream<'o> {
    out: &'o mut BytesMut,
    ty: RecordType,
    id: u16,
    /// Where the open record's header sits in `out`, if one is open.
    open: Option<usize>,
    len: usize,
}

impl<'o> Stream<'o> {
    fn new(out: &'o mut BytesMut, ty: RecordType, id: u16) -> Self {
        Self {
            out,
            ty,
            id,
            open: None,
            len: 0,
        }
    }

    fn put_len(&mut self, len: usize) {
        assert!(
            len <= MAX_PAIR_LEN,
            "FastCGI name or value of {len} bytes is too long"
        );
        if len < 0x80 {
            self.put(&[len as u8]);
        } else {
            self.put(&(len as u32 | 0x8000_0000).to_be_bytes());
        }
    }

    fn put(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.open.is_none() || self.len == MAX_CONTENT {
                self.close();
                self.open = Some(self.out.len());
                self.out.put_bytes(0, HEADER_LEN);
            }
            let n = data.len().min(MAX_CONTENT - self.len);
            self.out.put_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
        }
    }

    /// Fills in the open record's header and pads it.
    fn close(&mut self) {
        if let Some(start) = self.open.take() {
            let header = header_bytes(self.ty, self.id, self.len);
            self.out[start..start + HEADER_LEN].copy_from_slice(&header);
            self.out.put_bytes(0, usize::from(padding_for(self.len)));
            self.len = 0;
        }
    }

    /// Closes the open record and appends the empty one that ends the stream.
    fn finish(mut self) {
        self.close();
        record(self.out, self.ty, self.id, &[]);
    }
}

/// What the application sent for the request, one record at a time.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A piece of the response: the CGI head, then the body. At most
    /// [`MAX_CONTENT`] bytes, never empty.
    Stdout(Bytes),
    /// A piece of the application's error stream, for the log.
    Stderr(Bytes),
    /// The request is complete (END_REQUEST with FCGI_REQUEST_COMPLETE).
    End {
        app_status: u32,
        protocol_status: u8,
    },
}

/// Why the application's records cannot be decoded, or why it refused the
/// request. Every error but the refusals (see [`ProtoError::retry_may_help`])
/// leaves the connection unusable.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("FastCGI record has version {0}, expected 1")]
    BadVersion(u8),
    #[error("FastCGI record for request {got} on a connection serving request {expected}")]
    OtherRequest { expected: u16, got: u16 },
    #[error(
        "FastCGI application sent a record of type {0}, which only a client may send or which FastCGI 1.0 does not define"
    )]
    UnexpectedType(u8),
    #[error("FastCGI END_REQUEST record has {0} bytes of content, expected 8")]
    BadEndRequest(usize),
    #[error(
        "FastCGI application refused the request: it serves one request per connection and this one is busy (FCGI_CANT_MPX_CONN)"
    )]
    CantMpxConn,
    #[error("FastCGI application refused the request: it is overloaded (FCGI_OVERLOADED)")]
    Overloaded,
    #[error(
        "FastCGI application refused the request: it does not play the responder role (FCGI_UNKNOWN_ROLE)"
    )]
    UnknownRole,
    #[error("FastCGI application ended the request with unknown protocol status {0}")]
    UnknownProtocolStatus(u8),
    #[error("FastCGI record decoded after the request's END_REQUEST")]
    AfterEnd,
    #[error("FastCGI name-value pairs are truncated")]
    TruncatedPairs,
}

impl ProtoError {
    /// Whether the application refused the request without running it, so
    /// that sending it again (elsewhere, or later) may succeed. The request's
    /// END_REQUEST has then been consumed and the connection may be reused.
    pub fn retry_may_help(&self) -> bool {
        matches!(self, Self::CantMpxConn | Self::Overloaded)
    }
}

/// Incremental decoder of the application's records for request `id`.
///
/// After [`Event::End`] (or a refusal error) `buf` starts exactly at the
/// first byte after the request's last record, so a kept connection can
/// serve the next request.
#[derive(Debug)]
pub struct Decoder {
    id: u16,
    /// Bytes still to drop: padding, or a record the client ignores, that
    /// had not all arrived yet.
    skip: usize,
    ended: bool,
}

impl Decoder {
    pub fn new(id: u16) -> Self {
        Self {
            id,
            skip: 0,
            ended: false,
        }
    }

    /// Takes the next event out of `buf` (bytes read from the connection,
    /// appended by the caller). `Ok(None)`: more bytes are needed.
    ///
    /// Empty STDOUT/STDERR records (stream ends) produce no event and are
    /// skipped; so are records the client does not expect (GET_VALUES_RESULT,
    /// UNKNOWN_TYPE). Padding is consumed, also when it arrives in a later
    /// read. Content is split off `buf` without copying. A record for another
    /// request id is an error, and so is any call after [`Event::End`]
    /// ([`ProtoError::AfterEnd`]). On an error the offending record stays in
    /// `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, ProtoError> {
        loop {
            if self.ended {
                return Err(ProtoError::AfterEnd);
            }
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                buf.advance(n);
                self.skip -= n;
                if self.skip > 0 {
                    return Ok(None);
                }
            }
            let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
                return Ok(None);
            };
            let [version, ty, id_hi, id_lo, len_hi, len_lo, padding, _] = *header;
            if version != VERSION {
                return Err(ProtoError::BadVersion(version));
            }
            let id = u16::from_be_bytes([id_hi, id_lo]);
            let len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
            let padding = usize::from(padding);
            let ty = match RecordType::from_u8(ty) {
                Some(ty @ (RecordType::Stdout | RecordType::Stderr | RecordType::EndRequest)) => ty,
                // Management records (request id 0) answer queries this
                // client never makes; skip them whatever they hold.
                Some(RecordType::GetValuesResult | RecordType::UnknownType) => {
                    buf.advance(HEADER_LEN);
                    self.skip = len + padding;
                    continue;
                }
                _ => return Err(ProtoError::UnexpectedType(ty)),
            };
            if id != self.id {
                return Err(ProtoError::OtherRequest {
                    expected: self.id,
                    got: id,
                });
            }
            if ty == RecordType::EndRequest {
                return self.end_request(buf, len, padding);
            }
            if len == 0 {
                buf.advance(HEADER_LEN);
                self.skip = padding;
                continue;
            }
            if buf.len() < HEADER_LEN + len {
                buf.reserve(HEADER_LEN + len - buf.len());
                return Ok(None);
            }
            buf.advance(HEADER_LEN);
            let content = buf.split_to(len).freeze();
            let n = padding.min(buf.len());
            buf.advance(n);
            self.skip = padding - n;
            return Ok(Some(if ty == RecordType::Stdout {
                Event::Stdout(content)
            } else {
                Event::Stderr(content)
            }));
        }
    }

    /// Whether [`Event::End`] (or a refusal) has been decoded.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Decodes END_REQUEST once all of it, padding included, has arrived, so
    /// that nothing of this request is left in `buf` for the next one.
    fn end_request(
        &mut self,
        buf: &mut BytesMut,
        len: usize,
        padding: usize,
    ) -> Result<Option<Event>, ProtoError> {
        if len != 8 {
            return Err(ProtoError::BadEndRequest(len));
        }
        let total = HEADER_LEN + len + padding;
        let Some(record) = buf.get(..total) else {
            return Ok(None);
        };
        let body = &record[HEADER_LEN..];
        let app_status = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let protocol_status = body[4];
        buf.advance(total);
        self.ended = true;
        match protocol_status {
            0 => Ok(Some(Event::End {
                app_status,
                protocol_status,
            })),
            1 => Err(ProtoError::CantMpxConn),
            2 => Err(ProtoError::Overloaded),
            3 => Err(ProtoError::UnknownRole),
            other => Err(ProtoError::UnknownProtocolStatus(other)),
        }
    }
}

/// A decoded name-value pair.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Decodes name-value pairs (for tests, and GET_VALUES results): errors on
/// truncated input.
pub fn decode_pairs(mut content: &[u8]) -> Result<Vec<Pair>, ProtoError> {
    let mut pairs = Vec::new();
    while !content.is_empty() {
        let name_len = take_len(&mut content)?;
        let value_len = take_len(&mut content)?;
        let name = take(&mut content, name_len)?;
        let value = take(&mut content, value_len)?;
        pairs.push((name.to_vec(), value.to_vec()));
    }
    Ok(pairs)
}

fn take_len(content: &mut &[u8]) -> Result<usize, ProtoError> {
    let first = *content.first().ok_or(ProtoError::TruncatedPairs)?;
    if first < 0x80 {
        *content = &content[1..];
        return Ok(usize::from(first));
    }
    let bytes = take(content, 4)?;
    let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & 0x7fff_ffff;
    usize::try_from(len).map_err(|_| ProtoError::TruncatedPairs)
}

fn take<'c>(content: &mut &'c [u8], n: usize) -> Result<&'c [u8], ProtoError> {
    if content.len() < n {
        return Err(ProtoError::TruncatedPairs);
    }
    let (taken, rest) = content.split_at(n);
    *content = rest;
    Ok(taken)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record as an application would send it, with any padding it likes.
    pub(crate) fn app_record(out: &mut Vec<u8>, ty: u8, id: u16, content: &[u8], padding: u8) {
        assert!(content.len() <= MAX_CONTENT);
        out.extend_from_slice(&[VERSION, ty]);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        out.extend_from_slice(&[padding, 0]);
        out.extend_from_slice(content);
        out.extend(std::iter::repeat_n(0xAA, usize::from(padding)));
    }

    pub(crate) fn app_end(
        out: &mut Vec<u8>,
        id: u16,
        app_status: u32,
        protocol_status: u8,
        padding: u8,
    ) {
        let mut body = [0; 8];
        body[..4].copy_from_slice(&app_status.to_be_bytes());
        body[4] = protocol_status;
        app_record(out, RecordType::EndRequest as u8, id, &body, padding);
    }

    /// A record as the decoder's side reads it back: (type, id, content).
    fn split_records(mut bytes: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
        let mut records = Vec::new();
        while !bytes.is_empty() {
            let h = &bytes[..HEADER_LEN];
            assert_eq!(h[0], VERSION);
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let padding = usize::from(h[6]);
            assert_eq!((len + padding) % 8, 0, "record padded to 8");
            assert_eq!(padding, usize::from(padding_for(len)));
            assert_eq!(h[7], 0);
            let content = &bytes[HEADER_LEN..HEADER_LEN + len];
            let pad = &bytes[HEADER_LEN + len..HEADER_LEN + len + padding];
            assert!(pad.iter().all(|&b| b == 0));
            records.push((h[1], u16::from_be_bytes([h[2], h[3]]), content.to_vec()));
            bytes = &bytes[HEADER_LEN + len + padding..];
        }
        records
    }

    /// Every event `input` decodes to when fed in the given chunk sizes.
    fn decode_chunked(
        id: u16,
        input: &[u8],
        mut chunk: impl FnMut() -> usize,
    ) -> Result<Vec<Event>, ProtoError> {
        let mut decoder = Decoder::new(id);
        let mut buf = BytesMut::new();
        let mut events = Vec::new();
        let mut rest = input;
        while !decoder.ended() {
            if let Some(event) = decoder.decode(&mut buf)? {
                events.push(event);
                continue;
            }
            if rest.is_empty() {
                break;
            }
            let n = chunk().clamp(1, rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        assert!(buf.is_empty() && rest.is_empty(), "bytes left after End");
        Ok(events)
    }

    #[test]
    fn begin_request_is_responder_with_keep_conn_flag() {
        let mut out = BytesMut::new();
        begin_request(&mut out, 7, true);
        begin_request(&mut out, 8, false);
        assert_eq!(
            split_records(&out),
            [
                (1, 7, vec![0, 1, 1, 0, 0, 0, 0, 0]),
                (1, 8, vec![0, 1, 0, 0, 0, 0, 0, 0])
            ]
        );
    }

    #[test]
    fn params_round_trip_short_and_long_lengths() {
        let long_name = vec![b'N'; 200];
        let long_value = vec![b'v'; 128];
        let pairs: Vec<(&[u8], &[u8])> = vec![
            (b"SCRIPT_FILENAME", b"/srv/www/index.php"),
            (b"EMPTY", b""),
            (&long_name, b"short"),
            (b"X", &long_value),
            (&[b'a'; 127], &[b'b'; 127]),
        ];
        let mut out = BytesMut::new();
        params(&mut out, 3, pairs.iter().copied());
        let records = split_records(&out);
        assert_eq!(records.len(), 2);
        assert_eq!((records[1].0, records[1].1), (4, 3));
        assert!(records[1].2.is_empty(), "empty PARAMS ends the stream");
        let content = &records[0].2;
        // 127 fits the 1-byte form, 128 needs the 4-byte form with the high bit.
        assert!(content.windows(4).any(|w| w == [0x80, 0, 0, 128]));
        let decoded = decode_pairs(content).unwrap();
        let expected: Vec<_> = pairs
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn params_value_of_100_kib_spans_records() {
        let value: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
        let mut out = BytesMut::new();
        params(
            &mut out,
            1,
            [(&b"HTTP_X_BIG"[..], &value[..]), (&b"A"[..], &b"B"[..])],
        );
        let records = split_records(&out);
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].2.len(), MAX_CONTENT);
        assert!(records[2].2.is_empty());
        let content: Vec<u8> = records.iter().flat_map(|r| r.2.clone()).collect();
        assert_eq!(
            decode_pairs(&content).unwrap(),
            [
                (b"HTTP_X_BIG".to_vec(), value),
                (b"A".to_vec(), b"B".to_vec())
            ]
        );
    }

    #[test]
    fn params_with_no_pairs_is_just_the_end() {
        let mut out = BytesMut::new();
        params(&mut out, 2, []);
        assert_eq!(split_records(&out), [(4, 2, vec![])]);
    }

    #[test]
    fn stdin_splits_at_max_content_and_pads() {
        let data: Vec<u8> = (0..MAX_CONTENT * 2 + 10).map(|i| i as u8).collect();
        let mut out = BytesMut::new();
        stdin(&mut out, 9, &data);
        stdin(&mut out, 9, b"");
        stdin_end(&mut out, 9);
        abort_request(&mut out, 9);
        let records = split_records(&out);
        let lens: Vec<_> = records.iter().map(|r| (r.0, r.2.len())).collect();
        assert_eq!(
            lens,
            [(5, MAX_CONTENT), (5, MAX_CONTENT), (5, 10), (5, 0), (2, 0)]
        );
        let joined: Vec<u8> = records[..3].iter().flat_map(|r| r.2.clone()).collect();
        assert_eq!(joined, data);
        // Full records carry one byte of padding, the 10-byte one six.
        assert_eq!(out[6], 1);
        assert_eq!(out.len() % 8, 0);
    }

    #[test]
    fn decode_pairs_rejects_truncation() {
        assert!(decode_pairs(&[5, 1, b'a']).is_err());
        assert!(decode_pairs(&[0x80, 0, 1]).is_err());
        assert!(decode_pairs(&[1]).is_err());
        assert!(decode_pairs(&[0xff, 0xff, 0xff, 0xff, 0]).is_err());
        assert_eq!(decode_pairs(&[]).unwrap(), []);
    }

    fn sample_stream() -> (Vec<u8>, Vec<Event>) {
        let mut input = Vec::new();
        app_record(&mut input, 6, 1, b"Status: 200 OK\r\n\r\n", 3);
        app_record(&mut input, 7, 1, b"PHP Notice: x", 255);
        app_record(&mut input, 10, 0, b"\x0fsome-management", 0);
        app_record(&mut input, 6, 1, b"hello", 0);
        app_record(&mut input, 11, 0, &[99, 0, 0, 0, 0, 0, 0, 0], 0);
        app_record(&mut input, 7, 1, b"", 0);
        app_record(&mut input, 6, 1, b"", 4);
        app_end(&mut input, 1, 3, 0, 8);
        let events = vec![
            Event::Stdout(Bytes::from_static(b"Status: 200 OK\r\n\r\n")),
            Event::Stderr(Bytes::from_static(b"PHP Notice: x")),
            Event::Stdout(Bytes::from_static(b"hello")),
            Event::End {
                app_status: 3,
                protocol_status: 0,
            },
        ];
        (input, events)
    }

    #[test]
    fn decoder_gives_the_same_events_for_any_split() {
        let (input, expected) = sample_stream();
        assert_eq!(decode_chunked(1, &input, || input.len()).unwrap(), expected);
        assert_eq!(decode_chunked(1, &input, || 1).unwrap(), expected);
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..500 {
            let events = decode_chunked(1, &input, || rng.usize(1..40)).unwrap();
            assert_eq!(events, expected);
        }
    }

    #[test]
    fn padding_arriving_in_a_later_read_is_consumed() {
        let mut input = Vec::new();
        app_record(&mut input, 6, 1, b"abc", 5);
        app_end(&mut input, 1, 0, 0, 0);
        let mut decoder = Decoder::new(1);
        // The content and two of the five padding bytes.
        let mut buf = BytesMut::from(&input[..HEADER_LEN + 3 + 2]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Some(Event::Stdout(Bytes::from_static(b"abc")))
        );
        assert!(buf.is_empty());
        assert_eq!(decoder.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(&input[HEADER_LEN + 3 + 2..]);
        assert!(matches!(
            decoder.decode(&mut buf).unwrap(),
            Some(Event::End { .. })
        ));
        assert!(decoder.ended() && buf.is_empty());
        assert!(matches!(
            decoder.decode(&mut buf),
            Err(ProtoError::AfterEnd)
        ));
    }

    #[test]
    fn end_request_leaves_the_next_request_bytes_alone() {
        let mut input = Vec::new();
        app_end(&mut input, 1, 0, 0, 0);
        app_record(&mut input, 6, 2, b"next", 4);
        let mut buf = BytesMut::from(&input[..]);
        let mut decoder = Decoder::new(1);
        assert!(matches!(
            decoder.decode(&mut buf),
            Ok(Some(Event::End { .. }))
        ));
        assert_eq!(&buf[..], &input[HEADER_LEN + 8..]);
        let mut next = Decoder::new(2);
        assert_eq!(
            next.decode(&mut buf).unwrap(),
            Some(Event::Stdout(Bytes::from_static(b"next")))
        );
    }

    #[test]
    fn record_for_another_request_is_an_error() {
        let mut input = Vec::new();
        app_record(&mut input, 6, 2, b"not yours", 0);
        let mut buf = BytesMut::from(&input[..]);
        let err = Decoder::new(1).decode(&mut buf).unwrap_err();
        assert!(matches!(
            err,
            ProtoError::OtherRequest {
                expected: 1,
                got: 2
            }
        ));
        assert_eq!(buf.len(), input.len(), "the bad record stays in buf");
    }

    #[test]
    fn refusals_are_errors_that_a_retry_may_fix() {
        for (status, retry) in [(1, true), (2, true), (3, false), (9, false)] {
            let mut input = Vec::new();
            app_end(&mut input, 1, 0, status, 0);
            let mut buf = BytesMut::from(&input[..]);
            let mut decoder = Decoder::new(1);
            let err = decoder.decode(&mut buf).unwrap_err();
            assert_eq!(err.retry_may_help(), retry, "{err}");
            assert!(decoder.ended() && buf.is_empty());
        }
        let mut input = Vec::new();
        app_end(&mut input, 1, 0, 2, 0);
        let err = Decoder::new(1)
            .decode(&mut BytesMut::from(&input[..]))
            .unwrap_err();
        assert!(matches!(err, ProtoError::Overloaded));
        assert!(err.to_string().contains("overloaded"));
    }

    #[test]
    fn client_only_types_bad_versions_and_bad_end_are_errors() {
        for ty in [1, 2, 4, 5, 8, 9, 12, 0, 255] {
            let mut input = Vec::new();
            app_record(&mut input, ty, 1, b"x", 7);
            let err = Decoder::new(1)
                .decode(&mut BytesMut::from(&input[..]))
                .unwrap_err();
            assert!(matches!(err, ProtoError::UnexpectedType(t) if t == ty));
        }
        let mut input = Vec::new();
        app_record(&mut input, 6, 1, b"x", 7);
        input[0] = 2;
        let err = Decoder::new(1)
            .decode(&mut BytesMut::from(&input[..]))
            .unwrap_err();
        assert!(matches!(err, ProtoError::BadVersion(2)));
        let mut input = Vec::new();
        app_record(&mut input, 3, 1, &[0; 4], 4);
        let err = Decoder::new(1)
            .decode(&mut BytesMut::from(&input[..]))
            .unwrap_err();
        assert!(matches!(err, ProtoError::BadEndRequest(4)));
    }

    #[test]
    fn content_is_split_off_without_copying() {
        let mut input = Vec::new();
        app_record(&mut input, 6, 1, b"zero-copy", 7);
        let mut buf = BytesMut::from(&input[..]);
        let base = buf.as_ptr() as usize;
        let Some(Event::Stdout(content)) = Decoder::new(1).decode(&mut buf).unwrap() else {
            panic!("expected stdout");
        };
        assert_eq!(content.as_ptr() as usize, base + HEADER_LEN);
    }

    #[test]
    fn encoded_stdin_stream_decodes_as_records_of_the_right_shape() {
        // The encoder's output must satisfy the same framing the decoder
        // reads: run it through a decoder after relabelling STDIN as STDOUT.
        let data: Vec<u8> = (0..150_000).map(|i| (i * 7) as u8).collect();
        let mut out = BytesMut::new();
        stdin(&mut out, 4, &data);
        let mut input = out.to_vec();
        let mut at = 0;
        while at < input.len() {
            input[at + 1] = RecordType::Stdout as u8;
            let len = usize::from(u16::from_be_bytes([input[at + 4], input[at + 5]]));
            at += HEADER_LEN + len + usize::from(input[at + 6]);
        }
        app_end(&mut input, 4, 0, 0, 0);
        let events = decode_chunked(4, &input, || 4096).unwrap();
        let stdout: Vec<u8> = events
            .iter()
            .filter_map(|e| match e {
                Event::Stdout(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(stdout, data);
    }
}
