//! The TLS, local-CA, ACME and HTTP/3 tests' side: real TLS, HTTP/1.1,
//! HTTP/2 and HTTP/3 clients whose responses reduce to one comparable
//! [`Seen`]. These tests start weir with [`Weir::start_debug`], which keeps
//! its debug log.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

pub use crate::process::Weir;

pub fn install_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

pub fn roots_from_pem(pem: &[u8]) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        roots.add(c.unwrap()).unwrap();
    }
    roots
}

pub fn client_config(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    c
}

/// A verified TLS handshake with `sni` at `addr`; the server's chain.
pub async fn handshake(
    addr: SocketAddr,
    sni: &str,
    cfg: Arc<rustls::ClientConfig>,
) -> std::io::Result<Vec<CertificateDer<'static>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let conn = tokio_rustls::TlsConnector::from(cfg);
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let tls = conn.connect(name, tcp).await?;
    Ok(tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.clone().into_owned())
        .collect())
}

/// The serial number of a DER certificate, as hex.
pub fn serial(der: &CertificateDer<'_>) -> String {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    c.raw_serial_as_string()
}

/// A response reduced to what must be the same across protocols.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

pub const COMPARED: &[&str] = &[
    "content-type",
    "content-length",
    "etag",
    "last-modified",
    "alt-svc",
    "server",
    "location",
    "content-encoding",
    "x-upstream",
];

fn pick_headers(h: &http::HeaderMap) -> Vec<(String, String)> {
    COMPARED
        .iter()
        .filter_map(|k| {
            h.get(*k)
                .map(|v| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        })
        .collect()
}

/// GET/HEAD over HTTP/1.1 or HTTP/2 with reqwest.
pub async fn reqwest_get(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    version: http::Version,
) -> Seen {
    let r = client
        .request(method.parse().unwrap(), url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), version, "{url}");
    let status = r.status().as_u16();
    let headers = pick_headers(r.headers());
    let body = r.bytes().await.unwrap();
    Seen {
        status,
        headers,
        body,
    }
}

/// Any request over HTTP/1.1 or HTTP/2 with reqwest; the compared view and
/// all headers.
pub async fn reqwest_send(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    version: http::Version,
    body: Option<Bytes>,
) -> (Seen, http::HeaderMap) {
    let mut req = client.request(method.parse().unwrap(), url);
    if let Some(b) = body {
        req = req.body(b);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.version(), version, "{url}");
    let status = r.status().as_u16();
    let all = r.headers().clone();
    let headers = pick_headers(&all);
    let body = r.bytes().await.unwrap();
    (
        Seen {
            status,
            headers,
            body,
        },
        all,
    )
}

pub fn reqwest_client(root_pem: &[u8], host: &str, addr: SocketAddr, h2: bool) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .resolve(host, addr)
        .redirect(reqwest::redirect::Policy::none());
    for c in CertificateDer::pem_slice_iter(root_pem) {
        let der = c.unwrap();
        b = b.add_root_certificate(reqwest::Certificate::from_der(&der).unwrap());
    }
    b = if h2 { b } else { b.http1_only() };
    b.build().unwrap()
}

/// An HTTP/3 client connection.
pub struct H3Client {
    pub endpoint: quinn::Endpoint,
    pub conn: quinn::Connection,
    pub send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    _driver: tokio::task::JoinHandle<()>,
}

impl H3Client {
    pub async fn connect(addr: SocketAddr, sni: &str, roots: rustls::RootCertStore) -> H3Client {
        let tls = client_config(roots, &[b"h3"]);
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn = endpoint.connect(addr, sni).unwrap().await.unwrap();
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .unwrap();
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        H3Client {
            endpoint,
            conn,
            send,
            _driver: driver,
        }
    }

    pub async fn request(&mut self, method: &str, url: &str) -> Seen {
        self.request_full(method, url, None).await.0
    }

    /// A request with an optional body; the compared view and all headers.
    pub async fn request_full(
        &mut self,
        method: &str,
        url: &str,
        body: Option<Bytes>,
    ) -> (Seen, http::HeaderMap) {
        let req = http::Request::builder()
            .method(method)
            .uri(url)
            .body(())
            .unwrap();
        let mut stream = self.send.send_request(req).await.unwrap();
        if let Some(b) = body {
            // In pieces, as a client streaming an upload would.
            for chunk in b.chunks(16 * 1024) {
                stream
                    .send_data(Bytes::copy_from_slice(chunk))
                    .await
                    .unwrap();
            }
        }
        finish(&mut stream).await;
        let resp = stream.recv_response().await.unwrap();
        let mut body = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.unwrap() {
            body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
        (
            Seen {
                status: resp.status().as_u16(),
                headers: pick_headers(resp.headers()),
                body: Bytes::from(body),
            },
            resp.headers().clone(),
        )
    }
}

/// Ends an HTTP/3 request. A server that has answered may refuse the rest
/// with H3_NO_ERROR (RFC 9114 §4.1.1), and the response then stands; any
/// other error fails the test.
pub async fn finish<S, B>(stream: &mut h3::client::RequestStream<S, B>)
where
    S: h3::quic::SendStream<B>,
    B: bytes::Buf,
{
    match stream.finish().await {
        Ok(()) => {}
        Err(h3::error::StreamError::RemoteTerminate { code, .. })
            if code == h3::error::Code::H3_NO_ERROR => {}
        Err(e) => panic!("finishing the request: {e:?}"),
    }
}
