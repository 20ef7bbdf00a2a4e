//! The request-head phase: the limits every request is held to whatever
//! protocol brought it (target length 414, field count and size 431,
//! declared body size 413), the rules of RFC 9112 and RFC 9110 on the
//! request target and `Host` (400), and the answers that come before any site
//! (ACME HTTP-01 tokens, so a redirect to HTTPS cannot hide them), and the
//! request's host as the later phases read it. Reads the head only; never
//! reads the body.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use weir_config::Limits;
use weir_http::body::Body;
use weir_http::response::error;

/// The answer to a request past `limits`, or whose target or `Host` break
/// the rules of RFC 9112 and RFC 9110, if it is.
pub(super) fn check(limits: &Limits, parts: &http::request::Parts) -> Option<Response<Body>> {
    if let Err(status) = target_and_host(parts) {
        return Some(closing(error(status)));
    }
    let target_len = parts.uri.path_and_query().map_or(0, |p| p.as_str().len());
    let fields = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().len(), v.len()));
    if let Some(status) = over_limits(limits, target_len, parts.headers.len(), fields) {
        return Some(closing(error(status)));
    }
    if super::content_length(&parts.headers).is_some_and(|n| n > limits.body) {
        return Some(closing(error(StatusCode::PAYLOAD_TOO_LARGE)));
    }
    None
}

/// The server's MUSTs about the request target and `Host`:
/// - RFC 9112 §3.2: 400 for an HTTP/1.1 request without `Host`, with more
///   than one, or with an invalid value (RFC 9110 §7.2: `uri-host [ ":" port ]`);
/// - RFC 9112 §3.2.3, §3.2.4: the authority form only with CONNECT, the
///   asterisk form only with OPTIONS, and CONNECT only with the authority form;
/// - RFC 9113 §8.3.1 (HTTP/2, and HTTP/3 alike): a `Host` naming another
///   authority than `:authority` makes the request malformed.
///
/// The absolute form's authority wins over `Host` (RFC 9112 §3.2.2):
/// [`absolute_form_host`] makes the field say the same.
fn target_and_host(parts: &http::request::Parts) -> Result<(), StatusCode> {
    use http::{Method, Version};
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(StatusCode::BAD_REQUEST);
    }
    if let Some(h) = host
        && !valid_host(h.as_bytes())
    {
        return Err(StatusCode::BAD_REQUEST);
    }
    let uri = &parts.uri;
    if parts.version <= Version::HTTP_11 {
        if parts.version == Version::HTTP_11 && host.is_none() {
            return Err(StatusCode::BAD_REQUEST);
        }
        let authority_form = uri.scheme().is_none() && uri.authority().is_some();
        let asterisk = uri.path() == "*";
        let connect = parts.method == Method::CONNECT;
        if connect != authority_form || (asterisk && parts.method != Method::OPTIONS) {
            return Err(StatusCode::BAD_REQUEST);
        }
    } else if let (Some(h), Some(a)) = (host, uri.authority())
        && !h.as_bytes().eq_ignore_ascii_case(a.as_str().as_bytes())
    {
        return Err(StatusCode::BAD_REQUEST);
    }
    Ok(())
}

/// `uri-host [ ":" port ]` (an empty value is allowed: a target without
/// authority): a reg-name, IPv4 or bracketed IPv6 literal, no user info.
fn valid_host(v: &[u8]) -> bool {
    if v.is_empty() {
        return true;
    }
    let Ok(s) = std::str::from_utf8(v) else {
        return false;
    };
    let (name, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(p) => ("x", Some(p)),
                None => return false,
            },
        }
    } else {
        match s.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        }
    };
    let name_ok = !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'.'
                        | b'_'
                        | b'~'
                        | b'%'
                        | b'!'
                        | b'$'
                        | b'&'
                        | b'\''
                        | b'('
                        | b')'
                        | b'*'
                        | b'+'
                        | b','
                        | b';'
                        | b'='
                )
        });
    let port_ok = port.is_none_or(|p| p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 5);
    name_ok && port_ok
}

/// For the absolute form, `Host` becomes the target's authority (RFC 9112
/// §3.2.2: the request-target's host wins), so the site chosen, the logs
/// and what a proxy forwards agree.
pub(super) fn absolute_form_host(parts: &mut http::request::Parts) {
    if parts.version <= http::Version::HTTP_11
        && parts.uri.scheme().is_some()
        && let Some(a) = parts.uri.authority()
        && let Ok(v) = HeaderValue::from_str(a.as_str())
    {
        parts.headers.insert(header::HOST, v);
    }
}

