//! weir's admin API, on an address of its own (`[admin] listen`, default
//! `127.0.0.1:2019`, or a Unix socket): reload the config, read it, take
//! upstreams in and out of rotation, list certificates, scrape metrics and
//! watch the live status page.
//!
//! It runs on a thread and runtime of its own, so a slow scrape or a reload
//! never takes time from a worker; every request passes [`guard::Guard`]
//! first. It never serves the public ports and never reads a request path
//! into a metric label.

mod guard;
pub mod metrics;
mod routes;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use weir_config::admin::{AdminConfig, AdminListen};
use weir_server::Server;
use weir_server::upgrade::Inherited;

/// Why the admin API could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin API: cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("admin API: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

/// The admin API's listening socket, bound before anything is served.
pub enum Socket {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

impl Socket {
    /// Binds the address `cfg` names (or takes it from the sockets handed
    /// over by an upgrade); `None` when it is off.
    pub fn bind(
        cfg: &AdminConfig,
        inherited: &mut Inherited,
    ) -> Result<Option<Socket>, AdminError> {
        match &cfg.listen {
            AdminListen::Off => Ok(None),
            AdminListen::Tcp(a) => {
                if let Some(l) = inherited.tcp.remove(a).and_then(|mut v| v.pop()) {
                    return Ok(Some(Socket::Tcp(l)));
                }
                let l = std::net::TcpListener::bind(a).map_err(|source| AdminError::Bind {
                    addr: a.to_string(),
                    source,
                })?;
                Ok(Some(Socket::Tcp(l)))
            }
            AdminListen::Unix(p) => {
                if let Some(l) = inherited.unix.remove(p) {
                    return Ok(Some(Socket::Unix(l, p.clone())));
                }
                // A socket file left by a process that is gone.
                if std::os::unix::net::UnixStream::connect(p).is_err() {
                    let _ = std::fs::remove_file(p);
                }
                let l = std::os::unix::net::UnixListener::bind(p).map_err(|source| {
                    AdminError::Bind {
                        addr: p.display().to_string(),
                        source,
                    }
                })?;
                Ok(Some(Socket::Unix(l, p.clone())))
            }
        }
    }

    /// A duplicate of the socket, for a binary upgrade to hand over.
    pub fn dup(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        match self {
            Socket::Tcp(l) => Ok(l.try_clone()?.into()),
            Socket::Unix(l, _) => Ok(l.try_clone()?.into()),
        }
    }

    /// What it listens on, for the log and the `Host` check.
    pub fn describe(&self) -> String {
        match self {
            Socket::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "?".into(), |a| format!("http://{a}")),
            Socket::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }

    fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Socket::Tcp(l) => l.local_addr().ok(),
            Socket::Unix(..) => None,
        }
    }
}

/// What every admin request shares.
pub(crate) struct Ctx {
    server: Arc<Server>,
    guard: guard::Guard,
}

/// Serves the admin API on `sock` for `server` on a thread of its own,
/// until the process ends.
pub fn start(server: Arc<Server>, sock: Socket, token: Option<String>) -> Result<(), AdminError> {
    match sock.dup() {
        Ok(fd) => server.keep_admin_socket(fd),
        Err(e) => tracing::warn!("admin API: an upgrade will not take its socket over: {e}"),
    }
    let ctx = Arc::new(Ctx {
        guard: guard::Guard::new(sock.tcp_addr(), token),
        server,
    });
    tracing::info!("admin API on {}", sock.describe());
    weir_http::background::spawn("weir-admin".into(), "admin API", move || serve(sock, ctx))
        .map_err(AdminError::Thread)?;
    Ok(())
}

