//! The HTTP/3 client: `--http3`, with `--streams` concurrent requests per
//! QUIC connection (TLS 1.3 with ALPN `h3`, always encrypted).
//!
//! Built on `quinn` + `h3` (the crates weir's server uses). Each connection
//! has its own UDP socket (a quinn client endpoint, kept across reconnects),
//! so connections spread over the server's sockets like TCP ones do. Each
//! stream slot runs its own closed or open loop on the shared connection.
//!
//! QUIC folds the transport and TLS handshakes into one: its duration is
//! recorded both as the connect time and as the TLS handshake time.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use super::{
    ErrorKind, Schedule, ThreadCtx, clone_request, stream_requests, stream_schedules, until_end,
};

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One QUIC connection with its streams, reconnecting until the run ends.
pub async fn connection(ctx: &ThreadCtx, index: usize, total: usize) {
    let mut scheds = stream_schedules(ctx, index, total);
    let bind: SocketAddr = if ctx.plan.target.addr.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let endpoint = match quinn::Endpoint::client(bind) {
        Ok(e) => e,
        Err(_) => {
            ctx.error(ErrorKind::Connect, Instant::now());
            return;
        }
    };
    while !ctx.stopped(Instant::now()) {
        // Still opening at the end: every stream's first request waited.
        let Some(conn) = until_end(ctx, scheds.len(), connect(ctx, &endpoint)).await else {
            continue;
        };
        run_conn(ctx, conn.clone(), &mut scheds).await;
        conn.close(0u32.into(), b"done");
    }
    endpoint.close(0u32.into(), b"done");
}

