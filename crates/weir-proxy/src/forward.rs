//! Headers on the way through the proxy: hop-by-hop removal in both
//! directions, X-Forwarded-For/-Proto/-Host, RFC 7239 `Forwarded`, `Via`,
//! the client address in trusted-proxy mode, and the request-smuggling
//! checks on a parsed request head.
//!
//! Pure functions over header fields: never does I/O, never decides where a
//! request goes.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;
use weir_http::fields::{self, Repeats};
use weir_http::h1::{RequestFraming, Violation};

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The fields that are hop-by-hop by definition (RFC 9110 §7.6.1), besides
/// `Upgrade` (kept on a tunnel) and whatever `Connection` names.
static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::TE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Which of the fields that change a message's framing or hop a map holds,
/// found in one walk over its names. Most requests and responses hold none
/// of them, and a hashed lookup (`get_all`, `contains_key`) costs about 110
/// instructions, mostly hashing the name, and a proxied request needs six.
/// Comparing standard names is comparing small integers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Present(u8);

impl Present {
    pub const TRANSFER_ENCODING: u8 = 1;
    pub const CONTENT_LENGTH: u8 = 2;
    pub const CONNECTION: u8 = 4;
    pub const TE: u8 = 8;
    pub const UPGRADE: u8 = 16;

    pub fn of(h: &HeaderMap) -> Self {
        let mut p = Present::default();
        for n in h.keys() {
            p.add(n);
        }
        p
    }

    /// Notes field `n`.
    pub fn add(&mut self, n: &HeaderName) {
        self.0 |= if n == header::TRANSFER_ENCODING {
            Self::TRANSFER_ENCODING
        } else if n == header::CONTENT_LENGTH {
            Self::CONTENT_LENGTH
        } else if n == header::CONNECTION {
            Self::CONNECTION
        } else if n == header::TE {
            Self::TE
        } else if n == header::UPGRADE {
            Self::UPGRADE
        } else {
            0
        };
    }

    /// Whether any of `fields` is there.
    pub fn has(self, fields: u8) -> bool {
        self.0 & fields != 0
    }
}

fn is_hop_by_hop(n: &HeaderName, keep_upgrade: bool) -> bool {
    HOP_BY_HOP.contains(n) || (!keep_upgrade && n == header::UPGRADE)
}

/// The fields `Connection` names as hop-by-hop, beyond the ones that are
/// by definition. Its usual options (`keep-alive`, `close`) name nothing to
/// remove, so the common request allocates nothing here. `keep_upgrade`
/// leaves `Upgrade` for a tunnel.
fn connection_names(h: &HeaderMap, keep_upgrade: bool) -> Vec<HeaderName> {
    let mut named = Vec::new();
    for v in h.get_all(header::CONNECTION) {
        let Ok(s) = v.to_str() else { continue };
        for tok in s.split(',').map(str::trim) {
            if tok.eq_ignore_ascii_case("keep-alive")
                || tok.eq_ignore_ascii_case("close")
                || (keep_upgrade && tok.eq_ignore_ascii_case("upgrade"))
            {
                continue;
            }
            if let Ok(n) = HeaderName::from_bytes(tok.as_bytes()) {
                named.push(n);
            }
        }
    }
    named
}

/// Removes the hop-by-hop headers (RFC 9110 7.6.1): `Connection` and every
/// header it names, plus the ones that are hop-by-hop by definition.
/// `keep_upgrade` keeps `Upgrade` (and `Connection: upgrade`) for a tunnel.
pub fn strip_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool) {
    // Usually there are none: one pass over the few names present is cheaper
    // than a hashed removal per hop-by-hop name.
    if !h.keys().any(|n| is_hop_by_hop(n, keep_upgrade)) {
        if keep_upgrade {
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
        return;
    }
    // Names listed in Connection; collected first to release the borrow.
    for n in connection_names(h, keep_upgrade) {
        h.remove(n);
    }
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
    if keep_upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(header::UPGRADE);
    }
}

/// How the client's address is found.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr<'a> {
    /// The TCP peer (after the PROXY protocol on the listener, if any).
    pub peer: IpAddr,
    /// Trusted proxies; empty = direct mode.
    pub trusted: &'a [IpNet],
}

