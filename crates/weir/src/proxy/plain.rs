//! The plain-proxy lane: a `GET` or `HEAD` without a body, read by weir's
//! own HTTP/1.1 loop (`server::http1`), for a listener whose one site only
//! proxies, goes upstream and back as bytes: the request head is written
//! from httparse's fields into the upstream's buffer, and the response head
//! from the upstream's fields into the client's, with no `Request`,
//! `Response` or `HeaderMap` built on either side.
//!
//! Why by hand: with every layer already lean, a proxied request still cost
//! about 17,000 instructions and 3.8 µs of weir's CPU against 1.0 µs for a
//! byte relay, spread over building the request's and the response's maps,
//! the site and proxy layers around them and encoding both heads again from
//! the maps (callgrind, BENCHMARKS.md §6 "What a microsecond is worth"). A
//! microsecond there is 4–8 % of the proxy's rate on this machine.
//!
//! The lane only takes the first attempt, and only the common case:
//! - [`Proxy::plain_ok`]: a proxy whose fields and choice of upstream need
//!   nothing but the request line and fields (no trusted proxies, sticky
//!   cookie, hashing or connection limit); the listener checks the rest
//!   (`site::Listener::plain`);
//! - [`Proxy::plain_start`]: a request without `TE` (or `Via` when weir
//!   adds its own), a healthy upstream and an idle pooled connection of
//!   weir's own client to it;
//! - [`Proxy::plain_exchange`]: a response whose body has a length or none.
//!   A chunked or close-delimited one becomes a `Response` as on the
//!   general path; a failure is handed to `Proxy::serve` as a [`Resume`],
//!   which retries, fails over and answers exactly as if it had made the
//!   attempt itself.
//!
//! What goes upstream and back is what the general path sends (same fields,
//! same order, lower-case names, same added and removed fields, hyper's
//! rules for the client's head), except that a field repeated apart from
//! its first line keeps its place rather than being moved next to it as a
//! `HeaderMap` does. `tests/proxy_plain.rs` compares the two paths' bytes.

use std::net::IpAddr;

use http::{Response, StatusCode, Version};

use super::forward::{IpText, ValueBuf, forwarded_element, is_text};
use super::h1_client::{self, Encoded, Final, Framing, RawHead};
use super::pool::{self, Sender};
use super::{
    ActiveGuard, Done, Failure, FromUpstream, Proxy, ProxyError, may_retry, own_body,
    upstream_host_bytes,
};
use crate::body::Body;
use crate::config::proxy::Balance;
use crate::proxy::forward::Present;
use crate::server::http1::take_head_buf;
use crate::site::ConnInfo;

/// A request as weir's HTTP/1.1 loop parsed it, before any `Request` is
/// made of it.
pub struct PlainRequest<'a> {
    pub head_request: bool,
    /// Origin form: path and query.
    pub target: &'a str,
    pub fields: &'a [httparse::Header<'a>],
    /// The first `Host`.
    pub host: Option<&'a [u8]>,
}

/// A request the lane took: its upstream, the connection to it, and its
/// head encoded for it.
pub struct Started {
    idx: usize,
    conn: h1_client::Conn,
    active: ActiveGuard,
    request: Encoded<'static>,
    head_request: bool,
}

/// Where the lane left a request, for `Proxy::serve` to go on from: an
/// upstream it picked but had no idle connection to (picking again would
/// move the balancer twice), or its failed first attempt.
pub struct Resume {
    /// Picked, not yet tried: the general path's first attempt goes there.
    pub(super) first: Option<usize>,
    pub(super) tried: Option<usize>,
    pub(super) attempt: u32,
    pub(super) last: Option<(usize, ProxyError)>,
    /// Whether another attempt may follow; if not, `last` is the answer.
    pub(super) retry: bool,
}

/// How the lane's exchange ended.
pub enum Exchanged {
    /// The client's head is encoded in `head` (the worker's buffer: give it
    /// back with `server::http1::give_head_buf`); `body` follows it,
    /// `length` bytes.
    Served {
        head: Vec<u8>,
        body: Body,
        length: u64,
        close: bool,
    },
    /// A response the general path writes (a chunked or close-delimited body).
    Response(Response<Body>),
    /// The attempt failed: `Proxy::serve` goes on from it (boxed: rare, and
    /// it would make the lane's future larger).
    Resume(Box<Resume>),
}