/// Opens a QUIC connection, recording the handshake time or the error.
async fn connect(ctx: &ThreadCtx, endpoint: &quinn::Endpoint) -> Option<quinn::Connection> {
    let plan = &ctx.plan;
    let Some((config, sni)) = &plan.quic else {
        ctx.error(ErrorKind::Protocol, Instant::now());
        return None;
    };
    let t0 = Instant::now();
    let failed = |kind: ErrorKind| async move {
        ctx.error(kind, t0);
        if kind == ErrorKind::Connect {
            // Avoid a hot loop of unanswered handshakes.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None::<quinn::Connection>
    };
    let connecting = match endpoint.connect_with(config.clone(), plan.target.addr, sni) {
        Ok(c) => c,
        Err(_) => return failed(ErrorKind::Connect).await,
    };
    match tokio::time::timeout(plan.cfg.timeout, connecting).await {
        Ok(Ok(conn)) => {
            let us = t0.elapsed().as_micros().max(1) as u64;
            let mut st = ctx.stats.borrow_mut();
            st.connections += 1;
            st.connect.saturating_record(us);
            st.tls.saturating_record(us);
            Some(conn)
        }
        Ok(Err(e)) => {
            let kind = match quic_kind(&e) {
                // No answer at all within the idle timeout: nobody listens.
                ErrorKind::Timeout => ErrorKind::Connect,
                k => k,
            };
            failed(kind).await
        }
        Err(_) => failed(ErrorKind::Connect).await,
    }
}

fn is_crypto(code: quinn::TransportErrorCode) -> bool {
    (0x100..0x200).contains(&u64::from(code))
}

/// Classifies a QUIC connection error.
fn quic_kind(e: &quinn::ConnectionError) -> ErrorKind {
    use quinn::ConnectionError as E;
    match e {
        E::TransportError(t) if is_crypto(t.code) => ErrorKind::Tls,
        E::ConnectionClosed(c) if is_crypto(c.error_code) => ErrorKind::Tls,
        E::TransportError(_) | E::VersionMismatch => ErrorKind::Protocol,
        E::ConnectionClosed(_) | E::ApplicationClosed(_) | E::Reset | E::LocallyClosed => {
            ErrorKind::Reset
        }
        E::TimedOut => ErrorKind::Timeout,
        E::CidsExhausted => ErrorKind::Connect,
    }
}

/// Classifies an HTTP/3 connection error.
fn conn_kind(e: &h3::error::ConnectionError) -> ErrorKind {
    use h3::error::ConnectionError as C;
    use h3::quic::ConnectionErrorIncoming as I;
    match e {
        C::Timeout { .. } => ErrorKind::Timeout,
        C::Remote {
            0: I::ApplicationClose { .. },
            ..
        } => ErrorKind::Reset,
        C::Remote { 0: I::Timeout, .. } => ErrorKind::Timeout,
        C::Remote {
            0: I::Undefined(inner),
            ..
        } => inner
            .downcast_ref::<quinn::ConnectionError>()
            .map_or(ErrorKind::Protocol, quic_kind),
        C::Local {
            error: h3::error::LocalError::Closing { .. },
            ..
        } => ErrorKind::Reset,
        _ => ErrorKind::Protocol,
    }
}

/// Classifies an HTTP/3 stream error; `true` if the connection is gone.
fn stream_kind(e: &h3::error::StreamError) -> (ErrorKind, bool) {
    use h3::error::StreamError as S;
    match e {
        S::ConnectionError { 0: c, .. } => (conn_kind(c), true),
        S::RemoteTerminate { .. } => (ErrorKind::Reset, false),
        S::RemoteClosing { .. } => (ErrorKind::Reset, true),
        S::Undefined { 0: inner, .. } => match inner.downcast_ref::<quinn::ConnectionError>() {
            Some(q) => (quic_kind(q), true),
            None => (ErrorKind::Protocol, false),
        },
        _ => (ErrorKind::Protocol, false),
    }
}

async fn run_conn(ctx: &ThreadCtx, conn: quinn::Connection, scheds: &mut [Schedule]) {
    let started = Instant::now();
    let mut builder = h3::client::builder();
    builder.send_grease(false);
    let setup = builder.build::<_, _, Bytes>(h3_quinn::Connection::new(conn));
    let (mut driver, send) = match tokio::time::timeout(ctx.plan.cfg.timeout, setup).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            ctx.error(conn_kind(&e), started);
            return;
        }
        Err(_) => {
            ctx.error(ErrorKind::Timeout, started);
            return;
        }
    };
    let Some(request) = super::h2::build_request(ctx) else {
        ctx.error(ErrorKind::Protocol, started);
        return;
    };
    let body = Bytes::from(ctx.plan.cfg.body.clone());
    let streams = futures_util::future::join_all(
        scheds
            .iter_mut()
            .map(|sched| stream_loop(ctx, send.clone(), &request, &body, sched)),
    );
    drop(send);
    tokio::select! {
        e = std::future::poll_fn(|cx| driver.poll_close(cx)) => {
            if !e.is_h3_no_error() {
                ctx.error(conn_kind(&e), Instant::now());
            }
        }
        _ = streams => {}
    }
}

/// Sends requests on one stream slot until the run ends or the connection
/// fails. A timed-out stream is abandoned; the connection may still be fine.
/// Ends the request. A server that has answered may refuse the rest of the
/// request with H3_NO_ERROR (RFC 9114 §4.1.1) before the end arrives; the
/// response then stands and is read as usual.
async fn finish<S, B>(
    stream: &mut h3::client::RequestStream<S, B>,
) -> Result<(), h3::error::StreamError>
where
    S: h3::quic::SendStream<B>,
    B: bytes::Buf,
{
    match stream.finish().await {
        Err(h3::error::StreamError::RemoteTerminate { code, .. })
            if code == h3::error::Code::H3_NO_ERROR =>
        {
            Ok(())
        }
        r => r,
    }
}

async fn stream_loop(
    ctx: &ThreadCtx,
    send: SendRequest,
    request: &http::Request<()>,
    body: &Bytes,
    sched: &mut Schedule,
) {
    let exchange = || {
        let mut send = send.clone();
        async move {
            let mut stream = send.send_request(clone_request(request)).await?;
            if !body.is_empty() {
                stream.send_data(body.clone()).await?;
            }
            finish(&mut stream).await?;
            let resp = stream.recv_response().await?;
            let status = resp.status().as_u16();
            let mut bytes = 0u64;
            while let Some(chunk) = stream.recv_data().await? {
                bytes += chunk.remaining() as u64;
            }
            Ok::<_, h3::error::StreamError>((status, bytes))
        }
    };
    stream_requests(ctx, sched, exchange, stream_kind, false).await;
}
