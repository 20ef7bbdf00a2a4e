//! Tunnels through the proxy: HTTP/1.1 Upgrade (WebSocket and others) and
//! WebSockets over HTTP/2 (RFC 8441 extended CONNECT with
//! `:protocol websocket`). Either way the request goes to an upstream on a
//! fresh HTTP/1.1 connection of weir's own client (`h1_client`) as an
//! Upgrade; when the upstream answers
//! 101, the client side (the HTTP/1.1 connection, or the one HTTP/2 stream
//! after a 200) and the upstream connection, with any bytes it sent past
//! the 101, become raw byte tunnels copied into each other until one
//! closes.
//!
//! Never pools an upgraded connection; never reads or changes the tunnelled
//! bytes (WebSocket framing is the same over both client protocols); never
//! retries once the request was sent.

use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode, Version};

use super::forward::{self, ClientAddr, Present};
use super::h1_client::{Conn, Encoded, Expect, RequestHead, StreamError, Uploading};
use super::pool::Sender;
use super::{ActiveGuard, Failed, FromUpstream, Proxy, ProxyError};
use weir_http::body::Body;
use weir_http::conn::ConnInfo;
use weir_http::upgrade::{OnUpgrade, Upgraded};

/// Whether the client asks to switch protocols (HTTP/1.1 `Connection: upgrade`).
pub fn is_upgrade(parts: &http::request::Parts) -> bool {
    parts.version == Version::HTTP_11
        && Present::of(&parts.headers).has(Present::UPGRADE)
        && parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// What the client asked for, which decides how the upstream's 101 is passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tunnel {
    /// HTTP/1.1 `Upgrade`: the 101 goes back as it is.
    Upgrade,
    /// HTTP/2 extended CONNECT for a WebSocket: the 101 becomes a 200.
    H2WebSocket,
}

/// An HTTP/1.1 Upgrade request.
pub async fn serve(
    p: &Proxy,
    parts: &mut http::request::Parts,
    body: Body,
    conn: &ConnInfo,
    path: Option<&str>,
) -> Response<Body> {
    let Some(on_client) = parts.extensions.remove::<OnUpgrade>() else {
        // The protocol layer cannot hand over the connection.
        return weir_http::response::error(StatusCode::BAD_REQUEST);
    };
    tunnel(p, parts, body, conn, path, on_client, Tunnel::Upgrade).await
}

