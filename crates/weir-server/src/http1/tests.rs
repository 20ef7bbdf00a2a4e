use super::*;
use http::HeaderName;

fn bytes(s: &str) -> BytesMut {
    BytesMut::from(s.as_bytes())
}

const LIMITS: HeadLimits = HeadLimits {
    max_buf: 8192,
    max_headers: MAX_HEADERS,
    max_trailers: 8192,
};

fn request(p: Parsed) -> (Request<Incoming>, Head) {
    match p {
        Parsed::Request(r, head) => (r, head),
        Parsed::NeedMore => panic!("NeedMore"),
        Parsed::Refused(s) => panic!("Refused({s})"),
        Parsed::Smuggling(v) => panic!("Smuggling({v})"),
        Parsed::H2 => panic!("H2"),
        Parsed::BadPreface => panic!("BadPreface"),
    }
}

#[test]
fn pipelined_requests_come_out_one_at_a_time() {
    let mut b = bytes(
        "HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /3 HT",
    );
    let (r, head) = request(parse(&mut b, LIMITS));
    assert_eq!((r.method(), head.keep_alive), (&Method::HEAD, true));
    let (r, head) = request(parse(&mut b, LIMITS));
    assert_eq!((r.uri().path(), head.keep_alive), ("/2", false));
    assert_eq!(&b[..], b"GET /3 HT");
    assert!(matches!(parse(&mut b, LIMITS), Parsed::NeedMore));
    assert_eq!(&b[..], b"GET /3 HT", "an incomplete head stays");
}

/// The strict reading refuses what hyper would take (or read otherwise).
/// Chunk-level shapes (bad sizes, extensions, a missing CRLF after the
/// data) are the shared decoder's (`weir_http::h1::decode` tests).
#[test]
fn smuggling_shapes_are_refused_by_the_strict_reading() {
    use Violation::*;
    for (req, why) in [
        (
            "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            TransferEncodingOnHttp10,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            BadTransferEncoding,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
            BadTransferEncoding,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            BadTransferEncoding,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            BadTransferEncoding,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            BothLengths,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            BadContentLength,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            BadContentLength,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            BadContentLength,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            BadContentLength,
        ),
        ("GET / HTTP/1.1\nHost: x\n\n", BareLineEnding),
        ("GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", BareLineEnding),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: \tchunked, identity\r\n\r\n",
            BadTransferEncoding,
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
            BadContentLength,
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
            BothLengths,
        ),
    ] {
        let mut b = bytes(req);
        match parse(&mut b, LIMITS) {
            Parsed::Smuggling(v) => assert_eq!(v, why, "{req:?}"),
            Parsed::Refused(s) => panic!("{req:?}: Refused({s}), not {why}"),
            _ => panic!("{req:?} was not refused"),
        }
        assert_eq!(&b[..], req.as_bytes(), "{req:?} is left as it was");
    }
    // Shapes httparse refuses before the strict reading sees them: 400
    // all the same, and the connection closes.
    for req in [
        "GET / HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n",
        "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nX A: a\r\n\r\n",
        "GET / HTTP/1.1\r\n: a\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding:\x0bchunked\r\n\r\n",
    ] {
        match parse(&mut bytes(req), LIMITS) {
            Parsed::Smuggling(_) | Parsed::Refused(StatusCode::BAD_REQUEST) => {}
            _ => panic!("{req:?} was not refused with 400"),
        }
    }
    // Whitespace around a framing value is not part of it.
    let (_, head) = request(parse(
        &mut bytes("POST / HTTP/1.1\r\nTransfer-Encoding: chunked \r\n\r\n"),
        LIMITS,
    ));
    assert!(head.body.is_some());
}

#[test]
fn the_http2_preface_is_recognised_whole_and_in_pieces() {
    let mut b = bytes("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00");
    assert!(matches!(parse(&mut b, LIMITS), Parsed::H2));
    let mut b = bytes("PRI * HTTP/2.0\r\n");
    assert!(matches!(parse(&mut b, LIMITS), Parsed::NeedMore));
    // Its first line, then something else: a broken preface, not an
    // HTTP/1.1 request of version 2.0 to answer 400.
    for bad in [
        "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\r",
        "PRI * HTTP/2.0\r\nHost: a\r\n\r\n",
    ] {
        let mut b = bytes(bad);
        assert!(
            matches!(parse(&mut b, LIMITS), Parsed::BadPreface),
            "{bad:?}"
        );
        assert_eq!(&b[..], bad.as_bytes());
    }
}

