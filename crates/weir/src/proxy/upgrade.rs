//! HTTP/1.1 Upgrade (WebSocket and others) through the proxy: the request
//! goes to an upstream on a fresh connection with `Upgrade` kept; when the
//! upstream answers 101 both sides are switched to raw byte tunnels and
//! copied into each other until one closes.
//!
//! Never pools an upgraded connection; never reads or changes the tunnelled
//! bytes; never retries once the request was sent.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::forward::{self, ClientAddr};
use super::{ActiveGuard, Failure, Proxy, ProxyError, may_retry};
use crate::body::Body;
use crate::site::ConnInfo;

/// Whether the client asks to switch protocols (HTTP/1.1 `Connection: upgrade`).
pub fn is_upgrade(parts: &http::request::Parts) -> bool {
    parts.version == Version::HTTP_11
        && parts.headers.contains_key(header::UPGRADE)
        && parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

pub async fn serve(
    p: &Proxy,
    parts: &mut http::request::Parts,
    body: Body,
    conn: &ConnInfo,
    path: Option<&str>,
) -> Response<Body> {
    let Some(on_client) = parts.extensions.remove::<OnUpgrade>() else {
        // The protocol layer cannot hand over the connection (e.g. HTTP/2).
        return crate::site::error(StatusCode::BAD_REQUEST);
    };
    let client = ClientAddr {
        peer: conn.peer.ip(),
        trusted: &p.cfg.trusted_proxies,
    };
    let client_ip = client.resolve(&parts.headers);
    let headers = p.upstream_headers(parts, conn, client, true);
    let pq = super::path_and_query(parts, path);
    let key = p.hash_key(parts, client_ip);
    let sticky = p.sticky_choice(&parts.headers);
    let mut body = Some(body);
    let mut tried = Vec::new();
    let mut attempt = 0;
    loop {
        let Some(idx) = p.pick(key, sticky, &tried) else {
            return p.fail(parts, None, ProxyError::NoneAvailable);
        };
        let up = p.ups[idx].clone();
        let permit = match p.admit(&up).await {
            Ok(x) => x,
            Err(e) => return p.fail(parts, Some(&up), e),
        };
        let active = ActiveGuard::new(up.clone());
        let tx = match p.sender(idx, conn, true).await {
            Ok(super::pool::Sender::H1(tx)) => tx,
            Ok(super::pool::Sender::H2(_)) => {
                let e = ProxyError::Connect(std::io::Error::other(
                    "an HTTP/2 upstream cannot take an HTTP/1.1 upgrade",
                ));
                return p.fail(parts, Some(&up), e);
            }
            Err(e) => {
                p.passive_failure(&up, &e);
                if may_retry(Failure::Connect, false, false, attempt, p.cfg.retries) {
                    tried.push(idx);
                    attempt += 1;
                    continue;
                }
                return p.fail(parts, Some(&up), e);
            }
        };
        let req = super::build_request(
            parts,
            &pq,
            &headers,
            &up,
            &p.cfg.host,
            false,
            body.take().unwrap_or_default(),
        );
        let mut tx = tx;
        let mut resp =
            match tokio::time::timeout(p.cfg.response_timeout, tx.send_request(req)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    let e = ProxyError::Upstream(e);
                    p.passive_failure(&up, &e);
                    return p.fail(parts, Some(&up), e);
                }
                Err(_) => {
                    return p.fail(
                        parts,
                        Some(&up),
                        ProxyError::ResponseTimeout(p.cfg.response_timeout),
                    );
                }
            };
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            let done = super::Done {
                key: (p.id, idx),
                sender: None,
                max_idle: 0,
                _permit: permit,
                _active: active,
            };
            return p.respond(resp, done, &up, parts.version, false);
        }
        let on_upstream = hyper::upgrade::on(&mut resp);
        let (mut rp, _) = resp.into_parts();
        forward::strip_hop_by_hop(&mut rp.headers, true);
        if p.cfg.via {
            forward::append_via(&mut rp.headers, super::via_for(parts.version));
        }
        rp.headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        let name = up.cfg.name.clone();
        tokio::spawn(async move {
            let _hold = (permit, active, tx);
            let (c, u) = match tokio::join!(on_client, on_upstream) {
                (Ok(c), Ok(u)) => (c, u),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!("upgrade via {name} failed: {e}");
                    return;
                }
            };
            let mut c = TokioIo::new(c);
            let mut u = TokioIo::new(u);
            if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                tracing::debug!("tunnel via {name} ended: {e}");
            }
        });
        return Response::from_parts(rp, Body::empty());
    }
}
