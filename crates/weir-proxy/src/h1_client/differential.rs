//! weir's HTTP/1.1 upstream client against hyper's (a dev-dependency, the
//! reference only): every response shape an upstream can send must come
//! out of both the same (status, reason, version, fields with hop-by-hop
//! ones removed, body bytes, trailers, and whether the body ended cleanly),
//! and what one refuses the other refuses too.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, header};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

/// What the proxy would pass on from a response.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    version: http::Version,
    reason: Option<Vec<u8>>,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    trailers: Option<Vec<(String, Vec<u8>)>>,
    clean_end: bool,
}

fn fields(h: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    h.iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// The upstream: reads one request head, answers `resp`, then closes when
/// `close` (else keeps the connection open until the test ends).
fn upstream(mut s: DuplexStream, resp: &'static [u8], close: bool) {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut b = [0u8; 1024];
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
        let _ = s.write_all(resp).await;
        if !close {
            std::future::pending::<()>().await;
        }
    });
}

/// Reads a body to its end: its bytes, its trailers, and whether it ended
/// without an error.
async fn read_body<B>(mut body: B) -> (Vec<u8>, Option<Vec<(String, Vec<u8>)>>, bool)
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let mut out = Vec::new();
    let mut trailers = None;
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => return (out, trailers, true),
            Some(Err(_)) => return (out, trailers, false),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => out.extend_from_slice(&d),
                Err(f) => trailers = f.into_trailers().ok().map(|t| fields(&t)),
            },
        }
    }
}

struct Drop_;

impl Finish for Drop_ {
    fn finish(self, _: Option<Conn>) {}
}

async fn through_weir(resp: &'static [u8], close: bool) -> Option<Seen> {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    upstream(theirs, resp, close);
    let mut c = Conn::new(Box::new(ours));
    let host = HeaderValue::from_static("up");
    let req = Encoded::new(
        RequestHead {
            method: &Method::GET,
            target: "/",
            host: &host,
            fields: std::iter::empty(),
        },
        None,
    );
    c.send(req).await.ok()?;
    let head = c.read_head(false).await.ok()?;
    let mut parts = head.parts;
    if head.hop_by_hop {
        crate::forward::strip_hop_by_hop(&mut parts.headers, false);
    }
    let (body, trailers, clean_end) = match c.take_buffered(head.framing) {
        Some(b) => (b.to_vec(), None, true),
        None => read_body(ResponseBody::new(c, head.framing, head.keep_alive, Drop_)).await,
    };
    Some(Seen {
        status: parts.status.as_u16(),
        version: parts.version,
        reason: parts
            .extensions
            .get::<weir_http::h1::ReasonPhrase>()
            .map(|r| r.as_bytes().to_vec()),
        fields: fields(&parts.headers),
        body,
        trailers,
        clean_end,
    })
}

async fn through_hyper(resp: &'static [u8], close: bool) -> Option<Seen> {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    upstream(theirs, resp, close);
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(ours))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/")
        .header(header::HOST, "up")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let (mut parts, body) = tx.send_request(req).await.ok()?.into_parts();
    crate::forward::strip_hop_by_hop(&mut parts.headers, false);
    let (body, trailers, clean_end) = read_body(body).await;
    Some(Seen {
        status: parts.status.as_u16(),
        version: parts.version,
        reason: parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| r.as_bytes().to_vec()),
        fields: fields(&parts.headers),
        body,
        trailers,
        clean_end,
    })
}

#[tokio::test]
async fn weirs_client_reads_every_response_like_hypers() {
    let cases: &[(&str, &[u8], bool)] = &[
        ("chunked, extensions, trailers", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Sum: 9\r\n\r\n", false),
        ("1xx first", b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", false),
        ("until close", b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall until the close", true),
        ("HTTP/1.0", b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nold ok", true),
        ("HTTP/1.0 keep-alive", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nkept", false),
        ("length and chunked", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true),
        ("two lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nab", true),
        ("the same length twice", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab", false),
        ("nothing", b"", true),
        ("a custom reason", b"HTTP/1.1 200 Quite Fine\r\nContent-Length: 2\r\n\r\nok", false),
        ("an empty reason", b"HTTP/1.1 404 \r\nContent-Length: 4\r\n\r\ngone", false),
        ("hop-by-hop fields", b"HTTP/1.1 200 OK\r\nConnection: x-private, keep-alive\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nContent-Length: 3\r\n\r\nhop", false),
        ("connection close", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose", true),
        ("cut short", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", true),
        ("chunked cut short", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", true),
        ("304 with a length", b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 10\r\n\r\n", false),
        ("204", b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false),
        ("mixed case", b"HTTP/1.1 201 Created\r\nX-Mixed-Case: Yes\r\nCONTENT-length: 3\r\nProxy-Authenticate: Basic\r\nTE: gzip\r\n\r\nabc", false),
        ("a bad chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", true),
        ("a bad status line", b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", true),
        ("a bad field name", b"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n", true),
    ];
    for (what, resp, close) in cases {
        let ours = through_weir(resp, *close).await;
        let hypers = through_hyper(resp, *close).await;
        assert_eq!(ours, hypers, "{what}");
    }
}
