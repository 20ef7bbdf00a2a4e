//! One request on a connection of its own, through the proxy's HTTP/1.1
//! client: weir's small clients (the admin CLI, the on-demand TLS `ask`
//! check, the apps' readiness check) write and read HTTP/1 with the same
//! codec as the proxy. Never pools: the connection ends with its answer.

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
    let mut c = Conn::new(Box::new(io));
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

/// Reads the body of the answer [`send`] got, up to `max` bytes.
pub async fn read_body(mut c: Conn, framing: Framing, max: usize) -> Result<Bytes, BodyReadError> {
    if let Some(b) = c.take_buffered(framing) {
        return if b.len() > max {
            Err(BodyReadError::TooLarge(max))
        } else {
            Ok(b)
        };
    }
    let mut body = ResponseBody::new(c, framing, false, Close);
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

/// The connection is closed after its one request.
struct Close;

impl Finish for Close {
    fn finish(self, _: Option<Conn>) {}
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
}
