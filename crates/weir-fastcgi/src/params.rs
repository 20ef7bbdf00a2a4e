//! The CGI/1.1 variables (RFC 3875 §4.1) of one request, as PHP
//! applications expect them behind nginx's `fastcgi_params` or Caddy's
//! `php_fastcgi`: the script's names, the request's line and fields
//! (`HTTP_*`), the connection's addresses, then the config's `env`.
//! Pure: never touches the file system.

use std::net::IpAddr;
use std::path::Path;

use http::header;
use weir_http::conn::ConnInfo;

/// A name and a value.
pub type Param = (Vec<u8>, Vec<u8>);

/// What the script resolution found for the request.
pub struct Script<'a> {
    pub script_name: &'a str,
    pub path_info: &'a str,
    pub filename: &'a Path,
    pub root: &'a Path,
}

/// Every variable for the request.
pub fn cgi_params(
    parts: &http::request::Parts,
    s: &Script<'_>,
    conn: &ConnInfo,
    client: IpAddr,
    env: &[(String, String)],
) -> Vec<Param> {
    let mut out: Vec<Param> = Vec::with_capacity(32 + parts.headers.len());
    let mut put = |k: &str, v: &[u8]| out.push((k.as_bytes().to_vec(), v.to_vec()));
    let uri = &parts.uri;
    let query = uri.query().unwrap_or("");
    let request_uri = uri.path_and_query().map_or("/", |p| p.as_str());
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or(uri.authority().map(|a| a.as_str()))
        .unwrap_or("");
    let server_name = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or(host)
    } else {
        host.split(':').next().unwrap_or(host)
    };
    let root = s.root.as_os_str().as_encoded_bytes();
    put("GATEWAY_INTERFACE", b"CGI/1.1");
    put(
        "SERVER_SOFTWARE",
        concat!("weir/", env!("CARGO_PKG_VERSION")).as_bytes(),
    );
    put("SERVER_PROTOCOL", version(parts.version).as_bytes());
    put("REQUEST_METHOD", parts.method.as_str().as_bytes());
    put("REQUEST_URI", request_uri.as_bytes());
    put("QUERY_STRING", query.as_bytes());
    put("DOCUMENT_ROOT", root);
    put("SCRIPT_FILENAME", s.filename.as_os_str().as_encoded_bytes());
    put("SCRIPT_NAME", s.script_name.as_bytes());
    let document_uri = format!("{}{}", s.script_name, s.path_info);
    put("DOCUMENT_URI", document_uri.as_bytes());
    put("PATH_INFO", s.path_info.as_bytes());
    if !s.path_info.is_empty() {
        let mut translated = root.to_vec();
        translated.extend_from_slice(s.path_info.as_bytes());
        put("PATH_TRANSLATED", &translated);
    }
    put("REMOTE_ADDR", client.to_string().as_bytes());
    put("REMOTE_PORT", conn.peer.port().to_string().as_bytes());
    put("SERVER_ADDR", conn.local.ip().to_string().as_bytes());
    put("SERVER_PORT", conn.local.port().to_string().as_bytes());
    put("SERVER_NAME", server_name.as_bytes());
    put("REQUEST_SCHEME", if conn.tls { b"https" } else { b"http" });
    if conn.tls {
        put("HTTPS", b"on");
    }
    // php-cgi refuses to run without it when cgi.force_redirect is on.
    put("REDIRECT_STATUS", b"200");
    if let Some(v) = parts.headers.get(header::CONTENT_TYPE) {
        put("CONTENT_TYPE", v.as_bytes());
    }
    if let Some(v) = parts.headers.get(header::CONTENT_LENGTH) {
        put("CONTENT_LENGTH", v.as_bytes());
    } else if !matches!(parts.method, http::Method::GET | http::Method::HEAD) {
        put("CONTENT_LENGTH", b"");
    }
    for name in parts.headers.keys() {
        if name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH {
            continue;
        }
        // httpoxy (CVE-2016-5385): `Proxy:` would become HTTP_PROXY, which
        // many HTTP clients read as their outgoing proxy.
        if name.as_str() == "proxy" {
            continue;
        }
        let mut k = Vec::with_capacity(5 + name.as_str().len());
        k.extend_from_slice(b"HTTP_");
        k.extend(name.as_str().bytes().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        let sep: &[u8] = if name == header::COOKIE { b"; " } else { b", " };
        let mut v = Vec::new();
        for (i, val) in parts.headers.get_all(name).iter().enumerate() {
            if i > 0 {
                v.extend_from_slice(sep);
            }
            v.extend_from_slice(val.as_bytes());
        }
        out.push((k, v));
    }
    for (k, v) in env {
        out.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    out
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(params: &[Param], k: &str) -> Option<String> {
        params
            .iter()
            .find(|(n, _)| n == k.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    #[test]
    fn a_request_becomes_the_variables_php_reads() {
        let req = http::Request::builder()
            .method("POST")
            .uri("/index.php/a/b?x=1&y=2")
            .header("Host", "shop.test:8080")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Content-Length", "3")
            .header("Cookie", "a=1")
            .header("Cookie", "b=2")
            .header("X-Forwarded-For", "10.0.0.1")
            .header("Proxy", "http://evil.test")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let conn = ConnInfo {
            peer: "127.0.0.9:40000".parse().unwrap(),
            local: "127.0.0.1:8080".parse().unwrap(),
            tls: true,
            tls_info: None,
            worker: weir_http::worker::Worker::new(0),
        };
        let root = Path::new("/srv/shop");
        let p = cgi_params(
            &parts,
            &Script {
                script_name: "/index.php",
                path_info: "/a/b",
                filename: Path::new("/srv/shop/index.php"),
                root,
            },
            &conn,
            "127.0.0.9".parse().unwrap(),
            &[("APP_ENV".into(), "prod".into())],
        );
        let want = [
            ("SCRIPT_FILENAME", "/srv/shop/index.php"),
            ("SCRIPT_NAME", "/index.php"),
            ("PATH_INFO", "/a/b"),
            ("PATH_TRANSLATED", "/srv/shop/a/b"),
            ("DOCUMENT_ROOT", "/srv/shop"),
            ("DOCUMENT_URI", "/index.php/a/b"),
            ("REQUEST_URI", "/index.php/a/b?x=1&y=2"),
            ("QUERY_STRING", "x=1&y=2"),
            ("REQUEST_METHOD", "POST"),
            ("CONTENT_TYPE", "application/x-www-form-urlencoded"),
            ("CONTENT_LENGTH", "3"),
            ("HTTPS", "on"),
            ("REQUEST_SCHEME", "https"),
            ("REMOTE_ADDR", "127.0.0.9"),
            ("REMOTE_PORT", "40000"),
            ("SERVER_ADDR", "127.0.0.1"),
            ("SERVER_PORT", "8080"),
            ("SERVER_NAME", "shop.test"),
            ("SERVER_PROTOCOL", "HTTP/1.1"),
            ("GATEWAY_INTERFACE", "CGI/1.1"),
            ("HTTP_HOST", "shop.test:8080"),
            ("HTTP_COOKIE", "a=1; b=2"),
            ("HTTP_X_FORWARDED_FOR", "10.0.0.1"),
            ("APP_ENV", "prod"),
            ("REDIRECT_STATUS", "200"),
        ];
        for (k, v) in want {
            assert_eq!(get(&p, k).as_deref(), Some(v), "{k}");
        }
        assert_eq!(get(&p, "HTTP_PROXY"), None, "httpoxy");
        assert_eq!(get(&p, "HTTP_CONTENT_TYPE"), None);
    }
}
