//! The PROXY protocol (HAProxy's, versions 1 and 2): parsing the header a
//! trusted load balancer puts in front of a connection, and writing one in
//! front of a connection to an upstream.
//!
//! Pure functions over byte slices, fuzzed by `fuzz/fuzz_targets/proxy_protocol.rs`:
//! never reads a socket, never allocates while parsing, never panics on any
//! input, never consumes a byte beyond the header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// v2's 12-byte signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header, CRLF included (the spec's limit).
pub const V1_MAX: usize = 107;
/// The longest v2 header we accept (16-byte fixed part + addresses + TLVs).
pub const V2_MAX: usize = 16 + 1024;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes the header took; the connection's own bytes follow.
    pub len: usize,
    /// Source (client) and destination; `None` for `UNKNOWN`/`LOCAL`/unspecified
    /// families: use the TCP peer then.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not a PROXY protocol header")]
    NotProxy,
    #[error("malformed PROXY v1 header")]
    BadV1,
    #[error("malformed PROXY v2 header")]
    BadV2,
    #[error("PROXY header too long")]
    TooLong,
}

/// Parses a header at the start of `buf`. `Ok(None)`: need more bytes.
pub fn parse(buf: &[u8]) -> Result<Option<Header>, ParseError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] {
        return if n < V2_SIGNATURE.len() {
            Ok(None)
        } else {
            parse_v2(buf)
        };
    }
    let n = buf.len().min(6);
    if buf[..n] == b"PROXY "[..n] {
        return if n < 6 { Ok(None) } else { parse_v1(buf) };
    }
    Err(ParseError::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Option<Header>, ParseError> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= V1_MAX {
            Err(ParseError::TooLong)
        } else if window.contains(&b'\n') {
            Err(ParseError::BadV1)
        } else {
            Ok(None)
        };
    };
    let line = std::str::from_utf8(&buf[6..end]).map_err(|_| ParseError::BadV1)?;
    let mut parts = line.split(' ');
    let proto = parts.next().ok_or(ParseError::BadV1)?;
    let len = end + 2;
    if proto == "UNKNOWN" {
        return Ok(Some(Header { len, addrs: None }));
    }
    let (src, dst, sport, dport) = (
        parts.next().ok_or(ParseError::BadV1)?,
        parts.next().ok_or(ParseError::BadV1)?,
        parts.next().ok_or(ParseError::BadV1)?,
        parts.next().ok_or(ParseError::BadV1)?,
    );
    if parts.next().is_some() {
        return Err(ParseError::BadV1);
    }
    let ip = |s: &str| -> Result<IpAddr, ParseError> {
        match proto {
            "TCP4" => s.parse::<Ipv4Addr>().map(IpAddr::V4),
            "TCP6" => s.parse::<Ipv6Addr>().map(IpAddr::V6),
            _ => return Err(ParseError::BadV1),
        }
        .map_err(|_| ParseError::BadV1)
    };
    let port = |s: &str| -> Result<u16, ParseError> {
        // No sign, no leading zeros beyond "0" itself.
        if s.is_empty()
            || s.len() > 5
            || !s.bytes().all(|b| b.is_ascii_digit())
            || (s.len() > 1 && s.starts_with('0'))
        {
            return Err(ParseError::BadV1);
        }
        s.parse().map_err(|_| ParseError::BadV1)
    };
    Ok(Some(Header {
        len,
        addrs: Some((
            SocketAddr::new(ip(src)?, port(sport)?),
            SocketAddr::new(ip(dst)?, port(dport)?),
        )),
    }))
}

fn parse_v2(buf: &[u8]) -> Result<Option<Header>, ParseError> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err(ParseError::BadV2);
    }
    let cmd = ver_cmd & 0x0f;
    let fam = buf[13];
    let body_len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    let len = 16 + body_len;
    if len > V2_MAX {
        return Err(ParseError::TooLong);
    }
    if buf.len() < len {
        return Ok(None);
    }
    let body = &buf[16..len];
    match cmd {
        // LOCAL: the balancer's own connection (health checks).
        0 => return Ok(Some(Header { len, addrs: None })),
        1 => {}
        _ => return Err(ParseError::BadV2),
    }
    let addrs = match fam >> 4 {
        0 => None,
        1 => {
            if body.len() < 12 {
                return Err(ParseError::BadV2);
            }
            let src = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            let dst = Ipv4Addr::new(body[4], body[5], body[6], body[7]);
            let sp = u16::from_be_bytes([body[8], body[9]]);
            let dp = u16::from_be_bytes([body[10], body[11]]);
            Some((
                SocketAddr::new(src.into(), sp),
                SocketAddr::new(dst.into(), dp),
            ))
        }
        2 => {
            if body.len() < 36 {
                return Err(ParseError::BadV2);
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&body[0..16]);
            d.copy_from_slice(&body[16..32]);
            let sp = u16::from_be_bytes([body[32], body[33]]);
            let dp = u16::from_be_bytes([body[34], body[35]]);
            Some((
                SocketAddr::new(Ipv6Addr::from(s).into(), sp),
                SocketAddr::new(Ipv6Addr::from(d).into(), dp),
            ))
        }
        // AF_UNIX and unknown families: no usable IP address.
        3 => None,
        _ => return Err(ParseError::BadV2),
    };
    // Transport: only STREAM (1) or UNSPEC (0) make sense for HTTP.
    if addrs.is_some() && fam & 0x0f != 1 {
        return Err(ParseError::BadV2);
    }
    Ok(Some(Header { len, addrs }))
}