fn head(
    status: StatusCode,
    headers: &[(&str, &str)],
    length: BodyLength,
    is_head: bool,
    close: bool,
) -> (String, Framing, bool) {
    let mut r = http::Response::new(());
    *r.status_mut() = status;
    for (k, v) in headers {
        r.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let (mut parts, ()) = r.into_parts();
    let mut close = close;
    let mut dst = Vec::new();
    let kind = Kind {
        is_head,
        ..Kind::default()
    };
    let f = encode_head(&mut parts, length, kind, &mut close, &mut dst);
    let text = String::from_utf8(dst).unwrap();
    let date = text.find("date: ").expect("a date header");
    let text = format!("{}date: X\r\n\r\n", &text[..date]);
    (text, f, close)
}

#[test]
fn heads_follow_hypers_rules() {
    use BodyLength::*;
    // A known length without a header gets one; the date comes last.
    let (t, f, c) = head(
        StatusCode::OK,
        &[("server", "weir")],
        Known(5),
        false,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 200 OK\r\nserver: weir\r\ncontent-length: 5\r\ndate: X\r\n\r\n"
    );
    assert_eq!((f, c), (Framing::Length(5), false));
    // HEAD keeps the handler's length and sends no body.
    let (t, f, _) = head(
        StatusCode::OK,
        &[("content-length", "42")],
        Empty,
        true,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 200 OK\r\ncontent-length: 42\r\ndate: X\r\n\r\n"
    );
    assert_eq!(f, Framing::Length(0));
    // An empty GET body: `content-length: 0`, replacing a stale header.
    let (t, _, _) = head(
        StatusCode::NOT_FOUND,
        &[("content-length", "9")],
        Empty,
        false,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\ndate: X\r\n\r\n"
    );
    // 304 and 204: no length at all.
    let (t, f, _) = head(
        StatusCode::NOT_MODIFIED,
        &[("etag", "\"x\"")],
        Empty,
        false,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\ndate: X\r\n\r\n"
    );
    assert_eq!(f, Framing::Length(0));
    // Unknown length: chunked.
    let (t, f, _) = head(StatusCode::OK, &[], Unknown, false, false);
    assert_eq!(
        t,
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: X\r\n\r\n"
    );
    assert_eq!(f, Framing::Chunked);
    // Closing adds `close`, joined to the handler's values as hyper does.
    let (t, _, c) = head(
        StatusCode::OK,
        &[("connection", "keep-alive")],
        Known(1),
        false,
        true,
    );
    assert_eq!(
        t,
        "HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 1\r\ndate: X\r\n\r\n"
    );
    assert!(c);
    // A handler's `Connection: close` closes the connection.
    let (t, _, c) = head(
        StatusCode::BAD_REQUEST,
        &[("connection", "close")],
        Known(1),
        false,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 1\r\ndate: X\r\n\r\n"
    );
    assert!(c);
    // A handler's own date is kept.
    let mut r = http::Response::new(());
    r.headers_mut()
        .insert(header::DATE, HeaderValue::from_static("then"));
    let (mut parts, ()) = r.into_parts();
    let mut dst = Vec::new();
    encode_head(&mut parts, Known(0), Kind::default(), &mut false, &mut dst);
    assert_eq!(
        dst,
        b"HTTP/1.1 200 OK\r\ndate: then\r\ncontent-length: 0\r\n\r\n"
    );
}

/// A head for an HTTP/1.0 client, or a protocol switch, by hyper's rules.
fn head_for(
    status: StatusCode,
    headers: &[(&str, &str)],
    length: BodyLength,
    kind: Kind,
    close: bool,
) -> (String, Framing) {
    let mut r = http::Response::new(());
    *r.status_mut() = status;
    for (k, v) in headers {
        r.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let (mut parts, ()) = r.into_parts();
    let mut close = close;
    let mut dst = Vec::new();
    let f = encode_head(&mut parts, length, kind, &mut close, &mut dst);
    let text = String::from_utf8(dst).unwrap();
    let date = text.find("date: ").expect("a date header");
    (format!("{}date: X\r\n\r\n", &text[..date]), f)
}

#[test]
fn http_1_0_and_protocol_switches_follow_hypers_rules() {
    use BodyLength::*;
    let v10 = Kind {
        http10: true,
        ..Kind::default()
    };
    // Kept alive: says so; closing: says nothing; never chunked.
    let (t, f) = head_for(StatusCode::OK, &[], Known(3), v10, false);
    assert_eq!(
        t,
        "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 3\r\ndate: X\r\n\r\n"
    );
    assert_eq!(f, Framing::Length(3));
    let (t, f) = head_for(
        StatusCode::OK,
        &[("transfer-encoding", "chunked")],
        Unknown,
        v10,
        true,
    );
    assert_eq!(t, "HTTP/1.0 200 OK\r\ndate: X\r\n\r\n");
    assert_eq!(f, Framing::Close);
    // A 101 to an upgrade goes out as it is, with no length.
    let up = Kind {
        upgrade: true,
        ..Kind::default()
    };
    let (t, f) = head_for(
        StatusCode::SWITCHING_PROTOCOLS,
        &[("upgrade", "websocket"), ("connection", "upgrade")],
        Empty,
        up,
        false,
    );
    assert_eq!(
        t,
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\ndate: X\r\n\r\n"
    );
    assert_eq!(f, Framing::Length(0));
    // Without an upgrade to switch to, it is a 500, as hyper answers.
    let (t, _) = head_for(
        StatusCode::SWITCHING_PROTOCOLS,
        &[],
        Empty,
        Kind::default(),
        false,
    );
    assert!(
        t.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
        "{t}"
    );
    // A 2xx to CONNECT has no length.
    let connect = Kind {
        connect: true,
        upgrade: true,
        ..Kind::default()
    };
    let (t, _) = head_for(
        StatusCode::OK,
        &[("content-length", "0")],
        Empty,
        connect,
        false,
    );
    assert_eq!(t, "HTTP/1.1 200 OK\r\ndate: X\r\n\r\n");
}

/// Deterministic fuzzing of [`parse`] (the same property as the
/// `h1_parse` cargo-fuzz target, which runs it unbounded): mutated and
/// randomly cut requests never panic; a request taken is exactly a complete
/// head httparse accepts, of a shape this loop may serve, and whatever is
/// not taken is left byte for byte.
#[test]
fn parse_holds_up_under_mutation() {
    let seeds: [&[u8]; 10] = [
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\nT: 1\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x00",
        b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        b"OPTIONS * HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
        b"HEAD /x?y HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\nAccept: */*\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /%2e%2e/ HTTP/1.0\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ];
    let alphabet = b" \t\r\n:/?%#,.-0123456789AGHTPEOSaclnsrx\x00\x7f\xff";
    let mut rng = fastrand::Rng::with_seed(0x5eed_1111);
    for _ in 0..50_000 {
        let input = weir_http::test_support::mutated(&mut rng, &seeds, alphabet);
        check_parse(&input, rng.usize(16..512));
    }
}

#[test]
fn heads_share_a_block_and_an_incomplete_one_is_copied_out() {
    std::thread::spawn(|| {
        let get = b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n";
        // Two heads read one after the other land side by side in one block.
        let mut first = in_head_block(get);
        let mut second = in_head_block(get);
        assert_eq!(
            first.as_ptr() as usize + get.len(),
            second.as_ptr() as usize
        );
        // Each parses as a request of its own, whose slices outlive the other.
        let (r1, _) = request(parse(&mut first, LIMITS));
        drop(second.split());
        assert_eq!(r1.uri().path(), "/one");
        assert_eq!(r1.headers()["host"], "a");
        // A head larger than a block gets one of its own.
        let big = vec![b'x'; HEAD_BLOCK + 1];
        assert_eq!(in_head_block(&big).len(), HEAD_BLOCK + 1);
        // An incomplete head is not kept inside the block: parse copies it
        // out, so a stalled client does not hold the block alive.
        let mut partial = in_head_block(b"GET /two HTTP/1.1\r\nHo");
        let at = partial.as_ptr();
        assert!(matches!(parse(&mut partial, LIMITS), Parsed::NeedMore));
        assert_eq!(&partial[..], b"GET /two HTTP/1.1\r\nHo");
        assert_ne!(partial.as_ptr(), at);
    })
    .join()
    .unwrap();
}

/// One connection served by [`serve`] over an in-memory stream, with the
/// built-in welcome site: the client's end, the drain, and the server's
/// task.
fn drain_conn() -> (
    tokio::io::DuplexStream,
    crate::drain::Drain,
    tokio::task::JoinHandle<()>,
) {
    let cfg = weir_config::Config::builtin_welcome();
    let sites = crate::pipeline::build_sites(
        &cfg,
        &[],
        &crate::pipeline::Registry::new(1),
        &weir_cache::Store::new(&Default::default(), 1),
    )
    .unwrap();
    let listener = Current::from_pointee(Listener::new(&sites, &[0], 0, &cfg.server));
    let (client, mut server) = tokio::io::duplex(64 * 1024);
    let drain = crate::drain::Drain::new();
    let signal = drain.signal();
    let task = tokio::spawn(async move {
        let info = ConnInfo {
            peer: ([127, 0, 0, 1], 40000).into(),
            local: ([127, 0, 0, 1], 8080).into(),
            tls: false,
            tls_info: None,
            worker: Default::default(),
        };
        let state = Arc::new(ConnState::default());
        let sh = Shared {
            info: &info,
            state: &state,
            regions: None,
            limits: LIMITS,
        };
        serve(&mut server, sh, Sites::new(&listener), &signal).await;
    });
    (client, drain, task)
}

/// Reads one whole response (its head and `content-length` bytes of
/// body) and returns its head; panics if the stream ends before. `got`
/// keeps what was read past it (the next pipelined response).
async fn read_response(c: &mut tokio::io::DuplexStream, got: &mut Vec<u8>) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + len {
                got.drain(..end + 4 + len);
                return head;
            }
        }
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before a whole response: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

/// Issue 55 §5: a closed-loop client sends its next request the moment an
/// answer arrives. When the drain begins with the connection idle, that
/// request may already be on its way: it is answered, with `Connection:
/// close`, and only then is the connection closed (it used to be closed at
/// once, resetting the request).
#[tokio::test(start_paused = true)]
async fn a_request_arriving_as_the_drain_begins_is_answered_with_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut c, drain, task) = drain_conn();
    let mut got = Vec::new();
    c.write_all(GET).await.unwrap();
    let head = read_response(&mut c, &mut got).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    let drained = tokio::spawn(drain.drain());
    // Every task runs until it waits (the clock is paused): the server has
    // seen the drain begin with its connection idle.
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.write_all(GET).await.unwrap();
    let head = read_response(&mut c, &mut got).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(c.read(&mut [0u8; 16]).await.unwrap(), 0, "closed after it");
    drop(c);
    task.await.unwrap();
    drained.await.unwrap();
}

