//! Content types: the `Content-Type` header value for a file name, and the
//! default list of types worth compressing.
//!
//! Owns the charset rule (`; charset=utf-8` for textual types). Must never
//! look at file contents (no sniffing: a server that sniffs turns uploads
//! into XSS).

use http::HeaderValue;

const OCTET_STREAM: &str = "application/octet-stream";

/// True for types whose body is text, so a charset parameter applies.
fn is_textual(essence: &str) -> bool {
    let (ty, sub) = essence.split_once('/').unwrap_or((essence, ""));
    ty == "text"
        || matches!(
            sub,
            "javascript" | "ecmascript" | "x-javascript" | "json" | "xml" | "xhtml+xml"
        )
        || sub.ends_with("+json")
        || sub.ends_with("+xml")
}

/// The MIME essence (`type/subtype`, lower case) guessed from the extension.
pub fn essence_for(file_name: &str) -> String {
    match mime_guess::from_path(file_name).first() {
        Some(m) => m.essence_str().to_ascii_lowercase(),
        None => OCTET_STREAM.to_owned(),
    }
}

/// The full `Content-Type` header value for an essence.
pub fn content_type_header(essence: &str) -> HeaderValue {
    // Common types come from static strings so the value carries no
    // allocation; others are built once per cache miss.
    let stat = match essence {
        "text/html" => Some("text/html; charset=utf-8"),
        "text/css" => Some("text/css; charset=utf-8"),
        "text/plain" => Some("text/plain; charset=utf-8"),
        "text/javascript" => Some("text/javascript; charset=utf-8"),
        "application/javascript" => Some("application/javascript; charset=utf-8"),
        "application/json" => Some("application/json; charset=utf-8"),
        "image/svg+xml" => Some("image/svg+xml; charset=utf-8"),
        "image/png" => Some("image/png"),
        "image/jpeg" => Some("image/jpeg"),
        OCTET_STREAM => Some(OCTET_STREAM),
        _ => None,
    };
    if let Some(s) = stat {
        return HeaderValue::from_static(s);
    }
    let s = if is_textual(essence) {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    };
    HeaderValue::from_str(&s).unwrap_or(HeaderValue::from_static(OCTET_STREAM))
}

pub use weir_config::files::default_compressible_types;

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(name: &str) -> String {
        content_type_header(&essence_for(name))
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn content_types_get_charset_only_when_textual() {
        assert_eq!(ct("a.html"), "text/html; charset=utf-8");
        assert_eq!(ct("a.css"), "text/css; charset=utf-8");
        assert!(ct("a.js").ends_with("javascript; charset=utf-8"));
        assert_eq!(ct("a.json"), "application/json; charset=utf-8");
        assert_eq!(ct("a.svg"), "image/svg+xml; charset=utf-8");
        assert!(ct("a.xml").ends_with("xml; charset=utf-8"));
        assert_eq!(ct("a.png"), "image/png");
        assert_eq!(ct("a.wasm"), "application/wasm");
        assert_eq!(ct("a.unknownext"), "application/octet-stream");
        assert_eq!(ct("noext"), "application/octet-stream");
    }

    #[test]
    fn compressible_types_match_prefix_and_exact() {
        use weir_http::encoding::type_listed as matches_types;
        let t = default_compressible_types();
        assert!(matches_types("text/html", &t));
        assert!(matches_types("text/x-anything", &t));
        assert!(matches_types("application/json", &t));
        assert!(matches_types("image/svg+xml", &t));
        assert!(!matches_types("image/png", &t));
        assert!(!matches_types("application/octet-stream", &t));
    }
}
