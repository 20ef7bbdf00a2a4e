//! One request at a time, through the proxy's HTTP/1.1 client: weir's
//! small clients (the admin CLI, the on-demand TLS `ask` check, the apps'
//! readiness check, the trace exporter) write and read HTTP/1 with the
//! same codec as the proxy. Never pools: a caller that keeps a connection
//! for its next request ([`send_on`], [`read_body_keep`]) holds it itself.

use bytes::{Bytes, BytesMut};
use http::Method;
use http::header::{HeaderMap, HeaderValue};
use http_body_util::BodyExt;

use super::{ClientError, Conn, Encoded, Finish, Framing, Head, Io, RequestHead, ResponseBody};

/// Why an answer's body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyReadError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the answer's body is larger than {0} bytes")]
    TooLarge(usize),
}

/// Sends `method target` with `fields` (Host aside) and `body` on `io`, and
/// reads the answer's head; the connection is handed back for its body
/// ([`read_body`]).
pub async fn send(
    io: impl Io,
    method: &Method,
    target: &str,
    host: &HeaderValue,
    fields: &HeaderMap,
    body: Option<&Bytes>,
) -> Result<(Head, Conn), ClientError> {
    send_on(Conn::new(Box::new(io)), method, target, host, fields, body).await
}

/// [`send`] on a connection already open, such as one
/// [`read_body_keep`] gave back.
pub async fn send_on(
    mut c: Conn,
    method: &Method,
    target: &str,
    host: &HeaderValue,
    fields: &HeaderMap,
    body: Option<&Bytes>,
) -> Result<(Head, Conn), ClientError> {
    let req = Encoded::new(
        RequestHead {
            method,
            target,
            host,
            fields: fields.iter().map(|(n, v)| (n, v.as_bytes())),
        },
        body,
    );
    c.send(req).await.map_err(|(e, _)| e)?;
    let head = c.read_head(method == Method::HEAD).await?;
    Ok((head, c))
}

/// Reads the body of the answer [`send`] got, up to `max` bytes; the
/// connection is closed.
pub async fn read_body(c: Conn, framing: Framing, max: usize) -> Result<Bytes, BodyReadError> {
    let mut kept = None;
    read_whole(c, framing, false, max, &mut kept).await
}

/// Reads the body of the answer `head` heads, up to `max` bytes, and gives
/// the connection back when it may carry another request.
pub async fn read_body_keep(
    c: Conn,
    head: &Head,
    max: usize,
) -> Result<(Bytes, Option<Conn>), BodyReadError> {
    let mut kept = None;
    let body = read_whole(c, head.framing, head.keep_alive, max, &mut kept).await?;
    Ok((body, kept))
}

async fn read_whole(
    mut c: Conn,
    framing: Framing,
    keep_alive: bool,
    max: usize,
    kept: &mut Option<Conn>,
) -> Result<Bytes, BodyReadError> {
    if let Some(b) = c.take_buffered(framing) {
        if b.len() > max {
            return Err(BodyReadError::TooLarge(max));
        }
        if keep_alive && c.is_clean() {
            *kept = Some(c);
        }
        return Ok(b);
    }
    let mut body = ResponseBody::new(c, framing, keep_alive, Keep(kept));
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if out.len() + data.len() > max {
                return Err(BodyReadError::TooLarge(max));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// Where the connection goes at the body's end: `None` when it must close.
struct Keep<'a>(&'a mut Option<Conn>);

impl Finish for Keep<'_> {
    fn finish(self, conn: Option<Conn>) {
        *self.0 = conn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A request goes out with its Host, fields and Content-Length, and a
    /// chunked answer is read whole; a larger one than asked is refused.
    #[tokio::test]
    async fn one_request_and_its_whole_answer() {
        for (max, whole) in [(1024, true), (4, false)] {
            let (ours, mut theirs) = tokio::io::duplex(4096);
            let server = tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.ends_with(b"{}") {
                    let n = theirs.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                theirs
                    .write_all(b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n")
                    .await
                    .unwrap();
                String::from_utf8(got).unwrap()
            });
            let mut fields = HeaderMap::new();
            fields.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            let body = Bytes::from_static(b"{}");
            let host = HeaderValue::from_static("localhost");
            let (head, c) = send(ours, &Method::POST, "/reload", &host, &fields, Some(&body))
                .await
                .unwrap();
            assert_eq!(head.parts.status, http::StatusCode::CREATED);
            let r = read_body(c, head.framing, max).await;
            if whole {
                assert_eq!(r.unwrap(), "abcdef");
            } else {
                assert!(matches!(r, Err(BodyReadError::TooLarge(4))), "{r:?}");
            }
            assert_eq!(
                server.await.unwrap(),
                "POST /reload HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
            );
        }
    }

    /// A kept connection carries the next request, whether its answer's
    /// body came with the head or after it; an answer that closes gives
    /// no connection back.
    #[tokio::test]
    async fn a_kept_connection_carries_the_next_request() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let answers: [&[u8]; 3] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye",
        ];
        let server = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            for a in answers {
                let mut got = Vec::new();
                while !got.ends_with(b"\r\n\r\n") {
                    let n = theirs.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                theirs.write_all(a).await.unwrap();
                if a.ends_with(b"chunked\r\n\r\n") {
                    // The body after the head, in its own write.
                    tokio::task::yield_now().await;
                    theirs.write_all(b"2\r\nok\r\n0\r\n\r\n").await.unwrap();
                }
            }
        });
        let host = HeaderValue::from_static("localhost");
        let fields = HeaderMap::new();
        let (head, c) = send(ours, &Method::GET, "/1", &host, &fields, None)
            .await
            .unwrap();
        let (body, kept) = read_body_keep(c, &head, 64).await.unwrap();
        assert_eq!(body, "ok");
        let (head, c) = send_on(kept.unwrap(), &Method::GET, "/2", &host, &fields, None)
            .await
            .unwrap();
        let (body, kept) = read_body_keep(c, &head, 64).await.unwrap();
        assert_eq!(body, "ok");
        let (head, c) = send_on(kept.unwrap(), &Method::GET, "/3", &host, &fields, None)
            .await
            .unwrap();
        let (body, kept) = read_body_keep(c, &head, 64).await.unwrap();
        assert_eq!(body, "bye");
        assert!(kept.is_none());
        server.await.unwrap();
    }
}
