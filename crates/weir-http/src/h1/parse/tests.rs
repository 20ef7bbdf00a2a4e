//! The head parser's tests for both roles: requests as hyper's server
//! reads them (moved with the parser from weir's server), responses as
//! hyper's client reads them (from the upstream client).

use super::*;

fn bytes(s: &str) -> BytesMut {
    BytesMut::from(s.as_bytes())
}

const LIMITS: HeadLimits = HeadLimits {
    max_buf: 8192,
    max_headers: MAX_HEADERS,
    max_trailers: 8192,
};

fn limits(max_buf: usize) -> HeadLimits {
    HeadLimits { max_buf, ..LIMITS }
}

fn request(p: Result<Option<(Request<Incoming>, Head)>, HeadError>) -> (Request<Incoming>, Head) {
    match p {
        Ok(Some(r)) => r,
        Ok(None) => panic!("incomplete"),
        Err(e) => panic!("refused: {e}"),
    }
}

/// The status a server answers a refused head with, `None` if it was taken.
fn refused(b: &mut BytesMut, limits: HeadLimits) -> Option<StatusCode> {
    parse_request(b, limits).err().map(|e| e.status())
}

#[test]
fn a_simple_get_is_parsed_and_taken_out() {
    let mut b =
        bytes("GET /a/b?c=d HTTP/1.1\r\nHost: example.test\r\nX-One: 1\r\nx-one: 2\r\n\r\n");
    let (r, head) = request(parse_request(&mut b, LIMITS));
    assert!(head.keep_alive && head.body.is_none() && !head.upgrade);
    assert!(b.is_empty());
    assert_eq!(r.method(), Method::GET);
    assert_eq!(r.uri().path(), "/a/b");
    assert_eq!(r.uri().query(), Some("c=d"));
    assert_eq!(r.version(), Version::HTTP_11);
    assert_eq!(r.headers()["host"], "example.test");
    let ones: Vec<_> = r.headers().get_all("x-one").iter().collect();
    assert_eq!(ones, ["1", "2"]);
}

#[test]
fn every_request_form_is_parsed_by_hypers_rules() {
    // (request, keep-alive, has a body, expects 100, upgrade, HTTP/1.0)
    let cases: &[(&str, bool, bool, bool, bool, bool)] = &[
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
            true,
            true,
            false,
            false,
            false,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            true,
            true,
            false,
            false,
            false,
        ),
        (
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            true,
            false,
            false,
            true,
            false,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-Continue\r\n\r\n",
            true,
            true,
            true,
            false,
            false,
        ),
        (
            "GET / HTTP/1.1\r\nConnection: x-hop\r\n\r\n",
            true,
            false,
            false,
            false,
            false,
        ),
        ("GET / HTTP/1.0\r\n\r\n", false, false, false, false, true),
        (
            "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            true,
            false,
            false,
            false,
            true,
        ),
        (
            "GET / HTTP/1.0\r\nUpgrade: websocket\r\n\r\n",
            false,
            false,
            false,
            false,
            true,
        ),
        (
            "GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
            false,
            false,
            false,
            false,
            false,
        ),
        (
            "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            true,
            false,
            false,
            false,
            false,
        ),
        (
            "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            true,
            false,
            false,
            true,
            false,
        ),
        (
            "DELETE / HTTP/1.1\r\nHost: a\r\n\r\n",
            true,
            false,
            false,
            false,
            false,
        ),
    ];
    for &(req, keep_alive, body, cont, upgrade, http10) in cases {
        let mut b = bytes(req);
        let (r, head) = request(parse_request(&mut b, LIMITS));
        let got = (
            head.keep_alive,
            head.body.is_some(),
            head.expect_continue,
            head.upgrade,
            head.http10,
        );
        assert_eq!(got, (keep_alive, body, cont, upgrade, http10), "{req:?}");
        assert_eq!(r.version() == Version::HTTP_10, http10, "{req:?}");
    }
}