impl ClientAddr<'_> {
    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// Whether forwarding headers from the peer are believed.
    pub fn peer_trusted(&self) -> bool {
        !self.trusted.is_empty() && self.is_trusted(self.peer)
    }

    /// The client: the peer in direct mode; in trusted mode, the right-most
    /// address of `X-Forwarded-For` + peer that is not a trusted proxy.
    pub fn resolve(&self, headers: &HeaderMap) -> IpAddr {
        if !self.peer_trusted() {
            return self.peer;
        }
        let mut chain: Vec<IpAddr> = Vec::new();
        for v in headers.get_all(&X_FORWARDED_FOR) {
            let Ok(s) = v.to_str() else { return self.peer };
            for part in s.split(',') {
                match parse_xff_addr(part.trim()) {
                    Some(ip) => chain.push(ip),
                    // A garbled chain: trust nothing in it.
                    None => return self.peer,
                }
            }
        }
        let mut last = self.peer;
        for ip in chain.into_iter().rev() {
            last = ip;
            if !self.is_trusted(ip) {
                return ip;
            }
        }
        last
    }
}

fn parse_xff_addr(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    // `[::1]:port` or `1.2.3.4:port`.
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    s.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// Whether the client takes trailers in the response: always over HTTP/2
/// and HTTP/3, over HTTP/1.1 only when its `TE` lists `trailers`.
pub fn accepts_trailers(version: http::Version, h: &HeaderMap) -> bool {
    version >= http::Version::HTTP_2
        || h.get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
            })
}

/// What the forwarding headers say.
#[derive(Debug, Clone, Copy)]
pub struct Forwarding<'a> {
    pub client: ClientAddr<'a>,
    pub tls: bool,
    pub x_forwarded: bool,
    pub forwarded: bool,
    pub via: Option<&'static str>,
    /// Send W3C `traceparent`: the client's trace continued, or a new one.
    pub traceparent: bool,
}

// Which of the client's forwarding fields do not go upstream: replaced by
// weir's, or not believed from an untrusted peer.
const DROP_XFF: u8 = 1;
const DROP_XFP: u8 = 2;
const DROP_XFH: u8 = 4;
const DROP_FORWARDED: u8 = 8;
const DROP_VIA: u8 = 16;
const DROP_TRACEPARENT: u8 = 32;

static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The forwarding fields the site's `request_headers` rules name, put in
/// the request's extensions by those rules: with `x_forwarded = false` or
/// `forwarded = false`, such a field is the operator's (set, added to or
/// removed by the rule) and is sent as the rules left it, even from an
/// untrusted peer; the fields no rule names are still dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleForwarding(u8);

impl RuleForwarding {
    /// The forwarding fields among `names`.
    pub fn of<'n>(names: impl IntoIterator<Item = &'n HeaderName>) -> Self {
        RuleForwarding(names.into_iter().fold(0, |m, n| {
            m | match n {
                n if n == X_FORWARDED_FOR => DROP_XFF,
                n if n == X_FORWARDED_PROTO => DROP_XFP,
                n if n == X_FORWARDED_HOST => DROP_XFH,
                n if n == header::FORWARDED => DROP_FORWARDED,
                _ => 0,
            }
        }))
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Self) -> Self {
        RuleForwarding(self.0 | other.0)
    }
}

/// A W3C `traceparent` value (Trace Context §3.2): `00-TRACE-SPAN-FLAGS`,
/// kept as the bytes that go upstream.
#[derive(Clone, Copy)]
pub struct TraceParent([u8; 55]);

impl TraceParent {
    /// The client's trace (a valid version-00 `traceparent`) with a span
    /// of weir's as its parent, or a new trace when it sent none valid.
    pub fn continue_or_start(client: Option<&HeaderValue>) -> TraceParent {
        const H: &[u8; 16] = b"0123456789abcdef";
        let mut b = *b"00-00000000000000000000000000000000-0000000000000000-00";
        match client
            .map(HeaderValue::as_bytes)
            .filter(|v| valid_traceparent(v))
        {
            Some(v) => {
                b[3..35].copy_from_slice(&v[3..35]);
                b[53..55].copy_from_slice(&v[53..55]);
            }
            None => {
                // Never all zeros (an invalid trace ID).
                let id = fastrand::u128(1..);
                for (i, d) in b[3..35].iter_mut().enumerate() {
                    *d = H[((id >> (124 - 4 * i)) & 15) as usize];
                }
            }
        }
        let mut t = TraceParent(b);
        t.new_span();
        t
    }

