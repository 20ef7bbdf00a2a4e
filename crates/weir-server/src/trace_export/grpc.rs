//! OTLP/gRPC: one batch as a unary `TraceService/Export` call over HTTP/2
//! without TLS (prior knowledge, as collectors listen on port 4317), on
//! the connection the exporter keeps ([`Channel`]). Only the exporter's
//! thread runs it; it never retries (a failed batch is dropped and
//! counted by the caller).

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderMap, TE, USER_AGENT};

/// The unary method every OTLP/gRPC collector serves.
const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// An HTTP/2 connection to the collector, kept between batches.
pub(super) struct Channel {
    client: h2::client::SendRequest<Bytes>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Sends `body` (an encoded `ExportTraceServiceRequest`) on the kept
/// channel, or a new one when there is none or it has ended; `Ok` when
/// the collector answered `grpc-status: 0`. A failed call closes the
/// channel.
pub(super) async fn export(
    uri: &http::Uri,
    kept: &mut Option<Channel>,
    body: Bytes,
) -> Result<(), String> {
    let channel = match kept.take() {
        Some(c) if !c.driver.is_finished() => c,
        _ => open(uri).await?,
    };
    let answer = call(channel.client.clone(), uri, body).await;
    if answer.is_ok() {
        *kept = Some(channel);
    }
    answer
}

async fn open(uri: &http::Uri) -> Result<Channel, String> {
    let stream = super::connect(uri, 4317).await?;
    let (client, conn) = h2::client::handshake(stream)
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Channel { client, driver })
}

async fn call(
    client: h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    body: Bytes,
) -> Result<(), String> {
    let authority = uri.authority().map_or("localhost", |a| a.as_str());
    let req = http::Request::post(format!("http://{authority}{EXPORT}"))
        .header(CONTENT_TYPE, "application/grpc")
        .header(TE, "trailers")
        .header(USER_AGENT, "weir")
        .body(())
        .map_err(|e| e.to_string())?;
    let mut client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let (answer, mut send) = client
        .send_request(req, false)
        .map_err(|e| format!("HTTP/2: {e}"))?;
    send.send_data(frame(&body), true)
        .map_err(|e| format!("HTTP/2: {e}"))?;
    let answer = answer.await.map_err(|e| format!("HTTP/2: {e}"))?;
    let (head, mut recv) = answer.into_parts();
    if head.status != http::StatusCode::OK {
        return Err(format!("it answered {}", head.status.as_u16()));
    }
    // "Trailers-only": the status is in the head; else in the trailers
    // after the (unused) ExportTraceServiceResponse.
    if head.headers.contains_key("grpc-status") {
        return status(&head.headers);
    }
    while let Some(data) = recv.data().await {
        let data = data.map_err(|e| format!("HTTP/2: {e}"))?;
        let _ = recv.flow_control().release_capacity(data.len());
    }
    match recv.trailers().await.map_err(|e| format!("HTTP/2: {e}"))? {
        Some(t) => status(&t),
        None => Err("the answer has no grpc-status".into()),
    }
}

/// One gRPC message: uncompressed flag, big-endian length, the bytes.
fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.put_u8(0);
    b.put_u32(msg.len() as u32);
    b.put_slice(msg);
    b.freeze()
}

fn status(h: &HeaderMap) -> Result<(), String> {
    match h.get("grpc-status").map(|v| v.as_bytes()) {
        Some(b"0") => Ok(()),
        Some(code) => Err(format!(
            "grpc-status {}: {}",
            String::from_utf8_lossy(code),
            h.get("grpc-message")
                .and_then(|m| m.to_str().ok())
                .unwrap_or("")
        )),
        None => Err("the answer has no grpc-status".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_with_its_length() {
        assert_eq!(&frame(b"abc")[..], [0, 0, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn only_status_zero_is_success() {
        let mut h = HeaderMap::new();
        assert!(status(&h).is_err());
        h.insert("grpc-status", "0".parse().unwrap());
        assert!(status(&h).is_ok());
        h.insert("grpc-status", "14".parse().unwrap());
        h.insert("grpc-message", "unavailable".parse().unwrap());
        assert_eq!(status(&h).unwrap_err(), "grpc-status 14: unavailable");
    }
}