#[test]
fn bad_heads_are_refused_as_hyper_refuses_them() {
    for (req, status) in [
        ("GARBAGE\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nBad Name: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400),
        ("\x00 / HTTP/1.1\r\n\r\n", 400),
    ] {
        let mut b = bytes(req);
        assert!(
            refused(&mut b, LIMITS).is_some_and(|s| s.as_u16() == status),
            "{req:?}"
        );
        assert_eq!(&b[..], req.as_bytes(), "{req:?} is left as it was");
    }
    // Still incomplete at the buffer's size: 431.
    let mut b = bytes(&format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(200)));
    assert_eq!(
        refused(&mut b, limits(100)),
        Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
    );
    // More header lines than allowed: 431.
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let mut b = bytes(&format!("GET / HTTP/1.1\r\n{many}\r\n"));
    assert_eq!(
        refused(&mut b, limits(1 << 20)),
        Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
    );
    // ... unless the configured limit is higher.
    let mut b = bytes(&format!("GET / HTTP/1.1\r\n{many}\r\n"));
    let more = HeadLimits {
        max_headers: 200,
        ..limits(1 << 20)
    };
    assert!(matches!(parse_request(&mut b, more), Ok(Some(_))));
    // A target past hyper's limit: 414.
    let mut b = bytes(&format!(
        "GET /{} HTTP/1.1\r\n\r\n",
        "a".repeat(MAX_URI_LEN)
    ));
    assert_eq!(
        refused(&mut b, limits(1 << 20)),
        Some(StatusCode::URI_TOO_LONG)
    );
}

fn head_of(
    raw: &[u8],
    head_request: bool,
) -> Result<(http::response::Parts, ResponseFraming, bool), HeadError> {
    let mut buf = BytesMut::from(raw);
    loop {
        match parse_response(&mut buf, head_request, false)? {
            Some(Response::Interim) => continue,
            Some(Response::Final(h)) => return Ok((h.parts, h.framing, h.keep_alive)),
            None => panic!("incomplete head"),
        }
    }
}

fn hop_by_hop_in(raw: &[u8]) -> bool {
    match parse_response(&mut BytesMut::from(raw), false, false) {
        Ok(Some(Response::Final(h))) => h.hop_by_hop,
        _ => panic!("not a final head"),
    }
}

