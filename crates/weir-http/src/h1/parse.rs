//! The one HTTP/1 head parser, for both roles: [`parse_request`] for weir's
//! server, [`parse_response`] for its upstream client.
//!
//! One loop finds a complete head with httparse (hyper's own parser) and
//! notes where its start line and each field lie ([`scan`]); one builds the
//! field map from the head's own bytes ([`field_map`]). Each role then
//! applies its rules: a request's framing by the strict reading of
//! [`super::framing`] (a smuggling shape is a [`HeadError::Framing`]), a
//! response's by RFC 9112 §6.3 as hyper's client reads it (lenient: an
//! upstream is trusted more than a client, and what it sends is framed
//! again on the way out).
//!
//! Never does I/O. A complete head is split off the front of the buffer
//! without a copy and the request target, field values and reason phrase
//! share its bytes; a head that is refused, or not complete yet, leaves
//! the buffer as it was.

use std::cell::RefCell;
use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Version};

use super::framing::{self, BodyFraming, RequestFraming, Violation};
use super::head::has_token;
use super::{Decoder, Incoming, ReasonPhrase};

/// Header lines parsed into an array on the stack (hyper's default); a
/// request limit above it parses into one on the heap.
pub const MAX_HEADERS: usize = 100;

/// hyper's request-target limit (`MAX_URI_LEN`): longer targets get 414.
pub const MAX_URI_LEN: usize = (u16::MAX - 1) as usize;

/// The largest response head accepted (hyper's client allows about 400 KiB;
/// nginx's default proxy_buffer_size is 4–8 KiB and fails above it).
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Why a head was refused.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("malformed head: {0}")]
    Malformed(httparse::Error),
    #[error("more header fields than allowed")]
    TooManyFields,
    #[error("head larger than {0} bytes")]
    TooLarge(usize),
    #[error("request target longer than {MAX_URI_LEN} bytes")]
    TargetTooLong,
    #[error("invalid method")]
    BadMethod,
    #[error("invalid request target")]
    BadTarget,
    #[error("malformed header field")]
    BadField,
    #[error("invalid status code")]
    BadStatus,
    /// A request whose framing the strict reading refuses: a smuggling shape.
    #[error(transparent)]
    Framing(#[from] Violation),
    #[error("invalid Content-Length in the response")]
    BadLength,
    #[error("unexpected 101 Switching Protocols")]
    UnexpectedSwitch,
}