/// A `CONNECT` request. Only HTTP/2 carries the `:protocol` this needs;
/// an HTTP/1.1 CONNECT is answered 405 like any other.
/// Only the extended CONNECT for WebSockets is proxied: weir is not a
/// forward proxy (405), and other `:protocol`s are not implemented (501).
pub async fn serve_connect(
    p: &Proxy,
    parts: &mut http::request::Parts,
    conn: &ConnInfo,
    path: Option<&str>,
) -> Response<Body> {
    match parts.extensions.get::<hyper::ext::Protocol>() {
        None => return weir_http::response::method_not_allowed(),
        Some(proto) if !proto.as_str().eq_ignore_ascii_case("websocket") => {
            return weir_http::response::error(StatusCode::NOT_IMPLEMENTED);
        }
        Some(_) => {}
    }
    let Some(on_client) = parts.extensions.remove::<OnUpgrade>() else {
        return weir_http::response::error(StatusCode::BAD_REQUEST);
    };
    tunnel(
        p,
        parts,
        Body::empty(),
        conn,
        path,
        on_client,
        Tunnel::H2WebSocket,
    )
    .await
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 4.1).
/// The HTTP/2 client never sent one (RFC 8441 5), so weir makes its own.
fn websocket_key() -> HeaderValue {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut raw = [0u8; 18];
    fastrand::fill(&mut raw[..16]);
    let mut out = [0u8; 24];
    for (i, c) in raw.chunks(3).enumerate() {
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        for j in 0..4 {
            out[i * 4 + j] = B64[(n >> (18 - 6 * j)) as usize & 63];
        }
    }
    // 16 bytes encode to 22 characters and `==`.
    out[22] = b'=';
    out[23] = b'=';
    HeaderValue::from_bytes(&out).unwrap_or(HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="))
}

async fn tunnel(
    p: &Proxy,
    parts: &mut http::request::Parts,
    body: Body,
    conn: &ConnInfo,
    path: Option<&str>,
    on_client: OnUpgrade,
    kind: Tunnel,
) -> Response<Body> {
    let client = ClientAddr {
        peer: conn.peer.ip(),
        trusted: &p.cfg.trusted_proxies,
    };
    let client_ip = client.resolve(&parts.headers);
    let fields = p.upstream_fields(parts, conn, client, true);
    let mut headers = fields.to_map();
    let client_host = fields.host().cloned();
    if kind == Tunnel::H2WebSocket {
        // The HTTP/1.1 handshake the HTTP/2 client's CONNECT stands for;
        // Sec-WebSocket-Protocol and -Extensions pass through as sent.
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers
            .entry(header::SEC_WEBSOCKET_VERSION)
            .or_insert(HeaderValue::from_static("13"));
        headers.insert(header::SEC_WEBSOCKET_KEY, websocket_key());
    }
    let pq = super::path_and_query(parts, path);
    let key = p.hash_key(parts, client_ip);
    let sticky = p.sticky_choice(&parts.headers);
    let mut body = Some(body);
    let mut tried = Vec::new();
    let mut attempt = 0;
    // As in `Proxy::serve`: the failure that moved on, if none is left.
    let mut last: Option<(usize, ProxyError)> = None;
    loop {
        let Some(idx) = p.pick(conn.worker, key, sticky, &tried) else {
            return match last {
                Some((i, e)) => p.fail(parts, Some(&p.ups[i]), e),
                None => p.fail(parts, None, ProxyError::NoneAvailable),
            };
        };
        let up = p.ups[idx].clone();
        let permit = match p.admit(&up).await {
            Ok(x) => x,
            Err(e) => return p.fail(parts, Some(&up), e),
        };
        let active = ActiveGuard::new(up.clone());
        let sender = match p.sender(idx, conn, true).await {
            Ok(Sender::H2(_)) => {
                let e = ProxyError::Connect(std::io::Error::other(
                    "an HTTP/2 upstream cannot take an HTTP/1.1 upgrade",
                ));
                return p.fail(parts, Some(&up), e);
            }
            Ok(Sender::Own(c)) => c,
            Err(e) => {
                let failed = Failed::connect(e);
                p.passive_failure(&up, &failed.error);
                tried.push(idx);
                if failed.may_retry(false, false, attempt, p.cfg.retries) {
                    attempt += 1;
                    last = Some((idx, failed.error));
                    continue;
                }
                return p.fail(parts, Some(&up), failed.error);
            }
        };
        let method = if kind == Tunnel::H2WebSocket {
            Method::GET
        } else {
            parts.method.clone()
        };
        let host = super::upstream_host(&p.cfg.host, client_host.as_ref(), &up);
        let body = body.take().unwrap_or_default();
        let exchange = exchange_own(sender, &method, &pq, host, &headers, body);
        let timeout = p.cfg.response_timeout;
        let exchange = match tokio::time::timeout(timeout, Box::pin(exchange)).await {
            Ok(r) => r,
            Err(_) => Err(ProxyError::ResponseTimeout(timeout)),
        };
        if exchange.is_ok() {
            p.passive_success(&up);
        }
        let (mut rp, upstream) = match exchange {
            Ok(Exchanged::Switched(rp, side)) => (rp, side),
            Ok(Exchanged::Answered(rp, from)) => {
                if kind == Tunnel::H2WebSocket && rp.status.is_success() {
                    // A 2xx to an HTTP/2 CONNECT opens the tunnel: an upstream
                    // that did not switch protocols must not look as if it had.
                    return p.fail(parts, Some(&up), ProxyError::NotSwitched(rp.status));
                }
                let done = super::Done {
                    local: p.local(conn.worker).clone(),
                    idx,
                    sender: None,
                    max_idle: 0,
                    _permit: permit,
                    _active: active,
                };
                return p.respond_from(rp, from, done, &up, parts.version, false);
            }
            Err(e) => {
                if !matches!(e, ProxyError::ResponseTimeout(_)) {
                    p.passive_failure(&up, &e);
                }
                return p.fail(parts, Some(&up), e);
            }
        };
        match kind {
            Tunnel::Upgrade => {
                forward::strip_hop_by_hop(&mut rp.headers, true);
                rp.headers
                    .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            }
            Tunnel::H2WebSocket => {
                // RFC 8441 5: a 200 on the stream; the accept token answered
                // weir's own key, not anything the client sent.
                forward::strip_hop_by_hop(&mut rp.headers, false);
                rp.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
                rp.status = StatusCode::OK;
            }
        }
        if p.cfg.via {
            forward::append_via(&mut rp.headers, super::via_for(parts.version));
        }
        let name = up.cfg.name.clone();
        let retired = p.retirement();
        tokio::spawn(async move {
            let _hold = (permit, active);
            let mut u = upstream;
            let mut c = match on_client.await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!("upgrade via {name} failed: {e}");
                    return;
                }
            };
            tokio::select! {
                r = tokio::io::copy_bidirectional(&mut c, &mut u) => {
                    if let Err(e) = r {
                        tracing::debug!("tunnel via {name} ended: {e}");
                    }
                }
                // A reload replaced the proxy, and its grace period is over.
                () = retired => tracing::debug!("tunnel via {name} closed: its proxy was replaced"),
            }
        });
        return Response::from_parts(rp, Body::empty());
    }
}

