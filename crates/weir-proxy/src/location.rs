//! `rewrite_location`: the upstream's `Location` and `Content-Location`
//! with a leading upstream URL replaced by the client's (nginx's
//! `proxy_redirect`, Apache's `ProxyPassReverse`). It owns these two fields
//! of a proxied answer and must never touch any other.

use std::net::IpAddr;

use http::HeaderValue;
use http::header::{CONTENT_LOCATION, HeaderMap, LOCATION};

use weir_config::proxy::LocationRewrite;
use weir_config::traffic::RequestView;

/// Rewrites `headers` for the request `parts`: in each field, the first
/// rule whose `from` starts the value (ASCII case aside) replaces it.
pub(crate) fn rewrite(
    rules: &[LocationRewrite],
    headers: &mut HeaderMap,
    parts: &http::request::Parts,
    tls: bool,
    client: IpAddr,
) {
    for name in [LOCATION, CONTENT_LOCATION] {
        let Some(v) = headers.get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        let Some((rule, rest)) = rules.iter().find_map(|r| {
            let head = v.get(..r.from.len())?;
            head.eq_ignore_ascii_case(&r.from)
                .then(|| (r, &v[r.from.len()..]))
        }) else {
            continue;
        };
        let host = parts
            .uri
            .host()
            .or_else(|| parts.headers.get(http::header::HOST)?.to_str().ok())
            .map_or("", strip_port);
        let view = RequestView {
            parts,
            host,
            client,
            tls,
        };
        let mut out = String::with_capacity(v.len() + 16);
        rule.to.render(&view, &[], &mut out);
        out.push_str(rest);
        if let Ok(v) = HeaderValue::from_str(&out) {
            headers.insert(name, v);
        }
    }
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split_once(']').map_or(h, |(a, _)| &a[1..]);
    }
    h.rsplit_once(':').map_or(h, |(a, _)| a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_config::traffic::Template;

    fn rules(l: &[(&str, &str)]) -> Vec<LocationRewrite> {
        l.iter()
            .map(|(f, t)| LocationRewrite {
                from: f.to_string(),
                to: Template::parse(t).unwrap(),
            })
            .collect()
    }

    fn req(host: &str) -> http::request::Parts {
        http::Request::get("/app/x")
            .header("host", host)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn run(r: &[LocationRewrite], loc: &str, host: &str, tls: bool) -> String {
        let mut h = HeaderMap::new();
        h.insert(LOCATION, loc.parse().unwrap());
        h.insert(CONTENT_LOCATION, loc.parse().unwrap());
        h.insert("link", loc.parse().unwrap());
        rewrite(r, &mut h, &req(host), tls, "127.0.0.1".parse().unwrap());
        assert_eq!(h[CONTENT_LOCATION], h[LOCATION]);
        assert_eq!(h["link"], loc, "no other field is touched");
        h[LOCATION].to_str().unwrap().to_string()
    }

    #[test]
    fn a_leading_upstream_url_becomes_the_clients() {
        let r = rules(&[
            ("http://10.0.0.2:8080/", "{scheme}://{http_host}/app/"),
            ("http://10.0.0.3/", "/other/"),
        ]);
        assert_eq!(
            run(
                &r,
                "http://10.0.0.2:8080/login?next=/",
                "example.com:8443",
                true
            ),
            "https://example.com:8443/app/login?next=/"
        );
        assert_eq!(
            run(&r, "HTTP://10.0.0.2:8080/x", "example.com", false),
            "http://example.com/app/x"
        );
        assert_eq!(run(&r, "http://10.0.0.3/a", "h", false), "/other/a");
        // Not at the start, or another upstream: as the upstream wrote it.
        assert_eq!(run(&r, "/login", "h", false), "/login");
        assert_eq!(
            run(&r, "http://elsewhere/?u=http://10.0.0.2:8080/", "h", false),
            "http://elsewhere/?u=http://10.0.0.2:8080/"
        );
        assert_eq!(
            run(&r, "http://10.0.0.2:80", "h", false),
            "http://10.0.0.2:80"
        );
    }

    #[test]
    fn host_placeholder_has_no_port() {
        let r = rules(&[("http://up/", "//{host}/")]);
        assert_eq!(
            run(&r, "http://up/a", "example.com:81", false),
            "//example.com/a"
        );
        assert_eq!(run(&r, "http://up/a", "[::1]:81", false), "//::1/a");
    }
}