impl HeadError {
    /// The status a server answers a refused request head with (hyper's).
    pub fn status(&self) -> StatusCode {
        match self {
            HeadError::TooManyFields | HeadError::TooLarge(_) => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            HeadError::TargetTooLong => StatusCode::URI_TOO_LONG,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// Where a part of a head lies in it: offset and length (u32: a head is far
/// below 4 GiB, and a smaller array is less to clear per head). An empty
/// part is (0, 0): httparse may return a static empty slice for it, one
/// that does not point into the buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Span(u32, u32);

impl Span {
    fn of(base: &[u8], s: &[u8]) -> Span {
        if s.is_empty() {
            Span(0, 0)
        } else {
            Span(
                (s.as_ptr() as usize - base.as_ptr() as usize) as u32,
                s.len() as u32,
            )
        }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.0 as usize..(self.0 + self.1) as usize
    }

    fn of_head(self, head: &[u8]) -> &[u8] {
        &head[self.range()]
    }
}

/// A field line: where its name and its value lie.
#[derive(Debug, Clone, Copy, Default)]
struct Field {
    name: Span,
    value: Span,
}

/// The start line of a complete head.
#[derive(Debug, Default)]
struct StartLine {
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    minor: u8,
    // A request's.
    method: Span,
    target: Span,
    // A response's.
    code: u16,
    reason: Option<Span>,
}

/// Which start line a head opens with.
#[derive(Clone, Copy)]
enum Role {
    Request,
    Response,
}

/// What [`scan`] found at the front of a buffer.
enum Scanned {
    /// A complete head of this many bytes.
    Complete(usize, StartLine),
    Partial,
}

/// The shared loop: finds a complete head at the front of `buf` with
/// httparse and notes where its start line and fields lie, the fields in
/// `fields` (as many as it holds are allowed; `count` is set to how many
/// there are).
fn scan(
    buf: &[u8],
    role: Role,
    fields: &mut [Field],
    count: &mut usize,
) -> Result<Scanned, HeadError> {
    if fields.len() <= MAX_HEADERS {
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        scan_into(buf, role, &mut headers[..fields.len()], fields, count)
    } else {
        let mut headers = vec![MaybeUninit::uninit(); fields.len()];
        scan_into(buf, role, &mut headers, fields, count)
    }
}

fn scan_into<'b>(
    buf: &'b [u8],
    role: Role,
    headers: &mut [MaybeUninit<httparse::Header<'b>>],
    fields: &mut [Field],
    count: &mut usize,
) -> Result<Scanned, HeadError> {
    let config = httparse::ParserConfig::default();
    let mut line = StartLine::default();
    let (status, found) = match role {
        Role::Request => {
            let mut req = httparse::Request::new(&mut []);
            let status = config.parse_request_with_uninit_headers(&mut req, buf, headers);
            if let Ok(httparse::Status::Complete(_)) = status {
                let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version)
                else {
                    return Err(HeadError::BadTarget);
                };
                line.method = Span::of(buf, method.as_bytes());
                line.target = Span::of(buf, target.as_bytes());
                line.minor = minor;
            }
            (status, req.headers)
        }
        Role::Response => {
            let mut resp = httparse::Response::new(&mut []);
            let status = config.parse_response_with_uninit_headers(&mut resp, buf, headers);
            line.minor = resp.version.unwrap_or(1);
            line.code = resp.code.unwrap_or(0);
            line.reason = resp.reason.map(|r| Span::of(buf, r.as_bytes()));
            (status, resp.headers)
        }
    };
    match status {
        Ok(httparse::Status::Complete(len)) => {
            for (f, h) in fields.iter_mut().zip(found.iter()) {
                *f = Field {
                    name: Span::of(buf, h.name.as_bytes()),
                    value: Span::of(buf, h.value),
                };
            }
            *count = found.len();
            Ok(Scanned::Complete(len, line))
        }
        Ok(httparse::Status::Partial) => Ok(Scanned::Partial),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyFields),
        Err(e) => Err(HeadError::Malformed(e)),
    }
}

/// The shared map builder: the fields of `head` as a map whose values share
/// its bytes, with room for `extra` more. `name_of` makes each name (a
/// token, any case); `each` sees each field as it goes in.
fn field_map(
    head: &Bytes,
    fields: &[Field],
    extra: usize,
    mut name_of: impl FnMut(&[u8]) -> Option<HeaderName>,
    mut each: impl FnMut(&HeaderName, &[u8]) -> Result<(), HeadError>,
) -> Result<HeaderMap, HeadError> {
    let mut map = crate::header_maps::take(fields.len() + extra);
    for f in fields {
        let name = name_of(f.name.of_head(head)).ok_or(HeadError::BadField)?;
        each(&name, f.value.of_head(head))?;
        let value = HeaderValue::from_maybe_shared(head.slice(f.value.range()))
            .map_err(|_| HeadError::BadField)?;
        map.append(name, value);
    }
    Ok(map)
}

/// Puts a head split off `buf` back in front of it, for a head refused once
/// it was split off (its slices dropped, so this takes no copy).
fn put_back(buf: &mut BytesMut, head: Bytes) {
    let mut whole = BytesMut::from(head);
    whole.unsplit(std::mem::take(buf));
    *buf = whole;
}

/// The limits a request head is parsed under (hyper's, from `server.limits`).
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// A head still incomplete at this many bytes is answered 431 (hyper's
    /// `max_buf_size`).
    pub max_buf: usize,
    /// More field lines than this are answered 431.
    pub max_headers: usize,
    /// The largest trailer section of a chunked body.
    pub max_trailers: usize,
}

impl HeadLimits {
    /// As hyper is configured from the `header_size` and `headers` limits.
    pub fn new(header_size: usize, headers: usize) -> Self {
        HeadLimits {
            max_buf: (header_size * 2).max(16 * 1024),
            max_headers: if headers > MAX_HEADERS {
                headers + 1
            } else {
                MAX_HEADERS
            },
            max_trailers: header_size,
        }
    }
}