static VIA: &str = "1.1 weir";
/// The `Server` field weir puts on every response.
static SERVER_LINE: &[u8] = b"server: weir\r\n";

impl Proxy {
    /// Whether this proxy's requests can take the lane at all.
    pub fn plain_ok(&self) -> bool {
        self.own_h1
            && self.cfg.trusted_proxies.is_empty()
            && self.cfg.sticky_cookie.is_none()
            && self.cfg.max_conns == 0
            && !matches!(self.cfg.balance, Balance::IpHash | Balance::Hash(_))
    }

    /// Takes `r` into the lane if an upstream and an idle connection of
    /// weir's own client to it are at hand; otherwise leaves it to the
    /// general path, with the upstream it picked if it got that far.
    pub fn plain_start(
        &self,
        r: &PlainRequest<'_>,
        info: &ConnInfo,
    ) -> Result<Started, Option<Box<Resume>>> {
        let mut client_via = false;
        for f in r.fields {
            match f.name.len() {
                2 if f.name.eq_ignore_ascii_case("te") => return Err(None),
                3 if f.name.eq_ignore_ascii_case("via") => client_via = true,
                _ => {}
            }
        }
        if client_via && self.cfg.via {
            // weir's Via joins the client's: the general path builds it.
            return Err(None);
        }
        // None healthy: the general path answers it.
        let idx = self.pick(None, None, &[]).ok_or(None)?;
        let key = (self.id, idx);
        let picked = || {
            Some(Box::new(Resume {
                first: Some(idx),
                tried: None,
                attempt: 0,
                last: None,
                retry: true,
            }))
        };
        let conn = match pool::checkout(key, self.cfg.idle_timeout) {
            Some(Sender::Own(c)) => c,
            Some(other) => {
                pool::checkin(key, other, self.cfg.max_idle);
                return Err(picked());
            }
            None => return Err(picked()),
        };
        let up = &self.ups[idx];
        let active = ActiveGuard::new(up.clone());
        let mut out = h1_client::request_buffer();
        out.extend_from_slice(if r.head_request { b"HEAD " } else { b"GET " });
        out.extend_from_slice(r.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(upstream_host_bytes(&self.cfg.host, r.host, up));
        out.extend_from_slice(b"\r\n");
        for f in r.fields {
            if !dropped_upstream(f.name.as_bytes(), self.cfg.via) {
                push_field(&mut out, f.name.as_bytes(), f.value);
            }
        }
        if self.cfg.x_forwarded {
            push_own(
                &mut out,
                b"x-forwarded-for: ",
                IpText::new(info.peer.ip()).as_bytes(),
            );
            out.extend_from_slice(if info.tls {
                b"x-forwarded-proto: https\r\n"
            } else {
                b"x-forwarded-proto: http\r\n"
            });
            if let Some(h) = r.host {
                push_own(&mut out, b"x-forwarded-host: ", h);
            }
        }
        if self.cfg.forwarded {
            push_own(&mut out, b"forwarded: ", &forwarded(info, r.host));
        }
        if self.cfg.via {
            push_own(&mut out, b"via: ", VIA.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        Ok(Started {
            idx,
            conn,
            active,
            request: Encoded::head_only(out),
            head_request: r.head_request,
        })
    }

    /// Sends the request and reads the response head, encoding the client's
    /// head when its body has a length or none (with the listener's
    /// `alt_svc`, if it offers HTTP/3). `close_now`: whether the client
    /// connection closes after this response, asked as the response head
    /// arrives.
    pub async fn plain_exchange(
        &self,
        s: Started,
        alt_svc: Option<&[u8]>,
        close_now: &(dyn Fn() -> bool + Sync),
    ) -> Exchanged {
        let Started {
            idx,
            mut conn,
            active,
            request,
            head_request,
        } = s;
        let up = &self.ups[idx];
        let reused = conn.reused();
        let timeout = self.cfg.response_timeout;
        let added = Added {
            via: self.cfg.via.then_some(VIA),
            alt_svc,
        };
        let mut close = false;
        let mut head = Vec::new();
        let mut timer = conn.take_timer();
        let r = {
            let exchange = std::pin::pin!(async {
                conn.send(request).await?;
                // Encoded into the worker's head buffer as the head arrives;
                // nothing awaits between here and the write to the client, so
                // the buffer is back before another connection wants it.
                let mut encode = |raw: &RawHead<'_>| {
                    close = close_now();
                    head = take_head_buf();
                    encode_response_head(raw, &added, head_request, close, &mut head);
                };
                conn.read_head_or_raw(head_request, Some(&mut encode))
                    .await
                    .map_err(|e| (e, false))
            });
            timer.within(timeout, exchange).await
        };
        conn.put_timer(timer);
        let done = Done {
            key: (self.id, idx),
            sender: None,
            max_idle: self.cfg.max_idle,
            _permit: None,
            _active: active,
        };
        let (e, failure) = match r {
            Some(Ok(Final::Raw {
                framing,
                keep_alive,
            })) => {
                let length = match framing {
                    Framing::Length(n) => n,
                    _ => 0,
                };
                let body = own_body(conn, framing, keep_alive, done);
                return Exchanged::Served {
                    head,
                    body,
                    length,
                    close,
                };
            }
            Some(Ok(Final::Head(h))) => {
                let from = FromUpstream::Own {
                    conn,
                    framing: h.framing,
                    keep_alive: h.keep_alive,
                    hop_by_hop: h.hop_by_hop,
                };
                return Exchanged::Response(self.respond_from(
                    h.parts,
                    from,
                    done,
                    up,
                    Version::HTTP_11,
                    false,
                ));
            }
            // As `Proxy::send_own` classes it.
            Some(Err((e, nothing_sent))) => {
                let failure = if reused && e.is_closed_before_response() {
                    Failure::Stale
                } else if nothing_sent {
                    Failure::NotSent
                } else {
                    Failure::AfterSend
                };
                (ProxyError::Client(e), failure)
            }
            None => (ProxyError::ResponseTimeout(timeout), Failure::Timeout),
        };
        drop(done);
        // As `Proxy::serve`'s loop goes on after a failed attempt.
        let untouched = matches!(failure, Failure::NotSent | Failure::Stale);
        if !untouched {
            self.passive_failure(up, &e);
        }
        let retry = may_retry(failure, true, true, 0, self.cfg.retries);
        Exchanged::Resume(Box::new(Resume {
            first: None,
            tried: (!untouched).then_some(idx),
            attempt: u32::from(retry && failure != Failure::Stale),
            last: Some((idx, e)),
            retry,
        }))
    }
}

/// The client fields that do not go upstream as they are, for a request
/// the lane takes (no trusted proxies: every forwarding claim is dropped;
/// `Connection` names nothing but `keep-alive` or `close`; no `TE`,
/// `Expect`, `Upgrade` or framing field). As `forward::UpstreamFields`.
fn dropped_upstream(name: &[u8], via: bool) -> bool {
    let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        3 => via && is(b"via"),
        4 => is(b"host"),
        9 => is(b"forwarded"),
        10 => is(b"connection") || is(b"keep-alive"),
        15 => is(b"x-forwarded-for"),
        16 => is(b"proxy-connection") || is(b"x-forwarded-host"),
        17 => is(b"x-forwarded-proto"),
        18 => is(b"proxy-authenticate"),
        19 => is(b"proxy-authorization"),
        _ => false,
    }
}

/// `name: value\r\n`, the name in lower case (as `HeaderName` writes it).
/// Copied, then lowered in place: one reservation, no per-byte push (a
/// mapped `extend` was 8 % of the lane's instructions, callgrind).
fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    let at = out.len();
    out.extend_from_slice(name);
    out[at..].make_ascii_lowercase();
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `name: value\r\n` for a field of weir's own, `name_colon` already in
/// lower case with its `": "`: no pass over the name (weir's fields were
/// 4 of the 6 lines a proxied request writes, callgrind).
fn push_own(out: &mut Vec<u8>, name_colon: &[u8], value: &[u8]) {
    out.reserve(name_colon.len() + value.len() + 2);
    out.extend_from_slice(name_colon);
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn forwarded(info: &ConnInfo, host: Option<&[u8]>) -> ValueBuf {
    let mut v = ValueBuf::new();
    let host = host
        .filter(|h| is_text(h))
        .and_then(|h| std::str::from_utf8(h).ok());
    let peer: IpAddr = info.peer.ip();
    forwarded_element(&mut v, peer, host, info.tls);
    v
}

/// The fields weir adds to every response of the lane, when configured.
struct Added<'a> {
    /// weir's own `Via` element (`via = true`).
    via: Option<&'a str>,
    /// The listener's `Alt-Svc` (HTTP/3 offered).
    alt_svc: Option<&'a [u8]>,
}

/// The client's response head for an upstream head, as the general path
/// makes it: hop-by-hop fields removed and `Via` joined
/// (`Proxy::respond_from`), `Server: weir` in place of the upstream's
/// (`site::finish`), the listener's `Alt-Svc` in place of the upstream's
/// (`site::Listener::handle`), each appended in that order when the
/// upstream sent none, then hyper's rules (`server::http1::encode_head`):
/// a kept custom reason phrase, `Content-Length` for what the body is,
/// `Connection: close` when closing, a `Date` when there is none.
fn encode_response_head(
    raw: &RawHead<'_>,
    added: &Added<'_>,
    is_head: bool,
    close: bool,
    out: &mut Vec<u8>,
) {
    let Added { via, alt_svc } = *added;
    use crate::server::http1::{can_have_body, can_have_content_length, date};
    let status = raw.status;
    let reason = raw
        .reason
        .filter(|r| status.canonical_reason().map(str::as_bytes) != Some(*r))
        .filter(|r| hyper::ext::ReasonPhrase::try_from(*r).is_ok());
    if status == StatusCode::OK && reason.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(
            reason.unwrap_or(status.canonical_reason().unwrap_or("<none>").as_bytes()),
        );
        out.extend_from_slice(b"\r\n");
    }
    // The body as `Body` would hold it: none at all, or `n` bytes.
    let empty = matches!(raw.framing, Framing::None | Framing::Length(0));
    let chunkable = can_have_body(is_head, status);
    let hop = raw.present.has(Present::HOP_BY_HOP);
    let mut wrote_length = false;
    let mut wrote_date = false;
    let mut wrote_server = false;
    let mut wrote_via = false;
    let mut wrote_alt_svc = false;
    for (name, value) in raw.fields() {
        if hop && is_hop_by_hop(name, raw) {
            continue;
        }
        let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
        match name.len() {
            14 if is(b"content-length") => {
                // One line, the first; none for a 204 or 304 (hyper's
                // implicit length below answers for an empty body).
                if wrote_length || (empty && !is_head) {
                    continue;
                }
                wrote_length = true;
            }
            4 if is(b"date") => wrote_date = true,
            7 if !chunkable && is(b"trailer") => continue,
            6 if is(b"server") => {
                if !wrote_server {
                    out.extend_from_slice(SERVER_LINE);
                    wrote_server = true;
                }
                continue;
            }
            3 if via.is_some() && is(b"via") => {
                if !wrote_via {
                    push_via(out, raw, via.unwrap_or(VIA));
                    wrote_via = true;
                }
                continue;
            }
            7 if is(b"alt-svc") => {
                if let Some(v) = alt_svc {
                    if !wrote_alt_svc {
                        push_own(out, b"alt-svc: ", v);
                        wrote_alt_svc = true;
                    }
                    continue;
                }
            }
            _ => {}
        }
        push_field(out, name, value);
    }
    if let Some(v) = via
        && !wrote_via
    {
        push_own(out, b"via: ", v.as_bytes());
    }
    if !wrote_server {
        out.extend_from_slice(SERVER_LINE);
    }
    if let Some(v) = alt_svc
        && !wrote_alt_svc
    {
        push_own(out, b"alt-svc: ", v);
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    if !wrote_length && empty && can_have_content_length(status) && !is_head {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        date::extend(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether a response field is hop-by-hop: by definition, or named by the
/// response's `Connection` (as `forward::strip_hop_by_hop`).
fn is_hop_by_hop(name: &[u8], raw: &RawHead<'_>) -> bool {
    let mut p = Present::default();
    p.add_raw(name);
    if p.has(Present::HOP_BY_HOP) {
        return true;
    }
    raw.present.has(Present::CONNECTION)
        && raw
            .fields()
            .filter(|(n, v)| n.eq_ignore_ascii_case(b"connection") && is_text(v))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.eq_ignore_ascii_case(b"keep-alive") && !t.eq_ignore_ascii_case(b"close"))
            .any(|t| t.eq_ignore_ascii_case(name))
}

/// `via: <the upstream's Via values>, 1.1 weir` (`forward::append_via`):
/// the upstream's alone are dropped if any is not text.
fn push_via(out: &mut Vec<u8>, raw: &RawHead<'_>, via: &str) {
    let values = || {
        raw.fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"via"))
            .map(|(_, v)| v)
    };
    out.extend_from_slice(b"via: ");
    if values().all(is_text) {
        for v in values() {
            out.extend_from_slice(v);
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(via.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The property the `h1_response` fuzzer checks on every head the lane
/// takes: what it encodes for the client, closing or not, with or without
/// Via and Alt-Svc, is one complete head with the status, one
/// `server: weir`, one `date`, at most one `content-length`, weir's
/// `alt-svc` alone when it offers one, and no hop-by-hop field.
#[doc(hidden)]
pub fn check_encoded(raw: &RawHead<'_>, is_head: bool) {
    const H3: &[u8] = b"h3=\":443\"; ma=86400";
    for (via, alt_svc, close) in [(None, None, false), (Some(VIA), Some(H3), true)] {
        let mut out = Vec::new();
        let added = Added { via, alt_svc };
        encode_response_head(raw, &added, is_head, close, &mut out);
        let mut fields = [httparse::EMPTY_HEADER; 128];
        let mut resp = httparse::Response::new(&mut fields);
        assert_eq!(
            resp.parse(&out),
            Ok(httparse::Status::Complete(out.len())),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(resp.code, Some(raw.status.as_u16()));
        let count = |n: &str| {
            resp.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(n))
                .count()
        };
        assert_eq!(count("server"), 1);
        assert_eq!(count("date"), 1);
        assert!(count("content-length") <= 1);
        assert_eq!(count("via"), usize::from(via.is_some()));
        if let Some(v) = alt_svc {
            let ours = |h: &&httparse::Header<'_>| h.name.eq_ignore_ascii_case("alt-svc");
            let values: Vec<&[u8]> = resp.headers.iter().filter(ours).map(|h| h.value).collect();
            assert_eq!(values, [v]);
        }
        assert_eq!(count("connection"), usize::from(close));
        for h in resp.headers.iter() {
            let mut p = Present::default();
            p.add_raw(h.name.as_bytes());
            assert!(
                !p.has(Present::HOP_BY_HOP) || h.name == "connection",
                "hop-by-hop {} sent on",
                h.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HandlerConfig;

    /// The lane's future is boxed per request (`server::http1::serve`):
    /// it must fit glibc's per-thread cache of small blocks (1,032 bytes),
    /// past which its allocation and free cost about 200 instructions more
    /// (callgrind; `Deadline::within`).
    #[tokio::test]
    async fn the_lane_future_fits_the_small_block_cache() {
        let cfg = crate::config::load_str(
            "t.toml",
            "[site.\"a\"]\nlisten = [\"127.0.0.1:1\"]\nproxy = { to = [\"127.0.0.1:2\"] }\n",
            std::path::Path::new("."),
        )
        .unwrap();
        let HandlerConfig::Proxy(pc) = &cfg.sites[0].handler else {
            panic!("not a proxy site");
        };
        let p = Proxy::new(pc.clone(), true);
        let (io, _other) = tokio::io::duplex(64);
        let started = Started {
            idx: 0,
            conn: h1_client::Conn::new(Box::new(io)),
            active: ActiveGuard::new(p.ups[0].clone()),
            request: Encoded::head_only(Vec::new()),
            head_request: false,
        };
        let close = || false;
        let fut = p.plain_exchange(started, Some(b"h3=\":443\""), &close);
        let size = std::mem::size_of_val(&fut);
        eprintln!("lane future: {size} bytes");
        assert!(size <= 1032, "lane future is {size} bytes");
    }
}
