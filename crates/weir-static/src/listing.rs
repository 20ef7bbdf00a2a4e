//! Directory listings (when `browse` is on): reading a directory and
//! rendering it as HTML or JSON.
//!
//! Owns escaping: every name is HTML-escaped in text and percent-encoded in
//! links, JSON goes through serde_json. Must never list hidden entries unless
//! asked to, never list symlinks that lead outside the root when symlinks are
//! not followed, and never be called on the async threads
//! ([`read_dir`] blocks).

use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use http::{HeaderMap, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::path::is_hidden_name;
use super::validators::unix_secs;

/// Characters left as they are in a link: RFC 3986 unreserved.
const LINK: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// One listed entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
    pub size: u64,
    pub modified: Option<SystemTime>,
}

/// Reads `dir` (blocking). Names that are not UTF-8 are skipped: they could
/// not be requested through [`super::path::normalize`] anyway.
pub fn read_dir(
    dir: &Path,
    serve_hidden: bool,
    follow_symlinks: bool,
    canonical_root: &Path,
) -> std::io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for de in std::fs::read_dir(dir)? {
        let Ok(de) = de else { continue };
        let Ok(name) = de.file_name().into_string() else {
            continue;
        };
        if !serve_hidden && is_hidden_name(&name) {
            continue;
        }
        let Ok(ft) = de.file_type() else { continue };
        let path = de.path();
        if ft.is_symlink() && !follow_symlinks {
            match std::fs::canonicalize(&path) {
                Ok(c) if c.starts_with(canonical_root) => {}
                _ => continue,
            }
        }
        // Follows symlinks, so a link to a directory lists as a directory.
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        if !md.is_dir() && !md.is_file() {
            continue;
        }
        out.push(Entry {
            name,
            is_dir: md.is_dir(),
            size: if md.is_dir() { 0 } else { md.len() },
            modified: md.modified().ok(),
        });
    }
    out.sort_by(|a, b| b.is_dir.cmp(&a.is_dir).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// True when the client's `Accept` rates `application/json` above HTML.
pub fn prefers_json(headers: &HeaderMap) -> bool {
    // The qvalue of the most specific media range matching each type.
    let mut json = (0u8, 0u16);
    let mut html = (0u8, 0u16);
    for v in headers.get_all(header::ACCEPT) {
        let Ok(v) = v.to_str() else { continue };
        for item in v.split(',') {
            let mut parts = item.split(';');
            let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut q = 1000u16;
            for p in parts {
                if let Some((k, val)) = p.split_once('=')
                    && k.trim().eq_ignore_ascii_case("q")
                {
                    q = val
                        .trim()
                        .parse::<f32>()
                        .map_or(0, |f| (f.clamp(0.0, 1.0) * 1000.0) as u16);
                }
            }
            let spec = |ty: &str| -> u8 {
                let (t, _) = ty.split_once('/').unwrap_or((ty, ""));
                if range == ty {
                    3
                } else if range.strip_suffix("/*") == Some(t) {
                    2
                } else if range == "*/*" {
                    1
                } else {
                    0
                }
            };
            for (ty, slot) in [("application/json", &mut json), ("text/html", &mut html)] {
                let s = spec(ty);
                if s > slot.0 {
                    *slot = (s, q);
                }
            }
        }
    }
    json.1 > 0 && json.1 > html.1
}

fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// RFC 3339 UTC timestamp (`2024-05-01T12:00:00Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = unix_secs(t);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The HTML page for `display_path` (the decoded request path).
pub fn html(display_path: &str, entries: &[Entry], is_root: bool) -> String {
    let mut s = String::with_capacity(512 + entries.len() * 160);
    s.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    escape_html(display_path, &mut s);
    s.push_str(
        "</title><style>body{font-family:sans-serif}td{padding:0 1em}</style></head>\n<body><h1>Index of ",
    );
    escape_html(display_path, &mut s);
    s.push_str("</h1>\n<table>\n<tr><th>Name</th><th>Size</th><th>Modified</th></tr>\n");
    if !is_root {
        s.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for e in entries {
        s.push_str("<tr><td><a href=\"./");
        let _ = write!(s, "{}", utf8_percent_encode(&e.name, LINK));
        if e.is_dir {
            s.push('/');
        }
        s.push_str("\">");
        escape_html(&e.name, &mut s);
        if e.is_dir {
            s.push('/');
        }
        s.push_str("</a></td><td>");
        if !e.is_dir {
            s.push_str(&human_size(e.size));
        }
        s.push_str("</td><td>");
        if let Some(m) = e.modified {
            s.push_str(&httpdate::fmt_http_date(m));
        }
        s.push_str("</td></tr>\n");
    }
    s.push_str("</table>\n</body></html>\n");
    s
}

/// The JSON array `[{name, is_dir, size, modified}]`.
pub fn json(entries: &[Entry]) -> String {
    let v: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.name,
                "is_dir": e.is_dir,
                "size": e.size,
                "modified": e.modified.map(rfc3339),
            })
        })
        .collect();
    serde_json::Value::Array(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::{Duration, UNIX_EPOCH};

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accept_prefers_json_only_when_rated_higher() {
        assert!(prefers_json(&accept("application/json")));
        assert!(prefers_json(&accept("text/html;q=0.5, application/json")));
        assert!(!prefers_json(&accept(
            "text/html,application/xhtml+xml,*/*;q=0.8"
        )));
        assert!(!prefers_json(&accept("*/*")));
        assert!(!prefers_json(&HeaderMap::new()));
        assert!(!prefers_json(&accept("application/json;q=0")));
    }

    #[test]
    fn rfc3339_formats_known_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_709_210_096)),
            "2024-02-29T12:34:56Z"
        );
    }

    #[test]
    fn html_escapes_names_and_encodes_links() {
        let e = Entry {
            name: "<b>&x y\".txt".into(),
            is_dir: false,
            size: 2048,
            modified: None,
        };
        let page = html("/d/", &[e], false);
        assert!(page.contains("&lt;b&gt;&amp;x y&quot;.txt"));
        assert!(page.contains("href=\"./%3Cb%3E%26x%20y%22.txt\""));
        assert!(page.contains("2.0 KiB"));
        assert!(!page.contains("<b>"));
    }
}
