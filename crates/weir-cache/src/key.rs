//! Cache keys: the primary key (scheme, host, path and query as the policy
//! shapes it) that names a URL's entry, and the variant a request selects
//! among that entry's stored responses (the fields its `Vary` names, with
//! `Accept-Encoding` normalised, and the policy's extra fields and cookies).
//!
//! Only request data the key names can select a stored response: fields
//! outside it (`X-Forwarded-Host` and the like) never reach the origin on
//! a shared fetch either (see [`crate::fetch::upstream_request`]).

use http::header::{self, HeaderMap, HeaderName};
use http::request::Parts;
use weir_config::cache::{CachePolicy, QueryKey};

/// The primary key of a request: `scheme://host[:port]/path?query`.
pub fn primary(parts: &Parts, tls: bool, policy: &CachePolicy) -> String {
    let mut k = String::new();
    primary_into(&mut k, parts, tls, policy);
    k
}

/// [`primary`], written into `k` (a buffer the caller reuses).
pub fn primary_into(k: &mut String, parts: &Parts, tls: bool, policy: &CachePolicy) {
    let scheme = if tls { "https://" } else { "http://" };
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("");
    let host = host.trim_end_matches(if tls { ":443" } else { ":80" });
    k.push_str(scheme);
    let at = k.len();
    k.push_str(host);
    k[at..].make_ascii_lowercase();
    k.push_str(parts.uri.path());
    if let Some(q) = parts.uri.query() {
        push_query(k, q, policy);
    }
}

fn ignored(param: &str, policy: &CachePolicy) -> bool {
    let name = param.split('=').next().unwrap_or("");
    policy
        .ignore_params
        .iter()
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
}

fn push_query(k: &mut String, q: &str, policy: &CachePolicy) {
    match policy.query {
        QueryKey::Ignore => {}
        QueryKey::Keep if policy.ignore_params.is_empty() => {
            k.push('?');
            k.push_str(q);
        }
        mode => {
            let mut params: Vec<&str> = q
                .split('&')
                .filter(|p| !p.is_empty() && !ignored(p, policy))
                .collect();
            if mode == QueryKey::Sort {
                params.sort_unstable();
            }
            if !params.is_empty() {
                k.push('?');
                k.push_str(&params.join("&"));
            }
        }
    }
}

/// The coding a request's `Accept-Encoding` selects (`""`: identity), by
/// the same negotiation weir's own compression uses. The cache keys on
/// this and sends only this upstream, so the many ways browsers spell the
/// field (`gzip, br`, `br, gzip`, with or without qvalues) make at most four
/// variants.
pub fn accept_encoding(req: &HeaderMap) -> &'static str {
    weir_http::encoding::negotiate(req, weir_http::encoding::Encoding::ALL.into_iter())
        .map_or("", |e| e.token())
}

/// A request's value for one varying field, normalised so that spellings
/// that mean the same select the same stored response.
pub fn field_value(req: &HeaderMap, name: &HeaderName) -> String {
    if name == header::ACCEPT_ENCODING {
        return accept_encoding(req).to_string();
    }
    let mut out = String::new();
    for v in req.get_all(name) {
        for part in String::from_utf8_lossy(v.as_bytes()).split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(part);
        }
    }
    out
}

/// The fields a response's `Vary` names, lower-case, in order, once each.
pub fn vary_names(resp: &HeaderMap) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = Vec::new();
    for v in resp.get_all(header::VARY) {
        let Ok(s) = v.to_str() else { continue };
        for f in s.split(',') {
            if let Ok(n) = HeaderName::from_bytes(f.trim().as_bytes())
                && !out.contains(&n)
            {
                out.push(n);
            }
        }
    }
    out
}

/// What a request selects among an entry's responses besides `Vary`: the
/// policy's extra fields and cookies (empty when it has none).
pub fn policy_extra(req: &HeaderMap, policy: &CachePolicy) -> String {
    if policy.key_headers.is_empty() && policy.key_cookies.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for h in &policy.key_headers {
        out.push_str(h.as_str());
        out.push('=');
        out.push_str(&field_value(req, h));
        out.push('\n');
    }
    for c in &policy.key_cookies {
        out.push_str("cookie:");
        out.push_str(c);
        out.push('=');
        if let Some(v) = cookie(req, c) {
            out.push_str(v);
        }
        out.push('\n');
    }
    out
}

fn cookie<'a>(req: &'a HeaderMap, name: &str) -> Option<&'a str> {
    req.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == name).then(|| v.trim())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn scheme_host_and_target_make_the_key() {
        let p = CachePolicy::default();
        let r = parts("/a?x=1", &[("host", "Example.COM:80")]);
        assert_eq!(primary(&r, false, &p), "http://example.com/a?x=1");
        assert_eq!(primary(&r, true, &p), "https://example.com:80/a?x=1");
        let r = parts("https://h.test/p", &[("host", "other")]);
        assert_eq!(primary(&r, true, &p), "https://h.test/p");
    }

    #[test]
    fn forwarding_fields_do_not_change_the_key() {
        let p = CachePolicy::default();
        let a = parts("/a", &[("host", "h"), ("x-forwarded-host", "evil")]);
        let b = parts("/a", &[("host", "h")]);
        assert_eq!(primary(&a, false, &p), primary(&b, false, &p));
    }

    #[test]
    fn query_kept_sorted_or_ignored() {
        let r = parts("/a?b=2&utm_source=x&a=1", &[("host", "h")]);
        let mut p = CachePolicy::default();
        assert_eq!(primary(&r, false, &p), "http://h/a?b=2&utm_source=x&a=1");
        p.ignore_params = vec!["utm_*".into()];
        assert_eq!(primary(&r, false, &p), "http://h/a?b=2&a=1");
        p.query = QueryKey::Sort;
        assert_eq!(primary(&r, false, &p), "http://h/a?a=1&b=2");
        p.query = QueryKey::Ignore;
        assert_eq!(primary(&r, false, &p), "http://h/a");
    }

    #[test]
    fn accept_encoding_is_normalised() {
        let ae = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
            accept_encoding(&h)
        };
        assert_eq!(ae("gzip, deflate, br"), "br");
        assert_eq!(ae("gzip;q=1.0, identity; q=0.5, *;q=0"), "gzip");
        assert_eq!(ae("br;q=0, gzip"), "gzip");
        assert_eq!(ae("deflate"), "");
        assert_eq!(ae("br, gzip"), ae("gzip, br"));
        assert_eq!(ae("gzip, br;q=0.5"), "gzip");
        assert_eq!(accept_encoding(&HeaderMap::new()), "");
    }

    #[test]
    fn extra_fields_and_cookies() {
        let p = CachePolicy {
            key_headers: vec![HeaderName::from_static("x-lang")],
            key_cookies: vec!["theme".into()],
            ..Default::default()
        };
        let r = parts("/", &[("x-lang", "de"), ("cookie", "a=1; theme=dark")]);
        assert_eq!(
            policy_extra(&r.headers, &p),
            "x-lang=de\ncookie:theme=dark\n"
        );
    }

    #[test]
    fn vary_names_are_listed_once() {
        let mut h = HeaderMap::new();
        h.append(header::VARY, "Accept-Encoding, accept".parse().unwrap());
        h.append(header::VARY, "accept-encoding".parse().unwrap());
        assert_eq!(vary_names(&h), [header::ACCEPT_ENCODING, header::ACCEPT]);
    }
}