    /// A new span ID (one per upstream attempt).
    pub fn new_span(&mut self) {
        const H: &[u8; 16] = b"0123456789abcdef";
        let id = fastrand::u64(1..);
        for (i, d) in self.0[36..52].iter_mut().enumerate() {
            *d = H[((id >> (60 - 4 * i)) & 15) as usize];
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A version-00 `traceparent`: lowercase hex, neither ID all zeros.
fn valid_traceparent(v: &[u8]) -> bool {
    let hex = |s: &[u8]| {
        s.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    let nonzero = |s: &[u8]| s.iter().any(|&c| c != b'0');
    v.len() == 55
        && &v[..3] == b"00-"
        && v[35] == b'-'
        && v[52] == b'-'
        && hex(&v[3..35])
        && hex(&v[36..52])
        && hex(&v[53..55])
        && nonzero(&v[3..35])
        && nonzero(&v[36..52])
}

/// The header fields a request carries upstream, worked out without copying
/// the client's header map: the client's fields minus the hop-by-hop ones,
/// `Expect` and the forwarding fields weir replaces, then the fields weir
/// adds. weir's own HTTP/1.1 client writes [`iter`](Self::iter) straight into
/// the request head (no second map is built per request); hyper's client and
/// tunnels take [`to_map`](Self::to_map). Host is kept apart
/// ([`host`](Self::host)): each client puts it where its protocol wants it.
pub struct UpstreamFields<'a> {
    client: &'a HeaderMap,
    /// Names the client's `Connection` lists (dropped too); usually none.
    named: Vec<HeaderName>,
    keep_upgrade: bool,
    drop: u8,
    host: Option<HeaderValue>,
    // What weir adds. The static values are `&'static`, and X-Forwarded-Host
    // is the Host, to keep this small: it lives in the proxy's per-request
    // future.
    te: Option<&'static HeaderValue>,
    connection: Option<&'static HeaderValue>,
    xff: Option<Xff>,
    xfp: Option<&'static HeaderValue>,
    xfh: bool,
    forwarded: Option<HeaderValue>,
    via: Option<HeaderValue>,
    /// Boxed: only proxies with `traceparent` pay for its 55 bytes in
    /// every request's future.
    trace: Option<Box<TraceParent>>,
}

static TRAILERS: HeaderValue = HeaderValue::from_static("trailers");
static UPGRADE: HeaderValue = HeaderValue::from_static("upgrade");
static HTTP: HeaderValue = HeaderValue::from_static("http");
static HTTPS: HeaderValue = HeaderValue::from_static("https");

impl<'a> UpstreamFields<'a> {
    /// `tunnel`: an upgrade or CONNECT, which keeps `Upgrade` and
    /// `Connection: upgrade` and has no HTTP body (so no trailers).
    pub fn new(parts: &'a http::request::Parts, f: &Forwarding<'_>, tunnel: bool) -> Self {
        let client = &parts.headers;
        let present = Present::of(client);
        let named = if present.has(Present::CONNECTION) {
            connection_names(client, tunnel)
        } else {
            Vec::new()
        };
        // An empty Host (a target without authority) is no host at all.
        let host = client
            .get(header::HOST)
            .filter(|h| !h.is_empty())
            .cloned()
            .or_else(|| {
                let a = parts.uri.authority()?;
                HeaderValue::from_str(a.as_str()).ok()
            });
        let mut out = UpstreamFields {
            client,
            named,
            keep_upgrade: tunnel,
            drop: 0,
            host,
            // TE is hop-by-hop, but an upstream only sends trailers to a peer
            // that says it takes them; weir passes them on.
            te: (!tunnel
                && (parts.version >= http::Version::HTTP_2 || present.has(Present::TE))
                && accepts_trailers(parts.version, client))
            .then_some(&TRAILERS),
            connection: tunnel.then_some(&UPGRADE),
            xff: None,
            xfp: None,
            xfh: false,
            forwarded: None,
            via: None,
            trace: None,
        };
        let ruled = parts.extensions.get::<RuleForwarding>().map_or(0, |r| r.0);
        out.forwarding(f, ruled);
        out
    }

    /// Sets the forwarding fields: X-Forwarded-For/-Proto/-Host, RFC 7239
    /// `Forwarded`, `Via`. A trusted peer's chain is extended; an untrusted
    /// peer's claims are replaced or dropped.
    /// `ruled`: the [`RuleForwarding`] fields, left as the rules made them
    /// when weir does not set them itself.
    fn forwarding(&mut self, f: &Forwarding<'_>, ruled: u8) {
        let trusted = f.client.peer_trusted();
        let peer = f.client.peer;
        if f.x_forwarded {
            self.drop |= DROP_XFF;
            let prev = if trusted {
                self.joined(&X_FORWARDED_FOR)
            } else {
                None
            };
            self.xff = Some(match prev {
                // The usual case, a client with no proxy before weir: the
                // address alone, on the stack.
                None => Xff::Peer(IpText::new(peer)),
                Some(prev) => {
                    let mut v = ValueBuf::new();
                    v.extend_from_slice(prev.as_bytes());
                    v.extend_from_slice(b", ");
                    push_ip(&mut v, peer);
                    Xff::Chain(v.to_vec().into_boxed_slice())
                }
            });
            if !(trusted && self.has(&X_FORWARDED_PROTO)) {
                self.drop |= DROP_XFP;
                self.xfp = Some(if f.tls { &HTTPS } else { &HTTP });
            }
            if !(trusted && self.has(&X_FORWARDED_HOST)) {
                self.drop |= DROP_XFH;
                self.xfh = self.host.is_some();
            }
        } else if !trusted {
            self.drop |= (DROP_XFF | DROP_XFP | DROP_XFH) & !ruled;
        }
        if f.forwarded {
            self.drop |= DROP_FORWARDED;
            let mut v = ValueBuf::new();
            if trusted && let Some(prev) = self.joined(&header::FORWARDED) {
                v.extend_from_slice(prev.as_bytes());
                v.extend_from_slice(b", ");
            }
            let host = self.host.as_ref().and_then(|h| h.to_str().ok());
            forwarded_element(&mut v, peer, host, f.tls);
            self.forwarded = HeaderValue::from_bytes(&v).ok();
        } else if !trusted {
            self.drop |= DROP_FORWARDED & !ruled;
        }
        if let Some(via) = f.via {
            self.via = Some(via_value(self.joined(&header::VIA), via));
            self.drop |= DROP_VIA;
        }
        if f.traceparent {
            let client = self
                .client
                .get(&TRACEPARENT)
                .filter(|_| self.has(&TRACEPARENT));
            self.trace = Some(Box::new(TraceParent::continue_or_start(client)));
            self.drop |= DROP_TRACEPARENT;
        }
    }

    /// A sampled request's attempt: `traceparent` names weir's span of
    /// it (`span_id`) in the request's trace, whatever `traceparent` says.
    pub fn sampled_span(&mut self, trace_id: u128, span_id: u64) {
        let v = TraceParent(weir_http::trace::traceparent(trace_id, span_id));
        match &mut self.trace {
            Some(t) => **t = v,
            None => self.trace = Some(Box::new(v)),
        }
        self.drop |= DROP_TRACEPARENT;
    }

    /// A new span for the next upstream attempt (with `traceparent` on).
    pub fn new_span(&mut self) {
        if let Some(t) = &mut self.trace {
            t.new_span();
        }
    }

    /// The Host the client asked for (its `Host`, else the HTTP/2
    /// `:authority`).
    pub fn host(&self) -> Option<&HeaderValue> {
        self.host.as_ref()
    }

    /// Every field that goes upstream, the client's first, Host excluded,
    /// as the bytes weir's HTTP/1.1 client writes. Every value is a valid
    /// field value: the client's passed `HeaderValue`'s check, and what weir
    /// adds is built from addresses and from values that passed `to_str`.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        self.client
            .iter()
            .filter(|(n, _)| self.keeps(n))
            .map(|(n, v)| (n, v.as_bytes()))
            .chain(self.added())
    }

    /// The fields weir adds.
    fn added(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        fn value(v: Option<&HeaderValue>) -> Option<&[u8]> {
            v.map(HeaderValue::as_bytes)
        }
        [
            (&header::TE, value(self.te)),
            (&header::CONNECTION, value(self.connection)),
            (&X_FORWARDED_FOR, self.xff.as_ref().map(Xff::as_bytes)),
            (&X_FORWARDED_PROTO, value(self.xfp)),
            (
                &X_FORWARDED_HOST,
                value(self.host.as_ref().filter(|_| self.xfh)),
            ),
            (&header::FORWARDED, value(self.forwarded.as_ref())),
            (&header::VIA, value(self.via.as_ref())),
            (
                &TRACEPARENT,
                self.trace.as_deref().map(TraceParent::as_bytes),
            ),
        ]
        .into_iter()
        .filter_map(|(n, v)| Some((n, v?)))
    }

    /// The same fields as a map (for hyper's client and tunnels).
    pub fn to_map(&self) -> HeaderMap {
        let mut h = HeaderMap::with_capacity(self.client.len() + 4);
        for (n, v) in self.client.iter().filter(|(n, _)| self.keeps(n)) {
            h.append(n.clone(), v.clone());
        }
        for (n, v) in self.added() {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                h.append(n.clone(), v);
            }
        }
        h
    }

    /// Whether the client's field `n` goes upstream as it is.
    fn keeps(&self, n: &HeaderName) -> bool {
        if is_hop_by_hop(n, self.keep_upgrade) || n == header::EXPECT || n == header::HOST {
            return false;
        }
        if self.drop != 0 {
            let d = |bit: u8, name: &HeaderName| self.drop & bit != 0 && n == name;
            if d(DROP_XFF, &X_FORWARDED_FOR)
                || d(DROP_XFP, &X_FORWARDED_PROTO)
                || d(DROP_XFH, &X_FORWARDED_HOST)
                || d(DROP_FORWARDED, &header::FORWARDED)
                || d(DROP_VIA, &header::VIA)
                || d(DROP_TRACEPARENT, &TRACEPARENT)
            {
                return false;
            }
        }
        !self.named.contains(n)
    }

    /// Whether the client sent field `name` and it survives the hop.
    fn has(&self, name: &HeaderName) -> bool {
        self.client.contains_key(name) && !self.named.contains(name)
    }

    /// The client's values of `name` joined with `, `, if it survives the hop.
    fn joined(&self, name: &HeaderName) -> Option<String> {
        if self.named.contains(name) {
            return None;
        }
        joined(self.client, name)
    }
}

/// A header value being built: on the stack unless it is long (a trusted
/// proxy's long chain), so the value itself is the only allocation.
pub(crate) type ValueBuf = smallvec::SmallVec<[u8; 96]>;

/// The X-Forwarded-For weir sends: usually the peer's address alone, kept
/// on the stack. It was a `HeaderValue`, allocated, copied and freed on
/// every request.
enum Xff {
    Peer(IpText),
    /// A trusted proxy's chain with the peer appended.
    Chain(Box<[u8]>),
}

impl Xff {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Xff::Peer(t) => t.as_bytes(),
            Xff::Chain(v) => v,
        }
    }
}