/// What the upstream answered to the Upgrade request.
enum Exchanged {
    /// 101: the upstream's end of the tunnel, with what came after the 101.
    Switched(http::response::Parts, Upgraded),
    /// Anything else: passed on as an answer, its connection then closed.
    Answered(http::response::Parts, FromUpstream),
}

/// The Upgrade request on one of weir's own connections: a 101 hands the
/// connection over (with any bytes the upstream sent past the 101's head).
async fn exchange_own(
    mut c: Conn,
    method: &Method,
    pq: &http::uri::PathAndQuery,
    host: &HeaderValue,
    headers: &http::HeaderMap,
    body: Body,
) -> Result<Exchanged, ProxyError> {
    let (req, chunked) = Encoded::streamed(
        RequestHead {
            method,
            target: pq.as_str(),
            host,
            fields: headers.iter().map(|(n, v)| (n, v.as_bytes())),
        },
        &body,
    );
    let mut upload = Uploading::new(body, chunked, Vec::new());
    let head = c
        .send_streamed(req, &mut upload, Expect::Upgrade)
        .await
        .map_err(|e| match e {
            StreamError::Body(e) => ProxyError::ClientBody(e),
            StreamError::Upstream { error, .. } => ProxyError::Client(error),
        })?;
    if head.parts.status == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Exchanged::Switched(head.parts, c.into_upgraded()));
    }
    Ok(Exchanged::Answered(
        head.parts,
        FromUpstream::Own {
            conn: c,
            framing: head.framing,
            keep_alive: false,
            hop_by_hop: head.hop_by_hop,
            upload: (!upload.is_sent()).then(|| Box::new(upload)),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_keys_are_16_random_bytes_in_base64() {
        let (a, b) = (websocket_key(), websocket_key());
        assert_ne!(a, b);
        for k in [a, b] {
            let k = k.to_str().unwrap();
            assert_eq!(k.len(), 24, "{k}");
            assert!(k.ends_with("==") && !k[..22].contains('='), "{k}");
        }
    }
}