#[test]
fn field_names_mean_the_same_however_spelled_and_remembered() {
    // The same name in three spellings, each remembered apart: every one
    // frames the body and lands in the map under its lower-case name.
    for _ in 0..2 {
        for name in ["Content-Length", "CONTENT-LENGTH", "content-length"] {
            let raw = format!("HTTP/1.1 200 OK\r\n{name}: 3\r\nX-Up: 1\r\n\r\nabc");
            let (p, framing, keep) = head_of(raw.as_bytes(), false).unwrap();
            assert_eq!(framing, ResponseFraming::Length(3), "{name}");
            assert!(keep);
            assert_eq!(p.headers["content-length"], "3");
            assert_eq!(p.headers["x-up"], "1");
        }
    }
    // Hop-by-hop fields are noticed in any spelling, and only they.
    for (field, hop) in [
        ("Keep-Alive: timeout=5", true),
        ("PROXY-CONNECTION: keep-alive", true),
        ("connection: close", true),
        ("Upgrade: h2c", true),
        ("Proxy-Authenticate: Basic", true),
        ("Te: trailers", true),
        ("Keep-Alives: 1", false),
        ("Content-Type: text/plain", false),
    ] {
        let raw = format!("HTTP/1.1 200 OK\r\n{field}\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(hop_by_hop_in(raw.as_bytes()), hop, "{field}");
    }
    // Ever new names: each one still right, and the worker keeps a bounded
    // number of them.
    for i in 0..3 * NAMES_KEPT {
        let raw = format!("HTTP/1.1 204 No Content\r\nX-Field-{i}: v\r\n\r\n");
        let (p, ..) = head_of(raw.as_bytes(), false).unwrap();
        assert_eq!(p.headers[format!("x-field-{i}").as_str()], "v");
    }
    NAMES.with_borrow(|n| assert_eq!(n.known.len(), NAMES_KEPT));
    // A name that is not a token never gets as far (httparse refuses it).
    assert!(head_of(b"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n", false).is_err());
}

#[test]
fn response_framing_follows_rfc_9112() {
    let (p, f, k) = head_of(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!(
        (p.status, f, k),
        (StatusCode::OK, ResponseFraming::Length(5), true)
    );
    assert_eq!(p.headers["x-a"], "b");
    assert!(p.extensions.get::<ReasonPhrase>().is_none());
    // HEAD, 204 and 304 have no body whatever they say.
    let (_, f, _) = head_of(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true).unwrap();
    assert_eq!(f, ResponseFraming::None);
    let (_, f, _) = head_of(
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!(f, ResponseFraming::None);
    let (_, f, _) = head_of(b"HTTP/1.1 204 No Content\r\n\r\n", false).unwrap();
    assert_eq!(f, ResponseFraming::None);
    // Chunked wins over Content-Length, and the connection is not reused.
    let (_, f, k) = head_of(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!((f, k), (ResponseFraming::Chunked, true));
    let (_, f, k) = head_of(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!((f, k), (ResponseFraming::Chunked, false));
    let (_, f, k) = head_of(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false).unwrap();
    assert_eq!((f, k), (ResponseFraming::Close, false));
    // No length: until close.
    let (_, f, k) = head_of(b"HTTP/1.1 200 OK\r\n\r\n", false).unwrap();
    assert_eq!((f, k), (ResponseFraming::Close, false));
    // Equal repeated lengths are one length; different ones are an error.
    let (_, f, _) = head_of(
        b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n",
        false,
    )
    .unwrap();
    assert_eq!(f, ResponseFraming::Length(7));
    for bad in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
    ] {
        assert!(
            matches!(head_of(bad, false), Err(HeadError::BadLength)),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // Keep-alive: 1.1 unless close; 1.0 only when asked.
    let (_, _, k) = head_of(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        false,
    )
    .unwrap();
    assert!(!k);
    let (p, _, k) = head_of(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).unwrap();
    assert!(!k);
    assert_eq!(p.version, Version::HTTP_10);
    let (_, _, k) = head_of(
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: Keep-Alive\r\n\r\n",
        false,
    )
    .unwrap();
    assert!(k);
}

#[test]
fn interim_responses_are_skipped_and_101_refused() {
    let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 Fine\r\nContent-Length: 2\r\n\r\nok";
    let mut buf = BytesMut::from(&raw[..]);
    let mut seen = 0;
    let (p, f) = loop {
        match parse_response(&mut buf, false, false).unwrap() {
            Some(Response::Interim) => seen += 1,
            Some(Response::Final(h)) => break (h.parts, h.framing),
            None => panic!("incomplete"),
        }
    };
    assert_eq!(seen, 2);
    assert_eq!((p.status, f), (StatusCode::OK, ResponseFraming::Length(2)));
    assert_eq!(&buf[..], b"ok");
    // A reason that is not the standard one is kept, as hyper's client does.
    assert_eq!(
        p.extensions.get::<ReasonPhrase>().unwrap().as_bytes(),
        b"Fine"
    );
    assert!(matches!(
        head_of(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", false),
        Err(HeadError::UnexpectedSwitch)
    ));
    // An empty reason, and an empty value (found by the mutation test: an
    // empty slice need not point into the buffer).
    for raw in [
        &b"HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n"[..],
        b"HTTP/1.1 200\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n",
    ] {
        let (p, f, _) = head_of(raw, false).unwrap();
        assert_eq!((p.status, f), (StatusCode::OK, ResponseFraming::Length(0)));
    }
    assert!(matches!(
        head_of(b"HTTP/1.1 2000 OK\r\n\r\n", false),
        Err(HeadError::Malformed(_))
    ));
}

#[test]
fn an_incomplete_head_asks_for_more_at_every_split() {
    let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc";
    let head_len = raw.len() - 3;
    for cut in 1..head_len {
        let mut buf = BytesMut::from(&raw[..cut]);
        assert!(
            parse_response(&mut buf, false, false).unwrap().is_none(),
            "cut at {cut}"
        );
        assert_eq!(buf.len(), cut);
    }
}