/// An address as text, inline: the longest IPv6 form is 45 bytes. IPv4 by
/// hand, a table lookup per octet: `Display` goes through the formatting
/// machinery, which costs far more than the lookup for every request.
pub(crate) struct IpText {
    buf: [u8; 46],
    len: u8,
}

impl IpText {
    pub(crate) fn new(ip: IpAddr) -> Self {
        let mut t = IpText {
            buf: [0; 46],
            len: 0,
        };
        match ip {
            IpAddr::V4(ip) => {
                let mut at = 0;
                for (i, octet) in ip.octets().into_iter().enumerate() {
                    if i > 0 {
                        t.buf[at] = b'.';
                        at += 1;
                    }
                    let (digits, n) = OCTETS[octet as usize];
                    t.buf[at..at + 3].copy_from_slice(&digits);
                    at += n as usize;
                }
                t.len = at as u8;
            }
            IpAddr::V6(ip) => {
                use std::io::Write;
                let mut w = &mut t.buf[..];
                let _ = write!(w, "{ip}");
                let left = w.len();
                t.len = (46 - left) as u8;
            }
        }
        t
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

/// `0` to `255` as text (digits, padded to 3, and how many count): an
/// octet is one lookup and one 3-byte copy.
const OCTETS: [([u8; 3], u8); 256] = {
    let mut t = [([0u8; 3], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let (h, d, o) = ((i / 100) as u8, ((i / 10) % 10) as u8, (i % 10) as u8);
        t[i] = if i >= 100 {
            ([b'0' + h, b'0' + d, b'0' + o], 3)
        } else if i >= 10 {
            ([b'0' + d, b'0' + o, 0], 2)
        } else {
            ([b'0' + o, 0, 0], 1)
        };
        i += 1;
    }
    t
};

/// One RFC 7239 element for a client connection from `peer`:
/// `for=...;host=...;proto=...` (the host quoted when it is not a token,
/// left out when it cannot be quoted).
pub(crate) fn forwarded_element(v: &mut ValueBuf, peer: IpAddr, host: Option<&str>, tls: bool) {
    v.extend_from_slice(b"for=");
    if peer.is_ipv6() {
        v.extend_from_slice(b"\"[");
        push_ip(v, peer);
        v.extend_from_slice(b"]\"");
    } else {
        push_ip(v, peer);
    }
    match host {
        Some(host) if is_token(host) => {
            v.extend_from_slice(b";host=");
            v.extend_from_slice(host.as_bytes());
        }
        Some(host) if !host.contains(['"', '\\']) => {
            v.extend_from_slice(b";host=\"");
            v.extend_from_slice(host.as_bytes());
            v.push(b'"');
        }
        _ => {}
    }
    v.extend_from_slice(if tls { b";proto=https" } else { b";proto=http" });
}

/// Writes an address as text ([`IpText`]).
fn push_ip(out: &mut ValueBuf, ip: IpAddr) {
    out.extend_from_slice(IpText::new(ip).as_bytes());
}

fn via_value(prev: Option<String>, via: &'static str) -> HeaderValue {
    match prev {
        Some(prev) => HeaderValue::from_str(&format!("{prev}, {via}"))
            .unwrap_or(HeaderValue::from_static(via)),
        None => HeaderValue::from_static(via),
    }
}

/// Appends `1.1 weir` (or `2 weir`) to `Via`.
pub fn append_via(h: &mut HeaderMap, via: &'static str) {
    let value = via_value(joined(h, &header::VIA), via);
    h.insert(header::VIA, value);
}

/// Every line of a header joined with `, `; `None` if absent or not text.
fn joined(h: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for v in h.get_all(name) {
        let s = v.to_str().ok()?;
        match &mut out {
            Some(o) => {
                o.push_str(", ");
                o.push_str(s);
            }
            None => out = Some(s.to_string()),
        }
    }
    out
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The strict reading of a request's framing fields
/// (`weir_http::h1::RequestFraming`, the rules weir's HTTP/1 server
/// parses by) applied to a header map: for requests that came over HTTP/2
/// or HTTP/3, whose framing fields an HTTP/1.1 upstream would read. An
/// HTTP/1 request was read by these rules as it arrived.
pub fn check_smuggling(version: http::Version, h: &HeaderMap) -> Result<(), Violation> {
    let present = Present::of(h);
    if !present.has(Present::TRANSFER_ENCODING | Present::CONTENT_LENGTH) {
        return Ok(());
    }
    // A repeated value is refused, as weir's HTTP/1 server refuses it.
    let length = fields::content_length_values(
        h.get_all(header::CONTENT_LENGTH)
            .iter()
            .map(|v| v.as_bytes()),
        Repeats::Refuse,
    )
    .map_err(|_| Violation::BadContentLength)?;
    if length.is_some() && present.has(Present::TRANSFER_ENCODING) {
        return Err(Violation::BothLengths);
    }
    let mut framing = RequestFraming::default();
    for v in h.get_all(header::TRANSFER_ENCODING) {
        framing.transfer_encoding(v.as_bytes());
    }
    framing
        .finish(version == http::Version::HTTP_10)
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_names_are_classed_as_their_header_names() {
        let names = [
            "Connection",
            "keep-alive",
            "Proxy-Connection",
            "Transfer-Encoding",
            "TE",
            "proxy-authorization",
            "Proxy-Authenticate",
            "UPGRADE",
            "Content-Length",
            "content-type",
            "Server",
            "date",
            "te-x",
            "x-connection",
            "keep-alive2",
            "Trailer",
            "Via",
            "ts",
        ];
        for raw in names {
            let name = HeaderName::from_bytes(raw.as_bytes()).unwrap();
            assert_eq!(
                weir_http::h1::parse::is_hop_by_hop_raw(raw.as_bytes()),
                is_hop_by_hop(&name, false),
                "{raw}"
            );
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn trailers_are_accepted_over_h2_or_when_te_says_so() {
        use http::Version as V;
        assert!(accepts_trailers(V::HTTP_2, &HeaderMap::new()));
        assert!(!accepts_trailers(V::HTTP_11, &HeaderMap::new()));
        assert!(accepts_trailers(
            V::HTTP_11,
            &map(&[("te", "gzip, Trailers")])
        ));
        assert!(!accepts_trailers(V::HTTP_11, &map(&[("te", "gzip")])));
    }

    #[test]
    fn upgrade_kept_for_tunnels() {
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
    }

    fn fwd<'a>(peer: &str, trusted: &'a [IpNet]) -> Forwarding<'a> {
        Forwarding {
            client: ClientAddr {
                peer: peer.parse().unwrap(),
                trusted,
            },
            tls: false,
            x_forwarded: true,
            forwarded: true,
            via: Some("1.1 weir"),
            traceparent: false,
        }
    }

    /// A direct-mode peer with every forwarding field turned off.
    fn no_forwarding() -> Forwarding<'static> {
        Forwarding {
            x_forwarded: false,
            forwarded: false,
            via: None,
            ..fwd("10.1.2.3", &[])
        }
    }

    /// The map an upstream gets for a request with `headers`.
    fn upstream(headers: HeaderMap, f: &Forwarding<'_>, tunnel: bool) -> (HeaderMap, Vec<String>) {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.headers = headers;
        let u = UpstreamFields::new(&parts, f, tunnel);
        // The iteration and the map say the same.
        let listed: Vec<String> = u
            .iter()
            .map(|(n, v)| format!("{n}: {}", std::str::from_utf8(v).unwrap()))
            .collect();
        let m = u.to_map();
        assert_eq!(m.len(), listed.len());
        (m, listed)
    }

    #[test]
    fn fields_named_by_rules_survive_an_untrusted_peer() {
        let h = map(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "10.1.2.3"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=203.0.113.9"),
        ]);
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.headers = h.clone();
        // No rule: an untrusted peer's claims are dropped.
        let u = UpstreamFields::new(&parts, &no_forwarding(), false).to_map();
        assert!(u.get("x-forwarded-for").is_none());
        assert!(u.get("x-forwarded-proto").is_none());
        assert!(u.get("forwarded").is_none());
        // A rule named X-Forwarded-For: the field is sent as the rule left
        // it (here the client's value and the rule's own); the others still go.
        parts
            .extensions
            .insert(RuleForwarding::of([&X_FORWARDED_FOR]));
        let u = UpstreamFields::new(&parts, &no_forwarding(), false).to_map();
        let xff: Vec<_> = u.get_all("x-forwarded-for").iter().collect();
        assert_eq!(xff, ["203.0.113.9", "10.1.2.3"]);
        assert!(u.get("x-forwarded-proto").is_none());
        assert!(u.get("forwarded").is_none());
        // With x_forwarded on, weir's own field wins over the rule's.
        let f = Forwarding {
            x_forwarded: true,
            ..no_forwarding()
        };
        let u = UpstreamFields::new(&parts, &f, false).to_map();
        assert_eq!(u["x-forwarded-for"], "10.1.2.3");
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut ips: Vec<IpAddr> = vec![
            "0.0.0.0".parse().unwrap(),
            "255.255.255.255".parse().unwrap(),
            "9.10.99.100".parse().unwrap(),
            "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
                .parse()
                .unwrap(),
            "::ffff:1.2.3.4".parse().unwrap(),
            "::1".parse().unwrap(),
        ];
        for _ in 0..2000 {
            ips.push(IpAddr::V4(rng.u32(..).into()));
            ips.push(IpAddr::V6(rng.u128(..).into()));
        }
        for ip in ips {
            assert_eq!(IpText::new(ip).as_bytes(), ip.to_string().as_bytes());
        }
    }

    #[test]
    fn direct_mode_replaces_client_supplied_headers() {
        let h = map(&[
            ("host", "example.com:8080"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6"),
            ("x-forwarded-host", "evil"),
            ("x-forwarded-proto", "gopher"),
            ("via", "1.0 fred"),
            ("accept", "*/*"),
        ]);
        let (h, listed) = upstream(h, &fwd("10.1.2.3", &[]), false);
        assert_eq!(h["x-forwarded-for"], "10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com:8080");
        assert_eq!(
            h["forwarded"],
            "for=10.1.2.3;host=\"example.com:8080\";proto=http"
        );
        assert_eq!(h["via"], "1.0 fred, 1.1 weir");
        assert_eq!(h["accept"], "*/*");
        // One of each, and Host is left to the client that sends it.
        assert_eq!(
            listed,
            [
                "accept: */*",
                "x-forwarded-for: 10.1.2.3",
                "x-forwarded-proto: http",
                "x-forwarded-host: example.com:8080",
                "forwarded: for=10.1.2.3;host=\"example.com:8080\";proto=http",
                "via: 1.0 fred, 1.1 weir",
            ]
        );
    }

    #[test]
    fn untrusted_claims_are_dropped_when_weir_adds_none() {
        let h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil"),
            ("forwarded", "for=6.6.6.6"),
            ("x-kept", "1"),
        ]);
        let f = no_forwarding();
        let (_, listed) = upstream(h, &f, false);
        assert_eq!(listed, ["x-kept: 1"]);
    }

    #[test]
    fn hop_by_hop_and_expect_do_not_go_upstream_but_te_trailers_does() {
        let h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("expect", "100-continue"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("x-kept", "yes"),
        ]);
        let f = no_forwarding();
        let (_, listed) = upstream(h.clone(), &f, false);
        assert_eq!(listed, ["x-kept: yes", "te: trailers"]);
        // A tunnel keeps Upgrade and says so in Connection; no trailers.
        let (_, listed) = upstream(h, &f, true);
        assert_eq!(
            listed,
            ["upgrade: websocket", "x-kept: yes", "connection: upgrade"]
        );
    }