/// What one request head says beyond the request itself.
#[derive(Debug)]
pub struct Head {
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    pub http10: bool,
    /// How the body follows the head; `None`: it has none.
    pub body: Option<Decoder>,
    pub expect_continue: bool,
    /// An HTTP/1.1 `Upgrade`, or a `CONNECT`.
    pub upgrade: bool,
}

/// The request at the front of `buf`, by
/// `hyper::proto::h1::role::Server::parse`'s rules and the strict reading
/// of framing, split off `buf` (with an empty body for the caller to feed);
/// `Ok(None)`: not complete yet.
pub fn parse_request(
    buf: &mut BytesMut,
    limits: HeadLimits,
) -> Result<Option<(Request<Incoming>, Head)>, HeadError> {
    let mut on_stack = [Field::default(); MAX_HEADERS];
    let mut on_heap = Vec::new();
    let fields = if limits.max_headers <= MAX_HEADERS {
        &mut on_stack[..]
    } else {
        on_heap.resize(limits.max_headers, Field::default());
        &mut on_heap[..]
    };
    let mut n = 0;
    let (len, line) = match scan(buf, Role::Request, fields, &mut n)? {
        Scanned::Complete(len, line) => (len, line),
        Scanned::Partial if buf.len() < limits.max_buf => return Ok(None),
        Scanned::Partial => return Err(HeadError::TooLarge(limits.max_buf)),
    };
    // httparse takes a bare LF for a line ending.
    framing::check_line_endings(&buf[..len])?;
    if line.target.1 as usize > MAX_URI_LEN {
        return Err(HeadError::TargetTooLong);
    }
    let method = match line.method.of_head(buf) {
        b"GET" => Method::GET,
        b"HEAD" => Method::HEAD,
        b"POST" => Method::POST,
        m => Method::from_bytes(m).map_err(|_| HeadError::BadMethod)?,
    };
    let head = buf.split_to(len).freeze();
    match request_of(&head, &line, &fields[..n], method, limits) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            put_back(buf, head);
            Err(e)
        }
    }
}

fn request_of(
    head: &Bytes,
    line: &StartLine,
    fields: &[Field],
    method: Method,
    limits: HeadLimits,
) -> Result<(Request<Incoming>, Head), HeadError> {
    let uri = http::Uri::from_maybe_shared(head.slice(line.target.range()))
        .map_err(|_| HeadError::BadTarget)?;
    let http11 = line.minor == 1;
    let mut h = Head {
        keep_alive: http11,
        http10: !http11,
        body: None,
        expect_continue: false,
        upgrade: method == Method::CONNECT,
    };
    let mut saw_close = false;
    let mut framing = RequestFraming::default();
    let map = field_map(
        head,
        fields,
        0,
        |n| HeaderName::from_bytes(n).ok(),
        |name, value| {
            match *name {
                header::TRANSFER_ENCODING => framing.transfer_encoding(value.trim_ascii()),
                header::CONTENT_LENGTH => framing.content_length(value.trim_ascii())?,
                header::CONNECTION => {
                    if saw_close || has_token(value, b"close") {
                        saw_close = true;
                        h.keep_alive = false;
                    } else if !h.keep_alive {
                        h.keep_alive = has_token(value, b"keep-alive");
                    }
                }
                header::EXPECT => h.expect_continue = value.eq_ignore_ascii_case(b"100-continue"),
                header::UPGRADE => h.upgrade = http11,
                _ => {}
            }
            Ok(())
        },
    )?;
    h.body = match framing.finish(!http11)? {
        BodyFraming::Chunked => Some(Decoder::chunked(limits.max_trailers)),
        BodyFraming::Length(n) => Some(Decoder::length(n)),
        BodyFraming::None => None,
    };
    let mut r = Request::new(Incoming::empty());
    *r.method_mut() = method;
    *r.uri_mut() = uri;
    *r.version_mut() = if http11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    *r.headers_mut() = map;
    Ok((r, h))
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// HEAD, 204, 304: nothing follows the head.
    None,
    Length(u64),
    Chunked,
    /// Everything until the upstream closes.
    Close,
}

