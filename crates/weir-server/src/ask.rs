//! The HTTP client of on-demand TLS's `ask` check (`weir_tls::ondemand`):
//! weir-tls sits below the proxy, so the server hands it the proxy's
//! HTTP/1.1 client through [`weir_tls::ondemand::AskClient`].

use http::header::{self, HeaderMap, HeaderValue};

use weir_proxy::h1_client::one_shot;

/// `GET` over a connection of its own, through `one_shot`.
pub(crate) struct Ask;

impl weir_tls::ondemand::AskClient for Ask {
    fn status<'a>(&'a self, uri: &'a http::Uri) -> weir_tls::ondemand::AskFuture<'a> {
        Box::pin(status(uri))
    }
}

async fn status(uri: &http::Uri) -> Result<u16, String> {
    let host = uri.host().ok_or("no host")?;
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let host_field = HeaderValue::from_str(authority).map_err(|e| e.to_string())?;
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| e.to_string())?;
    let mut fields = HeaderMap::new();
    fields.insert(
        header::USER_AGENT,
        HeaderValue::from_static("weir on-demand TLS"),
    );
    fields.insert(header::CONNECTION, HeaderValue::from_static("close"));
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let (head, _) = one_shot::send(
        stream,
        &http::Method::GET,
        target,
        &host_field,
        &fields,
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(head.parts.status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use weir_tls::ondemand::AskClient;

    /// The check sends `GET` with the URL's path, query and authority, and
    /// hands back the status of the answer.
    #[tokio::test]
    async fn the_ask_check_gets_the_url_and_reads_its_status() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8(got).unwrap()
        });
        let uri: http::Uri = format!("http://127.0.0.1:{port}/check?domain=a.example")
            .parse()
            .unwrap();
        assert_eq!(Ask.status(&uri).await, Ok(403));
        assert_eq!(
            server.await.unwrap(),
            format!(
                "GET /check?domain=a.example HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
                 user-agent: weir on-demand TLS\r\nconnection: close\r\n\r\n"
            )
        );
    }
}