    #[test]
    fn ipv6_forwarded_is_quoted() {
        let (h, _) = upstream(map(&[("host", "a.test")]), &fwd("::1", &[]), false);
        assert_eq!(h["forwarded"], "for=\"[::1]\";host=a.test;proto=http");
        assert_eq!(h["x-forwarded-for"], "::1");
    }

    #[test]
    fn trusted_peer_chain_is_appended_and_client_is_rightmost_untrusted() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = map(&[
            ("x-forwarded-for", "1.1.1.1, 2.2.2.2, 10.0.0.5"),
            ("x-forwarded-proto", "https"),
        ]);
        let f = fwd("10.0.0.9", &trusted);
        assert_eq!(f.client.resolve(&h), "2.2.2.2".parse::<IpAddr>().unwrap());
        let (h, _) = upstream(h, &f, false);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.0.0.5, 10.0.0.9");
        // A trusted proxy's scheme is believed.
        assert_eq!(h["x-forwarded-proto"], "https");
        // An untrusted peer is the client whatever it claims.
        let h2 = map(&[("x-forwarded-for", "1.1.1.1")]);
        let f2 = fwd("8.8.8.8", &trusted);
        assert_eq!(f2.client.resolve(&h2), "8.8.8.8".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn via_is_appended() {
        let mut h = map(&[("via", "1.0 fred")]);
        append_via(&mut h, "1.1 weir");
        assert_eq!(h["via"], "1.0 fred, 1.1 weir");
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        use http::Version as V;
        let ok = |p: &[(&str, &str)]| check_smuggling(V::HTTP_11, &map(p));
        assert_eq!(ok(&[("transfer-encoding", "chunked")]), Ok(()));
        assert_eq!(ok(&[("content-length", "10")]), Ok(()));
        assert_eq!(
            ok(&[("transfer-encoding", "chunked"), ("content-length", "3")]),
            Err(Violation::BothLengths)
        );
        for te in [
            "Chunked",
            " chunked",
            "chunked ",
            "gzip, chunked",
            "chunked, chunked",
            "\tchunked",
        ] {
            assert_eq!(
                ok(&[("transfer-encoding", te)]),
                Err(Violation::BadTransferEncoding),
                "{te:?}"
            );
        }
        assert_eq!(
            ok(&[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked")
            ]),
            Err(Violation::BadTransferEncoding)
        );
        for cl in ["+5", "5,5", "0x10", " 5", ""] {
            assert_eq!(
                ok(&[("content-length", cl)]),
                Err(Violation::BadContentLength),
                "{cl:?}"
            );
        }
        assert_eq!(
            ok(&[("content-length", "5"), ("content-length", "5")]),
            Err(Violation::BadContentLength)
        );
        assert_eq!(
            check_smuggling(V::HTTP_10, &map(&[("transfer-encoding", "chunked")])),
            Err(Violation::TransferEncodingOnHttp10)
        );
    }

    /// W3C Trace Context: a valid parent's trace ID and flags are kept
    /// under a span of weir's; anything else starts a new trace.
    #[test]
    fn traceparent_continues_or_starts_a_trace() {
        let sent =
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let mut t = TraceParent::continue_or_start(Some(&sent));
        let first = t.as_bytes().to_vec();
        assert!(valid_traceparent(&first));
        assert_eq!(&first[..36], &sent.as_bytes()[..36]);
        assert_eq!(&first[52..], b"-01");
        assert_ne!(&first[36..52], &sent.as_bytes()[36..52]);
        t.new_span();
        assert_eq!(&t.as_bytes()[..36], &first[..36]);
        assert_ne!(&t.as_bytes()[36..52], &first[36..52]);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-zz",
        ] {
            let t = TraceParent::continue_or_start(Some(&HeaderValue::from_static(bad)));
            assert!(valid_traceparent(t.as_bytes()), "{bad}");
            assert_ne!(&t.as_bytes()[3..35], &bad.as_bytes()[3..35.min(bad.len())]);
            assert!(t.as_bytes().ends_with(b"-00"), "{bad}");
        }
    }
}