/// A final response head, read.
#[derive(Debug)]
pub struct ResponseHead {
    pub parts: http::response::Parts,
    pub framing: ResponseFraming,
    /// The connection can take another request once the body is read.
    pub keep_alive: bool,
    /// A hop-by-hop field is among `parts.headers` (rarely: a proxy strips
    /// them only then).
    pub hop_by_hop: bool,
}

/// What a response head at the front of a buffer is.
#[derive(Debug)]
pub enum Response {
    /// A 1xx interim response (skipped, as hyper's client does).
    Interim,
    Final(ResponseHead),
}

/// The response head at the front of `buf`, split off it; `Ok(None)`: not
/// complete yet. `head_request`: the request was HEAD; `upgrade`: it asked
/// to switch protocols, so a 101 is its final answer (and nothing after it
/// is HTTP).
pub fn parse_response(
    buf: &mut BytesMut,
    head_request: bool,
    upgrade: bool,
) -> Result<Option<Response>, HeadError> {
    let mut fields = [Field::default(); MAX_HEADERS];
    let mut n = 0;
    let (len, line) = match scan(buf, Role::Response, &mut fields, &mut n)? {
        Scanned::Complete(len, line) => (len, line),
        Scanned::Partial if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(HeadError::TooLarge(MAX_RESPONSE_HEAD));
        }
        Scanned::Partial => return Ok(None),
    };
    let fields = &fields[..n];
    let switched = line.code == 101 && upgrade;
    if (100..200).contains(&line.code) && !switched {
        if line.code == 101 {
            return Err(HeadError::UnexpectedSwitch);
        }
        let _ = buf.split_to(len);
        return Ok(Some(Response::Interim));
    }
    let status = StatusCode::from_u16(line.code).map_err(|_| HeadError::BadStatus)?;
    let version = if line.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let raw = || {
        fields
            .iter()
            .map(|f| (f.name.of_head(buf), f.value.of_head(buf)))
    };
    let mut seen = Seen::default();
    for (name, _) in raw() {
        seen.note(name);
    }
    let (framing, mut keep_alive) = if switched {
        (ResponseFraming::None, false)
    } else {
        response_framing(raw(), seen, status, head_request)?
    };
    // Only `Connection` can end a keep-alive HTTP/1.1 response's connection.
    if version == Version::HTTP_10 || seen.connection {
        let connection = raw()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .map(|(_, v)| v);
        keep_alive &= super::keeps_alive(version == Version::HTTP_10, connection);
    }
    let head = buf.split_to(len).freeze();
    // Room for the two fields a proxy adds on the way out (Server, Via): a
    // full map grows by reallocating and rehashing on every response.
    let headers =
        NAMES.with_borrow_mut(|names| field_map(&head, fields, 2, |n| names.get(n), |_, _| Ok(())));
    let headers = match headers {
        Ok(h) => h,
        Err(e) => {
            put_back(buf, head);
            return Err(e);
        }
    };
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = version;
    if let Some(at) = line.reason {
        let r = at.of_head(&head);
        if status.canonical_reason().map(str::as_bytes) != Some(r)
            && let Some(p) = ReasonPhrase::new(head.slice(at.range()))
        {
            parts.extensions.insert(p);
        }
    }
    parts.headers = headers;
    Ok(Some(Response::Final(ResponseHead {
        parts,
        framing,
        keep_alive,
        hop_by_hop: seen.hop_by_hop,
    })))
}

/// The framing and hop-by-hop fields a response head holds, by their names
/// as they arrived (a switch on the length, before any `HeaderName` is
/// made): most heads hold none, and then nothing more is looked up.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    transfer_encoding: bool,
    content_length: bool,
    connection: bool,
    hop_by_hop: bool,
}

impl Seen {
    fn note(&mut self, name: &[u8]) {
        let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
        match name.len() {
            14 if is(b"content-length") => self.content_length = true,
            10 if is(b"connection") => {
                self.connection = true;
                self.hop_by_hop = true;
            }
            17 if is(b"transfer-encoding") => {
                self.transfer_encoding = true;
                self.hop_by_hop = true;
            }
            _ => self.hop_by_hop |= is_hop_by_hop_raw(name),
        }
    }
}

