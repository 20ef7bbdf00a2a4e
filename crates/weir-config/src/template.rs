//! Templates: header values, redirects and rewrites with placeholders
//! (`{path}`, `{host}`, `{1}`…), parsed once at config load and filled per
//! request from a [`RequestView`]. Owns no config keys; must never
//! allocate when a template has no placeholder.

use std::net::IpAddr;

use http::HeaderValue;

/// What a request looks like to the matchers and templates.
pub struct RequestView<'a> {
    pub parts: &'a http::request::Parts,
    pub host: &'a str,
    pub client: IpAddr,
    pub tls: bool,
}

/// Text with placeholders, filled per request: `{path}`, `{query}`,
/// `{?query}` (`?` and the query when there is one), `{uri}` (path and
/// query), `{host}`, `{http_host}`, `{scheme}`, `{method}`, `{client_ip}`, and `{1}`...
/// `{9}` for the groups of a route's `path_regex`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
    /// The value when there is no placeholder, made once.
    fixed: Option<HeaderValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Path,
    Query,
    QueryMark,
    Uri,
    Host,
    HttpHost,
    Scheme,
    Method,
    ClientIp,
    Capture(usize),
}

impl Template {
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find('{') {
            if i > 0 {
                pieces.push(Piece::Lit(rest[..i].to_string()));
            }
            let Some(end) = rest[i..].find('}') else {
                return Err(format!("`{s}`: `{{` without a closing `}}`"));
            };
            let name = &rest[i + 1..i + end];
            pieces.push(match name {
                "path" => Piece::Path,
                "query" => Piece::Query,
                "?query" => Piece::QueryMark,
                "uri" => Piece::Uri,
                "host" => Piece::Host,
                "http_host" => Piece::HttpHost,
                "scheme" => Piece::Scheme,
                "method" => Piece::Method,
                "client_ip" | "remote_addr" => Piece::ClientIp,
                n if n.len() == 1 && n.as_bytes()[0].is_ascii_digit() => {
                    Piece::Capture((n.as_bytes()[0] - b'0') as usize)
                }
                n => {
                    return Err(format!(
                        "`{s}`: unknown placeholder `{{{n}}}`; use {{path}}, {{query}}, {{?query}}, {{uri}}, {{host}}, {{http_host}}, {{scheme}}, {{method}}, {{client_ip}} or {{1}}..{{9}}"
                    ));
                }
            });
            rest = &rest[i + end + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Lit(rest.to_string()));
        }
        let fixed = match pieces.as_slice() {
            [] => Some(HeaderValue::from_static("")),
            [Piece::Lit(l)] => Some(
                HeaderValue::from_str(l)
                    .map_err(|_| format!("`{s}` is not a valid header value"))?,
            ),
            _ => None,
        };
        Ok(Template { pieces, fixed })
    }

    /// The value when it has no placeholder.
    pub fn fixed(&self) -> Option<&HeaderValue> {
        self.fixed.as_ref()
    }

    /// Whether it uses a `{1}`.. group.
    pub fn max_capture(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Capture(n) => *n,
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }

    /// Writes the text for `r` to `out`; `captures[n]` is group `n`.
    pub fn render(&self, r: &RequestView<'_>, captures: &[&str], out: &mut String) {
        use std::fmt::Write;
        let p = r.parts;
        for piece in &self.pieces {
            match piece {
                Piece::Lit(l) => out.push_str(l),
                Piece::Path => out.push_str(p.uri.path()),
                Piece::Query => out.push_str(p.uri.query().unwrap_or("")),
                Piece::QueryMark => {
                    if let Some(q) = p.uri.query().filter(|q| !q.is_empty()) {
                        out.push('?');
                        out.push_str(q);
                    }
                }
                Piece::Uri => out.push_str(p.uri.path_and_query().map_or("/", |pq| pq.as_str())),
                Piece::Host => out.push_str(r.host),
                Piece::HttpHost => out.push_str(
                    p.headers
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .or_else(|| p.uri.authority().map(|a| a.as_str()))
                        .unwrap_or(r.host),
                ),
                Piece::Scheme => out.push_str(if r.tls { "https" } else { "http" }),
                Piece::Method => out.push_str(p.method.as_str()),
                Piece::ClientIp => {
                    let _ = write!(out, "{}", r.client);
                }
                Piece::Capture(n) => out.push_str(captures.get(*n).copied().unwrap_or("")),
            }
        }
    }
}
