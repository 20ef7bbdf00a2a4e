//! The HTTP/2 client: `--h2`, with `--streams` concurrent streams per
//! connection, over TLS (ALPN `h2`) or cleartext with prior knowledge (h2c).
//!
//! Built on the `h2` crate directly (no hyper client pool in the way). Each
//! stream runs its own closed or open loop on the shared connection.

use std::time::Instant;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{
    Conn, ErrorKind, Schedule, ThreadCtx, classify_io, clone_request, connect, stream_requests,
    stream_schedules, until_end,
};

/// One HTTP/2 connection with its streams, reconnecting until the run ends.
pub async fn connection(ctx: &ThreadCtx, index: usize, total: usize) {
    let mut scheds = stream_schedules(ctx, index, total);
    while !ctx.stopped(Instant::now()) {
        // Still opening at the end: every stream's first request waited.
        let Some(conn) = until_end(ctx, scheds.len(), connect(ctx)).await else {
            continue;
        };
        match conn {
            Conn::Plain(s) => run_conn(ctx, s, &mut scheds).await,
            Conn::Tls(s) => run_conn(ctx, *s, &mut scheds).await,
        }
    }
}

fn h2_kind(e: &h2::Error) -> ErrorKind {
    if let Some(io) = e.get_io() {
        return classify_io(io, ErrorKind::Reset);
    }
    if e.is_reset() || e.is_go_away() {
        return ErrorKind::Reset;
    }
    ErrorKind::Protocol
}

pub(crate) fn build_request(ctx: &ThreadCtx) -> Option<http::Request<()>> {
    let plan = &ctx.plan;
    let authority = plan
        .cfg
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| plan.target.authority.clone());
    let scheme = if plan.target.tls { "https" } else { "http" };
    let mut b = http::Request::builder()
        .method(plan.cfg.method.as_str())
        .uri(format!("{scheme}://{authority}{}", plan.target.path));
    for (k, v) in &plan.cfg.headers {
        if !k.eq_ignore_ascii_case("host") && !k.eq_ignore_ascii_case("connection") {
            b = b.header(k.as_str(), v.as_str());
        }
    }
    b.body(()).ok()
}

async fn run_conn<S>(ctx: &ThreadCtx, io: S, scheds: &mut [Schedule])
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let (client, conn) = match h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .handshake::<_, Bytes>(io)
        .await
    {
        Ok(x) => x,
        Err(e) => {
            ctx.error(h2_kind(&e), started);
            return;
        }
    };
    let Some(request) = build_request(ctx) else {
        ctx.error(ErrorKind::Protocol, started);
        return;
    };
    let body = Bytes::from(ctx.plan.cfg.body.clone());
    let streams = futures_util::future::join_all(
        scheds
            .iter_mut()
            .map(|sched| stream_loop(ctx, client.clone(), &request, &body, sched)),
    );
    tokio::select! {
        res = conn => {
            if let Err(e) = res {
                ctx.error(h2_kind(&e), Instant::now());
            }
        }
        _ = streams => {}
    }
}

/// Sends requests on one stream slot until the run ends or the connection
/// fails (every h2 error and timeout ends the connection).
async fn stream_loop(
    ctx: &ThreadCtx,
    client: h2::client::SendRequest<Bytes>,
    request: &http::Request<()>,
    body: &Bytes,
    sched: &mut Schedule,
) {
    let exchange = || {
        let client = client.clone();
        async move {
            let mut client = client.ready().await?;
            let (resp, mut send) = client.send_request(clone_request(request), body.is_empty())?;
            if !body.is_empty() {
                send.send_data(body.clone(), true)?;
            }
            let resp = resp.await?;
            let status = resp.status().as_u16();
            let mut recv = resp.into_body();
            let mut bytes = 0u64;
            while let Some(chunk) = recv.data().await {
                let chunk = chunk?;
                bytes += chunk.len() as u64;
                let _ = recv.flow_control().release_capacity(chunk.len());
            }
            Ok::<_, h2::Error>((status, bytes))
        }
    };
    stream_requests(ctx, sched, exchange, |e| (h2_kind(e), true), true).await;
}
