//! The proxy tests' side: small upstream servers (hyper, WebSocket, raw
//! scripted bytes) that record what they see, and h2c/raw clients. These
//! tests start weir with [`Weir::start`], which fills in `{PORT}` and `{DIR}`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

pub use crate::process::Weir;

pub type RespBody = BoxBody<Bytes, std::io::Error>;

/// One request as an upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: http::HeaderMap,
    pub body_len: usize,
    /// The request body's trailers, when it had some.
    pub trailers: Option<http::HeaderMap>,
}

/// A test upstream: answers with its name, records requests, counts connections.
pub struct Upstream {
    pub name: String,
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub conns: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    conn_tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub async fn start(name: &str) -> Upstream {
        Self::start_on(name, "127.0.0.1:0").await
    }

    pub async fn start_on(name: &str, addr: &str) -> Upstream {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(AtomicUsize::new(0));
        let (s2, c2, n2) = (seen.clone(), conns.clone(), name.to_string());
        let conn_tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let t2 = conn_tasks.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                c2.fetch_add(1, Ordering::SeqCst);
                let (seen, name) = (s2.clone(), n2.clone());
                let h = tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (seen, name) = (seen.clone(), name.clone());
                        async move { Ok::<_, Infallible>(answer(req, &name, &seen).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
                t2.lock().unwrap().push(h.abort_handle());
            }
        });
        Upstream {
            name: name.into(),
            addr,
            seen,
            conns,
            task,
            conn_tasks,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Stops accepting and closes everything (a crashed upstream).
    pub fn kill(&self) {
        self.task.abort();
        for t in self.conn_tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// A server on a fresh loopback port: every accepted connection is handed to
/// `conn` on a task of its own. Stops accepting when the handle is aborted.
pub async fn spawn_server<F, Fut>(conn: F) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let t = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(conn(s));
        }
    });
    (addr, t)
}

/// Serves one connection with [`answer`], over HTTP/2 or HTTP/1.1.
pub async fn serve_hyper<IO>(io: IO, h2: bool, name: &'static str, seen: Arc<Mutex<Vec<Seen>>>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let svc = hyper::service::service_fn(move |req| {
        let seen = seen.clone();
        async move { Ok::<_, Infallible>(answer(req, name, &seen).await) }
    });
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, svc)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, svc)
            .await;
    }
}

/// A WebSocket echo server (text and binary messages come back as sent).
pub async fn ws_echo() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use futures_util::{SinkExt, StreamExt};
    spawn_server(|s| async move {
        let Ok(mut ws) = tokio_tungstenite::accept_async(s).await else {
            return;
        };
        while let Some(Ok(m)) = ws.next().await {
            if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                return;
            }
        }
    })
    .await
}

fn full(b: impl Into<Bytes>) -> RespBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