/// The key authorization for an ACME HTTP-01 token this request asks for.
pub(super) fn acme(
    challenges: &weir_tls::Challenges,
    parts: &http::request::Parts,
) -> Option<Response<Body>> {
    let token = parts
        .uri
        .path()
        .strip_prefix("/.well-known/acme-challenge/")?;
    let key_auth = challenges.http01(token)?;
    let mut r = Response::new(Body::full(Bytes::from(key_auth)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Some(r)
}

/// The limits on a request head hyper does not enforce for us: the
/// answer when the target (`target_len` bytes) or the `count` fields
/// (each a name's and a value's length) are past them.
fn over_limits(
    limits: &Limits,
    target_len: usize,
    count: usize,
    fields: impl Iterator<Item = (usize, usize)>,
) -> Option<StatusCode> {
    if target_len > limits.uri {
        return Some(StatusCode::URI_TOO_LONG);
    }
    let too_many = count > limits.headers;
    let size = target_len + fields.map(|(n, v)| n + v + 4).sum::<usize>();
    (too_many || size > limits.header_size).then_some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
}

fn closing(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The request's host without port: the URI authority (HTTP/2, absolute
/// form) or the Host header.
pub(super) fn request_host(parts: &http::request::Parts) -> &str {
    let raw = parts
        .uri
        .host()
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("");
    strip_port(raw)
}

pub(super) fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split(']').next().map_or(h, |s| &h[..s.len() + 1]);
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(raw: &str, version: http::Version, hosts: &[&str]) -> http::request::Parts {
        let method = if raw == "*" {
            "OPTIONS"
        } else if !raw.starts_with('/') && !raw.contains("://") && raw != "*" {
            "CONNECT"
        } else {
            "GET"
        };
        let mut b = http::Request::builder()
            .method(method)
            .uri(raw)
            .version(version);
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn rfc9112_3_2_an_http11_request_needs_exactly_one_valid_host() {
        let v11 = http::Version::HTTP_11;
        assert_eq!(target_and_host(&parts("/", v11, &["a.example"])), Ok(()));
        assert_eq!(
            target_and_host(&parts("/", v11, &["a.example:8080"])),
            Ok(())
        );
        assert_eq!(target_and_host(&parts("/", v11, &["[::1]:8080"])), Ok(()));
        assert_eq!(target_and_host(&parts("/", v11, &[""])), Ok(()));
        let bad = Err(StatusCode::BAD_REQUEST);
        assert_eq!(target_and_host(&parts("/", v11, &[])), bad);
        assert_eq!(target_and_host(&parts("/", v11, &["a", "b"])), bad);
        for h in [
            "a b", "user@a", "a/b", "a:80x", "[::1", "[zz]:1", "a:123456", ":80",
        ] {
            assert_eq!(target_and_host(&parts("/", v11, &[h])), bad, "{h}");
        }
        // HTTP/1.0 may leave it out.
        assert_eq!(
            target_and_host(&parts("/", http::Version::HTTP_10, &[])),
            Ok(())
        );
    }

    #[test]
    fn rfc9112_3_2_3_and_3_2_4_forms_go_with_their_methods() {
        let v11 = http::Version::HTTP_11;
        assert_eq!(target_and_host(&parts("*", v11, &["a"])), Ok(()));
        assert_eq!(
            target_and_host(&parts("a.example:443", v11, &["a.example:443"])),
            Ok(())
        );
        let mut get_star = parts("*", v11, &["a"]);
        get_star.method = http::Method::GET;
        assert_eq!(target_and_host(&get_star), Err(StatusCode::BAD_REQUEST));
        let mut get_authority = parts("a.example:443", v11, &["a"]);
        get_authority.method = http::Method::GET;
        assert_eq!(
            target_and_host(&get_authority),
            Err(StatusCode::BAD_REQUEST)
        );
        let mut connect_path = parts("/", v11, &["a"]);
        connect_path.method = http::Method::CONNECT;
        assert_eq!(target_and_host(&connect_path), Err(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn rfc9112_3_2_2_the_absolute_forms_authority_wins() {
        let mut p = parts("http://b.example/x", http::Version::HTTP_11, &["a.example"]);
        assert_eq!(target_and_host(&p), Ok(()));
        absolute_form_host(&mut p);
        assert_eq!(p.headers[header::HOST], "b.example");
        assert_eq!(request_host(&p), "b.example");
    }

    #[test]
    fn rfc9113_8_3_1_host_must_agree_with_authority() {
        let v2 = http::Version::HTTP_2;
        let p = parts("https://a.example/", v2, &["a.example"]);
        assert_eq!(target_and_host(&p), Ok(()));
        let p = parts("https://a.example/", v2, &["b.example"]);
        assert_eq!(target_and_host(&p), Err(StatusCode::BAD_REQUEST));
        assert_eq!(
            target_and_host(&parts("https://a.example/", v2, &[])),
            Ok(())
        );
    }
}
