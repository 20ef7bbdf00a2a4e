//! HTTP/1 head encoding for both roles: the response head weir's server
//! writes ([`encode_response_head`], by hyper's rules: status line, field
//! order, implicit `content-length`, chunked for unknown lengths, no body
//! for `HEAD`/1xx/204/304, HTTP/1.0 answers, `connection: close` when
//! closing, a cached `date`) and the request head the upstream client
//! writes ([`RequestHead`]). Pure functions into a caller's buffer: never
//! does I/O, never allocates beyond the buffer's growth.

use crate::date;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// The kind of request an answer is written for.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseKind {
    pub is_head: bool,
    pub connect: bool,
    pub http10: bool,
    pub upgrade: bool,
    /// The client said `TE: trailers`: response trailers may go out.
    pub trailers: bool,
}

/// How the body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0, length unknown).
    Close,
}

/// What the body says of its length, as hyper's dispatcher sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// Already at its end (hyper's `None`).
    Empty,
    Known(u64),
    Unknown,
}

#[inline]
fn extend(dst: &mut Vec<u8>, b: &[u8]) {
    dst.extend_from_slice(b);
}

/// `HEAD`, 1xx, 204 and 304 never have a body.
pub fn can_have_body(is_head: bool, status: StatusCode) -> bool {
    !is_head
        && !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

pub fn can_have_content_length(status: StatusCode) -> bool {
    !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

/// Writes the status line and headers into `dst` by hyper's rules
/// (`hyper::proto::h1::role::Server::encode`), and returns how the body
/// follows. `close` comes in as "the connection closes after this" and
/// goes out including a `Connection: close` the handler set.
pub fn encode_response_head(
    parts: &mut http::response::Parts,
    length: BodyLength,
    kind: ResponseKind,
    close: &mut bool,
    dst: &mut Vec<u8>,
) -> Framing {
    let is_head = kind.is_head;
    let mut status = parts.status;
    if status.is_informational() && !(kind.upgrade && status == StatusCode::SWITCHING_PROTOCOLS) {
        // A handler cannot send an interim answer; hyper answers 500 in
        // its place too.
        status = StatusCode::INTERNAL_SERVER_ERROR;
        parts.headers.clear();
    }
    // A 2xx to CONNECT opens a tunnel: no body, no length (RFC 9110 9.3.6).
    let tunnel = kind.connect && status.is_success();
    // A reason phrase the proxy kept from its upstream goes out as it came,
    // as hyper writes it.
    let reason = parts.extensions.get::<super::ReasonPhrase>();
    if status == StatusCode::OK && reason.is_none() && !kind.http10 {
        extend(dst, b"HTTP/1.1 200 OK\r\n");
    } else {
        // An HTTP/1.0 client is answered in HTTP/1.0, as hyper does.
        extend(
            dst,
            if kind.http10 {
                b"HTTP/1.0 "
            } else {
                b"HTTP/1.1 "
            },
        );
        extend(dst, status.as_str().as_bytes());
        extend(dst, b" ");
        match reason {
            Some(r) => extend(dst, r.as_bytes()),
            None => extend(
                dst,
                status.canonical_reason().unwrap_or("<none>").as_bytes(),
            ),
        }
        extend(dst, b"\r\n");
    }
    if kind.http10 {
        // hyper's `fix_keep_alive`: a 1.0 connection that stays open says
        // so; one that closes says nothing.
        if !*close {
            match parts.headers.entry(header::CONNECTION) {
                header::Entry::Occupied(mut e) => {
                    if !e.iter().any(|v| has_token(v.as_bytes(), b"keep-alive")) {
                        e.append(HeaderValue::from_static("keep-alive"));
                    }
                }
                header::Entry::Vacant(e) => {
                    e.insert(HeaderValue::from_static("keep-alive"));
                }
            }
        }
    } else if *close {
        // As hyper: `close` joins the handler's Connection values, or is a
        // header of its own at the end.
        match parts.headers.entry(header::CONNECTION) {
            header::Entry::Occupied(mut e) => {
                if !e.iter().any(|v| has_token(v.as_bytes(), b"close")) {
                    e.append(HeaderValue::from_static("close"));
                }
            }
            header::Entry::Vacant(e) => {
                e.insert(HeaderValue::from_static("close"));
            }
        }
    }

    let chunkable = can_have_body(is_head, status) && !tunnel;
    let has_length = can_have_content_length(status) && !tunnel;
    let mut framing = None;
    let mut wrote_date = false;
    let mut last: Option<HeaderName> = None;
    // `drain` keeps the map's table, which `write_response` hands back to
    // `header_maps` for a later message.
    for (name, value) in parts.headers.drain() {
        // `None`: one more value of the previous name.
        let repeat = name.is_none();
        if let Some(n) = name {
            last = Some(n);
        }
        let Some(name) = last.as_ref() else { continue };
        match *name {
            header::CONTENT_LENGTH if tunnel => continue,
            header::CONTENT_LENGTH => {
                let len = match length {
                    BodyLength::Known(n) => Some(n),
                    BodyLength::Unknown => value.to_str().ok().and_then(|s| s.parse::<u64>().ok()),
                    BodyLength::Empty if is_head => Some(0),
                    // No body: the header is dropped for the implicit one below.
                    BodyLength::Empty => None,
                };
                if repeat || framing.is_some() {
                    continue;
                }
                let Some(len) = len else { continue };
                framing = Some(Framing::Length(len));
            }
            header::TRANSFER_ENCODING => {
                if !chunkable || kind.http10 || repeat || framing.is_some() {
                    continue;
                }
                framing = Some(Framing::Chunked);
                extend(dst, b"transfer-encoding: ");
                extend(dst, value.as_bytes());
                if !has_token(value.as_bytes(), b"chunked") {
                    extend(dst, b", chunked");
                }
                extend(dst, b"\r\n");
                continue;
            }
            header::CONNECTION => {
                if has_token(value.as_bytes(), b"close") {
                    *close = true;
                }
                if repeat {
                    // hyper joins them onto one line.
                    dst.truncate(dst.len() - 2);
                    extend(dst, b", ");
                } else {
                    extend(dst, b"connection: ");
                }
                extend(dst, value.as_bytes());
                extend(dst, b"\r\n");
                continue;
            }
            header::DATE => wrote_date = true,
            header::TRAILER if !chunkable || kind.http10 => continue,
            _ => {}
        }
        extend(dst, name.as_str().as_bytes());
        extend(dst, b": ");
        extend(dst, value.as_bytes());
        extend(dst, b"\r\n");
    }
    let framing = match framing {
        Some(f) => f,
        None => match length {
            BodyLength::Unknown if chunkable && kind.http10 => Framing::Close,
            BodyLength::Unknown if chunkable => {
                extend(dst, b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
            // Not chunkable means no body at all.
            BodyLength::Unknown => Framing::Length(0),
            BodyLength::Empty | BodyLength::Known(0) => {
                if has_length && !is_head {
                    extend(dst, b"content-length: 0\r\n");
                }
                Framing::Length(0)
            }
            BodyLength::Known(n) => {
                if has_length {
                    extend(dst, b"content-length: ");
                    extend(dst, itoa::Buffer::new().format(n).as_bytes());
                    extend(dst, b"\r\n");
                    Framing::Length(n)
                } else {
                    Framing::Length(0)
                }
            }
        },
    };
    if !wrote_date {
        extend(dst, b"date: ");
        date::extend(dst);
        extend(dst, b"\r\n");
    }
    extend(dst, b"\r\n");
    if chunkable {
        framing
    } else {
        Framing::Length(0)
    }
}

/// Whether the comma-separated `value` holds `token` (case-insensitive).
#[inline]
pub fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// What is sent upstream: the request line and header fields.
pub struct RequestHead<'a, F> {
    pub method: &'a Method,
    /// Origin form: path and query.
    pub target: &'a str,
    pub host: &'a HeaderValue,
    /// Every field but Host (which `host` replaces; a Host among them is
    /// skipped).
    pub fields: F,
}

impl<'f, F> RequestHead<'_, F>
where
    F: Iterator<Item = (&'f HeaderName, &'f [u8])>,
{
    /// Encodes the head as hyper's client does: lower-case names, Host
    /// first, and a Content-Length for a body that has none.
    pub fn encode(self, out: &mut Vec<u8>, body_len: Option<usize>) {
        self.encode_for(
            out,
            body_len.map_or(BodyLen::None, |n| BodyLen::Known(n as u64)),
        );
    }

    /// [`RequestHead::encode`] for any body; `true` when the body must go
    /// out chunked (a streamed body with no Content-Length).
    pub fn encode_for(self, out: &mut Vec<u8>, body: BodyLen) -> bool {
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(b"\r\n");
        let mut has_length = false;
        for (name, value) in self.fields {
            if name == header::HOST {
                continue;
            }
            has_length |= name == header::CONTENT_LENGTH;
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        let chunked = !has_length && body == BodyLen::Unknown;
        match body {
            BodyLen::Known(n) if !has_length => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            BodyLen::Unknown if chunked => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            }
            _ => {}
        }
        out.extend_from_slice(b"\r\n");
        chunked
    }
}

/// What a request head says of its body when the fields do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    None,
    Known(u64),
    /// Streamed, of no known length: chunked.
    Unknown,
}