async fn serve(sock: Socket, ctx: Arc<Ctx>) {
    let ready = match sock {
        Socket::Tcp(l) => l
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(l))
            .map(Listening::Tcp),
        Socket::Unix(l, _) => l
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixListener::from_std(l))
            .map(Listening::Unix),
    };
    let l = match ready {
        Ok(l) => l,
        Err(e) => return tracing::error!("admin API: {e}"),
    };
    loop {
        match l.accept(&ctx).await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!("admin API accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

enum Listening {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listening {
    /// Accepts one connection and serves it on a task of its own.
    async fn accept(&self, ctx: &Arc<Ctx>) -> std::io::Result<()> {
        match self {
            Listening::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                let local = s.local_addr()?;
                tokio::spawn(connection(s, peer, local, ctx.clone()));
            }
            Listening::Unix(l) => {
                let (s, _) = l.accept().await?;
                // A Unix socket's peer has no address; the log shows this one.
                let none = SocketAddr::from(([0, 0, 0, 0], 0));
                tokio::spawn(connection(s, none, none, ctx.clone()));
            }
        }
        Ok(())
    }
}

/// Serves one connection with weir's own HTTP/1 server.
async fn connection<T>(io: T, peer: SocketAddr, local: SocketAddr, ctx: Arc<Ctx>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let info = weir_http::conn::ConnInfo {
        peer,
        local,
        tls: false,
        tls_info: None,
        worker: Default::default(),
    };
    weir_server::serve_one(io, info, |req| {
        let ctx = ctx.clone();
        async move { routes::handle(req, &ctx).await }
    })
    .await;
}

/// One upstream of one proxy, with where it is configured.
pub(crate) struct UpstreamRef {
    pub site: String,
    pub route: String,
    pub proxy: Arc<weir_proxy::Proxy>,
    pub idx: usize,
    pub up: Arc<weir_proxy::Upstream>,
    /// The app whose instance this upstream is.
    pub app: Option<Arc<weir_apps::App>>,
}

impl UpstreamRef {
    pub fn labels(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("site", self.site.as_str()),
            ("route", self.route.as_str()),
            ("upstream", self.up.cfg.name.as_str()),
        ]
    }

    pub fn healthy(&self) -> bool {
        self.up.health.is_up(std::time::Instant::now())
    }

    pub fn in_rotation(&self) -> bool {
        self.healthy() && self.up.admin_state() == weir_proxy::AdminState::Ready
    }
}

/// Every upstream of every site being served, in config order.
pub(crate) fn upstreams(server: &Server) -> Vec<UpstreamRef> {
    let mut out = Vec::new();
    for site in server.sites() {
        for (route, proxy) in site.proxies() {
            let app = site
                .app()
                .filter(|a| Arc::ptr_eq(&a.proxy, &proxy))
                .cloned();
            for (idx, up) in proxy.upstreams().iter().enumerate() {
                out.push(UpstreamRef {
                    app: app.clone(),
                    site: site.cfg.name.clone(),
                    route: route.clone(),
                    proxy: proxy.clone(),
                    idx,
                    up: up.clone(),
                });
            }
        }
    }
    out
}

/// A client for the admin API, for the `weir reload` command.
pub mod client {
    use bytes::Bytes;
    use http::header::{self, HeaderMap, HeaderValue};

    use weir_config::admin::AdminListen;
    use weir_proxy::h1_client::one_shot;

    /// The largest answer read (a reload's report lists every site).
    const MAX_ANSWER: usize = 16 * 1024 * 1024;

    /// Sends `POST path` with a JSON `body` to the admin API at `at`;
    /// returns the status and the answer's text.
    pub fn post(
        at: &AdminListen,
        path: &str,
        body: String,
        token: Option<&str>,
    ) -> Result<(http::StatusCode, String), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let r = match at {
                AdminListen::Off => return Err("the admin API is off".to_string()),
                AdminListen::Tcp(a) => {
                    let s = tokio::net::TcpStream::connect(a)
                        .await
                        .map_err(|e| format!("cannot reach the admin API at {a}: {e}"))?;
                    let host = HeaderValue::try_from(a.to_string())
                        .expect("an address is a valid field value");
                    send(s, host, path, body, token).await
                }
                AdminListen::Unix(p) => {
                    let s = tokio::net::UnixStream::connect(p).await.map_err(|e| {
                        format!("cannot reach the admin API at unix:{}: {e}", p.display())
                    })?;
                    let host = HeaderValue::from_static("localhost");
                    send(s, host, path, body, token).await
                }
            };
            r.map_err(|e| format!("admin API: {e}"))
        })
    }

    async fn send(
        io: impl weir_proxy::h1_client::Io,
        host: HeaderValue,
        path: &str,
        body: String,
        token: Option<&str>,
    ) -> Result<(http::StatusCode, String), one_shot::BodyReadError> {
        let mut fields = HeaderMap::new();
        fields.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        fields.insert(header::CONNECTION, HeaderValue::from_static("close"));
        if let Some(t) = token
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}"))
        {
            fields.insert(header::AUTHORIZATION, v);
        }
        let body = Bytes::from(body);
        let (head, c) =
            one_shot::send(io, &http::Method::POST, path, &host, &fields, Some(&body)).await?;
        let bytes = one_shot::read_body(c, head.framing, MAX_ANSWER).await?;
        Ok((
            head.parts.status,
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
    }
}