pub async fn answer(
    req: Request<Incoming>,
    name: &str,
    seen: &Mutex<Vec<Seen>>,
) -> Response<RespBody> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    // Echo and count bodies without holding them.
    if path == "/echo" {
        seen.lock().unwrap().push(Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body_len: 0,
            trailers: None,
        });
        let body = body.map_err(std::io::Error::other).boxed();
        return Response::new(body);
    }
    if path == "/count" {
        let mut n = 0usize;
        let mut body = body;
        while let Some(f) = body.frame().await {
            match f {
                Ok(f) => n += f.data_ref().map_or(0, |d| d.len()),
                Err(_) => break,
            }
        }
        seen.lock().unwrap().push(Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body_len: n,
            trailers: None,
        });
        return Response::new(full(n.to_string()));
    }
    if path == "/reject" {
        // A final answer without reading the body (it may be huge).
        seen.lock().unwrap().push(Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body_len: 0,
            trailers: None,
        });
        let mut r = Response::new(full("rejected by upstream\n"));
        *r.status_mut() = http::StatusCode::PAYLOAD_TOO_LARGE;
        return r;
    }
    let (body_len, trailers) = match body.collect().await {
        Ok(c) => {
            let t = c.trailers().cloned();
            (c.to_bytes().len(), t)
        }
        Err(_) => (0, None),
    };
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers.clone(),
        body_len,
        trailers: trailers.clone(),
    });
    if path == "/trailers" {
        // Says what arrived, then answers with a trailer of its own.
        let req_sum = trailers
            .as_ref()
            .and_then(|t| t.get("x-req-sum"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_string();
        let mut t = http::HeaderMap::new();
        t.insert("x-checksum", "c0ffee".parse().unwrap());
        let frames = vec![
            Ok::<_, std::io::Error>(Frame::data(Bytes::from(format!(
                "got {body_len} bytes; x-req-sum={req_sum}\n"
            )))),
            Ok(Frame::trailers(t)),
        ];
        let mut r = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
        r.headers_mut()
            .insert("trailer", "x-checksum".parse().unwrap());
        return r;
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
    }
    if let Some(n) = path.strip_prefix("/download/") {
        // A generated body of n MiB in 64 KiB chunks.
        let mib: usize = n.parse().unwrap_or(1);
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let stream = futures_util::stream::iter(
            (0..mib * 16).map(move |_| Ok::<_, std::io::Error>(Frame::data(chunk.clone()))),
        );
        let mut r = Response::new(StreamBody::new(stream).boxed());
        r.headers_mut()
            .insert("content-length", (mib * 1024 * 1024).into());
        return r;
    }
    if path == "/sse" {
        let stream = futures_util::stream::unfold(0u32, |i| async move {
            if i >= 3 {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Some((
                Ok::<_, std::io::Error>(Frame::data(Bytes::from(format!("data: {i}\n\n")))),
                i + 1,
            ))
        });
        let mut r = Response::new(StreamBody::new(stream).boxed());
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return r;
    }
    if path == "/hop" {
        let mut r = Response::new(full(name.to_string()));
        r.headers_mut()
            .insert("connection", "x-hop".parse().unwrap());
        r.headers_mut().insert("x-hop", "secret".parse().unwrap());
        r.headers_mut()
            .insert("keep-alive", "timeout=5".parse().unwrap());
        return r;
    }
    if let Some(rest) = path.strip_prefix("/to-self/") {
        // A redirect naming the upstream itself, by the Host it was sent:
        // what a proxy's Location rewriting (ProxyPassReverse) fixes.
        let host = parts
            .headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let mut r = Response::new(full(name.to_string()));
        *r.status_mut() = http::StatusCode::FOUND;
        r.headers_mut()
            .insert("location", format!("http://{host}/{rest}").parse().unwrap());
        return r;
    }
    if let Some(v) = path.strip_prefix("/field/") {
        // A response field that only this request's response carries.
        let mut r = Response::new(full(name.to_string()));
        r.headers_mut().insert("x-field", v.parse().unwrap());
        return r;
    }
    if path == "/health" && name.contains("sick") {
        let mut r = Response::new(full("sick"));
        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        return r;
    }
    let mut r = Response::new(full(name.to_string()));
    r.headers_mut().insert("x-upstream", name.parse().unwrap());
    r
}

/// Sends raw bytes to weir and reads until weir closes the connection
/// (at most 3 s: a connection left open fails the test).
pub async fn raw(w: &Weir, req: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(w.addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out))
        .await
        .expect("weir kept the connection open")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/2 client with prior knowledge (h2c) connected to `addr`.
pub async fn h2c(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (tx, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tx.ready().await.unwrap()
}

/// Reads an HTTP/2 response body to its end, giving the flow-control
/// window back as it goes; returns the bytes and the trailers.
pub async fn h2_read(mut body: h2::RecvStream) -> (Vec<u8>, Option<http::HeaderMap>) {
    let mut out = Vec::new();
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        let _ = body.flow_control().release_capacity(d.len());
        out.extend_from_slice(&d);
    }
    let t = body.trailers().await.unwrap();
    (out, t)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// GET `url` with extra request fields: the status, fields and body.
pub async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, bytes::Bytes) {
    let mut r = client().get(url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    (s, h, r.bytes().await.unwrap())
}

/// A raw upstream (see [`scripted_upstream`]).
pub struct Scripted {
    pub addr: SocketAddr,
    /// Connections accepted.
    pub conns: Arc<AtomicUsize>,
    /// Every request head received, in order, as sent.
    pub heads: Arc<Mutex<Vec<String>>>,
}

/// The response `path` names on a [`scripted_upstream`], and whether the
/// connection closes after it.
fn scripted_response(path: &str) -> (Vec<u8>, bool) {
    let (resp, close): (&[u8], bool) = match path {
        "/chunked" => (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Sum: 9\r\n\r\n", false),
        "/trailer-twice" => (b"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\nX-Sum: 2\r\n\r\n", false),
        "/early" => (b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", false),
        "/until-close" => (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall until the close", true),
        "/http10" => (b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nold ok", true),
        "/http10-keep" => (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\nkept", false),
        "/both" => (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true),
        "/bad-length" => (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nab", true),
        "/same-length" => (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nab", false),
        "/nothing" => (b"", true),
        "/reason" => (b"HTTP/1.1 200 Quite Fine\r\nContent-Length: 2\r\n\r\nok", false),
        "/no-reason" => (b"HTTP/1.1 404 \r\nContent-Length: 4\r\n\r\ngone", false),
        "/hop" => (b"HTTP/1.1 200 OK\r\nConnection: x-private, keep-alive\r\nX-Private: secret\r\nKeep-Alive: timeout=5\r\nContent-Length: 3\r\n\r\nhop", false),
        "/close" => (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose", true),
        "/cut" => (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", true),
        "/server-via" => (b"HTTP/1.1 200 OK\r\nServer: upstream/1.0\r\nVia: 1.0 cache-a\r\nContent-Type: text/plain\r\nvia: 1.1 cache-b\r\nContent-Length: 2\r\n\r\nsv", false),
        "/not-modified" => (b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 10\r\nTrailer: X-Sum\r\n\r\n", false),
        "/no-content" => (b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nTrailer: X-Sum\r\n\r\n", false),
        "/zero" => (b"HTTP/1.1 200 OK\r\nX-Before: 1\r\nContent-Length: 0\r\nX-After: 2\r\n\r\n", false),
        "/alt-svc" => (b"HTTP/1.1 200 OK\r\nAlt-Svc: h2=\":9\"; ma=1\r\nalt-svc: clear\r\nX-Mid: 1\r\nContent-Length: 2\r\n\r\nas", false),
        "/mixed" => (b"HTTP/1.1 201 Created\r\nX-Mixed-Case: Yes\r\nCONTENT-length: 3\r\nProxy-Authenticate: Basic\r\nTE: gzip\r\n\r\nabc", false),
        "/big" => {
            let body = vec![b'b'; 100_000];
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            r.extend_from_slice(&body);
            return (r, false);
        }
        _ => (b"HTTP/1.1 204 No Content\r\n\r\n", false),
    };
    (resp.to_vec(), close)
}

/// A raw upstream that answers each request head with the canned bytes its
/// path names ([`scripted_response`]), closes after the ones that must
/// close, and keeps every head it was sent.
pub async fn scripted_upstream() -> Scripted {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (c2, h2) = (conns.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            c2.fetch_add(1, Ordering::SeqCst);
            let heads = h2.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    heads.lock().unwrap().push(head);
                    let (resp, close) = scripted_response(&path);
                    if s.write_all(&resp).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    Scripted { addr, conns, heads }
}