/// Whether a field name as it arrived (any case) is hop-by-hop by
/// definition (RFC 9110 §7.6.1), `Upgrade` included: what a proxy strips
/// from a response that is not a tunnel, besides what `Connection` names.
pub fn is_hop_by_hop_raw(name: &[u8]) -> bool {
    let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        2 => is(b"te"),
        7 => is(b"upgrade"),
        10 => is(b"connection") || is(b"keep-alive"),
        16 => is(b"proxy-connection"),
        17 => is(b"transfer-encoding"),
        18 => is(b"proxy-authenticate"),
        19 => is(b"proxy-authorization"),
        _ => false,
    }
}

/// Whether `HeaderValue::to_str` takes these bytes (visible ASCII, space
/// and tab), for a value seen as raw bytes.
fn is_text(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (b' '..0x7f).contains(&b))
}

/// A response body's framing, and whether it leaves the connection
/// reusable. `fields`: the head's fields as sent (names in any case).
fn response_framing<'h>(
    fields: impl Iterator<Item = (&'h [u8], &'h [u8])> + Clone,
    seen: Seen,
    status: StatusCode,
    head_request: bool,
) -> Result<(ResponseFraming, bool), HeadError> {
    if head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((ResponseFraming::None, true));
    }
    if seen.transfer_encoding {
        // The last coding decides; with a Content-Length too, the message
        // is suspect and the connection is not reused (RFC 9112 §6.3). A
        // value that is not visible ASCII names no coding weir knows.
        let last = fields
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding"))
            .last()
            .map(|(_, v)| v)
            .filter(|v| is_text(v))
            .and_then(|v| v.rsplit(|&b| b == b',').next())
            .map(<[u8]>::trim_ascii);
        let reuse = !seen.content_length;
        return Ok(match last {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => (ResponseFraming::Chunked, reuse),
            _ => (ResponseFraming::Close, false),
        });
    }
    let mut len: Option<u64> = None;
    // Without a Content-Length the walk stops at once.
    let lengths = fields
        .take_while(|_| seen.content_length)
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length"))
        .map(|(_, v)| v);
    for v in lengths {
        for part in v.split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) || part.len() > 19 {
                return Err(HeadError::BadLength);
            }
            let n: u64 = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(HeadError::BadLength)?;
            if len.is_some_and(|l| l != n) {
                return Err(HeadError::BadLength);
            }
            len = Some(n);
        }
    }
    Ok(match len {
        Some(n) => (ResponseFraming::Length(n), true),
        None => (ResponseFraming::Close, false),
    })
}

thread_local! {
    static NAMES: RefCell<Names> = const { RefCell::new(Names { known: Vec::new(), next: 0 }) };
}

/// The field names met in response heads, as they were spelled, each with
/// the `HeaderName` made of it.
///
/// Why: `HeaderName::from_bytes` lowercases a name into a scratch buffer
/// and matches it against http's standard names for every field; an
/// upstream spells the same few names the same way in every response, and
/// comparing their bytes is cheaper. At most [`NAMES_KEPT`] per worker,
/// replaced in turn, so an upstream that sends ever new names costs a miss
/// each, never memory.
struct Names {
    known: Vec<(Box<[u8]>, HeaderName)>,
    /// The entry a new name replaces once `known` is full.
    next: usize,
}

const NAMES_KEPT: usize = 32;

impl Names {
    /// `raw`: a field name as httparse found it (a token, any case).
    fn get(&mut self, raw: &[u8]) -> Option<HeaderName> {
        if let Some((_, name)) = self.known.iter().find(|(k, _)| **k == *raw) {
            return Some(name.clone());
        }
        let name = HeaderName::from_bytes(raw).ok()?;
        let entry = (Box::from(raw), name.clone());
        if self.known.len() < NAMES_KEPT {
            self.known.push(entry);
        } else {
            self.known[self.next] = entry;
            self.next = (self.next + 1) % NAMES_KEPT;
        }
        Some(name)
    }
}

#[cfg(test)]
mod tests;