/// A v1 header for a connection from `src` to `dst`.
pub fn write_v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(src, dst);
    let s = match (src.ip(), dst.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            format!("PROXY TCP4 {a} {b} {} {}\r\n", src.port(), dst.port())
        }
        (a, b) => format!("PROXY TCP6 {a} {b} {} {}\r\n", src.port(), dst.port()),
    };
    s.into_bytes()
}

/// A v2 header (PROXY command, TCP) for a connection from `src` to `dst`.
pub fn write_v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(src, dst);
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(0x21);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            out.push(0x11);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&a.octets());
            out.extend_from_slice(&b.octets());
        }
        (a, b) => {
            out.push(0x21);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(a).octets());
            out.extend_from_slice(&v6(b).octets());
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Both addresses in one family (v4-mapped v6 when they differ).
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    if src.is_ipv4() == dst.is_ipv4() {
        return (src, dst);
    }
    (
        SocketAddr::new(v6(src.ip()).into(), src.port()),
        SocketAddr::new(v6(dst.ip()).into(), dst.port()),
    )
}

/// Reads a PROXY header off the front of a new connection from `peer`,
/// consuming exactly its bytes (peeking first, so the HTTP bytes after it
/// stay in the socket). `Ok(None)`: a LOCAL or UNKNOWN header, keep the TCP
/// addresses. Refuses a peer that is not a trusted source.
pub async fn read_header(
    stream: &mut tokio::net::TcpStream,
    accept: &weir_config::proxy::AcceptProxyProtocol,
    peer: SocketAddr,
) -> std::io::Result<Option<(SocketAddr, SocketAddr)>> {
    use tokio::io::AsyncReadExt;
    if !accept.trusts(peer.ip()) {
        return Err(std::io::Error::other(format!(
            "{} is not in trusted_sources",
            peer.ip()
        )));
    }
    let mut buf = [0u8; V2_MAX];
    let mut last = 0;
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        match parse(&buf[..n]) {
            Ok(Some(h)) => {
                stream.read_exact(&mut buf[..h.len]).await?;
                return Ok(h.addrs);
            }
            Ok(None) => {
                // Partial header: peek returns at once while bytes are
                // waiting, so pause instead of spinning.
                if n == last {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                last = n;
            }
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_round_trip_and_rest_untouched() {
        let mut b = write_v1(sa("192.0.2.1:5555"), sa("10.0.0.1:80"));
        assert_eq!(b, b"PROXY TCP4 192.0.2.1 10.0.0.1 5555 80\r\n");
        let len = b.len();
        b.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let h = parse(&b).unwrap().unwrap();
        assert_eq!(h.len, len);
        assert_eq!(h.addrs, Some((sa("192.0.2.1:5555"), sa("10.0.0.1:80"))));
        let b6 = write_v1(sa("[2001:db8::1]:1"), sa("[::1]:443"));
        assert_eq!(
            parse(&b6).unwrap().unwrap().addrs,
            Some((sa("[2001:db8::1]:1"), sa("[::1]:443")))
        );
    }

    #[test]
    fn v2_round_trip() {
        for (s, d) in [
            ("192.0.2.1:5555", "10.0.0.1:80"),
            ("[2001:db8::1]:1", "[::1]:443"),
        ] {
            let mut b = write_v2(sa(s), sa(d));
            let len = b.len();
            b.extend_from_slice(b"GET /");
            let h = parse(&b).unwrap().unwrap();
            assert_eq!(h.len, len);
            assert_eq!(h.addrs, Some((sa(s), sa(d))));
        }
    }

    #[test]
    fn partial_headers_ask_for_more() {
        let full = write_v2(sa("192.0.2.1:5555"), sa("10.0.0.1:80"));
        for i in 0..full.len() {
            assert_eq!(parse(&full[..i]), Ok(None), "v2 prefix {i}");
        }
        let v1 = write_v1(sa("192.0.2.1:5555"), sa("10.0.0.1:80"));
        for i in 0..v1.len() - 1 {
            assert_eq!(parse(&v1[..i]), Ok(None), "v1 prefix {i}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ParseError::NotProxy));
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4\r\n"), Err(ParseError::BadV1));
        assert_eq!(
            parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n"),
            Err(ParseError::BadV1)
        );
        assert_eq!(parse(b"PROXY TCP4 ::1 ::1 1 2\r\n"), Err(ParseError::BadV1));
        assert_eq!(
            parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"),
            Err(ParseError::BadV1)
        );
        assert_eq!(
            parse(&[b'P', b'R', b'O', b'X', b'Y', b' ', b'A'].repeat(20)),
            Err(ParseError::TooLong)
        );
        let mut v2 = write_v2(sa("1.2.3.4:1"), sa("5.6.7.8:2"));
        v2[12] = 0x31;
        assert_eq!(parse(&v2), Err(ParseError::BadV2));
    }

    #[test]
    fn unknown_and_local_have_no_addresses() {
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\nGET").unwrap().unwrap(),
            Header {
                len: 15,
                addrs: None
            }
        );
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(
            parse(&local).unwrap().unwrap(),
            Header {
                len: 16,
                addrs: None
            }
        );
    }
}