/// A connection that stays idle through the last call is closed (no bytes,
/// a clean end of stream), and the drain ends with it.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_last_call() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut c, drain, task) = drain_conn();
    let mut got = Vec::new();
    c.write_all(GET).await.unwrap();
    read_response(&mut c, &mut got).await;
    let start = tokio::time::Instant::now();
    let drained = tokio::spawn(drain.drain());
    assert_eq!(c.read(&mut [0u8; 16]).await.unwrap(), 0);
    assert_eq!(start.elapsed(), LAST_CALL);
    drop(c);
    task.await.unwrap();
    drained.await.unwrap();
}

/// Pipelined requests the drain finds already read are all answered; the
/// last one says `Connection: close`.
#[tokio::test(start_paused = true)]
async fn pipelined_requests_read_before_the_drain_are_all_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut c, drain, task) = drain_conn();
    let mut got = Vec::new();
    let drained = tokio::spawn(drain.drain());
    // A new connection is not idle: the drain lets its requests come.
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.write_all(&[GET, GET].concat()).await.unwrap();
    let first = read_response(&mut c, &mut got).await;
    let second = read_response(&mut c, &mut got).await;
    assert!(!first.contains("connection: close"), "{first}");
    assert!(second.contains("connection: close"), "{second}");
    assert_eq!(c.read(&mut [0u8; 16]).await.unwrap(), 0);
    drop(c);
    task.await.unwrap();
    drained.await.unwrap();
}
